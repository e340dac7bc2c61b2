"""Maintenance operations on lance_sql tables: compaction, schema evolution, restore,
clone, config and metadata, cleanup."""

from __future__ import annotations

import os
import shutil
from datetime import timedelta
from pathlib import Path

import pyarrow as pa
import pytest

import lance_sql
from lance_sql.errors import InvalidInputError, NotFoundError, SchemaError, TaggedVersionError
from lance_sql.table.ops.maintenance import CompactionMetrics, plan_compaction


def _data(start: int, n: int) -> pa.Table:
    return pa.table({
        "id": pa.array(range(start, start + n), pa.int64()),
        "s": [None if i % 7 == 0 else f"s{i}" for i in range(start, start + n)],
        "st": pa.array([{"a": i, "b": f"b{i}"} for i in range(start, start + n)]),
    })


def _table(tmp_path: Path, fragments: int = 5, rows: int = 20) -> lance_sql.LanceDataset:
    uri = str(tmp_path / "t.lance")
    lance_sql.write_dataset(_data(0, rows), uri)
    for i in range(1, fragments):
        lance_sql.write_dataset(_data(i * rows, rows), uri, mode="append")
    return lance_sql.dataset(uri)


def _ops(ds: lance_sql.LanceDataset) -> list[str | None]:
    return [v["operation"] for v in ds.versions()]


# ------------------------------------------------------------------------------ compaction
def test_compaction_keeps_order_and_materialises_deletions(tmp_path: Path) -> None:
    ds = _table(tmp_path)
    ds.delete("id % 3 = 0")
    before = ds.to_table()
    metrics = ds.optimize.compact_files()
    assert metrics == CompactionMetrics(5, 1, 10, 1)  # (5 data, 5 deletion files: as pylance)
    assert ds.to_table() == before  # same rows, same order
    (frag,) = ds.manifest.fragments
    assert frag.deletion_file is None and frag.physical_rows == before.num_rows
    assert frag.id == 5  # reserved after 0-4
    assert _ops(ds)[-2:] == ["reserve_fragments", "rewrite"]
    assert lance_sql.dataset(ds.uri).to_table() == before


def test_compaction_keeps_indexed_and_unindexed_fragments_apart(tmp_path: Path) -> None:
    """As pylance plans it: a group mixing fragments an index covers with appended ones
    it does not left the index covering no fragment (a MemWAL merge appends such)."""
    import lance

    ds = _table(tmp_path, fragments=4)
    ds.create_scalar_index("id", "BTREE")
    for i in (4, 5):
        lance_sql.write_dataset(_data(i * 20, 20), ds.uri, mode="append")
    ds = lance_sql.dataset(ds.uri)
    ds.optimize.compact_files()
    ds = lance_sql.dataset(ds.uri)
    assert [f.count_rows() for f in ds.get_fragments()] == [80, 40]
    ours = [(d.name, d.num_rows_indexed) for d in ds.describe_indices()]
    theirs = [(d.name, d.num_rows_indexed) for d in lance.dataset(ds.uri).describe_indices()]
    assert ours == theirs == [("id_idx", 80)]
    assert ds.to_table(filter="id = 90")["id"].to_pylist() == [90]


def test_compaction_groups_only_adjacent_small_fragments(tmp_path: Path) -> None:
    ds = _table(tmp_path, fragments=2, rows=20)
    lance_sql.write_dataset(_data(100, 50), ds.uri, mode="append")  # a big one in between
    for i in range(2):
        lance_sql.write_dataset(_data(200 + 20 * i, 20), ds.uri, mode="append")
    ds = lance_sql.dataset(ds.uri)
    before = ds.to_table()
    metrics = ds.compact_files(target_rows_per_fragment=50)
    assert metrics.fragments_removed == 4 and metrics.fragments_added == 2
    assert [f.physical_rows for f in ds.manifest.fragments] == [40, 50, 40]
    assert ds.to_table() == before


def test_compaction_splits_at_the_target_and_reads_config(tmp_path: Path) -> None:
    ds = _table(tmp_path, fragments=6, rows=10)
    ds.update_config({"lance.compaction.target_rows_per_fragment": "25"})
    before = ds.to_table()
    ds.compact_files()
    # as pylance cuts and writes them: a group reaches the target, and the rest can too
    assert [f.physical_rows for f in ds.manifest.fragments] == [30, 30]
    assert ds.to_table() == before


def test_compaction_with_nothing_to_do(tmp_path: Path) -> None:
    ds = _table(tmp_path, fragments=1)
    assert ds.compact_files() == CompactionMetrics()
    assert ds.version == 1
    assert plan_compaction(ds.manifest, target_rows_per_fragment=10) == []


def test_compaction_drops_dropped_columns_from_files(tmp_path: Path) -> None:
    ds = _table(tmp_path, fragments=3)
    dropped = ds.lance_schema.field("s").id
    ds.drop_columns(["s"])
    ds.compact_files()
    (frag,) = ds.manifest.fragments
    assert dropped not in frag.files[0].fields
    assert set(frag.files[0].fields) <= {f.id for f in ds.lance_schema.walk()}
    assert ds.to_table().column_names == ["id", "st"]


def test_compaction_conflicts_with_a_concurrent_delete_cleanly(tmp_path: Path) -> None:
    ds = _table(tmp_path, fragments=3)
    stale = lance_sql.dataset(ds.uri)
    ctx = stale.write_context()
    lance_sql.dataset(ds.uri).delete("id = 5")
    before = set(os.listdir(os.path.join(ds.uri, "data")))
    stale.write_context = lambda: ctx  # type: ignore[method-assign]
    with pytest.raises(lance_sql.RetryableConflict):
        stale.compact_files()
    assert set(os.listdir(os.path.join(ds.uri, "data"))) == before
    assert lance_sql.dataset(ds.uri).count_rows() == 59


# --------------------------------------------------------------------------- add columns
def test_add_columns_from_sql(tmp_path: Path) -> None:
    ds = _table(tmp_path, fragments=2)
    ds.delete("id = 3")
    ds.add_columns({"double": "id * 2", "upper": "upper(s)", "flag": "id > 10"})
    t = ds.to_table()
    assert t.column_names == ["id", "s", "st", "double", "upper", "flag"]
    assert t["double"].to_pylist() == [i * 2 for i in t["id"].to_pylist()]
    assert t["upper"].to_pylist() == [None if v is None else v.upper()
                                      for v in t["s"].to_pylist()]
    assert ds.lance_schema.field("double").id == ds.lance_schema.max_field_id() - 2
    assert all(len(f.files) == 2 for f in ds.manifest.fragments)
    assert _ops(ds)[-1] == "merge"


def test_add_columns_from_aligned_arrow_data(tmp_path: Path) -> None:
    ds = _table(tmp_path, fragments=3)
    ds.delete("id % 4 = 1")
    ids = ds.to_table()["id"].to_pylist()
    values = pa.table({"neg": pa.array([-i for i in ids], pa.int64()),
                       "txt": [f"t{i}" for i in ids]})
    ds.add_columns(values)
    t = ds.to_table()
    assert t["neg"].to_pylist() == [-i for i in t["id"].to_pylist()]
    assert t["txt"].to_pylist() == [f"t{i}" for i in t["id"].to_pylist()]
    reader = pa.RecordBatchReader.from_batches(
        pa.schema([("z", pa.int32())]),
        [pa.record_batch({"z": pa.array(range(i, i + 5), pa.int32())})
         for i in range(0, len(ids), 5)])
    ds.add_columns(reader)
    assert ds.to_table()["z"].to_pylist() == list(range(len(ids)))


def test_add_columns_rejects_misaligned_data_and_leaves_nothing(tmp_path: Path) -> None:
    ds = _table(tmp_path, fragments=2)
    before = sorted(os.listdir(os.path.join(ds.uri, "data")))
    for n in (39, 41):
        with pytest.raises(InvalidInputError, match="rows than the table"):
            ds.add_columns(pa.table({"x": list(range(n))}))
    assert sorted(os.listdir(os.path.join(ds.uri, "data"))) == before
    assert ds.version == 2
    with pytest.raises(SchemaError, match="already exist"):
        ds.add_columns({"id": "id + 1"})
    with pytest.raises(NotFoundError):
        ds.add_columns({"x": "nope + 1"})


def test_add_null_columns_and_udf(tmp_path: Path) -> None:
    ds = _table(tmp_path, fragments=2)
    files = sorted(os.listdir(os.path.join(ds.uri, "data")))
    ds.add_columns(pa.field("empty", pa.float32()))
    ds.add_columns([pa.field("e2", pa.string()), pa.field("e3", pa.list_(pa.int8()))])
    assert sorted(os.listdir(os.path.join(ds.uri, "data"))) == files  # metadata only
    t = ds.to_table()
    assert t["empty"].null_count == t.num_rows and t.schema.field("e3").type == pa.list_(
        pa.int8())
    with pytest.raises(SchemaError):
        ds.add_columns(pa.field("strict", pa.int8(), nullable=False))

    def plus_one(batch: pa.RecordBatch) -> pa.RecordBatch:
        return pa.record_batch({"id1": pa.compute.add(batch["id"], 1)})

    ds.add_columns(plus_one, read_columns=["id"])
    t = ds.to_table()
    assert t["id1"].to_pylist() == [i + 1 for i in t["id"].to_pylist()]


# ----------------------------------------------------------------------- drop and alter
def test_drop_columns(tmp_path: Path) -> None:
    ds = _table(tmp_path, fragments=2)
    ds.drop_columns(["s", "st.b"])
    assert ds.schema == pa.schema([("id", pa.int64()), ("st", pa.struct([("a", pa.int64())]))])
    assert ds.to_table()["st"].to_pylist()[:2] == [{"a": 0}, {"a": 1}]
    assert _ops(ds)[-1] == "project"
    with pytest.raises(InvalidInputError):
        ds.drop_columns(["id", "st"])
    with pytest.raises(NotFoundError):
        ds.drop_columns(["nope"])
    ds.add_columns({"s": "id * 10"})  # a dropped name can come back, with a new id
    assert ds.to_table()["s"].to_pylist()[:3] == [0, 10, 20]


@pytest.mark.parametrize("how", ["sql", "null", "cast"])
def test_a_new_column_never_takes_a_dropped_columns_id(tmp_path: Path, how: str) -> None:
    """The last column dropped, then a column added (or one cast: a new id): its id is
    above the dropped one's, still held by the data files. It took that id and read the
    dropped values (pylance, and ours for an all-NULL column); pylance agrees now."""
    import lance

    uri = str(tmp_path / "t.lance")
    lance_sql.write_dataset(pa.table({"a": [1, 2], "v": [10, 20], "x": ["p", "q"]}), uri)
    ds = lance_sql.dataset(uri)
    ds.drop_columns(["x"])
    if how == "sql":
        ds.add_columns({"x": "'fresh'"})
        want = ["fresh", "fresh"]
    elif how == "null":
        ds.add_columns(pa.field("x", pa.string()))
        want = [None, None]
    else:
        ds.alter_columns({"path": "v", "data_type": pa.int32(), "name": "x"})
        want = [10, 20]
    fields = [(f.name, f.id) for f in lance_sql.dataset(uri).lance_schema.fields]
    assert fields == ([("a", 0), ("x", 3)] if how == "cast"
                      else [("a", 0), ("v", 1), ("x", 3)])
    assert lance_sql.dataset(uri).to_table().column("x").to_pylist() == want
    assert lance.dataset(uri).to_table().column("x").to_pylist() == want


def test_alter_columns(tmp_path: Path) -> None:
    ds = _table(tmp_path, fragments=2)
    ds.alter_columns({"path": "id", "name": "key", "nullable": False},
                     {"path": "st.a", "name": "alpha"})
    assert ds.schema.field("key").nullable is False
    assert ds.schema.field("st").type == pa.struct([("alpha", pa.int64()), ("b", pa.string())])
    with pytest.raises(InvalidInputError, match="NULL"):
        ds.alter_columns({"path": "s", "nullable": False})
    with pytest.raises(InvalidInputError, match="taken"):
        ds.alter_columns({"path": "s", "name": "key"})
    with pytest.raises(InvalidInputError):
        ds.alter_columns({"path": "s", "colour": "red"})
    before = ds.to_table()
    ds.alter_columns({"path": "key", "data_type": pa.int32()})
    after = ds.to_table()
    assert after.schema.field("key").type == pa.int32() and after.schema.names[0] == "key"
    assert after["key"].to_pylist() == before["key"].to_pylist()
    assert after.drop(["key"]) == before.drop(["key"])
    with pytest.raises(InvalidInputError, match="cast"):
        ds.alter_columns({"path": "s", "data_type": pa.int64()})


# ------------------------------------------------------------------------ restore/clone
def test_restore(tmp_path: Path) -> None:
    ds = _table(tmp_path, fragments=3)
    at_two = lance_sql.dataset(ds.uri, version=2).to_table()
    ds.delete("id < 50")
    ds.tags.create("two", 2)
    ds.restore(2)
    assert ds.version == 5 and ds.to_table() == at_two
    assert lance_sql.dataset(ds.uri).to_table() == at_two
    old = lance_sql.dataset(ds.uri, version=3)
    old.restore()
    assert old.version == 6 and lance_sql.dataset(ds.uri).count_rows() == 60
    ds.restore("two")
    assert ds.version == 7 and ds.to_table() == at_two
    lance_sql.write_dataset(_data(500, 1), ds.uri, mode="append")
    new_ids = [f.id for f in lance_sql.dataset(ds.uri).manifest.fragments]
    assert new_ids[-1] == 3  # after the high-water mark, never a reused id


@pytest.mark.parametrize("shallow", [True, False])
def test_clone(tmp_path: Path, shallow: bool) -> None:
    ds = _table(tmp_path, fragments=3)
    ds.delete("id = 4")
    expected = ds.to_table()
    ds.tags.create("t", ds.version)
    lance_sql.write_dataset(_data(900, 3), ds.uri, mode="append")
    target = str(tmp_path / "clone.lance")
    tagged = ds.version
    clone = ds.clone(target, "t", shallow=shallow)
    assert clone.version == tagged and clone.to_table() == expected
    assert _ops(clone) == ["clone"]
    lance_sql.write_dataset(_data(700, 2), target, mode="append")
    assert lance_sql.dataset(target).count_rows() == expected.num_rows + 2
    assert lance_sql.dataset(ds.uri).count_rows() == expected.num_rows + 3
    if shallow:
        assert clone.manifest.base_paths[0].path == os.path.abspath(ds.uri)
    else:
        shutil.rmtree(ds.uri)
        assert lance_sql.dataset(target, version=tagged).to_table() == expected
    with pytest.raises(InvalidInputError, match="exists"):
        lance_sql.dataset(target).clone(target)


# ------------------------------------------------------------------- config and metadata
def test_config_and_metadata(tmp_path: Path) -> None:
    ds = _table(tmp_path, fragments=1)
    assert ds.update_config({"a": "1", "b": "2"}) == {"a": "1", "b": "2"}
    assert ds.update_config({"a": None, "c": "3"}) == {"b": "2", "c": "3"}
    ds.delete_config_keys(["b"])
    assert ds.config() == {"c": "3"}
    assert ds.update_config({"z": "9"}, replace=True) == {"z": "9"}
    assert ds.update_metadata({"owner": "me"}) == {"owner": "me"}
    assert ds.update_schema_metadata({"k": "v"}) == {"k": "v"}
    ds.update_field_metadata({"st.a": {"unit": "m"}})
    assert ds.schema.field("st").type.field("a").metadata == {b"unit": b"m"}
    ds.replace_field_metadata("id", {"x": "y"})
    assert ds.schema.field("id").metadata == {b"x": b"y"}
    ds.replace_schema_metadata({"only": "this"})
    assert ds.schema.metadata == {b"only": b"this"}
    fresh = lance_sql.dataset(ds.uri)
    assert fresh.config() == {"z": "9"} and fresh.table_metadata == {"owner": "me"}
    with pytest.raises(InvalidInputError):
        ds.update_config({"a": 1})  # type: ignore[dict-item]
    with pytest.raises(NotFoundError):
        ds.update_field_metadata({"nope": {"a": "b"}})


# --------------------------------------------------------------------------------- cleanup
def test_cleanup_removes_old_versions_but_nothing_kept_versions_need(tmp_path: Path) -> None:
    ds = _table(tmp_path, fragments=3)
    ds.delete("id = 1")
    lance_sql.write_dataset(_data(100, 10), ds.uri, mode="overwrite")  # version 5
    lance_sql.write_dataset(_data(200, 10), ds.uri, mode="append")
    ds.tags.create("keep", 2)
    stats = lance_sql.dataset(ds.uri).cleanup_old_versions(older_than=timedelta(0),
        error_if_tagged_old_versions=False)
    assert stats.old_versions == 4 and stats.bytes_removed > 0
    assert [v["version"] for v in lance_sql.dataset(ds.uri).versions()] == [2, 6]
    assert lance_sql.dataset(ds.uri, version="keep").count_rows() == 40
    assert lance_sql.dataset(ds.uri).count_rows() == 20
    # exactly the files of versions 2 and 6 remain
    needed = set()
    for v in (2, 6):
        m = lance_sql.dataset(ds.uri, version=v)
        needed |= {d.path for f in m.manifest.fragments for d in f.files}
    assert set(os.listdir(os.path.join(ds.uri, "data"))) == needed
    assert len(os.listdir(os.path.join(ds.uri, "_transactions"))) == 2
    assert not os.path.exists(os.path.join(ds.uri, "_deletions")) or not os.listdir(
        os.path.join(ds.uri, "_deletions"))


def test_cleanup_respects_age_retain_and_tags(tmp_path: Path) -> None:
    ds = _table(tmp_path, fragments=4)
    assert ds.cleanup_old_versions().old_versions == 0  # default: two weeks
    for bad in ({"older_than": 7}, {"older_than": "7d"}, {"retain_versions": 2.5},
                {"retain_versions": True}):
        with pytest.raises(InvalidInputError, match="older_than|retain_versions"):
            ds.cleanup_old_versions(**bad)
    assert ds.cleanup_old_versions(retain_versions=3).old_versions == 1
    ds.tags.create("t", 2)
    for refusing in ({}, {"keep_tags": False}, {"error_if_tagged_old_versions": True}):
        with pytest.raises(TaggedVersionError, match="version 2 is tagged") as caught:
            ds.cleanup_old_versions(older_than=timedelta(0), **refusing)
        assert isinstance(caught.value, OSError)  # what pylance raises here
        assert [v["version"] for v in ds.versions()] == [2, 3, 4]  # nothing removed
    with pytest.raises(InvalidInputError, match="disagree"):
        ds.cleanup_old_versions(older_than=timedelta(0), keep_tags=True,
                                error_if_tagged_old_versions=True)
    assert ds.cleanup_old_versions(older_than=timedelta(0),
                                   keep_tags=True).old_versions == 1
    assert [v["version"] for v in ds.versions()] == [2, 4]


def test_cleanup_of_unverified_files(tmp_path: Path) -> None:
    ds = _table(tmp_path, fragments=2)
    stray = os.path.join(ds.uri, "data", "stray.lance")
    Path(stray).write_bytes(b"left by a crashed writer")
    ds.cleanup_old_versions(older_than=timedelta(0))
    assert os.path.exists(stray)
    ds.cleanup_old_versions(older_than=timedelta(0), delete_unverified=True)
    assert not os.path.exists(stray)
    assert ds.count_rows() == 40


# ----------------------------------------------------------------------------------- update
def test_update_rewrites_matching_rows(tmp_path: Path) -> None:
    ds = _table(tmp_path, fragments=3)
    ds.delete("id = 21")
    assert ds.update({"s": "upper(s)", "id": "id + 1000"}, where="id >= 18 and id < 24") == {
        "num_rows_updated": 5}
    t = ds.to_table()
    assert sorted(t["id"].to_pylist()) == sorted(
        [i for i in range(60) if not 18 <= i < 24] + [1018, 1019, 1020, 1022, 1023])
    changed = {r["id"]: r["s"] for r in t.to_pylist() if r["id"] >= 1000}
    assert changed[1018] == "S18" and changed[1022] == "S22"
    assert _ops(ds)[-1] == "update"
    assert ds.update({"s": "'x'"}, where="id < 0") == {"num_rows_updated": 0}
    assert ds.update({"s": "'all'"}) == {"num_rows_updated": 59}
    assert set(ds.to_table()["s"].to_pylist()) == {"all"}
    assert [f.num_rows for f in ds.manifest.fragments] == [59]  # old fragments fully removed
    with pytest.raises(NotFoundError):
        ds.update({"nope": "1"})
    with pytest.raises(InvalidInputError):
        ds.update({"id": "'not a number'"})


def test_compaction_counts_the_deletion_files_it_removes_as_pylance(tmp_path: Path) -> None:
    lance = pytest.importorskip("lance")
    data = pa.table({"id": pa.array(range(10), pa.int64())})
    counts = []
    for library, name in ((lance_sql, "ours"), (lance, "theirs")):
        ds = library.write_dataset(data, str(tmp_path / name), max_rows_per_file=4)
        ds.delete("id = 5")
        m = ds.optimize.compact_files()
        counts.append((m.fragments_removed, m.files_removed, m.files_added))
    assert counts[0] == counts[1] == (3, 4, 1)


def test_a_dotted_path_names_the_field_scans_read(tmp_path: Path) -> None:
    """``s`` holds a member named "a.b" and a struct ``a`` with member ``b``: scans read
    "s.a.b" as s -> a -> b (as pylance), and so do alter_columns and drop_columns now (they
    renamed or dropped the member "a.b", silently)."""
    inner = pa.StructArray.from_arrays([pa.array([7, 8])], names=["b"])
    st = pa.StructArray.from_arrays([pa.array([1, 2]), inner, pa.array([3, 4])],
                                    names=["a.b", "a", "c"])
    ds = lance_sql.write_dataset(pa.table({"id": [1, 2], "s": st}), tmp_path / "t.lance")
    assert ds.to_table(columns=["s.a.b"]).column(0).to_pylist() == [7, 8]
    ds.alter_columns({"path": "s.a.b", "name": "zz"})
    t = lance_sql.dataset(tmp_path / "t.lance").schema.field("s").type
    assert [f.name for f in t] == ["a.b", "a", "c"] and t.field("a").type.field(0).name == "zz"
    with pytest.raises(lance_sql.LanceError, match="struct 'a'"):
        ds.drop_columns(["s.a.zz"])  # (its only member: the struct must go instead)
    ds.drop_columns(["s.a"])
    assert lance_sql.dataset(tmp_path / "t.lance").to_table()["s"].to_pylist() == [
        {"a.b": 1, "c": 3}, {"a.b": 2, "c": 4}]
    ds.alter_columns({"path": "s.a.b", "name": "ab"})  # no struct a: the member itself
    assert [f.name for f in lance_sql.dataset(tmp_path / "t.lance").schema.field("s").type] \
        == ["ab", "c"]


def test_backquoted_segments_name_members_whose_names_hold_dots(tmp_path: Path) -> None:
    """pylance's ``s.`a.b``` names the member "a.b" of s in columns=, drop_columns and
    alter_columns (it was a NotFoundError; filters took it already)."""
    from lance_sql.format.schema import split_path

    assert split_path("s.`a.b`.c") == ("s", "a.b", "c")
    assert split_path("`x``y`.z") == ("x`y", "z")
    with pytest.raises(lance_sql.errors.InvalidInputError, match="backquote"):
        split_path("s.`a")
    st = pa.StructArray.from_arrays([pa.array([1, 2]), pa.array(["u", "v"])], names=["a.b", "z"])
    ds = lance_sql.write_dataset(pa.table({"id": [1, 2], "s": st}), tmp_path / "t.lance")
    assert ds.to_table(columns=["s.`a.b`"]).column(0).to_pylist() == [1, 2]
    assert ds.to_table(columns=["id"], filter="s.`a.b` = 2")["id"].to_pylist() == [2]
    ds.alter_columns({"path": "s.`a.b`", "name": "a.c"})
    ds.drop_columns(["s.`a.c`"])
    assert lance_sql.dataset(tmp_path / "t.lance").to_table()["s"].to_pylist() == [
        {"z": "u"}, {"z": "v"}]
