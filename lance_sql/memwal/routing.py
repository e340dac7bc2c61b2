"""Which region a row belongs to: region values, and the region id they map to.

Every process must send a key to the same region, also when two of them create that
region at the same moment (two regions holding one key would let an older write win at
merge time). So a region's id is *derived* from its spec id and values: a UUID in the
version-4 layout whose bits are a SHA-256 of the values' canonical bytes. Two writers
creating "bucket 3" compute the same id and settle ownership by epoch, as for any region.

The canonical bytes of a value are its bucket-hash bytes (Iceberg's encoding, see
:mod:`.murmur3`), so equal values of different widths (int32 5 and int64 5) name the
same region.
"""

from __future__ import annotations

import hashlib
import uuid

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from lance_sql.errors import FormatError
from lance_sql.format.region_spec import RegionSpec
from lance_sql.memwal.murmur3 import hash_input

__all__ = ["decode_region_values", "encode_region_values", "group_by_region", "region_id_for",
           "same_region_values", "matches_region_value"]

_DOMAIN = b"lance_sql region v1\x00"


def _canonical(values: pa.Table, row: int) -> bytes:
    parts = [_DOMAIN]
    for column in values.columns:
        value = column.slice(row, 1).combine_chunks()
        if not value.is_valid().to_pylist()[0]:
            parts.append(b"\x00")
            continue
        raw = value if pa.types.is_null(value.type) else hash_input(value)
        data = raw.to_pylist()[0] or b""
        parts.append(b"\x01" + len(data).to_bytes(4, "little") + data)
    return b"".join(parts)


def same_region_values(a: pa.Table, b: pa.Table) -> bool:
    """Whether the one-row region values ``a`` and ``b`` name the same region, as region
    ids tell values apart (canonical bytes: NaN is NaN, -0.0 is 0.0, int32 5 is int64
    5), where Arrow's equality has NaN unequal to itself."""
    return _canonical(a, 0) == _canonical(b, 0)


def matches_region_value(column: pa.Array, value: object) -> pa.BooleanArray:
    """Per value of ``column`` (a region field's values), whether it is the region value
    ``value`` (None: NULL), compared by canonical bytes as :func:`same_region_values`."""
    if value is None or pa.types.is_null(column.type):
        return pc.is_null(column) if value is None else pc.is_valid(column)
    ours = hash_input(column)
    theirs = hash_input(pa.array([value], column.type))[0]
    return pc.fill_null(pc.equal(ours, theirs), False)


def region_id_for(spec: RegionSpec, values: pa.Table, row: int = 0) -> uuid.UUID:
    """The region of ``values`` row ``row`` (one column per region field, spec order)."""
    digest = hashlib.sha256(spec.spec_id.to_bytes(4, "little") + _canonical(values, row))
    return uuid.UUID(bytes=digest.digest()[:16], version=4)


def encode_region_values(values: pa.Table) -> bytes:
    """One row of region values as Arrow IPC stream bytes."""
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, values.schema) as writer:
        writer.write_table(values)
    return sink.getvalue().to_pybytes()


def decode_region_values(data: bytes, where: str, spec: RegionSpec | None = None
                         ) -> pa.Table:
    """A region's values from their Arrow IPC bytes; bad bytes are a FormatError naming
    ``where``, and so are values whose columns are not the fields of ``spec`` (the
    region's spec, when known), in its order."""
    try:
        table = pa.ipc.open_stream(pa.py_buffer(data)).read_all()
        table.validate(full=True)
    except (pa.ArrowException, OSError, UnicodeDecodeError) as exc:
        raise FormatError(f"{where}: corrupt region values ({exc})") from exc
    if table.num_rows != 1:
        raise FormatError(f"{where}: region values hold {table.num_rows} rows, not one")
    if spec is not None:
        fields = [f.field_id for f in spec.fields]
        if table.column_names != fields:
            raise FormatError(f"{where}: region values name the fields {table.column_names}, "
                              f"region spec {spec.spec_id} has {fields}: the region "
                              "manifest is damaged")
    return table


def group_by_region(values: pa.Table) -> list[np.ndarray]:
    """Row positions grouped by equal region values (nulls equal), in first-seen order."""
    if values.num_rows == 0:
        return []
    position = "__lance_sql_row"
    grouped = (values.append_column(position, pa.array(np.arange(values.num_rows)))
               .group_by(values.column_names, use_threads=False)
               .aggregate([(position, "list")]))
    rows = [np.asarray(r, np.int64) for r in grouped.column(f"{position}_list").to_pylist()]
    return sorted(rows, key=lambda r: int(r[0]))
