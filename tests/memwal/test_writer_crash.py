"""Crash injection at every store write of WAL flushes and MemTable flushes.

A scripted writer runs puts, deletes and MemTable flushes; a hook kills it at the k-th
write (the write does not happen), for every k. A new writer then recovers the region:
every acknowledged durable put and delete must be there, generations must be numbered
1, 2, ... without duplicates, and every recorded generation directory must be readable.
"""

from __future__ import annotations

import pyarrow as pa
import pytest
from memwal_writer_helpers import (
    REGION,
    flushed_rows,
    memory_table,
    open_writer,
    region_state,
    rows,
)

from lance_sql.memwal.region_log import RegionLog

WRITES = ("put", "put_if_absent", "rename_if_absent", "delete")


class Crash(Exception):
    """The process died here."""


def _script(writer, acked: dict[int, bool]) -> None:
    """Puts and deletes with distinct keys; ``acked[key] = deleted?`` once acknowledged."""
    steps: list[tuple[str, list[int]]] = [
        ("put", [1, 2, 3]), ("put", [4]), ("flush_memtable", []),
        ("put", [5, 6]), ("delete", [1]), ("flush_memtable", []),
        ("put", [7]), ("delete", [5]), ("put", [8]),
    ]
    for op, keys in steps:
        if op == "put":
            writer.put(rows(keys))
            acked.update(dict.fromkeys(keys, False))
        elif op == "delete":
            writer.delete(pa.table({"id": keys}))
            acked.update(dict.fromkeys(keys, True))
        else:
            writer.flush_memtable()


def _count_writes() -> int:
    ds = memory_table("crashcount")
    count = [0]
    ds.store.add_hook(lambda op, key: count.__setitem__(0, count[0] + (op in WRITES)))
    writer = open_writer(ds)
    _script(writer, {})
    ds.store.clear_hooks()
    writer.abort()
    return count[0]


def _crash_at(k: int):
    seen = [0]

    def hook(op: str, key: str) -> None:
        if op in WRITES:
            seen[0] += 1
            if seen[0] == k:
                raise Crash(f"write {k}: {op} {key}")

    return hook


def _check_recovered(ds, acked: dict[int, bool]) -> None:
    manifest = RegionLog(ds.store, REGION).latest()
    if manifest is not None:
        numbers = [g.generation for g in manifest.flushed_generations]
        assert numbers == list(range(1, len(numbers) + 1))
        assert manifest.current_generation == len(numbers) + 1
        flushed_rows(ds)  # every recorded generation opens and reads
    recovered = open_writer(ds)
    state = region_state(ds, recovered)
    for key, deleted in acked.items():
        assert key in state, f"acknowledged key {key} lost"
        assert state[key][1] == deleted, f"key {key}: delete state {state[key]}"
    # the recovered writer can flush everything into a new generation and go on
    recovered.flush_memtable()
    recovered.put(rows([100]))
    recovered.close()
    again = open_writer(ds)
    assert region_state(ds, again).keys() >= set(acked) | {100}
    again.close()


TOTAL = _count_writes()


def test_the_script_writes_enough_to_cover_every_step() -> None:
    # claim (manifest + hint) + 7 WAL entries + 2 generations x (bloom, transaction,
    # manifest, its hint, the key index's two files, its transaction, manifest and hint,
    # region manifest, region hint)
    assert TOTAL == 2 + 7 + 2 * 11


@pytest.mark.parametrize("k", range(1, TOTAL + 1))
def test_crash_at_every_write_loses_no_acknowledged_row(k: int) -> None:
    ds = memory_table("crash")
    acked: dict[int, bool] = {}
    writer = None
    ds.store.add_hook(_crash_at(k))
    try:
        writer = open_writer(ds)
        _script(writer, acked)
    except Crash:
        pass
    finally:
        ds.store.clear_hooks()
        if writer is not None:
            writer.abort()
    if writer is None:  # died while claiming: nothing was acknowledged
        assert not acked
    _check_recovered(ds, acked)


def test_retrying_a_flush_whose_commit_landed_adds_no_duplicate_generation() -> None:
    ds = memory_table()
    writer = open_writer(ds)
    writer.put(rows([1, 2]))
    hint = f"_mem_wal/{REGION}/manifest/version_hint.json"

    def fail_after_commit(op: str, key: str) -> None:
        if op == "put" and key.endswith(hint):
            raise Crash("after the region manifest was committed")

    ds.store.add_hook(fail_after_commit)
    with pytest.raises(Crash):
        writer.flush_memtable()
    ds.store.clear_hooks()
    assert writer.flush_memtable().generation == 1   # the committed one, not a second copy
    writer.put(rows([3]))
    assert writer.flush_memtable().generation == 2
    manifest = RegionLog(ds.store, REGION).latest()
    assert [g.generation for g in manifest.flushed_generations] == [1, 2]
    assert manifest.replay_after_wal_id == 2
    writer.close()
