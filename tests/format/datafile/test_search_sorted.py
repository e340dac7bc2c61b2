"""The binary search of a sorted integer run (one page of a BTREE index's values,
``point.search_sorted``) gives the rows a search of the decoded run gives: signed and
unsigned types, flat and bit-packed chunks, duplicates across chunk edges, keys below,
above and between the values, runs at chunk and page edges; files of lance_sql's 2.2
writer and pylance's 2.1 writer."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from datafile_helpers import write_sorted_runs_file

from lance_sql.format.datafile import BytesSource, LanceFileReader, point

N = 20_000


def _columns(n: int) -> pa.Table:
    rng = np.random.default_rng(5)
    dup = np.sort(rng.integers(0, n // 8, n))  # runs of equal keys, across chunk edges
    return pa.table({
        "dense": pa.array(np.arange(n, dtype=np.int64) * 3 - n),       # bit-packed
        "dup": pa.array(dup.astype(np.int32)),
        "wide": pa.array(np.sort(rng.integers(-(2**62), 2**62, n))),    # full width
        "u64": pa.array(np.sort(rng.integers(0, 2**63, n, dtype=np.uint64)) * np.uint64(2)),
        "i8": pa.array(np.sort(rng.integers(-128, 127, n)).astype(np.int8)),
        "neg": pa.array(np.sort(rng.integers(-5000, -1, n)).astype(np.int16)),
        "long": pa.array(np.repeat(np.arange(-2, 3), n // 5).astype(np.int64)),  # 4000 each
    })


@pytest.fixture(scope="module", params=["2.1", "2.2"])
def written(request, tmp_path_factory) -> tuple[LanceFileReader, pa.Table]:
    table = _columns(N)
    data = write_sorted_runs_file(table, request.param, tmp_path_factory.mktemp("sorted"))
    return LanceFileReader(BytesSource(data)), table


def _runs(reader: LanceFileReader, index: int) -> list[tuple[int, int]]:
    starts = reader._columns[index].row_starts
    runs = [(0, 1), (0, 4096), (1000, 1100), (1023, 1025), (N - 4096, N), (N - 1, N)]
    for a, b in zip(starts[:-1].tolist(), starts[1:].tolist(), strict=True):
        runs += [(a, min(b, a + 4096)), (max(a, b - 4096), b)]  # a page's first and last
    return [(a, b) for a, b in runs if 0 <= a < b <= N]


def _searches(reader, table: pa.Table, seed: int, picks: int, extremes: bool):
    """Keys to search in each run of each column: (field, run start and end, the run's
    values, a key, the rows of the decoded run holding it). The keys: the run's first,
    middle and last values, ``picks`` random ones, the type's extremes when asked, and
    each one's neighbours."""
    rng = np.random.default_rng(seed)
    for index, field in enumerate(reader.schema.fields):
        values = table.column(field.name).to_numpy()
        info = np.iinfo(values.dtype)
        for a, b in _runs(reader, index):
            run = values[a:b]
            keys = {int(run[0]), int(run[-1]), int(run[len(run) // 2]),
                    *(int(k) for k in rng.choice(run, picks))}
            if extremes:
                keys |= {int(info.min), int(info.max)}
            keys |= {k + d for k in list(keys) for d in (-1, 1)
                     if info.min <= k + d <= info.max}
            for key in sorted(keys):
                typed = np.array(key, values.dtype)  # exact: no float promotion
                expected = (a + int(np.searchsorted(run, typed, "left")),
                            a + int(np.searchsorted(run, typed, "right")))
                yield field, a, b, run, key, expected


def test_search_sorted_equals_a_search_of_the_decoded_run(written) -> None:
    reader, table = written
    colmap = {f.id: i for i, f in enumerate(reader.schema.fields)}
    answered = 0
    for field, a, b, _, key, expected in _searches(reader, table, 8, 5, extremes=True):
        got = reader.search_sorted(field, colmap, a, b, key)
        if got is None:  # a run leaving its page: the caller decodes it
            continue
        answered += 1
        assert got == expected, (field.name, a, b, key)
    assert answered > 300  # most runs answered (pylance RLE-encodes some: declined)


def test_search_sorted_declines_what_it_cannot_search(tmp_path: Path) -> None:
    table = pa.table({"f": pa.array(np.arange(100, dtype=np.float64)),
                      "s": pa.array([f"{i:03d}" for i in range(100)]),
                      "n": pa.array(list(range(99)) + [None], pa.int64())})
    reader = LanceFileReader(BytesSource(write_sorted_runs_file(table, "2.2", tmp_path)))
    colmap = {f.id: i for i, f in enumerate(reader.schema.fields)}
    for field in reader.schema.fields:  # floats, strings, nullable ints with nulls
        assert reader.search_sorted(field, colmap, 0, 100, 5) is None


def test_search_sorted_of_a_corrupt_chunk_is_a_format_error(tmp_path: Path) -> None:
    from lance_sql.errors import FormatError

    table = pa.table({"k": pa.array(np.arange(5000, dtype=np.int64) * 7)})
    data = bytearray(write_sorted_runs_file(table, "2.2", tmp_path))
    reader = LanceFileReader(BytesSource(bytes(data)))
    column = reader._leaf_column(0, reader.schema.fields[0], pa.int64())
    page = column.page(0)
    page.load()
    assert point.search_sorted(column, 0, 4096, 700) == (100, 101)
    # the first chunk's value-buffer size, made too large for the chunk
    at = page.buffers[1][0] + int(page.chunk_offsets[0]) + 2
    data[at : at + 2] = (0xFFFF).to_bytes(2, "little")
    broken = LanceFileReader(BytesSource(bytes(data)))
    with pytest.raises(FormatError):
        broken.search_sorted(broken.schema.fields[0], {broken.schema.fields[0].id: 0},
                             0, 4096, 7)


def test_ints_at_equals_the_values(written) -> None:
    reader, table = written
    colmap = {f.id: i for i, f in enumerate(reader.schema.fields)}
    answered = 0
    for index, field in enumerate(reader.schema.fields):
        values = table.column(field.name).to_pylist()
        for a, b in _runs(reader, index):
            for lo, hi in ((a, a + 1), (b - 1, b), (a, min(b, a + 16)), (max(a, b - 5), b)):
                got = reader.ints_at(field, colmap, lo, hi)
                if got is not None:
                    answered += 1
                    assert got == values[lo:hi], (field.name, lo, hi)
    assert answered > 60  # pylance RLE-encodes some columns: declined


def test_interpolated_search_equals_numpy_and_guesses_evenly_spread_keys(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The lower bound is guessed by interpolation before bisecting: over evenly spread,
    skewed (exponential, clustered), duplicated and two-valued runs every search equals
    numpy's; for evenly spread keys (ids) a search probes at most six values (bisection
    of a 4096-row page: ~12 plus the run's end), for skewed ones no more than bisection
    and its four extra probes allow."""
    rng = np.random.default_rng(21)
    n = 4096
    table = pa.table({
        "ids": pa.array(np.arange(n, dtype=np.int64) + 10_000_000),
        "gaps": pa.array(np.cumsum(rng.integers(1, 5, n)).astype(np.int64)),
        "exp": pa.array(np.sort((rng.exponential(1.0, n) ** 4 * 1e6).astype(np.int64))),
        "clustered": pa.array(np.sort(np.r_[rng.integers(0, 50, n - 8),
                                            rng.integers(2**40, 2**41, 8)]).astype(np.int64)),
        "two": pa.array(np.r_[np.zeros(n - 1), [2**62]].astype(np.int64)),
    })
    reader = LanceFileReader(BytesSource(write_sorted_runs_file(table, "2.2", tmp_path)))
    colmap = {f.id: i for i, f in enumerate(reader.schema.fields)}
    probes = [0]
    call = point._SortedValues.__call__

    def counted(self, row: int) -> int:
        probes[0] += 1
        return call(self, row)

    monkeypatch.setattr(point._SortedValues, "__call__", counted)
    for field in reader.schema.fields:
        values = table.column(field.name).to_numpy()
        keys = {int(v) for v in rng.choice(values, 60)} | {int(values[0]), int(values[-1])}
        keys |= {k + d for k in list(keys) for d in (-1, 1)}
        most = 0
        for a, b in [(0, n), (5, n - 7), (100, 117), (0, 15)]:
            run = values[a:b]
            for key in sorted(keys):
                probes[0] = 0
                got = reader.search_sorted(field, colmap, a, b, key)
                assert got is not None
                lo = a + int(np.searchsorted(run, key, "left"))
                hi = a + int(np.searchsorted(run, key, "right"))
                assert got == (lo, hi), (field.name, a, b, key)
                if hi - lo <= 1 and (a, b) == (0, n):
                    most = max(most, probes[0])
        if field.name == "ids":
            assert most <= 6, most
        elif field.name != "two":
            assert most <= 12 + 4 + 4, (field.name, most)


def test_known_ends_place_the_guess_but_never_the_answer(written) -> None:
    """``ends`` (a page's bounds as its index holds them) only place the first probe:
    with the run's true first and last values, or with values that lie about them, the
    search finds the rows the decoded run holds (runs of equal keys, keys at either
    end, keys between values)."""
    reader, table = written
    colmap = {f.id: i for i, f in enumerate(reader.schema.fields)}
    answered = 0
    for field, a, b, run, key, expected in _searches(reader, table, 12, 6, extremes=False):
        first, last = int(run[0]), int(run[-1])
        info = np.iinfo(run.dtype)
        lies = [(first, last), (info.min, info.max), (first, (first + last) // 2),
                ((first + last) // 2, last), (last - 1, last)]
        for ends in lies:
            got = reader.search_sorted(field, colmap, a, b, key, (int(ends[0]), int(ends[1])))
            if got is None:  # a run leaving its page: the caller decodes it
                continue
            answered += 1
            assert got == expected, (field.name, a, b, key, ends)
    assert answered > 1000
