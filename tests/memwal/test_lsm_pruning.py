"""Region pruning: which region values a filter allows, per transform, and that a pruned
region's files are never opened."""

from __future__ import annotations

import datetime
import itertools

import numpy as np
import pyarrow as pa

import lance_sql
from lance_sql.expr.arrow import parse_predicate
from lance_sql.format.region_spec import RegionSpec
from lance_sql.format.schema import LanceSchema
from lance_sql.io.memory import MemoryStore
from lance_sql.memwal.api import MemWal
from lance_sql.memwal.read.pruning import prune_regions
from lance_sql.memwal.transforms import region_values

TS = pa.timestamp("us")
SCHEMA = pa.schema([pa.field("id", pa.int64()), pa.field("x", pa.int64()),
                    pa.field("c", pa.string()), pa.field("ts", TS),
                    pa.field("d", pa.date32()), pa.field("d64", pa.date64())])
_names = itertools.count()


def kept(spec: RegionSpec, regions: dict[str, list], where: str) -> list[int]:
    """Positions of the regions (values per field id) ``where`` keeps."""
    bound = spec.bind(LanceSchema.from_arrow(SCHEMA)).with_id(1)
    names = bound.source_names(LanceSchema.from_arrow(SCHEMA))
    types = {n: SCHEMA.field(n).type for n in names if n is not None}
    values = pa.table({f.field_id: pa.array(regions[f.field_id], _result(bound, f.field_id))
                       for f in bound.fields})
    mask = prune_regions(parse_predicate(where), bound, names, types, values)
    return np.flatnonzero(mask).tolist()


def _result(spec: RegionSpec, field_id: str) -> pa.DataType:
    from_schema = {"int32": pa.int32(), "int64": pa.int64(), "string": pa.string()}
    f = next(f for f in spec.fields if f.field_id == field_id)
    return from_schema.get(f.result_type, pa.int32())


def bucket_of(value: int, n: int = 8) -> int:
    spec = RegionSpec.bucket("x", n)
    return region_values(spec, [pa.array([value], pa.int64())], 1).column(0)[0].as_py()


def test_bucket_prunes_on_equality_and_in_lists_only() -> None:
    spec = RegionSpec.bucket("x", 8)
    regions = {"bucket_x": list(range(8))}
    assert kept(spec, regions, "x = 123") == [bucket_of(123)]
    assert kept(spec, regions, "x IN (1, 2, NULL)") == sorted({bucket_of(1), bucket_of(2)})
    assert kept(spec, regions, "x = 123 AND c = 'z'") == [bucket_of(123)]
    assert kept(spec, regions, "x = 5 OR x = 6") == sorted({bucket_of(5), bucket_of(6)})
    assert kept(spec, regions, "x > 5") == list(range(8))  # not order preserving
    assert kept(spec, regions, "NOT (x = 5)") == list(range(8))
    assert kept(spec, regions, "x = 1.5") == list(range(8))  # no exact int: no pruning
    assert kept(spec, regions, "x = NULL") == []
    assert kept(spec, regions, "x = 5 AND x = 6") == []
    assert kept(spec, regions, "c = 'a'") == list(range(8))


def test_ranges_prune_order_preserving_transforms() -> None:
    identity = RegionSpec.identity("x")
    regions = {"identity_x": list(range(10))}
    assert kept(identity, regions, "x BETWEEN 3 AND 5") == [3, 4, 5]
    assert kept(identity, regions, "x > 7") == [8, 9]
    assert kept(identity, regions, "x < 2 OR x = 9") == [0, 1, 9]
    assert kept(identity, regions, "x >= 2 AND x < 4 AND c = 'q'") == [2, 3]
    trunc = RegionSpec.truncate("x", 10)
    assert kept(trunc, {"truncate_x": [0, 10, 20, 30, 40, 50]}, "x >= 25 AND x < 41") == [
        2, 3, 4]
    text = RegionSpec.truncate("c", 2)
    assert kept(text, {"truncate_c": ["ab", "ba", "bz", "ca"]}, "c >= 'bab' AND c <= 'bzz'"
                ) == [1, 2]


def test_time_transforms_prune_ranges() -> None:
    year = RegionSpec.year("ts")
    assert kept(year, {"year_ts": [2022, 2023, 2024, 2025]},
                "ts >= TIMESTAMP '2024-06-01 00:00:00'") == [2, 3]
    month = RegionSpec.month("ts")
    regions = {"month_ts": list(range(1, 13))}
    assert kept(month, regions, "ts BETWEEN '2024-01-20' AND '2024-02-10'") == [0, 1]
    assert kept(month, regions, "ts >= '2024-01-20'") == list(range(12))  # open range
    hour = RegionSpec.hour("ts")
    assert kept(hour, {"hour_ts": list(range(24))},
                "ts > '2024-03-01 22:10:00' AND ts < '2024-03-02 01:00:00'") == [0, 1, 22, 23]
    day = RegionSpec.day("ts")
    assert kept(day, {"day_ts": [1, 2, 3, 31]}, "ts = '2024-03-31 12:00:00'") == [3]


def test_time_transforms_prune_ranges_on_date_columns() -> None:
    # a date32 range is walked day by day in its int32 storage (Arrow casts it to no other
    # integer type), a date64 one in milliseconds
    month = RegionSpec.month("d")
    regions = {"month_d": list(range(1, 13))}
    assert kept(month, regions, "d BETWEEN DATE '2024-01-20' AND DATE '2024-03-10'") == [0, 1, 2]
    assert kept(month, regions, "d >= DATE '2024-05-01' AND d < DATE '2024-05-31'") == [4]
    assert kept(month, regions, "d >= DATE '2024-05-01' AND d < DATE '2024-04-01'") == []
    day = RegionSpec.day("d")
    assert kept(day, {"day_d": [1, 2, 3, 31]},
                "d > DATE '2024-03-30' AND d <= DATE '2024-04-02'") == [0, 1, 3]
    month64 = RegionSpec.month("d64")
    assert kept(month64, {"month_d64": list(range(1, 13))},
                "d64 BETWEEN DATE '2024-11-20' AND DATE '2025-01-10'") == [0, 10, 11]


def test_a_date_range_on_a_month_spec_reads_the_newest_rows() -> None:
    name = f"lsm-prune{next(_names)}"
    MemoryStore.reset(name)
    schema = pa.schema([pa.field("d", pa.date32(), nullable=False, metadata=PK),
                        pa.field("v", pa.int64())])
    days = [datetime.date(2024, 1, 5), datetime.date(2024, 3, 5), datetime.date(2024, 6, 1)]
    ds = lance_sql.write_dataset(pa.table({"d": days, "v": [1, 1, 1]}, schema=schema),
                                 f"memory://{name}")
    mw = MemWal.initialize(ds, RegionSpec.month("d"), max_wal_flush_interval_ms=3_600_000)
    writer = mw.writer()
    try:
        writer.put(pa.table({"d": days[1:], "v": [2, 2]}, schema=schema))
        writer.flush_memtable()
        writer.put(pa.table({"d": days[2:], "v": [3]}, schema=schema))
        got = mw.scanner(filter="d >= DATE '2024-02-01' AND d < DATE '2024-07-01'").to_table()
        assert sorted(got.to_pylist(), key=lambda r: r["d"]) == [
            {"d": days[1], "v": 2}, {"d": days[2], "v": 3}]
        plan = mw.scanner(filter="d BETWEEN DATE '2024-02-01' AND DATE '2024-03-31'").explain()
        assert "kept 1 of 2 regions" in plan and "month_d=3" in plan
    finally:
        writer.close()


def test_multi_column_and_custom_expressions_need_every_column_fixed() -> None:
    multi = RegionSpec.multi_bucket(["x", "c"], 4)
    regions = {"multi_bucket_x_c": [0, 1, 2, 3]}
    values = region_values(multi, [pa.array([7], pa.int64()), pa.array(["k"])], 1)
    want = values.column(0)[0].as_py()
    assert kept(multi, regions, "x = 7 AND c = 'k'") == [want]
    assert kept(multi, regions, "x = 7") == [0, 1, 2, 3]
    expr = RegionSpec.expression("col0 % 3", ["x"], "int64")
    assert kept(expr, {"expr": [0, 1, 2]}, "x = 7") == [1]
    assert kept(expr, {"expr": [0, 1, 2]}, "x IN (3, 4)") == [0, 1]
    both = RegionSpec.bucket("x", 8) + RegionSpec.identity("c")
    regions = {"bucket_x": [bucket_of(5), bucket_of(5), bucket_of(6)],
               "identity_c": ["a", "b", "a"]}
    assert kept(both, regions, "x = 5 AND c = 'b'") == [1]
    assert kept(both, regions, "c = 'a'") == [0, 2]


# ---------------------------------------------------------------------- files never opened

PK = {"lance-schema:unenforced-primary-key": "true"}
TABLE = pa.schema([pa.field("id", pa.int64(), nullable=False, metadata=PK),
                   pa.field("v", pa.int64())])


def test_a_pruned_region_is_never_opened() -> None:
    name = f"lsm-prune{next(_names)}"
    MemoryStore.reset(name)
    ds = lance_sql.write_dataset(pa.table({"id": [1000], "v": [0]}, schema=TABLE),
                                 f"memory://{name}")
    mw = MemWal.initialize(ds, RegionSpec.bucket("id", 8), max_wal_flush_interval_ms=3_600_000)
    ids = list(range(200))
    with mw.writer() as writer:
        writer.put(pa.table({"id": ids, "v": ids}, schema=TABLE))
        writer.flush_memtable()
        writer.put(pa.table({"id": ids[:100], "v": [-i for i in ids[:100]]}, schema=TABLE))
        region = next(w.region_id for w in writer.writers
                      if w.region[w.region_spec.fields[0].field_id] == bucket_of(17))
        others = [w.region_id for w in writer.writers if w.region_id != region]
        assert len(others) == 7
        store = MemoryStore(name)
        touched: list[tuple[str, str]] = []
        store.add_hook(lambda op, key: touched.append((op, key)))
        try:
            plan = mw.scanner(filter="id = 17")
            assert plan.to_table().to_pylist() == [{"id": 17, "v": -17}]
            assert "kept 1 of 8 regions" in plan.explain()
            outside = [k for _, k in touched for r in others if f"/{r}/" in k]
            # only the regions' manifests were read, to learn their values
            assert outside and all("/manifest/" in k for k in outside)
            touched.clear()
            assert mw.get({"id": [150, 17]}).to_pylist() == [{"id": 150, "v": 150},
                                                             {"id": 17, "v": -17}]
            assert mw.scanner(filter="id IN (17)").to_table().num_rows == 1
            touched.clear()
            assert mw.get({"id": [17]}).to_pylist() == [{"id": 17, "v": -17}]
            assert mw.scanner(filter="id = 17").count_rows() == 1
            outside = [k for _, k in touched for r in others if f"/{r}/" in k]
            assert outside == []  # region values are known now: nothing of theirs is read
        finally:
            store.clear_hooks()
