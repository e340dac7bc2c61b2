"""The opt-in malloc tuning: when it applies, that it takes effect, and that importing
lance_sql alone does not apply it."""

from __future__ import annotations

import subprocess
import sys

import pytest

from lance_sql.allocator import MMAP_THRESHOLD, TRIM_THRESHOLD, arena_max, tune_allocator


class FakeMallopt:
    def __init__(self, result: int = 1) -> None:
        self.calls: list[tuple[int, int]] = []
        self.result = result

    def __call__(self, param: int, value: int) -> int:
        self.calls.append((param, value))
        return self.result


def test_applies_the_thresholds_and_arenas_on_linux() -> None:
    mallopt = FakeMallopt()
    tuning = tune_allocator({}, mallopt, "linux")
    assert tuning.applied
    assert sorted(mallopt.calls) == [(-8, arena_max()), (-3, MMAP_THRESHOLD),
                                     (-1, TRIM_THRESHOLD)]
    assert arena_max() >= 2


@pytest.mark.parametrize("environ, reason", [
    ({"LANCE_SQL_TUNE_MALLOC": "0"}, "turned off"),
    ({"LANCE_SQL_TUNE_MALLOC": "off"}, "turned off"),
    ({"MALLOC_MMAP_THRESHOLD_": "65536"}, "MALLOC_MMAP_THRESHOLD_"),
    ({"MALLOC_ARENA_MAX": "4"}, "MALLOC_ARENA_MAX"),
    ({"GLIBC_TUNABLES": "glibc.malloc.trim_threshold=0"}, "GLIBC_TUNABLES"),
])
def test_user_choices_win(environ: dict[str, str], reason: str) -> None:
    mallopt = FakeMallopt()
    tuning = tune_allocator(environ, mallopt, "linux")
    assert not tuning.applied and reason in tuning.reason
    assert mallopt.calls == []


def test_other_platforms_and_refusals_are_left_alone() -> None:
    mallopt = FakeMallopt()
    assert not tune_allocator({}, mallopt, "darwin").applied
    assert mallopt.calls == []
    refused = tune_allocator({}, FakeMallopt(result=0), "linux")
    assert not refused.applied and "refused" in refused.reason


_PROBE = """
import ctypes, sys
import numpy as np
import lance_sql

class MallInfo2(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in ("arena", "ordblks", "smblks", "hblks",
                "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost")]

libc = ctypes.CDLL(None)
libc.mallinfo2.restype = MallInfo2
before = libc.mallinfo2().hblkhd
applied = lance_sql.tune_allocator().applied if sys.argv[1] == "opt-in" else None
block = np.ones(8 << 20, np.uint8)  # 8 MiB: above glibc's default mmap threshold
mapped = libc.mallinfo2().hblkhd - before
print(applied, mapped >= (8 << 20))
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc is Linux's")
@pytest.mark.parametrize("call, opt_out, expect", [
    ("opt-in", "", "True False"),
    ("opt-in", "0", "False True"),
    ("import only", "", "None True"),
])
def test_large_arrays_come_from_the_reusable_heap(call: str, opt_out: str,
                                                  expect: str) -> None:
    """With the tuning an 8 MiB array is served from the heap (reused after free); with
    glibc's defaults — what ``import lance_sql`` alone leaves — it is a fresh mapping
    (page faults on every reuse)."""
    try:
        import ctypes
        ctypes.CDLL(None).mallinfo2  # noqa: B018
    except AttributeError:
        pytest.skip("this libc has no mallinfo2 (glibc >= 2.33 needed)")
    env = {"PATH": "/usr/bin:/bin", "LANCE_SQL_TUNE_MALLOC": opt_out}
    out = subprocess.run([sys.executable, "-c", _PROBE, call], env=env, capture_output=True,
                         text=True, check=True)
    assert out.stdout.split() == expect.split()


def test_release_free_memory_returns_memory_to_the_os() -> None:
    import pyarrow as pa

    from lance_sql.allocator import release_free_memory

    big = pa.array(range(2_000_000))
    del big
    release_free_memory()  # no error, whatever the platform and Arrow pool
    assert pa.total_allocated_bytes() < 16 << 20
