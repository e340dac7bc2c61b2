"""Page-level decoding of encodings pylance does not emit for 2.0 but a 2.0 reader accepts."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from lance_sql.errors import FormatError, UnsupportedFeatureError
from lance_sql.format.datafile.decode_v2_0 import PageContext, decode
from lance_sql.format.datafile.encode_v2_0 import (
    EncodedPage,
    _flat,
    bits_slice,
    encode_array,
    encode_binary,
)
from lance_sql.format.pb import encodings_v2_0_pb2 as enc


def _context(page: EncodedPage) -> PageContext:
    """Lay the page's buffers out back to back and read them from memory."""
    blob, layout = bytearray(), []
    for buf in page.buffers:
        view = memoryview(buf).cast("B")
        layout.append((len(blob), view.nbytes))
        blob += view
    data = bytes(blob)
    return PageContext(lambda o, n: data[o : o + n], tuple(layout), (), (), "mem: page")


def _outer_nulls(inner: pa.Array, outer_valid: np.ndarray, encode_inner) -> tuple:
    page = EncodedPage(enc.ArrayEncoding())
    validity = pa.array(outer_valid)
    validity_enc = _flat(page, 1, bits_slice(validity.buffers()[1], 0, len(validity)))
    some = enc.Nullable.SomeNull(validity=validity_enc, values=encode_inner(page))
    page.encoding = enc.ArrayEncoding(nullable=enc.Nullable(some_nulls=some))
    return page, _context(page)


@pytest.mark.parametrize(("a", "b"), [(0, 40), (3, 29), (9, 10), (17, 40)])
def test_validity_around_values_that_have_nulls(a: int, b: int) -> None:
    values = pa.array([None if i % 3 == 0 else f"v{i}" for i in range(40)])
    outer = np.array([i % 5 != 0 for i in range(40)])
    page, ctx = _outer_nulls(values, outer, lambda p: encode_binary(p, values))
    got = decode(ctx, page.encoding, pa.string(), 40, a, b)
    expected = [v if outer[i] else None for i, v in enumerate(values.to_pylist())][a:b]
    assert got.to_pylist() == expected
    got.validate(full=True)


def test_validity_around_fixed_size_list() -> None:
    child = pa.array(np.arange(30, dtype=np.int32))
    fsl = pa.FixedSizeListArray.from_arrays(child, 3)
    outer = np.arange(10) % 4 != 1
    page, ctx = _outer_nulls(fsl, outer, lambda p: encode_array(p, fsl))
    got = decode(ctx, page.encoding, fsl.type, 10, 1, 9)
    assert got.to_pylist() == [v if outer[i] else None for i, v in enumerate(fsl.to_pylist())][1:9]


def test_type_and_encoding_must_agree() -> None:
    page = EncodedPage(enc.ArrayEncoding())
    page.encoding = encode_array(page, pa.array([1, 2, 3], pa.int64()))
    ctx = _context(page)
    assert decode(ctx, page.encoding, pa.int64(), 3, 0, 3).to_pylist() == [1, 2, 3]
    with pytest.raises(FormatError, match="mem: page: flat values of 64 bits for type int32"):
        decode(ctx, page.encoding, pa.int32(), 3, 0, 3)
    with pytest.raises(FormatError, match="flat encoding where a string value was expected"):
        decode(ctx, page.encoding, pa.string(), 3, 0, 3)
    with pytest.raises(FormatError, match="rows 2..4 requested from a page of 3"):
        decode(ctx, page.encoding, pa.int64(), 3, 2, 4)
    constant = enc.ArrayEncoding(constant=enc.Constant(value=b"\x01"))
    with pytest.raises(UnsupportedFeatureError, match="encoding 'constant'"):
        decode(ctx, constant, pa.int64(), 3, 0, 3)
