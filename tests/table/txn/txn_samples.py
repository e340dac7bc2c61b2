"""One representative instance of every operation, for the pure transaction tests.

``BASE`` is a manifest (no files behind it) with fragments 0-3 and fields ``id`` (0) and
``s`` (1). ``ours(kind)`` touches fragment 1, field 1, config key ``k``, schema metadata,
field 1's metadata, MemWAL region 1's generation 1 and base path ``/b``;
``theirs(kind, overlap)`` touches the same things (``overlap=True``) or different ones
(fragment 2, field 0, key ``k2``, region 2's generation 2, base ``/c``).
``BASE_WITH_MEM_WAL`` adds a MemWAL index, which a merging Update records progress in.
"""

from __future__ import annotations

import uuid
from dataclasses import replace

import pyarrow as pa

from lance_sql.format.fragment import BasePath, DataFile, DeletionFile, Fragment
from lance_sql.format.index import IndexMetadata, encode_index_section
from lance_sql.format.manifest import Manifest
from lance_sql.format.memwal import MEM_WAL_INDEX_NAME, MemWalIndexDetails, with_details
from lance_sql.format.schema import LanceSchema
from lance_sql.table.txn.operations import (
    OPERATION_TYPES,
    Append,
    Clone,
    CreateIndex,
    DataReplacement,
    DataReplacementGroup,
    Delete,
    LegacyMemWal,
    Merge,
    MergedGeneration,
    Operation,
    Overwrite,
    Project,
    ReserveFragments,
    Restore,
    Rewrite,
    RewriteGroup,
    Update,
    UpdateBases,
    UpdateConfig,
    UpdateMap,
    UpdateMemWalState,
)

SCHEMA = LanceSchema.from_arrow(pa.schema([pa.field("id", pa.int64()),
                                           pa.field("s", pa.string())]))
KINDS = [t.__name__ for t in OPERATION_TYPES]


def data_file(name: str, fields: tuple[int, ...] = (0, 1)) -> DataFile:
    return DataFile(name, fields, tuple(range(len(fields))), 2, 0, 100)


def frag(frag_id: int, rows: int = 100) -> Fragment:
    return Fragment(frag_id, (data_file(f"f{frag_id}.lance"),), rows)


def deletion(n: int, version: int = 1, ident: int = 7) -> DeletionFile:
    return DeletionFile("arrow", version, ident, n)


MEM_WAL_INDEX = with_details(IndexMetadata.new(MEM_WAL_INDEX_NAME, [], 3, None),
                             MemWalIndexDetails().encode(), 3,
                             uuid.UUID("00000000-0000-0000-0000-0000000000aa"))
BASE = Manifest(schema=SCHEMA, fragments=tuple(frag(i) for i in range(4)), version=3,
                max_fragment_id=3, config={"k": "v0"})
BASE_WITH_MEM_WAL = replace(BASE, index_section=encode_index_section([MEM_WAL_INDEX]))


def _index(name: str, field: int, fragment: int) -> IndexMetadata:
    return IndexMetadata.new(name, [field], 3, [fragment],
                             index_uuid=f"00000000-0000-0000-0000-00000000000{field}")


def _with_column(frags: tuple[Fragment, ...]) -> tuple[Fragment, ...]:
    return tuple(replace(f, files=f.files + (data_file(f"c{f.id}.lance", (2,)),))
                 for f in frags)


def _operation(kind: str, f: int, field: int, key: str, region_gen: int, path: str,
               ident: int) -> Operation:
    """The representative ``kind`` operation touching fragment ``f`` and field ``field``."""
    target = BASE.fragments[f]
    added = SCHEMA.add_fields(pa.schema([pa.field(f"new{ident}", pa.int32())]))
    region = uuid.UUID(int=region_gen)  # overlapping samples share region and generation
    mem_wal = LegacyMemWal(str(region), region_gen)
    ops: dict[str, Operation] = {
        "Append": Append((frag(0, 10),)),
        "Delete": Delete((target.with_deletion(deletion(5, ident=ident)),), (), "id < 5"),
        "Overwrite": Overwrite((frag(0, 10),), SCHEMA, {key: "v"}),
        "CreateIndex": CreateIndex((_index(f"idx{ident}", field, f),)),
        "Rewrite": Rewrite((RewriteGroup((target,), (frag(10 + ident),)),)),
        "Merge": Merge(_with_column(BASE.fragments), added),
        "Restore": Restore(1),
        "ReserveFragments": ReserveFragments(2),
        "Update": Update(updated_fragments=(target.with_deletion(deletion(3, ident=ident)),),
                         new_fragments=(frag(0, 3),), fields_modified=(field,),
                         merged_generations=(MergedGeneration(region, region_gen),)),
        "Project": Project(LanceSchema(SCHEMA.fields[:1])),
        "DataReplacement": DataReplacement((DataReplacementGroup(
            f, data_file(f"r{ident}.lance", (field,))),)),
        "UpdateMemWalState": UpdateMemWalState(added=(mem_wal,)),
        "Clone": Clone(True, 1, "/src"),
        "UpdateBases": UpdateBases((BasePath(0, path, name=path.strip("/")),)),
    }
    if kind == "UpdateConfig":
        if ident == 1:  # ours: config, schema and field metadata
            return UpdateConfig(config_updates=UpdateMap.of({key: "v"}),
                                schema_metadata_updates=UpdateMap.of({"m": "1"}),
                                field_metadata_updates={field: UpdateMap.of({"f": "1"})})
        if path == "/b":  # theirs, overlapping
            return UpdateConfig(config_updates=UpdateMap.of({key: None}),
                                field_metadata_updates={field: UpdateMap.of({"g": "2"})})
        return UpdateConfig(config_updates=UpdateMap.of({key: "w"}),
                            table_metadata_updates=UpdateMap.of({"t": "1"}),
                            field_metadata_updates={field: UpdateMap.of({"g": "2"})})
    return ops[kind]


def ours(kind: str) -> Operation:
    return _operation(kind, 1, 1, "k", 1, "/b", 1)


def theirs(kind: str, overlap: bool) -> Operation:
    if overlap:
        return _operation(kind, 1, 1, "k", 1, "/b", 2)
    return _operation(kind, 2, 0, "k2", 2, "/c", 3)
