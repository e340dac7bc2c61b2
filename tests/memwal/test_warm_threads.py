"""A warm view's state (:class:`~lance_sql.memwal.read.warm.WarmState`) is shared by every
read of one MemWAL handle or SQL session, on whatever threads they run: one read finding
its listing still current must not be broken by another read replacing it meanwhile; and
a view's own listing of its regions is seen whole or not at all."""

from __future__ import annotations

import threading
import uuid
from pathlib import Path

import pyarrow as pa
import pytest

import lance_sql
from lance_sql.format.region_spec import RegionSpec
from lance_sql.memwal.api import MemWal
from lance_sql.memwal.naming import RegionPaths
from lance_sql.memwal.read.warm import WarmState
from lance_sql.table.runtime.context import current_runtime

PK = {"lance-schema:unenforced-primary-key": "true"}
SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False, metadata=PK),
                    pa.field("v", pa.string())])
WAIT = 10.0  # seconds any step of the interleaving may take before the test gives up


def _rows(ids, tag: str) -> pa.Table:
    ids = [int(i) for i in ids]
    return pa.table({"id": pa.array(ids, pa.int64()), "v": [f"{tag}{i}" for i in ids]},
                    schema=SCHEMA)


class _Interleaved(WarmState):
    """A warm state whose ``listing`` lets a test run another thread's read inside one
    thread's use of it: when ``reader`` first finds a listing, ``between`` starts on
    another thread, and ``reader`` goes on only once that thread has cleared the listing
    (it is held there until the test releases it)."""

    def __init__(self) -> None:
        self._value = None
        self.reader: threading.Thread | None = None
        self.clearer: threading.Thread | None = None
        self.between = lambda: None
        self.cleared = threading.Event()
        self.release = threading.Event()
        super().__init__()

    @property  # type: ignore[override]
    def listing(self):
        value = self._value
        if value is not None and threading.current_thread() is self.reader:
            self.reader = None  # once
            self.clearer = threading.Thread(target=self.between)
            self.clearer.start()
            assert self.cleared.wait(WAIT), "the other read never replaced the listing"
        return value

    @listing.setter
    def listing(self, value) -> None:
        self._value = value
        if value is None and threading.current_thread() is self.clearer:
            self.cleared.set()
            self.release.wait(WAIT)


@pytest.fixture
def mw(tmp_path: Path) -> MemWal:
    ds = lance_sql.write_dataset(_rows(range(100), "base"), str(tmp_path / "t.lance"))
    ds.create_scalar_index("id", "BTREE")
    return MemWal.initialize(lance_sql.dataset(ds.uri), RegionSpec.bucket("id", 4),
                             durable_write=False, max_wal_flush_interval_ms=3_600_000)


def _get(mw: MemWal, key: int) -> str | None:
    got = mw.get({"id": [key]})
    return got.column("v")[0].as_py() if got.num_rows else None


def test_a_warm_read_survives_another_read_relisting_the_regions(mw: MemWal) -> None:
    state = _Interleaved()
    mw._warm.state = state
    results: dict[str, object] = {}

    def run(name: str, key: int) -> None:
        try:
            results[name] = _get(mw, key)
        except BaseException as exc:  # noqa: BLE001 - the test reports it
            results[name] = exc

    def other_read() -> None:
        # a region directory appears (listed, not claimed yet): this read's listing
        # differs from the warm one, so it lists the regions again (clearing the old)
        mw.dataset.store.put(f"{RegionPaths(uuid.uuid4()).root}/placeholder", b"")
        run("other", 2)

    with mw.writer() as w:
        w.put(_rows([1, 2, 3], "m"))
        assert _get(mw, 1) == "m1"  # warms the state: its listing is now current
        assert state.listing is not None
        state.between = other_read
        reader = threading.Thread(target=run, args=("warm", 3))
        state.reader = reader
        reader.start()
        reader.join(WAIT)
        state.release.set()
        assert state.clearer is not None
        state.clearer.join(WAIT)
        assert state.cleared.is_set()  # the other read did clear it inside the warm one
        assert results == {"warm": "m3", "other": "m2"}
        assert _get(mw, 1) == "m1" and _get(mw, 250) is None  # and later reads agree


def test_a_view_never_shows_a_half_made_listing_of_its_regions(mw: MemWal,
                                                                  monkeypatch) -> None:
    """A second reader of one view, arriving while the first is still listing the regions,
    lists them itself: it is never handed the list the first is filling."""
    with mw.writer() as w:
        w.put(_rows(range(40), "m"))  # every one of the 4 buckets claims its region
    view = mw.view()
    cache = current_runtime().cache
    real = cache.get_or_load
    seen: list[object] = []

    def load_once_then_ask_again(*args, **kwargs):
        if not seen:  # first region of the first listing: another thread asks now
            seen.append(None)
            other = threading.Thread(target=lambda: seen.append(len(view._listed())))
            other.start()
            other.join(WAIT)
        return real(*args, **kwargs)

    monkeypatch.setattr(cache, "get_or_load", load_once_then_ask_again)
    listed = view._listed()
    assert len(listed) == 4
    assert seen == [None, 4]  # the other thread's own listing, whole when it got it
