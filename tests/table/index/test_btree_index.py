"""BTREE scalar indices: built by either library, used by both, kept right through change.

Every query is checked three ways: lance_sql with the index, lance_sql scanning
(``use_scalar_index=False``) and pylance; and the index is shown to have answered
(lance_sql's explain_plan, pylance's ScalarIndexQuery, or the bytes read).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import os
import shutil
import warnings
from pathlib import Path

import lance
import numpy as np
import pyarrow as pa
import pytest

import lance_sql
from lance_sql.errors import (
    FormatError,
    IndexFallbackWarning,
    InvalidInputError,
    NotFoundError,
    RetryableConflict,
)
from lance_sql.format.btree import sort_entries
from lance_sql.io import local
from lance_sql.table.files import reader as file_reader
from lance_sql.table.index import btree as btree_mod
from lance_sql.table.index import manage

N = 3000


def _table(n: int = N, start: int = 0) -> pa.Table:
    i = np.arange(start, start + n)
    nulls = i % 13 == 0
    base = dt.datetime(2024, 1, 1, tzinfo=dt.UTC)
    return pa.table({
        "i64": pa.array(i[::-1] * 3, pa.int64()),
        "i32": pa.array(np.where(nulls, 0, i % 500), pa.int32(), mask=nulls),
        "f64": pa.array(np.where(i % 17 == 0, np.nan, (i % 300) / 4), pa.float64(), mask=nulls),
        "s": pa.array([f"k{v % 400:04d}" for v in i], pa.string(), mask=nulls),
        "bin": pa.array([bytes([v % 7, v % 3]) for v in i], pa.binary(), mask=nulls),
        "d": pa.array([dt.date(2020, 1, 1) + dt.timedelta(days=int(v % 900)) for v in i],
                      pa.date32(), mask=nulls),
        "ts": pa.array([base + dt.timedelta(minutes=int(v % 1000)) for v in i],
                       pa.timestamp("us", "UTC"), mask=nulls),
        "b": pa.array(i % 3 == 0, pa.bool_(), mask=nulls),
        "payload": pa.array([f"row-{v}" for v in i]),
    })


FILTERS = {
    "i64": ["i64 = 300", "i64 IN (3, 6, 999, 8997, -1)", "i64 < 100", "i64 >= 8900",
            "i64 BETWEEN 1000 AND 1100", "i64 > 50 AND i64 <= 60 OR i64 = 4000"],
    "i32": ["i32 = 7", "i32 IN (1, 2, 499)", "i32 < 3", "i32 IS NULL", "i32 BETWEEN 10 AND 12"],
    "f64": ["f64 = 2.5", "f64 < 1.0", "f64 > 74.0", "f64 IS NULL", "f64 IN (0.25, 3.0)"],
    "s": ["s = 'k0005'", "s IN ('k0001', 'k0399', 'zzz')", "s < 'k0002'", "s >= 'k0398'",
          "s IS NULL", "s BETWEEN 'k0100' AND 'k0102'"],
    "bin": ["bin IS NULL"],
    "d": ["d = DATE '2020-01-05'", "d < DATE '2020-01-03'", "d >= DATE '2022-06-17'", "d IS NULL"],
    "ts": ["ts = TIMESTAMP '2024-01-01 00:05:00+00:00'",
           "ts < TIMESTAMP '2024-01-01 00:02:00+00:00'", "ts IS NULL"],
    "b": ["b = true", "b = false AND i64 < 30", "b IS NULL"],
}
SORT = [("payload", "ascending")]


def _their_indices(path: Path) -> list[dict]:
    """pylance's ``list_indices`` (deprecated in 14.x, but the one listing fragments)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        return lance.dataset(str(path)).list_indices()


def _same(a: pa.Table, b: pa.Table) -> bool:
    """Equal tables, NaN equal to NaN (floats compared as their text)."""
    def text(t: pa.Table) -> pa.Table:
        return pa.table({n: c.cast(pa.string()) if pa.types.is_floating(c.type) else c
                         for n, c in zip(t.column_names, t.columns, strict=True)})
    return a.schema.equals(b.schema) and text(a).equals(text(b))


def _check(path: Path, flt: str, *, index_names: set[str]) -> pa.Table:
    """lance_sql with index == lance_sql scanning == pylance; the index was used."""
    ds = lance_sql.dataset(path)
    scanner = ds.scanner(filter=flt)
    assert "ScalarIndexQuery" in scanner.explain_plan(), flt
    assert any(f"@{n}" in scanner.explain_plan() for n in index_names)
    got = scanner.to_table()
    assert _same(got, ds.to_table(filter=flt, use_scalar_index=False)), flt
    assert ds.count_rows(flt) == got.num_rows
    theirs = lance.dataset(str(path)).to_table(filter=flt)
    assert _same(got.sort_by(SORT), theirs.sort_by(SORT)), flt
    return got


@pytest.mark.parametrize("key", sorted(FILTERS))
def test_pylance_index_answers_lance_sql(tmp_path: Path, key: str) -> None:
    path = tmp_path / "t.lance"
    ds = lance.write_dataset(_table(), str(path), max_rows_per_file=1000)
    ds.create_scalar_index(key, "BTREE")
    for flt in FILTERS[key]:
        _check(path, flt, index_names={f"{key}_idx"})
    assert lance_sql.dataset(path).list_indices()[0]["fields"] == [key]


@pytest.mark.parametrize("key", sorted(FILTERS))
def test_lance_sql_index_answers_pylance(tmp_path: Path, key: str) -> None:
    path = tmp_path / "t.lance"
    ds = lance_sql.write_dataset(_table(), path, max_rows_per_file=1000)
    ds.create_scalar_index(key, "BTREE")
    theirs = lance.dataset(str(path))
    [info] = _their_indices(path)
    assert (info["name"], info["type"], info["fields"]) == (f"{key}_idx", "BTree", [key])
    assert sorted(info["fragment_ids"]) == [0, 1, 2]
    [described] = theirs.describe_indices()
    assert described.num_rows_indexed == N
    for flt in FILTERS[key]:
        assert "ScalarIndexQuery" in theirs.scanner(filter=flt).explain_plan(), flt
        scanned = theirs.to_table(filter=flt, use_scalar_index=False)
        assert _same(theirs.to_table(filter=flt).sort_by(SORT), scanned.sort_by(SORT)), flt
        _check(path, flt, index_names={f"{key}_idx"})


def test_same_files_as_pylance(tmp_path: Path) -> None:
    """Both libraries write the same page data and page lookup for the same table."""
    from lance.file import LanceFileReader

    data = _table()
    ours = lance_sql.write_dataset(data, tmp_path / "a", max_rows_per_file=1000)
    theirs = lance.write_dataset(data, str(tmp_path / "b"), max_rows_per_file=1000)
    for key in ("s", "i32", "f64"):
        ours.create_scalar_index(key, "BTREE")
        theirs.create_scalar_index(key, "BTREE")
    by_name = {i["name"]: i["uuid"] for i in _their_indices(tmp_path / "a")}
    for info in _their_indices(tmp_path / "b"):
        for name in ("page_data.lance", "page_lookup.lance"):
            a = LanceFileReader(str(tmp_path / "a" / "_indices" / by_name[info["name"]] / name))
            b = LanceFileReader(str(tmp_path / "b" / "_indices" / info["uuid"] / name))
            ta, tb = a.read_all().to_table(), b.read_all().to_table()
            assert ta.schema.equals(tb.schema, check_metadata=True)  # batch_size etc.
            assert _same(ta.select([0]), tb.select([0])), (info["name"], name)
            if name == "page_data.lance":  # pylance orders equal NaNs arbitrarily
                pairs = [("values", "ascending"), ("ids", "ascending")]
                assert _same(ta.sort_by(pairs), tb.sort_by(pairs))
            else:
                assert ta.equals(tb) or _same(ta, tb)


def test_appends_deletes_compaction_optimize_both_ways(tmp_path: Path) -> None:
    path = tmp_path / "t.lance"
    ds = lance_sql.write_dataset(_table(), path, max_rows_per_file=1000)
    ds.create_scalar_index("i64", "BTREE")
    ds.create_scalar_index("s", "BTREE")
    lance_sql.write_dataset(_table(1000, start=N), path, mode="append")  # not indexed
    ds = lance_sql.dataset(path)
    ds.delete("i64 % 7 = 0")
    flts = ["i64 = 300", "i64 < 2000", "s = 'k0005' AND i64 > 10", "s IN ('k0001', 'k0100')"]
    for flt in flts:
        _check(path, flt, index_names={"i64_idx", "s_idx"})
    assert "indexed 3 of 4 fragments" in ds.scanner(filter="i64 = 3").explain_plan()
    # compaction by lance_sql: the indices follow the rows to the new fragments
    before = {i["name"]: i["uuid"] for i in ds.list_indices()}
    ds.optimize.compact_files(target_rows_per_fragment=2500)
    after = {i["name"]: i for i in ds.list_indices()}
    assert all(after[n]["uuid"] != u for n, u in before.items())
    live = {f.id for f in ds.manifest.fragments}
    for flt in flts:
        _check(path, flt, index_names={"i64_idx", "s_idx"})
        plan = ds.scanner(filter=flt).explain_plan()
        covered = after["i64_idx"]["fragment_ids"] & live
        assert f"indexed {len(covered)} of {len(live)}" in plan or "s_idx" in plan
    ds.optimize.optimize_indices()
    assert {i["name"]: sorted(i["fragment_ids"]) for i in ds.list_indices()} == {
        "i64_idx": [f.id for f in ds.manifest.fragments],
        "s_idx": [f.id for f in ds.manifest.fragments]}
    for flt in flts:
        got = _check(path, flt, index_names={"i64_idx", "s_idx"})
        n = len(ds.manifest.fragments)
        assert f"indexed {n} of {n}" in ds.scanner(filter=flt).explain_plan()
        assert "ScalarIndexQuery" in lance.dataset(str(path)).scanner(filter=flt).explain_plan()
        assert got.num_rows
    # pylance appends, deletes, optimizes and compacts the index lance_sql built
    theirs = lance.write_dataset(_table(500, start=9000), str(path), mode="append")
    theirs.delete("i64 = 300")
    theirs.optimize.optimize_indices()
    theirs.optimize.compact_files(target_rows_per_fragment=100_000)
    for flt in [*flts, "i64 = 27000", "i64 >= 26000"]:
        _check(path, flt, index_names={"i64_idx", "s_idx"})


def test_deleted_and_vanished_rows_never_returned(tmp_path: Path) -> None:
    path = tmp_path / "t.lance"
    ds = lance_sql.write_dataset(_table(), path, max_rows_per_file=1000)
    ds.create_scalar_index("i64", "BTREE")
    ds.delete("i64 < 3000")  # removes fragment 2 entirely; the index still lists its rows
    assert ds.to_table(filter="i64 < 6000").num_rows == 1000
    assert ds.count_rows("i64 = 2997") == 0
    assert ds.to_table(filter="i64 = 3000")["payload"].to_pylist() == ["row-1999"]


def _key_page_spans(path: Path, column: str) -> list[tuple[str, int, int]]:
    """(file, start, end) of every page buffer of ``column`` in the table's data files."""
    ds = lance_sql.dataset(path)
    field_id = next(f.id for f in ds.lance_schema.fields if f.name == column)
    spans = []
    for frag in ds.manifest.fragments:
        for data_file in frag.files:
            col = data_file.column_indices[list(data_file.fields).index(field_id)]
            reader = file_reader.open_data_file(ds.store, ds.manifest, data_file)
            full = os.path.join(str(path), data_file.key)
            for page in reader._columns[col].pages:
                spans += [(full, pos, pos + size) for pos, size in page.buffers if size]
    return spans


def test_index_answers_without_reading_the_key_column(tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "t.lance"
    lance.write_dataset(_table(), str(path), max_rows_per_file=1000).create_scalar_index(
        "i64", "BTREE")
    spans = _key_page_spans(path, "i64")
    reads: list[tuple[str, int, int]] = []
    original = local.LocalSource.read_at

    def recording(self: local.LocalSource, offset: int, length: int) -> bytes:
        reads.append((self.path, offset, offset + length))
        return original(self, offset, length)

    monkeypatch.setattr(local.LocalSource, "read_at", recording)

    def key_pages_read() -> bool:
        return any(p == q and a < e and s < b for p, a, b in reads for q, s, e in spans)

    ds = lance_sql.dataset(path)
    assert ds.to_table(columns=["payload"], filter="i64 = 300")["payload"].to_pylist() == [
        "row-2899"]
    assert ds.count_rows("i64 IN (3, 6, 9)") == 3
    ds.delete("i64 = 303 OR i64 BETWEEN 6000 AND 6010")  # deletes find their rows alike
    assert reads and not key_pages_read()
    assert ds.count_rows() == N - 5 and lance.dataset(str(path)).count_rows() == N - 5
    assert lance.dataset(str(path)).count_rows("i64 = 303 OR i64 = 6003") == 0
    ds.update({"payload": "'changed'"}, where="i64 = 3")
    assert ds.to_table(filter="payload = 'changed'")["i64"].to_pylist() == [3]
    ds.to_table(columns=["payload"], filter="i64 = 300", use_scalar_index=False)
    assert key_pages_read()  # the check can see a scan


def test_sql_uses_the_index(tmp_path: Path) -> None:
    path = tmp_path / "t.lance"
    lance.write_dataset(_table(), str(path), max_rows_per_file=1000).create_scalar_index(
        "s", "BTREE")
    session = lance_sql.connect(tmp_path)
    queries = {
        "SELECT payload FROM t WHERE s = 'k0005' ORDER BY payload": "s = 'k0005'",
        "SELECT count(*) AS n FROM t WHERE s IN ('k0001', 'k0002') OR s IS NULL": None,
        "SELECT payload FROM t WHERE s BETWEEN 'k0010' AND 'k0012' AND i64 > 4000 "
        "ORDER BY payload": None,
    }
    for sql in queries:
        plan = session.explain(sql)
        assert "ScalarIndexQuery" in plan and "@s_idx(BTree)" in plan, plan
        got = session.sql(sql).to_arrow_table()
        where = sql.split("WHERE ", 1)[1].split(" ORDER")[0]
        expected = lance.dataset(str(path)).to_table(filter=where)
        if "count" in sql:
            assert got["n"].to_pylist() == [expected.num_rows]
        else:
            assert got["payload"].to_pylist() == sorted(expected["payload"].to_pylist())
    assert session.sql("SELECT payload FROM t WHERE s = 'nope'").to_arrow_table().num_rows == 0


def test_stable_row_id_tables(tmp_path: Path) -> None:
    """pylance 14.0.2 indexes row addresses on these tables too, and remaps on compaction."""
    for builder in ("pylance", "lance_sql"):
        path = tmp_path / builder
        data = _table()
        if builder == "pylance":
            ds = lance.write_dataset(data, str(path), max_rows_per_file=1000,
                                     enable_stable_row_ids=True)
            ds.delete("i64 % 5 = 0")
            ds.create_scalar_index("i64", "BTREE")
        else:
            ours = lance_sql.write_dataset(data, path, max_rows_per_file=1000,
                                           enable_stable_row_ids=True)
            ours.delete("i64 % 5 = 0")
            ours.create_scalar_index("i64", "BTREE")
        flts = ["i64 = 303", "i64 < 100", "i64 IN (3, 6, 9, 10)"]
        for flt in flts:
            _check(path, flt, index_names={"i64_idx"})
            ids = lance_sql.dataset(path).to_table(filter=flt, with_row_id=True)["_rowid"]
            theirs = lance.dataset(str(path)).to_table(filter=flt, with_row_id=True)["_rowid"]
            assert sorted(ids.to_pylist()) == sorted(theirs.to_pylist())
        lance.dataset(str(path)).optimize.compact_files(target_rows_per_fragment=10_000)
        for flt in flts:
            _check(path, flt, index_names={"i64_idx"})


def _damage(path: Path, name: str, how: str) -> None:
    [uuid] = os.listdir(path / "_indices")
    target = path / "_indices" / uuid / name
    if how == "missing":
        target.unlink()
    elif how == "truncated":
        target.write_bytes(target.read_bytes()[:100])
    else:  # another index's file: values of another type
        other = lance.write_dataset(pa.table({"x": ["a", "b"]}), str(path.parent / "o"))
        other.create_scalar_index("x", "BTREE")
        [ouuid] = os.listdir(path.parent / "o" / "_indices")
        shutil.copy(path.parent / "o" / "_indices" / ouuid / name, target)
    lance_sql.default_runtime().clear("index_files", "index_pages")


@pytest.mark.parametrize(("name", "how", "error"), [
    ("page_lookup.lance", "missing", NotFoundError),
    ("page_data.lance", "truncated", FormatError),
    ("page_data.lance", "wrong type", FormatError),
    ("page_lookup.lance", "wrong type", FormatError),
])
def test_bad_index_files_fall_back_to_scanning(tmp_path: Path, name: str, how: str,
                                               error: type[Exception]) -> None:
    path = tmp_path / "t.lance"
    lance_sql.write_dataset(_table(), path, max_rows_per_file=1000).create_scalar_index(
        "i64", "BTREE")
    _damage(path, name, how)
    ds = lance_sql.dataset(path)
    with pytest.warns(IndexFallbackWarning, match="i64_idx"):
        got = ds.to_table(filter="i64 = 300")
    assert got["payload"].to_pylist() == ["row-2899"]
    with pytest.raises(error, match=name):
        ds.to_table(filter="i64 = 300", use_scalar_index=True)
    with pytest.warns(IndexFallbackWarning):
        rows = lance_sql.connect(tmp_path).sql("SELECT payload FROM t WHERE i64 = 300")
        assert rows.to_arrow_table()["payload"].to_pylist() == ["row-2899"]


def test_create_replace_drop(tmp_path: Path) -> None:
    path = tmp_path / "t.lance"
    ds = lance_sql.write_dataset(_table(), path)
    ds.create_scalar_index("i64", "BTREE", name="by_key")
    with pytest.raises(InvalidInputError, match="already exists"):
        ds.create_scalar_index("i64", "BTREE", name="by_key", replace=False)
    first = ds.list_indices()[0]["uuid"]
    ds.create_scalar_index("i64", "btree", name="by_key", replace=True)
    [info] = ds.list_indices()
    assert info["uuid"] != first and info["name"] == "by_key"
    ds.create_scalar_index("i64", "BTREE", name="by_key")  # pylance's default: rebuilt
    [again] = ds.list_indices()
    assert again["uuid"] != info["uuid"] and again["name"] == "by_key"
    ds.create_scalar_index("i64", "BTREE")  # (the default name: another index)
    assert sorted(i["name"] for i in ds.list_indices()) == ["by_key", "i64_idx"]
    ds.drop_index("i64_idx")
    with pytest.raises(NotFoundError):
        ds.create_scalar_index("nope", "BTREE")
    with pytest.raises(lance_sql.LanceError):
        ds.create_scalar_index("i64", "IVF_PQ")
    ds.drop_index("by_key")
    assert ds.list_indices() == [] and _their_indices(path) == []
    assert "ScalarIndexQuery" not in ds.scanner(filter="i64 = 3").explain_plan()
    with pytest.raises(NotFoundError):
        ds.drop_index("by_key")


def test_a_name_taken_on_another_column_is_refused(tmp_path: Path) -> None:
    """``replace`` rebuilds an index of the same column; a name another column's index
    holds is refused, as pylance refuses it ("already exists with different fields"),
    instead of silently dropping that index. Nothing is committed."""
    path = tmp_path / "t.lance"
    ds = lance_sql.write_dataset(_table(), path)
    ds.create_scalar_index("i64", "BTREE", name="k")
    version = ds.version
    for kind in ("BTREE", "BITMAP"):
        with pytest.raises(InvalidInputError, match="already exists on other fields"):
            ds.create_scalar_index("i32", kind, name="k")
    assert lance_sql.dataset(path).version == version
    assert [(i["name"], i["fields"]) for i in ds.list_indices()] == [("k", ["i64"])]
    ds.create_scalar_index("i64", "BITMAP", name="k")  # its own column: rebuilt
    assert [(i["name"], i["type"]) for i in ds.list_indices()] == [("k", "Bitmap")]


def test_index_build_racing_a_compaction_retries(tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "t.lance"
    lance_sql.write_dataset(_table(), path, max_rows_per_file=500)
    ds = lance_sql.dataset(path)
    write = manage.write_btree

    def compact_meanwhile(*args: object, **kwargs: object) -> object:
        lance_sql.dataset(path).optimize.compact_files(target_rows_per_fragment=5000)
        return write(*args, **kwargs)

    monkeypatch.setattr(manage, "write_btree", compact_meanwhile)
    with pytest.raises(RetryableConflict):
        ds.create_scalar_index("i64", "BTREE")
    monkeypatch.setattr(manage, "write_btree", write)
    ds = lance_sql.dataset(path)
    ds.create_scalar_index("i64", "BTREE")  # retried on the new version
    _check(path, "i64 = 300", index_names={"i64_idx"})


def test_index_build_racing_an_append_covers_what_it_read(tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch
                                                          ) -> None:
    path = tmp_path / "t.lance"
    lance_sql.write_dataset(_table(), path, max_rows_per_file=1000)
    ds = lance_sql.dataset(path)
    write = manage.write_btree

    def append_meanwhile(*args: object, **kwargs: object) -> object:
        lance_sql.write_dataset(_table(100, start=N), path, mode="append")
        return write(*args, **kwargs)

    monkeypatch.setattr(manage, "write_btree", append_meanwhile)
    ds.create_scalar_index("i64", "BTREE")
    [info] = lance_sql.dataset(path).list_indices()
    assert sorted(info["fragment_ids"]) == [0, 1, 2]
    _check(path, "i64 < 400", index_names={"i64_idx"})


def test_index_build_racing_an_in_place_update_of_its_column(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The winner rewrote the key column of one fragment in place: our index, committed
    after it, must not claim that fragment (its values there are stale)."""
    path = tmp_path / "t.lance"
    lance_sql.write_dataset(_table(), path, max_rows_per_file=1000)
    ds = lance_sql.dataset(path)
    write = manage.write_btree

    def update_meanwhile(*args: object, **kwargs: object) -> object:
        lance_sql.dataset(path).update({"i64": "i64 + 1"}, where="i64 < 3000",
                                       update_mode="rewrite_columns")
        return write(*args, **kwargs)

    monkeypatch.setattr(manage, "write_btree", update_meanwhile)
    ds.create_scalar_index("i64", "BTREE")
    [info] = lance_sql.dataset(path).list_indices()
    assert sorted(info["fragment_ids"]) == [0, 1]
    for flt in ("i64 = 301", "i64 = 300", "i64 < 400", "i64 > 8990"):
        _check(path, flt, index_names={"i64_idx"})


def test_schema_changes(tmp_path: Path) -> None:
    """A renamed column keeps its index (same field id); a re-typed one loses it."""
    path = tmp_path / "t.lance"
    ds = lance_sql.write_dataset(_table(), path, max_rows_per_file=1000)
    ds.create_scalar_index("i64", "BTREE")
    ds.alter_columns({"path": "i64", "name": "key"})
    _check(path, "key = 300", index_names={"i64_idx"})
    ds.add_columns({"twice": "key * 2"})
    _check(path, "key = 300 AND twice = 600", index_names={"i64_idx"})
    ds.alter_columns({"path": "key", "data_type": pa.float64()})
    assert ds.list_indices() == []
    assert ds.to_table(filter="key = 300")["payload"].to_pylist() == ["row-2899"]


def test_index_pointing_past_a_fragment_is_refused(tmp_path: Path) -> None:
    """An index whose row addresses do not exist is corrupt: scan instead (or raise)."""
    path = tmp_path / "t.lance"
    ds = lance_sql.write_dataset(_table(100), path)
    data = sort_entries(pa.array([7, 8], pa.int64()), np.array([5, 500], np.uint64))
    files = btree_mod.write_btree(ds.store, "00000000-0000-0000-0000-0000000000ab", data)
    meta = manage._metadata("00000000-0000-0000-0000-0000000000ab", "bad_idx", 0, ds.version,
                            {0}, files, False)
    ds.commit_index_metadata([meta])
    with pytest.warns(IndexFallbackWarning, match="bad_idx"):
        assert ds.count_rows("i64 = 8") == 0
    with pytest.raises(FormatError, match="row 500 of fragment 0 does not exist"):
        ds.scanner(filter="i64 = 8", use_scalar_index=True)


def test_lance_sql_maintains_a_pylance_index(tmp_path: Path) -> None:
    """lance_sql's optimize_indices and compaction on an index pylance built; both read it."""
    path = tmp_path / "t.lance"
    theirs = lance.write_dataset(_table(), str(path), max_rows_per_file=1000)
    theirs.create_scalar_index("s", "BTREE")
    lance.write_dataset(_table(700, start=N), str(path), mode="append")
    lance.dataset(str(path)).delete("i64 % 11 = 0")
    ds = lance_sql.dataset(path)
    assert "indexed 3 of 4 fragments" in ds.scanner(filter="s = 'k0005'").explain_plan()
    ds.optimize.optimize_indices()
    assert _their_indices(path)[0]["fragment_ids"] == {0, 1, 2, 3}
    flts = ["s = 'k0005'", "s IN ('k0001', 'k0300')", "s >= 'k0390'", "s IS NULL"]
    for flt in flts:
        _check(path, flt, index_names={"s_idx"})
        assert "indexed 4 of 4" in ds.scanner(filter=flt).explain_plan()
    ds.optimize.compact_files(target_rows_per_fragment=2000)
    live = len(ds.manifest.fragments)
    for flt in flts:
        _check(path, flt, index_names={"s_idx"})
        assert f"indexed {live} of {live}" in ds.scanner(filter=flt).explain_plan()
        assert "ScalarIndexQuery" in lance.dataset(str(path)).scanner(filter=flt).explain_plan()


def test_broad_queries_scan_instead(tmp_path: Path) -> None:
    """Taking many scattered rows is slower than scanning: an index matching a large share
    of the rows is skipped (before reading its pages when they are many), unless asked for."""
    path = tmp_path / "t.lance"
    rows = 300_000
    keys = np.random.default_rng(3).permutation(rows)
    ds = lance_sql.write_dataset(pa.table({"k": keys, "v": keys % 7}), path,
                                 max_rows_per_file=100_000)
    ds.create_scalar_index("k", "BTREE")
    ds.create_scalar_index("v", "BTREE")
    wide = ds.scanner(filter="k >= 1000")
    assert "not used: up to" in wide.explain_plan() and wide.count_rows() == rows - 1000
    forced = ds.scanner(filter="k >= 1000", use_scalar_index=True)
    assert "indexed 3 of 3 fragments" in forced.explain_plan()
    assert forced.count_rows() == rows - 1000
    narrow = ds.scanner(filter="k < 1000 OR k IN (5000, 7000)")
    assert "indexed 3 of 3 fragments, 1002 rows" in narrow.explain_plan()
    assert narrow.count_rows() == 1002
    few_pages = ds.scanner(filter="v = 3")  # 11 pages, but a seventh of every fragment
    assert "3 fragments scanned instead" in few_pages.explain_plan()
    assert few_pages.to_table().equals(ds.to_table(filter="v = 3", use_scalar_index=False))


@pytest.mark.parametrize("key", sorted(FILTERS))
@pytest.mark.parametrize("builder", ["lance_sql", "pylance"])
def test_every_key_type_through_changes(tmp_path: Path, key: str, builder: str) -> None:
    """Append (unindexed rows), delete, compact (lance_sql), optimize_indices (the other
    library), for each key type: both libraries answer every filter alike, from the index."""
    path = tmp_path / "t.lance"
    if builder == "pylance":
        lance.write_dataset(_table(), str(path), max_rows_per_file=1000).create_scalar_index(
            key, "BTREE")
    else:
        lance_sql.write_dataset(_table(), path, max_rows_per_file=1000).create_scalar_index(
            key, "BTREE")
    lance_sql.write_dataset(_table(600, start=N), path, mode="append")
    lance_sql.dataset(path).delete("i64 % 4 = 1")
    stages = {
        "appended and deleted": lambda: None,
        "compacted": lambda: lance_sql.dataset(path).optimize.compact_files(
            target_rows_per_fragment=1500),
        "optimized": lambda: (lance.dataset(str(path)) if builder == "lance_sql" else
                              lance_sql.dataset(path)).optimize.optimize_indices(),
    }
    for stage, change in stages.items():
        change()
        found = sum(_check(path, flt, index_names={f"{key}_idx"}).num_rows
                    for flt in FILTERS[key])
        assert found, stage
    [info] = _their_indices(path)
    assert info["fragment_ids"] >= {f.fragment_id for f in lance.dataset(str(path)).get_fragments()}


@pytest.mark.parametrize("kind", ["int", "float"])
def test_many_keys_over_many_pages_match_page_by_page(kind: str) -> None:
    """A set of many keys is searched in each page only for the keys within the page's
    range: the same ids as asking each page for the whole set (duplicates, nulls, NaN)."""
    rng = np.random.default_rng(5)
    raw = rng.integers(0, 3000, 20_000)
    values = (pa.array(raw, pa.int64(), mask=raw % 97 == 0) if kind == "int" else
              pa.array(np.where(raw % 11 == 0, np.nan, raw / 4), pa.float64(),
                       mask=raw % 97 == 0))
    table = sort_entries(values, np.arange(20_000, dtype=np.uint64))
    pages = [btree_mod.SortedPage.of(table.slice(s, 4096)) for s in range(0, 20_000, 4096)]
    asked = pa.array(np.concatenate([rng.integers(0, 3000, 400), [5000]]), pa.int64())
    if kind == "float":
        asked = pa.array(np.concatenate([asked.to_numpy() / 4, [np.nan]]), pa.float64())
    query = btree_mod.KeySet(asked)
    wanted = btree_mod._sorted_numbers(query)
    assert wanted is not None
    for page in pages:
        got = btree_mod._select_numbers(page.entries, wanted)
        assert sorted(got.tolist()) == sorted(page.entries.positions(query).tolist())
        assert sorted(page.ids[got].tolist()) == sorted(page.select(query).tolist())
    assert sum(len(btree_mod._select_numbers(p.entries, wanted)) for p in pages) > 1000
    # all pages searched together (as the index does): the same positions, page bases added
    bases = [4096 * i for i in range(len(pages))]
    together = btree_mod._select_many([(p.entries, b) for p, b in zip(pages, bases, strict=True)],
                                      wanted)
    expected = np.concatenate([b + p.entries.positions(query)
                               for p, b in zip(pages, bases, strict=True)])
    assert together.tolist() == np.sort(expected).tolist()
    assert btree_mod._select_many([(p.entries, 0) for p in pages[:1]], wanted[:0]).size == 0


@pytest.mark.parametrize("dtype", [np.int64, np.int32, np.uint64])
def test_many_integer_keys_take_one_search_per_page(dtype, monkeypatch) -> None:
    """Integer keys are searched once per page (a key's run ends where key + 1 starts):
    the same positions as two searches per page, with duplicates, nulls, absent keys and
    keys at the type's extremes; a set holding the type's maximum (no key + 1) takes the
    two-search loop and agrees too."""
    info = np.iinfo(dtype)
    rng = np.random.default_rng(6)
    raw = rng.integers(0, 3000, 20_000).astype(dtype)
    raw[:3] = info.max
    raw[3:6] = info.min
    values = pa.array(raw, mask=(raw % 89 == 0) & (raw != info.max) & (raw != info.min))
    table = sort_entries(values, np.arange(20_000, dtype=np.uint64))
    pages = [btree_mod.SortedPage.of(table.slice(s, 4096)) for s in range(0, 20_000, 4096)]
    bases = [4096 * i for i in range(len(pages))]
    one_search: list[int] = []
    inner = btree_mod._select_many_ints

    def counted(*args):
        one_search.append(1)
        return inner(*args)

    monkeypatch.setattr(btree_mod, "_select_many_ints", counted)
    for extra in ([info.min, 5000], [info.max]):
        asked = pa.array(np.concatenate([rng.integers(0, 3000, 500).astype(dtype),
                                         np.array(extra, dtype)]))
        query = btree_mod.KeySet(asked)
        wanted = btree_mod._sorted_numbers(query)
        assert wanted is not None
        got = btree_mod._select_many([(p.entries, b) for p, b in zip(pages, bases,
                                                                     strict=True)], wanted)
        expected = np.concatenate([b + p.entries.positions(query)
                                   for p, b in zip(pages, bases, strict=True)])
        assert got.tolist() == np.sort(expected).tolist()
        assert got.size > 500
    assert one_search == [1]  # the set holding the maximum took the two-search loop


def test_many_keys_in_through_the_index(tmp_path: Path) -> None:
    """An IN of many keys on a table of several index pages: the rows a scan finds."""
    ids = np.arange(40_000, dtype=np.int64) % 17_000
    ds = lance_sql.write_dataset(pa.table({"id": ids, "v": np.arange(40_000)}),
                                 str(tmp_path / "t"))
    ds.create_scalar_index("id", "BTREE")
    asked = np.arange(-5, 17_010, 37)
    flt = f"id IN ({', '.join(str(k) for k in asked)})"
    got = ds.to_table(filter=flt)
    assert _same(got, ds.to_table(filter=flt, use_scalar_index=False)), flt
    assert got.num_rows == int(np.isin(ids, asked).sum()) > 900


@pytest.mark.parametrize("kind", ["int", "float"])
def test_many_keys_searched_by_the_lookup_bounds(tmp_path: Path, kind: str,
                                                 monkeypatch) -> None:
    """A set of many numeric keys finds which keys each page may hold from the index's
    page lookup, not from each page's first and last key: the same rows as those give,
    and as a scan, with nulls first (the first page's lowest bound is the null fill),
    runs of one key across page edges, absent keys and keys past both ends."""
    rng = np.random.default_rng(12)
    raw = np.repeat(rng.integers(0, 9000, 6000), 3)  # each key three times
    null = np.zeros(raw.size, bool)
    null[:5000] = raw[:5000] % 2 == 0  # ~2500 nulls: the first page starts with them
    column = (pa.array(raw, pa.int64(), mask=null) if kind == "int"
              else pa.array(raw / 4, pa.float64(), mask=null))
    ds = lance_sql.write_dataset(pa.table({"k": column, "v": np.arange(raw.size)}),
                                 str(tmp_path / "t"))
    ds.create_scalar_index("k", "BTREE")
    asked = np.r_[rng.integers(-20, 9020, 900), raw[:40]]
    listed = ", ".join(str(k if kind == "int" else k / 4) for k in asked.tolist())
    flt = f"k IN ({listed})"
    by_bounds: list[bool] = []
    inner = btree_mod._select_many

    def spied(pages, wanted, bounds=None):
        by_bounds.append(bounds is not None)
        return inner(pages, wanted, bounds)

    monkeypatch.setattr(btree_mod, "_select_many", spied)
    got = ds.to_table(filter=flt)
    assert by_bounds == [True]
    monkeypatch.setattr(btree_mod.BTreeIndex, "_bounds_of", lambda *a: None)
    assert _same(got, ds.to_table(filter=flt)), "pages' own first and last keys"
    assert by_bounds == [True, False]
    assert _same(got, ds.to_table(filter=flt, use_scalar_index=False)), flt
    assert got.num_rows == int(np.isin(raw[~null], asked).sum()) > 900


@pytest.mark.parametrize("key", ["int", "float", "string"])
def test_batched_page_loads_equal_page_by_page(tmp_path: Path, key: str, monkeypatch) -> None:
    """A search over many index pages reads the pages not cached together
    (``BTreeIndex.keys_of``): the rows found equal those of loading page by page and of
    a scan, for int (nulls), float (nulls, NaN) and string keys, duplicates in the keys
    asked and in the table, absent keys, deletions, several fragments and an unindexed
    one; half the pages cached beforehand."""
    from lance_sql.table.index.planner import key_rows
    from lance_sql.table.runtime.context import current_runtime

    rng = np.random.default_rng(8)
    raw = rng.integers(0, 30_000, 50_000)
    null = raw % 101 == 0
    if key == "int":
        column = pa.array(raw, pa.int64(), mask=null)
        asked = pa.array(np.r_[rng.integers(-50, 30_050, 700), raw[:50]], pa.int64())
    elif key == "float":
        column = pa.array(np.where(raw % 13 == 0, np.nan, raw / 8), pa.float64(), mask=null)
        asked = pa.array(np.r_[rng.integers(-50, 30_050, 700) / 8, np.nan], pa.float64())
    else:
        column = pa.array([f"k{v:06d}" for v in raw], mask=null)
        asked = pa.array([f"k{v:06d}" for v in rng.integers(-50, 30_050, 700)] + ["zz", "k"])
    table = pa.table({"k": column, "v": np.arange(50_000)})
    path = str(tmp_path / "t")
    ds = lance_sql.write_dataset(table, path, max_rows_per_file=20_000)
    ds.create_scalar_index("k", "BTREE")
    ds.delete("v % 7 = 3")
    ds = lance_sql.write_dataset(table.slice(0, 3000), path, mode="append")  # unindexed

    def found(batch_pages: int, warm: bool) -> dict[int, list[int]]:
        monkeypatch.setattr(btree_mod, "BATCH_PAGES", batch_pages)
        current_runtime().cache.clear("index_pages")
        if warm:  # every other key searched first: some pages cached, some not
            key_rows(ds.store, ds.manifest, "k", asked.take(pa.array(range(0, len(asked), 2))))
        rows = key_rows(ds.store, ds.manifest, "k", asked)
        assert rows is not None
        return {f: r.tolist() for f, r in rows.rows.items()}

    loads: list[int] = []
    keys_of = btree_mod.BTreeIndex.keys_of

    def counted(self, pages):
        loads.append(len(pages))
        return keys_of(self, pages)

    monkeypatch.setattr(btree_mod.BTreeIndex, "keys_of", counted)
    expected = found(10**9, warm=False)
    assert not loads
    for warm in (False, True):
        assert found(1, warm) == expected
    assert loads and max(loads) >= 8
    assert sum(len(r) for r in expected.values()) > 300
    if key != "float":  # the same rows through a scan with and without the index
        literals = [str(k) if key == "int" else f"'{k}'" for k in asked.to_pylist()]
        flt = f"k IN ({', '.join(literals)})"
        got = ds.to_table(filter=flt)
        assert _same(got, ds.to_table(filter=flt, use_scalar_index=False))
        assert got.num_rows > 300


@pytest.mark.parametrize("dtype", [np.int64, np.int32, np.uint64])
def test_dense_integer_pages_found_by_arithmetic(dtype, monkeypatch) -> None:
    """Pages whose keys are consecutive integers are searched by arithmetic (a key's
    position is its distance from the page's first key), the others by binary search:
    the same positions as page-by-page searches, with dense pages around the type's
    extremes (no wrap-around), a page of nulls then a dense run, a dense page of another
    key width, gaps and duplicates in the non-dense pages and keys outside every page."""
    info = np.iinfo(dtype)
    low, high = int(info.min), int(info.max) - 1  # the maximum itself: no key + 1
    def run(start: int, n: int) -> np.ndarray:  # exact at the extremes (no float)
        return np.arange(n).astype(dtype) + np.array(start, dtype)

    dense_runs = [run(low, 3000), run(0, 4096), run(4096, 1904), run(high - 2999, 3000)]
    pages = [btree_mod.SortedKeys.of(pa.array(r)) for r in dense_runs]
    pages.append(btree_mod.SortedKeys.of(pa.array(  # nulls first, then 8000..8999
        np.r_[np.zeros(50), np.arange(8000, 9000)].astype(dtype),
        mask=np.r_[np.ones(50, bool), np.zeros(1000, bool)])))
    pages.append(btree_mod.SortedKeys.of(pa.array(  # gaps and duplicates
        np.sort(np.r_[np.arange(10_000, 14_000, 2), np.arange(10_000, 10_100)]).astype(dtype))))
    pages.append(btree_mod.SortedKeys.of(pa.array(np.arange(20_000, 21_000), pa.int16())))
    assert [p.dense for p in pages] == [True] * 5 + [False, True]
    rng = np.random.default_rng(21)
    edges = [low, low + 2999, low + 3000, high, high - 3000, -1 if low < 0 else 7000]
    asked = np.r_[np.array(edges, dtype), rng.integers(0, 22_000, 3000).astype(dtype)]
    query = btree_mod.KeySet(pa.array(asked))
    wanted = btree_mod._sorted_numbers(query)
    assert wanted is not None
    bases = [5000 * i for i in range(len(pages))]
    arithmetic: list[int] = []
    inner = btree_mod._dense_positions

    def counted(dense, wanted):
        arithmetic.append(len(dense))
        return inner(dense, wanted)

    monkeypatch.setattr(btree_mod, "_dense_positions", counted)
    got = btree_mod._select_many(list(zip(pages, bases, strict=True)), wanted)
    # the int16 page is not of the keys' type: searched, not computed
    assert arithmetic == [5]
    expected = np.concatenate([b + p.positions(query) for p, b in zip(pages, bases,
                                                                      strict=True)])
    assert got.tolist() == np.sort(expected).tolist()
    searched = btree_mod._select_many(
        [(dataclasses.replace(p, dense=False), b) for p, b in zip(pages, bases, strict=True)],
        wanted)
    assert arithmetic == [5]
    assert got.tolist() == searched.tolist()
    assert got.size > 1000
    # bounds wider than the pages (as a lookup's may be): every key tried on every page,
    # keys far from a page's first (a wrapping difference) found absent
    loose = (np.full(len(pages), info.min, dtype), np.full(len(pages), info.max, dtype))
    assert btree_mod._select_many(list(zip(pages, bases, strict=True)), wanted,
                                  loose).tolist() == got.tolist()
    assert arithmetic == [5, 5]


def test_dense_keys_in_through_the_index_both_ways(tmp_path: Path, monkeypatch) -> None:
    """An IN of many keys on an auto-increment key (every index page a run of consecutive
    integers, some rows deleted): the index answers by arithmetic, with the rows of a
    scan, of the index searched page by page, and of pylance on the same table."""
    n = 30_000
    ds = lance_sql.write_dataset(pa.table({"id": np.arange(n, dtype=np.int64),
                                           "s": [f"v{i}" for i in range(n)]}),
                                 str(tmp_path / "t"), max_rows_per_file=12_000)
    ds.create_scalar_index("id", "BTREE")
    ds.delete("id % 7 = 3")
    asked = np.r_[np.random.default_rng(3).integers(-50, n + 50, 1500), 0, n - 1]
    flt = f"id IN ({', '.join(map(str, asked.tolist()))})"
    arithmetic: list[int] = []
    inner = btree_mod._dense_positions
    monkeypatch.setattr(btree_mod, "_dense_positions",
                        lambda d, w: (arithmetic.append(len(d)), inner(d, w))[1])
    got = ds.to_table(filter=flt).sort_by("id")
    assert arithmetic and sum(arithmetic) >= 7
    assert _same(got, ds.to_table(filter=flt, use_scalar_index=False)), flt
    theirs = lance.dataset(str(tmp_path / "t")).to_table(filter=flt).sort_by("id")
    assert got.equals(theirs)
    keep = np.unique(asked[(asked >= 0) & (asked < n) & (asked % 7 != 3)])
    assert got.column("id").to_pylist() == keep.tolist()
    monkeypatch.setattr(btree_mod.SortedKeys, "of", _not_dense(btree_mod.SortedKeys.of))
    from lance_sql.table.runtime.context import current_runtime
    current_runtime().cache.clear()
    calls = len(arithmetic)
    assert ds.to_table(filter=flt).sort_by("id").equals(got)
    assert len(arithmetic) == calls  # searched page by page this time


def _not_dense(of):
    def undense(values):
        return dataclasses.replace(of(values), dense=False)
    return undense


def test_dense_pages_noted_then_found_without_loading(tmp_path: Path, monkeypatch) -> None:
    """Index pages seen to hold consecutive integers are noted (``DensePages``): a later
    IN of many keys finds its entries there by arithmetic without taking those pages
    from the cache, the other pages (gaps, duplicates) searched as before; every query's
    rows equal a scan's and pylance's, and a fresh cache (nothing noted) gives the same."""
    from lance_sql.table.runtime.context import current_runtime

    n = 40_000
    ids = np.arange(n, dtype=np.int64)
    ids[20_000:30_000] = 20_000 + 3 * np.arange(10_000)  # pages with gaps
    ids[30_000:] = 60_000 + np.arange(10_000) // 2  # pages with duplicates
    null = np.arange(n) < 100  # the first page starts with nulls, then keys 100..
    ds = lance_sql.write_dataset(pa.table({"id": pa.array(ids, mask=null), "v": np.arange(n)}),
                                 str(tmp_path / "t"))
    ds.create_scalar_index("id", "BTREE")
    ds.delete("id % 11 = 4")
    rng = np.random.default_rng(30)
    by_arithmetic: list[int] = []
    inner = btree_mod.DensePages.positions

    def spied(self, pages, wanted, batch_size):
        by_arithmetic.append(int(pages.size))
        return inner(self, pages, wanted, batch_size)

    monkeypatch.setattr(btree_mod.DensePages, "positions", spied)
    loaded: list[int] = []  # the pages each search takes from the cache
    search_pages = btree_mod.BTreeIndex._search_pages
    monkeypatch.setattr(btree_mod.BTreeIndex, "_search_pages",
                        lambda self, pages, *a: (loaded.append(len(pages)),
                                                 search_pages(self, pages, *a))[1])
    current_runtime().cache.clear()
    theirs = lance.dataset(str(tmp_path / "t"))
    for round_ in range(3):
        asked = np.r_[rng.integers(-10, 66_000, 1200), 0, 99, 100, 19_999, 65_000]
        flt = f"id IN ({', '.join(map(str, asked.tolist()))})"
        got = ds.to_table(filter=flt).sort_by([("id", "ascending"), ("v", "ascending")])
        assert _same(got, ds.to_table(filter=flt, use_scalar_index=False)), flt
        assert got.equals(theirs.to_table(filter=flt).sort_by([("id", "ascending"),
                                                                 ("v", "ascending")]))
        alive = np.isin(ids, asked) & (ids % 11 != 4) & ~null
        assert got.num_rows == int(alive.sum()) > 500
        if round_ == 0:
            assert by_arithmetic == []  # nothing noted yet: every page loaded
    # pages 0..3 (ids 0..16_383, 4096 a page) are dense; the others never are
    assert by_arithmetic == [4, 4]
    assert loaded == [10, 6, 6]  # the noted pages were not taken from the cache


@pytest.mark.slow
def test_dense_pages_noted_by_concurrent_searches(tmp_path: Path) -> None:
    """Threads searching one index at once, from a cold cache, note its dense pages
    together (one keys' type set once, a page's numbers before its flag): every search,
    then and after, finds the rows a scan does."""
    from concurrent.futures import ThreadPoolExecutor

    from lance_sql.table.runtime.context import current_runtime

    n = 60_000
    ds = lance_sql.write_dataset(pa.table({"id": np.arange(n, dtype=np.int64),
                                           "v": np.arange(n)}), str(tmp_path / "t"))
    ds.create_scalar_index("id", "BTREE")
    rng = np.random.default_rng(40)
    filters = [f"id IN ({', '.join(map(str, rng.integers(-5, n + 5, 600).tolist()))})"
               for _ in range(16)]
    expected = [ds.to_table(filter=f, use_scalar_index=False).sort_by("id") for f in filters]
    for _ in range(3):
        current_runtime().cache.clear()
        with ThreadPoolExecutor(4) as pool:
            got = list(pool.map(lambda f: ds.to_table(filter=f).sort_by("id"), filters * 2))
        assert all(g.equals(e) for g, e in zip(got, expected * 2, strict=True))


def test_an_index_of_a_struct_field_is_listed_by_its_path(tmp_path: Path) -> None:
    uri = str(tmp_path / "nested")
    lance.write_dataset(pa.table({"x": [1, 2], "st": [{"x": 5}, {"x": 6}]}), uri)
    lance.dataset(uri).create_scalar_index("st.x", "BTREE")
    listed = [i["fields"] for i in lance_sql.dataset(uri).list_indices()]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # pylance's own list_indices
        theirs = [i["fields"] for i in lance.dataset(uri).list_indices()]
    assert listed == theirs == [["st.x"]]
