"""Region values are told apart as region ids tell them apart (their canonical bytes: a
NaN is any NaN, -0.0 is 0.0, nanoseconds hash as their microsecond): rows whose values
share an id share a region, and a filter prunes a region only when none of the values
it may hold can match. Arrow's own equality (NaN unequal to itself, ``is_in`` telling
-0.0 from 0.0 by bits) refused such puts, and pruned regions holding matching rows."""

from __future__ import annotations

import math
from pathlib import Path

import datafusion
import numpy as np
import pyarrow as pa
import pytest

import lance_sql
from lance_sql.errors import SchemaError
from lance_sql.format.region_spec import RegionSpec

PK = {"lance-schema:unenforced-primary-key": "true"}
FLOATS = [-0.0, 0.0, math.nan, math.inf, -math.inf, 1.5, -7.25]


def _table(tmp_path: Path, t: pa.DataType, spec: RegionSpec, values: list) -> object:
    schema = pa.schema([pa.field("id", pa.int64(), nullable=False, metadata=PK),
                        pa.field("c", t)])
    ds = lance_sql.write_dataset(pa.table({"id": [0], "c": pa.array([None], t)},
                                          schema=schema), str(tmp_path / "t.lance"))
    mw = ds.initialize_mem_wal(spec)
    column = (pa.array(np.array(values, dtype=t.to_pandas_dtype()), t)
              if pa.types.is_floating(t) else pa.array(values, t))
    with mw.writer() as writer:  # one put, and one a row at a time by another writer
        writer.put(pa.table({"id": pa.array(range(1, len(values) + 1), pa.int64()),
                             "c": column}, schema=schema))
    with mw.writer() as writer:
        for i in range(len(values)):
            writer.put(pa.table({"id": pa.array([101 + i], pa.int64()),
                                 "c": column.slice(i, 1)}, schema=schema))
    return mw


def _ids(rows: pa.Table) -> list[int]:
    return sorted(i % 100 if i >= 100 else i for i in rows.column("id").to_pylist())


FILTERS = ["c = 0.0", "c = -0.0", "c IN (0.0, 1.5)", "c > 1", "c >= 0", "c < 0",
           "c <= -0.0", "c > 0", "c BETWEEN -8 AND 2", "c != 1.5", "c IS NULL"]


@pytest.mark.parametrize("t", [pa.float64(), pa.float32(), pa.float16()])
@pytest.mark.parametrize("spec", [RegionSpec.identity("c"), RegionSpec.truncate("c", 2)],
                         ids=["identity", "truncate"])
def test_float_regions_hold_every_value_of_their_id(tmp_path: Path, t: pa.DataType,
                                                    spec: RegionSpec) -> None:
    """NaN and the infinities (which truncate keeps as they are) are put, -0.0 and 0.0
    share a region, and every filter reads through the pruner what a read of every
    region and the same filter in DataFusion read."""
    mw = _table(tmp_path, t, spec, FLOATS)
    everything = mw.scanner(["id", "c"]).to_table()
    assert _ids(everything) == [0, *[i for i in range(1, 8) for _ in (0, 1)]]
    session = lance_sql.connect(str(tmp_path))
    engine = datafusion.SessionContext()  # the filters over every region's rows
    engine.register_record_batches("m", [everything.cast(pa.schema([
        ("id", pa.int64()), ("c", pa.float32() if t == pa.float16() else t)])).to_batches()])
    for where in FILTERS:
        pruned = _ids(mw.scanner(["id"], filter=where).to_table())
        # the same filter where the pruner can use nothing: every region read
        unpruned = _ids(mw.scanner(["id"], filter=f"({where}) OR id < 0").to_table())
        assert pruned == unpruned, where
        sql = _ids(session.sql(f"SELECT id FROM t WHERE {where}").to_arrow_table())
        assert sql == _ids(engine.sql(f"SELECT id FROM m WHERE {where}").to_arrow_table()), where


def test_nanoseconds_of_one_microsecond_share_a_region(tmp_path: Path) -> None:
    """Region ids hash timestamps as microseconds: values 100 ns apart are one region,
    whose region value is the first of them; the second was refused as not of it."""
    t = pa.timestamp("ns")
    first, second, later = 1_700_000_000_000_000_100, 1_700_000_000_000_000_200, \
        1_700_000_000_000_001_000
    mw = _table(tmp_path, t, RegionSpec.identity("c"), [first, second, later])
    rows = mw.scanner(["id", "_region"]).to_table().sort_by("id").to_pylist()
    regions = {r["id"]: r["_region"] for r in rows}
    assert regions[1] == regions[2] == regions[101] == regions[102] != regions[3]
    for where, ids in [(f"c = arrow_cast({second}, 'Timestamp(Nanosecond, None)')", [2]),
                       (f"c > arrow_cast({first}, 'Timestamp(Nanosecond, None)')", [2, 3]),
                       (f"c < arrow_cast({second}, 'Timestamp(Nanosecond, None)')", [1])]:
        got = lance_sql.connect(str(tmp_path)).sql(f"SELECT id FROM t WHERE {where}")
        assert _ids(got.to_arrow_table()) == sorted(ids * 2), where


def test_time_of_day_nanoseconds_route(tmp_path: Path) -> None:
    """A time64[ns] region value keeps its nanoseconds (a Python time dropped them, and
    the row was refused as not of its own region)."""
    mw = _table(tmp_path, pa.time64("ns"), RegionSpec.identity("c"), [1_500, 2_000_000_001])
    got = mw.scanner(["id", "c"]).to_table().sort_by("id").column("c").cast(pa.int64())
    assert got.to_pylist() == [None, 1_500, 2_000_000_001, 1_500, 2_000_000_001]


@pytest.mark.parametrize(("t", "spec", "said"), [
    (pa.int32(), RegionSpec.year("c"), "year needs a date or timestamp"),
    (pa.date32(), RegionSpec.hour("c"), "hour needs a timestamp"),
    (pa.bool_(), RegionSpec.truncate("c", 3), "truncate needs"),
    (pa.timestamp("us"), RegionSpec.truncate("c", 3), "truncate needs"),
    (pa.duration("ms"), RegionSpec.bucket("c", 4), "cannot route values of type duration"),
    (pa.duration("ms"), RegionSpec.identity("c"), "cannot route values of type duration"),
    (pa.int32(), RegionSpec.expression("col0 +* 2", ["c"], "int32"), "cannot route"),
])
def test_a_spec_its_column_cannot_route_is_refused_up_front(tmp_path: Path, t: pa.DataType,
                                                            spec: RegionSpec, said: str) -> None:
    """Such a spec was committed, every put then failed, and the MemWAL could not be set
    up again ("already has a MemWAL index"): the table never took streaming writes."""
    schema = pa.schema([pa.field("id", pa.int64(), nullable=False, metadata=PK),
                        pa.field("c", t)])
    uri = str(tmp_path / "t.lance")
    ds = lance_sql.write_dataset(pa.table({"id": [1], "c": pa.array([None], t)},
                                          schema=schema), uri)
    with pytest.raises(SchemaError, match=said):
        ds.initialize_mem_wal(spec)
    assert lance_sql.dataset(uri).version == ds.version
    lance_sql.dataset(uri).initialize_mem_wal(RegionSpec.bucket("id", 2))  # still free to


def test_a_dictionary_encoded_key_is_refused_up_front(tmp_path: Path) -> None:
    """Keys are sorted and compared by value, which Arrow does not do on dictionaries:
    the second put of a key made every read and the merge fail."""
    t = pa.dictionary(pa.int32(), pa.string())
    schema = pa.schema([pa.field("k", t, nullable=False, metadata=PK),
                        pa.field("v", pa.int64())])
    uri = str(tmp_path / "t.lance")
    ds = lance_sql.write_dataset(pa.table({"k": pa.array(["a"]).dictionary_encode(),
                                           "v": [1]}, schema=schema), uri)
    with pytest.raises(SchemaError, match="dictionary-encoded.*write the column as string"):
        ds.initialize_mem_wal(RegionSpec.bucket("k", 2))
    assert lance_sql.dataset(uri).version == ds.version
