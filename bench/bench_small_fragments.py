"""Scans of a table in many small fragments: lance_sql on one thread vs side by side, and
pylance, in one process.

A table of ``--rows`` rows (int64 ``id``, float64 ``x``, int32 ``cat``, string ``s``,
16 x float32 ``vec``) is written by lance_sql in fragments of ``--fragment-rows`` rows
(one append each; ``--sizes`` takes a comma list of fragment sizes, one table each).
Timed, interleaved round by round after an untimed warm-up, wall medians (``--cpu``:
medians of the process's CPU time, steadier on a shared machine):

* Python: ``to_table()``, ``to_table(columns=["id"])``, ``to_table(filter="cat = 7")``;
* SQL: ``SELECT *``, ``SELECT id``, ``SELECT count(*) ... WHERE cat = 7``;

each as lance_sql reads it (small reads on one thread, see
``lance_sql/table/read/side_by_side.py``), as it did before that rule (every read side by
side: the threshold set to 0), and through pylance (Python cases only: it has no SQL).

    PYTHONPATH=. python bench/bench_small_fragments.py [--sizes 1000,10000,100000] [--cpu]
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pyarrow as pa

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from timing import interleaved_medians

import lance_sql
from lance_sql.table.read import side_by_side

PYTHON_CASES: dict[str, dict[str, object]] = {
    "to_table()": {},
    "to_table(columns=[id])": {"columns": ["id"]},
    "to_table(filter=cat = 7)": {"filter": "cat = 7"},
}
SQL_CASES = {
    "SELECT *": "SELECT * FROM t",
    "SELECT id": "SELECT id FROM t",
    "count(*) WHERE cat = 7": "SELECT count(*) FROM t WHERE cat = 7",
}


def _rows(start: int, n: int, rng: np.random.Generator) -> pa.Table:
    ids = np.arange(start, start + n)
    vec = pa.FixedSizeListArray.from_arrays(
        pa.array(rng.random(n * 16).astype(np.float32)), 16)
    return pa.table({"id": ids, "x": rng.random(n), "cat": (ids % 1000).astype(np.int32),
                     "s": pa.array(np.char.add("s", ids.astype(str))), "vec": vec})


def _build(path: Path, rows: int, per: int) -> None:
    rng = np.random.default_rng(0)
    for start in range(0, rows, per):
        lance_sql.write_dataset(_rows(start, min(per, rows - start), rng), path,
                                mode="create" if start == 0 else "append")


def _with_threshold(value: int, fn: Callable[[], object]) -> Callable[[], object]:
    def run() -> object:
        saved = side_by_side.SIDE_BY_SIDE_MIN_BYTES
        side_by_side.SIDE_BY_SIDE_MIN_BYTES = value
        try:
            return fn()
        finally:
            side_by_side.SIDE_BY_SIDE_MIN_BYTES = saved
    return run


def measure(root: Path, per: int, repeat: int, with_pylance: bool, cpu: bool = False) -> None:
    path = root / "t.lance"
    ours = lance_sql.dataset(path)
    session = lance_sql.connect(root)
    theirs = None
    if with_pylance:
        import lance

        theirs = lance.dataset(str(path))
    ops: dict[str, tuple[Callable[[], object], None]] = {}
    for name, kwargs in PYTHON_CASES.items():
        def python(kw: dict[str, object] = kwargs) -> object:
            return ours.to_table(**kw)  # type: ignore[arg-type]
        ops[f"{name} | now"] = (python, None)
        ops[f"{name} | side by side"] = (_with_threshold(0, python), None)
        if theirs is not None:
            ops[f"{name} | pylance"] = (
                lambda kw=kwargs: theirs.to_table(**kw), None)  # type: ignore[misc]
    for name, query in SQL_CASES.items():
        def sql(q: str = query) -> object:
            return session.sql(q).to_arrow_table()
        ops[f"SQL {name} | now"] = (sql, None)
        ops[f"SQL {name} | side by side"] = (_with_threshold(0, sql), None)
    times = interleaved_medians(ops, repeat, time.process_time if cpu else time.perf_counter)
    fragments = len(ours.manifest.fragments)
    print(f"\n{fragments} fragments of {per} rows ({'CPU' if cpu else 'wall'} medians)")
    for name in [*PYTHON_CASES, *(f"SQL {n}" for n in SQL_CASES)]:
        now, before = times[f"{name} | now"], times[f"{name} | side by side"]
        line = (f"  {name:28s} now {now * 1e3:8.1f} ms   side by side {before * 1e3:8.1f} ms"
                f"   ratio {now / before:5.2f}")
        if f"{name} | pylance" in times:
            theirs_t = times[f"{name} | pylance"]
            line += f"   pylance {theirs_t * 1e3:7.1f} ms   ours/pylance {now / theirs_t:5.2f}"
        print(line)


def main() -> None:
    lance_sql.tune_allocator()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--sizes", default="1000,10000,100000",
                        help="rows per fragment, one table each (comma list)")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--no-pylance", action="store_true")
    parser.add_argument("--cpu", action="store_true", help="time CPU, not wall, medians")
    args = parser.parse_args()
    for per in (int(s) for s in args.sizes.split(",")):
        root = Path(tempfile.mkdtemp(prefix="bench_small_fragments_"))
        try:
            _build(root / "t.lance", args.rows, per)
            measure(root, per, args.repeat, not args.no_pylance, args.cpu)
        finally:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
