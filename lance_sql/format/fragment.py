"""Value objects for what a manifest lists: fragments, data files, deletion files, bases.

Each class converts to and from its protobuf message and nothing else; protobuf
stays at this edge. Fields the reference may add in newer versions (unknown to our
protos) are carried in ``unknown`` as raw wire bytes and written back unchanged, so
rewriting a manifest never loses what a newer writer stored.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Literal

from google.protobuf.message import Message
from google.protobuf.unknown_fields import UnknownFieldSet

from lance_sql.errors import FormatError
from lance_sql.format.pb import table_pb2

DATA_DIR = "data"
DELETIONS_DIR = "_deletions"
# Row offsets inside a fragment are u32 (a row address is ``fragment id << 32 | offset``),
# so no fragment can hold more rows than this; a larger claim is corrupt metadata.
MAX_PHYSICAL_ROWS = 1 << 32
MAX_FRAGMENT_ID = (1 << 32) - 1  # the high half of a row address


def unknown_fields(msg: Message) -> bytes:
    """Serialized bytes of the fields of ``msg`` that our protos do not declare."""
    if not len(UnknownFieldSet(msg)):  # the common case, checked without copying
        return b""
    probe = type(msg)()
    probe.CopyFrom(msg)
    for desc, _ in probe.ListFields():
        probe.ClearField(desc.name)
    return probe.SerializeToString()


@dataclass(frozen=True)
class ExternalFile:
    """A byte range inside another file (large row-id / version sequences)."""

    path: str
    offset: int
    size: int

    @classmethod
    def from_proto(cls, pb: table_pb2.ExternalFile) -> ExternalFile:
        return cls(pb.path, pb.offset, pb.size)

    def to_proto(self) -> table_pb2.ExternalFile:
        return table_pb2.ExternalFile(path=self.path, offset=self.offset, size=self.size)


@dataclass(frozen=True)
class DataFile:
    """One Lance file holding some columns of a fragment.

    ``fields[i]`` is a field id (``-2`` = tombstoned) stored at column
    ``column_indices[i]`` of the file.
    """

    path: str
    fields: tuple[int, ...]
    column_indices: tuple[int, ...]
    file_major_version: int
    file_minor_version: int
    file_size_bytes: int = 0
    base_id: int | None = None
    unknown: bytes = b""

    @property
    def key(self) -> str:
        """Object key relative to the base path."""
        return f"{DATA_DIR}/{self.path}"

    @property
    def version_string(self) -> str:
        if self.file_major_version == 0:
            return "0.1"
        return f"{self.file_major_version}.{self.file_minor_version}"

    @classmethod
    def from_proto(cls, pb: table_pb2.DataFile) -> DataFile:
        return cls(
            path=pb.path,
            fields=tuple(pb.fields),
            column_indices=tuple(pb.column_indices),
            file_major_version=pb.file_major_version,
            file_minor_version=pb.file_minor_version,
            file_size_bytes=pb.file_size_bytes,
            base_id=pb.base_id if pb.HasField("base_id") else None,
            unknown=unknown_fields(pb),
        )

    def to_proto(self) -> table_pb2.DataFile:
        pb = table_pb2.DataFile(
            path=self.path,
            fields=self.fields,
            column_indices=self.column_indices,
            file_major_version=self.file_major_version,
            file_minor_version=self.file_minor_version,
            file_size_bytes=self.file_size_bytes,
        )
        if self.base_id is not None:
            pb.base_id = self.base_id
        if self.unknown:
            pb.MergeFromString(self.unknown)
        return pb


DeletionKind = Literal["arrow", "bitmap"]


@dataclass(frozen=True)
class DeletionFile:
    """Pointer to a fragment's deletion vector (row offsets that are deleted)."""

    kind: DeletionKind
    read_version: int
    id: int
    num_deleted_rows: int
    base_id: int | None = None

    def key(self, fragment_id: int) -> str:
        ext = "arrow" if self.kind == "arrow" else "bin"
        return f"{DELETIONS_DIR}/{fragment_id}-{self.read_version}-{self.id}.{ext}"

    @classmethod
    def from_proto(cls, pb: table_pb2.DeletionFile) -> DeletionFile:
        kind: DeletionKind = "bitmap" if pb.file_type == pb.BITMAP else "arrow"
        return cls(
            kind=kind,
            read_version=pb.read_version,
            id=pb.id,
            num_deleted_rows=pb.num_deleted_rows,
            base_id=pb.base_id if pb.HasField("base_id") else None,
        )

    def to_proto(self) -> table_pb2.DeletionFile:
        pb = table_pb2.DeletionFile(
            file_type=(
                table_pb2.DeletionFile.BITMAP
                if self.kind == "bitmap"
                else table_pb2.DeletionFile.ARROW_ARRAY
            ),
            read_version=self.read_version,
            id=self.id,
            num_deleted_rows=self.num_deleted_rows,
        )
        if self.base_id is not None:
            pb.base_id = self.base_id
        return pb


# A per-fragment sequence (row ids, created-at / last-updated-at versions) is either
# inline protobuf bytes or a range of an external file.
Sequence = bytes | ExternalFile | None


def _read_sequence(pb: table_pb2.DataFragment, oneof: str) -> Sequence:
    which = pb.WhichOneof(oneof)
    if which is None:
        return None
    value = getattr(pb, which)
    if isinstance(value, bytes):
        return value
    return ExternalFile.from_proto(value)


def _write_sequence(pb: table_pb2.DataFragment, inline: str, external: str, seq: Sequence) -> None:
    if seq is None:
        return
    if isinstance(seq, ExternalFile):
        getattr(pb, external).CopyFrom(seq.to_proto())
    else:
        setattr(pb, inline, seq)


@dataclass(frozen=True)
class Fragment:
    """A horizontal slice of the table: data files, deletions and row lineage."""

    id: int
    files: tuple[DataFile, ...]
    physical_rows: int
    deletion_file: DeletionFile | None = None
    row_id_sequence: Sequence = None
    last_updated_at_version_sequence: Sequence = None
    created_at_version_sequence: Sequence = None
    unknown: bytes = field(default=b"", repr=False)

    @property
    def num_deleted_rows(self) -> int:
        return self.deletion_file.num_deleted_rows if self.deletion_file else 0

    @property
    def num_rows(self) -> int:
        """Rows visible after deletions."""
        return self.physical_rows - self.num_deleted_rows

    def with_id(self, fragment_id: int) -> Fragment:
        return replace(self, id=fragment_id)

    def with_deletion(self, deletion: DeletionFile | None) -> Fragment:
        return replace(self, deletion_file=deletion)

    def encoded(self) -> bytes:
        """``to_proto()`` serialized, computed once per (immutable) instance."""
        cached = self.__dict__.get("_encoded")
        if cached is None:
            cached = self.to_proto().SerializeToString()
            object.__setattr__(self, "_encoded", cached)
        return cached

    @classmethod
    def from_proto(cls, pb: table_pb2.DataFragment) -> Fragment:
        """The fragment ``pb`` describes; FormatError when its counts or paths cannot be
        true (checked here, before any of them sizes an allocation)."""
        _check_counts(pb)
        return cls(
            id=pb.id,
            files=tuple(DataFile.from_proto(f) for f in pb.files),
            physical_rows=pb.physical_rows,
            deletion_file=(
                DeletionFile.from_proto(pb.deletion_file) if pb.HasField("deletion_file") else None
            ),
            row_id_sequence=_read_sequence(pb, "row_id_sequence"),
            last_updated_at_version_sequence=_read_sequence(
                pb, "last_updated_at_version_sequence"
            ),
            created_at_version_sequence=_read_sequence(pb, "created_at_version_sequence"),
            unknown=unknown_fields(pb),
        )

    def to_proto(self) -> table_pb2.DataFragment:
        pb = table_pb2.DataFragment(
            id=self.id,
            files=[f.to_proto() for f in self.files],
            physical_rows=self.physical_rows,
        )
        if self.deletion_file is not None:
            pb.deletion_file.CopyFrom(self.deletion_file.to_proto())
        _write_sequence(pb, "inline_row_ids", "external_row_ids", self.row_id_sequence)
        _write_sequence(
            pb,
            "inline_last_updated_at_versions",
            "external_last_updated_at_versions",
            self.last_updated_at_version_sequence,
        )
        _write_sequence(
            pb,
            "inline_created_at_versions",
            "external_created_at_versions",
            self.created_at_version_sequence,
        )
        if self.unknown:
            pb.MergeFromString(self.unknown)
        return pb


def _check_counts(pb: table_pb2.DataFragment) -> None:
    where = f"fragment {pb.id}"
    if pb.id > MAX_FRAGMENT_ID:
        raise FormatError(f"{where}: a fragment id is at most {MAX_FRAGMENT_ID} (row "
                          "addresses hold it in 32 bits)")
    if pb.physical_rows > MAX_PHYSICAL_ROWS:
        raise FormatError(f"{where} claims {pb.physical_rows} rows; a fragment holds at most "
                          f"{MAX_PHYSICAL_ROWS} (row offsets are u32)")
    if pb.HasField("deletion_file") and pb.deletion_file.num_deleted_rows > pb.physical_rows:
        raise FormatError(f"{where} claims {pb.deletion_file.num_deleted_rows} deleted rows "
                          f"of {pb.physical_rows}")
    for data_file in pb.files:
        if not data_file.path or data_file.path.endswith("/"):
            raise FormatError(f"{where} lists a data file with an empty name "
                              f"({data_file.path!r})")


@dataclass(frozen=True)
class BasePath:
    """An extra root that data/deletion files may live under (shallow clones)."""

    id: int
    path: str
    is_dataset_root: bool = False
    name: str | None = None

    @classmethod
    def from_proto(cls, pb: table_pb2.BasePath) -> BasePath:
        return cls(
            id=pb.id,
            path=pb.path,
            is_dataset_root=pb.is_dataset_root,
            name=pb.name if pb.HasField("name") else None,
        )

    def to_proto(self) -> table_pb2.BasePath:
        pb = table_pb2.BasePath(id=self.id, path=self.path, is_dataset_root=self.is_dataset_root)
        if self.name is not None:
            pb.name = self.name
        return pb
