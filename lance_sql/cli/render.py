"""Query results as text: an aligned table, CSV or JSON.

Every value is formatted by one set of rules so the output is deterministic (the
``sql_examples/*.out`` files are this module's output): floats print their shortest
round-tripping form (``.0`` on integral values), temporal and decimal values use Arrow's
own string cast (full precision, time zone marker kept), binaries print as ``\\x`` + hex,
nested values as ``[...]`` / ``{key: value}``. Formatting runs as Arrow kernels a column
at a time, so exporting millions of rows is not bound by per-value Python code.

CSV and JSON stream batch by batch; the table format must see every row to size its
columns, so it keeps at most ``max_rows`` of them (all by default).
"""

from __future__ import annotations

import csv
import datetime as dt
import decimal
import json
import math
import unicodedata
from collections.abc import Iterable
from typing import Any, TextIO

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

FORMATS = ("table", "csv", "json")
NULL = "NULL"


# -- values ------------------------------------------------------------------------
def _is_numeric(t: pa.DataType) -> bool:
    return pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_decimal(t)


def _float_text(v: float, t: pa.DataType) -> str:
    """One float: the shortest text that reads back as the same value (``.0`` if integral)."""
    if math.isnan(v):
        return "NaN"
    if math.isinf(v):
        return "inf" if v > 0 else "-inf"
    if pa.types.is_float16(t):
        return str(np.float16(v))
    if pa.types.is_float32(t):
        return str(np.float32(v))
    return repr(float(v))


def _float_texts(array: pa.Array) -> pa.Array:
    """A float column's texts, vectorised: Arrow's shortest round-trip form, ``.0`` added
    to integral values and ``NaN`` spelled as DataFusion does (Arrow only switches to
    exponents further from 1 than Python's ``repr`` does)."""
    if pa.types.is_float16(array.type):  # Arrow prints half floats in full
        return pa.array([None if v is None else _float_text(v, array.type)
                         for v in array.to_pylist()], pa.string())
    text = pc.cast(array, pa.string())
    integral = pc.invert(pc.match_substring_regex(text, "[.en]"))
    text = pc.if_else(integral, pc.binary_join_element_wise(text, ".0", ""), text)
    return pc.if_else(pc.is_nan(array), "NaN", text)


class _ArrowText(str):
    """A temporal value inside a list, struct or map, as Arrow's string cast spells it
    (as the same value is spelt in a column of its own): written as is, not quoted."""


def _has_temporal(t: pa.DataType) -> bool:
    """Whether ``t`` is, or nests, a date, time, timestamp or duration."""
    if pa.types.is_temporal(t):
        return True
    if pa.types.is_dictionary(t):
        return _has_temporal(t.value_type)
    if pa.types.is_map(t):
        return _has_temporal(t.key_type) or _has_temporal(t.item_type)
    if pa.types.is_nested(t):
        return any(_has_temporal(t.field(i).type) for i in range(t.num_fields))
    return False


def _split(values: list[Any], starts: list[int], valid: list[bool]) -> list[Any]:
    """Each valid row's slice ``values[starts[i] : starts[i + 1]]`` (None for a null row)."""
    return [values[a:b] if ok else None
            for a, b, ok in zip(starts[:-1], starts[1:], valid, strict=True)]


def _py_values(array: pa.Array) -> list[Any]:
    """``array.to_pylist()``, but with every temporal value as an :class:`_ArrowText`.

    Python's date and time types cannot hold every Arrow value (years past 9999 or before
    1, nanoseconds, which ``datetime.time`` drops and ``datetime`` refuses without
    pandas), so temporal leaves are spelt by Arrow's cast, a whole child array at a time.
    """
    t = array.type
    if not _has_temporal(t):
        return array.to_pylist()
    if pa.types.is_temporal(t):
        try:
            texts = pc.cast(array, pa.string())
        except pa.ArrowNotImplementedError:  # (intervals) Python's values do
            return array.to_pylist()
        return [None if s is None else _ArrowText(s) for s in texts.to_pylist()]
    if pa.types.is_dictionary(t):
        return _py_values(array.dictionary_decode())
    valid = array.is_valid().to_pylist()
    if pa.types.is_map(t):
        pairs = list(zip(_py_values(array.keys), _py_values(array.items), strict=True))
        return _split(pairs, array.offsets.to_pylist(), valid)
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return _split(_py_values(array.values), array.offsets.to_pylist(), valid)
    if pa.types.is_fixed_size_list(t):
        size = t.list_size
        items = array.values.slice(array.offset * size, len(array) * size)
        return _split(_py_values(items), list(range(0, (len(array) + 1) * size, size)), valid)
    if pa.types.is_struct(t):
        names = [t.field(i).name for i in range(t.num_fields)]
        rows = zip(*(_py_values(child) for child in array.flatten()), strict=True)
        return [dict(zip(names, row, strict=True)) if ok else None
                for row, ok in zip(rows, valid, strict=True)]
    return _py_values(array.cast(_without_views(t)))


def _without_views(t: pa.DataType) -> pa.DataType:
    """A list view type as the list type of the same values (others unchanged)."""
    if pa.types.is_list_view(t):
        return pa.list_(t.value_field)
    if pa.types.is_large_list_view(t):
        return pa.large_list(t.value_field)
    return t


def _nested_text(v: Any) -> str:
    """A Python value from a nested Arrow value, written compactly and unambiguously."""
    if v is None:
        return "null"
    if isinstance(v, _ArrowText):
        return str(v)
    if isinstance(v, str):
        return json.dumps(v, ensure_ascii=False)
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float):
        return _float_text(v, pa.float64())
    if isinstance(v, bytes):
        return "\\x" + v.hex()
    if isinstance(v, dict):
        return "{" + ", ".join(f"{k}: {_nested_text(x)}" for k, x in v.items()) + "}"
    if isinstance(v, list | tuple):
        if v and all(isinstance(x, tuple) and len(x) == 2 for x in v):  # a map's entries
            return "{" + ", ".join(f"{_nested_text(k)}: {_nested_text(x)}" for k, x in v) + "}"
        return "[" + ", ".join(_nested_text(x) for x in v) + "]"
    if isinstance(v, dt.datetime | dt.date | dt.time):
        return v.isoformat()
    return str(v)


def _is_text(t: pa.DataType) -> bool:
    return pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_string_view(t)


def text_array(array: pa.Array) -> pa.Array:
    """Each value of ``array`` as display text (null stays null), vectorised where Arrow can."""
    t = array.type
    if pa.types.is_dictionary(t):
        return text_array(array.dictionary_decode())
    if _is_text(t):
        return array.cast(pa.string())
    if pa.types.is_boolean(t):
        return pc.if_else(array, "true", "false")
    if pa.types.is_floating(t):
        return _float_texts(array)
    if pa.types.is_integer(t):
        return pc.cast(array, pa.string())
    if pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_fixed_size_binary(t):
        return pa.array([None if v is None else "\\x" + v.hex() for v in array.to_pylist()],
                        pa.string())
    if pa.types.is_temporal(t) or pa.types.is_decimal(t):
        try:
            return pc.cast(array, pa.string())
        except (pa.ArrowNotImplementedError, pa.ArrowInvalid):
            pass
    return pa.array([None if v is None else _nested_text(v) for v in _py_values(array)],
                    pa.string())


def text_values(array: pa.Array | pa.ChunkedArray) -> list[str | None]:
    """Each value of ``array`` as display text (None for null)."""
    if isinstance(array, pa.ChunkedArray):
        return [v for chunk in array.chunks for v in text_values(chunk)]
    return text_array(array).to_pylist()


def json_array(array: pa.Array) -> pa.Array:
    """Each value of ``array`` as a JSON literal (``null`` for null), never null itself."""
    t = array.type
    if pa.types.is_dictionary(t):
        return json_array(array.dictionary_decode())
    if pa.types.is_integer(t) or pa.types.is_boolean(t):
        texts = text_array(array)
    elif pa.types.is_floating(t):  # NaN and infinities are not JSON numbers: strings
        texts = text_array(array)
        special = pc.is_in(texts, pa.array(["NaN", "inf", "-inf"]))
        texts = pc.if_else(special, pc.binary_join_element_wise('"', texts, '"', ""), texts)
    elif pa.types.is_nested(t):
        texts = pa.array([json.dumps(_json_nested(v), ensure_ascii=False)
                          for v in _py_values(array)], pa.string())
    else:
        texts = _json_strings(text_array(array))
    return pc.fill_null(texts, "null")


def _json_strings(texts: pa.Array) -> pa.Array:
    """JSON string literals; only values with quotes, backslashes or control characters
    go through ``json.dumps`` (the rest just need their quotes)."""
    quoted = pc.binary_join_element_wise('"', texts, '"', "")
    needs_escape = pc.fill_null(pc.match_substring_regex(texts, r'["\\\x00-\x1f]'), False)
    if not pc.any(needs_escape).as_py():
        return quoted
    escaped = [json.dumps(v, ensure_ascii=False)
               for v in pc.filter(texts, needs_escape).to_pylist()]
    return pc.replace_with_mask(quoted, needs_escape, pa.array(escaped, pa.string()))


def csv_array(array: pa.Array) -> pa.Array:
    """Each value as an RFC 4180 field: quoted only when needed, empty for null."""
    texts = text_array(array)
    needs_quotes = pc.match_substring_regex(texts, r'[",\r\n]')
    quoted = pc.binary_join_element_wise('"', pc.replace_substring(texts, '"', '""'), '"', "")
    return pc.fill_null(pc.if_else(needs_quotes, quoted, texts), "")


def _json_nested(v: Any) -> Any:
    if isinstance(v, dict):
        return {k: _json_nested(x) for k, x in v.items()}
    if isinstance(v, list | tuple):
        return [_json_nested(x) for x in v]
    if isinstance(v, float) and not math.isfinite(v):
        return _float_text(v, pa.float64())
    if isinstance(v, bytes):
        return "\\x" + v.hex()
    if isinstance(v, dt.datetime | dt.date | dt.time):
        return v.isoformat()
    if isinstance(v, decimal.Decimal | dt.timedelta):
        return str(v)
    return v


# -- renderers ---------------------------------------------------------------------
def _width(text: str) -> int:
    """Columns a string takes on a terminal (East Asian wide characters take two)."""
    return sum(2 if unicodedata.east_asian_width(c) in "WF" else 1 for c in text)


def _cell_lines(text: str | None) -> list[str]:
    if text is None:
        return [NULL]
    return text.rstrip("\n").replace("\t", "\\t").replace("\r", "\\r").split("\n")


class Renderer:
    """Receives a result batch by batch and writes it to ``out``."""

    def __init__(self, out: TextIO) -> None:
        self.out = out
        self.rows = 0

    def begin(self, schema: pa.Schema) -> None:
        self.schema = schema

    def batch(self, batch: pa.RecordBatch) -> None:
        self.rows += batch.num_rows

    def end(self) -> None:
        pass


class TableRenderer(Renderer):
    """An aligned text table, numbers right-aligned, with a row count footer."""

    def __init__(self, out: TextIO, max_rows: int | None = None) -> None:
        super().__init__(out)
        self.max_rows = max_rows
        self.columns: list[list[str | None]] = []

    def begin(self, schema: pa.Schema) -> None:
        super().begin(schema)
        self.columns = [[] for _ in schema]

    def batch(self, batch: pa.RecordBatch) -> None:
        keep = batch.num_rows
        if self.max_rows is not None:
            keep = max(0, min(keep, self.max_rows - self.rows))
        super().batch(batch)
        if keep:
            part = batch.slice(0, keep)
            for i, column in enumerate(part.columns):
                self.columns[i].extend(text_values(column))

    def end(self) -> None:
        self.out.write(format_table(self.schema, self.columns))
        shown = len(self.columns[0]) if self.columns else 0
        plural = "row" if self.rows == 1 else "rows"
        if shown < self.rows:
            self.out.write(f"({self.rows} {plural}, first {shown} shown)\n")
        else:
            self.out.write(f"({self.rows} {plural})\n")


def format_table(schema: pa.Schema, columns: list[list[str | None]]) -> str:
    """The header, a rule and one line (or more, for multi-line cells) per row."""
    names = [f.name for f in schema]
    right = [_is_numeric(f.type) for f in schema]
    cells = [[_cell_lines(v) for v in column] for column in columns]
    widths = [
        max([_width(name)] + [_width(line) for cell in column for line in cell])
        for name, column in zip(names, cells, strict=True)
    ]

    def pad(text: str, width: int, align_right: bool) -> str:
        fill = " " * (width - _width(text))
        return fill + text if align_right else text + fill

    def line(parts: Iterable[str]) -> str:
        return (" " + " | ".join(parts)).rstrip() + "\n"

    lines = [line(pad(n, w, r) for n, w, r in zip(names, widths, right, strict=True))]
    lines.append("-" + "-+-".join("-" * w for w in widths) + "-\n")
    rows = len(columns[0]) if columns else 0
    for row in range(rows):
        row_cells = [column[row] for column in cells]
        height = max(len(c) for c in row_cells)
        for k in range(height):
            lines.append(line(
                pad(c[k] if k < len(c) else "", w, r)
                for c, w, r in zip(row_cells, widths, right, strict=True)
            ))
    return "".join(lines)


def _join_rows(pieces: list[pa.Array | str]) -> str:
    """Concatenate literal strings and string columns row-wise, one line per row."""
    lines = pc.binary_join_element_wise(*pieces, "")
    return "\n".join(lines.to_pylist()) + "\n"


class CsvRenderer(Renderer):
    """RFC 4180 CSV with a header row; NULL is an empty field. Rows are built by Arrow
    kernels a batch at a time (a row-by-row ``csv.writer`` is several times slower)."""

    def begin(self, schema: pa.Schema) -> None:
        super().begin(schema)
        self.started = False

    def _header(self) -> None:
        """Written with the first rows, so a query that fails before any prints nothing."""
        if not self.started:
            csv.writer(self.out, lineterminator="\n").writerow(self.schema.names)
            self.started = True

    def batch(self, batch: pa.RecordBatch) -> None:
        super().batch(batch)
        self._header()
        if not batch.num_rows:
            return
        if batch.num_columns == 0:
            self.out.write("\n" * batch.num_rows)
            return
        pieces: list[pa.Array | str] = []
        for i, column in enumerate(batch.columns):
            if i:
                pieces.append(",")
            pieces.append(csv_array(column))
        if len(pieces) == 1:  # an empty line would read back as no field at all
            pieces[0] = pc.if_else(pc.equal(pieces[0], ""), '""', pieces[0])
        self.out.write(_join_rows(pieces))

    def end(self) -> None:
        self._header()


class JsonRenderer(Renderer):
    """A JSON array of objects, one object per line (so it streams)."""

    def begin(self, schema: pa.Schema) -> None:
        super().begin(schema)
        self.keys = [json.dumps(name, ensure_ascii=False) for name in schema.names]

    def batch(self, batch: pa.RecordBatch) -> None:
        first = self.rows == 0
        super().batch(batch)
        if not batch.num_rows:
            return
        if first:
            self.out.write("[")  # with the first rows, so a failed query prints nothing
        if batch.num_columns == 0:
            text = "\n".join(["{}"] * batch.num_rows) + "\n"
        else:
            pieces: list[pa.Array | str] = []
            for i, (key, column) in enumerate(zip(self.keys, batch.columns, strict=True)):
                pieces += [("{" if i == 0 else ", ") + key + ": ", json_array(column)]
            pieces.append("}")
            text = _join_rows(pieces)
        lines = text.rstrip("\n").replace("\n", ",\n")
        self.out.write(("\n" if first else ",\n") + lines)

    def end(self) -> None:
        self.out.write("\n]\n" if self.rows else "[]\n")


def make_renderer(fmt: str, out: TextIO, max_rows: int | None = None) -> Renderer:
    """The renderer for output format ``fmt`` (one of :data:`FORMATS`), writing to ``out``."""
    if fmt == "table":
        return TableRenderer(out, max_rows)
    if fmt == "csv":
        return CsvRenderer(out)
    if fmt == "json":
        return JsonRenderer(out)
    raise ValueError(f"unknown output format {fmt!r}; choose one of {', '.join(FORMATS)}")


def render_table(table: pa.Table, out: TextIO, fmt: str = "table") -> None:
    """Write an in-memory Arrow table in ``fmt``."""
    renderer = make_renderer(fmt, out)
    renderer.begin(table.schema)
    for batch in table.to_batches():
        renderer.batch(batch)
    renderer.end()
