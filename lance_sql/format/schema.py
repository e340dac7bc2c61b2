"""Lance schemas: a tree of fields with stable ids, mapped to Arrow and to ``lance.file.Field``.

A manifest stores its schema as a flat, pre-order list of ``lance.file.Field`` protos that point
at their parent by id. Ids are what data files reference, so they must survive renames and
projections; this module keeps them on an immutable tree and converts it, both ways, to Arrow
(what users see) and to protos (what pylance writes, byte for byte).
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from enum import IntEnum
from functools import cached_property
from typing import Any, cast

import pyarrow as pa

from lance_sql.errors import FormatError, InvalidInputError, NotFoundError, SchemaError
from lance_sql.format.arrow_c import c_metadata
from lance_sql.format.pb import file_pb2

__all__ = [
    "BLOB_V1_DESCRIPTION", "BLOB_V2", "BLOB_V2_DESCRIPTION", "EXT_METADATA_KEY", "EXT_NAME_KEY",
    "Encoding", "LanceField", "LanceSchema", "PK_KEY", "PK_POSITION_KEY", "arrow_type_of",
    "logical_type_of",
]  # fmt: skip

EXT_NAME_KEY = "ARROW:extension:name"
EXT_METADATA_KEY = "ARROW:extension:metadata"
PK_KEY = "lance-schema:unenforced-primary-key"
PK_POSITION_KEY = "lance-schema:unenforced-primary-key:position"
# Top-level column names a table may not use: readers add columns of these names
# (pylance refuses them on write alike: "is a reserved name").
RESERVED_COLUMN_NAMES = frozenset({"_rowid", "_rowaddr", "_rowoffset",
                                   "_row_created_at_version", "_row_last_updated_at_version"})
_LANCE_JSON = "lance.json"
_JSON_NAMES = ("arrow.json", _LANCE_JSON)
_BF16 = "lance.bfloat16"
BLOB_KEY = "lance-encoding:blob"
PACKED_KEY = "lance-encoding:packed"
BLOB_V2 = "lance.blob.v2"
# What pylance's scanner returns for a blob column instead of its bytes: a description.
# Legacy blobs (large_binary + lance-encoding:blob) in 2.0/2.1 files: position/size of the
# bytes in the data file. Blob v2 (2.2 files): kind (0 inside the data file, 1 a range of a
# shared .blob sidecar, 2 a whole dedicated .blob file, 3 external: an absolute uri, or a
# path under base path ``blob_id``), position, size, blob_id, blob_uri (see table/blobs.py).
BLOB_V1_DESCRIPTION = pa.struct([("position", pa.uint64()), ("size", pa.uint64())])
BLOB_V2_DESCRIPTION = pa.struct([
    pa.field("kind", pa.uint8(), False), pa.field("position", pa.uint64(), False),
    pa.field("size", pa.uint64(), False), pa.field("blob_id", pa.uint32(), False),
    pa.field("blob_uri", pa.string(), False),
])  # fmt: skip


class Encoding(IntEnum):
    """``lance.file.Encoding``: legacy (v1) per-field encoding that pylance still records."""

    NONE = 0
    PLAIN = 1
    VAR_BINARY = 2
    DICTIONARY = 3
    RLE = 4


_SIMPLE: dict[str, pa.DataType] = {
    "null": pa.null(), "bool": pa.bool_(),
    "int8": pa.int8(), "int16": pa.int16(), "int32": pa.int32(), "int64": pa.int64(),
    "uint8": pa.uint8(), "uint16": pa.uint16(), "uint32": pa.uint32(), "uint64": pa.uint64(),
    "halffloat": pa.float16(), "float": pa.float32(), "double": pa.float64(),
    "string": pa.string(), "large_string": pa.large_string(),
    "binary": pa.binary(), "large_binary": pa.large_binary(),
    "date32:day": pa.date32(), "date64:ms": pa.date64(),
    "time32:s": pa.time32("s"), "time32:ms": pa.time32("ms"),
    "time64:us": pa.time64("us"), "time64:ns": pa.time64("ns"),
    **{f"duration:{u}": pa.duration(u) for u in ("s", "ms", "us", "ns")},
}  # fmt: skip
# pylance stores view types as their plain counterparts (lossy, but that is what it writes).
_SIMPLE_REV: dict[pa.DataType, str] = {t: s for s, t in _SIMPLE.items()} | {
    pa.string_view(): "string",
    pa.binary_view(): "binary",
}
_VAR_BINARY = frozenset({"string", "large_string", "binary", "large_binary", "json"})


# --------------------------------------------------------------------------- extension types
def _extension_metadata(t: pa.BaseExtensionType) -> bytes:
    serialize = getattr(t, "__arrow_ext_serialize__", None)
    if serialize is not None:
        return bytes(serialize())
    exported = {key.decode(): value for key, value in c_metadata(t)}
    return exported.get(EXT_METADATA_KEY, b"")


def _resolve_extension(f: pa.Field) -> pa.Field:
    """Turn ``ARROW:extension:*`` metadata into a registered extension type, as pylance does.

    An IPC schema round trip is pyarrow's public way to look a type up in its registry;
    unregistered names, or metadata the registered type rejects, stay as storage + metadata.
    """
    try:
        return pa.ipc.read_schema(pa.py_buffer(pa.schema([f]).serialize())).field(0)
    except pa.ArrowException:
        return f


# --------------------------------------------------------------------------- logical types
def _leaf_logical(t: pa.DataType) -> str:
    """Logical type string of a type that has no child fields in the Lance tree."""
    simple = _SIMPLE_REV.get(t)
    if simple is not None:
        return simple
    if pa.types.is_timestamp(t):
        return f"timestamp:{t.unit}:{t.tz or '-'}"
    if pa.types.is_decimal128(t) or pa.types.is_decimal256(t):
        return f"decimal:{t.bit_width}:{t.precision}:{t.scale}"
    if pa.types.is_fixed_size_binary(t):
        return f"fixed_size_binary:{t.byte_width}"
    if pa.types.is_fixed_size_list(t):
        vt = t.value_type
        ext = (t.value_field.metadata or {}).get(EXT_NAME_KEY.encode(), b"").decode()
        if isinstance(vt, pa.BaseExtensionType):
            ext = vt.extension_name
        if ext == _BF16:
            return f"fixed_size_list:{_BF16}:{t.list_size}"
        if ext:
            raise SchemaError(f"extension type {ext!r} inside a fixed size list is not supported")
        return f"fixed_size_list:{_leaf_logical(vt)}:{t.list_size}"
    if pa.types.is_dictionary(t):
        value = _leaf_logical(t.value_type)
        if ":" in value:  # pylance's reader splits on ':' and would not parse it back
            raise SchemaError(f"cannot store dictionary type {t}: value type {value!r}")
        return f"dict:{value}:{_leaf_logical(t.index_type)}:false"
    raise SchemaError(f"unsupported Arrow data type {t}")


def _parse_leaf(lt: str) -> pa.DataType:
    """Arrow type of a leaf logical type; ValueError/KeyError/ArrowException when malformed."""
    simple = _SIMPLE.get(lt)
    if simple is not None:
        return simple
    if lt == "json":
        return pa.json_()
    kind, _, rest = lt.partition(":")
    if kind == "timestamp":
        unit, tz = rest.split(":", 1)  # the time zone itself may contain ':' ("+05:30")
        return pa.timestamp(unit, None if tz == "-" else tz)
    if kind == "decimal":
        bits, precision, scale = rest.split(":")
        ctor = {"128": pa.decimal128, "256": pa.decimal256}[bits]
        return ctor(int(precision), int(scale))
    if kind == "fixed_size_binary":
        return pa.binary(int(rest))
    if kind == "fixed_size_list":
        inner, size = rest.rsplit(":", 1)
        if inner == _BF16:
            bf16_meta = {EXT_NAME_KEY: _BF16, EXT_METADATA_KEY: ""}
            item = pa.field("item", pa.binary(2), metadata=bf16_meta)
        else:
            item = pa.field("item", _parse_leaf(inner))
        return pa.list_(item, int(size))
    if kind == "dict":
        value, key, ordered = rest.rsplit(":", 2)
        if ordered not in ("false", "true"):
            raise ValueError(lt)
        return pa.dictionary(_parse_leaf(key), _parse_leaf(value), ordered == "true")
    raise ValueError(lt)


def _encoding_of(t: pa.DataType, logical: str) -> int:
    """The legacy encoding pylance records: derived from the storage type alone."""
    if logical in _VAR_BINARY or pa.types.is_string_view(t) or pa.types.is_binary_view(t):
        return Encoding.VAR_BINARY
    if pa.types.is_null(t) or pa.types.is_struct(t):
        return Encoding.NONE
    if pa.types.is_dictionary(t):
        return Encoding.DICTIONARY
    return Encoding.PLAIN


def _primary_key(meta: Mapping[str, bytes]) -> tuple[bool, int]:
    """pylance: a valid u32 position implies a key; otherwise the flag is a truthy word."""
    raw = meta.get(PK_POSITION_KEY)
    if raw is not None and raw.isdigit() and int(raw) < 2**32:
        return True, int(raw)
    flag = meta.get(PK_KEY, b"").decode(errors="replace").lower()
    return flag in ("true", "1", "yes"), 0


def _check_dimensions(t: pa.DataType, name: str) -> None:
    """Refuse fixed-size lists of no items, nested ones included, as pylance refuses
    them ("dimension must be a positive integer"): it cannot read them back."""
    while True:
        while isinstance(t, pa.BaseExtensionType):
            t = t.storage_type
        if not pa.types.is_fixed_size_list(t):
            return
        if t.list_size <= 0:
            raise SchemaError(f"column {name!r}: {t} has dimension {t.list_size}; a "
                              "fixed-size list needs a positive dimension")
        t = t.value_type


# --------------------------------------------------------------------------- field
@dataclass(frozen=True)
class LanceField:
    """One node of a Lance schema; ``children`` holds struct members or the list item."""

    id: int
    name: str
    logical_type: str
    nullable: bool = True
    children: tuple[LanceField, ...] = ()
    metadata: Mapping[str, bytes] = dataclasses.field(default_factory=dict, hash=False)
    encoding: int = 0
    extension_name: str = ""
    unenforced_primary_key: bool = False
    unenforced_primary_key_position: int = 0

    def __post_init__(self) -> None:
        object.__setattr__(self, "children", tuple(self.children))
        object.__setattr__(self, "metadata", dict(self.metadata))

    @property
    def is_leaf(self) -> bool:
        """Lance's notion of a leaf: no child fields (an FSL of primitives is a leaf)."""
        return not self.children

    @property
    def arrow_type(self) -> pa.DataType:
        """Arrow type as pylance reports it (extension types resolved)."""
        return self.to_arrow().type

    def to_arrow(self) -> pa.Field:
        """Arrow field with metadata; raises FormatError naming the field if malformed."""
        return self._arrow

    @cached_property
    def _arrow(self) -> pa.Field:
        lt, kids = self.logical_type, self.children
        meta = dict(self.metadata)
        if self.extension_name and EXT_NAME_KEY not in meta:
            meta[EXT_NAME_KEY] = self.extension_name.encode()

        def need(n: int) -> None:
            if len(kids) != n:
                raise self._error(f"logical type {lt!r} needs {n} child field(s), has {len(kids)}")

        try:
            if lt == "struct":
                t = pa.struct([c.to_arrow() for c in kids])
            elif lt in ("list", "list.struct", "large_list", "large_list.struct"):
                need(1)
                t = (pa.large_list if lt.startswith("large") else pa.list_)(kids[0].to_arrow())
            elif lt == "map":
                need(1)
                if kids[0].logical_type != "struct" or len(kids[0].children) != 2:
                    raise self._error("a map needs one struct child with key and value")
                key, value = kids[0].children
                t = pa.map_(key.to_arrow(), value.to_arrow())
            elif lt.startswith("fixed_size_list:struct:"):
                need(1)
                t = pa.list_(kids[0].to_arrow(), int(lt.rsplit(":", 1)[1]))
            else:
                need(0)
                t = _parse_leaf(lt)
                if lt == "json":  # pylance presents lance.json columns as arrow.json
                    meta.pop(EXT_NAME_KEY, None)
                    meta.pop(EXT_METADATA_KEY, None)
            out = pa.field(self.name, t, self.nullable, metadata=meta or None)
            if EXT_NAME_KEY in meta or _BF16 in lt:
                out = _resolve_extension(out)
            return out
        except FormatError:
            raise
        # OverflowError: a size beyond what Arrow can hold (fixed_size_list:int64:99999999999)
        except (ValueError, KeyError, TypeError, OverflowError, pa.ArrowException) as e:
            raise self._error(f"invalid logical type {lt!r}: {e}") from e

    def _error(self, message: str) -> FormatError:
        return FormatError(f"field {self.name!r} (id {self.id}): {message}")

    @property
    def is_blob_v2(self) -> bool:
        """A ``lance.blob.v2`` column (2.2 files store it as packed descriptions)."""
        ext = self.extension_name or self.metadata.get(EXT_NAME_KEY, b"").decode(errors="replace")
        return ext == BLOB_V2

    @property
    def is_legacy_blob(self) -> bool:
        """A binary column marked ``lance-encoding:blob`` (bytes stored out of line)."""
        flag = self.metadata.get(BLOB_KEY, b"").decode(errors="replace").lower()
        return flag == "true" and self.logical_type in ("binary", "large_binary")

    @property
    def is_blob(self) -> bool:
        """Any blob column: v2, legacy, or a 2.2 file's packed description struct."""
        flag = self.metadata.get(BLOB_KEY, b"").decode(errors="replace").lower()
        return self.is_blob_v2 or flag == "true"

    def to_scan_arrow(self) -> pa.Field:
        """The Arrow field pylance's scanner (``to_table``/``take``) returns for this field.

        Blob columns come back as descriptions, not bytes (see ``BLOB_V*_DESCRIPTION``);
        everything else as :meth:`to_arrow`. Made once per field (fields never change).
        """
        return self._scan_arrow

    @cached_property
    def _scan_arrow(self) -> pa.Field:
        if self.is_blob_v2:
            meta = {PACKED_KEY: b"true", BLOB_KEY: b"true"}
            return pa.field(self.name, BLOB_V2_DESCRIPTION, self.nullable, metadata=meta)
        if self.is_legacy_blob:
            f = self.to_arrow()
            return pa.field(self.name, BLOB_V1_DESCRIPTION, self.nullable, metadata=f.metadata)
        if self.logical_type == "struct" and any(
            c.to_scan_arrow() is not c.to_arrow() for c in self.children
        ):
            f = self.to_arrow()
            t = pa.struct([c.to_scan_arrow() for c in self.children])
            return pa.field(self.name, t, self.nullable, metadata=f.metadata)
        return self.to_arrow()

    def walk(self) -> Iterator[LanceField]:
        """This field and all descendants, pre-order (the order protos are written in)."""
        yield self
        for child in self.children:
            yield from child.walk()

    @classmethod
    def from_arrow(cls, f: pa.Field, ids: Iterator[int]) -> LanceField:
        """Convert an Arrow field, drawing ids pre-order from ``ids``."""
        field_id = next(ids)
        t = f.type
        meta = {k.decode(): bytes(v) for k, v in (f.metadata or {}).items()}
        if isinstance(t, pa.BaseExtensionType):
            meta[EXT_NAME_KEY] = t.extension_name.encode()
            meta[EXT_METADATA_KEY] = _extension_metadata(t)
            t = t.storage_type
        ext_name = meta.get(EXT_NAME_KEY, b"").decode()
        _check_dimensions(t, f.name)
        children: tuple[LanceField, ...] = ()
        if ext_name in _JSON_NAMES:
            if not (pa.types.is_string(t) or pa.types.is_large_string(t)):
                raise SchemaError(f"column {f.name!r}: JSON needs string storage, got {t}")
            ext_name, logical = _LANCE_JSON, "json"
            meta[EXT_NAME_KEY] = _LANCE_JSON.encode()
        elif pa.types.is_struct(t):
            logical = "struct"
            children = tuple(cls.from_arrow(t.field(i), ids) for i in range(t.num_fields))
        elif pa.types.is_list(t) or pa.types.is_large_list(t):
            logical = "large_list" if pa.types.is_large_list(t) else "list"
            logical += ".struct" if pa.types.is_struct(t.value_type) else ""
            children = (cls.from_arrow(t.value_field, ids),)
        elif pa.types.is_map(t):
            if t.keys_sorted:
                raise SchemaError(f"column {f.name!r}: maps with keys_sorted=True are unsupported")
            logical = "map"
            entries = pa.field("entries", pa.struct([t.key_field, t.item_field]), False)
            children = (cls.from_arrow(entries, ids),)
        elif pa.types.is_fixed_size_list(t) and pa.types.is_struct(t.value_type):
            logical = f"fixed_size_list:struct:{t.list_size}"
            children = (cls.from_arrow(t.value_field, ids),)
        else:
            try:
                logical = _leaf_logical(t)
            except SchemaError as e:
                raise SchemaError(f"column {f.name!r}: {e}") from None
        pk, pk_pos = _primary_key(meta)
        return cls(
            id=field_id,
            name=f.name,
            logical_type=logical,
            nullable=f.nullable,
            children=children,
            metadata=meta,
            encoding=_encoding_of(t, logical),
            extension_name=ext_name,
            unenforced_primary_key=pk,
            unenforced_primary_key_position=pk_pos,
        )

    def to_proto(self, parent_id: int) -> file_pb2.Field:
        """This field alone (no children) as pylance writes it."""
        return file_pb2.Field(
            name=self.name,
            id=self.id,
            parent_id=parent_id,
            logical_type=self.logical_type,
            nullable=self.nullable,
            encoding=cast("file_pb2.Encoding", self.encoding),  # a protobuf enum is an int
            extension_name=self.extension_name,
            metadata=self.metadata,
            unenforced_primary_key=self.unenforced_primary_key,
            unenforced_primary_key_position=self.unenforced_primary_key_position,
        )


def _adopt_blob_descriptions(protos: list[file_pb2.Field]) -> list[file_pb2.Field]:
    """Attach the id -1 fields that follow a blob struct in a 2.2 file schema to it."""
    if all(p.id >= 0 for p in protos):
        return protos
    out: list[file_pb2.Field] = []
    owner: int | None = None
    next_id = -2
    for p in protos:
        if p.id == -1 and p.parent_id == -1 and owner is not None:
            q = file_pb2.Field()
            q.CopyFrom(p)
            q.id, q.parent_id = next_id, owner
            next_id -= 1
            out.append(q)
            continue
        is_blob = p.logical_type == "struct" and dict(p.metadata).get(BLOB_KEY) == b"true"
        owner = p.id if is_blob and p.id >= 0 else None
        out.append(p)
    return out


def _same_shape(a: LanceField, b: LanceField) -> bool:
    """Equal for appends: names, logical types and extensions; nullability/metadata ignored."""
    return (
        a.name == b.name
        and a.logical_type == b.logical_type
        and a.extension_name == b.extension_name
        and len(a.children) == len(b.children)
        and all(_same_shape(x, y) for x, y in zip(a.children, b.children, strict=True))
    )


def _check_primary_key(f: LanceField, nullable_ancestor: bool) -> None:
    nullable_ancestor = nullable_ancestor or f.nullable
    if f.unenforced_primary_key and nullable_ancestor:
        raise SchemaError(f"primary key column {f.name!r} and its ancestors must not be nullable")
    for child in f.children:
        _check_primary_key(child, nullable_ancestor)


# --------------------------------------------------------------------------- schema
@dataclass(frozen=True)
class LanceSchema:
    """A table schema: top-level fields (each a tree) plus schema metadata."""

    fields: tuple[LanceField, ...]
    metadata: Mapping[str, bytes] = dataclasses.field(default_factory=dict, hash=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "fields", tuple(self.fields))
        object.__setattr__(self, "metadata", dict(self.metadata))

    # ---- conversions
    @classmethod
    def from_arrow(cls, schema: pa.Schema, first_id: int = 0) -> LanceSchema:
        """New schema with ids assigned depth-first pre-order from ``first_id``."""
        ids = itertools.count(first_id)
        fields = tuple(LanceField.from_arrow(f, ids) for f in schema)
        for f in fields:
            _check_primary_key(f, False)
        meta = {k.decode(): bytes(v) for k, v in (schema.metadata or {}).items()}
        return cls(fields, meta)

    def to_arrow(self) -> pa.Schema:
        """Arrow schema as pylance reports it (``lance.dataset(...).schema``)."""
        return pa.schema([f.to_arrow() for f in self.fields], metadata=self.metadata or None)

    def to_scan_arrow(self) -> pa.Schema:
        """Arrow schema of what pylance's scanner returns (blob columns as descriptions);
        made once per schema (schemas never change: lookups ask for it many times)."""
        return self._scan_arrow

    @cached_property
    def _scan_arrow(self) -> pa.Schema:
        fields = [f.to_scan_arrow() for f in self.fields]
        return pa.schema(fields, metadata=self.metadata or None)

    @classmethod
    def from_protos(
        cls, fields: Iterable[file_pb2.Field], metadata: Mapping[str, bytes] | None = None
    ) -> LanceSchema:
        """Rebuild the tree from flat protos; siblings keep list order, parents may come late.

        Data files of format 2.2 list the description fields of a blob column (``kind``,
        ``position``, ...) right after it with id -1 and parent -1; they become its children
        here, with ids -2, -3, ... (file-local, never referenced by a manifest).
        """
        protos = _adopt_blob_descriptions(list(fields))
        by_id: dict[int, file_pb2.Field] = {}
        kids: dict[int, list[file_pb2.Field]] = {}
        for p in protos:
            if p.id < 0 and not (p.id < -1 and p.parent_id >= 0):
                raise FormatError(f"field {p.name!r} has invalid id {p.id}")
            if p.id in by_id:
                raise FormatError(f"field {p.name!r} reuses id {p.id} of {by_id[p.id].name!r}")
            by_id[p.id] = p
        for p in protos:
            if p.parent_id != -1 and p.parent_id not in by_id:
                raise FormatError(f"field {p.name!r} (id {p.id}) has unknown parent {p.parent_id}")
            kids.setdefault(p.parent_id, []).append(p)

        def build(p: file_pb2.Field) -> LanceField:
            return LanceField(
                id=p.id,
                name=p.name,
                logical_type=p.logical_type,
                nullable=p.nullable,
                children=tuple(build(c) for c in kids.get(p.id, ())),
                metadata=dict(p.metadata),
                encoding=p.encoding,
                extension_name=p.extension_name,
                unenforced_primary_key=p.unenforced_primary_key,
                unenforced_primary_key_position=p.unenforced_primary_key_position,
            )

        schema = cls(tuple(build(p) for p in kids.get(-1, ())), metadata or {})
        if len(schema.field_ids()) != len(protos):
            reached = set(schema.field_ids())
            lost = [p.name for p in protos if p.id not in reached]
            raise FormatError(f"fields not reachable from the top level (cycle?): {lost}")
        for f in schema.fields:
            f.to_arrow()  # validates every logical type and child count, naming the culprit
        return schema

    def to_protos(self) -> list[file_pb2.Field]:
        """Flat pre-order ``lance.file.Field`` list, as in ``Manifest.fields``."""
        out: list[file_pb2.Field] = []

        def emit(f: LanceField, parent_id: int) -> None:
            out.append(f.to_proto(parent_id))
            for child in f.children:
                emit(child, f.id)

        for f in self.fields:
            emit(f, -1)
        return out

    def to_proto_schema(self) -> file_pb2.Schema:
        """``lance.file.Schema`` for a data file's FileDescriptor."""
        return file_pb2.Schema(fields=self.to_protos(), metadata=self.metadata)

    # ---- lookups
    @property
    def primary_key(self) -> list[str]:
        """The unenforced primary-key columns in key position order (fields without a
        position follow, in schema order); empty when the table has none."""
        keyed = [(f.unenforced_primary_key_position or 2**31, i, f.name)
                 for i, f in enumerate(self.fields) if f.unenforced_primary_key]
        return [name for _, _, name in sorted(keyed)]

    def walk(self) -> Iterator[LanceField]:
        """Every field, pre-order."""
        for f in self.fields:
            yield from f.walk()

    def field_ids(self) -> list[int]:
        return [f.id for f in self.walk()]

    def max_field_id(self) -> int:
        return max(self.field_ids(), default=-1)

    @cached_property
    def _by_id(self) -> dict[int, LanceField]:
        return {f.id: f for f in self.walk()}

    def by_id(self, field_id: int) -> LanceField:
        try:
            return self._by_id[field_id]
        except KeyError:
            raise NotFoundError(f"no field with id {field_id}") from None

    def path(self, name: str) -> list[LanceField]:
        """Chain of fields from the top level down to ``name`` (dotted paths enter structs;
        its parent is the one before last).

        A top-level column named exactly ``name`` wins (a column may be named "a.b");
        inside a struct, dots enter structs first, as scans read such a path (and
        pylance): with both ``s.a: struct<b>`` and ``s."a.b"``, "s.a.b" is the former. A
        member whose own name holds dots is found when no such path exists."""

        def find(fields: tuple[LanceField, ...], path: str, top: bool
                 ) -> list[LanceField] | None:
            exact = next(([f] for f in fields if f.name == path), None)
            if top and exact is not None:
                return exact
            for i, ch in enumerate(path):
                if ch != ".":
                    continue
                for f in fields:
                    if f.name == path[:i] and f.logical_type == "struct":
                        rest = find(f.children, path[i + 1 :], False)
                        if rest is not None:
                            return [f, *rest]
            return exact

        if "`" in name:  # backquoted segments name fields exactly, dots and all
            return self._quoted_path(name)
        chain = find(self.fields, name, True)
        if chain is None:
            available = ", ".join(repr(f.name) for f in self.fields)
            raise NotFoundError(f"no column {name!r}; available columns: {available}")
        return chain

    def _quoted_path(self, name: str) -> list[LanceField]:
        """:meth:`path` of a path with backquoted segments (``s.`a.b```, as pylance
        writes a member whose name holds a dot): each segment names one field exactly."""
        chain: list[LanceField] = []
        fields = self.fields
        for segment in split_path(name):
            found = next((f for f in fields if f.name == segment), None)
            if found is None:
                raise NotFoundError(f"no column {name!r}: no field {segment!r} there")
            chain.append(found)
            fields = found.children
        return chain

    def field(self, name: str) -> LanceField:
        """Top-level field by name, or a struct member by dotted path ("a.b")."""
        return self.path(name)[-1]

    def project(self, names: Sequence[str]) -> LanceSchema:
        """Keep the named columns in the given order; "s.a" keeps struct s with only member a."""
        tree: dict[int, Any] = {}  # field id -> None (whole field) or a nested tree
        for name in names:
            node = tree
            chain = self.path(name)
            for depth, f in enumerate(chain):
                if depth == len(chain) - 1:
                    node[f.id] = None
                elif f.id in node and node[f.id] is None:
                    break
                else:
                    node = node.setdefault(f.id, {})

        def prune(f: LanceField, sel: dict[int, Any] | None) -> LanceField:
            if sel is None:
                return f
            kept = tuple(prune(c, sel[c.id]) for c in f.children if c.id in sel)
            return dataclasses.replace(f, children=kept)

        return LanceSchema(tuple(prune(self.by_id(i), s) for i, s in tree.items()), self.metadata)

    # ---- evolution
    def check_append_compatible(self, schema: pa.Schema) -> None:
        """Raise SchemaError listing every missing, extra or mismatched column of ``schema``."""
        ours = {f.name: f for f in self.fields}
        problems: list[str] = []
        seen: set[str] = set()
        for f in schema:
            if f.name in seen:
                problems.append(f"column {f.name!r} appears more than once in the data")
                continue
            seen.add(f.name)
            if f.name not in ours:
                problems.append(f"column {f.name!r} is not in the table")
                continue
            try:
                theirs = LanceField.from_arrow(f, itertools.count())
            except SchemaError as e:
                problems.append(str(e))
                continue
            if not _same_shape(ours[f.name], theirs):
                table_type = ours[f.name].arrow_type
                problems.append(f"column {f.name!r}: table has {table_type}, data has {f.type}")
        problems += [f"column {n!r} is missing from the data" for n in ours if n not in seen]
        if problems:
            raise SchemaError("data does not match the table schema: " + "; ".join(problems))

    def add_fields(self, schema: pa.Schema, first_id: int | None = None) -> LanceSchema:
        """Append new top-level columns, ids from ``first_id`` (default: continuing after
        ``max_field_id()``; a table passes one above the ids its data files still hold)."""
        taken = [f.name for f in self.fields]
        clash = sorted({n for n in schema.names if n in taken or schema.names.count(n) > 1})
        if clash:
            raise SchemaError(f"columns already exist: {', '.join(map(repr, clash))}")
        check_column_names(schema.names)
        start = self.max_field_id() + 1 if first_id is None else first_id
        new = LanceSchema.from_arrow(schema, first_id=start)
        return LanceSchema(self.fields + new.fields, self.metadata)


def check_column_names(names: Iterable[str]) -> None:
    """Refuse top-level column names a table's readers could not tell apart: ones
    reserved for system columns (its column and the system one would clash), and ones
    holding a ``.``, which names a struct's field (pylance refuses to write them, and
    cannot read a table holding one)."""
    names = list(names)
    reserved = sorted(n for n in names if n in RESERVED_COLUMN_NAMES)
    if reserved:
        raise SchemaError(f"{', '.join(map(repr, reserved))}: reserved for system columns, "
                          "not a name a table's column may have")
    dotted = sorted(n for n in names if "." in n)
    if dotted:
        raise SchemaError(f"{', '.join(map(repr, dotted))}: a top-level column's name may not "
                          "hold a '.' (it names a struct's field: 'a.b' is field b of "
                          "struct a)")


def logical_type_of(t: pa.DataType) -> str:
    """The Lance logical type string of a flat Arrow type (``int32``, ``timestamp:us:UTC``…)."""
    return _leaf_logical(t)


def arrow_type_of(logical_type: str) -> pa.DataType:
    """The Arrow type of a flat Lance logical type string; SchemaError when malformed."""
    try:
        return _parse_leaf(logical_type)
    except (ValueError, KeyError, pa.ArrowException) as exc:
        raise SchemaError(f"{logical_type!r} is not a Lance logical type") from exc


def split_path(name: str) -> tuple[str, ...]:
    """The segments of a dotted field path, a backquoted segment taken whole (``s.`a.b```
    is ``("s", "a.b")``; a doubled backquote inside one is a backquote)."""
    segments: list[str] = []
    current: list[str] = []
    quoted = False
    i = 0
    while i < len(name):
        ch = name[i]
        if ch == "`":
            if quoted and name[i + 1: i + 2] == "`":
                current.append("`")
                i += 2
                continue
            quoted = not quoted
        elif ch == "." and not quoted:
            segments.append("".join(current))
            current = []
        else:
            current.append(ch)
        i += 1
    if quoted:
        raise InvalidInputError(f"unbalanced backquote in {name!r}")
    segments.append("".join(current))
    return tuple(segments)
