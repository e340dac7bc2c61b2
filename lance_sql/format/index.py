"""Index metadata as a manifest lists it (``IndexSection``), kept as values plus raw bytes.

Index metadata must survive commits unchanged apart from what a rule edits (CreateIndex,
dropping indices whose fields vanished, forgetting fragments a rewrite replaced), so an
:class:`IndexMetadata` exposes the fields those rules and index readers need and keeps
the whole protobuf message as bytes. The index files themselves: :mod:`btree`.
"""

from __future__ import annotations

import uuid as uuidlib
from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import cached_property

from google.protobuf.message import DecodeError
from pyroaring import BitMap

from lance_sql.errors import FormatError
from lance_sql.format.pb import table_pb2


def uuid_from_bytes(raw: bytes) -> str:
    """An index uuid as text (hex when not 16 bytes)."""
    return str(uuidlib.UUID(bytes=raw)) if len(raw) == 16 else raw.hex()


def uuid_to_bytes(text: str) -> bytes:
    """The bytes of an index uuid given as text (inverse of :func:`uuid_from_bytes`)."""
    try:
        return uuidlib.UUID(text).bytes
    except ValueError:
        return bytes.fromhex(text)


@dataclass(frozen=True)
class IndexMetadata:
    """One index entry: identity, covered fields and covered fragments."""

    uuid: str
    name: str
    fields: tuple[int, ...]
    dataset_version: int
    fragment_ids: frozenset[int] | None  # None: the index does not record its fragments
    raw: bytes = field(default=b"", repr=False, compare=False)

    @classmethod
    def from_proto(cls, pb: table_pb2.IndexMetadata) -> IndexMetadata:
        fragment_ids = None
        if pb.fragment_bitmap:
            try:
                fragment_ids = frozenset(BitMap.deserialize(pb.fragment_bitmap))
            except Exception as exc:  # pyroaring raises several exception types
                raise FormatError(f"index {pb.name!r}: corrupt fragment bitmap ({exc})") from exc
        return cls(
            uuid=uuid_from_bytes(pb.uuid.uuid),
            name=pb.name,
            fields=tuple(pb.fields),
            dataset_version=pb.dataset_version,
            fragment_ids=fragment_ids,
            raw=pb.SerializeToString(),
        )

    def to_proto(self) -> table_pb2.IndexMetadata:
        pb = table_pb2.IndexMetadata()
        if self.raw:
            pb.ParseFromString(self.raw)
        pb.uuid.uuid = uuid_to_bytes(self.uuid)
        pb.name = self.name
        del pb.fields[:]
        pb.fields.extend(self.fields)
        pb.dataset_version = self.dataset_version
        if self.fragment_ids is None:
            pb.ClearField("fragment_bitmap")
        else:
            bitmap = BitMap(sorted(self.fragment_ids))
            bitmap.run_optimize()
            pb.fragment_bitmap = bitmap.serialize()
        return pb

    @cached_property
    def _pb(self) -> table_pb2.IndexMetadata:
        return self.to_proto()

    @property
    def type_url(self) -> str:
        """The Any type URL of ``index_details`` ("" when absent)."""
        return self._pb.index_details.type_url

    @property
    def base_id(self) -> int | None:
        return self._pb.base_id if self._pb.HasField("base_id") else None

    @property
    def index_version(self) -> int:
        return self._pb.index_version

    @property
    def created_at_ms(self) -> int | None:
        return self._pb.created_at if self._pb.HasField("created_at") else None

    @property
    def files(self) -> tuple[tuple[str, int], ...]:
        """(name, size) of the index files, when the writer recorded them."""
        return tuple((f.path, f.size_bytes) for f in self._pb.files)

    def with_fragments(self, fragment_ids: Iterable[int] | None) -> IndexMetadata:
        ids = None if fragment_ids is None else frozenset(fragment_ids)
        return IndexMetadata(self.uuid, self.name, self.fields, self.dataset_version, ids,
                             self.to_proto().SerializeToString())

    @classmethod
    def new(cls, name: str, fields: Iterable[int], dataset_version: int,
            fragment_ids: Iterable[int] | None, index_uuid: str | None = None) -> IndexMetadata:
        """A fresh entry (metadata only: no index files are written)."""
        meta = cls(index_uuid or str(uuidlib.uuid4()), name, tuple(fields), dataset_version,
                   None if fragment_ids is None else frozenset(fragment_ids))
        return cls.from_proto(meta.to_proto())


def decode_index_section(data: bytes | None, path: str = "") -> tuple[IndexMetadata, ...]:
    """The indices of a manifest's raw ``IndexSection`` (empty when there is none)."""
    if not data:
        return ()
    pb = table_pb2.IndexSection()
    try:
        pb.ParseFromString(data)
    except DecodeError as exc:
        raise FormatError(f"{path}: corrupt index section ({exc})") from exc
    return tuple(IndexMetadata.from_proto(i) for i in pb.indices)


def encode_index_section(indices: Iterable[IndexMetadata]) -> bytes | None:
    """Raw ``IndexSection`` bytes, or None when there are no indices (no section at all)."""
    items = list(indices)
    if not items:
        return None
    return table_pb2.IndexSection(indices=[i.to_proto() for i in items]).SerializeToString()
