"""The manifest: one immutable description of one table version.

File framing (little-endian), as the reference writes it::

    [u32 len][IndexSection]?   [u32 len][Transaction]   [u32 len][Manifest]
    [u64 manifest block offset][i16 major=0][i16 minor=2][b"LANC"]

``Manifest.index_section`` points at the index block, and field 23 (14.x; field 21
before) at the transaction block. :class:`ManifestCodec` is pure: bytes in, value
objects out, with every failure a :class:`FormatError` naming the file.
"""

from __future__ import annotations

import operator
import struct
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Any

from google.protobuf.message import DecodeError

from lance_sql.errors import FormatError
from lance_sql.format.feature_flags import check_readable
from lance_sql.format.fragment import BasePath, Fragment, unknown_fields
from lance_sql.format.pb import table_pb2
from lance_sql.format.schema import LanceSchema

MAGIC = b"LANC"
FOOTER = struct.Struct("<Qhh4s")
MANIFEST_MAJOR, MANIFEST_MINOR = 0, 2
# We name ourselves honestly; the reference only applies its version-specific
# workarounds when the library is "lance", so other writers are read as-is.
WRITER_LIBRARY = "lance_sql"
WRITER_VERSION = "0.1.0"

_EMPTY: Mapping = MappingProxyType({})
_FRAGMENTS_TAG = bytes([2 << 3 | 2])  # Manifest.fragments: field 2, length-delimited


def _varint(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


class _FragmentCache:
    """Decoded fragments by their serialized bytes (immutable values), bounded by count
    and by the bytes of the keys (a fragment with an inline row-id sequence encodes to
    hundreds of KB; every update of a stable-row-id table makes new ones).

    Consecutive versions share almost all fragments, so decoding the next manifest
    mostly finds its fragments here instead of rebuilding them. Full, it starts over.
    """

    def __init__(self, capacity: int = 20_000, max_bytes: int = 64 << 20) -> None:
        self._items: dict[bytes, Fragment] = {}
        self._lock = threading.Lock()
        self._capacity = capacity
        self._max_bytes = max_bytes
        self._bytes = 0

    def __len__(self) -> int:
        return len(self._items)

    @property
    def nbytes(self) -> int:
        """The bytes of the keys held."""
        return self._bytes

    def get(self, pb: table_pb2.DataFragment) -> Fragment:
        key = pb.SerializeToString()
        found = self._items.get(key)
        if found is not None:
            return found
        frag = Fragment.from_proto(pb)
        object.__setattr__(frag, "_encoded", key)
        if len(key) > self._max_bytes // 16:
            return frag  # one such would crowd out the rest
        with self._lock:
            if len(self._items) >= self._capacity or self._bytes + len(key) > self._max_bytes:
                self._items.clear()
                self._bytes = 0
            if key not in self._items:
                self._items[key] = frag
                self._bytes += len(key)
        return frag


_fragment = _FragmentCache().get


# (C-level iteration over the fragments: no Python frame per fragment)
_PHYSICAL_ROWS = operator.attrgetter("physical_rows")
_DELETION = operator.attrgetter("deletion_file")
_DELETED_ROWS = operator.attrgetter("num_deleted_rows")


@dataclass(frozen=True)
class Manifest:
    """Everything a reader needs to know about one version."""

    schema: LanceSchema
    fragments: tuple[Fragment, ...]
    version: int
    data_format: str = "2.0"
    timestamp_ns: int = 0
    tag: str = ""
    reader_feature_flags: int = 0
    writer_feature_flags: int = 0
    max_fragment_id: int | None = None
    transaction_file: str = ""
    next_row_id: int = 0
    config: Mapping[str, str] = field(default_factory=dict)
    table_metadata: Mapping[str, str] = field(default_factory=dict)
    base_paths: tuple[BasePath, ...] = ()
    branch: str | None = None
    writer_library: str = WRITER_LIBRARY
    writer_version: str = WRITER_VERSION
    version_aux_data: int = 0
    index_section: bytes | None = field(default=None, repr=False)  # raw IndexSection
    unknown: bytes = field(default=b"", repr=False)

    # The row counts are sums over every fragment, asked for on every count_rows(), take
    # and versions(): each is summed once per manifest and kept beside the fields (a
    # manifest never changes; evolve() makes a new one, which sums its own). Threads that
    # race compute the same number, so whichever store lands is right.
    @property
    def num_rows(self) -> int:
        """Rows visible after deletions, over every fragment."""
        return self._kept("_num_rows", lambda: self.physical_rows - self.num_deleted_rows)

    @property
    def physical_rows(self) -> int:
        """Rows in the data files, deleted ones included, over every fragment."""
        return self._kept("_physical_rows",
                          lambda: sum(map(_PHYSICAL_ROWS, self.fragments)))

    @property
    def num_deleted_rows(self) -> int:
        """Rows the fragments' deletion files delete."""
        return self._kept("_num_deleted_rows", lambda: sum(
            map(_DELETED_ROWS, filter(None, map(_DELETION, self.fragments)))))

    def _kept(self, name: str, compute: Callable[[], int]) -> int:
        """The sum kept under ``name``, computed on first use."""
        found = self.__dict__.get(name)
        if found is None:
            found = compute()
            object.__setattr__(self, name, found)
        return found

    @property
    def uses_stable_row_ids(self) -> bool:
        return bool(self.reader_feature_flags & 2)

    def next_fragment_id(self) -> int:
        return 0 if self.max_fragment_id is None else self.max_fragment_id + 1

    def evolve(self, **changes: Any) -> Manifest:
        """A copy with ``changes`` (field name -> new value)."""
        return replace(self, **changes)


class ManifestCodec:
    """Encode/decode framed manifest files."""

    @staticmethod
    def to_proto(m: Manifest) -> table_pb2.Manifest:
        pb = table_pb2.Manifest(
            fields=m.schema.to_protos(),
            fragments=[f.to_proto() for f in m.fragments],
            version=m.version,
            version_aux_data=m.version_aux_data,
            tag=m.tag,
            reader_feature_flags=m.reader_feature_flags,
            writer_feature_flags=m.writer_feature_flags,
            transaction_file=m.transaction_file,
            next_row_id=m.next_row_id,
            config=dict(m.config),
            table_metadata=dict(m.table_metadata),
            base_paths=[b.to_proto() for b in m.base_paths],
        )
        for key, value in m.schema.metadata.items():
            pb.schema_metadata[key] = value
        pb.timestamp.seconds, pb.timestamp.nanos = divmod(m.timestamp_ns, 1_000_000_000)
        pb.writer_version.library = m.writer_library
        pb.writer_version.version = m.writer_version
        pb.data_format.file_format = "lance"
        pb.data_format.version = m.data_format
        if m.max_fragment_id is not None:
            pb.max_fragment_id = m.max_fragment_id
        if m.branch is not None:
            pb.branch = m.branch
        if m.unknown:
            pb.MergeFromString(m.unknown)
        return pb

    @staticmethod
    def from_proto(pb: table_pb2.Manifest, index_section: bytes | None = None) -> Manifest:
        if pb.version >= 2**63:  # (row versions and change plans count in int64)
            raise FormatError(f"version {pb.version} is past the largest version a table "
                              "can have (2**63 - 1)")
        schema = LanceSchema.from_protos(pb.fields, dict(pb.schema_metadata))
        fragments = tuple(_fragment(f) for f in pb.fragments)
        if len({f.id for f in fragments}) != len(fragments):
            ids = sorted(f.id for f in fragments)
            twice = next(a for a, b in zip(ids, ids[1:], strict=False) if a == b)
            raise FormatError(f"version {pb.version} lists fragment {twice} twice (a "
                              "fragment id names one fragment)")
        # Only undeclared fields are kept as ``unknown``; the declared section offsets
        # describe the old file's layout and are recomputed by the encoder.
        return Manifest(
            schema=schema,
            fragments=fragments,
            version=pb.version,
            data_format=pb.data_format.version or "0.1",
            timestamp_ns=pb.timestamp.seconds * 1_000_000_000 + pb.timestamp.nanos,
            tag=pb.tag,
            reader_feature_flags=pb.reader_feature_flags,
            writer_feature_flags=pb.writer_feature_flags,
            max_fragment_id=pb.max_fragment_id if pb.HasField("max_fragment_id") else None,
            transaction_file=pb.transaction_file,
            next_row_id=pb.next_row_id,
            config=dict(pb.config),
            table_metadata=dict(pb.table_metadata),
            base_paths=tuple(BasePath.from_proto(b) for b in pb.base_paths),
            branch=pb.branch if pb.HasField("branch") else None,
            writer_library=pb.writer_version.library,
            writer_version=pb.writer_version.version,
            version_aux_data=pb.version_aux_data,
            index_section=index_section,
            unknown=unknown_fields(pb),
        )

    @classmethod
    def encode(cls, manifest: Manifest, transaction: bytes | None) -> bytes:
        """Frame ``manifest`` with its inline transaction (and index section, if any).

        Fragments are appended to the protobuf body as already-serialized field-2
        records (protobuf accepts fields in any order), each encoded once per Fragment
        instance, so a commit re-encodes only the fragments it changed.
        """
        pb = cls.to_proto(replace(manifest, fragments=()))
        out = bytearray()
        if manifest.index_section is not None:
            pb.index_section = 0
            out += struct.pack("<I", len(manifest.index_section)) + manifest.index_section
        if transaction is not None:
            pb.transaction_section = len(out)
            out += struct.pack("<I", len(transaction)) + transaction
        manifest_pos = len(out)
        body = bytearray(pb.SerializeToString())
        for frag in manifest.fragments:
            data = frag.encoded()
            body += _FRAGMENTS_TAG + _varint(len(data)) + data
        out += struct.pack("<I", len(body)) + body
        out += FOOTER.pack(manifest_pos, MANIFEST_MAJOR, MANIFEST_MINOR, MAGIC)
        return bytes(out)

    @classmethod
    def decode(cls, data: bytes, path: str, *, check_flags: bool = True) -> Manifest:
        """Parse a framed manifest; ``path`` names the file in errors."""
        pb = cls._decode_block(data, path, cls._manifest_offset(data, path), table_pb2.Manifest)
        index_section = None
        if pb.HasField("index_section"):
            index_section = cls._block(data, path, pb.index_section)
        if check_flags:
            check_readable(pb.reader_feature_flags, path)
        try:
            return cls.from_proto(pb, index_section)
        except FormatError as exc:
            raise FormatError(f"{path}: {exc}") from exc

    @classmethod
    def decode_transaction(cls, data: bytes, path: str) -> bytes | None:
        """Raw inline Transaction bytes, or None if the manifest carries none."""
        pb = cls._decode_block(data, path, cls._manifest_offset(data, path), table_pb2.Manifest)
        if pb.HasField("transaction_section"):
            offset = pb.transaction_section
        elif pb.HasField("transaction_section_deprecated"):
            offset = pb.transaction_section_deprecated
        else:
            return None
        return cls._block(data, path, offset)

    @staticmethod
    def _manifest_offset(data: bytes, path: str) -> int:
        if len(data) < FOOTER.size + 4:
            raise FormatError(f"{path}: manifest is truncated ({len(data)} bytes)")
        pos, major, minor, magic = FOOTER.unpack_from(data, len(data) - FOOTER.size)
        if magic != MAGIC:
            raise FormatError(f"{path}: not a Lance manifest (bad magic {magic!r})")
        if major != MANIFEST_MAJOR or minor not in (1, 2):
            raise FormatError(f"{path}: unsupported manifest version {major}.{minor}")
        return pos

    @staticmethod
    def _block(data: bytes, path: str, offset: int) -> bytes:
        end_limit = len(data) - FOOTER.size
        if offset < 0 or offset + 4 > end_limit:
            raise FormatError(f"{path}: block offset {offset} is outside the manifest")
        (length,) = struct.unpack_from("<I", data, offset)
        if offset + 4 + length > end_limit:
            raise FormatError(
                f"{path}: block at {offset} claims {length} bytes, past the end of the manifest"
            )
        return data[offset + 4 : offset + 4 + length]

    @classmethod
    def _decode_block(cls, data: bytes, path: str, offset: int, message_type: type):
        block = cls._block(data, path, offset)
        msg = message_type()
        try:
            msg.ParseFromString(block)
        except DecodeError as exc:
            raise FormatError(f"{path}: corrupt manifest protobuf ({exc})") from exc
        return msg
