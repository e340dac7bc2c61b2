"""Operations that change the schema, metadata, indices or history rather than rows.

Merge, Project, CreateIndex, Restore, Clone, UpdateConfig (with :class:`UpdateMap`),
UpdateMemWalState and UpdateBases; the row-level ones live in
:mod:`lance_sql.table.txn.operations`. Same shape as there: a frozen value, ``fill`` writes
its oneof member of a ``Transaction`` protobuf and ``from_proto`` reads it back.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from lance_sql.format.fragment import BasePath, Fragment
from lance_sql.format.index import IndexMetadata
from lance_sql.format.pb import memwal_pb2, transaction_pb2
from lance_sql.format.schema import LanceSchema

_Txn = transaction_pb2.Transaction


# ------------------------------------------------------------------------ schema changes
@dataclass(frozen=True)
class Merge:
    """New columns: every fragment is listed again, with the files holding them added."""

    fragments: tuple[Fragment, ...]
    schema: LanceSchema
    preserves_nullability: bool = False

    name = "merge"

    def fill(self, pb: _Txn) -> None:
        op = pb.merge
        op.fragments.extend(f.to_proto() for f in self.fragments)
        op.schema.extend(self.schema.to_protos())
        for key, value in self.schema.metadata.items():
            op.schema_metadata[key] = value
        op.preserves_nullability = self.preserves_nullability

    @classmethod
    def from_proto(cls, pb: _Txn.Merge) -> Merge:
        return cls(
            tuple(Fragment.from_proto(f) for f in pb.fragments),
            LanceSchema.from_protos(pb.schema, dict(pb.schema_metadata)),
            pb.preserves_nullability,
        )


@dataclass(frozen=True)
class Project:
    """A new schema over the same data: dropped, renamed or re-nullabled columns."""

    schema: LanceSchema
    preserves_nullability: bool = True

    name = "project"

    def fill(self, pb: _Txn) -> None:
        pb.project.schema.extend(self.schema.to_protos())
        pb.project.preserves_nullability = self.preserves_nullability

    @classmethod
    def from_proto(cls, pb: _Txn.Project) -> Project:
        # The Project message has no schema metadata; it is carried over when applied.
        return cls(LanceSchema.from_protos(pb.schema), pb.preserves_nullability)


# ------------------------------------------------------------------------------ indices
@dataclass(frozen=True)
class CreateIndex:
    """Add (or replace, by name) and remove index entries. Metadata only."""

    new_indices: tuple[IndexMetadata, ...]
    removed_indices: tuple[IndexMetadata, ...] = ()

    name = "create_index"

    def fill(self, pb: _Txn) -> None:
        pb.create_index.new_indices.extend(i.to_proto() for i in self.new_indices)
        pb.create_index.removed_indices.extend(i.to_proto() for i in self.removed_indices)

    @classmethod
    def from_proto(cls, pb: _Txn.CreateIndex) -> CreateIndex:
        return cls(
            tuple(IndexMetadata.from_proto(i) for i in pb.new_indices),
            tuple(IndexMetadata.from_proto(i) for i in pb.removed_indices),
        )


# ------------------------------------------------------------------------------ history
@dataclass(frozen=True)
class Restore:
    """Make an older version's content the newest version."""

    version: int

    name = "restore"

    def fill(self, pb: _Txn) -> None:
        pb.restore.version = self.version

    @classmethod
    def from_proto(cls, pb: _Txn.Restore) -> Restore:
        return cls(pb.version)


@dataclass(frozen=True)
class Clone:
    """Create a table from a version of another: shallow (via a base path) or deep (copied)."""

    is_shallow: bool
    ref_version: int
    ref_path: str
    ref_name: str | None = None
    branch_name: str | None = None

    name = "clone"

    def fill(self, pb: _Txn) -> None:
        op = pb.clone
        op.is_shallow = self.is_shallow
        op.ref_version = self.ref_version
        op.ref_path = self.ref_path
        if self.ref_name is not None:
            op.ref_name = self.ref_name
        if self.branch_name is not None:
            op.branch_name = self.branch_name

    @classmethod
    def from_proto(cls, pb: _Txn.Clone) -> Clone:
        return cls(
            is_shallow=pb.is_shallow,
            ref_version=pb.ref_version,
            ref_path=pb.ref_path,
            ref_name=pb.ref_name if pb.HasField("ref_name") else None,
            branch_name=pb.branch_name if pb.HasField("branch_name") else None,
        )


# ------------------------------------------------------------------------------- config
@dataclass(frozen=True)
class UpdateMap:
    """Edits to a string map: ``(key, value)`` sets, ``(key, None)`` deletes.

    With ``replace`` the map is first emptied, so only the entries with values remain.
    """

    entries: tuple[tuple[str, str | None], ...]
    replace: bool = False

    @classmethod
    def of(cls, values: Mapping[str, str | None], *, replace: bool = False) -> UpdateMap:
        return cls(tuple(values.items()), replace)

    def apply(self, current: Mapping[str, str]) -> dict[str, str]:
        out: dict[str, str] = {} if self.replace else dict(current)
        for key, value in self.entries:
            if value is None:
                out.pop(key, None)
            else:
                out[key] = value
        return out

    def apply_bytes(self, current: Mapping[str, bytes]) -> dict[str, bytes]:
        """The same edit on a ``str -> bytes`` map (schema and field metadata)."""
        as_text = {k: v.decode("utf-8", "surrogateescape") for k, v in current.items()}
        return {k: v.encode("utf-8", "surrogateescape") for k, v in self.apply(as_text).items()}

    @property
    def upserted(self) -> frozenset[str]:
        return frozenset(k for k, v in self.entries if v is not None)

    @property
    def deleted(self) -> frozenset[str]:
        return frozenset(k for k, v in self.entries if v is None)

    def fill(self, pb: _Txn.UpdateMap) -> None:
        pb.SetInParent()
        for key, value in self.entries:
            entry = pb.update_entries.add(key=key)
            if value is not None:
                entry.value = value
        pb.replace = self.replace

    @classmethod
    def from_proto(cls, pb: _Txn.UpdateMap) -> UpdateMap:
        return cls(
            tuple((e.key, e.value if e.HasField("value") else None) for e in pb.update_entries),
            pb.replace,
        )


@dataclass(frozen=True)
class UpdateConfig:
    """Edit the table config, table metadata, schema metadata or fields' metadata."""

    config_updates: UpdateMap | None = None
    table_metadata_updates: UpdateMap | None = None
    schema_metadata_updates: UpdateMap | None = None
    field_metadata_updates: Mapping[int, UpdateMap] = field(default_factory=dict)

    name = "update_config"

    def fill(self, pb: _Txn) -> None:
        op = pb.update_config
        op.SetInParent()
        for attr in ("config_updates", "table_metadata_updates", "schema_metadata_updates"):
            value = getattr(self, attr)
            if value is not None:
                value.fill(getattr(op, attr))
        for field_id, update in self.field_metadata_updates.items():
            update.fill(op.field_metadata_updates[field_id])

    @classmethod
    def from_proto(cls, pb: _Txn.UpdateConfig) -> UpdateConfig:
        def opt(name: str) -> UpdateMap | None:
            return UpdateMap.from_proto(getattr(pb, name)) if pb.HasField(name) else None

        new_style = (pb.HasField("config_updates") or pb.HasField("table_metadata_updates")
                     or pb.HasField("schema_metadata_updates") or len(pb.field_metadata_updates))
        if new_style:
            return cls(
                opt("config_updates"),
                opt("table_metadata_updates"),
                opt("schema_metadata_updates"),
                {k: UpdateMap.from_proto(v) for k, v in pb.field_metadata_updates.items()},
            )
        # Older writers: upserts and deletes of config keys, whole-map replacements otherwise.
        config = None
        if pb.upsert_values or pb.delete_keys:
            entries = tuple(pb.upsert_values.items()) + tuple((k, None) for k in pb.delete_keys)
            config = UpdateMap(entries)
        schema = UpdateMap(tuple(pb.schema_metadata.items()), True) if pb.schema_metadata else None
        fields = {k: UpdateMap(tuple(v.metadata.items()), True)
                  for k, v in pb.field_metadata.items()}
        return cls(config, None, schema, fields)


# ------------------------------------------------------------------------------- MemWAL
@dataclass(frozen=True)
class LegacyMemWal:
    """A lance 1.x MemWAL entry: its identity is (region, generation); the rest stays as
    bytes. Only the legacy UpdateMemWalState operation carries these."""

    region: str
    generation: int
    raw: bytes = field(default=b"", repr=False, compare=False)

    @classmethod
    def from_proto(cls, pb: memwal_pb2.LegacyMemWal) -> LegacyMemWal:
        return cls(pb.id.region, pb.id.generation, pb.SerializeToString())

    def to_proto(self) -> memwal_pb2.LegacyMemWal:
        pb = memwal_pb2.LegacyMemWal()
        if self.raw:
            pb.ParseFromString(self.raw)
        pb.id.region = self.region
        pb.id.generation = self.generation
        return pb


@dataclass(frozen=True)
class UpdateMemWalState:
    """Lance 1.x MemWAL bookkeeping, read from old tables: carried and conflict-checked;
    applying it changes nothing. MemWAL merges record their progress in an Update."""

    added: tuple[LegacyMemWal, ...] = ()
    updated: tuple[LegacyMemWal, ...] = ()
    removed: tuple[LegacyMemWal, ...] = ()

    name = "update_mem_wal_state"

    def fill(self, pb: _Txn) -> None:
        op = pb.update_mem_wal_state
        op.SetInParent()
        op.added.extend(m.to_proto() for m in self.added)
        op.updated.extend(m.to_proto() for m in self.updated)
        op.removed.extend(m.to_proto() for m in self.removed)

    @classmethod
    def from_proto(cls, pb: _Txn.UpdateMemWalState) -> UpdateMemWalState:
        return cls(
            tuple(LegacyMemWal.from_proto(m) for m in pb.added),
            tuple(LegacyMemWal.from_proto(m) for m in pb.updated),
            tuple(LegacyMemWal.from_proto(m) for m in pb.removed),
        )


# -------------------------------------------------------------------------------- bases
@dataclass(frozen=True)
class UpdateBases:
    """Register more base paths (roots that data files may live under)."""

    new_bases: tuple[BasePath, ...]

    name = "update_bases"

    def fill(self, pb: _Txn) -> None:
        pb.update_bases.SetInParent()
        pb.update_bases.new_bases.extend(b.to_proto() for b in self.new_bases)

    @classmethod
    def from_proto(cls, pb: _Txn.UpdateBases) -> UpdateBases:
        return cls(tuple(BasePath.from_proto(b) for b in pb.new_bases))
