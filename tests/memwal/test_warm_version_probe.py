"""A warm view finds the table's latest version before every strong read by listing
``_versions/`` while the listing is short, and from the version hint once it is not; both
see a commit made through another handle at the very next read."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

import lance_sql
from lance_sql.format.region_spec import RegionSpec
from lance_sql.memwal.api import MemWal
from lance_sql.memwal.read import warm

PK = {"lance-schema:unenforced-primary-key": "true"}
SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False, metadata=PK),
                    pa.field("v", pa.string())])


def _table(tmp_path: Path) -> tuple[str, MemWal]:
    uri = str(tmp_path / "t.lance")
    ds = lance_sql.write_dataset(pa.table({"id": pa.array(range(100), pa.int64()),
                                           "v": [f"b{i}" for i in range(100)]},
                                          schema=SCHEMA), uri)
    ds.create_scalar_index("id", "BTREE")
    mw = MemWal.initialize(lance_sql.dataset(uri), RegionSpec.bucket("id", 2),
                           durable_write=False, max_wal_flush_interval_ms=3_600_000)
    return uri, mw


def _value(mw: MemWal, key: int) -> list:
    return mw.get({"id": pa.array([key], pa.int64())}).column("v").to_pylist()


def _counting(monkeypatch, name: str) -> list[int]:
    calls = [0]
    real = getattr(warm, name)

    def counted(*args, **kwargs):
        calls[0] += 1
        return real(*args, **kwargs)

    monkeypatch.setattr(warm, name, counted)
    return calls


def test_few_versions_are_listed(tmp_path: Path, monkeypatch) -> None:
    uri, mw = _table(tmp_path)
    listed = _counting(monkeypatch, "list_versions")
    hinted = _counting(monkeypatch, "latest_version")
    assert _value(mw, 7) == ["b7"]
    assert _value(mw, 7) == ["b7"]  # the warm view, its version probed by a listing
    lance_sql.dataset(uri).delete("id = 7")  # a commit through another handle
    assert _value(mw, 7) == []
    assert _value(mw, 8) == ["b8"]
    assert listed[0] == 3 and hinted[0] == 0  # (the first read opens the view)


@pytest.mark.parametrize("kept", [0, 2])
def test_many_versions_take_the_hint(tmp_path: Path, monkeypatch, kept: int) -> None:
    uri, mw = _table(tmp_path)  # three versions or more
    monkeypatch.setattr(warm, "LISTED_VERSIONS_MAX", kept)
    listed = _counting(monkeypatch, "list_versions")
    hinted = _counting(monkeypatch, "latest_version")
    assert _value(mw, 7) == ["b7"]
    assert _value(mw, 7) == ["b7"]  # the listing found too many: the hint from now on
    lance_sql.dataset(uri).delete("id = 7")
    assert _value(mw, 7) == []
    assert _value(mw, 8) == ["b8"]
    assert listed[0] == 1 and hinted[0] == 2
