"""Floats ordered as SQL (DataFusion) compares them, one integer key each: in the keys
themselves, in filters through Python and SQL, and in BTREE index lookups, whoever built
the index; a NaN with the sign bit set (x86's ``inf - inf``) included."""

from __future__ import annotations

import struct
from pathlib import Path

import datafusion
import numpy as np
import pyarrow as pa
import pytest

import lance_sql
from lance_sql.float_order import float_key, float_keys

lance = pytest.importorskip("lance")


def _from_bits(bits: int) -> float:
    return struct.unpack("<d", struct.pack("<Q", bits))[0]


NEG_NAN = _from_bits(0xFFF8000000000000)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_keys_order_as_sql_compares(dtype) -> None:
    ladder = [[NEG_NAN, _from_bits(0xFFFFFFFFFFFFFFFF)], [-np.inf], [-1.5], [-0.0, 0.0],
              [1e-30], [2.0], [np.inf], [np.nan, _from_bits(0x7FF0000000000001)]]
    width = np.dtype(dtype).itemsize
    with np.errstate(invalid="ignore"):
        keys = [float_keys(np.array(step, dtype)) for step in ladder]
    assert all(len(set(k.tolist())) == 1 for k in keys)  # equal within a step
    firsts = [int(k[0]) for k in keys]
    assert firsts == sorted(firsts) and len(set(firsts)) == len(firsts)
    assert [float_key(float(step[0]), width) for step in ladder] == firsts


@pytest.fixture(scope="module")
def values() -> pa.Table:
    f = [NEG_NAN, -np.inf, -1.0, -0.0, 0.0, 1.0, 2.5, np.inf, np.nan]
    return pa.table({"id": list(range(len(f))), "f": pa.array(f, pa.float64())})


FILTERS = ["f < 0", "f > 0", "f = 0", "f <= -1", "f >= 1", "f BETWEEN -3 AND 3", "f != 1",
           "f IN (1.0, -1.0)", "f < 'NaN'", "f = 'NaN'", "f > '-inf'"]


def _datafusion(table: pa.Table, where: str) -> list[int]:
    ctx = datafusion.SessionContext()
    ctx.register_record_batches("t", [table.to_batches()])
    return ctx.sql(f"SELECT id FROM t WHERE {where} ORDER BY id").to_arrow_table()[
        "id"].to_pylist()


@pytest.mark.parametrize("where", FILTERS)
def test_filters_answer_as_datafusion(tmp_path: Path, values: pa.Table, where: str) -> None:
    uri = str(tmp_path / "t")
    lance_sql.write_dataset(values, uri)
    expected = _datafusion(values, where)
    ours = sorted(lance_sql.dataset(uri).to_table(filter=where).column("id").to_pylist())
    assert ours == expected
    session = lance_sql.LanceSession()
    session.register("t", uri)
    sql = session.sql(f"SELECT id FROM t WHERE {where} ORDER BY id").to_pylist()
    assert [r["id"] for r in sql] == expected


@pytest.mark.parametrize("builder", ["lance_sql", "pylance"])
@pytest.mark.parametrize("rows", [9, 20_000])  # one index page, several
def test_index_lookups_answer_as_scans(tmp_path: Path, values: pa.Table, builder: str,
                                       rows: int) -> None:
    repeat = -(-rows // values.num_rows)
    table = pa.table({"id": list(range(values.num_rows * repeat)),
                      "f": pa.concat_arrays([values.column("f").combine_chunks()] * repeat)})
    uri = str(tmp_path / "t")
    lance_sql.write_dataset(table, uri)
    (lance if builder == "pylance" else lance_sql).dataset(uri).create_scalar_index("f", "BTREE")
    ds = lance_sql.dataset(uri)
    for where in ("f = 0", "f IN (1.0, -1.0)", "f BETWEEN -3 AND 3", "f >= 1", "f < -1e300"):
        indexed = ds.to_table(filter=where, use_scalar_index=True).column("id").to_pylist()
        scanned = ds.to_table(filter=where, use_scalar_index=False).column("id").to_pylist()
        assert sorted(indexed) == sorted(scanned) == sorted(
            lance.dataset(uri).to_table(filter=where).column("id").to_pylist()), where
    zeros = 2 * repeat
    assert ds.count_rows("f = 0") == zeros
    assert ds.delete("f = 0")["num_deleted_rows"] == zeros
