"""The session's per-query shortcuts give exactly what the general path gives.

* ``count(*)`` answered from the pinned version's metadata (``lance_sql.sql.shortcuts``):
  checked against the scan it replaces (the shortcut switched off), pylance's
  ``count_rows`` and plain arithmetic, after deletes, appends, overwrites and time travel,
  with commits made by other handles and another library between queries; and every
  query shape it must not take (filters, non-literal counts, DISTINCT, FILTER, GROUP BY,
  LIMIT, joins, the LSM view) still runs the scan.
* in-memory result frames run on the calling thread; frames derived from them do not
  skip the query thread.
* one listing of the root per query: a table created between queries is seen by the next.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
import threading
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pytest

import lance_sql
from lance_sql.errors import NotFoundError
from lance_sql.format.region_spec import RegionSpec
from lance_sql.memwal.api import MemWal
from lance_sql.sql import interrupt, provider
from lance_sql.sql import session as session_module
from lance_sql.sql.provider import PlannedDataset

REPO = Path(__file__).resolve().parents[2]


def _table(start: int, n: int) -> pa.Table:
    ids = list(range(start, start + n))
    return pa.table({
        "id": pa.array(ids, pa.int64()),
        "x": pa.array([None if i % 7 == 0 else i * 0.5 for i in ids], pa.float64()),
        "s": pa.array([None if i % 5 == 0 else f"s{i % 11}" for i in ids], pa.string()),
    })


@pytest.fixture
def root(tmp_path: Path) -> Path:
    uri = tmp_path / "t.lance"
    lance_sql.write_dataset(_table(0, 1000), uri, max_rows_per_file=300)    # 4 fragments
    lance_sql.write_dataset(_table(1000, 250), uri, mode="append")         # a 5th
    lance_sql.dataset(uri).delete("id % 9 = 0 OR (id >= 300 AND id < 600)")  # one gone
    lance_sql.write_dataset(_table(0, 3), tmp_path / "u.lance")
    return tmp_path


def _general(session: lance_sql.LanceSession, sql: str,
             monkeypatch: pytest.MonkeyPatch) -> list[dict]:
    """``sql`` with the metadata count switched off (the scan answers)."""
    with monkeypatch.context() as m:
        m.setattr(session_module, "counted_table", lambda plan: None)
        return session.sql(sql).to_arrow_table().to_pylist()


def _no_scan(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make every Lance scan fail: what still answers was answered from metadata."""
    def refuse(self: object, filter: object = None) -> list:
        raise AssertionError("a Lance scan was planned")
    monkeypatch.setattr(PlannedDataset, "get_fragments", refuse)


def _live(uri: Path) -> int:
    return lance_sql.dataset(uri).to_table(columns=["id"]).num_rows


COUNT_QUERIES = [
    "SELECT count(*) FROM t",
    "SELECT count(*) AS n FROM t",
    "SELECT count(1) AS a, count(*) AS b, count(*) FROM t",
    'SELECT count(*) AS "n" FROM lance.default.t',
    "SELECT count(*) FROM t AS x",
    "SELECT count(*) FROM (SELECT * FROM t)",
]


@pytest.mark.parametrize("sql", COUNT_QUERIES)
def test_metadata_count_equals_the_scan(root: Path, sql: str,
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    session = lance_sql.connect(root)
    want = _general(session, sql, monkeypatch)
    live = _live(root / "t.lance")
    assert live == 1250 - 300 - len([i for i in range(1250) if i % 9 == 0
                                     and not 300 <= i < 600])
    assert all(v == live for row in want for v in row.values())
    with monkeypatch.context() as m:
        _no_scan(m)
        got = session.sql(sql).to_arrow_table()
    assert got.to_pylist() == want
    assert got.schema == session.sql(sql).schema()  # the names and types DataFusion gives


def test_metadata_count_agrees_with_pylance_after_its_commits(
        root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    lance = pytest.importorskip("lance")
    uri = str(root / "t.lance")
    session = lance_sql.connect(root)
    live_before = _live(root / "t.lance")
    before = session.sql("SELECT count(*) AS n FROM t")  # pinned now
    lance.dataset(uri).delete("id < 50 OR id = 1100")   # another library's deletion files
    lance.write_dataset(_table(5000, 40), uri, mode="append")
    want = lance.dataset(uri).count_rows()
    _no_scan(monkeypatch)
    assert session.sql("SELECT count(*) AS n FROM t").to_pylist() == [{"n": want}]
    assert before.to_pylist() == [{"n": live_before}]
    assert live_before != want
    monkeypatch.undo()
    assert _general(session, "SELECT count(*) AS n FROM t", monkeypatch) == [{"n": want}]


def test_metadata_count_sees_commits_of_another_process(root: Path) -> None:
    session = lance_sql.connect(root)
    assert session.sql("SELECT count(*) AS n FROM t").to_pylist() == \
        [{"n": _live(root / "t.lance")}]
    script = textwrap.dedent(f"""
        import pyarrow as pa, lance_sql
        uri = {str(root / "t.lance")!r}
        lance_sql.write_dataset(pa.table({{"id": pa.array(range(7), pa.int64()),
                                           "x": [1.0] * 7, "s": ["a"] * 7}}), uri,
                                mode="overwrite")
        lance_sql.dataset(uri).delete("id = 3")
    """)
    done = subprocess.run([sys.executable, "-c", script], env={"PYTHONPATH": str(REPO)},
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert session.sql("SELECT count(*) AS n FROM t").to_pylist() == [{"n": 6}]
    assert session.sql("SELECT count(*) AS n FROM t VERSION AS OF 1").to_pylist() == \
        [{"n": 1000}]


def test_metadata_count_of_time_travel_and_empty_tables(
        root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    lance_sql.write_dataset(_table(0, 0), root / "empty.lance")
    session = lance_sql.connect(root)
    queries = {"SELECT count(*) AS n FROM t VERSION AS OF 1": 1000,
               "SELECT count(*) AS n FROM t VERSION AS OF 2": 1250,
               "SELECT count(*) AS n FROM empty": 0}
    for sql, n in queries.items():
        assert _general(session, sql, monkeypatch) == [{"n": n}]
    # a version named by hand is not pinned by the front door: it scans, rightly
    assert session.sql('SELECT count(*) AS n FROM "t@2"').to_pylist() == [{"n": 1250}]
    _no_scan(monkeypatch)
    for sql, n in queries.items():
        assert session.sql(sql).to_pylist() == [{"n": n}], sql


@pytest.mark.parametrize("sql, want", [
    ("SELECT count(*) AS n FROM t WHERE id < 100", lambda ids: sum(i < 100 for i in ids)),
    ("SELECT count(x) AS n FROM t", lambda ids: sum(i % 7 != 0 for i in ids)),
    ("SELECT count(s) AS n FROM t", lambda ids: sum(i % 5 != 0 for i in ids)),
    ("SELECT count(NULL) AS n FROM t", lambda ids: 0),
    ("SELECT count(DISTINCT 1) AS n FROM t", lambda ids: 1),
    ("SELECT count(*) FILTER (WHERE id > 1000) AS n FROM t",
     lambda ids: sum(i > 1000 for i in ids)),
    ("SELECT count(*) + 1 AS n FROM t", lambda ids: len(ids) + 1),
    ("SELECT n FROM (SELECT count(*) AS n FROM t) WHERE n > 1000000",
     lambda ids: None),
    ("SELECT count(*) AS n FROM t GROUP BY id % 2 ORDER BY n LIMIT 1",
     lambda ids: min(sum(i % 2 == 0 for i in ids), sum(i % 2 == 1 for i in ids))),
    ("SELECT count(*) AS n FROM t, u", lambda ids: 3 * len(ids)),
    ("SELECT count(*) AS n FROM t WHERE _rowid < 4294967296",
     lambda ids: sum(i < 300 for i in ids)),
])
def test_other_counts_still_scan(root: Path, sql: str, want,
                                 monkeypatch: pytest.MonkeyPatch) -> None:
    ids = lance_sql.dataset(root / "t.lance").to_table(columns=["id"])["id"].to_pylist()
    session = lance_sql.connect(root)
    expected = want(ids)
    assert session.sql(sql).to_pylist() == ([] if expected is None else [{"n": expected}])
    _no_scan(monkeypatch)
    with pytest.raises(Exception, match="a Lance scan was planned"):
        session.sql(sql).to_pylist()


def test_lsm_count_is_not_answered_from_the_base(tmp_path: Path) -> None:
    pk = {"lance-schema:unenforced-primary-key": "true"}
    schema = pa.schema([pa.field("id", pa.int64(), nullable=False, metadata=pk),
                        pa.field("v", pa.int64())])
    ds = lance_sql.write_dataset(pa.table({"id": range(10), "v": range(10)}, schema=schema),
                                 tmp_path / "t.lance")
    mw = MemWal.initialize(ds, RegionSpec.bucket("id", 2), durable_write=False,
                           max_wal_flush_interval_ms=3_600_000)
    session = lance_sql.connect(tmp_path)
    with mw.writer() as writer:
        assert session.sql("SELECT count(*) AS n FROM t").to_pylist() == [{"n": 10}]
        writer.put(pa.table({"id": [3, 4, 50], "v": [0, 0, 0]}, schema=schema))
        # strong consistency: the put made after the previous query is seen, each key once
        assert session.sql("SELECT count(*) AS n FROM t").to_pylist() == [{"n": 11}]
        writer.put(pa.table({"id": [51], "v": [1]}, schema=schema))
        assert session.sql("SELECT count(*) AS n FROM t").to_pylist() == [{"n": 12}]
        assert session.sql("SELECT v FROM t WHERE id = 51").to_pylist() == [{"v": 1}]


def test_in_memory_frames_run_on_the_calling_thread(
        root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    session = lance_sql.connect(root)
    calls = []
    real = session_module.run_interruptibly

    def spy(fn, cancel):
        calls.append(fn)
        return real(fn, cancel)

    monkeypatch.setattr(session_module, "run_interruptibly", spy)
    counted = session.sql("SELECT count(*) AS n FROM t")
    assert counted.to_pylist() == [{"n": _live(root / "t.lance")}]
    assert session.sql("CREATE TABLE v (a BIGINT)").to_pylist()[0]["table"] == "v"
    assert calls == []  # neither started the query thread
    # a frame derived from an in-memory one may read Lance tables: it runs as any query
    both = counted.union(session.sql("SELECT count(*) AS n FROM u WHERE id > 0"))
    assert sorted(r["n"] for r in both.to_pylist()) == [2, _live(root / "t.lance")]
    assert len(calls) == 1


def test_a_table_created_between_queries_is_seen(root: Path) -> None:
    session = lance_sql.connect(root)
    with pytest.raises(NotFoundError):
        session.sql("SELECT count(*) FROM fresh").to_pylist()
    lance_sql.write_dataset(_table(0, 4), root / "fresh.lance")
    assert session.sql("SELECT count(*) AS n FROM fresh").to_pylist() == [{"n": 4}]
    assert session.sql("SELECT count(*) AS n FROM fresh JOIN u ON fresh.id = u.id"
                       ).to_pylist() == [{"n": 3}]


INTERRUPT_SCRIPT = """
import os, signal, sys, threading, time
import pyarrow as pa
import pyarrow.compute as pc
import lance_sql
from lance_sql.sql import interrupt, provider, session as session_module
from lance_sql.sql.streams import held_units, running_scans, settle_all

root, rows, per_file, threads = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
query = sys.argv[5]
lance_sql.write_dataset(pa.table({"x": pa.array(range(rows), pa.int64())}),
                        root + "/t.lance", max_rows_per_file=per_file)
session = lance_sql.connect(root)
# many short reads (a collected result's scan would read each unit whole)
provider.CHUNK_ROWS = provider.MAX_CHUNK_ROWS = provider.COLLECTED_MAX_CHUNK_ROWS = 1000
real = provider.scan_fragment

def slow(*args, **kwargs):
    time.sleep(0.1)
    return real(*args, **kwargs)

provider.scan_fragment = slow
started = []
real_run = interrupt.run_interruptibly
spy = lambda fn, cancel: started.append(1) or real_run(fn, cancel)
session_module.run_interruptibly = interrupt.run_interruptibly = spy
df = session.sql(query)
baseline = threading.active_count()
threading.Timer(0.5, lambda: os.kill(os.getpid(), signal.SIGINT)).start()
start = time.monotonic()
try:
    df.to_arrow_table()
    sys.exit("not interrupted")
except KeyboardInterrupt:
    took = time.monotonic() - start
assert took < 3.0, took
assert len(started) == threads, started
assert settle_all(timeout=10)  # the scans DataFusion was still dropping are let go of
assert running_scans() == 0 and held_units() == 0, (running_scans(), held_units())
assert threading.active_count() == baseline, threading.enumerate()
# the session still works, and SIGINT is Python's again
provider.scan_fragment = real
assert session.sql("SELECT count(*) AS n FROM t WHERE x < 10").to_pylist() == [{"n": 10}]
assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
print("ok")
"""


@pytest.mark.parametrize("rows, per_file, threads, query", [
    (60_000, 60_000, 0, "SELECT x FROM t WHERE x % 3 = 0"),
    (200_000, 4_000, 0, "SELECT x FROM t WHERE x % 3 = 0"),
    (600_000, 100_000, 1, "SELECT x FROM t WHERE x % 3 = 0"),
    (600_000, 20_000, 0, "SELECT x FROM t WHERE x < 0 LIMIT 5")],
    ids=["one-unit-inline", "many-units-inline", "large-on-a-worker", "large-limit-inline"])
def test_ctrl_c_stops_a_streaming_query_run_on_the_calling_thread(
        tmp_path: Path, rows: int, per_file: int, threads: int, query: str) -> None:
    """A scan-only plan with small scans runs on the main thread (no query thread, its
    units read as one partition), as does a LIMIT's (it reads up to the rows it returns;
    here none match: it would read the whole table); one with large scans moves to a
    worker thread. Either way Ctrl-C stops the scans at their next chunk and raises
    KeyboardInterrupt, leaving no thread or scan behind."""
    done = subprocess.run([sys.executable, "-c", INTERRUPT_SCRIPT, str(tmp_path), str(rows),
                           str(per_file), str(threads), query],
                          env={"PYTHONPATH": str(REPO)},
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.strip().endswith("ok")


@pytest.fixture
def python_sigint() -> Iterator[None]:
    """Python's own Ctrl-C handling (libraries such as PySpark install their own, which
    sends every query to the worker thread)."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


INLINE_QUERIES = [
    "SELECT * FROM t WHERE x < 100",
    "SELECT id, s FROM t WHERE _rowid IN (0, 5, 4294967296, 17179869184, 17179869185)",
    "SELECT * FROM t WHERE _rowaddr = 8589934593",
    "SELECT id FROM t WHERE s = 's3' LIMIT 7",
    "SELECT id + 1 AS j FROM t WHERE id BETWEEN 200 AND 900",
]


@pytest.mark.parametrize("sql", INLINE_QUERIES)
def test_small_scans_read_on_the_calling_thread_as_in_parallel(
        root: Path, sql: str, monkeypatch: pytest.MonkeyPatch, python_sigint: None) -> None:
    """On the main thread a scan-only query's small units are read as one partition,
    with the same rows as the units read in parallel (from another thread)."""
    lance_sql.dataset(root / "t.lance").create_scalar_index("id", "BTREE")
    session = lance_sql.connect(root)
    elsewhere: list[pa.Table] = []
    worker = threading.Thread(target=lambda: elsewhere.append(
        session.sql(sql).to_arrow_table()))
    worker.start()
    worker.join()
    sequential = []
    real = provider.SequentialScanner.__init__

    def spy(self, unit, *args):
        sequential.append(len(unit.units))
        real(self, unit, *args)

    monkeypatch.setattr(provider.SequentialScanner, "__init__", spy)
    started = []
    for module in (session_module, interrupt):
        monkeypatch.setattr(module, "run_interruptibly",
                            lambda fn, cancel: started.append(1) or fn())
    here = session.sql(sql).to_arrow_table()
    assert started == []
    key = "j" if "j" in here.column_names else "id"
    if "LIMIT" in sql:  # which rows is up to the scan order; how many is not
        assert here.num_rows == elsewhere[0].num_rows == 7
    else:
        assert here.sort_by(key) == elsewhere[0].sort_by(key)
        assert here.num_rows > 0
    if "x < 100" in sql:  # no index: the 4 fragments left scanned, one partition here
        assert sequential == [4]


def test_a_large_indexed_read_moves_to_a_worker_with_one_index_search(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, python_sigint: None) -> None:
    """Planned on the calling thread, an index range too large to read there moves to a
    worker thread; the index is searched once, and the rows are those of a plain scan."""
    ids = pa.array(range(300_000), pa.int64())
    lance_sql.write_dataset(pa.table({"id": ids, "v": pc.multiply(ids, 2)}),
                            tmp_path / "t.lance", max_rows_per_file=100_000)
    lance_sql.dataset(tmp_path / "t.lance").create_scalar_index("id", "BTREE")
    session = lance_sql.connect(tmp_path)
    searches, started = [], []
    real_search, real_run = provider.plan_indexed, interrupt.run_interruptibly
    monkeypatch.setattr(provider, "plan_indexed",
                        lambda *a, **k: searches.append(1) or real_search(*a, **k))
    for module in (session_module, interrupt):
        monkeypatch.setattr(module, "run_interruptibly",
                            lambda fn, cancel: started.append(1) or real_run(fn, cancel))
    got = session.sql("SELECT v FROM t WHERE id >= 10000 AND id < 290000").to_arrow_table()
    assert started == [1] and searches == [1]
    assert sorted(got["v"].to_pylist()) == list(range(20_000, 580_000, 2))
    started.clear()
    searches.clear()
    got = session.sql("SELECT v FROM t WHERE id = 123").to_arrow_table()  # small: here
    assert started == [] and searches == [1] and got["v"].to_pylist() == [246]


def test_someone_elses_ctrl_c_handler_keeps_the_worker_thread(
        root: Path, monkeypatch: pytest.MonkeyPatch, python_sigint: None) -> None:
    """With a SIGINT handler other than Python's, a small scan runs on the worker thread
    as before (that handler, not ours, decides what Ctrl-C does)."""
    session = lance_sql.connect(root)
    started = []
    real_run = interrupt.run_interruptibly
    for module in (session_module, interrupt):
        monkeypatch.setattr(module, "run_interruptibly",
                            lambda fn, cancel: started.append(1) or real_run(fn, cancel))
    sql = "SELECT id FROM t WHERE _rowaddr = 8589934593"
    assert session.sql(sql).to_pylist() == [{"id": 601}]
    assert started == []
    signal.signal(signal.SIGINT, lambda signum, frame: None)
    assert session.sql(sql).to_pylist() == [{"id": 601}]
    assert started == [1]
