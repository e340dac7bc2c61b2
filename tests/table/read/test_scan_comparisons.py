"""Filters evaluated as comparisons (``table/read/comparisons.py``) against the general
path (pyarrow's Acero over the same expression): the same rows, columns and types."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

import lance_sql
from lance_sql.expr import Call, Column, Expr, Literal, parse_predicate, resolve, to_pyarrow
from lance_sql.table import build_scan_plan, scan_fragment
from lance_sql.table.read import scan
from lance_sql.table.read.arrow_filters import decode, referenced_columns
from lance_sql.table.read.comparisons import (
    Comparison,
    conjunction,
    filter_table,
    mask,
    typed,
)

INT_TYPES = [pa.int8(), pa.int16(), pa.int32(), pa.int64(),
             pa.uint8(), pa.uint16(), pa.uint32(), pa.uint64()]
OPS = ["equal", "not_equal", "less", "less_equal", "greater", "greater_equal"]


def _expr(op: str, name: str, value: pa.Scalar) -> pc.Expression:
    return getattr(pc.field(name), {"equal": "__eq__", "not_equal": "__ne__",
                                    "less": "__lt__", "less_equal": "__le__",
                                    "greater": "__gt__", "greater_equal": "__ge__"}[op])(value)


def _acero_rows(table: pa.Table, expr: pc.Expression) -> np.ndarray:
    numbered = table.append_column("_n", pa.array(np.arange(table.num_rows)))
    return numbered.filter(expr).column("_n").to_numpy()


# ---------------------------------------------------------------- recognising the shape
def test_conjunction_shapes() -> None:
    k = Literal(5, pa.int64())
    assert conjunction(Call("=", (Column(("a",)), k))) == (
        Comparison("a", "=", pa.scalar(5, pa.int64())),)
    # a constant on the left flips the comparison
    assert conjunction(Call("<", (k, Column(("a",))))) == (
        Comparison("a", ">", pa.scalar(5, pa.int64())),)
    both = conjunction(Call("and", (Call(">=", (Column(("a",)), k)),
                                    Call("is_not_null", (Column(("b",)),)))))
    assert both == (Comparison("a", ">=", pa.scalar(5, pa.int64())),
                    Comparison("b", "is_not_null"))
    for other in [
        Call("or", (Call("=", (Column(("a",)), k)), Call("=", (Column(("b",)), k)))),
        Call("not", (Call("=", (Column(("a",)), k)),)),
        Call("=", (Column(("s", "a")), k)),              # a struct field
        Call("=", (Column(("a",)), Literal(None, pa.int64()))),  # NULL constant
        Call("=", (Column(("a",)), Literal(5))),          # untyped constant
        Call("=", (Column(("a",)), Column(("b",)))),      # two columns
        Call("and", (Call("=", (Column(("a",)), k)), Call("unknown", ()))),
        Call("unknown", (Column(("a",)),)),
        None,
    ]:
        assert conjunction(other) is None, other


def test_decoded_pushed_filters() -> None:
    """What the SQL layer hands over: DataFusion's pyarrow expression, decoded."""
    e = (pc.field("id") == pa.scalar(7, pa.int64())) & (pc.field("x") < pa.scalar(0.5))
    assert conjunction(decode(e)) == (Comparison("id", "=", pa.scalar(7, pa.int64())),
                                      Comparison("x", "<", pa.scalar(0.5)))
    assert conjunction(decode(~(pc.field("id") == 7))) is None
    assert conjunction(decode(pc.field("id").cast(pa.int32()) == 7)) is None


# ---------------------------------------------------------------- masks vs Acero
@pytest.mark.parametrize("dtype", INT_TYPES + [pa.float32(), pa.float64(), pa.string(),
                                               pa.date32(), pa.bool_()])
@pytest.mark.parametrize("nulls", [False, True])
def test_mask_matches_acero(dtype: pa.DataType, nulls: bool) -> None:
    rng = np.random.default_rng(3)
    n = 500
    raw = rng.integers(0, 20, n)
    if pa.types.is_string(dtype):
        values = pa.array([f"v{v:02d}" for v in raw])
        constant = pa.scalar("v07")
    elif pa.types.is_boolean(dtype):
        values = pa.array(raw % 2 == 0)
        constant = pa.scalar(True)
    elif pa.types.is_floating(dtype):
        floats = raw.astype(np.float64)
        floats[::17] = np.nan
        floats[::23] = -0.0
        values = pa.array(floats).cast(dtype)
        constant = pa.scalar(7.0, dtype)
    elif pa.types.is_date(dtype):
        values = pa.array(raw.astype(np.int32)).view(dtype)
        constant = pa.scalar(7, pa.int32()).cast(dtype)
    else:
        values = pa.array(raw).cast(dtype)
        constant = pa.scalar(7, dtype)
    if nulls:
        values = pc.if_else(pa.array(raw % 5 == 0), pa.nulls(n, dtype), values)
    table = pa.table({"c": values})
    for op in OPS:
        expr = _expr(op, "c", constant)
        got = mask(conjunction(decode(expr)), {"c": values})
        assert got is not None
        # floats: as SQL orders them (NaN equal to NaN and above every number), which
        # the general path's translation spells out; Acero alone compares as IEEE
        want = to_pyarrow(decode(expr), table.schema) if pa.types.is_floating(dtype) \
            else expr
        assert np.array_equal(np.flatnonzero(got), _acero_rows(table, want)), op
    for test, expr in [("is_null", pc.field("c").is_null()),
                       ("is_not_null", pc.field("c").is_valid())]:
        got = mask((Comparison("c", test),), {"c": values})
        assert np.array_equal(np.flatnonzero(got), _acero_rows(table, expr)), test
    if not pa.types.is_boolean(dtype) and not pa.types.is_string(dtype):
        both = (pc.field("c") >= constant) & (pc.field("c") != constant)
        got = mask(conjunction(decode(both)), {"c": values})
        want = to_pyarrow(decode(both), table.schema) if pa.types.is_floating(dtype) \
            else both
        assert np.array_equal(np.flatnonzero(got), _acero_rows(table, want))


def test_mask_refuses_other_types() -> None:
    """A constant of another type than its column: the general path (its casts) decides."""
    values = pa.array([1, 2, 3], pa.int32())
    assert mask((Comparison("c", "=", pa.scalar(2, pa.int64())),), {"c": values}) is None
    chunked = pa.chunked_array([pa.array([1, 2], pa.int64()), pa.array([3], pa.int64())])
    got = mask((Comparison("c", ">", pa.scalar(1, pa.int64())),), {"c": chunked})
    assert got.tolist() == [False, True, True]


@pytest.mark.parametrize("dtype", INT_TYPES + [pa.float32(), pa.float64()])
@pytest.mark.parametrize("constant", [0, 7, 99, -1, 200, 70_000, 2**31, 2**40, -2**40,
                                      2**53 + 1])
def test_typed_constants_keep_the_rows_of_the_general_path(dtype: pa.DataType,
                                                            constant: int) -> None:
    """An int64 constant against a column of another numeric type (``cat = 7`` parsed
    from SQL text): made the column's type when that loses nothing, it selects the very
    rows Acero selects with its implicit cast; when it would lose something it stays as
    it is and the general path decides."""
    raw = np.arange(-60, 140) * (3 if dtype in (pa.int8(), pa.uint8()) else 1)
    if pa.types.is_unsigned_integer(dtype):
        raw = np.abs(raw)
    if dtype in (pa.int8(), pa.uint8()):
        raw = np.clip(raw, -128 if dtype == pa.int8() else 0, 127)
    values = pc.if_else(pa.array(raw % 9 == 0), pa.nulls(raw.size, dtype),
                        pa.array(raw).cast(dtype))
    table = pa.table({"c": values})
    wide = pa.scalar(constant, pa.int64()) if constant < 2**63 else pa.scalar(constant)
    for op in OPS:
        expr = _expr(op, "c", wide)
        (typed_,) = typed(conjunction(decode(expr)), table.schema)
        got = mask((typed_,), {"c": values})
        try:
            pa.scalar(constant, dtype) if pa.types.is_integer(dtype) else None
            fits = pa.types.is_integer(dtype) or abs(constant) <= 2**24 or (
                dtype == pa.float64() and abs(constant) <= 2**53)
        except (pa.ArrowException, OverflowError):
            fits = False
        if not fits:  # not representable: left for the general path
            assert got is None and typed_.value.type == pa.int64(), (op, constant)
            continue
        assert typed_.value.type == dtype and got is not None, (op, constant)
        assert np.array_equal(np.flatnonzero(got), _acero_rows(table, expr)), (op, constant)


def test_typed_leaves_other_comparisons_alone() -> None:
    schema = pa.schema([("s", pa.string()), ("c", pa.int32()), ("f", pa.float64())])
    same = (Comparison("c", "=", pa.scalar(3, pa.int32())), Comparison("s", "is_null"),
            Comparison("s", "=", pa.scalar("x")), Comparison("f", "<", pa.scalar(0.5)),
            Comparison("c", "=", pa.scalar(1.5)), Comparison("gone", "=", pa.scalar(1)))
    assert typed(same, schema) == same


# ---------------------------------------------------------------- scans vs the general path
def _source(n: int, start: int = 0) -> pa.Table:
    rng = np.random.default_rng(start)
    ids = np.arange(start, start + n)
    cols: dict[str, pa.Array] = {"id": pa.array(ids, pa.int64())}
    for t in INT_TYPES:
        cols[f"c_{t}"] = pa.array(ids % 100).cast(t)
    x = rng.random(n)
    cols["x"] = pa.array(x, mask=ids % 7 == 0)
    cols["s"] = pa.array([f"s{i % 13}" for i in ids], mask=ids % 11 == 0)
    cols["tags"] = pa.array([[int(i % 3)] * int(i % 4) for i in ids], pa.list_(pa.int32()))
    return pa.table(cols)


def _write(path: Path, version: str, writer: str) -> Path:
    uri = path / f"t-{version}-{writer}.lance"
    first, second = _source(3000), _source(2500, start=3000)
    if writer == "pylance":
        lance = pytest.importorskip("lance")
        lance.write_dataset(first, str(uri), max_rows_per_file=1200,
                            data_storage_version=version)
        lance.write_dataset(second, str(uri), mode="append", data_storage_version=version)
        lance.dataset(str(uri)).delete("id % 9 = 4 OR id BETWEEN 1300 AND 1500")
    else:
        lance_sql.write_dataset(first, uri, max_rows_per_file=1200,
                                data_storage_version=version)
        lance_sql.write_dataset(second, uri, mode="append")
        lance_sql.dataset(uri).delete("id % 9 = 4 OR id BETWEEN 1300 AND 1500")
    return uri


FILTERS = [
    pc.field("id") == pa.scalar(1234, pa.int64()),
    pc.field("id") == pa.scalar(1400, pa.int64()),   # a deleted row
    pc.field("id") == pa.scalar(-1, pa.int64()),     # no row
    (pc.field("id") >= pa.scalar(100, pa.int64())) & (pc.field("id") < pa.scalar(4000, pa.int64())),
    pc.field("x") < pa.scalar(0.3),
    pc.field("x").is_null(),
    pc.field("s") == pa.scalar("s5"),
    pc.field("c_uint8") <= pa.scalar(3, pa.uint8()),
    (pc.field("c_int16") > pa.scalar(90, pa.int16()))
    & (pc.field("c_uint64") != pa.scalar(95, pa.uint64())),
]
OUTPUTS = [
    None,                       # every column
    ["id"],                     # only compared columns
    ["s", "_rowaddr", "tags"],  # a compared column not in the output, system columns
    [],                         # counts
]


@pytest.mark.parametrize(("version", "writer"), [
    ("2.0", "lance_sql"), ("2.2", "lance_sql"), ("2.1", "pylance"), ("2.2", "pylance"),
    ("2.0", "pylance"),
])
def test_scans_match_the_general_path(tmp_path: Path, version: str, writer: str) -> None:
    uri = _write(tmp_path, version, writer)
    ds = lance_sql.dataset(uri)
    manifest, store = ds.manifest, ds.store
    assert len(manifest.fragments) >= 4
    names_all = [f.name for f in manifest.schema.fields]
    checked = 0
    for expr in FILTERS:
        for out in OUTPUTS:
            names = names_all if out is None else out
            if out is not None and "_rowaddr" in out:
                names = out
            used = referenced_columns(expr)
            kwargs = dict(filter=expr, filter_columns=used, schema_metadata=False)
            general = build_scan_plan(manifest, names, **kwargs)
            fast = build_scan_plan(manifest, names, filter_tree=decode(expr), **kwargs)
            assert general.comparisons is None and fast.comparisons is not None
            for frag in manifest.fragments:
                rows = frag.physical_rows
                for offset, length in [(0, rows), (rows // 3, rows // 2)]:
                    want = scan_fragment(store, manifest, frag, general, offset=offset,
                                         length=length)
                    got = scan_fragment(store, manifest, frag, fast, offset=offset,
                                        length=length)
                    assert got.num_rows == want.num_rows
                    assert got.schema == want.schema
                    assert got.equals(want), (str(expr), names, frag.id, offset)
                    checked += got.num_rows
    assert checked > 1000


def test_a_system_column_filter_keeps_the_general_path(tmp_path: Path) -> None:
    uri = _write(tmp_path, "2.2", "lance_sql")
    ds = lance_sql.dataset(uri)
    expr = pc.field("_rowaddr") == pa.scalar(5, pa.uint64())
    plan = build_scan_plan(ds.manifest, ["id"], filter=expr, filter_columns={"_rowaddr"},
                           filter_tree=decode(expr))
    assert plan.comparisons is None


@pytest.mark.parametrize("version", ["2.0", "2.2"])
def test_sql_point_filter_takes_the_comparison_path(tmp_path: Path, version: str,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """``WHERE id = k`` through SQL: no Acero filter and no row address for every row (the
    late-materialisation path is not reached), and the rows pylance finds."""
    lance = pytest.importorskip("lance")
    uri = _write(tmp_path, version, "lance_sql")
    session = lance_sql.connect(tmp_path)
    name = uri.name.removesuffix(".lance")

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("the general filter path was taken")

    monkeypatch.setattr(scan, "_scan_late", refuse)
    for where in ["id = 1234", "id = 1400", "x < 0.25 AND id > 2000", "s = 's5'"]:
        got = session.sql(f'SELECT * FROM "{name}" WHERE {where}').to_arrow_table()
        want = lance.dataset(str(uri)).to_table(filter=where)
        key = ["id"]
        assert got.sort_by([(k, "ascending") for k in key]).equals(
            want.sort_by([(k, "ascending") for k in key])), where


# ---------------------------------------------------------------- BETWEEN and IN lists
def _tree(text: str, schema: pa.Schema) -> Expr:
    return resolve(parse_predicate(text), schema)


def test_between_and_in_shapes() -> None:
    schema = pa.schema([("a", pa.int64()), ("s", pa.string())])
    got = conjunction(_tree("a BETWEEN 3 AND 9 AND s IN ('x', 'y')", schema))
    assert got == (Comparison("a", ">=", pa.scalar(3, pa.int64())),
                   Comparison("a", "<=", pa.scalar(9, pa.int64())),
                   Comparison("s", "in", values=(pa.scalar("x"), pa.scalar("y"))))
    for other in ["a NOT BETWEEN 3 AND 9", "a IN (1, NULL)", "a NOT IN (1, 2)",
                  "a BETWEEN s AND 9", "a + 1 IN (2, 3)"]:
        assert conjunction(_tree(other, schema)) is None, other


@pytest.mark.parametrize("dtype", INT_TYPES + [pa.string(), pa.date32(), pa.float64()])
@pytest.mark.parametrize("nulls", [False, True])
def test_between_and_in_masks_match_acero(dtype: pa.DataType, nulls: bool) -> None:
    rng = np.random.default_rng(11)
    raw = rng.integers(0, 20, 400)
    if pa.types.is_string(dtype):
        values = pa.array([f"v{v:02d}" for v in raw])
        texts = ["c IN ('v03', 'v07', 'zz')", "c BETWEEN 'v05' AND 'v11'"]
    elif pa.types.is_date(dtype):
        values = pa.array(raw.astype(np.int32)).view(dtype)
        texts = ["c IN (DATE '1970-01-04', DATE '1970-01-08')",
                 "c BETWEEN DATE '1970-01-03' AND DATE '1970-01-10'"]
    else:
        values = pa.array(raw).cast(dtype)
        texts = ["c IN (3, 7, 19, 120)", "c BETWEEN 5 AND 11",
                 "c IN (2, 4) AND c BETWEEN 3 AND 9"]
    if nulls:
        values = pc.if_else(pa.array(raw % 5 == 0), pa.nulls(raw.size, dtype), values)
    table = pa.table({"c": values})
    for text in texts:
        tree = _tree(text, table.schema)
        comparisons = conjunction(tree)
        assert comparisons is not None, text
        got = mask(typed(comparisons, table.schema), {"c": values})
        want = _acero_rows(table, to_pyarrow(tree, table.schema))
        if pa.types.is_floating(dtype) and " IN " in text:
            assert got is None  # the hash lookup tells -0.0 from 0.0: the general path
            continue
        assert got is not None, text
        assert np.array_equal(np.flatnonzero(got), want), text
        assert filter_table(table, tree).equals(table.take(pa.array(want))), text


def test_filter_table_takes_the_general_path_for_other_shapes() -> None:
    table = pa.table({"a": pa.array([1, 5, None, 9], pa.int64()),
                      "s": pa.array(["x", "y", "z", None])})
    for text, rows in [("a = 5 OR s = 'x'", [0, 1]), ("NOT (a > 2)", [0]),
                       ("a IN (1.0, 9.5)", [0]), ("s LIKE 'y%'", [1])]:
        assert filter_table(table, _tree(text, table.schema)).equals(
            table.take(pa.array(rows, pa.int64()))), text


@pytest.mark.parametrize("dtype", [pa.float32(), pa.float64()])
def test_float_masks_order_nan_as_datafusion(dtype: pa.DataType) -> None:
    """NaN equals NaN and is above every number, in masks as in DataFusion's own filter
    (the oracle: the same comparison run by DataFusion over the same values)."""
    datafusion = pytest.importorskip("datafusion")
    v = [1.0, float("nan"), 80.0, -0.0, 0.0, None, float("nan"), 3.5, float("inf")]
    table = pa.table({"c": pa.array(v, dtype)})
    ctx = datafusion.SessionContext()
    ctx.register_record_batches("m", [table.append_column(
        "n", pa.array(range(len(v)), pa.int64())).to_batches()])
    for constant in [74.0, 0.0, -0.0, 3.5, float("nan"), float("inf")]:
        for op in ["=", "!=", "<", "<=", ">", ">="]:
            literal = "'NaN'" if constant != constant else f"'{constant}'"
            want = ctx.sql(f"SELECT n FROM m WHERE c {op} CAST({literal} AS "
                           f"{'REAL' if dtype == pa.float32() else 'DOUBLE'}) ORDER BY n")
            rows = want.to_arrow_table().column(0).to_pylist()
            got = mask((Comparison("c", op, pa.scalar(constant, dtype)),), {"c": table["c"]})
            assert got is not None
            assert np.flatnonzero(got).tolist() == rows, (op, constant)
