"""Region transforms: the spec's six requirements as properties, and each transform's values.

Requirements (MemWAL spec, "Region Expression"): deterministic, stateless, type-promotion
resistant, column-removal resistant, NULL-safe, consistent with the result type.
"""

from __future__ import annotations

import datetime as dt

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lance_sql.errors import InvalidInputError, SchemaError
from lance_sql.format.region_spec import RegionField, RegionSpec
from lance_sql.format.schema import arrow_type_of, logical_type_of
from lance_sql.memwal.transforms import evaluate_field, region_values, sql_on_own_thread

INT_TYPES = [pa.int8(), pa.int16(), pa.int32(), pa.int64(), pa.uint8(), pa.uint16(),
             pa.uint32(), pa.uint64()]


def _field(spec: RegionSpec, source_type: pa.DataType) -> RegionField:
    """The spec's only field, bound as if its source column had ``source_type``."""
    (f,) = spec.fields
    result = f.result_type or logical_type_of(source_type)
    return RegionField(f.field_id, f.source_columns, f.transform, f.expression, result,
                       f.parameters, tuple(range(len(f.source_columns))))


def _eval(spec: RegionSpec, *arrays: pa.Array | None) -> list:
    f = _field(spec, next(a.type for a in arrays if a is not None))
    n = len(next(a for a in arrays if a is not None))
    return evaluate_field(f, list(arrays), n).to_pylist()


SMALL_INTS = st.lists(st.one_of(st.none(), st.integers(0, 127)), min_size=1, max_size=40)
INT_SPECS = [RegionSpec.identity("c"), RegionSpec.bucket("c", 7), RegionSpec.truncate("c", 10),
             RegionSpec.multi_bucket(["c"], 5),
             RegionSpec.expression("col0 % 3", ["c"], "int64")]


# ---------------------------------------------------------------- 1 + 2: deterministic, stateless
@settings(max_examples=40, deadline=None)
@given(SMALL_INTS, st.randoms(use_true_random=False), st.sampled_from(INT_SPECS))
def test_values_depend_on_the_row_alone(values: list, rnd, spec: RegionSpec) -> None:
    arr = pa.array(values, pa.int64())
    whole = _eval(spec, arr)
    assert _eval(spec, arr) == whole  # deterministic
    order = list(range(len(values)))
    rnd.shuffle(order)
    shuffled = _eval(spec, arr.take(pa.array(order)))
    assert shuffled == [whole[i] for i in order]  # no dependence on neighbours
    assert [_eval(spec, arr.slice(i, 1))[0] for i in range(len(values))] == whole


@pytest.mark.parametrize("sql", ["col0 + random()", "now()", "CURRENT_DATE", "uuid()"])
def test_volatile_expressions_are_refused(sql: str) -> None:
    with pytest.raises(InvalidInputError, match="deterministic"):
        RegionSpec.expression(sql if "(" in sql else f"{sql}()", ["c"], "int64")


# ---------------------------------------------------------------- 3: type-promotion resistant
@settings(max_examples=40, deadline=None)
@given(SMALL_INTS, st.sampled_from(INT_SPECS[:4]))
def test_integer_widths_give_the_same_values(values: list, spec: RegionSpec) -> None:
    results = {str(t): _eval(spec, pa.array(values, t)) for t in INT_TYPES}
    assert len({repr(v) for v in results.values()}) == 1, results


@settings(max_examples=30, deadline=None)
@given(st.lists(st.one_of(st.none(), st.datetimes(min_value=dt.datetime(1900, 1, 1),
                                                  max_value=dt.datetime(2200, 1, 1))),
                min_size=1, max_size=30),
       st.sampled_from(["year", "month", "day", "hour", "bucket", "identity"]))
def test_timestamp_units_give_the_same_values(values: list, transform: str) -> None:
    values = [None if v is None else v.replace(microsecond=0) for v in values]
    spec = (RegionSpec.bucket("t", 11) if transform == "bucket"
            else getattr(RegionSpec, transform)("t"))
    results = [_eval(spec, pa.array(values, pa.timestamp(u))) for u in ("s", "ms", "us", "ns")]
    if transform == "identity":  # identity keeps the source type: compare the instants
        results = [[None if v is None else v.replace(tzinfo=None) for v in r]
                   for r in results]
    assert all(r == results[0] for r in results)


def test_dates_and_strings_promote() -> None:
    days = [dt.date(2020, 2, 29), None, dt.date(1969, 12, 31)]
    for spec in (RegionSpec.year("d"), RegionSpec.month("d"), RegionSpec.day("d"),
                 RegionSpec.bucket("d", 9)):
        assert _eval(spec, pa.array(days, pa.date32())) == _eval(spec, pa.array(days,
                                                                                pa.date64()))
    words = ["héllo", None, "", "x" * 50]
    for spec in (RegionSpec.bucket("s", 9), RegionSpec.truncate("s", 2),
                 RegionSpec.identity("s")):
        assert _eval(spec, pa.array(words, pa.string())) == _eval(
            spec, pa.array(words, pa.large_string()))


# ---------------------------------------------------------------- 4: column-removal resistant
def test_a_dropped_source_column_reads_as_null() -> None:
    for spec in INT_SPECS[:2] + [RegionSpec.year("t")]:
        f = RegionField(spec.fields[0].field_id, spec.fields[0].source_columns,
                        spec.fields[0].transform, spec.fields[0].expression,
                        spec.fields[0].result_type or "int64", spec.fields[0].parameters, (7,))
        assert evaluate_field(f, [None], 3).to_pylist() == [None, None, None]
    multi = RegionSpec.multi_bucket(["a", "b"], 13)
    a = pa.array([1, 2, None], pa.int64())
    assert _eval(multi, a, None) == _eval(RegionSpec.bucket("a", 13), a)


# ---------------------------------------------------------------- 5: NULL-safe
@pytest.mark.parametrize("spec", INT_SPECS[:4] + [RegionSpec.year("c")], ids=repr)
def test_null_in_null_out(spec: RegionSpec) -> None:
    source = pa.array([None, None], pa.timestamp("us") if spec.fields[0].transform == "year"
                      else pa.int64())
    assert _eval(spec, source) == [None, None]


def test_multi_bucket_is_null_only_when_every_column_is() -> None:
    spec = RegionSpec.multi_bucket(["a", "b"], 8)
    a = pa.array([None, 1, None], pa.int64())
    b = pa.array(["x", None, None])
    values = _eval(spec, a, b)
    assert values[2] is None and values[0] is not None and values[1] is not None
    assert values[0] == _eval(RegionSpec.bucket("b", 8), b)[0]
    assert values[1] == _eval(RegionSpec.bucket("a", 8), a)[1]


# ---------------------------------------------------------------- 6: consistent result type
@pytest.mark.parametrize(("spec", "source"), [
    (RegionSpec.identity("c"), pa.array([1, None], pa.int16())),
    (RegionSpec.bucket("c", 4), pa.array(["a", None])),
    (RegionSpec.multi_bucket(["c", "d"], 4), pa.array([1.5, None])),
    (RegionSpec.truncate("c", 3), pa.array(["abcdef", None])),
    (RegionSpec.truncate("c", 3), pa.array([-7, 7], pa.int32())),
    (RegionSpec.year("c"), pa.array([dt.date(2026, 1, 1)])),
    (RegionSpec.hour("c"), pa.array([dt.datetime(2026, 1, 1, 5)], pa.timestamp("ms", "UTC"))),
    (RegionSpec.expression("col0 * 2", ["c"], "int64"), pa.array([1, 2], pa.int8())),
    (RegionSpec.expression("upper(col0)", ["c"], "string"), pa.array(["a", None])),
], ids=lambda v: v.fields[0].transform if isinstance(v, RegionSpec) else str(v.type))
def test_values_have_the_result_type(spec: RegionSpec, source: pa.Array) -> None:
    f = _field(spec, source.type)
    arrays = [source] + [pa.array([None] * len(source), pa.int32())] * (
        len(f.source_ids) - 1)
    values = evaluate_field(f, arrays, len(source))
    assert values.type == arrow_type_of(f.result_type)


def test_an_expression_whose_values_do_not_fit_is_an_error() -> None:
    spec = RegionSpec.expression("concat(col0, 'x')", ["c"], "int32")
    with pytest.raises(SchemaError, match="result type"):
        _eval(spec, pa.array(["a"]))


# ---------------------------------------------------------------- the transforms' values
def test_transform_values() -> None:
    ts = pa.array([dt.datetime(2026, 11, 24, 3, 30)], pa.timestamp("us", "UTC"))
    local = ts.cast(pa.timestamp("us", "America/New_York"))
    assert _eval(RegionSpec.year("t"), ts) == [2026]
    assert _eval(RegionSpec.month("t"), ts) == [11]
    assert _eval(RegionSpec.day("t"), ts) == [24]
    assert _eval(RegionSpec.hour("t"), ts) == [3]
    assert _eval(RegionSpec.hour("t"), local) == [22]  # the zone's local time, as DataFusion
    assert _eval(RegionSpec.day("t"), local) == [23]
    ints = pa.array([-11, -10, -9, -1, 0, 9, 10, 19], pa.int64())
    assert _eval(RegionSpec.truncate("c", 10), ints) == [-10, -10, 0, 0, 0, 0, 10, 10]
    assert _eval(RegionSpec.truncate("c", 2), pa.array(["héllo", "a"])) == ["hé", "a"]
    assert _eval(RegionSpec.truncate("c", 2), pa.array([b"\x01\x02\x03"])) == [b"\x01\x02"]
    assert _eval(RegionSpec.expression("col0 % 3", ["c"], "int64"),
                 pa.array([4, 5, None])) == [1, 2, None]


def test_expressions_on_their_own_thread_equal_the_direct_evaluation() -> None:
    spec = RegionSpec.expression("col0 % 3", ["c"], "int64")
    with sql_on_own_thread():
        assert _eval(spec, pa.array([4, 5, None])) == [1, 2, None]
        with pytest.raises(SchemaError, match="result type"):  # its errors come back typed
            _eval(RegionSpec.expression("concat(col0, 'x')", ["c"], "int32"), pa.array(["a"]))
    assert _eval(spec, pa.array([7])) == [1]


def test_truncate_is_order_preserving() -> None:
    ints = pa.array(list(range(-50, 50)), pa.int64())
    values = _eval(RegionSpec.truncate("c", 7), ints)
    assert values == sorted(values)
    assert RegionSpec.truncate("c", 7).fields[0].order_preserving
    assert not RegionSpec.bucket("c", 7).fields[0].order_preserving


def test_region_values_of_a_combined_spec() -> None:
    spec = RegionSpec.bucket("id", 4) + RegionSpec.identity("kind")
    bound = RegionSpec(tuple(RegionField(f.field_id, f.source_columns, f.transform,
                                         f.expression, f.result_type or "string",
                                         f.parameters, (i,))
                             for i, f in enumerate(spec.fields)))
    ids = pa.array([1, 2, 3], pa.int64())
    kinds = pa.array(["a", "b", None])
    table = region_values(bound, [ids, kinds], 3)
    assert table.column_names == ["bucket_id", "identity_kind"]
    assert table.column("identity_kind").to_pylist() == ["a", "b", None]
    assert table.column("bucket_id").to_pylist() == _eval(RegionSpec.bucket("id", 4), ids)


@pytest.mark.parametrize("t", INT_TYPES)
@pytest.mark.parametrize("buckets", [1, 7, 8, 1000, 2**31 - 1])
def test_bucket_numbers_equal_region_values(t: pa.DataType, buckets: int) -> None:
    """The numpy bucket of many integer keys (a lookup routes them so) is the bucket
    region_values computes, extremes of every integer type included."""
    import numpy as np

    from lance_sql.memwal.transforms import bucket_numbers

    info = np.iinfo(t.to_pandas_dtype())
    rng = np.random.default_rng(buckets)
    values = np.r_[info.min, info.max, 0, 1, rng.integers(info.min, info.max, 300,
                                                           dtype=t.to_pandas_dtype(),
                                                           endpoint=True)]
    column = pa.array(values, t)
    spec = RegionSpec((_field(RegionSpec.bucket("c", buckets), t),))
    got = bucket_numbers(spec, [column])
    assert got is not None and got.dtype == np.int64
    assert got.tolist() == region_values(spec, [column], len(column)).column(0).to_pylist()
    # anything else: None (the caller evaluates region_values)
    assert bucket_numbers(spec, [pa.array([1, None, 3], t)]) is None
    assert bucket_numbers(spec, [None]) is None
    assert bucket_numbers(RegionSpec.identity("c"), [column]) is None
    assert bucket_numbers(spec, [pa.array(["a", "b"])]) is None
