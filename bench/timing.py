"""Shared timing helper for the bench scripts: medians, because the machines are shared."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable


def median_time(fn: Callable[[], object], repeat: int,
                setup: Callable[[], None] | None = None) -> float:
    """Median wall time of ``fn`` over ``repeat`` runs (``setup`` runs untimed before each)."""
    times = []
    for _ in range(repeat):
        if setup is not None:
            setup()
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def interleaved_medians(operations: dict[str, tuple[Callable[[], object],
                                                  Callable[[], None] | None]],
                        repeat: int, clock: Callable[[], float] = time.perf_counter
                        ) -> dict[str, float]:
    """Median wall time of each operation, run in rounds: one of each per round.

    On a shared machine a slow spell then hits every operation alike instead of all
    repeats of one. Each operation runs once untimed first (JIT, caches, workers).
    ``clock``: what is timed (``time.process_time``: the process's CPU time, all its
    threads, steadier than wall time when other work shares the cores).
    """
    times: dict[str, list[float]] = {name: [] for name in operations}
    for round_ in range(repeat + 1):
        for name, (fn, setup) in operations.items():
            if setup is not None:
                setup()
            start = clock()
            fn()
            if round_:
                times[name].append(clock() - start)
    return {name: statistics.median(ts) for name, ts in times.items()}


def formats_line(**uris: object) -> str:
    """One line naming the Lance file format of each table a bench measured, as read back
    from the table (``label=uri``), e.g. ``file format: ours 2.2, pylance 2.2``."""
    import lance_sql  # bench scripts run with the package on the path

    parts = [f"{label} {lance_sql.dataset(str(uri)).data_storage_version}"
             for label, uri in uris.items()]
    return "file format: " + ", ".join(parts)
