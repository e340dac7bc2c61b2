"""UPDATE / DELETE conditions with subqueries (``IN (SELECT ...)``, ``EXISTS``...).

DataFusion evaluates the condition on the version the write starts from (every
unversioned mention of the target table pinned to it) and the write changes the rows
whose addresses it returns. Each result is compared with a Python model of the rows
and with pylance reading the table after.
"""

from __future__ import annotations

from pathlib import Path

import lance
import numpy as np
import pyarrow as pa
import pytest

import lance_sql
from lance_sql.errors import InvalidInputError, LanceError, NotFoundError, RetryableConflict
from lance_sql.sql.dml import DeleteStatement, UpdateStatement, has_subquery, parse_dml

IDS = list(range(20))


@pytest.fixture
def root(tmp_path: Path) -> Path:
    """t: ids 0..19 in four fragments of five, id 3 already deleted; u: some ids."""
    data = pa.table({"id": pa.array(IDS, pa.int64()), "v": [f"s{i}" for i in IDS]})
    ds = lance_sql.write_dataset(data, tmp_path / "t.lance", max_rows_per_file=5)
    ds.delete("id = 3")
    lance_sql.write_dataset(pa.table({"id": pa.array([1, 2, 3, 7, 12, 19, 40], pa.int64()),
                                      "w": [10, 20, 30, 70, 120, 190, 400]}),
                            tmp_path / "u.lance")
    return tmp_path


U = {1: 10, 2: 20, 3: 30, 7: 70, 12: 120, 19: 190, 40: 400}
LIVE = [i for i in IDS if i != 3]


def _read(root: Path) -> dict[int, str]:
    """The rows of t as pylance reads them (id -> v)."""
    table = lance.dataset(root / "t.lance").to_table()
    ours = lance_sql.dataset(root / "t.lance").to_table()
    assert ours.sort_by("id").equals(table.sort_by("id"))
    return dict(zip(table["id"].to_pylist(), table["v"].to_pylist(), strict=True))


@pytest.mark.parametrize(("condition", "keep"), [
    ("id IN (SELECT id FROM u)", lambda i: i not in U),
    ("id NOT IN (SELECT id FROM u WHERE w > 50)", lambda i: i in (7, 12, 19)),
    ("EXISTS (SELECT 1 FROM u WHERE u.id = t.id AND u.w > 15)", lambda i: i not in (2, 7, 12, 19)),
    ("NOT EXISTS (SELECT 1 FROM u WHERE u.id = t.id)", lambda i: i in U),
    ("EXISTS (SELECT 1 FROM u WHERE u.id = 40)", lambda i: False),  # uncorrelated: all rows
    ("EXISTS (SELECT 1 FROM u WHERE u.id = 41)", lambda i: True),   # none
    ("id > (SELECT avg(id) FROM t) AND id % 2 = 0", lambda i: not (i > 9.5 and i % 2 == 0)),
])
def test_delete_with_subquery_conditions(root: Path, condition: str, keep) -> None:
    session = lance_sql.connect(root)
    before = lance_sql.dataset(root / "t.lance").version
    out = session.sql(f"DELETE FROM t WHERE {condition}").to_pydict()
    expected = {i: f"s{i}" for i in LIVE if keep(i)}
    assert out == {"num_deleted_rows": [len(LIVE) - len(expected)]}
    assert _read(root) == expected
    # one commit, even of no rows (as a DELETE with a plain condition)
    assert lance_sql.dataset(root / "t.lance").version == before + 1


def test_delete_with_an_alias_in_the_correlated_subquery(root: Path) -> None:
    session = lance_sql.connect(root)
    out = session.sql("DELETE FROM t AS x WHERE NOT EXISTS "
                      "(SELECT 1 FROM u WHERE u.id = x.id) OR x.id = 19").to_pydict()
    assert out == {"num_deleted_rows": [len(LIVE) - 4]}
    assert _read(root) == {1: "s1", 2: "s2", 7: "s7", 12: "s12"}


def test_update_with_subquery_conditions(root: Path) -> None:
    session = lance_sql.connect(root)
    out = session.sql("UPDATE t SET v = upper(v) || '!' "
                      "WHERE id IN (SELECT id FROM u WHERE w >= 20)").to_pydict()
    changed = [i for i in LIVE if i in U and U[i] >= 20]
    assert out == {"num_rows_updated": [len(changed)]}
    expected = {i: (f"S{i}!" if i in changed else f"s{i}") for i in LIVE}
    assert _read(root) == expected
    out = session.sql("UPDATE t x SET v = 'gone' WHERE NOT EXISTS "
                      "(SELECT 1 FROM u WHERE u.id = x.id) AND x.id < 6").to_pydict()
    assert out == {"num_rows_updated": [3]}  # 0, 4, 5
    expected.update({0: "gone", 4: "gone", 5: "gone"})
    assert _read(root) == expected


def test_update_with_a_subquery_keeps_stable_row_ids(tmp_path: Path) -> None:
    data = pa.table({"id": pa.array(range(6), pa.int64()), "v": [f"s{i}" for i in range(6)]})
    lance_sql.write_dataset(data, tmp_path / "t", enable_stable_row_ids=True)
    session = lance_sql.connect(tmp_path)
    out = session.sql("UPDATE t SET v = 'x' WHERE id IN (SELECT max(id) FROM t)").to_pydict()
    assert out == {"num_rows_updated": [1]}
    rows = session.sql("SELECT id, v, _rowid FROM t ORDER BY _rowid").to_pydict()
    assert rows == {"id": list(range(6)), "v": ["s0", "s1", "s2", "s3", "s4", "x"],
                    "_rowid": list(range(6))}


def test_a_subquery_on_the_target_reads_the_version_the_write_starts_from(root: Path) -> None:
    """The selector is asked for the rows of the very manifest the write commits
    against; the DataFusion query reads that version of t."""
    ds = lance_sql.dataset(root / "t.lance")
    seen = []

    def select(base):
        seen.append(base.version)
        session = lance_sql.connect(root)
        return session._rows_matching(str(root / "t.lance"), DeleteStatement(
            "t", "id IN (SELECT id FROM t WHERE id >= 17)"))(base)

    assert ds.delete("id >= 17", select_rows=select) == {"num_deleted_rows": 3}
    assert seen == [ds.version - 1]
    assert sorted(_read(root)) == [i for i in LIVE if i < 17]


def test_a_concurrent_delete_of_other_rows_is_rebased_not_lost(root: Path) -> None:
    """A delete found by subquery commits against its start version: a delete committed
    meanwhile (other rows of the same fragments) is rebased as for any delete."""
    ds = lance_sql.dataset(root / "t.lance")
    other = lance_sql.dataset(root / "t.lance")

    def select(base):
        other.delete("id = 1")  # commits while the first write is selecting
        return np.array([(0 << 32) | 2, (0 << 32) | 4], np.uint64)  # ids 2 and 4

    ds.delete("id IN (2, 4)", select_rows=select)
    assert sorted(_read(root)) == [i for i in LIVE if i not in (1, 2, 4)]


def test_a_concurrent_update_of_the_same_rows_is_a_retryable_conflict(root: Path) -> None:
    """The rows were found in the start version; a write that changed them meanwhile
    makes the commit a RetryableConflict, as for a plain DELETE, and nothing is lost."""
    ds = lance_sql.dataset(root / "t.lance")
    other = lance_sql.dataset(root / "t.lance")

    def select(base):
        other.update({"v": "'moved'"}, "id = 2")
        return np.array([(0 << 32) | 2], np.uint64)  # id 2, as the start version has it

    with pytest.raises(RetryableConflict):
        ds.delete("id = 2", select_rows=select)
    rows = _read(root)
    assert sorted(rows) == LIVE and rows[2] == "moved"


@pytest.mark.parametrize(("addresses", "error"), [
    ([(9 << 32) | 1], NotFoundError),        # no fragment 9
    ([(1 << 32) | 5], InvalidInputError),    # fragment 1 holds rows 0..4
])
def test_selected_addresses_outside_the_version_are_typed_errors(root: Path, addresses,
                                                                 error) -> None:
    ds = lance_sql.dataset(root / "t.lance")
    before = ds.version
    with pytest.raises(error):
        ds.delete("x", select_rows=lambda base: np.array(addresses, np.uint64))
    with pytest.raises(error):
        ds.update({"v": "'y'"}, select_rows=lambda base: np.array(addresses, np.uint64))
    assert lance_sql.dataset(root / "t.lance").version == before
    assert sorted(_read(root)) == LIVE


@pytest.mark.parametrize("sql", [
    "DELETE FROM t WHERE id IN (SELECT id FROM nosuch)",
    "DELETE FROM t WHERE id IN (SELECT nosuch FROM u)",
    "UPDATE t SET v = 'x' WHERE EXISTS (SELECT 1 FROM u WHERE u.nosuch = t.id)",
    "UPDATE t SET id = 'abc' WHERE id IN (SELECT id FROM u)",
    "DELETE FROM t WHERE id IN (SELECT id, w FROM u)",
])
def test_failing_subquery_conditions_are_typed_and_commit_nothing(root: Path, sql: str) -> None:
    session = lance_sql.connect(root)
    before = lance_sql.dataset(root / "t.lance").version
    with pytest.raises(LanceError):
        session.sql(sql)
    assert lance_sql.dataset(root / "t.lance").version == before
    assert _read(root) == {i: f"s{i}" for i in LIVE}


def test_has_subquery_sees_select_only_as_a_keyword() -> None:
    assert has_subquery("id IN (SELECT id FROM u)")
    assert has_subquery("exists (select 1)")
    assert not has_subquery("v = 'SELECT'")
    assert not has_subquery('"select" = 1')


def test_update_set_to_scalar_subqueries(root: Path) -> None:
    """SET c = (SELECT ...): DataFusion computes every assigned value of the rows, the
    target's own mentions pinned to the version the update starts from."""
    session = lance_sql.connect(root)
    out = session.sql("UPDATE t SET v = (SELECT max(v) FROM t) WHERE id < 3").to_pydict()
    assert out == {"num_rows_updated": [3]}  # ids 0, 1, 2
    expected = {i: ("s9" if i < 3 else f"s{i}") for i in LIVE}  # 's9' is the largest string
    assert _read(root) == expected
    out = session.sql("UPDATE t AS x SET v = 'u' || CAST((SELECT max(w) FROM u WHERE u.id = x.id) "
                      "AS VARCHAR), id = x.id + 100 "
                      "WHERE x.id IN (SELECT id FROM u)").to_pydict()
    hit = [i for i in LIVE if i in U]
    assert out == {"num_rows_updated": [len(hit)]}
    expected = {(i + 100 if i in U else i): (f"u{U[i]}" if i in U else v)
                for i, v in expected.items()}
    assert _read(root) == expected


def test_a_scalar_subquery_with_no_matching_row_commits_an_empty_update(root: Path) -> None:
    # pylance's update matching no row still commits a version (an empty Update)
    before = lance_sql.dataset(root / "t.lance").version
    out = lance_sql.connect(root).sql(
        "UPDATE t SET v = (SELECT 'x') WHERE id > 1000").to_pydict()
    assert out == {"num_rows_updated": [0]}
    after = lance_sql.dataset(root / "t.lance")
    assert after.version == before + 1
    assert after.versions()[-1]["operation"] == "update"
    assert _read(root) == {i: f"s{i}" for i in LIVE}


@pytest.mark.parametrize("sql", [
    "UPDATE t SET v = (SELECT CAST(id AS VARCHAR) FROM u)",  # more than one row
    "UPDATE t SET id = (SELECT 'abc')",                       # not a number
    "UPDATE t SET id = (SELECT max(nosuch) FROM u)",
])
def test_failing_scalar_subqueries_are_typed_and_commit_nothing(root: Path, sql: str) -> None:
    before = lance_sql.dataset(root / "t.lance").version
    with pytest.raises(LanceError):
        lance_sql.connect(root).sql(sql)
    assert lance_sql.dataset(root / "t.lance").version == before
    assert _read(root) == {i: f"s{i}" for i in LIVE}


def test_computed_values_must_name_each_row_once(root: Path) -> None:
    ds = lance_sql.dataset(root / "t.lance")
    twice = pa.table({"_rowaddr": pa.array([0, 0], pa.uint64()), "v": ["a", "b"]})
    with pytest.raises(InvalidInputError, match="twice"):
        ds.update({"v": "unused"}, select_values=lambda base: twice)
    with pytest.raises(InvalidInputError, match="_rowaddr then"):
        ds.update({"v": "unused"}, select_values=lambda base: twice.select(["v"]))
    assert sorted(_read(root)) == LIVE


def test_parse_finds_the_statements_where_outside_subqueries() -> None:
    """A SET subquery's own WHERE used to end the SET list."""
    assert parse_dml("UPDATE t SET v = (SELECT max(v) FROM u WHERE u.a = 1), w = 2 "
                     "WHERE id = 3") == UpdateStatement(
        "t", {"v": "(SELECT max(v) FROM u WHERE u.a = 1)", "w": "2"}, "id = 3")
