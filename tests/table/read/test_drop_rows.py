"""Rows left out of a scan as if deleted (``Scanner(drop_rows=...)``, what LSM reads push
into the base table), and the BTREE search of many keys at once (``key_rows``): both
checked against the general path (a filter on the rows' ids, an ``IN`` filter)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

import lance_sql
from lance_sql.table.index.planner import key_rows
from lance_sql.table.read.scan import Scanner


def _table(tmp_path, n: int = 3000, rows_per_file: int = 700):
    ids = np.arange(n, dtype=np.int64)
    data = pa.table({"id": ids,
                     "v": pa.array([None if i % 11 == 0 else float(i) for i in range(n)]),
                     "s": pa.array([f"s{i % 13}-{i}" for i in range(n)]),
                     "k": pa.array([f"key{i:05d}" for i in range(n)])})
    ds = lance_sql.write_dataset(data, str(tmp_path / "t"), max_rows_per_file=rows_per_file)
    ds.delete("id % 17 = 0")  # deletion vectors too
    return lance_sql.dataset(str(tmp_path / "t"))


def _dropped(ds, seed: int) -> tuple[dict[int, np.ndarray], set[int]]:
    """Random physical offsets per fragment (some deleted already, some repeated) and
    the ids of those rows."""
    rng = np.random.default_rng(seed)
    drop, ids = {}, set()
    start = 0
    for frag in ds.manifest.fragments:
        rows = rng.choice(frag.physical_rows, frag.physical_rows // 9, replace=True)
        drop[frag.id] = rows
        ids |= {start + int(r) for r in rows}  # ids were written in address order
        start += frag.physical_rows
    return drop, ids


@pytest.mark.parametrize("filter", [None, "v > 1000", "s LIKE 's3-%'", "v IS NULL",
                                    "id < 100"])
@pytest.mark.parametrize("columns", [["id", "v", "s"], ["s"], ["id", "_rowaddr"]])
def test_dropped_rows_are_left_out_like_deleted_ones(tmp_path, filter, columns) -> None:
    ds = _table(tmp_path)
    drop, ids = _dropped(ds, 5)
    general = ds.to_table(columns=list(dict.fromkeys([*columns, "id"])), filter=filter)
    keep = ~np.isin(general.column("id").to_numpy(), sorted(ids))
    want = general.filter(pa.array(keep)).select(columns)
    scanner = Scanner(ds.store, ds.manifest, columns=columns, filter=filter, drop_rows=drop)
    got = scanner.to_table()
    assert got.equals(want)
    assert scanner.count_rows() == want.num_rows
    by_fragment = pa.concat_tables(list(Scanner(ds.store, ds.manifest, columns=columns,
                                                filter=filter, drop_rows=drop).to_tables()))
    assert by_fragment.equals(want)


def test_key_rows_finds_what_an_in_filter_finds(tmp_path) -> None:
    ds = _table(tmp_path)
    ds.create_scalar_index("id", "BTREE")
    ds.create_scalar_index("k", "BTREE")
    # rows appended after the index: a fragment it does not cover
    ds = lance_sql.write_dataset(pa.table({"id": pa.array([5000, 5001], pa.int64()),
                                           "v": [1.0, 2.0], "s": ["x", "y"],
                                           "k": ["key05000", "key00003"]}),
                                 ds.uri, mode="append")
    uncovered = ds.manifest.fragments[-1].id
    for column, values in [("id", pa.array([3, 4, 17, 699, 700, 2999, 5000, 9999, 4],
                                           pa.int32())),
                           ("k", pa.array(["key00003", "key01400", "nope", "key00000"]))]:
        found = key_rows(ds.store, ds.manifest, column, values)
        assert found is not None
        assert uncovered not in found.rows
        assert set(found.rows) == {f.id for f in ds.manifest.fragments} - {uncovered}
        literals = ", ".join(repr(v) if isinstance(v, str) else str(v)
                             for v in values.to_pylist())
        want = ds.to_table(columns=["_rowaddr"], filter=f"{column} IN ({literals})",
                           with_row_address=True)
        addresses = np.asarray(want.column("_rowaddr").to_numpy(), np.uint64)
        live = {int(a) for a in addresses if int(a) >> 32 != uncovered}
        got = {(f << 32) | int(r) for f, rows in found.rows.items() for r in rows}
        # deleted rows may be found too (key 17 and 0 are deleted): exactly those extra
        deleted = got - live
        assert live <= got
        assert all(int(ds.take_addresses([a], ["id"]).num_rows) == 0 for a in deleted)
    assert key_rows(ds.store, ds.manifest, "s", pa.array(["x"])) is None  # no index


@pytest.mark.parametrize("columns", [None, ["tags", "_rowid", "_row_created_at_version"],
                                     ["_rowaddr", "_row_last_updated_at_version", "s"],
                                     []])
def test_live_rows_are_read_column_by_column_like_the_whole_fragment(tmp_path,
                                                                     columns) -> None:
    """A scan with deleted and dropped rows filters each column as it is decoded and
    makes system columns for kept rows only: equal to reading every row (a scan from
    before the deletions) and keeping the live, undropped ones (nulls, strings, lists,
    row ids and versions of a table with stable row ids, several fragments)."""
    n = 2500
    ids = np.arange(n, dtype=np.int64)
    data = pa.table({"id": ids,
                     "v": pa.array([None if i % 7 == 0 else float(i) for i in range(n)]),
                     "s": pa.array([None if i % 5 == 0 else f"s{i}" * (i % 4)
                                    for i in range(n)]),
                     "tags": pa.array([[i, i + 1][: i % 3] for i in range(n)],
                                      pa.list_(pa.int32()))})
    uri = str(tmp_path / "t")
    lance_sql.write_dataset(data, uri, max_rows_per_file=600, enable_stable_row_ids=True)
    lance_sql.dataset(uri).update({"v": "v + 1"}, where="id % 10 = 3")  # newer versions
    names = list(columns) if columns is not None else ["id", "v", "s", "tags"]
    system = ["_rowid", "_rowaddr", "_row_created_at_version",
              "_row_last_updated_at_version"]
    every = lance_sql.dataset(uri).to_table(columns=["id", "v", "s", "tags", *system])
    lance_sql.dataset(uri).delete("id % 13 = 0")
    ds = lance_sql.dataset(uri)
    assert len(ds.manifest.fragments) >= 4
    rng = np.random.default_rng(11)
    drop = {f.id: rng.choice(f.physical_rows, f.physical_rows // 8)
            for f in ds.manifest.fragments}
    addresses = every.column("_rowaddr").to_numpy()
    dropped = np.zeros(len(addresses), bool)
    for frag_id, rows in drop.items():
        dropped |= np.isin(addresses, (np.uint64(frag_id) << np.uint64(32))
                           | rows.astype(np.uint64))
    deleted = every.column("id").to_numpy() % 13 == 0
    want = every.filter(pa.array(~dropped & ~deleted)).select(names)
    scanner = Scanner(ds.store, ds.manifest, columns=names, drop_rows=drop)
    got = scanner.to_table()
    assert got.num_rows == want.num_rows == scanner.count_rows()
    if names:
        assert got.equals(want.cast(got.schema))
