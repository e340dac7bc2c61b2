"""Region manifests: discovery by probing, put-if-absent commits, claims and fencing.

Everything runs on the in-memory store; interleavings are scripted with its hooks.
"""

from __future__ import annotations

import itertools
import json
import uuid

import pytest

from lance_sql.errors import FormatError, WriterFencedError
from lance_sql.format.memwal import FlushedGeneration, RegionManifest
from lance_sql.io.memory import MemoryStore
from lance_sql.memwal.region_log import RegionLog

_names = itertools.count()
REGION = uuid.UUID("11111111-2222-4333-8444-555555555555")


@pytest.fixture
def store() -> MemoryStore:
    name = f"region_log{next(_names)}"
    MemoryStore.reset(name)
    return MemoryStore(name)


def test_claims_raise_the_epoch(store: MemoryStore) -> None:
    log = RegionLog(store, REGION)
    assert log.latest() is None and log.latest_version() == 0
    first = log.claim(region_spec_id=3)
    assert (first.version, first.writer_epoch, first.region_spec_id) == (1, 1, 3)
    second = RegionLog(store, REGION).claim()
    assert (second.version, second.writer_epoch, second.region_spec_id) == (2, 2, 3)
    assert log.latest() == second
    hint = json.loads(store.read(log.paths.version_hint))
    assert hint == {"version": 2}


def test_discovery_probes_past_a_stale_or_missing_hint(store: MemoryStore) -> None:
    log = RegionLog(store, REGION)
    for _ in range(4):
        log.claim()
    store.put(log.paths.version_hint, b'{"version": 2}')
    probes: list[str] = []
    store.add_hook(lambda op, key: probes.append(op) if op == "list" else None)
    assert log.latest_version() == 4 and not probes  # existence checks, no listing
    store.delete(log.paths.version_hint)
    assert log.latest_version() == 4
    store.put(log.paths.version_hint, b"not json")
    assert log.latest_version() == 4
    for v in (1, 2):  # old versions garbage collected below the hint
        store.delete(log.paths.manifest(v))
    store.put(log.paths.version_hint, b'{"version": 1}')
    assert log.latest_version() == 4  # the listing fallback


def test_updates_keep_the_epoch_and_rebase_over_concurrent_versions(store: MemoryStore
                                                                    ) -> None:
    log = RegionLog(store, REGION)
    claimed = log.claim()
    slipped = False

    def background_job_slips_in(op: str, key: str) -> None:
        nonlocal slipped
        if op == "put_if_absent" and key.endswith(".binpb") and not slipped:
            slipped = True  # the index builder commits a wal hint first
            RegionLog(store, REGION).update(lambda m: m.evolve(wal_id_last_seen=9))

    store.add_hook(background_job_slips_in)
    flushed = log.update(lambda m: m.evolve(
        replay_after_wal_id=5, current_generation=m.current_generation + 1,
        flushed_generations=m.flushed_generations + (FlushedGeneration(1, "ab12cd34_gen_1"),)),
        epoch=claimed.writer_epoch)
    store.clear_hooks()
    assert flushed.version == 3 and flushed.writer_epoch == claimed.writer_epoch
    assert flushed.wal_id_last_seen == 9  # the job's change is kept
    assert flushed.flushed_generations[0].generation == 1


def test_appendix_1_writer_fencing(store: MemoryStore) -> None:
    """The spec's Appendix 1, step by step."""
    RegionLog(store, REGION).commit(RegionManifest(REGION, 1, writer_epoch=5,
                                                   replay_after_wal_id=10,
                                                   wal_id_last_seen=12))
    writer_a = RegionLog(store, REGION).claim()          # steps 1-2
    assert (writer_a.writer_epoch, writer_a.version) == (6, 2)
    writer_b = RegionLog(store, REGION).claim()          # steps 4-5
    assert (writer_b.writer_epoch, writer_b.version) == (7, 3)
    with pytest.raises(WriterFencedError, match="epoch 6 was fenced by epoch 7"):  # 7-9
        RegionLog(store, REGION).update(lambda m: m.evolve(replay_after_wal_id=15),
                                        epoch=writer_a.writer_epoch)
    done = RegionLog(store, REGION).update(lambda m: m.evolve(replay_after_wal_id=17),
                                           epoch=writer_b.writer_epoch)  # step 10
    assert (done.version, done.writer_epoch, done.replay_after_wal_id) == (4, 7, 17)


def test_racing_claims_both_succeed_with_distinct_epochs(store: MemoryStore) -> None:
    log = RegionLog(store, REGION)
    log.claim()
    raced: dict[str, RegionManifest | None] = {}

    def rival_claims_first(op: str, key: str) -> None:
        if op == "put_if_absent" and key.endswith(".binpb") and "rival" not in raced:
            raced["rival"] = None  # the rival's own put must not trigger another rival
            raced["rival"] = RegionLog(store, REGION).claim()

    store.add_hook(rival_claims_first)
    mine = log.claim()
    store.clear_hooks()
    rival = raced["rival"]
    assert rival is not None and rival.writer_epoch == 2 and mine.writer_epoch == 3
    assert log.latest() == mine


def test_a_manifest_of_another_region_is_refused(store: MemoryStore) -> None:
    log = RegionLog(store, REGION)
    other = uuid.uuid4()
    store.put(log.paths.manifest(1), RegionManifest(other, 1).encode())
    with pytest.raises(FormatError, match="not version 1 of"):
        log.load(1)


def test_latest_looks_again_when_the_version_found_is_collected(store: MemoryStore) -> None:
    """Between finding version 2 newest and reading it, a writer commits version 3 and
    the collector (``keep_manifests=1``) deletes version 2: a strong read failed with a
    bare NotFoundError of the region manifest."""
    log = RegionLog(store, REGION)
    log.claim()
    log.claim()
    raced: list[str] = []

    def newer_then_collected(op: str, key: str) -> None:
        if op == "read" and key == log.paths.manifest(2) and not raced:
            raced.append(key)
            RegionLog(store, REGION).claim()
            store.delete(log.paths.manifest(2))

    store.add_hook(newer_then_collected)
    latest = log.latest()
    store.clear_hooks()
    assert raced and latest is not None and (latest.version, latest.writer_epoch) == (3, 3)
