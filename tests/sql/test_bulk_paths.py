"""The scan paths that make aggregates and unindexed filters cheaper give the answers of
the general path, on our 2.0/2.2 and pylance's 2.0/2.1/2.2 files with nulls, NaN, deletions and
several fragments:

* scans feeding only an aggregate or a sort hand DataFusion large batches
  (``shortcuts.bulk_scans``; general path: DataFusion's batch size);
* filtered scans size their reads by the filter's columns (``provider.filter_width``;
  general path: by all the columns read), and those of queries that only stream them
  read as one partition (general path: one partition per unit, on the query thread);
* 64-bit bitpacked blocks under 32 bits wide unpack as 32-bit halves
  (``bitpacking._unpack_narrow``; general path: the mixed-width unpacker).
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

import lance_sql
from lance_sql.format.datafile import bitpacking, compressive
from lance_sql.sql import provider
from lance_sql.sql import session as session_module

INT_TYPES = [pa.int8(), pa.int16(), pa.int32(), pa.int64(),
             pa.uint8(), pa.uint16(), pa.uint32(), pa.uint64()]
DELETE = "id % 9 = 4 OR id BETWEEN 130000 AND 131000"


def _source(n: int, start: int) -> pa.Table:
    rng = np.random.default_rng(start)
    ids = np.arange(start, start + n)
    cols: dict[str, pa.Array] = {"id": pa.array(ids, pa.int64())}
    for t in INT_TYPES:
        cols[f"c_{t}"] = pa.array(ids % 100).cast(t)
    cols["narrow"] = pa.array(ids * 37 % (1 << 20), pa.int64())
    # every 1024-value block of another width, from 0 to 44 bits
    widths = (ids // 1024) % 45
    cols["mixed"] = pa.array(rng.integers(0, 1 << 62, n) >> (62 - widths), pa.int64())
    f64 = rng.random(n)
    f64[::17] = np.nan
    cols["f64"] = pa.array(f64, mask=ids % 7 == 0)
    cols["f32"] = pa.array(f64.astype(np.float32), mask=ids % 5 == 0)
    cols["cat"] = pa.array([f"c{i % 6}" for i in ids], mask=ids % 11 == 0)
    return pa.table(cols)


@pytest.fixture(scope="module", params=[
    ("2.0", "lance_sql"), ("2.2", "lance_sql"),
    ("2.0", "pylance"), ("2.1", "pylance"), ("2.2", "pylance"),
], ids=lambda p: f"{p[1]}-{p[0]}")
def written(request, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    version, writer = request.param
    root = tmp_path_factory.mktemp(f"bulk-{writer}-{version}")
    uri = root / "t.lance"
    first, second = _source(300_000, 0), _source(60_000, 300_000)
    if writer == "pylance":
        lance = pytest.importorskip("lance")
        lance.write_dataset(first, str(uri), max_rows_per_file=150_000,
                            data_storage_version=version)
        lance.write_dataset(second, str(uri), mode="append", data_storage_version=version)
        lance.dataset(str(uri)).delete(DELETE)
    else:
        lance_sql.write_dataset(first, uri, max_rows_per_file=150_000,
                                data_storage_version=version)
        lance_sql.write_dataset(second, uri, mode="append")
        lance_sql.dataset(uri).delete(DELETE)
    return root, f"{writer}-{version}"


QUERIES = [
    "SELECT count(*) AS n, count(f64) AS nf, sum(id) AS s, sum(c_int8) AS s8, "
    "min(c_uint64) AS lo, max(mixed) AS hi, sum(narrow) AS sn, min(f32) AS f, "
    "max(f64) AS g, sum(f64) AS sf FROM t",
    "SELECT cat, count(*) AS n, sum(narrow) AS sn, sum(mixed) AS sm, min(f64) AS lo, "
    "sum(c_uint32) AS su FROM t GROUP BY cat ORDER BY cat",
    "SELECT id, mixed, f32 FROM t ORDER BY mixed DESC, id LIMIT 20",
    "SELECT DISTINCT c_int16 FROM t WHERE f64 > 0.9 ORDER BY c_int16",
    "SELECT * FROM t WHERE id = 123458",
    "SELECT * FROM t WHERE id = 130500",                       # a deleted row
    "SELECT id, cat, mixed FROM t WHERE narrow = 5032",
    "SELECT count(*) AS n, sum(id) AS s FROM t WHERE f64 > 0.5",
    "SELECT sum(mixed) AS s, count(*) AS n FROM t WHERE c_int32 < 10 AND f32 IS NOT NULL",
    "SELECT id, f64 FROM t WHERE mixed >= 4398046511104 ORDER BY id",
]


def _general(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(session_module, "bulk_scans", lambda plan: set())
    monkeypatch.setattr(session_module, "only_streams", lambda plan, pinned: False)
    monkeypatch.setattr(provider, "filter_width", lambda plan: None)
    monkeypatch.setattr(compressive, "_INLINE_ALONE_MIN", 10**9)
    monkeypatch.setattr(compressive, "_INLINE_GROUP_MIN", dict.fromkeys((8, 16, 32, 64), 10**9))


def _rows(table: pa.Table) -> list[tuple]:
    return [tuple(row.values()) for row in table.to_pylist()]


def _same(a: object, b: object) -> bool:
    if isinstance(a, float) and isinstance(b, float):
        return (math.isnan(a) and math.isnan(b)) or math.isclose(a, b, rel_tol=1e-9)
    return a == b


def test_fast_paths_answer_as_the_general_path(written: tuple[Path, str],
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    root, name = written
    narrow: list[int] = []
    unpack = bitpacking._unpack_narrow

    def counted(words, width, out):
        narrow.append(width)
        return unpack(words, width, out)

    monkeypatch.setattr(bitpacking, "_unpack_narrow", counted)
    session = lance_sql.connect(root)
    fast = {q: session.sql(q).to_arrow_table() for q in QUERIES}
    # 64-bit integers are inline-bitpacked in 2.1 and 2.2 files
    assert bool(narrow) == (not name.endswith("-2.0")), (name, narrow)
    _general(monkeypatch)
    session = lance_sql.connect(root)
    for query in QUERIES:
        general = session.sql(query).to_arrow_table()
        assert fast[query].schema == general.schema, query
        got, want = _rows(fast[query]), _rows(general)
        assert len(got) == len(want), query
        for g, w in zip(got, want, strict=True):
            assert all(_same(a, b) for a, b in zip(g, w, strict=True)), (query, g, w)
    # and the rows are there: the deleted point is gone, the kept one found
    assert session.sql(QUERIES[4]).to_arrow_table().num_rows == 1
    assert session.sql(QUERIES[5]).to_arrow_table().num_rows == 0
