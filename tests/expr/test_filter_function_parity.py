"""Filter functions and operators pylance 14.0.2 accepts (DataFusion's semantics): the
rows lance_sql's own filter engine selects are the rows pylance selects on the same
table, and what pylance refuses is refused (a typed error, not rows)."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import pyarrow as pa
import pytest

import lance_sql
from lance_sql.errors import InvalidInputError
from lance_sql.expr import parse_predicate, to_sql

lance = pytest.importorskip("lance")

UTC = dt.UTC


@pytest.fixture(scope="module")
def uri(tmp_path_factory: pytest.TempPathFactory) -> str:
    path = str(tmp_path_factory.mktemp("functions") / "t")
    n = 12
    lance.write_dataset(pa.table({
        "id": pa.array(range(n), pa.int64()),
        "i": pa.array([0, 1, -1, 2, None, 5, 100, -7, 3, 0, 42, None], pa.int32()),
        "f": pa.array([0.0, -0.0, float("nan"), float("inf"), float("-inf"), None, 1.5, -2.5,
                       3.0, 1e300, 0.1, 2.0]),
        "g": pa.array([1.0, None, float("nan"), 2.0, 3.5, -1.0, 0.0, float("nan"), 4.0, 5.0,
                       6.0, 7.0], pa.float32()),
        "s": pa.array(["abc", "a%c", "a_c", "a\\c", "A!C", "héllo", None, "", "50%", "x_y",
                       "ABC", "a!%c"]),
        "d": pa.array([dt.date(2024, 1, 15), dt.date(2023, 12, 31), None, dt.date(2000, 2, 29),
                       dt.date(1969, 7, 20), dt.date(2024, 6, 30), dt.date(2024, 1, 1),
                       dt.date(1999, 12, 31), dt.date(2020, 3, 1), dt.date(2021, 1, 3),
                       dt.date(2022, 10, 9), dt.date(2024, 12, 30)]),
        "ts": pa.array([dt.datetime(2024, 1, 15, 13, 45, 30, 123456), None,
                        dt.datetime(1969, 12, 31, 23, 59, 59, 500000),
                        dt.datetime(2000, 2, 29), dt.datetime(2024, 6, 30, 23, 1, 2),
                        dt.datetime(2024, 1, 1, 6, 7, 8), dt.datetime(1999, 12, 31, 12),
                        dt.datetime(2020, 3, 1, 1, 2, 3, 4), dt.datetime(2021, 1, 3),
                        dt.datetime(2022, 10, 9, 9, 9, 9), dt.datetime(2024, 12, 30, 18, 30),
                        dt.datetime(2010, 5, 5, 5, 5, 5)], pa.timestamp("us")),
        "tz": pa.array([dt.datetime(2024, 1, 15, 13, 45, 30, tzinfo=UTC)] * 6 + [None]
                       + [dt.datetime(2024, 7, 1, 2, tzinfo=UTC)] * 5,
                       pa.timestamp("us", "America/New_York")),
        "u": pa.array([0, 1, 2, 3, 2**63, 2**64 - 1, None, 7, 8, 9, 10, 11], pa.uint64()),
        "dec": pa.array([None if k == 3 else Decimal(k) / 4 for k in range(n)],
                        pa.decimal128(10, 2)),
        "b": pa.array([True, False, None, True, False, True, None, False, True, True, False,
                       True]),
    }), path, max_rows_per_file=5)
    return path


def _same_rows(uri: str, text: str) -> None:
    ours = lance_sql.dataset(uri).to_table(filter=text).column("id").to_pylist()
    assert ours == lance.dataset(uri).to_table(filter=text).column("id").to_pylist()
    assert parse_predicate(to_sql(parse_predicate(text))) == parse_predicate(text)


def _both_refuse(uri: str, text: str) -> None:
    with pytest.raises(Exception):  # noqa: B017  (pylance's class varies)
        lance.dataset(uri).to_table(filter=text)
    with pytest.raises(InvalidInputError):
        lance_sql.dataset(uri).to_table(filter=text)


ISNAN = ["isnan(f)", "isnan(g)", "NOT isnan(f)", "isnan(f) IS NULL", "isnan(i)",
         "isnan(i) IS NULL", "isnan(u)", "isnan(dec)", "isnan(NULL)", "ISNAN(f + 1)",
         "isnan(f / 0)", "isnan(i / 0.0)", "isnan(CAST('NaN' AS DOUBLE))"]


@pytest.mark.parametrize("text", ISNAN)
def test_isnan(uri: str, text: str) -> None:
    _same_rows(uri, text)


@pytest.mark.parametrize("text", ["isnan(s)", "isnan(b)", "isnan(d)", "isnan(f, g)"])
def test_isnan_of_other_types(uri: str, text: str) -> None:
    _both_refuse(uri, text)


DATE_PART = [
    "date_part('year', d) = 2024", "date_part('month', d) = 1", "date_part('day', d) = 31",
    "date_part('dow', d) = 0", "date_part('isodow', d) = 7", "date_part('doy', d) = 365",
    "date_part('week', d) = 1", "date_part('week', d) = 53", "date_part('isoyear', d) = 2020",
    "date_part('quarter', d) = 4", "date_part('qtr', d) = 1", "date_part('epoch', d) > 0",
    "date_part('epoch', d) = 1705276800", "date_part('hour', d) = 0",
    "date_part('hour', ts) = 13", "date_part('minute', ts) = 45", "date_part('second', ts) > 30",
    "date_part('second', ts) = 30.123456", "date_part('millisecond', ts) = 30123",
    "date_part('ms', ts) = 59500", "date_part('microsecond', ts) = 30123456",
    "date_part('nanosecond', ts) > 2000000000", "date_part('epoch', ts) < 0",
    "date_part('epoch', ts) = 1705326330.123456", "date_part('dow', ts) = 3",
    "date_part('isoyear', ts) = 1970", "date_part('hour', tz) = 8", "date_part('day', tz) = 30",
    "date_part('epoch', tz) = 1705326330", "date_part('YEAR', d) = 2024",
    "date_part('years', d) = 2024", "date_part('y', ts) = 2024", "date_part('mon', d) = 12",
    "date_part('\"year\"', d) = 2024", "datepart('year', d) = 2024",
    "date_part('year', d) + 1 = 2025", "date_part('year', DATE '2024-01-01') = 2024",
    "date_part('hour', TIMESTAMP '2024-01-01 10:00:00') = 10",
    "date_part('year', '2024-01-01') = 2024",
]


@pytest.mark.parametrize("text", DATE_PART)
def test_date_part(uri: str, text: str) -> None:
    _same_rows(uri, text)


@pytest.mark.parametrize("text", [
    "date_part('bogus', d) = 1", "date_part('century', d) = 21", "date_part('ns', ts) = 0",
    "date_part('year ', d) = 2024", "date_part('year', s) = 2024",
    "date_part('year', i) = 1", "date_part('year', b) IS NULL", "date_part(s, d) IS NULL",
    "date_part(NULL, d) IS NULL", "date_part('year', NULL) IS NULL",
    "date_part('year', d, d) IS NULL",
])
def test_date_part_refused(uri: str, text: str) -> None:
    _both_refuse(uri, text)


def test_date_part_of_times_of_day(tmp_path: pytest.TempPathFactory) -> None:
    """A time of day has a clock's parts, typed as pylance types them."""
    path = str(tmp_path / "times")
    times = [dt.time(13, 45, 30, 123456), None, dt.time(0, 0, 1)]
    lance.write_dataset(pa.table({"t": pa.array(times, pa.time64("us"))}), path)
    for part in ("hour", "second", "millisecond", "microsecond", "nanosecond", "epoch"):
        columns = {"v": f"date_part('{part}', t)"}
        ours = lance_sql.dataset(path).to_table(columns=columns)
        assert ours == lance.dataset(path).to_table(columns=columns)


REGEXP_LIKE = [
    "regexp_like(s, 'a.c')", "regexp_like(s, '^A')", "regexp_like(s, '^a', 'i')",
    "regexp_like(s, 'é')", "regexp_like(s, 'É', 'i')", "regexp_like(s, '(?i)É')",
    "regexp_like(s, NULL)", "regexp_like(s, 'a', NULL)", "regexp_like(s, 'a', '')",
    "regexp_like(s, 'a c', 'x')", "regexp_like(s, '^.{5}$')", "regexp_like(s, '')",
    "regexp_like(s, '^\\w+$')", "regexp_like(s, '\\W')", "regexp_like(s, '[\\w%]+$')",
    "regexp_like(s, '\\d')", "regexp_like(s, '^\\D+$')", "regexp_like(s, '\\p{L}')",
    "regexp_like(s, '[[:alpha:]]+')", "regexp_like(s, '\\u{e9}')", "regexp_like(s, 'a', 'R')",
    "regexp_like(s, '^a', 'msU')", "regexp_like(s, '(?P<x>a)_')", "NOT regexp_like(s, '_')",
]


@pytest.mark.parametrize("text", REGEXP_LIKE)
def test_regexp_like(uri: str, text: str) -> None:
    _same_rows(uri, text)


@pytest.mark.parametrize("text", [
    "regexp_like(s, '(')", "regexp_like(s, 'a', 'g')", "regexp_like(s, 'a', 'ii')",
    "regexp_like(s, 'A.C', 'c')", "regexp_like(i, '1')", "regexp_like(s, 'a{,2}')",
])
def test_regexp_like_refused(uri: str, text: str) -> None:
    _both_refuse(uri, text)


def test_regexp_like_unicode_classes(tmp_path: pytest.TempPathFactory) -> None:
    """Rust's \\w, \\d and \\s are Unicode classes (RE2's, under pyarrow, ASCII ones)."""
    path = str(tmp_path / "letters")
    text = ["é", "ß", "٣", "\u00a0", "\u2003", "_", "\u203f", "\u0301", "a1", "!", "Ⓐ"]
    lance.write_dataset(pa.table({"id": range(len(text)), "s": text}), path)
    for pattern in ("^\\w+$", "^\\d$", "^\\s$", "^[\\w\\s]+$", "^\\W$", "^\\S$"):
        _same_rows(path, f"regexp_like(s, '{pattern}')")


def test_word_boundaries_need_ascii_text(tmp_path: pytest.TempPathFactory) -> None:
    """RE2's \\b is ASCII's: on ASCII text it is Rust's, on other text it is refused."""
    path = str(tmp_path / "words")
    lance.write_dataset(pa.table({"id": [0, 1, 2], "s": ["a cat", "scat", "c"]}), path)
    _same_rows(path, "regexp_like(s, '\\bc')")
    _same_rows(path, "regexp_like(s, 'a\\B')")
    lance.write_dataset(pa.table({"id": [3], "s": ["écat"]}), path, mode="append")
    with pytest.raises(InvalidInputError, match="ASCII"):
        lance_sql.dataset(path).to_table(filter="regexp_like(s, '\\bc')")


@pytest.mark.parametrize("text", [
    "s LIKE 'a\\%c' ESCAPE '\\'", "s NOT LIKE 'a\\%c' ESCAPE '\\'",
    "s ILIKE 'A\\_C' ESCAPE '\\'", "s NOT ILIKE '%\\%' ESCAPE '\\'",
    "s LIKE 'a%' ESCAPE '\\' AND i > 0", "s LIKE NULL ESCAPE '\\'",
])
def test_like_escape_backslash(uri: str, text: str) -> None:
    _same_rows(uri, text)


@pytest.mark.parametrize("text", [
    "s LIKE 'a!%c' ESCAPE '!'", "s NOT LIKE 'a!%c' ESCAPE '!'", "s ILIKE 'A!%C' ESCAPE '!'",
    "s LIKE 'a%' ESCAPE ''", "s LIKE 'a%' ESCAPE 'ab'", "s LIKE 'a%' ESCAPE NULL",
    "s LIKE 'a%' ESCAPE s",
])
def test_like_escape_other_characters_refused(uri: str, text: str) -> None:
    _both_refuse(uri, text)


@pytest.mark.parametrize("text", [
    "NULL = NULL", "NULL != NULL", "NULL < NULL", "NOT (NULL >= NULL)",
    "NULL BETWEEN NULL AND 1", "NULL LIKE 'a'", "NULL NOT ILIKE 'a'",
    "upper(NULL) IS NULL", "lower(NULL) IS NULL", "length(NULL) IS NULL",
    "starts_with(NULL, 'a') IS NULL", "ends_with(NULL, 'a') IS NULL",
    "array_has(NULL, 1) IS NULL", "cardinality(NULL) IS NULL", "NULL[1] IS NULL",
])
def test_functions_and_comparisons_of_null(uri: str, text: str) -> None:
    """A NULL literal where a string, a list or a value to compare goes: NULL (no rows,
    or every row under IS NULL), as in pylance, not a type error."""
    _same_rows(uri, text)


@pytest.mark.parametrize("text", [
    "coalesce(i, i / 0) > 0", "coalesce(id, i / 0) >= 0", "coalesce(id, 1 / 0) >= 0",
    "coalesce(id, i / 0, 1 / 0) >= 0", "coalesce(i, 10 / (id - 5)) > 0",
    "coalesce(id, CAST(s AS INT)) >= 0", "coalesce(i, abs(-9223372036854775808 + id)) >= 0",
])
def test_coalesce_computes_an_argument_only_where_it_is_needed(uri: str, text: str) -> None:
    """An argument after one that is not NULL is not computed (so cannot fail there)."""
    _same_rows(uri, text)


@pytest.mark.parametrize("text", [
    "coalesce(i, 1 / 0) > 0", "coalesce(i, id / 0) > 0", "coalesce(i / 0, 1) = 1",
    "coalesce(i, 10 / (id - 4)) > 0", "coalesce(id, CAST('x' AS INT)) >= 0",
    "coalesce(i, CAST(s AS INT)) > 0",
])
def test_coalesce_fails_where_a_failing_argument_is_needed(uri: str, text: str) -> None:
    _both_refuse(uri, text)


def test_case_computes_a_branch_only_where_it_is_chosen(uri: str) -> None:
    """(pylance's filters refuse CASE; DataFusion's SQL, which ours follow, computes each
    condition where no earlier one held and each value where it is chosen.)"""
    ds = lance_sql.dataset(uri)
    rows = [
        ("CASE WHEN i = 0 THEN 0 ELSE 10 / i END > 1", [1, 3, 5, 8]),
        ("CASE WHEN id >= 0 THEN 1 ELSE 1 / 0 END = 1", list(range(12))),
        ("CASE WHEN s LIKE '%c' OR s IS NULL THEN 0 WHEN CAST(s AS INT) > 1 THEN 1 END = 1",
         None),
        ("CASE WHEN i = 0 THEN 1 WHEN 10 / i > 4 THEN 2 ELSE 3 END = 2", [1, 3]),
        ("CASE i WHEN 0 THEN 1 ELSE 100 / i END = 100", [1]),
    ]
    for text, expected in rows:
        if expected is None:
            with pytest.raises(InvalidInputError):  # '', 'héllo'... are no numbers
                ds.to_table(filter=text)
            continue
        assert sorted(ds.to_table(filter=text).column("id").to_pylist()) == expected, text


@pytest.mark.parametrize("text", [
    "i IN (id, 1)", "i IN (CAST('1' AS INT), 2)", "f IN (CAST('inf' AS DOUBLE), 1.5)",
    "i IN (1 + 1, 3)", "i NOT IN (1 + 1, NULL)", "s IN (upper('abc'), 'x_y')",
    "i IN (-1, CAST(NULL AS INT))", "i NOT IN (id - 1, 5)",
])
def test_in_lists_of_expressions(uri: str, text: str) -> None:
    """An IN list may hold expressions, not only literals (they were refused)."""
    ours = lance_sql.dataset(uri).to_table(filter=text).column("id").to_pylist()
    assert ours == lance.dataset(uri).to_table(filter=text).column("id").to_pylist()


@pytest.mark.parametrize(("text", "value"), [
    ("1 = coalesce(u, -1)", "coalesce(u, -1)"), ("coalesce(u, i) > 100", "coalesce(u, i)"),
    ("coalesce(i, u) < 0", "coalesce(i, u)"),
    ("coalesce(u, -1) = 18446744073709551615", "coalesce(u, -1)"),
])
def test_coalesce_of_uint64_and_signed_integers(uri: str, text: str, value: str) -> None:
    """uint64 meets a signed integer as decimal(20, 0) (int64 failed from 2**63 on)."""
    _same_rows(uri, text)
    ours = lance_sql.dataset(uri).to_table(columns={"v": value}).column("v")
    theirs = lance.dataset(uri).to_table(columns={"v": value}).column("v")
    assert (ours.type, ours.to_pylist()) == (theirs.type, theirs.to_pylist())


@pytest.mark.parametrize("text", [
    "'2024-01-15' < DATE '2024-01-15'", "'2024-01-15' = DATE '2024-01-15'",
    "DATE '2024-01-16' > '2024-01-15'", "TIMESTAMP '2024-01-15 10:00:00' > '2024-01-15'",
    "'2024-01-15 10:00:00' = TIMESTAMP '2024-01-15 10:00:00'",
])
def test_a_string_literal_compared_with_a_time_literal(uri: str, text: str) -> None:
    """The string is read as a date or timestamp, as a string compared with a time
    column is (two literals were a type error)."""
    _same_rows(uri, text)


@pytest.mark.parametrize("text", [
    "concat('a', NULL - 2.5) IS NULL", "concat('a', NULL * 2.5) = 'a'",
    "(3 / CAST(2.5 AS DECIMAL(10,2))) * NULL IS NULL", "dec * NULL IS NULL",
    "NULL / f IS NULL", "i % NULL IS NULL",
])
def test_arithmetic_of_a_number_and_null(uri: str, text: str) -> None:
    """NULL, typed as the number (pyarrow typed NULL - 2.5 as float32, which our text
    of floats does not take, and a decimal times NULL beyond 38 digits)."""
    _same_rows(uri, text)


@pytest.mark.parametrize("text", [
    "(u * (3 - i)) > dec", "CAST(u AS DECIMAL(38,0)) > dec",
    "CAST(u AS DECIMAL(38,0)) = dec", "dec BETWEEN CAST(0 AS DECIMAL(38,0)) AND 2",
])
def test_decimals_compared_beyond_38_digits(uri: str, text: str) -> None:
    """decimal(38, 0) against decimal(10, 2) needs 40 digits: compared as decimal256 (the
    common decimal128 pyarrow picks failed)."""
    _same_rows(uri, text)
