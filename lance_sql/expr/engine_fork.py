"""SQL in a process forked after its parent ran SQL: refused at once, not left to hang.

DataFusion runs queries on a runtime of worker threads created the first time a query
runs. ``fork()`` copies the process without those threads; the child inherits a runtime
that believes it has workers, and a query there waits for them forever (a known limit
of Rust async runtimes). Python scans, which use no such runtime, work in the child.
"""

from __future__ import annotations

import os

from lance_sql.errors import QueryError

__all__ = ["check_engine_usable", "engine_started"]

# the process whose SQL started DataFusion's runtime (None: no query yet)
_started_in: int | None = None


def engine_started() -> None:
    """Notes that this process runs SQL (its runtime's threads now exist here)."""
    global _started_in
    if _started_in is None:
        _started_in = os.getpid()


def check_engine_usable() -> None:
    """QueryError when this process was forked from one whose runtime had started."""
    started = _started_in
    if started is not None and started != os.getpid():
        raise QueryError(
            f"this process was forked from process {started} after that one ran SQL: "
            "DataFusion's worker threads do not survive fork(), and a query here would "
            "wait for them forever. Start worker processes with multiprocessing's "
            "'spawn' or 'forkserver' method (multiprocessing.get_context('spawn')), or "
            "fork before the first query; Python scans (ds.to_table(), scanner) work here")
