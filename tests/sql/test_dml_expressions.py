"""UPDATE / DELETE with the expressions pylance accepts there: ``IS [NOT] DISTINCT
FROM``, ``coalesce``, ``CASE`` (searched and simple), ``concat`` and ``||``.

Each statement runs through a lance_sql session on one copy of the table and through
pylance's own ``update`` / ``delete`` on another (pylance 14 refuses CASE there: those run
on our copy only); both copies are read by both libraries and compared with the rows a
hand-written model of the statement gives.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import lance
import pyarrow as pa
import pytest

import lance_sql
from lance_sql.errors import InvalidInputError

ROWS = {"id": [0, 1, 2, 3, 4, 5],
        "v": [1, None, 3, None, 5, 1],
        "w": [1, 2, None, None, 5, 0],
        "s": ["a", None, "c", "d", None, "a"]}
SCHEMA = pa.schema([("id", pa.int64()), ("v", pa.int64()), ("w", pa.int64()),
                    ("s", pa.string())])


@pytest.fixture
def copies(tmp_path: Path) -> tuple[Path, Path]:
    """The table twice: ``ours/t.lance`` for the session, ``theirs/t.lance`` for pylance."""
    ours, theirs = tmp_path / "ours", tmp_path / "theirs"
    ours.mkdir()
    lance.write_dataset(pa.table(ROWS, schema=SCHEMA), ours / "t.lance")
    shutil.copytree(ours, theirs)
    return ours, theirs


def _rows(path: Path) -> dict[str, list]:
    """The table as both libraries read it (they must agree), by id."""
    theirs = lance.dataset(path).to_table().sort_by("id")
    ours = lance_sql.dataset(path).to_table().sort_by("id")
    assert ours.equals(theirs)
    return theirs.to_pydict()


def _pylance_takes(sql: str) -> bool:
    """Whether pylance's update / delete take the expressions in ``sql`` (not CASE)."""
    return "CASE" not in sql


DELETES = [
    ("v IS DISTINCT FROM w", {1, 2, 5}),
    ("v IS NOT DISTINCT FROM w", {0, 3, 4}),
    ("v IS DISTINCT FROM NULL", {0, 2, 4, 5}),
    ("coalesce(v, w, -1) = -1", {3}),
    ("coalesce(s, 'none') = 'none'", {1, 4}),
    ("CASE WHEN v > 2 THEN true WHEN s = 'a' THEN true ELSE false END", {0, 2, 4, 5}),
    ("CASE s WHEN 'a' THEN v = 1 WHEN 'd' THEN w IS NULL END", {0, 3, 5}),
    ("s || 'x' = 'ax'", {0, 5}),
    ("concat(s, v) = 'c3'", {2}),
    ("concat(s, w) = 'd'", {3}),  # concat skips NULLs ('d' || NULL is NULL)
    ("concat(v, s, w) = '1a1'", {0}),
]


@pytest.mark.parametrize(("condition", "deleted"), DELETES)
def test_delete_conditions_as_pylance(copies: tuple[Path, Path], condition: str,
                                      deleted: set[int]) -> None:
    ours, theirs = copies
    out = lance_sql.connect(ours).sql(f"DELETE FROM t WHERE {condition}").to_pydict()
    assert out == {"num_deleted_rows": [len(deleted)]}
    if _pylance_takes(condition):
        lance.dataset(theirs / "t.lance").delete(condition)
    else:
        theirs = ours
    kept = [i for i in ROWS["id"] if i not in deleted]
    expected = {k: [col[i] for i in kept] for k, col in ROWS.items()}
    assert _rows(ours / "t.lance") == expected
    assert _rows(theirs / "t.lance") == expected


UPDATES = [
    # floats spelled as DataFusion (pylance's engine) spells them: 1.0, not pyarrow's 1
    ({"s": "concat(s, '-', v / 2.0)"}, None,
     {"s": ["a-0.5", "-", "c-1.5", "d-", "-2.5", "a-0.5"]}),
    ({"s": "concat(v * 1.0, 'x', w * 1e16)"}, None,
     {"s": ["1.0x1e16", "x2e16", "3.0x", "x", "5.0x5e16", "1.0x0.0"]}),
    ({"s": "concat(s, '-', v)"}, "v IS NOT DISTINCT FROM w",
     {"s": ["a-1", None, "c", "d-", "-5", "a"]}),
    ({"v": "coalesce(v, w, 0)"}, None, {"v": [1, 2, 3, 0, 5, 1]}),
    ({"s": "CASE WHEN v IS NULL THEN 'none' WHEN v > 2 THEN 'big' ELSE s END"}, None,
     {"s": ["a", "none", "big", "none", "big", "a"]}),
    ({"s": "s || '!'"}, "v IS DISTINCT FROM 1", {"s": ["a", None, "c!", "d!", None, "a"]}),
    ({"w": "CASE v WHEN 1 THEN 10 WHEN 3 THEN 30 END"}, None,
     {"w": [10, None, 30, None, None, 10]}),
    ({"w": "CASE WHEN s IS NOT DISTINCT FROM 'a' THEN coalesce(w, 0) + 100 ELSE w END",
      "s": "coalesce(s || '?', concat(v, w))"}, "id < 5",
     {"w": [101, 2, None, None, 5, 0], "s": ["a?", "2", "c?", "d?", "55", "a"]}),
]


@pytest.mark.parametrize(("values", "where", "changed"), UPDATES)
def test_update_values_as_pylance(copies: tuple[Path, Path], values: dict[str, str],
                                  where: str | None, changed: dict[str, list]) -> None:
    ours, theirs = copies
    assignments = ", ".join(f"{c} = {e}" for c, e in values.items())
    sql = f"UPDATE t SET {assignments}" + (f" WHERE {where}" if where else "")
    lance_sql.connect(ours).sql(sql)
    if _pylance_takes(sql):
        lance.dataset(theirs / "t.lance").update(values, where)
    else:
        theirs = ours
    expected = {**ROWS, **changed}
    assert _rows(ours / "t.lance") == expected
    assert _rows(theirs / "t.lance") == expected


@pytest.mark.parametrize(("sql", "message"), [
    ("UPDATE t SET v = CASE WHEN v > 1 THEN 'x' END", "literal 'x'|do not fit"),
    ("DELETE FROM t WHERE CASE WHEN v > 1 THEN 1 END", "boolean"),
    # beyond the filter language's types: DataFusion computes it, and fails on a value
    ("UPDATE t SET v = coalesce(v, s)", "(?i)cannot cast string"),
    # beyond the filter language: DataFusion parses it (and says what it expected)
    ("DELETE FROM t WHERE v IS DISTINCT 1", "(?i)expected"),
])
def test_bad_value_forms_are_typed_and_commit_nothing(copies: tuple[Path, Path], sql: str,
                                                      message: str) -> None:
    ours, _ = copies
    before = lance_sql.dataset(ours / "t.lance").version
    with pytest.raises(InvalidInputError, match=message):
        lance_sql.connect(ours).sql(sql)
    assert lance_sql.dataset(ours / "t.lance").version == before
    assert _rows(ours / "t.lance") == ROWS
