"""Mapped reads of the local store: the same bytes as ``pread``, no copies for large
reads, bounds and truncation as typed errors, thread safety, and no descriptor or mapping
that outlives what uses it."""

from __future__ import annotations

import gc
import os
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

import lance_sql
from lance_sql.errors import FormatError
from lance_sql.io import LocalStore
from lance_sql.io import local as local_module
from lance_sql.io.local import MAP_MIN_READ, MMAP_SWITCH, LocalSource

SIZE = 5 * MAP_MIN_READ + 123  # not a multiple of the page size


@pytest.fixture
def blob(tmp_path: Path) -> tuple[Path, bytes]:
    data = np.random.default_rng(7).integers(0, 256, SIZE, dtype=np.uint8).tobytes()
    path = tmp_path / "blob.bin"
    path.write_bytes(data)
    return path, data


def _ranges() -> list[tuple[int, int]]:
    m = MAP_MIN_READ
    fixed = [(0, 0), (SIZE, 0), (SIZE - 1, 1), (0, SIZE), (SIZE - m, m), (SIZE - m - 1, m + 1),
             (1, m - 1), (0, m), (7, m), (SIZE - 4096, 4096), (3 * m + 5, m + 17),
             (SIZE // 2, 0), (4095, 2), (4096 * 3, m * 2)]
    rng = np.random.default_rng(1)
    starts = rng.integers(0, SIZE, 40)
    lengths = rng.integers(0, 3 * m, 40)
    return fixed + [(int(s), int(min(n, SIZE - s))) for s, n in zip(starts, lengths, strict=True)]


def test_mapped_reads_equal_pread_reads(blob: tuple[Path, bytes]) -> None:
    path, data = blob
    mapped, plain = LocalSource(str(path), mapped=True), LocalSource(str(path), mapped=False)
    assert mapped.mapped and not plain.mapped
    assert mapped.size == plain.size == SIZE
    for offset, length in _ranges():
        got, want = mapped.read_at(offset, length), plain.read_at(offset, length)
        assert bytes(got) == bytes(want) == data[offset : offset + length], (offset, length)
        assert len(got) == length
        if length >= MAP_MIN_READ:  # a view of the mapping, byte-addressed like bytes
            assert isinstance(got, memoryview) and got.readonly and got.format == "B"
            assert got[0] == data[offset] and got[-1] == data[offset + length - 1]
        else:
            assert isinstance(got, bytes)
    for offset, length in [(-1, 1), (0, -1), (SIZE, 1), (SIZE - MAP_MIN_READ, MAP_MIN_READ + 1),
                           (1, SIZE), (SIZE + 1, 0)]:
        for source in (mapped, plain):
            with pytest.raises(FormatError, match="outside the file"):
                source.read_at(offset, length)


def test_large_reads_share_the_mapping_without_copies(blob: tuple[Path, bytes]) -> None:
    path, _ = blob
    source = LocalSource(str(path), mapped=True)
    a = np.frombuffer(source.read_at(0, 2 * MAP_MIN_READ), np.uint8)
    b = np.frombuffer(source.read_at(MAP_MIN_READ, MAP_MIN_READ), np.uint8)
    # the second read's first byte is the first read's byte MAP_MIN_READ: the same memory
    assert a.ctypes.data + MAP_MIN_READ == b.ctypes.data
    assert pa.py_buffer(b).address == b.ctypes.data


def test_small_and_special_files_are_not_mapped(tmp_path: Path) -> None:
    small = tmp_path / "small"
    small.write_bytes(b"x" * (MAP_MIN_READ - 1))
    empty = tmp_path / "empty"
    empty.write_bytes(b"")
    assert not LocalSource(str(small), mapped=True).mapped
    source = LocalSource(str(empty), mapped=True)
    assert not source.mapped and source.size == 0 and source.read_at(0, 0) == b""
    with pytest.raises(FormatError):
        source.read_at(0, 1)


def test_the_switch(tmp_path: Path, blob: tuple[Path, bytes], monkeypatch) -> None:
    path, _ = blob
    key = path.name
    assert LocalStore(str(path.parent)).open_source(key).mapped
    assert not LocalStore(str(path.parent), mapped=False).open_source(key).mapped
    monkeypatch.setenv(MMAP_SWITCH, "0")
    store = LocalStore(str(tmp_path))
    assert not store.mapped and not store.open_source(key).mapped
    (tmp_path / "sub").mkdir()
    assert not store.child("sub").mapped  # child stores inherit the choice
    monkeypatch.setenv(MMAP_SWITCH, "1")
    assert LocalStore(str(tmp_path)).child("sub").mapped


def test_concurrent_reads_from_many_threads(blob: tuple[Path, bytes]) -> None:
    path, data = blob
    source = LocalSource(str(path), mapped=True)
    ranges = _ranges()
    errors: list[BaseException] = []
    start = threading.Barrier(8)

    def work(seed: int) -> None:
        try:
            start.wait()
            order = np.random.default_rng(seed).permutation(len(ranges))
            for _ in range(5):
                for i in order.tolist():
                    offset, length = ranges[i]
                    if bytes(source.read_at(offset, length)) != data[offset : offset + length]:
                        raise AssertionError((offset, length))
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors


def test_views_outlive_close_and_unlink(blob: tuple[Path, bytes]) -> None:
    path, data = blob
    source = LocalSource(str(path), mapped=True)
    view = source.read_at(MAP_MIN_READ, 2 * MAP_MIN_READ)
    source.close()
    source.close()  # twice is fine
    path.unlink()  # as cleanup does: the mapping keeps the bytes
    assert bytes(view) == data[MAP_MIN_READ : 3 * MAP_MIN_READ]
    with pytest.raises(OSError):  # a closed source reads nothing
        source.read_at(0, MAP_MIN_READ)


def test_a_replaced_file_is_not_mapped(blob: tuple[Path, bytes], tmp_path: Path,
                                       monkeypatch) -> None:
    """The mapping opens the file by name: when that name meanwhile leads to another
    file, the source keeps reading the file it opened, without a mapping."""
    path, data = blob
    other = tmp_path / "other.bin"
    other.write_bytes(b"\xff" * SIZE)
    real = local_module.pa.memory_map
    monkeypatch.setattr(local_module.pa, "memory_map", lambda p, mode: real(str(other), mode))
    source = LocalSource(str(path), mapped=True)
    assert not source.mapped
    assert bytes(source.read_at(0, SIZE)) == data


_TRUNCATE = r"""
import os, sys
from lance_sql.errors import FormatError
from lance_sql.io.local import MAP_MIN_READ, LocalSource
path = sys.argv[1]
source = LocalSource(path, mapped=True)
assert source.mapped
whole = source.size
early = bytes(source.read_at(0, MAP_MIN_READ))
os.truncate(path, MAP_MIN_READ * 2)  # in place, under the open source
assert bytes(source.read_at(0, MAP_MIN_READ)) == early  # what is left still reads
for offset, length in [(MAP_MIN_READ, 2 * MAP_MIN_READ), (whole - MAP_MIN_READ, MAP_MIN_READ),
                       (whole - 10, 10)]:
    try:
        source.read_at(offset, length)
    except FormatError as exc:
        print("typed:", exc)
    else:
        raise SystemExit(f"no error for {offset}+{length}")
import numpy as np
assert bytes(source.read_ranges(np.array([0, 10]), np.array([5, 5]))) == early[:5] + early[10:15]
try:
    source.read_ranges(np.array([0, whole - 10]), np.array([5, 10]))
except FormatError as exc:
    print("typed:", exc)
else:
    raise SystemExit("no error for ranges past the new end")
for offset, length in [(whole - MAP_MIN_READ, MAP_MIN_READ), (whole - 10, 10)]:
    try:
        source.read_into(offset, np.empty(length, np.uint8))
    except FormatError as exc:
        print("typed:", exc)
    else:
        raise SystemExit(f"no error for read_into {offset}+{length}")
"""


def test_a_file_truncated_after_open_is_a_typed_error(blob: tuple[Path, bytes]) -> None:
    """Reads past the new end raise FormatError (mapped and small reads alike) instead of
    touching pages past the end of the file (SIGBUS). In a subprocess: a regression would
    kill the interpreter, which the exit code shows."""
    path, _ = blob
    env = {**os.environ, "PYTHONPATH": str(Path(lance_sql.__file__).parents[1])}
    out = subprocess.run([sys.executable, "-c", _TRUNCATE, str(path)], capture_output=True,
                         text=True, env=env, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.count("typed:") == 6


def _open_descriptors() -> int:
    return len(os.listdir("/proc/self/fd"))


def _mapped_regions(root: Path) -> int:
    with open("/proc/self/maps") as f:
        return sum(str(root) in line for line in f)


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="needs /proc (Linux)")
def test_no_descriptor_or_mapping_outlives_its_users(tmp_path: Path) -> None:
    """Opening, reading and dropping many datasets keeps the descriptor count bounded;
    results that still refer to mapped pages hold no descriptor; once they go, so do the
    mappings."""
    path = tmp_path / "t.lance"
    rows = 40_000  # four files of 10,000 rows: each column's page (80 kB) is read mapped
    table = pa.table({"x": np.arange(rows, dtype=np.float64),
                      "s": pa.array([f"v{i}" for i in range(rows)])})
    for version in ("2.0", "2.2"):
        lance_sql.write_dataset(table, path / version, max_rows_per_file=10_000,
                                data_storage_version=version)
    runtime = lance_sql.default_runtime()
    runtime.clear("data_files")
    gc.collect()
    # What the earlier tests left alive is set aside, so that each collection below walks
    # only what this test made (60 full collections of a whole suite's heap took ~10 s).
    gc.freeze()
    try:
        before = _open_descriptors()
        kept = []
        for i in range(60):
            version = ("2.0", "2.2")[i % 2]
            got = lance_sql.dataset(path / version).to_table()
            assert got.num_rows == rows
            if i < 10:
                kept.append(got)  # 2.0 flat pages come back as views of the mapping
            runtime.clear("data_files")  # every dataset opened afresh: its files reopened
            del got
            gc.collect()  # a file reader is freed by the cycle collector (as before mapping)
            assert _open_descriptors() <= before + 2
        gc.collect()
        assert _open_descriptors() <= before + 2  # the kept results hold no descriptor
        assert _mapped_regions(path) > 0  # ...but their mapped pages
        assert kept[0].column("x").to_numpy()[rows - 1] == rows - 1
        kept.clear()
        gc.collect()
        assert _mapped_regions(path) == 0
    finally:
        gc.unfreeze()


def test_mapped_range_reads_equal_pread_range_reads(blob: tuple[Path, bytes],
                                                    monkeypatch) -> None:
    """``read_ranges`` copies out of the mapping when there is one (no system call per
    range): the same bytes as the ``preadv`` path, the same typed error outside the file."""
    path, data = blob
    real_read_into = local_module._read_into
    calls = []

    def counted(*args: object) -> int:
        calls.append(args)
        return real_read_into(*args)

    monkeypatch.setattr(local_module, "_read_into", counted)
    mapped, plain = LocalSource(str(path), mapped=True), LocalSource(str(path), mapped=False)
    assert mapped.mapped and not plain.mapped
    offsets = np.array([o for o, _ in _ranges()], np.int64)
    lengths = np.array([n for _, n in _ranges()], np.int64)
    expected = b"".join(data[o : o + n] for o, n in zip(offsets.tolist(), lengths.tolist(),
                                                         strict=True))
    for _ in range(2):  # the second call reuses the mapped file's bytes
        assert mapped.read_ranges(offsets, lengths).tobytes() == expected
    assert not calls  # the mapping answered
    assert plain.read_ranges(offsets, lengths).tobytes() == expected
    assert len(calls) >= offsets.size
    assert mapped.read_ranges(offsets[:0], lengths[:0]).size == 0
    for bad in ((SIZE - 1, 2), (-1, 1), (2**62, 2**62)):
        with pytest.raises(FormatError):
            mapped.read_ranges(np.array([0, bad[0]]), np.array([1, bad[1]]))
    mapped.close()
    plain.close()


def test_view_range_is_the_mapping_and_checked(blob: tuple[Path, bytes]) -> None:
    """``view_range``: the bytes ``read_at`` gives, as a read-only view of the mapping
    whatever the length (small ranges too, no copy); None when the file is not mapped;
    ranges outside the file and a file truncated after open are typed errors."""
    path, data = blob
    source = LocalSource(str(path), mapped=True)
    plain = LocalSource(str(path), mapped=False)
    for offset, length in _ranges():
        view = source.view_range(offset, length)
        assert view is not None and view.dtype == np.uint8 and not view.flags.writeable
        assert view.tobytes() == data[offset : offset + length], (offset, length)
        assert plain.view_range(offset, length) is None
    a, b = source.view_range(0, 100), source.view_range(10, 5)
    assert a is not None and b is not None and a.ctypes.data + 10 == b.ctypes.data
    for offset, length in [(-1, 1), (0, -1), (SIZE, 1), (1, SIZE), (2**62, 2**62)]:
        with pytest.raises(FormatError, match="outside the file"):
            source.view_range(offset, length)
    truncated = LocalSource(str(path), mapped=True)
    with open(path, "r+b") as f:
        f.truncate(SIZE // 2)
    with pytest.raises(FormatError, match="shrank"):
        truncated.view_range(SIZE - 10, 10)


def test_read_into_writes_the_bytes_read_at_gives(blob: tuple[Path, bytes]) -> None:
    """``read_into`` (reads straight into a caller's buffer): the bytes of ``read_at``,
    mapped or not, into a slice of a larger buffer without touching its neighbours;
    ranges outside the file are typed errors that write nothing."""
    path, data = blob
    for source in (LocalSource(str(path), mapped=True), LocalSource(str(path), mapped=False)):
        for offset, length in _ranges():
            buffer = np.full(length + 2, 7, np.uint8)
            source.read_into(offset, buffer[1 : 1 + length])
            assert buffer[1 : 1 + length].tobytes() == data[offset : offset + length]
            assert buffer[0] == buffer[-1] == 7
        for offset, length in [(-1, 1), (SIZE, 1), (1, SIZE), (SIZE - 10, 11)]:
            buffer = np.zeros(length, np.uint8)
            with pytest.raises(FormatError, match="outside the file"):
                source.read_into(offset, buffer)
            assert not buffer.any()
        with pytest.raises(FormatError, match="outside the file"):  # (2**62 never summed)
            source.read_into(2**62, np.zeros(SIZE, np.uint8))
        source.close()
