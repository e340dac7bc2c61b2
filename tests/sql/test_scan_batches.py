"""Scan units read large chunks (sized by the columns' widths: each read has a fixed cost)
but hand DataFusion batches of its own batch size (operators such as a nested-loop join
check for cancellation between batches only), larger ones when only an aggregate or a
sort takes them, and whole chunks when the caller collects a plan that only streams."""

from __future__ import annotations

import contextlib
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

import lance_sql
from lance_sql.format.datafile import parallel
from lance_sql.sql import provider, streams
from lance_sql.sql import session as session_module
from lance_sql.sql.provider import CHUNK_ROWS, MAX_CHUNK_ROWS, chunk_rows
from lance_sql.table import build_scan_plan
from lance_sql.table.read import side_by_side


@pytest.fixture
def chunk_reads(monkeypatch) -> list[int]:
    """The length of every read the SQL scan units make, in order."""
    reads: list[int] = []
    original = provider.UnitScanner._read_chunk

    def counted(self, start: int, length: int, max_rows: int | None = None) -> pa.Table:
        reads.append(length)
        return original(self, start, length, max_rows)

    monkeypatch.setattr(provider.UnitScanner, "_read_chunk", counted)
    return reads


def test_whole_units_read_at_once_in_batches_of_datafusions_size(tmp_path: Path,
                                                                 chunk_reads: list[int]) -> None:
    """Streamed to the caller, batches keep DataFusion's size; collected by the caller
    (to_arrow_table), each chunk is handed over whole."""
    reads = chunk_reads
    rows = 300_000
    table = pa.table({"id": np.arange(rows), "x": np.linspace(0, 1, rows)})
    lance_sql.write_dataset(table, tmp_path / "t.lance")
    session = lance_sql.connect(tmp_path)
    for query in ["SELECT id, x FROM t", "SELECT id, x FROM t WHERE x >= 0"]:
        reads.clear()
        with session.sql(query).execute_stream() as stream:
            streamed = [batch.to_pyarrow() for batch in stream]
        assert sorted(reads) == [rows // 2, rows // 2], query  # each unit in one read
        sizes = [batch.num_rows for batch in streamed]
        assert max(sizes) <= 8192 and sum(sizes) == rows, (query, sizes)
        assert pa.Table.from_batches(streamed).sort_by("id").equals(table), query
        reads.clear()
        got = session.sql(query).to_arrow_table()
        assert sorted(reads) == [rows // 2, rows // 2], query
        sizes = [len(chunk) for chunk in got.column("id").chunks]
        assert sorted(sizes) == sorted(reads), (query, sizes)  # each read one batch
        assert got.sort_by("id").equals(table), query


def test_chunks_are_sized_by_the_columns_widths(tmp_path: Path) -> None:
    rows = 1000
    table = pa.table({
        "id": np.arange(rows),
        "x": np.zeros(rows),
        "s": [str(i) for i in range(rows)],
        "v": pa.FixedSizeListArray.from_arrays(pa.array(np.zeros(rows * 512, np.float32)), 512),
    })
    ds = lance_sql.write_dataset(table, tmp_path / "t.lance")

    def rows_for(names: list[str], limited: bool = False) -> tuple[int, bool]:
        return chunk_rows(build_scan_plan(ds.manifest, names), limited=limited)

    assert rows_for(["x"]) == (MAX_CHUNK_ROWS, True)          # 8 bytes a row: the most rows
    assert rows_for(["id", "x", "s"]) == (16 * 2**20 // 48, False)  # strings: a guess
    assert rows_for(["v"]) == (CHUNK_ROWS, True)               # 2 KiB a row: the fewest rows
    assert rows_for(["x"], limited=True) == (CHUNK_ROWS, True)
    assert rows_for(["x", "_rowaddr"]) == (16 * 2**20 // 16, True)


def test_reads_of_long_strings_are_sized_by_what_rows_take(tmp_path: Path,
                                                           chunk_reads: list[int]) -> None:
    """Variable-width columns: a first read of CHUNK_ROWS, then reads sized by the bytes
    a row took (long strings: no more rows than before; short ones: more)."""
    reads = chunk_reads
    rows = 600_000
    for name, text in [("long", "x" * 200), ("short", "y")]:
        lance_sql.write_dataset(pa.table({"s": pa.array([text] * rows)}),
                                tmp_path / f"{name}.lance", max_rows_per_file=rows)
    session = lance_sql.connect(tmp_path)
    reads.clear()
    assert session.sql("SELECT count(s) FROM long").to_arrow_table()[0][0].as_py() == rows
    assert reads[0] == CHUNK_ROWS and max(reads) == CHUNK_ROWS and sum(reads) == rows
    reads.clear()
    assert session.sql("SELECT count(s) FROM short").to_arrow_table()[0][0].as_py() == rows
    assert reads[0] == CHUNK_ROWS and max(reads) > CHUNK_ROWS and sum(reads) == rows


def _collected_strings(root: Path, rows: int, width: int, per_file: int
                       ) -> tuple[pa.Table, lance_sql.LanceSession]:
    """Table ``t`` under ``root``: ids and strings of ``width`` characters, in files of
    ``per_file`` rows; it and a session over ``root``, after checking that a collected
    ``SELECT *`` gives every row."""
    table = pa.table({"id": np.arange(rows),
                      "s": pa.array([f"{i % 977:>{width}}" for i in range(rows)])})
    lance_sql.write_dataset(table, root / "t.lance", max_rows_per_file=per_file)
    session = lance_sql.connect(root)
    assert session.sql("SELECT * FROM t").to_arrow_table().sort_by("id").equals(table)
    return table, session


def test_collected_scans_read_whole_units(tmp_path: Path, chunk_reads: list[int]) -> None:
    """A result that is collected holds every row anyway: after a first read of
    CHUNK_ROWS (which learns the strings' widths) its scan reads the rest of each unit at
    once (up to COLLECTED_CHUNK_BYTES), where a streamed result is read in chunks of
    CHUNK_BYTES. The rows are the same."""
    reads = chunk_reads
    rows = 600_000
    # rows of ~110 bytes: CHUNK_BYTES hold fewer of them than a unit has
    table, session = _collected_strings(tmp_path, rows, 100, rows)
    half = rows // 2  # (two units)
    # each unit: a probe, then the rest at once; or the whole unit at once when the other
    # unit finished first and its widths were learned (two units run side by side, so
    # which happens depends on the machine's load)
    assert sum(reads) == rows and set(reads) <= {CHUNK_ROWS, half - CHUNK_ROWS, half}, reads
    assert 1 <= reads.count(CHUNK_ROWS) == reads.count(half - CHUNK_ROWS), reads
    reads.clear()
    streamed = pa.Table.from_batches(
        [b.to_pyarrow() for b in session.sql("SELECT * FROM t").execute_stream()])
    assert streamed.sort_by("id").equals(table)
    assert sum(reads) == rows and len(reads) > 4 and reads.count(CHUNK_ROWS) >= 2, reads


def test_collected_scans_learn_row_widths_from_earlier_units(tmp_path: Path,
                                                            chunk_reads: list[int]) -> None:
    """A collected unfiltered scan of strings probes its rows' width with a first read of
    CHUNK_ROWS once (once per partition reading at the same time), and later units size
    their first read by what was learned: each reads its fragment at once."""
    reads = chunk_reads
    per_file, files = 200_000, 6
    rows = per_file * files
    table, session = _collected_strings(tmp_path, rows, 40, per_file)
    assert sum(reads) == rows
    probes = reads.count(CHUNK_ROWS)
    assert 1 <= probes <= 2 and len(reads) == files + probes, reads
    reads.clear()  # a streamed result probes every unit
    streamed = session.sql("SELECT * FROM t").execute_stream()
    assert sum(b.to_pyarrow().num_rows for b in streamed) == rows
    assert reads.count(CHUNK_ROWS) == files, reads


def test_limit_queries_read_small_chunks(tmp_path: Path) -> None:
    rows = 300_000
    lance_sql.write_dataset(pa.table({"id": np.arange(rows)}), tmp_path / "t.lance",
                            max_rows_per_file=rows)
    session = lance_sql.connect(tmp_path)
    got = session.sql("SELECT id FROM t LIMIT 200000").to_arrow_table()
    assert got.num_rows == 200_000
    assert max(len(c) for c in got.column("id").chunks) <= CHUNK_ROWS


BULK_QUERIES = [
    ("SELECT sum(x) AS v FROM t", lambda t: [(float(np.sum(t["x"])),)]),
    ("SELECT k, sum(x) AS v, count(*) AS n FROM t GROUP BY k ORDER BY k",
     lambda t: [(k, float(np.sum(t["x"][t["k"] == k])), int(np.sum(t["k"] == k)))
                for k in range(7)]),
    ("SELECT id FROM t WHERE x > 0.5 ORDER BY id DESC LIMIT 3",
     lambda t: [(int(i),) for i in np.sort(t["id"][t["x"] > 0.5])[::-1][:3]]),
    ("SELECT DISTINCT k FROM t ORDER BY k", lambda t: [(k,) for k in range(7)]),
    ("SELECT count(*) AS n, min(x) AS lo FROM (SELECT x FROM t UNION ALL SELECT x FROM t)",
     lambda t: [(2 * len(t["x"]), float(np.min(t["x"])))]),
]
SMALL_QUERIES = [
    "SELECT id, x FROM t",                                        # batches reach the caller
    "SELECT id FROM t WHERE x > 0.5",
    "SELECT count(*) FROM t a JOIN t b ON a.id = b.id",           # batches reach a join
    "SELECT sum(x) OVER (PARTITION BY k) AS w FROM t",            # ... a window
    "SELECT sum(x) FROM t WHERE id IN (SELECT k FROM t)",         # a semi join
]
# of those, the plans that only stream their scan: collected, they get whole chunks
STREAMING_QUERIES = SMALL_QUERIES[:2]


@pytest.fixture(scope="module")
def bulk_root(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    root = tmp_path_factory.mktemp("bulk")
    rows = 400_000
    rng = np.random.default_rng(3)
    columns = {"id": np.arange(rows), "x": rng.random(rows), "k": np.arange(rows) % 7}
    lance_sql.write_dataset(pa.table(columns), root / "t.lance", max_rows_per_file=rows)
    return root, columns


def _batch_sizes(monkeypatch) -> list[int]:
    sizes: list[int] = []
    original = provider.UnitScanner._batches

    def counted(self):
        for batch in original(self):
            sizes.append(batch.num_rows)
            yield batch

    monkeypatch.setattr(provider.UnitScanner, "_batches", counted)
    return sizes


@pytest.mark.parametrize(("query", "expected"), BULK_QUERIES, ids=[q for q, _ in BULK_QUERIES])
def test_scans_feeding_only_an_aggregate_or_a_sort_hand_over_large_batches(
        bulk_root: tuple[Path, dict], monkeypatch, query: str, expected) -> None:
    root, columns = bulk_root
    sizes = _batch_sizes(monkeypatch)
    got = lance_sql.connect(root).sql(query).to_arrow_table()
    assert max(sizes) > 8192 and max(sizes) <= provider.BULK_BATCH_ROWS, sizes
    rows = [tuple(round(v, 6) if isinstance(v, float) else v for v in row.values())
            for row in got.to_pylist()]
    want = [tuple(round(v, 6) if isinstance(v, float) else v for v in row)
            for row in expected(columns)]
    assert rows == want


def _streamed(session: lance_sql.LanceSession, query: str, sizes: list[int]) -> pa.Table:
    """The query's result streamed to the caller, whose scans hand over batches of
    DataFusion's size (checked on ``sizes``, recorded by :func:`_batch_sizes`)."""
    with session.sql(query).execute_stream() as stream:
        streamed = pa.Table.from_batches([batch.to_pyarrow() for batch in stream])
    assert sizes and max(sizes) <= 8192, sizes
    return streamed


@pytest.mark.parametrize("query", SMALL_QUERIES)
def test_other_scans_keep_datafusions_batch_size(bulk_root: tuple[Path, dict], monkeypatch,
                                                 query: str) -> None:
    """Streamed to the caller, or collected from a plan whose batches reach a join or a
    window, a scan's batches keep DataFusion's size."""
    root, _ = bulk_root
    sizes = _batch_sizes(monkeypatch)
    session = lance_sql.connect(root)
    streamed = _streamed(session, query, sizes)
    if query not in STREAMING_QUERIES:
        sizes.clear()
        got = session.sql(query).to_arrow_table()
        assert sizes and max(sizes) <= 8192, sizes
        assert got.num_rows == streamed.num_rows
    # the same answer as a plan that takes the scan's batches into an aggregate
    assert session.sql(f"SELECT count(*) AS n FROM ({query})").to_arrow_table()[0][0].as_py() \
        == streamed.num_rows


COLLECTORS = {
    "to_arrow_table": lambda df: df.to_arrow_table(),
    "collect": lambda df: pa.Table.from_batches(df.collect()),
    "to_pylist": lambda df: pa.Table.from_pylist(df.to_pylist()),
    "to_pydict": lambda df: pa.table(df.to_pydict()),
}


@pytest.mark.parametrize("collect", list(COLLECTORS))
@pytest.mark.parametrize("query", [*STREAMING_QUERIES, "SELECT id, x FROM t LIMIT 500000",
                                   "SELECT id, x + 1 AS y FROM t WHERE k = 3"])
def test_collected_streaming_plans_hand_over_whole_chunks(
        bulk_root: tuple[Path, dict], monkeypatch, query: str, collect: str) -> None:
    """A plan that only streams its scan, collected whole by the caller, gets each chunk
    the scan read as one batch (no operator takes them one by one), with the rows the
    scan streamed in DataFusion's batch size gives (every row compared); the query's
    scans and units are all let go of when the call returns, and it starts no thread."""
    root, _ = bulk_root
    sizes = _batch_sizes(monkeypatch)
    session = lance_sql.connect(root)
    streamed = _streamed(session, query, sizes)
    sizes.clear()
    before = set(threading.enumerate())
    got = COLLECTORS[collect](session.sql(query))
    assert max(sizes) > 8192, sizes  # whole chunks
    assert streams.running_scans() == 0 and streams.held_units() == 0
    assert [t for t in threading.enumerate() if t not in before and t.is_alive()
            and not isinstance(t, threading._DummyThread)] == []
    key = got.schema.names[0]
    assert got.sort_by(key).equals(streamed.sort_by(key).cast(got.schema)), query


# A long aggregate over large batches (each takes tens of milliseconds to evaluate): Ctrl-C
# must still come back at once, and the query's scans and thread must end.
SLOW_AGGREGATE = ("SELECT max(regexp_replace(repeat(s, 20), '(1+)', 'a', 'g')) AS m FROM ("
                  + " UNION ALL ".join(["SELECT s FROM t"] * 40) + ")")


def test_ctrl_c_stops_an_aggregate_over_large_batches(tmp_path: Path) -> None:
    lance_sql.write_dataset(pa.table({"s": pa.array(np.arange(500_000).astype(str))}),
                            tmp_path / "t.lance")
    code = f"""
import sys, threading, time
import lance_sql
from lance_sql.sql import provider, streams
sizes = []
original = provider.UnitScanner._batches
def counted(self):
    for batch in original(self):
        sizes.append(batch.num_rows)
        yield batch
provider.UnitScanner._batches = counted
df = lance_sql.connect({str(tmp_path)!r}).sql({SLOW_AGGREGATE!r})
print("running", flush=True)
try:
    df.to_arrow_table()
except KeyboardInterrupt:
    returned = time.monotonic()
    while time.monotonic() - returned < 20 and any(
            t.name == "lance-sql-query" and t.is_alive() for t in threading.enumerate()):
        time.sleep(0.02)
    # what DataFusion dropped off the interpreter's thread is let go of here
    settled = streams.settle_all(timeout=10)
    left = streams.running_scans() + streams.held_units()
    # threads Python started besides this one (DataFusion's own show up as dummies)
    ours = [t.name for t in threading.enumerate() if t is not threading.main_thread()
            and not isinstance(t, threading._DummyThread)]
    print("interrupted", max(sizes) > 8192, settled, left, ours, flush=True)
    sys.exit(0)
sys.exit(3)
"""
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline() == "running\n"
        time.sleep(1.5)
        proc.send_signal(signal.SIGINT)
        started = time.monotonic()
        out, err = proc.communicate(timeout=60)
        assert time.monotonic() - started < 10, (out, err)
        # large batches were handed over, nothing is left running, the interpreter exits
        assert (proc.returncode, out) == (0, "interrupted True True 0 []\n"), err
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()


def test_selective_filters_read_many_rows_at_a_time(tmp_path: Path, chunk_reads: list[int]) -> None:
    """A filter's columns are read for every row, the others for matching rows only: after
    a first read of CHUNK_ROWS, reads are sized by the filter's columns and what matched
    (few matches: the rest of the unit at once; every row matching wide rows: small when
    the result streams, larger when it is collected)."""
    reads = chunk_reads
    rows = 600_000
    wide = pa.array(["w" * 60] * rows)
    table = pa.table({"id": np.arange(rows), "a": wide, "b": wide, "c": wide, "d": wide})
    lance_sql.write_dataset(table, tmp_path / "t.lance", max_rows_per_file=rows)
    session = lance_sql.connect(tmp_path)
    got = session.sql("SELECT * FROM t WHERE id = 345678").to_arrow_table()
    assert got.to_pylist() == table.slice(345_678, 1).to_pylist()
    half = rows // 2
    assert sorted(reads) == sorted([CHUNK_ROWS, half - CHUNK_ROWS] * 2), reads
    reads.clear()
    streamed = session.sql("SELECT * FROM t WHERE id >= 0").execute_stream()
    assert sum(b.to_pyarrow().num_rows for b in streamed) == rows
    assert max(reads) == CHUNK_ROWS, reads
    reads.clear()
    got = session.sql("SELECT * FROM t WHERE id >= 0").to_arrow_table()
    assert got.num_rows == rows and sorted(reads) == sorted([CHUNK_ROWS, half - CHUNK_ROWS] * 2)


def test_filtered_scan_only_queries_read_as_one_partition(bulk_root: tuple[Path, dict],
                                                          monkeypatch) -> None:
    """A query that only streams a filtered scan reads its units as one partition (two
    threads decoding at once mostly wait for each other's interpreter lock), with the
    rows the units read in parallel give; other plans keep one partition per unit."""
    root, columns = bulk_root
    lance_sql.write_dataset(pa.table(columns), root / "many.lance", max_rows_per_file=50_000)
    # (units this small are read as one partition anyway: test_small_units_are_packed)
    monkeypatch.setattr(side_by_side, "SIDE_BY_SIDE_MIN_BYTES", 0)
    partitions: list[int] = []
    original = provider.PlannedDataset.get_fragments

    def counted(self, filter=None):
        units = original(self, filter)
        partitions.append(len(units))
        return units

    monkeypatch.setattr(provider.PlannedDataset, "get_fragments", counted)
    session = lance_sql.connect(root)
    cases = [("SELECT id, x FROM many WHERE k = 3", 1),
             ("SELECT id FROM many WHERE x > 0.25 AND x < 0.5", 1),
             ("SELECT id, x FROM many", 8),                      # not filtered
             ("SELECT k, count(*) AS n FROM many WHERE x > 0.5 GROUP BY k", 8)]  # aggregated
    for query, expected in cases:
        partitions.clear()
        got = session.sql(query).to_arrow_table()
        assert partitions[-1] == expected, (query, partitions)
        monkeypatch.setattr(session_module, "only_streams", lambda plan, pinned: False)
        parallel = session.sql(query).to_arrow_table()
        monkeypatch.undo()
        monkeypatch.setattr(side_by_side, "SIDE_BY_SIDE_MIN_BYTES", 0)
        monkeypatch.setattr(provider.PlannedDataset, "get_fragments", counted)
        assert got.sort_by(got.schema.names[0]).equals(parallel.sort_by(got.schema.names[0])), \
            query


def test_units_read_beside_others_decode_without_helper_threads(
        bulk_root: tuple[Path, dict], monkeypatch) -> None:
    """A unit DataFusion reads beside the query's other units decodes on its own thread
    (parallel.no_helpers); a query read as one partition may still use helpers. Same
    rows either way as with helpers everywhere."""
    root, _ = bulk_root
    monkeypatch.setattr(side_by_side, "SIDE_BY_SIDE_MIN_BYTES", 0)  # (two units: two partitions)
    alone: list[bool] = []
    original = provider.scan_fragment

    def recorded(*args, **kwargs):
        alone.append(getattr(parallel._local, "alone", False))
        return original(*args, **kwargs)

    monkeypatch.setattr(provider, "scan_fragment", recorded)
    session = lance_sql.connect(root)
    for query, beside in [("SELECT id, k FROM t", True),            # two partitions
                          ("SELECT id FROM t WHERE k = 3", False)]:  # one partition
        alone.clear()
        got = session.sql(query).to_arrow_table()
        assert alone and set(alone) == {beside}, (query, alone)
        with monkeypatch.context() as m:
            m.setattr(provider, "no_helpers", lambda alone=True: contextlib.nullcontext())
            spread = session.sql(query).to_arrow_table()
        assert got.sort_by("id").equals(spread.sort_by("id")), query



@pytest.fixture
def own_sigint() -> Iterator[None]:
    """Another SIGINT handler than Python's (PySpark installs one): queries then run on
    DataFusion's threads, their units as partitions (not inline in one partition)."""
    previous = signal.signal(signal.SIGINT, lambda *_: None)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def test_small_units_are_packed_into_one_partition(tmp_path: Path, monkeypatch,
                                                   own_sigint: None) -> None:
    """Consecutive units too small to gain from threads (side_by_side) are read in turn as
    one partition; larger units stay partitions of their own; EXPLAIN counts the
    partitions; the rows are those of one partition a unit."""
    rng = np.random.default_rng(11)
    path = tmp_path / "t.lance"
    sizes = [1000, 1000, 1000, 60_000, 1000, 1000]
    start = 0
    for i, size in enumerate(sizes):
        ids = np.arange(start, start + size)
        lance_sql.write_dataset(pa.table({"id": ids, "x": rng.random(size)}), path,
                                mode="create" if i == 0 else "append")
        start += size
    # 16 bytes a row: the 1000-row fragments are small, the 60,000-row one is not
    monkeypatch.setattr(side_by_side, "SIDE_BY_SIDE_MIN_BYTES", 100_000)
    partitions: list[list[str]] = []
    original = provider.PlannedDataset.get_fragments

    def counted(self, filter=None):
        units = original(self, filter)
        partitions.append([type(u).__name__ for u in units])
        return units

    monkeypatch.setattr(provider.PlannedDataset, "get_fragments", counted)
    session = lance_sql.connect(tmp_path)
    query = "SELECT id, x FROM t"
    got = session.sql(query).to_arrow_table()
    assert partitions[-1] == ["SequentialUnit", "ScanUnit", "SequentialUnit"]
    plan = "\n".join(session.sql(f"EXPLAIN {query}").to_arrow_table()
                     .column("plan").to_pylist())
    assert "kept 6 of 6 fragments, 3 partitions" in plan
    monkeypatch.setattr(side_by_side, "SIDE_BY_SIDE_MIN_BYTES", 0)
    unpacked = session.sql(query).to_arrow_table()
    assert partitions[-1] == ["ScanUnit"] * 6
    assert got.sort_by("id").equals(unpacked.sort_by("id"))
    assert got.num_rows == sum(sizes)
    # an aggregate over one packed partition: the same answer
    monkeypatch.setattr(side_by_side, "SIDE_BY_SIDE_MIN_BYTES", 1 << 30)
    count = session.sql("SELECT count(*) AS n, sum(id) AS s FROM t WHERE x > 0.5")
    found = count.to_arrow_table().to_pylist()[0]
    assert partitions[-1] == ["SequentialUnit"]
    want = unpacked.filter(pa.compute.greater(unpacked["x"], 0.5))
    assert found == {"n": want.num_rows, "s": pa.compute.sum(want["id"]).as_py()}
