"""Model-based: random puts, deletes, flushes and restarts against a plain dict.

After every step, the region's contents (flushed generations, then the writer's MemTables,
last write wins) must equal the model, and a point lookup in the MemTable must find the
latest version of every key it holds.
"""

from __future__ import annotations

import pyarrow as pa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from memwal_writer_helpers import memory_table, open_writer, region_state, rows

KEYS = st.lists(st.integers(0, 30), min_size=1, max_size=6, unique=True)
STEPS = st.lists(st.one_of(
    st.tuples(st.just("put"), KEYS), st.tuples(st.just("delete"), KEYS),
    st.tuples(st.just("flush"), st.just([])), st.tuples(st.just("flush_memtable"),
                                                        st.just([])),
    st.tuples(st.just("restart"), st.just([]))), min_size=1, max_size=14)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(steps=STEPS, durable=st.booleans())
def test_random_operations_match_a_dict(steps: list[tuple[str, list[int]]],
                                        durable: bool) -> None:
    ds = memory_table("model")
    writer = open_writer(ds, durable_write=durable)
    model: dict[int, tuple[float | None, bool]] = {}
    version = 0
    try:
        for op, keys in steps:
            version += 1
            if op == "put":
                t = rows(keys)
                t = t.set_column(1, "v", pa.array([k + version / 100 for k in keys]))
                writer.put(t)
                model.update({k: (k + version / 100, False) for k in keys})
            elif op == "delete":
                writer.delete(pa.table({"id": keys}))
                model.update({k: (None, True) for k in keys})
            elif op == "flush":
                writer.flush()
            elif op == "flush_memtable":
                writer.flush_memtable()
            else:  # restart: close (flushes the WAL) and replay in a new writer
                writer.close()
                writer = open_writer(ds, durable_write=durable)
            assert region_state(ds, writer) == model
            memtable = writer.memtables()[-1]
            held = sorted(set(memtable.to_table().column("id").to_pylist()))
            if held:
                found = memtable.take(memtable.lookup(pa.table({"id": held})))
                for k, v, dead in zip(found.column("id").to_pylist(),
                                      found.column("v").to_pylist(),
                                      found.column("_tombstone").to_pylist(), strict=True):
                    assert (v, dead) == model[k]
    finally:
        writer.close()
