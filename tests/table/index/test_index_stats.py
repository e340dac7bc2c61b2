"""``stats.index_stats``, ``describe_indices`` and ``list_indices`` answer as pylance's do,
on the same tables (indices built by either library)."""

from __future__ import annotations

import datetime as dt
import warnings
from pathlib import Path

import lance
import numpy as np
import pyarrow as pa
import pytest

import lance_sql
from lance_sql.errors import IndexNotFoundError, NotFoundError

N = 9000  # three BTREE pages of 4096


def _table(n: int = N, start: int = 0) -> pa.Table:
    i = np.arange(start, start + n)
    nulls = i % 11 == 0
    return pa.table({
        "i64": pa.array(i * 7 - 100, pa.int64(), mask=nulls),
        "f64": pa.array(np.where(i % 5 == 0, 1e20, np.where(i % 7 == 0, np.nan, i * 1e-7))),
        "f32": pa.array(np.where(i % 3 == 0, -np.inf, i / 8), pa.float32()),
        "s": pa.array([f"k{v % 300:03d}" for v in i], mask=nulls),
        "bin": pa.array([bytes([v % 5, 97]) for v in i], pa.binary()),
        "d": pa.array([dt.date(2021, 3, 4) + dt.timedelta(days=int(v % 50)) for v in i],
                      pa.date32()),
        "ts": pa.array(i * 1000, pa.timestamp("us")),
        "b": pa.array(i % 2 == 0, mask=nulls),
        "none": pa.array([None] * n, pa.int32()),
    })


BTREE = ["i64", "f64", "f32", "s", "bin", "d", "ts", "b", "none"]
BITMAP = ["s", "b", "d"]


def _build(lib: object, path: Path) -> None:
    ds = lib.write_dataset(_table(), str(path), max_rows_per_file=4000)  # type: ignore[attr-defined]
    for column in BTREE:
        ds.create_scalar_index(column, "BTREE")
    for column in BITMAP:
        ds.create_scalar_index(column, "BITMAP", name=f"{column}_bitmap")


def _names() -> list[str]:
    return [f"{c}_idx" for c in BTREE] + [f"{c}_bitmap" for c in BITMAP]


def _same_stats(path: Path) -> None:
    ours, theirs = lance_sql.dataset(path), lance.dataset(str(path))
    for name in _names():
        assert ours.stats.index_stats(name) == theirs.stats.index_stats(name), name


def _same_descriptions(path: Path) -> None:
    ours = {d.name: d for d in lance_sql.dataset(path).describe_indices()}
    theirs = {d.name: d for d in lance.dataset(str(path)).describe_indices()}
    assert set(ours) == set(theirs)
    for name, mine in ours.items():
        ref = theirs[name]
        assert (mine.index_type, mine.type_url, dict(mine.details), mine.total_size_bytes,
                mine.num_segments, mine.num_rows_indexed, list(mine.field_names)) == (
            ref.index_type, ref.type_url, ref.details, ref.total_size_bytes,
            len(ref.segments), ref.num_rows_indexed, list(ref.field_names)), name
        for seg, ref_seg in zip(mine.segments, ref.segments, strict=True):
            assert (seg.uuid, set(seg.fragment_ids), seg.index_version, seg.size_bytes,
                    seg.created_at, seg.dataset_version_at_last_update, seg.base_id) == (
                ref_seg.uuid, set(ref_seg.fragment_ids), ref_seg.index_version,
                ref_seg.size_bytes, ref_seg.created_at,
                ref_seg.dataset_version_at_last_update, ref_seg.base_id), name
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        ref_types = {i["name"]: i["type"] for i in lance.dataset(str(path)).list_indices()}
    assert {i["name"]: i["type"] for i in lance_sql.dataset(path).list_indices()} == ref_types


@pytest.mark.parametrize("lib", [lance, lance_sql], ids=["pylance-built", "lance_sql-built"])
def test_stats_and_descriptions_match_pylance(tmp_path: Path, lib: object) -> None:
    path = tmp_path / "t.lance"
    _build(lib, path)
    _same_stats(path)
    _same_descriptions(path)
    stats = lance_sql.dataset(path).stats.index_stats("none_idx")
    assert stats["segments"] == [{"min": "N/A", "max": "N/A", "num_pages": 3}]
    assert lance_sql.dataset(path).stats.index_stats("i64_idx")["indices"][0]["min"] == "NULL"
    # deletions and an unindexed append show in the coverage counts, then optimize
    ds = lance_sql.dataset(path)
    ds.delete("i64 < 500")
    lance_sql.write_dataset(_table(700, start=N), path, mode="append")
    _same_stats(path)
    stats = lance_sql.dataset(path).stats.index_stats("s_bitmap")
    assert (stats["num_unindexed_fragments"], stats["num_unindexed_rows"]) == (1, 700)
    lance_sql.dataset(path).optimize.optimize_indices()
    _same_stats(path)
    _same_descriptions(path)


def test_unknown_index_is_a_key_error(tmp_path: Path) -> None:
    ds = lance_sql.write_dataset(_table(10), tmp_path / "t.lance")
    with pytest.raises(IndexNotFoundError, match='Index "nope" not found') as caught:
        ds.stats.index_stats("nope")
    assert isinstance(caught.value, KeyError) and isinstance(caught.value, NotFoundError)
    with pytest.raises(KeyError):
        lance.dataset(str(tmp_path / "t.lance")).stats.index_stats("nope")
