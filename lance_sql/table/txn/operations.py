"""Transactions as data: one frozen class per operation, plus the Transaction record.

Each operation converts to and from its protobuf oneof member; applying one to a
manifest is the pure function :func:`lance_sql.table.txn.apply.apply_transaction`, and
deciding whether it still holds after a concurrent commit is
:mod:`lance_sql.table.txn.conflicts`. This module holds the operations that add, remove or
rewrite rows (Append, Delete, Overwrite, Update, Rewrite, ReserveFragments,
DataReplacement); the schema, metadata and history ones are in
:mod:`lance_sql.table.txn.operations_meta` and re-exported here.
"""

from __future__ import annotations

import uuid as uuidlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from google.protobuf.message import DecodeError

from lance_sql.errors import FormatError, UnsupportedFeatureError
from lance_sql.format.fragment import BasePath, DataFile, Fragment
from lance_sql.format.index import IndexMetadata, uuid_from_bytes, uuid_to_bytes
from lance_sql.format.memwal import MergedGeneration
from lance_sql.format.pb import transaction_pb2
from lance_sql.format.schema import LanceSchema
from lance_sql.table.txn.operations_meta import (
    Clone,
    CreateIndex,
    LegacyMemWal,
    Merge,
    Project,
    Restore,
    UpdateBases,
    UpdateConfig,
    UpdateMap,
    UpdateMemWalState,
)

_Txn = transaction_pb2.Transaction

__all__ = [
    "Append", "Clone", "CreateIndex", "DataReplacement", "DataReplacementGroup", "Delete",
    "LegacyMemWal", "Merge", "MergedGeneration", "Operation", "Overwrite", "Project",
    "ReserveFragments", "Restore", "Rewrite", "RewriteGroup", "RewrittenIndex", "Transaction",
    "Update", "UpdateBases",
    "UpdateConfig", "UpdateMap", "UpdateMemWalState",
]


def _frags(pbs: object) -> tuple[Fragment, ...]:
    return tuple(Fragment.from_proto(f) for f in pbs)  # type: ignore[attr-defined]


@dataclass(frozen=True)
class Append:
    """Add fragments; their ids are assigned when the manifest is built."""

    fragments: tuple[Fragment, ...]

    name = "append"

    def fill(self, pb: _Txn) -> None:
        pb.append.SetInParent()
        pb.append.fragments.extend(f.to_proto() for f in self.fragments)

    @classmethod
    def from_proto(cls, pb: _Txn.Append) -> Append:
        return cls(_frags(pb.fragments))


@dataclass(frozen=True)
class Delete:
    """Replace fragments' deletion files and drop fully deleted fragments."""

    updated_fragments: tuple[Fragment, ...]
    deleted_fragment_ids: tuple[int, ...]
    predicate: str

    name = "delete"

    def fill(self, pb: _Txn) -> None:
        pb.delete.SetInParent()
        pb.delete.updated_fragments.extend(f.to_proto() for f in self.updated_fragments)
        pb.delete.deleted_fragment_ids.extend(self.deleted_fragment_ids)
        pb.delete.predicate = self.predicate

    @classmethod
    def from_proto(cls, pb: _Txn.Delete) -> Delete:
        return cls(_frags(pb.updated_fragments), tuple(pb.deleted_fragment_ids), pb.predicate)


@dataclass(frozen=True)
class Overwrite:
    """Replace all data (and possibly the schema); also how a table is created."""

    fragments: tuple[Fragment, ...]
    schema: LanceSchema
    config_upsert_values: Mapping[str, str] = field(default_factory=dict)
    initial_bases: tuple[BasePath, ...] = ()

    name = "overwrite"

    def fill(self, pb: _Txn) -> None:
        op = pb.overwrite
        op.SetInParent()
        op.fragments.extend(f.to_proto() for f in self.fragments)
        op.schema.extend(self.schema.to_protos())
        for key, value in self.schema.metadata.items():
            op.schema_metadata[key] = value
        for key, text in self.config_upsert_values.items():
            op.config_upsert_values[key] = text
        op.initial_bases.extend(b.to_proto() for b in self.initial_bases)

    @classmethod
    def from_proto(cls, pb: _Txn.Overwrite) -> Overwrite:
        return cls(
            fragments=_frags(pb.fragments),
            schema=LanceSchema.from_protos(pb.schema, dict(pb.schema_metadata)),
            config_upsert_values=dict(pb.config_upsert_values),
            initial_bases=tuple(BasePath.from_proto(b) for b in pb.initial_bases),
        )


UpdateMode = Literal["rewrite_rows", "rewrite_columns"]
_MODES: tuple[UpdateMode, UpdateMode] = ("rewrite_rows", "rewrite_columns")
_PB_MODES = (_Txn.REWRITE_ROWS, _Txn.REWRITE_COLUMNS)


@dataclass(frozen=True)
class Update:
    """Change values of existing rows.

    ``rewrite_rows``: the old rows are deleted (``updated_fragments`` carry the new
    deletion files, fully rewritten fragments are in ``removed_fragment_ids``) and the new
    versions of the rows are written to ``new_fragments``. ``rewrite_columns``: the
    ``updated_fragments`` gain a data file with the new column values and the old
    columns are tombstoned (field id -2) in their files.
    """

    removed_fragment_ids: tuple[int, ...] = ()
    updated_fragments: tuple[Fragment, ...] = ()
    new_fragments: tuple[Fragment, ...] = ()
    fields_modified: tuple[int, ...] = ()
    merged_generations: tuple[MergedGeneration, ...] = ()  # a MemWAL merge's progress
    fields_for_preserving_frag_bitmap: tuple[int, ...] = ()
    update_mode: UpdateMode = "rewrite_rows"

    name = "update"

    def fill(self, pb: _Txn) -> None:
        op = pb.update
        op.SetInParent()
        op.removed_fragment_ids.extend(self.removed_fragment_ids)
        op.updated_fragments.extend(f.to_proto() for f in self.updated_fragments)
        op.new_fragments.extend(f.to_proto() for f in self.new_fragments)
        op.fields_modified.extend(self.fields_modified)
        op.merged_generations.extend(m.to_proto() for m in self.merged_generations)
        op.fields_for_preserving_frag_bitmap.extend(self.fields_for_preserving_frag_bitmap)
        op.update_mode = _PB_MODES[_MODES.index(self.update_mode)]

    @classmethod
    def from_proto(cls, pb: _Txn.Update) -> Update:
        if pb.update_mode >= len(_MODES):
            raise UnsupportedFeatureError(f"unknown update mode {pb.update_mode}")
        return cls(
            removed_fragment_ids=tuple(pb.removed_fragment_ids),
            updated_fragments=_frags(pb.updated_fragments),
            new_fragments=_frags(pb.new_fragments),
            fields_modified=tuple(pb.fields_modified),
            merged_generations=tuple(MergedGeneration.from_proto(m)
                                     for m in pb.merged_generations),
            fields_for_preserving_frag_bitmap=tuple(pb.fields_for_preserving_frag_bitmap),
            update_mode=_MODES[pb.update_mode],
        )


@dataclass(frozen=True)
class RewriteGroup:
    """Old fragments replaced by new ones holding the same rows (ids reserved beforehand)."""

    old_fragments: tuple[Fragment, ...]
    new_fragments: tuple[Fragment, ...]


@dataclass(frozen=True)
class RewrittenIndex:
    """An index rebuilt for a rewrite: ``old_id`` is replaced by ``new_id``."""

    old_id: str
    new_id: str
    raw: bytes = field(default=b"", repr=False, compare=False)

    def to_proto(self) -> _Txn.Rewrite.RewrittenIndex:
        pb = _Txn.Rewrite.RewrittenIndex()
        if self.raw:
            pb.ParseFromString(self.raw)
        pb.old_id.uuid = uuid_to_bytes(self.old_id)
        pb.new_id.uuid = uuid_to_bytes(self.new_id)
        return pb

    @classmethod
    def from_proto(cls, pb: _Txn.Rewrite.RewrittenIndex) -> RewrittenIndex:
        return cls(uuid_from_bytes(pb.old_id.uuid), uuid_from_bytes(pb.new_id.uuid),
                   pb.SerializeToString())

    def applied_to(self, index: IndexMetadata) -> IndexMetadata:
        """``index`` (the old one) as the new index: new uuid, in the table's own
        directory, and the new details, version and files when the rewrite recorded
        them."""
        mine = self.to_proto()
        pb = index.to_proto()
        pb.uuid.uuid = uuid_to_bytes(self.new_id)
        if mine.HasField("new_index_details"):
            pb.index_details.CopyFrom(mine.new_index_details)
            pb.index_version = mine.new_index_version
        if mine.new_index_files:
            del pb.files[:]
            pb.files.extend(mine.new_index_files)
        # the new index's files are written beside the table being rewritten, not under
        # the base the old one came from (a shallow clone's source table)
        pb.ClearField("base_id")
        return IndexMetadata.from_proto(pb)


@dataclass(frozen=True)
class Rewrite:
    """Reorganise rows without changing them (compaction)."""

    groups: tuple[RewriteGroup, ...]
    rewritten_indices: tuple[RewrittenIndex, ...] = ()

    name = "rewrite"

    @property
    def old_fragment_ids(self) -> frozenset[int]:
        return frozenset(f.id for g in self.groups for f in g.old_fragments)

    def fill(self, pb: _Txn) -> None:
        op = pb.rewrite
        op.SetInParent()
        for group in self.groups:
            g = op.groups.add()
            g.old_fragments.extend(f.to_proto() for f in group.old_fragments)
            g.new_fragments.extend(f.to_proto() for f in group.new_fragments)
        op.rewritten_indices.extend(i.to_proto() for i in self.rewritten_indices)

    @classmethod
    def from_proto(cls, pb: _Txn.Rewrite) -> Rewrite:
        groups = [RewriteGroup(_frags(g.old_fragments), _frags(g.new_fragments))
                  for g in pb.groups]
        if pb.old_fragments or pb.new_fragments:  # the deprecated single-group form
            groups.append(RewriteGroup(_frags(pb.old_fragments), _frags(pb.new_fragments)))
        return cls(tuple(groups),
                   tuple(RewrittenIndex.from_proto(i) for i in pb.rewritten_indices))


@dataclass(frozen=True)
class ReserveFragments:
    """Raise ``max_fragment_id`` by ``num_fragments`` so a later Rewrite can use those ids."""

    num_fragments: int

    name = "reserve_fragments"

    def fill(self, pb: _Txn) -> None:
        pb.reserve_fragments.num_fragments = self.num_fragments

    @classmethod
    def from_proto(cls, pb: _Txn.ReserveFragments) -> ReserveFragments:
        return cls(pb.num_fragments)


@dataclass(frozen=True)
class DataReplacementGroup:
    """One replaced data file: which fragment, and the file with its new fields."""
    fragment_id: int
    new_file: DataFile


@dataclass(frozen=True)
class DataReplacement:
    """Swap the file holding some columns of some fragments for a new one."""

    replacements: tuple[DataReplacementGroup, ...]

    name = "data_replacement"

    def fill(self, pb: _Txn) -> None:
        op = pb.data_replacement
        op.SetInParent()
        for r in self.replacements:
            op.replacements.add(fragment_id=r.fragment_id, new_file=r.new_file.to_proto())

    @classmethod
    def from_proto(cls, pb: _Txn.DataReplacement) -> DataReplacement:
        return cls(tuple(DataReplacementGroup(r.fragment_id, DataFile.from_proto(r.new_file))
                         for r in pb.replacements))


Operation = (Append | Delete | Overwrite | CreateIndex | Rewrite | Merge | Restore
             | ReserveFragments | Update | Project | UpdateConfig | DataReplacement
             | UpdateMemWalState | Clone | UpdateBases)

# the operation classes: each has a ``name`` (its oneof field) and ``from_proto``
OPERATION_TYPES: tuple[Any, ...] = (
    Append, Delete, Overwrite, CreateIndex, Rewrite, Merge, Restore, ReserveFragments, Update,
    Project, UpdateConfig, DataReplacement, UpdateMemWalState, Clone, UpdateBases,
)
_DECODERS = {t.name: t for t in OPERATION_TYPES}


@dataclass(frozen=True)
class Transaction:
    """What one commit read and what it changed."""

    read_version: int
    operation: Operation
    uuid: str = field(default_factory=lambda: str(uuidlib.uuid4()))
    tag: str = ""
    properties: Mapping[str, str] = field(default_factory=dict)

    def to_proto(self) -> _Txn:
        pb = _Txn(
            read_version=self.read_version,
            uuid=self.uuid,
            tag=self.tag,
            transaction_properties=dict(self.properties),
        )
        self.operation.fill(pb)
        return pb

    def encode(self) -> bytes:
        return self.to_proto().SerializeToString()

    @classmethod
    def decode(cls, data: bytes, path: str) -> Transaction:
        pb = _Txn()
        try:
            pb.ParseFromString(data)
        except DecodeError as exc:
            raise FormatError(f"{path}: corrupt transaction ({exc})") from exc
        kind = pb.WhichOneof("operation")
        decoder = _DECODERS.get(kind or "")
        if decoder is None:
            raise UnsupportedFeatureError(
                f"{path}: transaction operation {kind!r} is not supported"
            )
        try:
            operation = decoder.from_proto(getattr(pb, kind))
        except (FormatError, ValueError) as exc:
            raise FormatError(f"{path}: {exc}") from exc
        return cls(
            read_version=pb.read_version,
            operation=operation,
            uuid=pb.uuid,
            tag=pb.tag,
            properties=dict(pb.transaction_properties),
        )

    @staticmethod
    def operation_name(data: bytes) -> str | None:
        """The oneof name of a serialized transaction (for history listings)."""
        pb = _Txn()
        try:
            pb.ParseFromString(data)
        except DecodeError:
            return None
        return pb.WhichOneof("operation")
