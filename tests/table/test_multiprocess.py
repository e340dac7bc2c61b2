"""Eight processes append 50 rows each to one table on the local filesystem.

Every commit must land exactly once: 400 new versions and fragments, no version lost or
taken twice, every version readable with exactly the rows committed up to it.
"""

from __future__ import annotations

import multiprocessing
import time
from pathlib import Path

import lance
import pyarrow as pa
import pytest
from mp_worker import append_many

import lance_sql

PROCESSES = 8
APPENDS = 50


@pytest.mark.slow
def test_eight_processes_fifty_appends_each(tmp_path: Path) -> None:
    uri = str(tmp_path / "mp.lance")
    lance_sql.write_dataset(pa.table({"id": pa.array([-1], pa.int64()),
                                      "worker": pa.array([-1], pa.int32())}), uri)
    ctx = multiprocessing.get_context("spawn")
    queue = ctx.Queue()
    start_at = time.time() + 3.0  # time for the interpreters to start
    procs = [ctx.Process(target=append_many, args=(uri, w, APPENDS, start_at, queue))
             for w in range(PROCESSES)]
    for p in procs:
        p.start()
    results = [queue.get(timeout=240) for _ in procs]
    for p in procs:
        p.join(30)
    errors = [(w, e) for w, _, e in results if e]
    assert not errors, errors
    committed = sorted(v for _, versions, _ in results for v in versions)
    total = PROCESSES * APPENDS
    assert committed == list(range(2, total + 2))  # none lost, none duplicated
    for _, versions, _ in results:
        assert versions == sorted(versions)  # a writer's commits follow each other

    ds = lance_sql.dataset(uri)
    assert ds.version == total + 1
    frags = ds.manifest.fragments
    assert len(frags) == total + 1 and len({f.id for f in frags}) == total + 1
    table = ds.to_table()
    expected = sorted([-1] + [w * 1000 + i for w in range(PROCESSES) for i in range(APPENDS)])
    assert sorted(table["id"].to_pylist()) == expected
    # every version is readable and holds exactly the rows committed up to it; fragments
    # are immutable here, so a version's rows are those of the fragments it lists
    row_of_fragment = {}
    for frag in frags:
        (row,) = ds.to_table(columns=["id"], fragments=[frag])["id"].to_pylist()
        row_of_fragment[frag.id] = row
    version_of_row = {-1: 1}
    for w, versions, _ in results:
        for i, v in enumerate(versions):
            version_of_row[w * 1000 + i] = v
    for version in range(1, total + 2):
        listed = lance_sql.dataset(uri, version).manifest.fragments
        got = sorted(row_of_fragment[f.id] for f in listed)
        assert got == sorted(r for r, v in version_of_row.items() if v <= version), version
    assert lance.dataset(uri).to_table().sort_by("id") == table.sort_by("id")
