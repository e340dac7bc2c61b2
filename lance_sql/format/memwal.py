"""MemWAL metadata as values: region manifests, merge progress and the MemWAL index details.

Pure codecs (protobuf at the edge, no I/O). The MemWAL index is an entry named
``__lance_mem_wal`` in the manifest's index section whose ``index_details`` is a
``MemWalIndexDetails``; a region manifest is a raw ``RegionManifest`` protobuf file.
Unknown fields survive a decode/encode round trip (we keep the message bytes), so
metadata another implementation added is never lost when we rewrite it.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import TypeVar

from google.protobuf import any_pb2
from google.protobuf.message import DecodeError, Message

from lance_sql.errors import FormatError, IncompatibleConflict, InvalidInputError
from lance_sql.format.index import IndexMetadata
from lance_sql.format.pb import memwal_pb2, table_pb2
from lance_sql.format.region_spec import RegionSpec

__all__ = [
    "DETAILS_TYPE_URL", "MEM_WAL_INDEX_NAME", "FlushedGeneration", "IndexCatchupProgress",
    "MemWalIndexDetails", "MergedGeneration", "RegionManifest", "carry_progress", "details_of",
    "record_catchup", "record_merged", "with_details",
]

MEM_WAL_INDEX_NAME = "__lance_mem_wal"
DETAILS_TYPE_URL = "/lance.table.MemWalIndexDetails"


M = TypeVar("M", bound=Message)


def _parse(message: type[M], data: bytes, what: str) -> M:
    """``data`` parsed as ``message``; bytes that do not decode are a FormatError."""
    pb = message()
    try:
        pb.ParseFromString(data)
    except DecodeError as exc:
        raise FormatError(f"{what} ({exc})") from exc
    return pb


def _set_optional(pb: Message, name: str, value: object) -> None:
    """Set an optional field, or clear it for None."""
    if value is None:
        pb.ClearField(name)
    else:
        setattr(pb, name, value)


def _uuid_of(pb: table_pb2.UUID, what: str) -> uuid.UUID:
    if len(pb.uuid) != 16:
        raise FormatError(f"{what}: a region id must be 16 bytes, got {len(pb.uuid)}")
    return uuid.UUID(bytes=pb.uuid)


@dataclass(frozen=True, order=True)
class MergedGeneration:
    """The newest generation of ``region_id`` whose rows are in the base table."""

    region_id: uuid.UUID
    generation: int

    def to_proto(self) -> memwal_pb2.MergedGeneration:
        return memwal_pb2.MergedGeneration(region_id=table_pb2.UUID(uuid=self.region_id.bytes),
                                           generation=self.generation)

    @classmethod
    def from_proto(cls, pb: memwal_pb2.MergedGeneration) -> MergedGeneration:
        return cls(_uuid_of(pb.region_id, "merged generation"), pb.generation)


@dataclass(frozen=True)
class IndexCatchupProgress:
    """How far a base-table index has been rebuilt over merged generations, per region."""

    index_name: str
    caught_up: tuple[MergedGeneration, ...] = ()

    def generation_for(self, region_id: uuid.UUID) -> int | None:
        """The caught-up generation of a region; None: not tracked (fully caught up)."""
        return next((m.generation for m in self.caught_up if m.region_id == region_id), None)

    def to_proto(self) -> memwal_pb2.IndexCatchupProgress:
        return memwal_pb2.IndexCatchupProgress(
            index_name=self.index_name, caught_up_generations=[m.to_proto()
                                                               for m in self.caught_up])

    @classmethod
    def from_proto(cls, pb: memwal_pb2.IndexCatchupProgress) -> IndexCatchupProgress:
        return cls(pb.index_name, tuple(MergedGeneration.from_proto(m)
                                        for m in pb.caught_up_generations))


@dataclass(frozen=True)
class FlushedGeneration:
    """A flushed MemTable: generation and directory (relative to the region's root)."""

    generation: int
    path: str
    in_memory_bytes: int | None = None
    physical_rows: int | None = None
    primary_key_bytes: int | None = None

    def to_proto(self) -> memwal_pb2.FlushedGeneration:
        pb = memwal_pb2.FlushedGeneration(generation=self.generation, path=self.path)
        for name in ("in_memory_bytes", "physical_rows", "primary_key_bytes"):
            value = getattr(self, name)
            if value is not None:
                setattr(pb, name, value)
        return pb

    @classmethod
    def from_proto(cls, pb: memwal_pb2.FlushedGeneration) -> FlushedGeneration:
        def opt(name: str) -> int | None:
            return getattr(pb, name) if pb.HasField(name) else None

        return cls(pb.generation, pb.path, opt("in_memory_bytes"), opt("physical_rows"),
                   opt("primary_key_bytes"))


@dataclass(frozen=True)
class RegionManifest:
    """One version of a region's state; the region's own manifests are authoritative."""

    region_id: uuid.UUID
    version: int
    region_spec_id: int = 0
    writer_epoch: int = 0
    replay_after_wal_id: int = 0
    wal_id_last_seen: int = 0
    current_generation: int = 1
    flushed_generations: tuple[FlushedGeneration, ...] = ()
    region_values: bytes | None = None  # Arrow IPC, one row (see the .proto)
    raw: bytes = field(default=b"", repr=False, compare=False)

    def encode(self) -> bytes:
        pb = memwal_pb2.RegionManifest()
        if self.raw:
            pb.ParseFromString(self.raw)  # keep fields we do not model
        pb.region_id.uuid = self.region_id.bytes
        pb.version = self.version
        pb.region_spec_id = self.region_spec_id
        pb.writer_epoch = self.writer_epoch
        pb.replay_after_wal_id = self.replay_after_wal_id
        pb.wal_id_last_seen = self.wal_id_last_seen
        pb.current_generation = self.current_generation
        del pb.flushed_generations[:]
        pb.flushed_generations.extend(g.to_proto() for g in self.flushed_generations)
        _set_optional(pb, "region_values", self.region_values)
        return pb.SerializeToString()

    @classmethod
    def decode(cls, data: bytes, path: str) -> RegionManifest:
        pb = _parse(memwal_pb2.RegionManifest, data, f"{path}: not a region manifest")
        if pb.version < 1:
            raise FormatError(f"{path}: region manifest version {pb.version} (versions start "
                              "at 1)")
        generations = tuple(FlushedGeneration.from_proto(g) for g in pb.flushed_generations)
        numbers = [g.generation for g in generations]
        if numbers != sorted(set(numbers)) or any(n >= pb.current_generation for n in numbers):
            raise FormatError(f"{path}: flushed generations {numbers} are not increasing and "
                              f"below the current generation {pb.current_generation}")
        return cls(_uuid_of(pb.region_id, path), pb.version, pb.region_spec_id,
                   pb.writer_epoch, pb.replay_after_wal_id, pb.wal_id_last_seen,
                   pb.current_generation, generations,
                   pb.region_values if pb.HasField("region_values") else None, data)

    def evolve(self, **changes: object) -> RegionManifest:
        return replace(self, **changes)  # type: ignore[arg-type]


@dataclass(frozen=True)
class MemWalIndexDetails:
    """The MemWAL index: configuration, merge progress and a snapshot of the regions."""

    region_specs: tuple[RegionSpec, ...] = ()
    maintained_indexes: tuple[str, ...] = ()
    merged_generations: tuple[MergedGeneration, ...] = ()
    index_catchup: tuple[IndexCatchupProgress, ...] = ()
    writer_config_defaults: Mapping[str, str] = field(
        default_factory=lambda: MappingProxyType({}))
    snapshot_ts_millis: int = 0
    num_regions: int = 0
    inline_snapshots: bytes | None = None
    maintain_all_indexes: bool | None = None
    raw: bytes = field(default=b"", repr=False, compare=False)

    def merged_generation(self, region_id: uuid.UUID) -> int:
        """The last generation of a region merged into the base table (0: none yet)."""
        return max((m.generation for m in self.merged_generations
                    if m.region_id == region_id), default=0)

    def encode(self) -> bytes:
        pb = memwal_pb2.MemWalIndexDetails()
        if self.raw:
            pb.ParseFromString(self.raw)
        pb.snapshot_ts_millis = self.snapshot_ts_millis
        pb.num_regions = self.num_regions
        _set_optional(pb, "inline_snapshots", self.inline_snapshots)
        for name, values in (("region_specs", [s.to_proto() for s in self.region_specs]),
                             ("maintained_indexes", list(self.maintained_indexes)),
                             ("merged_generations",
                              [m.to_proto() for m in self.merged_generations]),
                             ("index_catchup", [c.to_proto() for c in self.index_catchup])):
            del getattr(pb, name)[:]
            getattr(pb, name).extend(values)
        pb.writer_config_defaults.clear()
        pb.writer_config_defaults.update(self.writer_config_defaults)
        _set_optional(pb, "maintain_all_indexes", self.maintain_all_indexes)
        return pb.SerializeToString()

    @classmethod
    def decode(cls, data: bytes, where: str) -> MemWalIndexDetails:
        pb = _parse(memwal_pb2.MemWalIndexDetails, data,
                    f"{where}: corrupt MemWAL index details")
        try:
            specs = tuple(RegionSpec.from_proto(s) for s in pb.region_specs)
        except InvalidInputError as exc:
            raise FormatError(f"{where}: a region spec lance_sql cannot use: {exc}") from exc
        return cls(
            region_specs=specs,
            maintained_indexes=tuple(pb.maintained_indexes),
            merged_generations=tuple(MergedGeneration.from_proto(m)
                                     for m in pb.merged_generations),
            index_catchup=tuple(IndexCatchupProgress.from_proto(c) for c in pb.index_catchup),
            writer_config_defaults=MappingProxyType(dict(pb.writer_config_defaults)),
            snapshot_ts_millis=pb.snapshot_ts_millis,
            num_regions=pb.num_regions,
            inline_snapshots=(pb.inline_snapshots if pb.HasField("inline_snapshots")
                              else None),
            maintain_all_indexes=(pb.maintain_all_indexes
                                  if pb.HasField("maintain_all_indexes") else None),
            raw=data,
        )

    def evolve(self, **changes: object) -> MemWalIndexDetails:
        return replace(self, **changes)  # type: ignore[arg-type]


def details_of(meta: IndexMetadata) -> bytes:
    """The raw ``MemWalIndexDetails`` bytes of the MemWAL index entry."""
    pb = meta.to_proto()
    if pb.index_details.type_url.rpartition("/")[2] != DETAILS_TYPE_URL.lstrip("/"):
        raise FormatError(f"index {meta.name!r}: details are {pb.index_details.type_url!r}, "
                          f"not {DETAILS_TYPE_URL!r}")
    return pb.index_details.value


def with_details(meta: IndexMetadata, details: bytes, dataset_version: int,
                 index_uuid: uuid.UUID | None = None) -> IndexMetadata:
    """The MemWAL index entry rewritten with new details, as of ``dataset_version``.

    The entry gets a new uuid, as the reference gives it whenever the details change.
    """
    pb = meta.to_proto()
    pb.uuid.uuid = (index_uuid or uuid.uuid4()).bytes
    pb.dataset_version = dataset_version
    pb.index_details.CopyFrom(any_pb2.Any(type_url=DETAILS_TYPE_URL, value=details))
    return IndexMetadata.from_proto(pb)


def record_merged(details: bytes, merged: Iterable[MergedGeneration], where: str, *,
                  strict: bool = True) -> bytes:
    """``details`` with each region's merge progress set to its generation in ``merged``.

    Only field 9 changes (other fields, ours or not, are kept byte for byte). A generation
    the details already count as merged is an IncompatibleConflict: whatever version a
    merger read, a generation is never merged twice (a later merge of an older generation
    would overwrite newer rows). Not ``strict``: progress is only ever raised.
    """
    pb = _parse(memwal_pb2.MemWalIndexDetails, details,
                f"{where}: corrupt MemWAL index details")
    progress = {MergedGeneration.from_proto(m).region_id: m.generation
                for m in pb.merged_generations}
    for m in merged:
        done = progress.get(m.region_id, 0)
        if m.generation <= done:
            if strict:
                raise IncompatibleConflict(
                    f"{where}: region {m.region_id} generation {m.generation} is already "
                    f"merged (merged up to generation {done})")
            continue
        progress[m.region_id] = m.generation
    del pb.merged_generations[:]
    pb.merged_generations.extend(MergedGeneration(r, g).to_proto()
                                 for r, g in sorted(progress.items()))
    return pb.SerializeToString()


def carry_progress(previous: bytes, new: bytes, where: str) -> bytes:
    """``new`` details with the merge and index catch-up progress of ``previous`` kept.

    Whoever replaces the MemWAL index entry (the index builder refreshing snapshots)
    computed its details from the version it read; merges committed since then must not
    be undone, so each region's progress is the larger of the two, per index too.
    """
    old = MemWalIndexDetails.decode(previous, where)
    merged = record_merged(new, old.merged_generations, where, strict=False)
    pb = _parse(memwal_pb2.MemWalIndexDetails, merged, f"{where}: corrupt MemWAL index details")
    catchup: dict[str, dict[uuid.UUID, int]] = {}
    for entry in (*old.index_catchup,
                  *(IndexCatchupProgress.from_proto(c) for c in pb.index_catchup)):
        regions = catchup.setdefault(entry.index_name, {})
        for m in entry.caught_up:
            regions[m.region_id] = max(regions.get(m.region_id, 0), m.generation)
    del pb.index_catchup[:]
    pb.index_catchup.extend(
        IndexCatchupProgress(name, tuple(MergedGeneration(r, g)
                                         for r, g in sorted(regions.items()))).to_proto()
        for name, regions in catchup.items())
    return pb.SerializeToString()


def record_catchup(details: bytes, index_names: Iterable[str], where: str) -> bytes:
    """``details`` with each named base-table index caught up to the merge progress the
    details record: the base index builder's step after rebuilding an index over the whole
    table. Only field 10 changes; progress is never lowered, and nothing is recorded while
    no generation has been merged (an index without an entry counts as caught up)."""
    pb = _parse(memwal_pb2.MemWalIndexDetails, details, f"{where}: corrupt MemWAL index details")
    merged = {MergedGeneration.from_proto(m).region_id: m.generation
              for m in pb.merged_generations}
    if not merged:
        return details
    catchup = {c.index_name: IndexCatchupProgress.from_proto(c) for c in pb.index_catchup}
    for name in index_names:
        old = catchup.get(name)
        regions = dict(merged)
        for m in old.caught_up if old is not None else ():
            regions[m.region_id] = max(regions.get(m.region_id, 0), m.generation)
        catchup[name] = IndexCatchupProgress(
            name, tuple(MergedGeneration(r, g) for r, g in sorted(regions.items())))
    del pb.index_catchup[:]
    pb.index_catchup.extend(c.to_proto() for c in catchup.values())
    return pb.SerializeToString()
