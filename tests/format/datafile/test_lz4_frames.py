"""Runs of Lance LZ4 buffers inflated as one LZ4 frame each (lz4_frames): the frame
header's checksum is XXH32 as liblz4 computes it, a run inflates to exactly the buffers
one at a time (small and large blocks, compressible and not, several runs), and a
corrupt block, a lying size prefix or a buffer outside its page is a FormatError."""

from __future__ import annotations

import threading
import time

import numpy as np
import pyarrow as pa
import pytest

from lance_sql.errors import FormatError
from lance_sql.format.datafile import lz4_frames, memory, parallel
from lance_sql.format.datafile.blocks import deflate, inflate


def test_xxh32_of_short_inputs_matches_the_reference_values() -> None:
    # published XXH32 values (seed 0) of "", "a" and "abc"
    assert lz4_frames.xxh32_small(b"") == 0x02CC5D05
    assert lz4_frames.xxh32_small(b"a") == 0x550D7456
    assert lz4_frames.xxh32_small(b"abc") == 0x32D153FF
    with pytest.raises(ValueError):
        lz4_frames.xxh32_small(bytes(16))


def test_frame_header_checksum_matches_the_one_liblz4_writes() -> None:
    frame = pa.Codec("lz4").compress(b"x" * 1000, asbytes=True)
    flg, bd, hc = frame[4], frame[5], frame[6 + (8 if frame[4] & 0x08 else 0)]
    descriptor = frame[4 : 6 + (8 if flg & 0x08 else 0)]
    assert (lz4_frames.xxh32_small(descriptor) >> 8) & 0xFF == hc, (flg, bd)


def _buffers(pieces: list[bytes], gap: int = 11) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Lance LZ4 buffers of ``pieces`` in one page, ``gap`` bytes of junk apart."""
    raw, pos = b"", []
    for piece in pieces:
        pos.append(len(raw))
        raw += deflate(1, piece) + b"\x5a" * gap
    sizes = np.diff([*pos, len(raw)]) - gap
    return np.frombuffer(raw, np.uint8), np.array(pos), sizes


def _pieces(rng: np.random.Generator) -> list[bytes]:
    out = []
    for k in range(40):
        n = int(rng.integers(1, 3000)) if k % 10 else int(rng.integers(70_000, 400_000))
        if k % 3 == 0:  # incompressible: LZ4 blocks larger than what they inflate to
            out.append(rng.bytes(n))
        else:
            out.append(bytes(rng.integers(97, 101, n, dtype=np.uint8)))
    return out


def test_runs_inflate_to_the_buffers_one_at_a_time() -> None:
    rng = np.random.default_rng(3)
    pieces = _pieces(rng)
    raw, pos, sizes = _buffers(pieces)
    full = lz4_frames.prefixes(raw, pos)
    assert full.tolist() == [len(p) for p in pieces] and lz4_frames.fits(sizes, full)
    starts = [0, 1, 7, 8, 20, 39]  # runs of 1 to 19 buffers, blocks up to ~400 kB
    groups = lz4_frames.FrameGroups(raw, pos, sizes, full, starts, "t")
    bounds = [*starts, len(pieces)]
    for g in range(len(starts)):
        got = groups.inflate(g).to_pybytes()
        one_by_one = b"".join(bytes(inflate(1, raw[a : a + n], "t"))
                              for a, n in zip(pos[bounds[g] : bounds[g + 1]],
                                              sizes[bounds[g] : bounds[g + 1]], strict=True))
        assert got == one_by_one == b"".join(pieces[bounds[g] : bounds[g + 1]])


def test_what_cannot_be_framed_is_said_so() -> None:
    assert not lz4_frames.fits(np.array([10, 4]), np.array([20, 0]))  # an empty block
    big = lz4_frames.MAX_BLOCK + 1
    assert not lz4_frames.fits(np.array([10, 1000]), np.array([20, big]))
    assert lz4_frames.fits(np.array([10, 1000]), np.array([20, big - 1]))


def _with_prefix(raw: np.ndarray, at: int, value: int) -> np.ndarray:
    out = raw.copy()
    out[at : at + 4] = np.frombuffer(np.uint32(value).tobytes(), np.uint8)
    return out


@pytest.mark.parametrize("damage", ["over", "under", "pair", "block", "outside", "ratio"])
def test_corrupt_runs_are_format_errors(damage: str) -> None:
    rng = np.random.default_rng(5)
    pieces = [bytes(rng.integers(97, 100, int(n), dtype=np.uint8))
              for n in rng.integers(100, 5000, 12)]  # fmt: skip
    raw, pos, sizes = _buffers(pieces)
    full = lz4_frames.prefixes(raw, pos)
    if damage == "over":  # a prefix claiming more than its block inflates to
        raw = _with_prefix(raw, int(pos[4]), int(full[4]) + 8)
    elif damage == "under":
        raw = _with_prefix(raw, int(pos[4]), int(full[4]) - 8)
    elif damage == "pair":  # the run's total stays right: liblz4 alone cannot tell
        raw = _with_prefix(_with_prefix(raw, int(pos[4]), int(full[4]) + 8), int(pos[5]),
                           int(full[5]) - 8)  # fmt: skip
    elif damage == "block":
        raw = raw.copy()
        raw[int(pos[4]) + 4 : int(pos[4]) + int(sizes[4])] = 0xFF
    elif damage == "outside":
        sizes = sizes.copy()
        sizes[-1] = raw.size
    elif damage == "ratio":  # more than LZ4 can inflate its bytes to: refused before allocating
        raw = _with_prefix(raw, int(pos[4]), 300 * int(sizes[4]))
    full = lz4_frames.prefixes(raw, pos)
    if damage in ("outside", "ratio"):
        with pytest.raises(FormatError, match="^t: "):
            lz4_frames.FrameGroups(raw, pos, sizes, full, [0, 6], "t")
        return
    groups = lz4_frames.FrameGroups(raw, pos, sizes, full, [0, 6], "t")
    assert len(groups.inflate(1).to_pybytes()) == sum(map(len, pieces[6:]))  # the other run
    if damage == "pair":  # inflates, but puts chunk 5 elsewhere than its prefix says:
        got = groups.inflate(0).to_pybytes()  # the caller's checks of what lies there catch it
        starts = np.cumsum(full) - full
        assert got[int(starts[5]) : int(starts[5]) + 16] != pieces[5][:16]
        return
    with pytest.raises(FormatError, match="^t: "):
        groups.inflate(0)


def test_frame_header_is_what_liblz4_reads() -> None:
    """A frame made of our header, one raw block and an end mark inflates in pyarrow's
    frame codec (which checks the header checksum and the content size)."""
    data = b"lance " * 3000
    block = pa.Codec("lz4_raw").compress(data, asbytes=True)
    frame = (lz4_frames.frame_header(len(data), len(data)) + len(block).to_bytes(4, "little")
             + block + b"\0\0\0\0")
    assert pa.Codec("lz4").decompress(frame, decompressed_size=len(data)).to_pybytes() == data
    bad = bytearray(frame)
    bad[14] ^= 1  # the header checksum
    with pytest.raises((OSError, pa.ArrowException)):
        pa.Codec("lz4").decompress(bytes(bad), decompressed_size=len(data))


def _raw_blocks(texts: list[bytes]) -> list[bytes]:
    return [pa.Codec("lz4_raw").compress(t, asbytes=True) if t else b"\0" for t in texts]


def test_inflate_exact_gives_each_block_or_refuses_a_lying_size() -> None:
    rng = np.random.default_rng(4)
    texts = [b"abc" * 4000, b"", rng.bytes(30_000), b"lance" * 13_000, b"q"]
    blocks = _raw_blocks(texts)
    sizes = [len(t) for t in texts]
    assert [bytes(b) for b in lz4_frames.inflate_exact(blocks, sizes, "x")] == texts
    for i in (0, 2, 3, 4):
        for delta in (1, 7, -1):
            lying = list(sizes)
            lying[i] += delta
            with pytest.raises(FormatError, match="x"):
                lz4_frames.inflate_exact(blocks, lying, "x")
            with pytest.raises(FormatError, match="x"):  # alone (a one-row take's path)
                lz4_frames.inflate_exact([blocks[i]], [lying[i]], "x")
        assert bytes(lz4_frames.inflate_exact([blocks[i]], [sizes[i]], "x")[0]) == texts[i]
    with pytest.raises(FormatError, match="claims 0"):  # a real block claiming nothing
        lz4_frames.inflate_exact([blocks[0]], [0], "x")


def test_inflate_exact_of_blocks_too_large_for_a_frame() -> None:
    """Over 4 MiB a block cannot be framed: it is inflated raw, then checked by a second
    call one byte short, which must fail."""
    data = np.random.default_rng(5).bytes(1 << 16) * 80  # 5 MiB
    [block] = _raw_blocks([data])
    assert bytes(lz4_frames.inflate_exact([block], [len(data)], "x")[0]) == data
    for claimed in (len(data) + 1, len(data) + 5000):
        with pytest.raises(FormatError, match="fewer than"):
            lz4_frames.inflate_exact([block], [claimed], "x")
    with pytest.raises(FormatError, match="corrupt"):
        lz4_frames.inflate_exact([block], [len(data) - 1], "x")


def test_inflate_of_a_lance_lz4_buffer_checks_its_prefix() -> None:
    """blocks.inflate (every LZ4 buffer not read by the grouped scan path) refuses a
    prefix that overstates what its block inflates to."""
    data = b"0123456789" * 500
    buf = deflate(1, data)
    assert inflate(1, buf, "x") == data
    assert bytes(inflate(1, buf, "x", buffer=True)) == data
    lying = (len(data) + 9).to_bytes(4, "little") + bytes(buf[4:])
    with pytest.raises(FormatError, match="x"):
        inflate(1, lying, "x")


@pytest.mark.parametrize("many", [False, True])
def test_a_zstd_prefix_past_what_its_frame_can_hold_allocates_nothing(many: bool) -> None:
    """A few bytes of zstd claiming 1 GiB (u64 prefix) are refused before the claim
    sizes the output (the frame could inflate to at most 128 KiB a 4 bytes)."""
    from lance_sql.format.datafile.blocks import inflate_many

    frame = pa.Codec("zstd").compress(b"abc" * 10, asbytes=True)
    lying = (1 << 30).to_bytes(8, "little") + frame
    if many:  # a u64 prefix and a frame recording no size: the one-by-one path
        raw = memoryview(lying + lying)
        pool = pa.default_memory_pool()
        before = pool.max_memory()
        with pytest.raises(FormatError, match="claims"):
            inflate_many(2, raw, [0, len(lying)], [len(lying), len(lying)], "x")
    else:
        pool = pa.default_memory_pool()
        before = pool.max_memory()
        with pytest.raises(FormatError, match="claims"):
            inflate(2, lying, "x")
    assert pool.max_memory() - before < 64 << 20


# ------------------------------------------------------------------ runs of many pages
def _pages(rng: np.random.Generator) -> tuple[list[bytes], list[tuple]]:
    """Pieces in three pages (``_buffers`` each, junk between buffers), with blocks of
    at most 12 bytes (held in a binary view itself) and of ~400 kB among them."""
    pieces = [b"a", b"xy" * 6, *_pieces(rng), b"q" * 40, b"z"]
    cuts = [0, 3, 25, len(pieces)]
    pages = []
    for k in range(3):
        raw, pos, sizes = _buffers(pieces[cuts[k] : cuts[k + 1]], gap=5 + 6 * k)
        pages.append((raw, pos, sizes))
    return pieces, pages


def _cut_into_frames(monkeypatch, split: bool) -> None:
    """Runs cut into frames (any run, two threads to use, a CPU idle), or never."""
    monkeypatch.setattr(lz4_frames, "SPLIT_BYTES", 1 if split else 1 << 62)
    monkeypatch.setattr(parallel, "threads", lambda: 2)
    monkeypatch.setattr(parallel, "idle_cpus", lambda: 1)


def _runs(pages: list[tuple]) -> lz4_frames.Inflated | None:
    return lz4_frames.inflate_runs([p[0] for p in pages], [p[1] for p in pages],
                                   [p[2] for p in pages],
                                   [lz4_frames.prefixes(p[0], p[1]) for p in pages], "t")


@pytest.mark.parametrize("split", [False, True])
def test_runs_of_many_pages_inflate_back_to_back(split: bool, monkeypatch) -> None:
    """Buffers of several pages inflate to exactly the buffers one at a time, back to
    back in one part, or in several (each the buffers it holds) when cut into frames."""
    _cut_into_frames(monkeypatch, split)
    pieces, pages = _pages(np.random.default_rng(8))
    assert min(int((p[2] - 4).min()) for p in pages) <= 12 < max(int(p[2].max()) for p in pages)
    calls, splits = lz4_frames.RUNS_CALLS[0], lz4_frames.SPLIT_CALLS[0]
    got = _runs(pages)
    assert got is not None and lz4_frames.RUNS_CALLS[0] == calls + 1
    assert lz4_frames.SPLIT_CALLS[0] == splits + split
    assert len(got.parts) == (lz4_frames.MAX_PARTS if split else 1)
    assert got.bounds[0] == 0 and got.bounds[-1] == len(pieces)
    assert [bytes(p) for p in got.pieces()] == pieces
    for part, a, b in zip(got.parts, got.bounds[:-1], got.bounds[1:], strict=True):
        assert part.to_pybytes() == b"".join(pieces[a:b])
        assert got.starts[a] == 0


@pytest.mark.parametrize("idle", [0, 1])
def test_runs_in_frames_use_a_helper_on_an_idle_cpu_joined_before_return(idle: int,
                                                                       monkeypatch) -> None:
    """With two CPUs to use and one of them idle, the run is cut into frames, inflated on
    a decode helper thread too, which is gone when the call returns; with no CPU idle
    (another process busy), one frame on the calling thread. The same bytes either way."""
    monkeypatch.setattr(lz4_frames, "SPLIT_BYTES", 1)
    monkeypatch.setattr(parallel, "threads", lambda: 2)
    monkeypatch.setattr(parallel, "idle_cpus", lambda: idle)
    names: list[str] = []
    inner = lz4_frames._decompress

    def spied(*args):
        names.append(threading.current_thread().name)
        if len(names) == 1:  # hold the first frame back: the helper takes the next
            time.sleep(0.05)
        return inner(*args)

    monkeypatch.setattr(lz4_frames, "_decompress", spied)
    pieces, pages = _pages(np.random.default_rng(9))
    got = _runs(pages)
    assert got is not None and [bytes(p) for p in got.pieces()] == pieces
    helped = [n for n in names if n.startswith(parallel.THREAD_NAME)]
    assert len(names) == (lz4_frames.MAX_PARTS if idle else 1) and bool(helped) == bool(idle)
    assert not [t for t in threading.enumerate() if t.name.startswith(parallel.THREAD_NAME)]


def test_idle_cpus_are_the_machines_less_its_runnable_tasks(tmp_path, monkeypatch) -> None:
    """Idle CPUs: the machine's less its runnable tasks (the caller among them), at most
    the helpers the process may use."""
    monkeypatch.setattr(parallel, "threads", lambda: 2)
    loadavg = tmp_path / "loadavg"
    monkeypatch.setattr(parallel, "_LOADAVG", str(loadavg))
    for cpus, runnable, idle in ((2, 1, 1), (2, 2, 0), (2, 7, 0), (64, 7, 1), (64, 64, 0)):
        monkeypatch.setattr(parallel, "_machine_cpus", lambda cpus=cpus: cpus)
        loadavg.write_text(f"0.52 0.91 1.20 {runnable}/105 31337\n")
        assert parallel.idle_cpus() == idle, (cpus, runnable)
    loadavg.unlink()  # not known (not Linux): every helper's CPU counts as idle
    assert parallel.idle_cpus() == 1


def test_runs_are_cut_into_frames_of_about_equal_size(monkeypatch) -> None:
    monkeypatch.setattr(lz4_frames, "SPLIT_BYTES", 3)
    assert lz4_frames._cuts(np.ones(10, np.int64)) == [0, 3, 6, 10]
    assert lz4_frames._cuts(np.ones(5, np.int64)) == [0, 5]  # under twice SPLIT_BYTES
    assert lz4_frames._cuts(np.array([1, 100, 1, 1, 1])) == [0, 2, 5]
    assert lz4_frames._cuts(np.full(1000, 7)) == [0, 250, 500, 750, 1000]  # MAX_PARTS


@pytest.mark.parametrize("begin", [False, True])
@pytest.mark.parametrize("split", [False, True])
@pytest.mark.parametrize("damage", ["over", "under", "block", "outside", "short", "ratio"])
def test_corrupt_runs_of_many_pages_are_format_errors(damage: str, split: bool, begin: bool,
                                                      monkeypatch) -> None:
    """A lying prefix, a corrupt block, a buffer outside its page or without a prefix
    is a FormatError (the other pages intact), in one frame or in two, inflated at once
    or begun and collected later (``begin``: raised by the collection, every helper
    joined)."""
    from lance_sql.format.datafile import point

    _cut_into_frames(monkeypatch, split)
    _, pages = _pages(np.random.default_rng(10))
    raw, pos, sizes = pages[1]
    full = lz4_frames.prefixes(raw, pos)
    i = 4
    if damage == "over":
        raw = _with_prefix(raw, int(pos[i]), int(full[i]) + 8)
    elif damage == "under":
        raw = _with_prefix(raw, int(pos[i]), int(full[i]) - 8)
    elif damage == "block":
        raw = raw.copy()
        raw[int(pos[i]) + 4 : int(pos[i]) + int(sizes[i])] = 0xFF
    elif damage == "outside":
        sizes = sizes.copy()
        sizes[-1] = raw.size
    elif damage == "short":
        sizes = sizes.copy()
        sizes[i] = 3
    else:  # more than LZ4 can inflate its bytes to: refused before allocating
        raw = _with_prefix(raw, int(pos[i]), 300 * int(sizes[i]))
    pages[1] = (raw, pos, sizes)
    with pytest.raises(FormatError, match="^t: "):
        got = point.inflate_lz4_runs([(*p, "t") for p in pages], begin=begin)
        assert begin == isinstance(got, lz4_frames.Inflating)
        if isinstance(got, lz4_frames.Inflating):
            try:
                got.result()
            finally:
                got.close()
    assert not [t for t in threading.enumerate() if t.name.startswith(parallel.THREAD_NAME)]


@pytest.mark.parametrize("damage", ["short", "outside", "ratio"])
def test_a_bad_prefix_among_many_pages_names_its_page(damage: str) -> None:
    """The prefixes of many pages are checked together; a page at fault is named by its
    own error, as when each page was checked on its own (the pages before it intact)."""
    from lance_sql.format.datafile import point

    pieces, pages = _pages(np.random.default_rng(11))
    raw, pos, sizes = pages[2]
    if damage == "short":
        sizes = sizes.copy()
        sizes[1] = 2
        match = "p2: LZ4 buffer of 2 bytes has no size prefix"
    elif damage == "outside":
        sizes = sizes.copy()
        sizes[-1] = raw.size
        match = "p2: an LZ4 buffer lies outside its page"
    else:
        raw = _with_prefix(raw, int(pos[1]), 300 * int(sizes[1]))
        match = "p2: LZ4 buffer claims"
    runs = [(*p, f"p{k}") for k, p in enumerate(pages[:2])] + [(raw, pos, sizes, "p2")]
    with pytest.raises(FormatError, match=f"^{match}"):
        point.inflate_lz4_runs(runs)
    got = point.inflate_lz4_runs([(*p, f"p{k}") for k, p in enumerate(pages)])
    assert [bytes(b) for b in point.listed(got)] == pieces


def test_what_no_frame_holds_is_inflated_buffer_by_buffer() -> None:
    """A buffer inflating past what a frame block holds, or a single buffer, takes
    inflate_exact's path (a list, the same bytes); nothing goes through the runs."""
    from lance_sql.format.datafile import point

    big = np.random.default_rng(5).bytes(1 << 16) * 80  # 5 MiB: more than a frame block
    pieces = [b"lance" * 100, big, b"sql" * 50]
    raw, pos, sizes = _buffers(pieces)
    assert _runs([(raw, pos, sizes)]) is None
    calls = lz4_frames.RUNS_CALLS[0]
    got = point.inflate_lz4_runs([(raw, pos, sizes, "t")])
    assert isinstance(got, list) and [bytes(p) for p in got] == pieces
    one = point.inflate_lz4_runs([(raw, pos[:1], sizes[:1], "t")])
    assert isinstance(one, list) and bytes(one[0]) == pieces[0]
    assert lz4_frames.RUNS_CALLS[0] == calls


def test_groups_in_a_page_too_large_for_views_inflate_from_slices(monkeypatch) -> None:
    """A page of 2 GiB or more cannot be pointed into by binary views: its groups are
    joined from slices instead, to the same bytes and with the same refusals."""
    rng = np.random.default_rng(13)
    pieces = [bytes(rng.integers(97, 100, int(n), dtype=np.uint8))
              for n in rng.integers(1, 5000, 12)]  # fmt: skip
    raw, pos, sizes = _buffers(pieces)
    full = lz4_frames.prefixes(raw, pos)
    viewed = lz4_frames.FrameGroups(raw, pos, sizes, full, [0, 5], "t")
    monkeypatch.setattr(memory, "VIEW_LIMIT", raw.size)
    sliced = lz4_frames.FrameGroups(raw, pos, sizes, full, [0, 5], "t")
    assert viewed._views is not None and sliced._views is None
    for g in (0, 1):
        assert (viewed.inflate(g).to_pybytes() == sliced.inflate(g).to_pybytes()
                == b"".join(pieces[[0, 5, 12][g] : [0, 5, 12][g + 1]]))  # fmt: skip
    bad = _with_prefix(raw, int(pos[7]), int(full[7]) + 8)  # group 1 inflates long
    with pytest.raises(FormatError, match="^t: "):
        lz4_frames.FrameGroups(bad, pos, sizes, lz4_frames.prefixes(bad, pos), [0, 5],
                               "t").inflate(1)  # fmt: skip
    monkeypatch.undo()
    with pytest.raises(FormatError, match="^t: "):
        lz4_frames.FrameGroups(bad, pos, sizes, lz4_frames.prefixes(bad, pos), [0, 5],
                               "t").inflate(1)  # fmt: skip


@pytest.mark.parametrize("split", [False, True])
def test_a_corrupt_block_of_a_frame_is_named_by_its_own_place(split: bool,
                                                              monkeypatch) -> None:
    """Runs of several pages framed together, one block corrupt: the FormatError names
    the place ``where`` gives that block (its page), found by halving the failing frame;
    a single name for all is used as it is."""
    from lance_sql.format.datafile import point

    _cut_into_frames(monkeypatch, split)
    _, pages = _pages(np.random.default_rng(8))
    raw, pos, sizes = pages[1]
    bad = raw.copy()
    k = 7  # a block of the second page, its literal lengths running past its end
    bad[int(pos[k]) + 4 : int(pos[k]) + 4 + 64] = 0xFF
    pages[1] = (bad, pos, sizes)
    runs = [(p[0], p[1], p[2], f"page {i}") for i, p in enumerate(pages)]
    with pytest.raises(FormatError, match=r"^page 1: corrupt LZ4"):
        point.inflate_lz4_runs(runs)
    with pytest.raises(FormatError, match=r"^t: corrupt LZ4"):
        _runs(pages)
