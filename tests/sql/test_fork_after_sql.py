"""SQL in a process forked after its parent ran SQL is refused at once (QueryError
saying to use 'spawn'): DataFusion's worker threads do not survive fork(), and such a
query waited for them forever. Python scans work in the child."""

from __future__ import annotations

import multiprocessing
from pathlib import Path

import pyarrow as pa

import lance_sql


def _child(root: str, out: multiprocessing.Queue) -> None:
    session = lance_sql.connect(root)
    try:
        session.sql("SELECT k, count(*) FROM m GROUP BY k").to_arrow_table()
        said = "ran"
    except lance_sql.LanceError as exc:
        said = f"{type(exc).__name__}: {exc}"
    out.put((said, lance_sql.dataset(root + "/m.lance").to_table().num_rows))


def test_sql_in_a_forked_child_is_refused_and_scans_work(tmp_path: Path) -> None:
    lance_sql.write_dataset(pa.table({"k": [i % 7 for i in range(5000)]}),
                            str(tmp_path / "m.lance"), max_rows_per_file=1000)
    session = lance_sql.connect(str(tmp_path))
    assert session.sql("SELECT count(*) AS n FROM m").to_pylist() == [{"n": 5000}]
    context = multiprocessing.get_context("fork")
    out = context.Queue()
    child = context.Process(target=_child, args=(str(tmp_path), out))
    child.start()
    child.join(60)
    if child.is_alive():
        child.kill()
        raise AssertionError("the forked child's query hung")
    said, rows = out.get(timeout=5)
    assert said.startswith("QueryError: this process was forked") and "'spawn'" in said
    assert rows == 5000
    # the parent goes on as before
    assert session.sql("SELECT count(*) AS n FROM m").to_pylist() == [{"n": 5000}]
