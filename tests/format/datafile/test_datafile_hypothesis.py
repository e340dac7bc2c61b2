"""Property test: random Arrow tables (flat and nested) survive write -> read and take."""

from __future__ import annotations

import decimal

import numpy as np
import pyarrow as pa
import pytest
from datafile_helpers import assert_tables, colmap, read_ours, write_ours
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lance_sql.format.datafile import BytesSource, LanceFileReader

_INT_BITS = {pa.int8(): 8, pa.int16(): 16, pa.int32(): 32, pa.int64(): 64}
_UINT_BITS = {pa.uint8(): 8, pa.uint16(): 16, pa.uint32(): 32, pa.uint64(): 64}
_FIXED = [
    pa.bool_(),
    *_INT_BITS,
    *_UINT_BITS,
    pa.float32(),
    pa.float64(),
    pa.date32(),
    pa.timestamp("us", tz="UTC"),
    pa.timestamp("ns"),
    pa.time64("us"),
    pa.duration("ms"),
    pa.decimal128(12, 2),
    pa.binary(3),
]
_VARIABLE = [pa.string(), pa.large_string(), pa.binary(), pa.large_binary()]
_NAMES = st.text("abcdefgh", min_size=1, max_size=4)

leaf_types = st.sampled_from(_FIXED + _VARIABLE) | st.builds(
    pa.list_, st.sampled_from([pa.float32(), pa.int8(), pa.bool_()]), st.integers(1, 4)
)


def _nested(children):
    fields = st.lists(st.tuples(_NAMES, children), min_size=1, max_size=3, unique_by=lambda x: x[0])
    return st.one_of(
        children.map(pa.list_),
        children.map(pa.large_list),
        fields.map(lambda fs: pa.struct([pa.field(n, t) for n, t in fs])),
    )


types = st.recursive(leaf_types, _nested, max_leaves=4)


def _int_range(bits: int, signed: bool):
    return (-(2 ** (bits - 1)), 2 ** (bits - 1) - 1) if signed else (0, 2**bits - 1)


def values_of(t: pa.DataType, nullable: bool = True) -> st.SearchStrategy:
    if pa.types.is_struct(t):
        # Lance 2.0 cannot store null structs, so struct values are never None
        return st.fixed_dictionaries({f.name: values_of(f.type) for f in t})
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        base = st.lists(values_of(t.value_type), max_size=4)
    elif pa.types.is_fixed_size_list(t):
        base = st.lists(values_of(t.value_type), min_size=t.list_size, max_size=t.list_size)
    elif pa.types.is_boolean(t):
        base = st.booleans()
    elif t in _INT_BITS:
        base = st.integers(*_int_range(_INT_BITS[t], True))
    elif t in _UINT_BITS:
        base = st.integers(*_int_range(_UINT_BITS[t], False))
    elif pa.types.is_floating(t):
        base = st.floats(allow_nan=False, width=t.bit_width)
    elif pa.types.is_decimal(t):
        base = st.integers(-(10**11), 10**11).map(lambda v: decimal.Decimal(v) / 100)
    elif pa.types.is_fixed_size_binary(t):
        base = st.binary(min_size=t.byte_width, max_size=t.byte_width)
    elif pa.types.is_string(t) or pa.types.is_large_string(t):
        base = st.text(max_size=6)
    elif pa.types.is_binary(t) or pa.types.is_large_binary(t):
        base = st.binary(max_size=6)
    else:  # temporal: raw integers, valid for every unit used
        base = st.integers(0, 2**31 - 1)
    return st.one_of(st.none(), base) if nullable else base


@st.composite
def tables(draw) -> pa.Table:
    column_types = draw(st.lists(types, min_size=1, max_size=3))
    n = draw(st.integers(0, 40))
    columns = {}
    for i, t in enumerate(column_types):
        columns[f"c{i}"] = pa.array(draw(st.lists(values_of(t), min_size=n, max_size=n)), t)
    table = pa.table(columns)
    start = draw(st.integers(0, n))
    return table.slice(start, draw(st.integers(0, n - start)))


@pytest.mark.slow
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(table=tables(), page_bytes=st.sampled_from([16, 300, 1 << 23]), data=st.data())
def test_random_tables_round_trip(table: pa.Table, page_bytes: int, data) -> None:
    blob, schema, written = write_ours(table, page_bytes=page_bytes, max_page_bytes=4 * page_bytes)
    expected = table.combine_chunks()
    assert_tables(read_ours(blob, schema, colmap(written)), expected)
    if table.num_rows:
        rows = np.array(data.draw(st.lists(st.integers(0, table.num_rows - 1), max_size=20)))
        reader = LanceFileReader(BytesSource(blob))
        got = pa.table(reader.take(schema.fields, colmap(written), rows), schema=schema.to_arrow())
        assert_tables(got, expected.take(pa.array(rows, pa.int64())))
