"""Maintenance operations against pylance (2.0 tables), both ways.

lance_sql changes a table -> pylance opens it and reads the same rows (and can keep
writing to it); pylance changes a table -> lance_sql reads the same rows and decodes
every transaction pylance wrote.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from pathlib import Path

import lance
import pyarrow as pa
import pytest

import lance_sql

ROWS, FRAGMENTS = 240, 4


def _create(tmp_path: Path, tables, writer: str) -> str:
    uri = str(tmp_path / "t.lance")
    data = tables.make(ROWS)
    per = ROWS // FRAGMENTS
    for i in range(FRAGMENTS):
        part = data.slice(i * per, per)
        if writer == "pylance":
            lance.write_dataset(part, uri, mode="append" if i else "create",
                                data_storage_version="2.0")
        else:
            lance_sql.write_dataset(part, uri, mode="append" if i else "create",
                                    data_storage_version="2.0")
    return uri


def _same(tables, uri: str, what: str) -> None:
    ours, theirs = lance_sql.dataset(uri), lance.dataset(uri)
    assert ours.version == theirs.version, what
    tables.assert_equal(ours.to_table(), theirs.to_table(), what)
    assert ours.schema.remove_metadata() == theirs.schema.remove_metadata(), what


def _history_decodes(uri: str) -> None:
    ops = [v["operation"] for v in lance_sql.dataset(uri).versions()]
    assert None not in ops, ops


# --------------------------------------------------------------- lance_sql -> pylance
OURS: dict[str, Callable[[lance_sql.LanceDataset], object]] = {
    "compact": lambda ds: (ds.delete("id % 5 = 0"), ds.optimize.compact_files()),
    "compact_some": lambda ds: ds.compact_files(target_rows_per_fragment=120),
    "add_sql": lambda ds: ds.add_columns({"twice": "id * 2", "name": "lower(c_string)"}),
    "add_arrow": lambda ds: (ds.delete("id < 7"), ds.add_columns(
        pa.table({"extra": pa.array(range(ds.count_rows()), pa.int32())}))),
    "add_null": lambda ds: ds.add_columns(pa.field("nothing", pa.float64())),
    "drop": lambda ds: ds.drop_columns(["c_string", "c_struct", "c_vector"]),
    "rename": lambda ds: ds.alter_columns({"path": "c_int32", "name": "renamed"},
                                          {"path": "c_struct.a", "name": "aa"}),
    "nullable": lambda ds: ds.alter_columns({"path": "id", "nullable": True}),
    "cast": lambda ds: ds.alter_columns({"path": "c_int16", "data_type": pa.int64()}),
    "restore": lambda ds: (ds.delete("id > 10"), ds.restore(2)),
    "config": lambda ds: (ds.update_config({"a": "1"}), ds.update_metadata({"m": "2"}),
                          ds.update_schema_metadata({"s": "3"}),
                          ds.update_field_metadata({"id": {"f": "4"}})),
    "update": lambda ds: (ds.delete("id = 50"),
                          ds.update({"c_int32": "c_int32 + 1", "c_string": "upper(c_string)"},
                                    where="id < 100")),
    "cleanup": lambda ds: (ds.delete("id = 3"), ds.optimize.compact_files(),
                           ds.cleanup_old_versions(older_than=timedelta(0))),
}


@pytest.mark.parametrize("name", OURS)
def test_pylance_reads_what_we_changed(tmp_path: Path, tables, name: str) -> None:
    uri = _create(tmp_path, tables, "lance_sql")
    OURS[name](lance_sql.dataset(uri))
    _same(tables, uri, name)
    py = lance.dataset(uri)
    if name == "config":
        assert py.config() == {"a": "1"}
        assert py.schema.metadata == {b"s": b"3"}
        assert py.schema.field("id").metadata == {b"f": b"4"}
    # pylance can keep writing on top, and we read what it wrote
    row = lance_sql.dataset(uri).to_table().slice(0, 1)
    lance.write_dataset(row, uri, mode="append")
    _same(tables, uri, f"{name} + pylance append")
    _history_decodes(uri)


@pytest.mark.parametrize("shallow", [True, False])
def test_pylance_reads_our_clones(tmp_path: Path, tables, shallow: bool) -> None:
    uri = _create(tmp_path, tables, "lance_sql")
    ds = lance_sql.dataset(uri)
    ds.delete("id % 9 = 2")
    target = str(tmp_path / "clone.lance")
    clone = ds.clone(target, 3, shallow=shallow)
    tables.assert_equal(lance.dataset(target).to_table(), clone.to_table(), "clone")
    assert lance.dataset(target).version == 3
    lance.write_dataset(clone.to_table().slice(0, 2), target, mode="append")
    tables.assert_equal(lance_sql.dataset(target).to_table(), lance.dataset(target).to_table(),
                        "clone + append")


# --------------------------------------------------------------- pylance -> lance_sql
THEIRS: dict[str, Callable[[lance.LanceDataset], object]] = {
    "compact": lambda ds: (ds.delete("id % 5 = 0"), ds.optimize.compact_files()),
    "add_sql": lambda ds: ds.add_columns({"twice": "id * 2"}),
    "add_null": lambda ds: ds.add_columns(pa.field("nothing", pa.float64())),
    "drop": lambda ds: ds.drop_columns(["c_string", "c_struct"]),
    "rename": lambda ds: ds.alter_columns({"path": "c_int32", "name": "renamed"}),
    "cast": lambda ds: ds.alter_columns({"path": "c_int16", "data_type": pa.int64()}),
    "restore": lambda ds: (ds.delete("id > 10"), ds.checkout_version(2).restore()),
    "config": lambda ds: (ds.update_config({"a": "1"}), ds.update_metadata({"m": "2"}),
                          ds.update_schema_metadata({"s": "3"}),
                          ds.update_field_metadata({"id": {"f": "4"}}),
                          ds.delete_config_keys(["a"])),
    "update": lambda ds: ds.update({"c_int32": "c_int32 + 1"}, where="id < 100"),
    "cleanup": lambda ds: (ds.delete("id = 3"), ds.optimize.compact_files(),
                           ds.cleanup_old_versions(older_than=timedelta(0))),
    "index": lambda ds: (ds.create_scalar_index("id", "BTREE"), ds.delete("id = 4")),
}


@pytest.mark.parametrize("name", THEIRS)
def test_we_read_what_pylance_changed(tmp_path: Path, tables, name: str) -> None:
    uri = _create(tmp_path, tables, "pylance")
    THEIRS[name](lance.dataset(uri))
    _same(tables, uri, name)
    _history_decodes(uri)
    if name == "config":
        ds = lance_sql.dataset(uri)
        assert ds.config() == {} and ds.table_metadata == {"m": "2"}
        assert ds.schema.metadata == {b"s": b"3"}
    # and we can keep writing on top, which pylance reads
    ds = lance_sql.dataset(uri)
    ds.delete("id = 6")
    ds.optimize.compact_files()
    _same(tables, uri, f"{name} + our delete and compaction")


@pytest.mark.parametrize("shallow", [True, False])
def test_we_read_pylance_clones(tmp_path: Path, tables, shallow: bool) -> None:
    uri = _create(tmp_path, tables, "pylance")
    py = lance.dataset(uri)
    py.delete("id % 9 = 2")
    target = str(tmp_path / "clone.lance")
    (py.shallow_clone if shallow else py.deep_clone)(target, 3)
    tables.assert_equal(lance_sql.dataset(target).to_table(), lance.dataset(target).to_table(),
                        "clone")
    assert lance_sql.dataset(target).versions()[0]["operation"] == "clone"
    lance_sql.write_dataset(lance_sql.dataset(target).to_table().slice(0, 2), target,
                            mode="append")
    tables.assert_equal(lance_sql.dataset(target).to_table(), lance.dataset(target).to_table(),
                        "clone + our append")


def test_index_survives_our_changes(tmp_path: Path, tables) -> None:
    """pylance's BTREE index stays correct for pylance after our delete and compaction."""
    uri = _create(tmp_path, tables, "pylance")
    lance.dataset(uri).create_scalar_index("id", "BTREE")
    ds = lance_sql.dataset(uri)
    ds.delete("id = 17 or id = 100")
    ds.optimize.compact_files()
    lance_sql.write_dataset(ds.to_table().slice(0, 1), uri, mode="append")
    lance_sql.dataset(uri).cleanup_old_versions(older_than=timedelta(0))  # keeps index files
    py = lance.dataset(uri)
    assert len(py.describe_indices()) == 1
    for probe in (5, 17, 100, 150, 239):
        expected = lance_sql.dataset(uri).to_table(filter=f"id = {probe}")
        tables.assert_equal(py.to_table(filter=f"id = {probe}"), expected, f"id = {probe}")
