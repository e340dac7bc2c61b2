"""Row id and row version sequence codecs (rowids.proto), checked against pylance."""

from __future__ import annotations

import glob
import os

import lance
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from lance_sql.errors import FormatError
from lance_sql.format.manifest import ManifestCodec
from lance_sql.format.pb import rowids_pb2
from lance_sql.format.row_ids import (
    decode_row_id_pieces,
    decode_row_ids,
    decode_version_runs,
    decode_versions,
    encode_row_ids,
    encode_versions,
    row_id_segments,
)

U64_MAX = 2**64 - 1


def _kinds(data: bytes) -> list[str]:
    return [seg.WhichOneof("segment") for seg in row_id_segments(data)]


def _array_kind(seg: rowids_pb2.U64Segment) -> str:
    kind = seg.WhichOneof("segment")
    arr = seg.range_with_holes.holes if kind == "range_with_holes" else getattr(seg, kind)
    return arr.WhichOneof("array")


def _single_segment(ids: np.ndarray) -> rowids_pb2.U64Segment:
    from lance_sql.format.row_ids import _encode_segment

    return _encode_segment(np.asarray(ids, dtype=np.uint64))


def _round_trip(ids: np.ndarray) -> bytes:
    data = encode_row_ids(ids)
    out = decode_row_ids(data)
    assert out.dtype == np.uint64
    assert np.array_equal(out, np.asarray(ids, dtype=np.uint64))
    return data


# ------------------------------------------------------------------ hypothesis round trips


def _sorted_with_gaps(draw_list: list[tuple[int, int]], base: int) -> np.ndarray:
    parts, pos = [], base
    for gap, length in draw_list:
        pos += gap
        parts.append(np.arange(pos, pos + length, dtype=np.uint64))
        pos += length
    return np.concatenate(parts) if parts else np.zeros(0, np.uint64)


@given(arrays(np.uint64, st.integers(0, 300), elements=st.integers(0, U64_MAX)))
@settings(max_examples=150, deadline=None)
def test_round_trip_arbitrary(ids: np.ndarray) -> None:
    _round_trip(ids)


@given(
    st.lists(st.tuples(st.integers(0, 300), st.integers(1, 200)), max_size=12),
    st.integers(0, 2**40),
    st.booleans(),
)
@settings(max_examples=150, deadline=None)
def test_round_trip_runs(runs: list[tuple[int, int]], base: int, shuffle_blocks: bool) -> None:
    ids = _sorted_with_gaps(runs, base)
    if shuffle_blocks and ids.size:
        ids = np.concatenate(np.array_split(ids, 4)[::-1])
    data = _round_trip(ids)
    # Never larger than the whole fragment as one reference-chosen segment.
    if ids.size:
        single = rowids_pb2.RowIdSequence(segments=[_single_segment(ids)])
        assert len(data) <= single.ByteSize()
    assert encode_row_ids(decode_row_ids(data)) == data  # deterministic


@given(st.lists(st.tuples(st.integers(0, 2**40), st.integers(1, 50)), max_size=30))
@settings(max_examples=150, deadline=None)
def test_versions_round_trip(runs: list[tuple[int, int]]) -> None:
    versions = np.repeat(
        np.array([v for v, _ in runs], dtype=np.uint64),
        np.array([n for _, n in runs], dtype=np.int64),
    )
    data = encode_versions(versions)
    out = decode_versions(data, versions.size)
    assert out.dtype == np.uint64
    assert np.array_equal(out, versions)
    seq = rowids_pb2.RowDatasetVersionSequence.FromString(data)
    # Consecutive equal versions form one run whose span is the run's row positions.
    assert all(seq.runs[i].version != seq.runs[i + 1].version for i in range(len(seq.runs) - 1))
    pos = 0
    for run in seq.runs:
        assert run.span.WhichOneof("segment") == "range"
        assert run.span.range.start == pos
        pos = run.span.range.end
    assert pos == versions.size


# ------------------------------------------------------------------ each kind explicitly


def test_empty() -> None:
    assert decode_row_ids(b"").size == 0
    assert _round_trip(np.zeros(0, np.uint64)) == b""
    assert decode_versions(encode_versions(np.zeros(0, np.uint64)), 0).size == 0


def test_range() -> None:
    data = _round_trip(np.arange(100, 105, dtype=np.uint64))
    (seg,) = row_id_segments(data)
    assert (seg.range.start, seg.range.end) == (100, 105)


def test_range_with_holes() -> None:
    ids = np.setdiff1d(np.arange(1000, 3000, dtype=np.uint64), [1500, 2500])
    (seg,) = row_id_segments(_round_trip(ids))
    assert seg.WhichOneof("segment") == "range_with_holes"
    h = seg.range_with_holes
    assert (h.start, h.end) == (1000, 3000)
    assert h.holes.u16_array.base == 1500
    assert np.frombuffer(h.holes.u16_array.offsets, "<u2").tolist() == [0, 1000]


def test_range_with_bitmap() -> None:
    ids = np.arange(0, 1000, 2, dtype=np.uint64)
    (seg,) = row_id_segments(_round_trip(ids))
    assert seg.WhichOneof("segment") == "range_with_bitmap"
    b = seg.range_with_bitmap
    assert (b.start, b.end) == (0, 999)
    assert b.bitmap[0] == 0b01010101  # LSB-first: values 0, 2, 4, 6 present
    assert len(b.bitmap) == 125


def test_sorted_array_and_array() -> None:
    ids = np.arange(0, 64 * 100, 64, dtype=np.uint64)
    (seg,) = row_id_segments(_round_trip(ids))
    assert seg.WhichOneof("segment") == "sorted_array"
    (seg,) = row_id_segments(_round_trip(ids[::-1].copy()))
    assert seg.WhichOneof("segment") == "array"
    (seg,) = row_id_segments(_round_trip(np.array([5, 5, 7], np.uint64)))
    assert seg.WhichOneof("segment") == "array"


@pytest.mark.parametrize(
    ("step", "width"),
    [(1, "u16_array"), (0xFFFF // 8, "u16_array"), (70_000, "u32_array"), (2**40, "u64_array")],
)
def test_array_widths(step: int, width: str) -> None:
    ids = (np.arange(9, dtype=np.uint64) * np.uint64(step))[::-1].copy() + np.uint64(7)
    (seg,) = row_id_segments(_round_trip(ids))
    assert seg.WhichOneof("segment") == "array"
    assert _array_kind(seg) == width
    if width != "u64_array":
        assert getattr(seg.array, width).base == 7


def test_width_boundaries() -> None:
    for span, width in [
        (0xFFFF, "u16_array"),
        (0x10000, "u32_array"),
        (0xFFFFFFFF, "u32_array"),
        (0x100000000, "u64_array"),
    ]:
        (seg,) = row_id_segments(_round_trip(np.array([span, 0, 1], np.uint64)))
        assert _array_kind(seg) == width, span


def test_max_value_is_not_a_range() -> None:
    data = _round_trip(np.array([U64_MAX - 1, U64_MAX], np.uint64))
    assert _kinds(data) == ["sorted_array"]


def test_split_into_segments_when_smaller() -> None:
    ids = np.concatenate(
        [np.arange(10_000, 20_000), np.arange(0, 5000), np.arange(50_000, 60_000)]
    ).astype(np.uint64)
    data = _round_trip(ids)
    assert _kinds(data) == ["range", "range", "range"]


def test_bitmap_is_lsb_first_hand_built() -> None:
    seq = rowids_pb2.RowIdSequence()
    seg = seq.segments.add()
    seg.range_with_bitmap.start = 100
    seg.range_with_bitmap.end = 111
    seg.range_with_bitmap.bitmap = bytes([0b10000011, 0b00000101])
    assert decode_row_ids(seq.SerializeToString()).tolist() == [100, 101, 107, 108, 110]
    seq.segments.add().range.end = 2  # a second segment follows in row order
    assert decode_row_ids(seq.SerializeToString()).tolist() == [100, 101, 107, 108, 110, 0, 1]


def test_versions_accept_any_span_kind() -> None:
    seq = rowids_pb2.RowDatasetVersionSequence()
    a = seq.runs.add(version=3)
    a.span.range_with_bitmap.start, a.span.range_with_bitmap.end = 10, 19
    a.span.range_with_bitmap.bitmap = bytes([0b11011011, 0b1])
    b = seq.runs.add(version=5)
    b.span.range_with_holes.start, b.span.range_with_holes.end = 0, 4
    b.span.range_with_holes.holes.u64_array.values = np.array([2], "<u8").tobytes()
    c = seq.runs.add(version=7)
    c.span.sorted_array.u32_array.base = 9
    c.span.sorted_array.u32_array.offsets = np.array([0, 1 << 20], "<u4").tobytes()
    data = seq.SerializeToString()
    assert decode_versions(data, 12).tolist() == [3] * 7 + [5] * 3 + [7] * 2
    with pytest.raises(FormatError, match="v.bin"):
        decode_versions(data, 11, "v.bin")


# ------------------------------------------------------------------ corrupt input


def _seq(build) -> bytes:
    seq = rowids_pb2.RowIdSequence()
    build(seq.segments.add())
    return seq.SerializeToString()


def _bad_u16(seg):
    seg.array.u16_array.offsets = b"\x01\x02\x03"


def _bad_bitmap_len(seg):
    seg.range_with_bitmap.end = 20
    seg.range_with_bitmap.bitmap = b"\xff"


def _bitmap_tail(seg):
    seg.range_with_bitmap.end = 4
    seg.range_with_bitmap.bitmap = b"\xff"


def _reversed_range(seg):
    seg.range.start, seg.range.end = 10, 5


def _huge_range(seg):
    seg.range.end = 2**40


def _missing_holes(seg):
    seg.range_with_holes.end = 5


def _hole_outside(seg):
    seg.range_with_holes.end = 5
    seg.range_with_holes.holes.u16_array.base = 9
    seg.range_with_holes.holes.u16_array.offsets = b"\x00\x00"


def _overflow(seg):
    seg.sorted_array.u32_array.base = U64_MAX
    seg.sorted_array.u32_array.offsets = b"\x01\x00\x00\x00"


@pytest.mark.parametrize(
    "build",
    [
        _bad_u16,
        _bad_bitmap_len,
        _bitmap_tail,
        _reversed_range,
        _huge_range,
        _missing_holes,
        _hole_outside,
        _overflow,
        lambda seg: seg.SetInParent(),
    ],
)
def test_invalid_segments(build) -> None:
    data = _seq(build)
    with pytest.raises(FormatError, match="frag-3.rowids"):
        decode_row_ids(data, "frag-3.rowids")
    vseq = rowids_pb2.RowDatasetVersionSequence()
    vseq.runs.add(version=1).span.CopyFrom(row_id_segments(data)[0])
    with pytest.raises(FormatError, match="v.bin"):
        decode_versions(vseq.SerializeToString(), 5, "v.bin")


def test_truncated_and_garbage() -> None:
    ids = np.concatenate([np.arange(0, 1000, 3), np.arange(5000, 5100)[::-1]]).astype(np.uint64)
    data = encode_row_ids(ids)
    vdata = encode_versions(np.repeat(np.arange(1, 40, dtype=np.uint64), 3))
    for cut in range(1, len(data)):
        try:
            out = decode_row_ids(data[:cut], "p")
        except FormatError as exc:
            assert "p" in str(exc)
        else:  # a cut on a field boundary is still a valid (shorter) message
            assert out.size < ids.size
    for cut in range(1, len(vdata)):
        with pytest.raises(FormatError, match="p"):
            decode_versions(vdata[:cut], 117, "p")
    for junk in (b"\xff", b"\x0a\xff\xff", b"\x0a\x05\x0a\x03\x08", b"\x07"):
        with pytest.raises(FormatError, match="junk"):
            decode_row_ids(junk, "junk")
    run = rowids_pb2.RowDatasetVersionSequence()
    run.runs.add(version=1)  # no span
    with pytest.raises(FormatError, match="no span"):
        decode_versions(run.SerializeToString(), 0)


# ------------------------------------------------------------------ interop with pylance


def _table(start: int, n: int) -> pa.Table:
    return pa.table(
        {
            "id": pa.array(range(start, start + n), pa.int64()),
            "x": pa.array(range(n), pa.int64()),
        }
    )


def _check_version(uri: str, manifest_path: str, stats: dict) -> None:
    with open(manifest_path, "rb") as fh:
        m = ManifestCodec.decode(fh.read(), manifest_path)
    ds = lance.dataset(uri, version=m.version)
    t = ds.to_table(
        columns=["id", "_row_created_at_version", "_row_last_updated_at_version"],
        with_row_id=True,
        with_row_address=True,
    )
    addr = t["_rowaddr"].to_numpy()
    for frag in m.fragments:
        seqs = (
            frag.row_id_sequence,
            frag.created_at_version_sequence,
            frag.last_updated_at_version_sequence,
        )
        assert all(isinstance(s, bytes) for s in seqs), frag
        rid_bytes, created_bytes, updated_bytes = seqs
        sel = np.flatnonzero((addr >> np.uint64(32)) == np.uint64(frag.id))
        offsets = (addr[sel] & np.uint64(0xFFFFFFFF)).astype(np.int64)
        order = np.argsort(offsets)
        sel, offsets = sel[order], offsets[order]
        assert offsets.size == frag.num_rows

        ids = decode_row_ids(rid_bytes, manifest_path)
        assert ids.size == frag.physical_rows
        assert np.array_equal(ids[offsets], t["_rowid"].to_numpy()[sel])
        for raw, col in (
            (created_bytes, "_row_created_at_version"),
            (updated_bytes, "_row_last_updated_at_version"),
        ):
            versions = decode_versions(raw, frag.physical_rows, manifest_path)
            assert np.array_equal(versions[offsets], t[col].to_numpy()[sel]), col
            assert np.array_equal(
                decode_versions(encode_versions(versions), frag.physical_rows), versions
            )
            assert len(encode_versions(versions)) <= len(raw) + 2 * len(
                rowids_pb2.RowDatasetVersionSequence.FromString(raw).runs
            )

        ours = encode_row_ids(ids)
        assert np.array_equal(decode_row_ids(ours), ids)
        assert len(ours) <= len(rid_bytes), (ids, _kinds(rid_bytes), _kinds(ours))
        for seg in row_id_segments(rid_bytes):
            stats.setdefault("kinds", set()).add(seg.WhichOneof("segment"))


@pytest.mark.parametrize("big", [False, True])
def test_interop_with_pylance(tmp_path, big: bool) -> None:
    uri = str(tmp_path / "t")
    n = 3000 if big else 100
    lance.write_dataset(_table(0, n), uri, enable_stable_row_ids=True)
    lance.write_dataset(_table(n, n // 2), uri, mode="append")
    ds = lance.dataset(uri)
    ds.delete(f"id % 3 = 0 and id < {int(n * 0.6)}" if not big else "id % 3 = 0 or id % 7 = 1")
    lance.write_dataset(_table(10 * n, 20), uri, mode="append")
    ds = lance.dataset(uri)
    ds.update({"x": "x + 1"}, where="id < 10")
    ds = lance.dataset(uri)
    updated_at = ds.version
    ds.delete(f"id >= {n // 4} and id < {n // 3}")
    ds = lance.dataset(uri)
    ds.optimize.compact_files()
    ds = lance.dataset(uri)
    ds.update({"x": "x * 2"}, where="id % 5 = 2")
    ds = lance.dataset(uri)
    assert ds.version >= 7

    # The history implies these lineage facts for the latest version.
    t = ds.to_table(
        columns=["id", "_row_created_at_version", "_row_last_updated_at_version"],
        with_row_id=True,
    )
    first_append = pc.less(t["id"], n)
    assert pc.all(pc.equal(pc.filter(t["_row_created_at_version"], first_append), 1)).as_py()
    assert pc.all(
        pc.equal(
            pc.filter(t["_rowid"], first_append),
            pc.cast(pc.filter(t["id"], first_append), pa.uint64()),
        )
    ).as_py()

    # Rows with id < 10 were updated once (the later update touches id % 5 == 2).
    ids = t["id"].to_numpy()
    small = (ids < 10) & (ids % 5 != 2)
    assert small.sum() >= 2
    assert np.all(t["_row_last_updated_at_version"].to_numpy()[small] == updated_at)
    assert np.all(t["_row_created_at_version"].to_numpy()[small] == 1)

    stats: dict = {}
    manifests = glob.glob(os.path.join(uri, "_versions", "*.manifest"))
    assert len(manifests) == ds.version
    for path in manifests:
        _check_version(uri, path, stats)
    assert "range" in stats["kinds"]
    assert stats["kinds"] & {"range_with_bitmap", "range_with_holes", "array", "sorted_array"}


# ------------------------------------------------------------- compact (unmaterialised) forms


def _mixed_sequence(parts: list[tuple[str, int, int]]) -> tuple[bytes, np.ndarray]:
    """A sequence of hand-chosen segment kinds, and the ids it holds."""
    segments, ids = [], []
    for kind, start, n in parts:
        values = np.arange(start, start + n, dtype=np.uint64)
        if kind == "range":
            segments.append(rowids_pb2.U64Segment(range=rowids_pb2.U64Segment.Range(
                start=start, end=start + n)))
        else:
            values = values[::-1].copy() if kind == "array" else values[::2].copy()
            seq = rowids_pb2.RowIdSequence.FromString(encode_row_ids(values))
            segments.extend(seq.segments)
        ids.append(values)
    data = rowids_pb2.RowIdSequence(segments=segments).SerializeToString()
    return data, (np.concatenate(ids) if ids else np.zeros(0, np.uint64))


@given(st.lists(st.tuples(st.sampled_from(["range", "array", "sorted"]),
                          st.integers(0, 2**40), st.integers(0, 300)), max_size=8),
       st.integers(0, 2**31))
@settings(max_examples=150, deadline=None)
def test_pieces_take_equals_materialised(parts: list[tuple[str, int, int]], seed: int) -> None:
    data, expected = _mixed_sequence(parts)
    pieces = decode_row_id_pieces(data)
    assert pieces.num_rows == expected.size
    assert np.array_equal(pieces.materialize(), expected)
    assert np.array_equal(decode_row_ids(data), expected)
    if expected.size:
        positions = np.random.default_rng(seed).integers(0, expected.size, 50)
        assert np.array_equal(pieces.take(positions), expected[positions])
    ranges = pieces.ranges()
    kinds = {seg.WhichOneof("segment") for seg in row_id_segments(data)
             if seg.WhichOneof("segment") != "range" or seg.range.end > seg.range.start}
    if kinds == {"range"}:
        assert ranges is not None
        first, at, length = ranges
        rebuilt = np.concatenate([np.arange(f, f + n, dtype=np.uint64)
                                  for f, n in zip(first.tolist(), length.tolist(), strict=True)])
        assert np.array_equal(rebuilt, expected)
        assert np.array_equal(at, np.r_[0, np.cumsum(length)[:-1]])
    else:  # explicit ids somewhere (or no rows): no ranges to offer
        assert ranges is None


@given(st.lists(st.tuples(st.integers(0, 2**40), st.integers(1, 50)), max_size=30),
       st.integers(0, 2**31))
@settings(max_examples=150, deadline=None)
def test_version_runs_take_equals_materialised(runs: list[tuple[int, int]], seed: int) -> None:
    versions = np.repeat(np.array([v for v, _ in runs], dtype=np.uint64),
                         np.array([n for _, n in runs], dtype=np.int64))
    compact = decode_version_runs(encode_versions(versions), versions.size)
    assert np.array_equal(compact.materialize(), versions)
    if versions.size:
        positions = np.random.default_rng(seed).integers(0, versions.size, 50)
        assert np.array_equal(compact.take(positions), versions[positions])
