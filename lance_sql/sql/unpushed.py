"""Queries whose filters DataFusion cannot hand to a Lance scan run with them above it.

DataFusion's simplifier folds a comparison with NULL (``s = NULL``, ``s = $1`` bound to
None, ``x IN (NULL)``) to the constant ``NULL`` and keeps it among the filters it pushes
into the table scan. datafusion-python then builds one pyarrow expression from the
pushed filters, in Rust, combining them with ``operator.and_``: a constant first makes it
``BooleanScalar & Expression``, which pyarrow has no operator for (two constants meet as
scalars, whose ``&`` is a bitwise kernel without booleans). The physical plan then
cannot be built, and no Python hook runs in between.

So on exactly that failure — while the plan is built, before any scan has read a row —
the session plans the same logical plan once more in a second DataFusion context, a
twin of its own (same configuration) whose optimizer lacks the rule that pushes filters
into scans. There every filter runs in DataFusion's ``FilterExec`` above the scan, with
SQL's NULL logic, as it would over an in-memory table. The session's own context is
never reconfigured (a ``SET`` would race the other threads planning on it), so every
query that plans today still plans and runs exactly as it did; only the failing ones
pay for scanning without their filters.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Iterable
from typing import Any

from datafusion import SessionConfig, SessionContext

from lance_sql.errors import QueryError

# the optimizer rule that moves filters into table scans (DataFusion 55's name)
PUSH_DOWN_FILTER = "push_down_filter"


class UnpushedPlanner:
    """The session's twin context without filter pushdown, made on first use, and the
    datasets of the session's recent queries by query id (weakly), so that a re-planned
    query's scans get the LIMIT hints of the plan that runs."""

    def __init__(self, config: SessionConfig) -> None:
        self._config = config
        self._ctx: SessionContext | None = None
        self._lock = threading.Lock()
        self._datasets: weakref.WeakValueDictionary[str, Any] = weakref.WeakValueDictionary()

    def context(self) -> SessionContext:
        """The twin context (thread-safe; made once)."""
        with self._lock:
            if self._ctx is None:
                ctx = SessionContext(self._config)
                if not ctx.remove_optimizer_rule(PUSH_DOWN_FILTER):
                    raise QueryError(
                        f"DataFusion has no optimizer rule {PUSH_DOWN_FILTER!r}: a filter "
                        "with a constant operand cannot be kept out of the Lance scan")
                self._ctx = ctx
            return self._ctx

    def track(self, datasets: Iterable[Any]) -> None:
        """Remember a planned query's table datasets (those with a query id)."""
        with self._lock:
            for ds in datasets:
                if getattr(ds, "query_id", None):
                    self._datasets[ds.query_id] = ds

    def dataset(self, query_id: str) -> Any:
        """The dataset planned under ``query_id`` (None: gone or never tracked)."""
        with self._lock:
            return self._datasets.get(query_id)
