"""Deletion vectors in both encodings."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lance_sql.errors import FormatError
from lance_sql.format.deletion import (
    BITMAP_THRESHOLD,
    decode_deletions,
    encode_deletions,
)


@given(st.lists(st.integers(0, 2**32 - 1), max_size=300))
@settings(max_examples=60, deadline=None)
def test_round_trip_small(values: list[int]) -> None:
    kind, data = encode_deletions(np.array(values, dtype=np.uint64).astype(np.uint32))
    assert kind == "arrow"
    assert decode_deletions(kind, data, "d", 1 << 32).tolist() == sorted(set(values))


def test_large_sets_use_the_bitmap() -> None:
    values = np.arange(0, 3 * BITMAP_THRESHOLD, 3, dtype=np.uint32)
    kind, data = encode_deletions(values)
    assert kind == "bitmap"
    assert data[:2] in (b"\x3a\x30", b"\x3b\x30")  # portable roaring cookies
    assert np.array_equal(decode_deletions(kind, data, "d", 1 << 32), values)
    kind, _ = encode_deletions(values[: BITMAP_THRESHOLD - 1])
    assert kind == "arrow"


@pytest.mark.parametrize("kind", ["arrow", "bitmap"])
def test_corrupt_files_raise_format_error(kind: str) -> None:
    n = 10 if kind == "arrow" else BITMAP_THRESHOLD + 10
    _, data = encode_deletions(np.arange(n, dtype=np.uint32))
    for cut in (0, 1, len(data) // 2, len(data) - 1):
        with pytest.raises(FormatError, match="frag-1"):
            decode_deletions(kind, data[:cut], "frag-1", n)
