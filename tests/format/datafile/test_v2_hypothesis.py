"""Property tests: random Arrow tables through pylance's and our Lance 2.1/2.2 codecs.

Hypothesis draws a nested type (lists, large lists, structs, fixed-size lists over
primitives) and rows with nulls; pylance writes them and we must read exactly what
pylance reads (and ``take`` any rows); our 2.2 writer's files must read back in pylance.
"""

from __future__ import annotations

import io
import tempfile
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from v2_helpers import assert_values, open_ours, pylance_read, pylance_write

from lance_sql.format.datafile import LanceFileWriter
from lance_sql.format.schema import LanceSchema

pytest.importorskip("lance")

_PRIMITIVES = [
    pa.int8(), pa.int16(), pa.int32(), pa.int64(), pa.uint8(), pa.uint32(), pa.uint64(),
    pa.float32(), pa.float64(), pa.bool_(), pa.string(), pa.binary(), pa.large_string(),
    pa.date32(), pa.timestamp("us"), pa.large_binary(), pa.dictionary(pa.int8(), pa.string()),
]  # fmt: skip


def _types() -> st.SearchStrategy[pa.DataType]:
    prim = st.sampled_from(_PRIMITIVES)
    fsl = st.builds(lambda t, n: pa.list_(t, n), st.sampled_from([pa.float32(), pa.int64()]),
                    st.integers(1, 4))  # fmt: skip

    def extend(children):
        return st.one_of(
            st.builds(pa.list_, children),
            st.builds(pa.large_list, children),
            st.builds(lambda a, b: pa.struct([("a", a), ("b", b)]), children, children),
        )

    return st.recursive(st.one_of(prim, fsl), extend, max_leaves=4)


def _values(t: pa.DataType, null_rate: float) -> st.SearchStrategy:
    def maybe(s):
        return st.one_of(st.none(), s) if null_rate else s

    if pa.types.is_integer(t):
        info = np.iinfo(t.to_pandas_dtype())
        base = st.integers(int(info.min), int(info.max))
    elif pa.types.is_floating(t):
        base = st.floats(allow_nan=False, width=32 if t == pa.float32() else 64)
    elif pa.types.is_boolean(t):
        base = st.booleans()
    elif pa.types.is_string(t) or pa.types.is_large_string(t):
        base = st.text(alphabet="abcé€x", max_size=12) | st.sampled_from(["", "cat", "dog"])
    elif pa.types.is_binary(t) or pa.types.is_large_binary(t):
        base = st.binary(max_size=10)
    elif pa.types.is_dictionary(t):
        base = st.sampled_from(["red", "green", "blue", ""])
    elif pa.types.is_date32(t):
        base = st.dates()
    elif pa.types.is_timestamp(t):
        base = st.datetimes()
    elif pa.types.is_fixed_size_list(t):
        base = st.lists(_values(t.value_type, null_rate), min_size=t.list_size,
                        max_size=t.list_size)  # fmt: skip
    elif pa.types.is_list(t) or pa.types.is_large_list(t):
        base = st.lists(_values(t.value_type, null_rate), max_size=4)
    else:
        base = st.fixed_dictionaries({f.name: _values(f.type, null_rate) for f in t})
    return maybe(base)


@st.composite
def tables(draw) -> pa.Table:
    ncols = draw(st.integers(1, 3))
    rows = draw(st.integers(0, 40) | st.integers(100, 160))  # >= 100 rows allow dictionaries
    cols = {}
    for i in range(ncols):
        t = draw(_types())
        null_rate = draw(st.sampled_from([0.0, 0.3]))
        values = draw(st.lists(_values(t, null_rate), min_size=rows, max_size=rows))
        cols[f"c{i}"] = pa.array(values, t)
    return pa.table(cols)


_SETTINGS = settings(
    max_examples=25, deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)  # fmt: skip


@_SETTINGS
@given(table=tables(), version=st.sampled_from(["2.1", "2.2"]), seed=st.integers(0, 10**6))
def test_pylance_writes_we_read(table: pa.Table, version: str, seed: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "h.lance"
        data = pylance_write(path, table, version)
        expected = pylance_read(path)
    reader, cmap = open_ours(data)
    rng = np.random.default_rng(seed)
    rows = rng.integers(0, max(table.num_rows, 1), 7) if table.num_rows else np.array([], int)
    for field in reader.schema.fields:
        want = expected.column(field.name)
        assert_values(reader.read([field], cmap)[0], want, field.name)
        assert_values(reader.take([field], cmap, rows)[0], want.take(pa.array(rows)), field.name)


@pytest.mark.slow
@_SETTINGS
@given(table=tables())
def test_we_write_pylance_reads(table: pa.Table) -> None:
    schema = LanceSchema.from_arrow(table.schema)
    sink = io.BytesIO()
    writer = LanceFileWriter(sink, schema, version="2.2", page_bytes=512, max_page_bytes=2048)
    for batch in table.to_batches(max_chunksize=13) or [table]:
        writer.write_batch(batch)
    writer.finish()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "ours.lance"
        path.write_bytes(sink.getvalue())
        got = pylance_read(path)
    reader, cmap = open_ours(sink.getvalue())
    for field in reader.schema.fields:
        assert_values(got.column(field.name), table.column(field.name), field.name)
        assert_values(reader.read([field], cmap)[0], table.column(field.name), field.name)
