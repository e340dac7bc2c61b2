"""Hint and tag files with hostile contents: a table still opens at its latest version
(a hint is only a hint), and a damaged tag is a FormatError naming it."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

import lance_sql
from lance_sql.errors import FormatError
from lance_sql.format.region_spec import RegionSpec

BAD = {
    "infinity": b'{"version": Infinity}',
    "float": b'{"version": 1e308}',
    "digits": b'{"version": 1' + b"0" * 300 + b"}",
    "beyond_u63": b'{"version": 9223372036854775808}',
    "nesting": b"[" * 100_000 + b"]" * 100_000,
    "list": b"[7]",
}


@pytest.fixture
def table(tmp_path: Path) -> Path:
    path = tmp_path / "t.lance"
    lance_sql.write_dataset(pa.table({"id": [1, 2, 3]}), str(path))
    lance_sql.write_dataset(pa.table({"id": [4]}), str(path), mode="append")
    return path


@pytest.mark.parametrize("raw", BAD.values(), ids=BAD.keys())
def test_a_table_opens_at_its_latest_version_whatever_its_hint_says(table: Path,
                                                                     raw: bytes) -> None:
    (table / "_versions" / "latest_version_hint.json").write_bytes(raw)
    ds = lance_sql.dataset(str(table))
    assert ds.version == 2
    assert ds.count_rows() == 4


@pytest.mark.parametrize("raw", BAD.values(), ids=BAD.keys())
def test_a_damaged_tag_is_a_format_error_naming_it(table: Path, raw: bytes) -> None:
    ds = lance_sql.dataset(str(table))
    ds.tags.create("keep", 1)
    tag = next((table / "_refs" / "tags").iterdir())
    tag.write_bytes(raw)
    with pytest.raises(FormatError, match="corrupt tag file") as caught:
        lance_sql.dataset(str(table), version="keep")
    assert tag.name in str(caught.value)


@pytest.mark.parametrize("raw", BAD.values(), ids=BAD.keys())
def test_a_region_reads_its_latest_manifest_whatever_its_hint_says(tmp_path: Path,
                                                                   raw: bytes) -> None:
    key = pa.field("id", pa.int64(), nullable=False,
                   metadata={"lance-schema:unenforced-primary-key": "true"})
    schema = pa.schema([key, pa.field("v", pa.int64())])
    ds = lance_sql.write_dataset(pa.table({"id": [1, 2], "v": [0, 0]}, schema=schema),
                                 str(tmp_path / "m.lance"))
    mw = ds.initialize_mem_wal(RegionSpec.bucket("id", 1))
    with mw.writer() as w:
        w.put(pa.table({"id": [2, 3], "v": [1, 1]}, schema=schema))
        w.flush_memtable()
    hints = list((tmp_path / "m.lance").rglob("version_hint.json"))
    assert hints
    for hint in hints:
        hint.write_bytes(raw)
    got = lance_sql.dataset(str(tmp_path / "m.lance")).mem_wal.scanner().to_table()
    assert sorted(got.to_pylist(), key=lambda r: r["id"]) == [
        {"id": 1, "v": 0}, {"id": 2, "v": 1}, {"id": 3, "v": 1}]
    found = lance_sql.connect(str(tmp_path)).sql("SELECT count(*) AS n FROM m")
    assert found.to_arrow_table().to_pylist() == [{"n": 3}]
