"""Writers in several processes next to a loop of ``cleanup_old_versions(older_than=0)``.

Three processes each add 1 to their own row's counter ten times, one deletes rows, one
upserts rows with merge_insert, while another process removes every version but the
newest over and over. Every acknowledged change must be in the final table (each
counter equals its process's acknowledged updates, deleted rows stay deleted, upserted
rows are there), each acknowledged commit took a version number of its own, and every
version that remains opens in lance_sql and in pylance with the same rows.
"""

from __future__ import annotations

import multiprocessing
import time
from pathlib import Path

import lance
import pyarrow as pa
import pytest
from mp_worker import cleanup_loop, mixed_writer

import lance_sql
from lance_sql.table.meta.versions import list_versions

UPDATERS = 3
UPDATES = 10
DELETED = list(range(100, 110))
MERGED = [105, *range(200, 207)]  # 105 may be deleted before or after its upsert


@pytest.mark.slow
def test_no_acknowledged_change_is_lost_beside_cleanup(tmp_path: Path) -> None:
    uri = str(tmp_path / "mp.lance")
    start_ids = list(range(UPDATERS)) + list(range(100, 120))
    lance_sql.write_dataset(pa.table({"id": pa.array(start_ids, pa.int64()),
                                      "c": pa.array([0] * len(start_ids), pa.int64())}), uri)
    ctx = multiprocessing.get_context("spawn")
    queue, stop = ctx.Queue(), ctx.Event()
    start_at = time.time() + 3.0  # time for the interpreters to start
    jobs = [("update", [w] * UPDATES) for w in range(UPDATERS)]
    jobs += [("delete", DELETED), ("merge", MERGED)]
    writers = [ctx.Process(target=mixed_writer, args=(uri, kind, keys, start_at, queue))
               for kind, keys in jobs]
    cleaner = ctx.Process(target=cleanup_loop, args=(uri, stop, queue))
    for p in [*writers, cleaner]:
        p.start()
    results = [queue.get(timeout=120) for _ in writers]
    stop.set()
    cleanup = queue.get(timeout=60)
    for p in [*writers, cleaner]:
        p.join(30)
    errors = [r for r in results if r[-1]] + ([cleanup] if cleanup[-1] else [])
    assert not errors, errors
    assert cleanup[2] > 0, cleanup  # cleanup really removed versions meanwhile

    acked = {kind: [] for kind in ("update", "delete", "merge")}
    for kind, _, done, _, _ in results:
        acked[kind] += done
    ds = lance_sql.dataset(uri)
    table = ds.to_table().sort_by("id")
    got = dict(zip(table["id"].to_pylist(), table["c"].to_pylist(), strict=True))
    assert len(got) == table.num_rows  # no key twice
    for w in range(UPDATERS):
        assert got[w] == acked["update"].count(w), (w, got[w])
    for key in acked["delete"]:
        if key not in acked["merge"]:
            assert key not in got, key
    for key in acked["merge"]:
        if key not in DELETED:
            assert got[key] == 1000 + key
    assert set(got) - set(range(UPDATERS)) - set(MERGED) == set(range(100, 120)) - set(
        acked["delete"])
    # each acknowledged commit has a version number of its own, none taken twice
    commits = sum(len(done) for done in acked.values())
    assert ds.version == 1 + commits
    remaining = [r.version for r in list_versions(ds.store)]
    assert remaining[-1] == ds.version and len(remaining) < ds.version
    for version in remaining:
        ours = lance_sql.dataset(uri, version).to_table().sort_by("id")
        theirs = lance.dataset(uri, version=version).to_table().sort_by("id")
        assert ours == theirs, version
    assert lance.dataset(uri).to_table().sort_by("id") == table
