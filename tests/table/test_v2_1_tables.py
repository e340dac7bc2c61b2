"""Tables in Lance file format 2.1: lance_sql writes into pylance's and creates its own,
and pylance reads and keeps writing them, every row compared."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

import lance_sql

lance = pytest.importorskip("lance")


def _rows(lo: int, hi: int, tag: str) -> pa.Table:
    ids = range(lo, hi)
    return pa.table({
        "id": pa.array(ids, pa.int64()),
        "s": [f"{tag}{i}" * (i % 7) for i in ids],
        "st": pa.array([{"a": i, "b": None if i % 3 else str(i)} if i % 5 else None
                        for i in ids]),
        "l": pa.array([list(range(i % 4)) if i % 6 else None for i in ids],
                      pa.list_(pa.int64())),
    })


def _minor_versions(uri: str) -> set[int]:
    return {d.file_minor_version for f in lance.dataset(uri).get_fragments()
            for d in f.data_files()}


def _same(uri: str) -> pa.Table:
    ours = lance_sql.dataset(uri).to_table().sort_by("id")
    assert ours == lance.dataset(uri).to_table().sort_by("id")
    return ours


def test_every_write_into_a_pylance_2_1_table(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    lance.write_dataset(_rows(0, 3000, "a"), uri, data_storage_version="2.1",
                        max_rows_per_file=1200)
    ds = lance_sql.write_dataset(_rows(3000, 3100, "b"), uri, mode="append")
    ds.update({"s": "'changed'"}, "id % 10 = 0")
    ds.delete("id % 13 = 0")
    ds.merge_insert("id").when_matched_update_all().when_not_matched_insert_all().execute(
        _rows(3050, 3200, "m"))
    ds.add_columns({"twice": "id * 2"})
    ds.optimize.compact_files(target_rows_per_fragment=2500)
    session = lance_sql.LanceSession()
    session.register("t", uri)
    session.sql("INSERT INTO t (id, s, twice) VALUES (99999, 'sql', 0)")
    session.sql("UPDATE t SET s = 'again' WHERE id < 5")
    table = _same(uri)
    assert lance.dataset(uri).data_storage_version == "2.1" and _minor_versions(uri) == {1}
    ids = set(range(3200)) - {i for i in range(3050) if i % 13 == 0} | {99999}
    assert set(table.column("id").to_pylist()) == ids
    lance.dataset(uri).optimize.compact_files()  # pylance rewrites what we wrote
    assert _same(uri) == table


def test_a_lance_sql_2_1_table_pylance_keeps_writing(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    ds = lance_sql.write_dataset(_rows(0, 2000, "a"), uri, data_storage_version="2.1")
    assert ds.data_storage_version == "2.1" == lance.dataset(uri).data_storage_version
    lance.write_dataset(_rows(2000, 2500, "p"), uri, mode="append")
    lance.dataset(uri).delete("id < 100")
    lance_sql.write_dataset(_rows(2500, 2600, "q"), uri, mode="append")
    table = _same(uri)
    assert table.column("id").to_pylist() == list(range(100, 2600))
    assert _minor_versions(uri) == {1}
