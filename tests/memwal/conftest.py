"""Every MemWAL test closes the writers it opens: a writer's background thread must not
outlive the test that started it (other tests check that no lance_sql thread runs)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from lance_sql.memwal.writer import open_writers


@pytest.fixture(autouse=True)
def no_writer_left_open() -> Iterator[None]:
    before = set(map(id, open_writers()))
    yield
    left = [w for w in open_writers() if id(w) not in before]
    for writer in left:
        writer.abort()
    assert not left, f"writers left open: {[str(w.region_id) for w in left]}"
