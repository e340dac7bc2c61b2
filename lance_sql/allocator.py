"""Keep freed memory for reuse instead of handing it back to the OS after every array.

Scans and the change feed allocate many short-lived numpy arrays of 0.1-30 MB. glibc's
malloc serves each of those with a fresh ``mmap`` and returns it with ``munmap`` when
freed, so every array pays a page fault per 4 KiB page the next time round; on virtual
machines that is ~1 µs a page and can cost more than the work itself (measured: the
change-feed plan of a 1% update of 10M rows takes 14 ms with glibc's defaults, 6.5 ms
with the settings below). Raising the mmap threshold to 32 MiB (glibc's own ceiling
for its adaptive threshold) and the trim threshold to 128 MiB lets freed blocks be
reused. The price is up to ~128 MiB of freed memory the process keeps.

Each thread also draws from one of glibc's arenas, up to eight per core by default, and
memory freed in one arena is reused only by the threads drawing from it. Scans start
their worker threads afresh for every query (none outlives it), so a new query's threads
may land on arenas whose memory was trimmed away, and fault it in again; more so once
another library's threads (pylance's) have added arenas of their own. One arena per core
(:data:`arena_max`) keeps freed memory where the next query's threads allocate: measured
on a 10M-row LSM scan with pylance's scans in the same process, page faults 39-42k ->
0.6-6k a scan and the LSM / base ratio 1.38-1.47 -> 1.24-1.30 (two cores).

This changes the whole process, so it is opt-in: importing lance_sql leaves malloc
alone; :func:`tune_allocator` applies the settings (the ``lance-sql`` command and the
benchmarks call it at start). It acts only on Linux with glibc, and never over the
user's own choices: ``LANCE_SQL_TUNE_MALLOC=0`` turns it off, and any of glibc's
``MALLOC_*`` tunables in the environment leave the allocator alone.
"""

from __future__ import annotations

import ctypes
import functools
import os
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass

__all__ = ["OPT_OUT", "AllocatorTuning", "arena_max", "release_free_memory", "tune_allocator"]

OPT_OUT = "LANCE_SQL_TUNE_MALLOC"
MMAP_THRESHOLD = 32 << 20
TRIM_THRESHOLD = 128 << 20
# mallopt parameter numbers (glibc's malloc.h).
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
_M_ARENA_MAX = -8
# Environment tunables with which the user has configured glibc's malloc already.
_USER_SETTINGS = ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "MALLOC_TOP_PAD_",
                  "MALLOC_MMAP_MAX_", "MALLOC_ARENA_MAX", "GLIBC_TUNABLES")


def arena_max() -> int:
    """The arenas the tuning allows: one per core, at least two."""
    return max(2, os.cpu_count() or 2)


@dataclass(frozen=True)
class AllocatorTuning:
    """Whether the allocator was tuned, and why (not)."""

    applied: bool
    reason: str


def _glibc_mallopt() -> Callable[[int, int], int] | None:
    try:
        libc = ctypes.CDLL(None)
        libc.gnu_get_libc_version  # noqa: B018 - present in glibc only (not musl)
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return None
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt.restype = ctypes.c_int
    return mallopt


def tune_allocator(environ: Mapping[str, str] | None = None,
                   mallopt: Callable[[int, int], int] | None = None,
                   platform: str | None = None) -> AllocatorTuning:
    """Apply the settings above to this process unless turned off or already configured
    by the user; says whether it did and why. ``environ``, ``mallopt`` and ``platform``
    default to the process's own (tests pass fakes)."""
    environ = os.environ if environ is None else environ
    platform = sys.platform if platform is None else platform
    if environ.get(OPT_OUT, "").strip().lower() in ("0", "false", "no", "off"):
        return AllocatorTuning(False, f"turned off by {OPT_OUT}")
    if not platform.startswith("linux"):
        return AllocatorTuning(False, f"not Linux ({platform})")
    configured = [name for name in _USER_SETTINGS if name in environ]
    if configured:
        return AllocatorTuning(False, f"left to the user's {configured[0]}")
    mallopt = mallopt or _glibc_mallopt()
    if mallopt is None:
        return AllocatorTuning(False, "not glibc's malloc")
    arenas = arena_max()
    if not (mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD)
            and mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD)
            and mallopt(_M_ARENA_MAX, arenas)):
        return AllocatorTuning(False, "mallopt refused the settings")
    return AllocatorTuning(True, f"mmap threshold {MMAP_THRESHOLD >> 20} MiB, "
                                 f"trim threshold {TRIM_THRESHOLD >> 20} MiB, "
                                 f"{arenas} arenas")



@functools.cache
def _glibc_malloc_trim() -> Callable[[int], int] | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(None)
        libc.gnu_get_libc_version  # noqa: B018 - glibc only
        trim = libc.malloc_trim
    except (OSError, AttributeError):
        return None
    trim.argtypes = (ctypes.c_size_t,)
    trim.restype = ctypes.c_int
    return trim


def release_free_memory() -> None:
    """Hand memory freed so far back to the OS: Arrow's pool (mimalloc or jemalloc keep
    freed pages) and glibc's heaps (kept up to the trim threshold above, and in thread
    arenas).

    For long-running processes with a memory bound after their big steps -- a MemWAL
    writer after each MemTable flush, whose freed MemTable and flush temporaries would
    otherwise stay resident (measured: 160 MiB after writing 2M rows). Costs a few ms.
    """
    import pyarrow as pa  # not at import: this module runs first in `import lance_sql`

    pa.default_memory_pool().release_unused()
    trim = _glibc_malloc_trim()
    if trim is not None:
        trim(0)
