"""Plain EXPLAIN of an LSM scan says what is known of base keys held twice without
reading a key: the check's answer when this process has it for the base version (none,
or how many rows are superseded), that the table config skips it, or that the first
scan checks; in Python ``explain()`` and SQL EXPLAIN alike, and no keys are read."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa

import lance_sql
from lance_sql.memwal.api import MemWal
from lance_sql.memwal.read import duplicates

PK = {"lance-schema:unenforced-primary-key": "true"}
SCHEMA = pa.schema([pa.field("a", pa.int64(), nullable=False, metadata=PK),
                    pa.field("s", pa.string())])
NOT_YET = "base_duplicate_keys=[not checked yet (checked on first scan)]"


def _rows(keys: list[int], tag: str) -> pa.Table:
    return pa.table({"a": keys, "s": [f"{tag}{k}" for k in keys]}, schema=SCHEMA)


def _explained(uri: str) -> tuple[str, str]:
    """(Python plain EXPLAIN, SQL plain EXPLAIN) of a scan of the table's latest version;
    neither reads a key."""
    reads = duplicates.KEY_READS[0]
    python = MemWal(lance_sql.dataset(uri)).scanner(["a", "s"]).explain()
    session = lance_sql.connect()
    session.register("t", uri)
    plan = session.sql("EXPLAIN SELECT a, s FROM t").to_arrow_table()
    assert duplicates.KEY_READS[0] == reads
    return python, "\n".join(plan.column("plan").to_pylist())


def _scan_sql(uri: str) -> int:
    session = lance_sql.connect()
    session.register("t", uri)
    return session.sql("SELECT a FROM t").to_arrow_table().num_rows


def test_each_state_in_python_and_sql(tmp_path: Path) -> None:
    uri = str(tmp_path / "t.lance")
    lance_sql.write_dataset(_rows(list(range(30)), "old"), uri, max_rows_per_file=10)
    MemWal.initialize(lance_sql.dataset(uri), None)
    for text in _explained(uri):
        assert NOT_YET in text
    assert MemWal(lance_sql.dataset(uri)).scanner(["a"]).to_table().num_rows == 30
    for text in _explained(uri):
        assert "base_duplicate_keys=[checked: none]" in text
    # a new version: unknown again until a scan (here SQL's) checks it
    lance_sql.write_dataset(_rows([4, 5, 6], "new"), uri, mode="append")
    for text in _explained(uri):
        assert NOT_YET in text
    assert _scan_sql(uri) == 30
    for text in _explained(uri):
        assert "base_duplicate_keys=[checked: 3 superseded]" in text
    analyzed = MemWal(lance_sql.dataset(uri)).scanner(["a"]).explain(analyze=True)
    assert "base_duplicate_keys=[checked: 3 superseded]" in analyzed
    assert "base_rows_superseded=3" in analyzed
    lance_sql.dataset(uri).update_config({duplicates.UNIQUE_BASE_KEYS_CONFIG: "true"})
    skipped = f"base_duplicate_keys=[skipped: table config {duplicates.UNIQUE_BASE_KEYS_CONFIG}]"
    for text in _explained(uri):
        assert skipped in text
    reads = duplicates.KEY_READS[0]
    assert _scan_sql(uri) == 33  # (the owner's promise: a key held twice scans twice)
    assert duplicates.KEY_READS[0] == reads
    for text in _explained(uri):
        assert skipped in text


def test_a_lookup_plan_says_nothing_of_it(tmp_path: Path) -> None:
    """A point lookup takes the newest row of its key and never checks the base: its
    plan has no such line."""
    uri = str(tmp_path / "t.lance")
    lance_sql.write_dataset(_rows(list(range(10)), "old"), uri)
    mw = MemWal.initialize(lance_sql.dataset(uri), None)
    assert "base_duplicate_keys" not in mw.view().lookup_plan(pa.table({"a": [3]})).explain()
