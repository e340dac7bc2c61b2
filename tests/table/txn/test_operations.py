"""Operations as data: protobuf round trips and the pure apply, without any files."""

from __future__ import annotations

import uuid
from dataclasses import replace

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st
from txn_samples import (
    BASE,
    BASE_WITH_MEM_WAL,
    KINDS,
    SCHEMA,
    data_file,
    deletion,
    frag,
    ours,
    theirs,
)

from lance_sql.errors import (
    FormatError,
    IncompatibleConflict,
    InvalidInputError,
    NotFoundError,
    UnsupportedFeatureError,
)
from lance_sql.format.fragment import BasePath
from lance_sql.format.index import IndexMetadata, decode_index_section, encode_index_section
from lance_sql.format.manifest import WRITER_LIBRARY, WRITER_VERSION, Manifest, ManifestCodec
from lance_sql.format.memwal import (
    MEM_WAL_INDEX_NAME,
    MemWalIndexDetails,
    MergedGeneration,
    details_of,
    record_merged,
)
from lance_sql.format.pb import memwal_pb2, transaction_pb2
from lance_sql.format.row_ids import encode_row_ids
from lance_sql.table.txn.apply import apply_transaction
from lance_sql.table.txn.operations import (
    Append,
    Clone,
    CreateIndex,
    DataReplacement,
    DataReplacementGroup,
    Delete,
    Merge,
    Overwrite,
    Project,
    ReserveFragments,
    Restore,
    Rewrite,
    RewriteGroup,
    Transaction,
    Update,
    UpdateBases,
    UpdateConfig,
    UpdateMap,
    UpdateMemWalState,
)


def _apply(op, previous: Manifest | None = BASE, **kw) -> Manifest:
    version = (previous.version if previous is not None else 0) + 1
    return apply_transaction(previous, Transaction(3, op), version, 123, **kw)


# ------------------------------------------------------------------------------ round trips
SAMPLES = [(k, v) for k in KINDS for v in ("ours", "overlap", "disjoint")]


@pytest.mark.parametrize(("kind", "variant"), SAMPLES)
def test_round_trip(kind: str, variant: str) -> None:
    op = ours(kind) if variant == "ours" else theirs(kind, variant == "overlap")
    txn = Transaction(7, op, tag="t", properties={"__lance_commit_message": "hi"})
    back = Transaction.decode(txn.encode(), "mem")
    assert back == txn
    assert back.encode() == txn.encode()
    assert Transaction.operation_name(txn.encode()) == op.name


def test_every_operation_has_its_oneof_member() -> None:
    names = {f.name for f in transaction_pb2.Transaction.DESCRIPTOR.oneofs_by_name[
        "operation"].fields}
    assert {ours(k).name for k in KINDS} == names


def test_empty_operations_round_trip() -> None:
    for op in (Append(()), UpdateMemWalState(), UpdateBases(()), UpdateConfig(),
               Rewrite(()), DataReplacement(()), Update()):
        txn = Transaction(1, op)
        assert Transaction.decode(txn.encode(), "mem") == txn


def test_legacy_update_config_is_translated() -> None:
    pb = transaction_pb2.Transaction(read_version=1, uuid="u")
    pb.update_config.upsert_values["a"] = "1"
    pb.update_config.delete_keys.append("b")
    pb.update_config.schema_metadata["m"] = "2"
    pb.update_config.field_metadata[1].metadata["f"] = "3"
    op = Transaction.decode(pb.SerializeToString(), "mem").operation
    assert op == UpdateConfig(UpdateMap((("a", "1"), ("b", None))), None,
                              UpdateMap((("m", "2"),), True), {1: UpdateMap((("f", "3"),), True)})


def test_legacy_rewrite_is_one_group() -> None:
    pb = transaction_pb2.Transaction(read_version=1, uuid="u")
    pb.rewrite.old_fragments.append(frag(1).to_proto())
    pb.rewrite.new_fragments.append(frag(9).to_proto())
    op = Transaction.decode(pb.SerializeToString(), "mem").operation
    assert op == Rewrite((RewriteGroup((frag(1),), (frag(9),)),))


def test_unknown_and_corrupt_transactions() -> None:
    with pytest.raises(UnsupportedFeatureError, match="None"):
        Transaction.decode(transaction_pb2.Transaction(uuid="u").SerializeToString(), "t.txn")
    with pytest.raises(FormatError, match="t.txn"):
        Transaction.decode(b"\xff\xff\xff", "t.txn")


@given(st.dictionaries(st.text(max_size=3), st.text(max_size=3), max_size=4),
       st.lists(st.tuples(st.text(max_size=3), st.none() | st.text(max_size=3)), max_size=5),
       st.booleans())
def test_update_map_semantics(start: dict, entries: list, replace_all: bool) -> None:
    update = UpdateMap(tuple(entries), replace_all)
    result = update.apply(start)
    expected = {} if replace_all else dict(start)
    for key, value in entries:
        if value is None:
            expected.pop(key, None)
        else:
            expected[key] = value
    assert result == expected
    pb = transaction_pb2.Transaction.UpdateMap()
    update.fill(pb)
    assert UpdateMap.from_proto(pb) == update


# ----------------------------------------------------------------------------------- apply
def test_append_assigns_ids_after_the_high_water_mark() -> None:
    m = _apply(Append((frag(0, 5), frag(0, 6))), replace(BASE, max_fragment_id=9))
    assert [f.id for f in m.fragments] == [0, 1, 2, 3, 10, 11]
    assert m.max_fragment_id == 11 and m.version == 4 and m.timestamp_ns == 123
    assert m.next_row_id == 0  # no stable row ids


def test_append_with_stable_row_ids_assigns_row_ids() -> None:
    base = replace(BASE, reader_feature_flags=2, writer_feature_flags=2, next_row_id=400)
    m = _apply(Append((frag(0, 5),)), base)
    assert m.fragments[-1].row_id_sequence == encode_row_ids(np.arange(400, 405))
    assert m.fragments[-1].created_at_version_sequence is not None
    assert m.next_row_id == 405 and m.uses_stable_row_ids


def test_delete_replaces_and_removes() -> None:
    updated = BASE.fragments[1].with_deletion(deletion(5))
    m = _apply(Delete((updated,), (2,), "x"))
    assert [f.id for f in m.fragments] == [0, 1, 3]
    assert m.fragments[1] == updated and m.reader_feature_flags & 1
    with pytest.raises(NotFoundError):
        _apply(Delete((), (42,), "x"))


def test_update_both_modes() -> None:
    rows = _apply(ours("Update"), BASE_WITH_MEM_WAL)
    assert [f.id for f in rows.fragments] == [0, 1, 2, 3, 4]
    assert rows.fragments[1].deletion_file is not None
    tomb = replace(BASE.fragments[1], files=(
        data_file("f1.lance", (0, -2)), data_file("new.lance", (1,))))
    cols = _apply(Update(updated_fragments=(tomb,), fields_modified=(1,),
                         update_mode="rewrite_columns"))
    assert cols.fragments[1] == tomb
    all_tomb = replace(BASE.fragments[2], files=(data_file("f2.lance", (-2, -2)),
                                                 data_file("n2.lance", (0, 1))))
    cleaned = _apply(Update(updated_fragments=(all_tomb,), update_mode="rewrite_columns"))
    assert [d.path for d in cleaned.fragments[2].files] == ["n2.lance"]  # tombstones only: gone


def test_overwrite_creates_and_replaces() -> None:
    created = _apply(Overwrite((frag(0, 3),), SCHEMA, {"a": "b"},
                               (BasePath(1, "/elsewhere"),)), None, data_format="2.0")
    assert created.version == 1 and created.config == {"a": "b"}
    assert created.base_paths == (BasePath(1, "/elsewhere"),) and created.reader_feature_flags & 16
    replaced = _apply(Overwrite((frag(0, 3),), SCHEMA, {"a": "b"}))
    assert [f.id for f in replaced.fragments] == [4] and replaced.config == {"k": "v0", "a": "b"}
    with pytest.raises(InvalidInputError):
        _apply(Overwrite((), SCHEMA, {}, (BasePath(1, "/x"),)))
    with pytest.raises(NotFoundError):
        _apply(Append(()), None)


def test_create_index_replaces_by_name_and_removes_by_uuid() -> None:
    a = IndexMetadata.new("a", [0], 3, [0, 1])
    b = IndexMetadata.new("b", [1], 3, [0])
    m = _apply(CreateIndex((a, b)))
    assert [i.name for i in decode_index_section(m.index_section)] == ["a", "b"]
    a2 = IndexMetadata.new("a", [0], 4, [0, 1, 2])
    m2 = _apply(CreateIndex((a2,), (b,)), m)
    assert decode_index_section(m2.index_section) == (a2,)
    m3 = _apply(CreateIndex((), (a2,)), m2)
    assert m3.index_section is None


def test_rewrite_replaces_in_place_with_reserved_ids() -> None:
    reserved = _apply(ReserveFragments(2))
    assert reserved.max_fragment_id == 5 and reserved.fragments == BASE.fragments
    group = RewriteGroup((BASE.fragments[1], BASE.fragments[2]), (frag(4, 150), frag(5, 50)))
    m = _apply(Rewrite((group,)), reserved)
    assert [f.id for f in m.fragments] == [0, 4, 5, 3]  # row order kept
    assert m.max_fragment_id == 5
    with pytest.raises(NotFoundError):
        _apply(Rewrite((RewriteGroup((frag(9),), (frag(4),)),)), reserved)


def test_rewrite_forgets_rewritten_fragments_in_indices() -> None:
    indexed = _apply(CreateIndex((IndexMetadata.new("a", [0], 3, [0, 1, 2]),)))
    group = RewriteGroup((BASE.fragments[1],), (frag(0, 100),))
    m = _apply(Rewrite((group,)), indexed)
    (index,) = decode_index_section(m.index_section)
    assert index.fragment_ids == {0, 2}


def test_merge_project_and_index_retention() -> None:
    indexed = _apply(CreateIndex((IndexMetadata.new("on_s", [1], 3, [0]),)))
    merged = _apply(ours("Merge"), indexed)
    assert [f.name for f in merged.schema.fields] == ["id", "s", "new1"]
    assert all(len(f.files) == 2 for f in merged.fragments)
    with pytest.raises(InvalidInputError, match="every fragment"):
        _apply(Merge(merged.fragments[:2], merged.schema), indexed)
    projected = _apply(Project(SCHEMA.project(["id"])), merged)
    assert [f.name for f in projected.schema.fields] == ["id"]
    assert all(len(f.files) == 1 for f in projected.fragments)  # files of s/new1 dropped
    assert projected.index_section is None  # the index on s went with it


def test_restore_keeps_high_water_marks() -> None:
    old = replace(BASE, version=1, fragments=BASE.fragments[:1], max_fragment_id=0,
                  config={"old": "1"})
    newer = replace(BASE, max_fragment_id=30)
    m = apply_transaction(newer, Transaction(3, Restore(1)), 4, 5, source=old)
    assert m.version == 4 and m.fragments == old.fragments and m.config == {"old": "1"}
    assert m.max_fragment_id == 30
    with pytest.raises(InvalidInputError):
        _apply(Restore(1))  # the restored manifest must be supplied


def test_update_config_every_map() -> None:
    m = _apply(ours("UpdateConfig"))
    assert m.config == {"k": "v"}
    assert m.schema.metadata == {"m": b"1"}
    assert m.schema.by_id(1).metadata == {"f": b"1"}
    assert m.writer_feature_flags & 8
    m2 = _apply(UpdateConfig(config_updates=UpdateMap((("z", "1"),), replace=True),
                             table_metadata_updates=UpdateMap.of({"t": "1"})), m)
    assert m2.config == {"z": "1"} and m2.table_metadata == {"t": "1"}
    with pytest.raises(InvalidInputError, match="99"):
        _apply(UpdateConfig(field_metadata_updates={99: UpdateMap.of({"a": "b"})}))


def test_data_replacement() -> None:
    m = _apply(DataReplacement((DataReplacementGroup(1, data_file("n.lance")),)))
    assert m.fragments[1].files[0].path == "n.lance"
    added = _apply(DataReplacement((DataReplacementGroup(2, data_file("x.lance", (7,))),)))
    assert [d.path for d in added.fragments[2].files] == ["f2.lance", "x.lance"]
    with pytest.raises(InvalidInputError):
        _apply(DataReplacement((DataReplacementGroup(1, data_file("f1.lance")),)))


def test_memwal_and_bases() -> None:
    assert _apply(UpdateMemWalState()).fragments == BASE.fragments
    m = _apply(UpdateBases((BasePath(0, "/b", name="b"), BasePath(0, "/c"))))
    assert [(b.id, b.path) for b in m.base_paths] == [(1, "/b"), (2, "/c")]
    with pytest.raises(InvalidInputError, match="clashes"):
        _apply(UpdateBases((BasePath(0, "/b"),)), m)


def test_shallow_clone_roots_files_in_the_source() -> None:
    source = replace(BASE, version=2, fragments=(BASE.fragments[0].with_deletion(deletion(1)),),
                     index_section=encode_index_section([IndexMetadata.new("a", [0], 2, [0])]))
    m = apply_transaction(None, Transaction(2, Clone(True, 2, "/src", "tag")), 2, 9,
                          source=source)
    assert m.version == 2 and m.base_paths == (BasePath(0, "/src", True, "tag"),)
    assert m.fragments[0].files[0].base_id == 0 and m.fragments[0].deletion_file.base_id == 0
    assert decode_index_section(m.index_section)[0].to_proto().base_id == 0
    assert m.reader_feature_flags & 16
    encoded = ManifestCodec.encode(m, None)
    assert ManifestCodec.decode(encoded, "m") == replace(m, unknown=b"")


def test_applying_never_reuses_fragment_ids() -> None:
    m = BASE
    seen = {f.id for f in m.fragments}
    for op in (Append((frag(0),)), Delete((), (0,), "x"), Append((frag(0), frag(0))),
               Overwrite((frag(0),), SCHEMA), Append((frag(0),))):
        m = _apply(op, m)
        new = {f.id for f in m.fragments} - seen
        assert all(i > max(seen) for i in new)
        seen |= new


def test_pylance_style_merge_schema_round_trip() -> None:
    schema = SCHEMA.add_fields(pa.schema([pa.field("c", pa.int64())]))
    txn = Transaction(2, Merge(BASE.fragments, schema, True))
    assert Transaction.decode(txn.encode(), "m") == txn


# ------------------------------------------------------------------- property: round trip
_u64 = st.integers(0, 2**64 - 1)
_data_files = st.builds(
    lambda path, fields, major, minor, size, base: data_file(path, tuple(fields)).__class__(
        path, tuple(fields), tuple(range(len(fields))), major, minor, size, base),
    st.text("abc0123456789", min_size=1, max_size=8), st.lists(st.integers(-2, 50), max_size=4),
    st.integers(0, 2), st.integers(0, 3), _u64, st.none() | st.integers(0, 5))
_deletions = st.none() | st.builds(
    lambda kind, v, i, n: deletion(n, v, i).__class__(kind, v, i, n),
    st.sampled_from(["arrow", "bitmap"]), _u64, _u64, _u64)
# Decoding refuses what cannot be true: more than 2**32 rows (offsets are u32), or more
# deleted rows than rows.
_fragments = st.builds(
    lambda i, files, rows, dele, seq: frag(0).__class__(
        i, tuple(files), rows,
        dele and replace(dele, num_deleted_rows=min(dele.num_deleted_rows, rows)), seq),
    st.integers(0, 2**32 - 1),  # (a fragment id: the high half of a row address)
    st.lists(_data_files, max_size=3), st.integers(0, 2**32), _deletions,
    st.none() | st.binary(max_size=8))
_frag_tuples = st.lists(_fragments, max_size=3).map(tuple)
_ops = st.one_of(
    st.builds(Append, _frag_tuples),
    st.builds(Delete, _frag_tuples, st.lists(_u64, max_size=3).map(tuple), st.text(max_size=10)),
    st.builds(lambda a, b: Rewrite((RewriteGroup(a, b),)), _frag_tuples, _frag_tuples),
    st.builds(lambda r, u, n, mode: Update(tuple(r), u, n, update_mode=mode),
              st.lists(_u64, max_size=3), _frag_tuples, _frag_tuples,
              st.sampled_from(["rewrite_rows", "rewrite_columns"])),
    st.builds(lambda i, d: DataReplacement((DataReplacementGroup(i, d),)), _u64, _data_files),
    st.builds(ReserveFragments, st.integers(0, 2**32 - 1)),
    st.builds(Restore, _u64),
)


@given(_ops, _u64, st.text(max_size=6))
def test_random_transactions_round_trip(op, read_version: int, tag: str) -> None:
    txn = Transaction(read_version, op, tag=tag)
    assert Transaction.decode(txn.encode(), "prop") == txn


def test_every_commit_names_lance_sql_as_its_writer() -> None:
    """The reference keys workarounds on the writer; a version we wrote must say it is ours."""
    reference = replace(BASE, writer_library="lance", writer_version="14.0.2")
    m = _apply(Append((frag(0, 5),)), reference)
    assert (m.writer_library, m.writer_version) == (WRITER_LIBRARY, WRITER_VERSION)


# ------------------------------------------------------------------------ MemWAL merges
def _mem_wal_details(m: Manifest) -> MemWalIndexDetails:
    (entry,) = [i for i in decode_index_section(m.index_section)
                if i.name == MEM_WAL_INDEX_NAME]
    return MemWalIndexDetails.decode(details_of(entry), "test")


def test_a_merging_update_records_its_progress_in_the_mem_wal_index() -> None:
    a, b = uuid.UUID(int=1), uuid.UUID(int=2)
    first = _apply(Update(new_fragments=(frag(0, 5),),
                          merged_generations=(MergedGeneration(a, 3),)), BASE_WITH_MEM_WAL)
    details = _mem_wal_details(first)
    assert details.merged_generation(a) == 3 and details.merged_generation(b) == 0
    (entry,) = decode_index_section(first.index_section)
    assert entry.dataset_version == first.version  # rewritten as of the merge's version
    (before,) = decode_index_section(BASE_WITH_MEM_WAL.index_section)
    assert entry.uuid == before.uuid  # it names the snapshot file's directory
    second = _apply(Update(merged_generations=(MergedGeneration(b, 1),
                                               MergedGeneration(a, 4))), first)
    assert _mem_wal_details(second).merged_generations == (MergedGeneration(a, 4),
                                                           MergedGeneration(b, 1))
    with pytest.raises(IncompatibleConflict, match="already merged"):  # never twice, never back
        _apply(Update(merged_generations=(MergedGeneration(a, 4),)), second)
    with pytest.raises(IncompatibleConflict, match="already merged"):
        _apply(Update(merged_generations=(MergedGeneration(a, 2),)), second)


def test_merge_progress_needs_a_mem_wal_index() -> None:
    with pytest.raises(InvalidInputError, match="no MemWAL index"):
        _apply(Update(merged_generations=(MergedGeneration(uuid.UUID(int=1), 1),)))


def test_merge_progress_keeps_fields_we_do_not_model() -> None:
    pb = memwal_pb2.MemWalIndexDetails(num_regions=3, maintained_indexes=["idx"])
    raw = pb.SerializeToString() + b"\xa0\x06\x2a"  # unknown field 100 = 42
    details = record_merged(raw, [MergedGeneration(uuid.UUID(int=9), 2)], "t")
    back = memwal_pb2.MemWalIndexDetails.FromString(details)
    assert back.num_regions == 3 and list(back.maintained_indexes) == ["idx"]
    assert b"\xa0\x06\x2a" in back.SerializeToString()
