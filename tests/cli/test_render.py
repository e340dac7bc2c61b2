"""Output rendering, statement splitting and the progress line of the lance-sql command."""

from __future__ import annotations

import csv
import datetime as dt
import io
import json
import time
from decimal import Decimal

import pyarrow as pa

from lance_sql.cli.execute import error_message, is_blank, split_statements
from lance_sql.cli.progress import Progress
from lance_sql.cli.render import render_table, text_values


def rendered(table: pa.Table, fmt: str = "table") -> str:
    out = io.StringIO()
    render_table(table, out, fmt)
    return out.getvalue()


def test_values_are_formatted_deterministically() -> None:
    assert text_values(pa.array([1.5, 0.1, 1e20, float("nan"), None, 99.0, -0.0, 1e-5])) == [
        "1.5", "0.1", "1e+20", "NaN", None, "99.0", "-0.0", "0.00001"]
    assert text_values(pa.array([0.1, float("-inf")], pa.float16())) == ["0.1", "-inf"]
    assert text_values(pa.array([0.1], pa.float32())) == ["0.1"]
    assert text_values(pa.array([True, None])) == ["true", None]
    assert text_values(pa.array([b"\x00\xff"])) == ["\\x00ff"]
    assert text_values(pa.array([dt.datetime(2024, 1, 2, 3, 4, 5)],
                                pa.timestamp("us", "UTC"))) == ["2024-01-02 03:04:05.000000Z"]
    assert text_values(pa.array([dt.date(2024, 1, 2)])) == ["2024-01-02"]
    assert text_values(pa.array([Decimal("1.50")], pa.decimal128(5, 2))) == ["1.50"]
    assert text_values(pa.array([[1, 2], None, []])) == ["[1, 2]", None, "[]"]
    assert text_values(pa.array([{"a": 1, "b": "x"}])) == ['{a: 1, b: "x"}']
    assert text_values(pa.array(["a", "b", "a"]).dictionary_encode()) == ["a", "b", "a"]
    assert text_values(pa.chunked_array([[1], [2]])) == ["1", "2"]


def test_table_format_aligns_and_counts() -> None:
    table = pa.table({"id": [1, 22], "name": ["日本", None], "plan": ["a\nbb", "c"]})
    assert rendered(table) == (
        " id | name | plan\n"
        "----+------+------\n"
        "  1 | 日本 | a\n"
        "    |      | bb\n"
        " 22 | NULL | c\n"
        "(2 rows)\n"
    )
    empty = pa.table({"x": pa.array([], pa.int64())})
    assert rendered(empty) == " x\n---\n(0 rows)\n"


def test_csv_and_json() -> None:
    table = pa.table({"a": [1, None], "s": ['x,"y"', None], "f": [float("inf"), 2.0]})
    assert rendered(table, "csv") == 'a,s,f\n1,"x,""y""",inf\n,,2.0\n'
    assert json.loads(rendered(table, "json")) == [
        {"a": 1, "s": 'x,"y"', "f": "inf"}, {"a": None, "s": None, "f": 2.0}]
    same_names = pa.Table.from_arrays([pa.array([1]), pa.array([2])], names=["id", "id"])
    assert rendered(same_names, "json") == '[\n{"id": 1, "id": 2}\n]\n'


def test_split_statements() -> None:
    assert split_statements("SELECT 1; SELECT 2;") == (["SELECT 1", "SELECT 2"], "")
    assert split_statements("SELECT ';' -- ;\n, 'it''s;'; SELECT") == (
        ["SELECT ';' -- ;\n, 'it''s;'"], " SELECT")
    assert split_statements('SELECT "a;b" /* ; */ FROM t;;') == (
        ['SELECT "a;b" /* ; */ FROM t'], "")
    assert split_statements("SELECT 'open;\n") == ([], "SELECT 'open;\n")
    assert split_statements("SELECT 1 /* open;") == ([], "SELECT 1 /* open;")
    assert is_blank("  -- only a comment\n /* and another */ ")
    assert not is_blank("-- comment\nSELECT 1")


def test_error_message_is_one_line() -> None:
    assert error_message(ValueError("first\n\n  second\tpart ")) == "first second\tpart"
    assert error_message(ValueError()) == "ValueError"


class FakeTerminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_on_a_terminal_redraws_then_erases() -> None:
    stream = FakeTerminal()
    with Progress(stream, enabled=True, delay=0, interval=0.01) as progress:
        progress.add(1000)
        time.sleep(0.1)
        with progress.paused():
            stream.write("RESULT")
        time.sleep(0.05)
    text = stream.getvalue()
    assert "1,000 rows, 1 batch" in text
    assert "\r\x1b[KRESULT" in text  # the line is erased before results are written
    assert text.endswith("\r\x1b[K")  # and erased at the end


def test_progress_elsewhere_only_when_forced() -> None:
    stream = io.StringIO()
    with Progress(stream, enabled=False, delay=0) as progress:
        progress.add(5)
    assert stream.getvalue() == ""
    with Progress(stream, enabled=True, delay=10) as progress:
        progress.add(5)
        progress.add(7)
    assert stream.getvalue().startswith("lance-sql: 12 rows, 2 batches, ")
    assert "\r" not in stream.getvalue()


def test_csv_and_json_escape_what_they_must() -> None:
    values = ["plain", 'q"uote', "back\\slash", "ctl\x01\n\t", None, "ü", "a,b", "cr\r"]
    table = pa.table({"v": values})
    assert [json.loads(line.rstrip(","))["v"]
            for line in rendered(table, "json").splitlines()[1:-1]] == values
    got = list(csv.reader(io.StringIO(rendered(table, "csv"), newline="")))
    assert got == [["v"]] + [["" if v is None else v] for v in values]


def test_nested_and_temporal_values_in_json() -> None:
    table = pa.table({
        "l": pa.array([[1, 2], None]),
        "s": pa.array([{"a": 1.5, "b": "x"}, None]),
        "ts": pa.array([dt.datetime(2024, 1, 1), None], pa.timestamp("us", "UTC")),
        "b": pa.array([b"\x01", None]),
        "f": [float("nan"), 1.0],
    })
    assert json.loads(rendered(table, "json")) == [
        {"l": [1, 2], "s": {"a": 1.5, "b": "x"}, "ts": "2024-01-01 00:00:00.000000Z",
         "b": "\\x01", "f": "NaN"},
        {"l": None, "s": None, "ts": None, "b": None, "f": 1.0},
    ]


def test_nested_temporal_values_print_as_arrow_spells_them() -> None:
    """Dates and times inside lists, structs and maps print as in a column of their own,
    Arrow's text: a year past 9999 (Python's datetime cannot hold it: the command died
    with an OverflowError traceback) and nanoseconds (``datetime.time`` dropped them)."""
    far = pa.array([2**62, None, 1_234_567_891], pa.int64())
    lists = pa.ListArray.from_arrays(pa.array([0, 2, 2, 3]), far.cast(pa.timestamp("us")),
                                     mask=pa.array([False, True, False]))
    assert text_values(lists) == ["[<value out of range: 4611686018427387904>, null]", None,
                                  "[1970-01-01 00:20:34.567891]"]
    times = pa.array([[1_234_567_891]], pa.list_(pa.int64())).cast(pa.list_(pa.time64("ns")))
    assert text_values(times) == ["[00:00:01.234567891]"]
    structs = pa.StructArray.from_arrays([far.cast(pa.timestamp("ns")), pa.array([1, 2, 3])],
                                         names=["t", "n"])
    assert text_values(structs.slice(1)) == [
        "{t: null, n: 2}", "{t: 1970-01-01 00:00:01.234567891, n: 3}"]
    maps = pa.MapArray.from_arrays(pa.array([0, 1, 3]), pa.array(["a", "b", "c"]),
                                   far.cast(pa.date64()))
    table = pa.table({"l": lists.slice(0, 2), "m": maps})
    assert json.loads(rendered(table, "json")) == [
        {"l": ["<value out of range: 4611686018427387904>", None],
         "m": [["a", "<value out of range: 4611686018427387904>"]]},
        {"l": None, "m": [["b", None], ["c", "1970-01-15"]]}]
    assert rendered(table, "csv").splitlines()[1] == (
        '"[<value out of range: 4611686018427387904>, null]",'
        '"{""a"": <value out of range: 4611686018427387904>}"')
