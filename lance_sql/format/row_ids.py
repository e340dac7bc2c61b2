"""Codecs for stable row ids and row version sequences (``rowids.proto``).

A fragment of a table with stable row ids carries three inline (or external) blobs:

* ``RowIdSequence`` -- the fragment's row ids in row order, as a list of ``U64Segment``;
* ``created_at_version_sequence`` / ``last_updated_at_version_sequence`` -- a
  ``RowDatasetVersionSequence``: runs of consecutive rows sharing one dataset version.

Decoding
--------
A segment is one of ``range`` (``start..end``, end exclusive), ``range_with_holes``
(the range minus the sorted ``holes`` values), ``range_with_bitmap`` (the range
filtered by a bitmap, **LSB-first**: bit ``i`` of byte ``k`` covers ``start + 8k + i``,
1 = present), ``sorted_array`` or ``array`` (an ``EncodedU64Array``: ``u16``/``u32``
offsets from ``base`` or plain ``u64`` values, all little-endian).  A version run uses
only the *length* of its ``span`` segment; any kind is accepted.

Encoding (selection rules)
--------------------------
Per segment we follow the reference (``rust/lance-table/src/rowids/segment.rs``):

* empty -> ``range 0..0``; strictly increasing without gaps -> ``range``;
* strictly increasing with gaps: estimate ``holes = 24 + 4*n_holes``,
  ``bitmap = 24 + ceil(slots/8)``, ``sorted = 24 + 2*count`` and take the smallest,
  ties preferring holes, then bitmap, then sorted array;
* anything else -> ``array``.
* ``EncodedU64Array``: base = min; ``u16`` if ``max - min <= 0xFFFF``, else ``u32`` if
  ``<= 0xFFFFFFFF``, else ``u64`` (empty -> ``u64`` with no values).

Deviations: a sorted run reaching ``2**64 - 1`` cannot be written as a range (its
exclusive end overflows u64) and becomes a ``sorted_array``; duplicates make a run
unsorted.

Segmentation (our choice; the reference writes one segment for a fresh slice and
concatenates segments when fragments are merged): we build two candidates and keep the
one with fewer serialized bytes (the single segment on a tie):

1. the whole fragment as one segment (what the reference writes for a slice);
2. the ids split into strictly increasing runs, each further split where the gap
   between neighbours exceeds :data:`SPLIT_GAP` values; consecutive pieces shorter than
   :data:`MIN_PIECE` are merged back together, and each group is encoded with the rules
   above.  Skipped when that produces more than :data:`MAX_GROUPS` groups.

Version sequences are run-length encoded: one run per maximal block of equal versions,
``span = range(first_position, end_position)`` as the reference's
``build_version_meta`` writes.  pylance 14.0.2 instead copies the row-id segment shapes
into ``span`` after a compaction; only the span's length is meaningful.

Both decoders raise :class:`~lance_sql.errors.FormatError` naming ``path`` on corrupt
input.  Work is vectorised per segment/run; Python loops only iterate over segments.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from google.protobuf.message import DecodeError

from lance_sql.errors import FormatError
from lance_sql.format.pb import rowids_pb2

__all__ = [
    "MAX_ROWS",
    "RowIdPieces",
    "VersionRuns",
    "decode_row_id_pieces",
    "decode_row_ids",
    "decode_version_runs",
    "decode_versions",
    "encode_row_ids",
    "encode_versions",
    "row_id_segments",
]

U64_MAX = (1 << 64) - 1
# Row offsets inside a fragment are u32, so no fragment holds more rows than this.
MAX_ROWS = 1 << 32
# A gap of more than this many missing values starts a new piece (a bitmap would spend
# SPLIT_GAP / 8 bytes on it, about the overhead of one more segment).
SPLIT_GAP = 128
# Pieces shorter than this are merged with their neighbours into one group.
MIN_PIECE = 16
# Never build more groups than this for the segmented candidate.
MAX_GROUPS = 4096

_EMPTY = np.zeros(0, dtype=np.uint64)


class _Corrupt(Exception):
    """Internal: a message decodes as protobuf but breaks an invariant."""


# --------------------------------------------------------------------------- decoding


def _decode_array(arr: rowids_pb2.EncodedU64Array) -> np.ndarray:
    kind = arr.WhichOneof("array")
    if kind is None:
        raise _Corrupt("EncodedU64Array has no array kind")
    if kind == "u64_array":
        raw = arr.u64_array.values
        if len(raw) % 8:
            raise _Corrupt(f"u64_array has {len(raw)} bytes, not a multiple of 8")
        return np.frombuffer(raw, dtype="<u8").astype(np.uint64)
    sub = getattr(arr, kind)
    width = 2 if kind == "u16_array" else 4
    if len(sub.offsets) % width:
        raise _Corrupt(f"{kind} has {len(sub.offsets)} bytes, not a multiple of {width}")
    offsets = np.frombuffer(sub.offsets, dtype=f"<u{width}").astype(np.uint64)
    if offsets.size and sub.base + int(offsets.max()) > U64_MAX:
        raise _Corrupt(f"{kind} base {sub.base} + offset overflows u64")
    return offsets + np.uint64(sub.base)


def _array_len(arr: rowids_pb2.EncodedU64Array) -> int:
    """Values in an EncodedU64Array, from its byte length (decoding checks the rest)."""
    kind = arr.WhichOneof("array")
    if kind is None:
        raise _Corrupt("EncodedU64Array has no array kind")
    raw = arr.u64_array.values if kind == "u64_array" else getattr(arr, kind).offsets
    width = {"u64_array": 8, "u32_array": 4, "u16_array": 2}[kind]
    if len(raw) % width:
        raise _Corrupt(f"{kind} has {len(raw)} bytes, not a multiple of {width}")
    return len(raw) // width


def _check_range(start: int, end: int, kind: str) -> int:
    if end < start:
        raise _Corrupt(f"{kind} end {end} < start {start}")
    if end - start > MAX_ROWS:
        raise _Corrupt(f"{kind} spans {end - start} values, more than a fragment holds")
    return end - start


_POPCOUNT = np.array([bin(i).count("1") for i in range(256)], dtype=np.uint8)


def _bitmap_bytes(seg, n: int) -> np.ndarray:
    data = np.frombuffer(seg.bitmap, dtype=np.uint8)
    if len(data) != (n + 7) // 8:
        raise _Corrupt(f"range_with_bitmap of {n} values has {len(data)} bitmap bytes")
    if n % 8 and data.size and int(data[-1]) >> (n % 8):
        raise _Corrupt("range_with_bitmap has bits set past the end of its range")
    return data


def _bitmap_count(seg, n: int) -> int:
    return int(_POPCOUNT[_bitmap_bytes(seg, n)].sum(dtype=np.int64))


def _bitmap_positions(seg, n: int) -> np.ndarray:
    """Offsets of the set bits (LSB first), expanding only the non-zero bytes: a range of
    2**32 values with a few bits set stays small."""
    data = _bitmap_bytes(seg, n)
    nonzero = np.flatnonzero(data)
    bits = np.unpackbits(data[nonzero], bitorder="little").reshape(-1, 8).astype(bool)
    return ((nonzero[:, None] * 8) + np.arange(8))[bits].astype(np.uint64)


def _holes(seg) -> np.ndarray:
    """The validated holes of a ``range_with_holes``: sorted, unique, inside the range."""
    if not seg.HasField("holes"):
        raise _Corrupt("range_with_holes has no holes array")
    holes = _decode_array(seg.holes)
    if holes.size and (
        int(holes.min()) < seg.start
        or int(holes.max()) >= seg.end
        or (holes.size > 1 and not np.all(holes[1:] > holes[:-1]))
    ):
        raise _Corrupt("range_with_holes holes are unsorted or outside the range")
    return holes


def _holes_mask(seg, n: int) -> np.ndarray:
    holes = _holes(seg)
    mask = np.ones(n, dtype=bool)
    mask[(holes - np.uint64(seg.start)).astype(np.int64)] = False
    return mask


def _segment_values(seg: rowids_pb2.U64Segment) -> np.ndarray:
    kind = seg.WhichOneof("segment")
    if kind is None:
        raise _Corrupt("U64Segment has no segment kind")
    if kind in ("sorted_array", "array"):
        return _decode_array(getattr(seg, kind))
    sub = getattr(seg, kind)
    n = _check_range(sub.start, sub.end, kind)
    if kind == "range_with_bitmap":
        return _bitmap_positions(sub, n) + np.uint64(sub.start)
    values = np.arange(n, dtype=np.uint64) + np.uint64(sub.start)
    if kind == "range":
        return values
    return values[_holes_mask(sub, n)]


def _segment_len(seg: rowids_pb2.U64Segment) -> int:
    """Number of values in a segment without materialising it."""
    kind = seg.WhichOneof("segment")
    if kind is None:
        raise _Corrupt("U64Segment has no segment kind")
    if kind in ("sorted_array", "array"):
        return _array_len(getattr(seg, kind))
    sub = getattr(seg, kind)
    n = _check_range(sub.start, sub.end, kind)
    if kind == "range":
        return n
    if kind == "range_with_holes":  # holes are unique and inside: no need to expand
        return n - int(_holes(sub).size)
    return _bitmap_count(sub, n)


def _parse(message, data: bytes, path: str, what: str):
    try:
        message.ParseFromString(bytes(data))
    except (DecodeError, ValueError) as exc:
        raise FormatError(f"{path}: {what} does not decode: {exc}") from exc
    return message


def row_id_segments(data: bytes, path: str = "<inline>") -> list[rowids_pb2.U64Segment]:
    """The parsed segments of a ``RowIdSequence`` (for inspection and tests)."""
    return list(_parse(rowids_pb2.RowIdSequence(), data, path, "row id sequence").segments)


@dataclass(frozen=True)
class RowIdPieces:
    """A fragment's row ids without materialising them: pieces of consecutive rows.

    Piece ``p`` covers rows ``starts[p] .. starts[p+1]``; a range piece holds the ids
    ``first[p], first[p]+1, ...`` (``offset[p] == -1``), any other piece's ids are
    ``values[offset[p]:]``. Fresh and compacted fragments are a few range pieces, so
    ids at given rows cost arithmetic instead of a 8-byte-per-row array.
    """

    starts: np.ndarray  # int64, ascending, starts[0] == 0
    first: np.ndarray   # uint64
    offset: np.ndarray  # int64
    values: np.ndarray  # uint64: the explicit pieces' ids, back to back
    num_rows: int

    @property
    def nbytes(self) -> int:
        return int(self.starts.nbytes + self.first.nbytes + self.offset.nbytes
                   + self.values.nbytes)

    def take(self, positions: np.ndarray) -> np.ndarray:
        """Ids at row ``positions`` (int64, each in ``[0, num_rows)``)."""
        positions = np.asarray(positions, np.int64)
        if self.starts.size == 1 and self.offset[0] < 0:  # one range: the common case
            return positions.astype(np.uint64) + self.first[0]
        piece = np.searchsorted(self.starts, positions, "right") - 1
        within = positions - self.starts[piece]
        if not self.values.size:
            return within.astype(np.uint64) + self.first[piece]
        offset = self.offset[piece]
        explicit = self.values[np.maximum(offset, 0) + within * (offset >= 0)]
        return np.where(offset < 0, within.astype(np.uint64) + self.first[piece], explicit)

    def ranges(self) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
        """``(first id, first row, length)`` per piece when every piece is a range."""
        if self.values.size or not self.num_rows:
            return None
        return self.first, self.starts, np.diff(np.r_[self.starts, self.num_rows])

    def materialize(self) -> np.ndarray:
        """Every row's id (``uint64``)."""
        return self.take(np.arange(self.num_rows, dtype=np.int64))


def _range_runs(seg: rowids_pb2.U64Segment) -> tuple[np.ndarray, np.ndarray] | None:
    """``(first id, length)`` of each run of consecutive ids of a ``range`` or
    ``range_with_holes`` segment (None for other kinds): as many runs as holes, so a
    few bytes claiming 2**32 ids stay a few bytes."""
    kind = seg.WhichOneof("segment")
    if kind == "range":
        n = _check_range(seg.range.start, seg.range.end, kind)
        return np.array([seg.range.start], np.uint64), np.array([n], np.int64)
    if kind != "range_with_holes":
        return None
    sub = seg.range_with_holes
    _check_range(sub.start, sub.end, kind)
    holes = _holes(sub)
    firsts = np.concatenate(([np.uint64(sub.start)], holes + np.uint64(1)))
    ends = np.concatenate((holes, [np.uint64(sub.end)]))
    return firsts, (ends - firsts).astype(np.int64)


def decode_row_id_pieces(data: bytes, path: str = "<inline>",
                         num_rows: int = MAX_ROWS) -> RowIdPieces:
    """The row ids of a fragment as :class:`RowIdPieces` (validated like :func:`decode_row_ids`).

    Ranges (with or without holes) stay ranges; only explicit arrays and bitmaps, whose
    size follows their bytes, are expanded. A sequence of more than ``num_rows`` ids (the
    fragment's rows) is refused.
    """
    segments = row_id_segments(data, path)
    starts, first, offset, explicit = [], [], [], []
    rows = stored = 0
    limit = min(num_rows, MAX_ROWS)
    try:
        for seg in segments:
            runs = _range_runs(seg)
            if runs is not None:
                firsts, lengths = runs
                keep = lengths > 0
                firsts, lengths = firsts[keep], lengths[keep]
                n = int(lengths.sum())
                if rows + n > limit:
                    raise FormatError(f"{path}: row id sequence holds more than {limit} ids")
                starts.append(rows + np.cumsum(lengths) - lengths)
                first.append(firsts)
                offset.append(np.full(firsts.size, -1, np.int64))
                rows += n
                continue
            if rows + _segment_len(seg) > limit:  # counted before a bitmap is expanded
                raise FormatError(f"{path}: row id sequence holds more than {limit} ids")
            values = _segment_values(seg)
            if values.size:
                starts.append(np.array([rows], np.int64))
                first.append(np.zeros(1, np.uint64))
                offset.append(np.array([stored], np.int64))
                explicit.append(values)
                stored += values.size
            rows += values.size
    except _Corrupt as exc:
        raise FormatError(f"{path}: corrupt row id sequence: {exc}") from exc
    if not starts or not sum(a.size for a in starts):
        return RowIdPieces(np.zeros(1, np.int64), np.zeros(1, np.uint64),
                           np.full(1, -1, np.int64), _EMPTY, rows)
    return RowIdPieces(np.concatenate(starts).astype(np.int64, copy=False),
                       np.concatenate(first).astype(np.uint64, copy=False),
                       np.concatenate(offset).astype(np.int64, copy=False),
                       np.concatenate(explicit).astype(np.uint64, copy=False) if explicit
                       else _EMPTY, rows)


def decode_row_ids(data: bytes, path: str = "<inline>") -> np.ndarray:
    """The row ids of a fragment, in row order, as ``uint64``."""
    return decode_row_id_pieces(data, path).materialize()


@dataclass(frozen=True)
class VersionRuns:
    """Per-row dataset versions, run-length encoded: run ``r`` starts at row ``starts[r]``."""

    starts: np.ndarray    # int64, ascending, starts[0] == 0
    versions: np.ndarray  # uint64
    num_rows: int

    @property
    def nbytes(self) -> int:
        return int(self.starts.nbytes + self.versions.nbytes)

    def take(self, positions: np.ndarray) -> np.ndarray:
        """Versions at row ``positions`` (each in ``[0, num_rows)``)."""
        if self.versions.size == 1:
            return np.full(np.shape(positions), self.versions[0], np.uint64)
        return self.versions[np.searchsorted(self.starts, positions, "right") - 1]

    def materialize(self) -> np.ndarray:
        return np.repeat(self.versions, np.diff(np.r_[self.starts, self.num_rows]))

    @staticmethod
    def uniform(version: int, num_rows: int) -> VersionRuns:
        """Every row at ``version``."""
        return VersionRuns(np.zeros(1, np.int64), np.array([version], np.uint64), num_rows)


def decode_version_runs(data: bytes, num_rows: int, path: str = "<inline>") -> VersionRuns:
    """The runs of a ``RowDatasetVersionSequence`` for a fragment of ``num_rows`` rows."""
    seq = _parse(rowids_pb2.RowDatasetVersionSequence(), data, path, "version sequence")
    lengths = np.zeros(len(seq.runs), dtype=np.int64)
    versions = np.zeros(len(seq.runs), dtype=np.uint64)
    total = 0
    try:
        for i, run in enumerate(seq.runs):
            if not run.HasField("span"):
                raise _Corrupt(f"run {i} has no span")
            lengths[i] = _segment_len(run.span)
            versions[i] = run.version
            total += int(lengths[i])
            if total > num_rows:
                break
    except _Corrupt as exc:
        raise FormatError(f"{path}: corrupt version sequence: {exc}") from exc
    if total != num_rows:
        raise FormatError(
            f"{path}: version sequence covers {'more than ' if total > num_rows else ''}"
            f"{total} rows, fragment has {num_rows}"
        )
    keep = lengths > 0
    if not keep.any():
        return VersionRuns(np.zeros(1, np.int64), np.zeros(1, np.uint64), num_rows)
    lengths, versions = lengths[keep], versions[keep]
    return VersionRuns(np.cumsum(lengths) - lengths, versions, num_rows)


def decode_versions(data: bytes, num_rows: int, path: str = "<inline>") -> np.ndarray:
    """Per-row dataset versions (``uint64``) of a fragment with ``num_rows`` rows."""
    return decode_version_runs(data, num_rows, path).materialize()


# --------------------------------------------------------------------------- encoding


def _encode_array(values: np.ndarray) -> rowids_pb2.EncodedU64Array:
    out = rowids_pb2.EncodedU64Array()
    if values.size == 0:
        out.u64_array.values = b""
        return out
    lo, hi = int(values.min()), int(values.max())
    if hi - lo <= 0xFFFF:
        out.u16_array.base = lo
        out.u16_array.offsets = (values - np.uint64(lo)).astype("<u2").tobytes()
    elif hi - lo <= 0xFFFFFFFF:
        out.u32_array.base = lo
        out.u32_array.offsets = (values - np.uint64(lo)).astype("<u4").tobytes()
    else:
        out.u64_array.values = values.astype("<u8").tobytes()
    return out


def _present_mask(values: np.ndarray, lo: int, slots: int) -> np.ndarray:
    present = np.zeros(slots, dtype=bool)
    present[(values - np.uint64(lo)).astype(np.int64)] = True
    return present


def _encode_segment(values: np.ndarray) -> rowids_pb2.U64Segment:
    """One segment for ``values`` following the reference's selection rules."""
    seg = rowids_pb2.U64Segment()
    count = int(values.size)
    if count == 0:
        seg.range.SetInParent()
        return seg
    strictly_sorted = count == 1 or bool(np.all(values[1:] > values[:-1]))
    if not strictly_sorted:
        seg.array.CopyFrom(_encode_array(values))
        return seg
    lo, hi = int(values[0]), int(values[-1])
    if hi == U64_MAX:  # the exclusive end would overflow u64
        seg.sorted_array.CopyFrom(_encode_array(values))
        return seg
    slots = hi - lo + 1
    n_holes = slots - count
    if n_holes == 0:
        seg.range.start, seg.range.end = lo, hi + 1
        return seg
    sizes = (24 + 4 * n_holes, 24 + (slots + 7) // 8, 24 + 2 * count)
    best = min(sizes)
    if best == sizes[0]:
        holes = np.flatnonzero(~_present_mask(values, lo, slots)).astype(np.uint64)
        seg.range_with_holes.start, seg.range_with_holes.end = lo, hi + 1
        seg.range_with_holes.holes.CopyFrom(_encode_array(holes + np.uint64(lo)))
    elif best == sizes[1]:
        bits = np.packbits(_present_mask(values, lo, slots), bitorder="little")
        seg.range_with_bitmap.start, seg.range_with_bitmap.end = lo, hi + 1
        seg.range_with_bitmap.bitmap = bits.tobytes()
    else:
        seg.sorted_array.CopyFrom(_encode_array(values))
    return seg


def _group_bounds(ids: np.ndarray) -> np.ndarray | None:
    """Boundaries of the groups of the segmented candidate, or None if too many."""
    n = ids.size
    diff_ok = ids[1:] > ids[:-1]
    gap = np.zeros(n - 1, dtype=bool)
    gap[diff_ok] = (ids[1:][diff_ok] - ids[:-1][diff_ok]) > np.uint64(SPLIT_GAP + 1)
    cuts = np.flatnonzero(~diff_ok | gap) + 1
    bounds = np.concatenate(([0], cuts, [n]))
    if bounds.size - 1 > 4 * MAX_GROUPS:
        return None
    long_piece = np.diff(bounds) >= MIN_PIECE
    # Keep a boundary unless the pieces on both sides of it are short.
    inner = bounds[1:-1]
    keep = long_piece[:-1] | long_piece[1:]
    bounds = np.concatenate(([0], inner[keep], [n]))
    if bounds.size - 1 > MAX_GROUPS:
        return None
    return bounds


def encode_row_ids(ids: np.ndarray) -> bytes:
    """Serialize row ids (in row order) as a compact ``RowIdSequence``."""
    ids = np.ascontiguousarray(np.asarray(ids), dtype=np.uint64).ravel()
    single = rowids_pb2.RowIdSequence()
    if ids.size == 0:
        return single.SerializeToString()
    single.segments.append(_encode_segment(ids))
    best = single.SerializeToString()
    bounds = _group_bounds(ids) if ids.size > 1 else None
    if bounds is not None and bounds.size > 2:
        split = rowids_pb2.RowIdSequence()
        for a, b in zip(bounds[:-1], bounds[1:], strict=True):
            split.segments.append(_encode_segment(ids[a:b]))
        candidate = split.SerializeToString()
        if len(candidate) < len(best):
            best = candidate
    return best


def encode_versions(versions: np.ndarray) -> bytes:
    """Serialize per-row versions as run-length ``RowDatasetVersionSequence``."""
    versions = np.ascontiguousarray(np.asarray(versions), dtype=np.uint64).ravel()
    seq = rowids_pb2.RowDatasetVersionSequence()
    n = versions.size
    if n:
        starts = np.concatenate(([0], np.flatnonzero(versions[1:] != versions[:-1]) + 1))
        ends = np.append(starts[1:], n)
        for s, e in zip(starts.tolist(), ends.tolist(), strict=True):
            run = seq.runs.add()
            run.span.range.start, run.span.range.end = s, e
            run.version = int(versions[s])
    return seq.SerializeToString()
