"""The MemWAL garbage collector lets go of the files it removes: cached open readers of
a removed generation would otherwise keep its disk space (and a descriptor) for good."""

from __future__ import annotations

import os
from datetime import timedelta
from pathlib import Path

from test_merger import A, B, _base, _flush

import lance_sql
from lance_sql.memwal.gc import collect_garbage
from lance_sql.memwal.merger import merge
from lance_sql.table.runtime.cache import DATA_FILES
from lance_sql.table.runtime.context import Runtime


def _open_paths(runtime: Runtime) -> list[str]:
    """Paths of the data files ``runtime`` keeps open."""
    items = runtime.cache._caches[DATA_FILES.name]._items
    return [reader.source.path for reader, _ in list(items.values())]


def test_removed_generations_leave_the_cache(tmp_path: Path) -> None:
    runtime = Runtime()
    with runtime.activate():
        ds = _base(tmp_path)
        _flush(ds, A, [(1, "a", False)])
        _flush(ds, B, [(2, "b", False)])
        merge(ds)  # reads (and caches) the generations' data files
        generation_files = [p for p in _open_paths(runtime) if "_mem_wal" in p]
        assert generation_files
        lance_sql.dataset(ds.uri).cleanup_old_versions(older_than=timedelta(0))
        assert sorted(collect_garbage(ds).generations) == sorted([(A, 1), (B, 1)])
    assert not any(os.path.exists(p) for p in generation_files)
    assert [p for p in _open_paths(runtime) if not os.path.exists(p)] == []
