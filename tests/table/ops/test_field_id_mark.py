"""The field-id mark a drop records on a table with a MemWAL: one honest UpdateConfig
commit before the drop's Project, only when the drop lowers the table's highest id;
pylance keeps it, reads the table, and its own writes leave it; concurrent schema
changes and a MemWAL created while a drop commits never leave an id reusable."""

from __future__ import annotations

import itertools
from pathlib import Path

import lance
import pyarrow as pa
import pytest

import lance_sql
from lance_sql.errors import CommitConflict, RetryableConflict
from lance_sql.io import MemoryStore
from lance_sql.memwal import RegionSpec
from lance_sql.table.meta.field_ids import MAX_FIELD_ID_CONFIG

PK = {"lance-schema:unenforced-primary-key": "true"}
SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False, metadata=PK),
                    pa.field("a", pa.int64()), pa.field("b", pa.string())])  # ids 0, 1, 2
_names = itertools.count()


def _rows(ids: list[int]) -> pa.Table:
    return pa.table({"id": ids, "a": ids, "b": [f"b{i}" for i in ids]}, schema=SCHEMA)


def _ops(uri: str) -> list[str]:
    return [v["operation"] for v in lance_sql.dataset(uri).versions()]


def _ids(uri: str) -> dict[str, int]:
    return {f.name: f.id for f in lance_sql.dataset(uri).lance_schema.fields}


def _local(tmp_path: Path, mem_wal: bool = True) -> str:
    uri = str(tmp_path / "t.lance")
    lance_sql.write_dataset(_rows(list(range(10))), uri)
    lance_sql.write_dataset(_rows(list(range(10, 20))), uri, mode="append")
    if mem_wal:
        lance_sql.dataset(uri).initialize_mem_wal(RegionSpec.bucket("id", 2))
    return uri


def test_a_drop_of_the_highest_id_records_the_mark_first(tmp_path: Path) -> None:
    uri = _local(tmp_path)
    before = len(_ops(uri))
    lance_sql.dataset(uri).drop_columns(["a"])  # b (2) stays: nothing to record
    assert _ops(uri)[before:] == ["project"]
    lance_sql.dataset(uri).drop_columns(["b"])
    assert _ops(uri)[before + 1:] == ["update_config", "project"]
    assert lance_sql.dataset(uri).config() == {MAX_FIELD_ID_CONFIG: "2"}
    # pylance decodes both transactions and reads the same table and config
    theirs = lance.dataset(uri)
    mark, project = (theirs.read_transaction(v) for v in (theirs.version - 1, theirs.version))
    assert type(mark.operation).__name__ == "UpdateConfig"
    assert mark.operation.config_updates.updates == {MAX_FIELD_ID_CONFIG: "2"}
    assert type(project.operation).__name__ == "Project"
    assert theirs.config() == {MAX_FIELD_ID_CONFIG: "2"}
    assert lance.dataset(uri).to_table() == lance_sql.dataset(uri).to_table()


def test_a_table_without_a_mem_wal_drops_in_one_commit_as_pylance_does(tmp_path: Path
                                                                       ) -> None:
    uri = _local(tmp_path, mem_wal=False)
    before = len(_ops(uri))
    lance_sql.dataset(uri).drop_columns(["b"])
    assert _ops(uri)[before:] == ["project"]
    assert lance_sql.dataset(uri).config() == {}


def test_the_mark_survives_pylance_writes_and_pylance_reads_the_new_column(
        tmp_path: Path) -> None:
    """After the drop, pylance appends and compacts (the files lose id 2); our add still
    goes above the mark, and pylance reads the table as we do."""
    uri = _local(tmp_path)
    lance_sql.dataset(uri).drop_columns(["b"])
    lance.write_dataset(pa.table({"id": [50, 51], "a": [5, 5]},
                                 schema=lance.dataset(uri).schema), uri, mode="append")
    lance.dataset(uri).optimize.compact_files()
    assert {i for f in lance.dataset(uri).get_fragments() for d in f.data_files()
            for i in d.fields} == {0, 1}
    assert lance.dataset(uri).config() == {MAX_FIELD_ID_CONFIG: "2"}
    lance_sql.dataset(uri).add_columns({"c": "a * 2"})
    assert _ids(uri) == {"id": 0, "a": 1, "c": 3}
    ours, theirs = lance_sql.dataset(uri).to_table(), lance.dataset(uri).to_table()
    assert theirs.sort_by("id") == ours.sort_by("id")
    assert ours.sort_by("id")["c"].to_pylist()[-2:] == [10, 10]
    lance.write_dataset(pa.table({"id": [60], "a": [6], "c": [None]},
                                 schema=lance.dataset(uri).schema), uri, mode="append")
    assert lance_sql.dataset(uri).count_rows() == 23


def test_a_restore_to_before_a_column_existed_keeps_its_id_used(tmp_path: Path) -> None:
    """``b`` added after the MemWAL was set up (its writers may hold it), then the table
    restored to before it: like a drop, the restore keeps id 2 used."""
    uri = str(tmp_path / "t.lance")
    ds = lance_sql.write_dataset(_rows([1, 2]).drop_columns(["b"]), uri)
    ds.initialize_mem_wal(RegionSpec.bucket("id", 2))
    without_b = ds.version
    ds.add_columns({"b": "'x'"})
    ds.restore(without_b)
    assert lance_sql.dataset(uri).config() == {MAX_FIELD_ID_CONFIG: "2"}
    lance_sql.dataset(uri).add_columns(pa.field("c", pa.string()))
    assert _ids(uri) == {"id": 0, "a": 1, "c": 3}
    assert lance.dataset(uri).to_table() == lance_sql.dataset(uri).to_table()


# ------------------------------------------------------------------ interleavings
def _memory(mem_wal: bool) -> tuple[str, MemoryStore]:
    name = f"fieldmark{next(_names)}"
    MemoryStore.reset(name)
    uri = f"memory://{name}"
    lance_sql.write_dataset(_rows(list(range(20))), uri)
    if mem_wal:
        lance_sql.dataset(uri).initialize_mem_wal(RegionSpec.bucket("id", 2))
    return uri, MemoryStore(name)




def test_a_drop_racing_the_tables_first_mem_wal_is_retried(when_committing) -> None:
    """The drop read a table without a MemWAL (so it recorded no mark); one was set up
    before it committed, whose writers may hold the column: the drop must be redone,
    and then records the mark."""
    uri, store = _memory(mem_wal=False)
    loser = lance_sql.dataset(uri)
    when_committing(store, lambda: lance_sql.dataset(uri).initialize_mem_wal(None))
    with pytest.raises(RetryableConflict, match="MemWAL"):
        loser.drop_columns(["b"])
    store.clear_hooks()
    assert _ids(uri) == {"id": 0, "a": 1, "b": 2}
    lance_sql.dataset(uri).drop_columns(["b"])
    assert lance_sql.dataset(uri).config() == {MAX_FIELD_ID_CONFIG: "2"}


def test_a_drop_racing_a_higher_mark_keeps_the_higher_one(when_committing) -> None:
    """Another writer recorded a mark (a config key both set: a conflict) while our
    drop committed its own: ours reads the table again and, the recorded mark being
    higher, leaves it; the drop commits and new ids go above the higher mark."""
    uri, store = _memory(mem_wal=True)
    loser = lance_sql.dataset(uri)
    when_committing(store, lambda: lance_sql.dataset(uri).update_config(
        {MAX_FIELD_ID_CONFIG: "7"}))
    loser.drop_columns(["b"])
    store.clear_hooks()
    assert lance_sql.dataset(uri).config() == {MAX_FIELD_ID_CONFIG: "7"}
    lance_sql.dataset(uri).add_columns(pa.field("c", pa.string()))
    assert _ids(uri) == {"id": 0, "a": 1, "c": 8}


@pytest.mark.parametrize("first", ["add", "drop"])
def test_an_add_and_a_drop_at_once_never_share_an_id(first: str, when_committing) -> None:
    """Guard (the conflict rules): whichever commits first, the other fails, and no two
    columns the table had share an id."""
    uri, store = _memory(mem_wal=True)
    loser = lance_sql.dataset(uri)

    def add(ds: lance_sql.LanceDataset) -> None:
        ds.add_columns(pa.field("c", pa.string()))

    def drop(ds: lance_sql.LanceDataset) -> None:
        ds.drop_columns(["b"])

    winner, mine = (add, drop) if first == "add" else (drop, add)
    when_committing(store, lambda: winner(lance_sql.dataset(uri)))
    with pytest.raises(CommitConflict):
        mine(loser)
    store.clear_hooks()
    mine(lance_sql.dataset(uri))  # redone on the new version
    assert _ids(uri) == {"id": 0, "a": 1, "c": 3}
