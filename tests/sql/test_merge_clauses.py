"""``MERGE INTO`` with SQL's clauses: several WHEN clauses of each kind taken in order,
conditions and values in full SQL, DELETE / DO NOTHING, different UPDATE and INSERT
column sets, the cardinality rule, and the merge_insert fast path kept for the forms
it runs.

Random statements are checked against a pure-Python model of SQL MERGE semantics
(every row compared, pylance reading the result too); forms pylance's merge_insert
runs are checked against it on twin tables (rows, row ids and row versions).
"""

from __future__ import annotations

import random
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import lance
import numpy as np
import pyarrow as pa
import pytest

import lance_sql
from lance_sql.errors import (
    InvalidInputError,
    NotFoundError,
    SchemaError,
    StatementRefusedError,
)
from lance_sql.sql.merge import parse_merge
from lance_sql.sql.writes import MERGE_PATHS

Row = tuple  # (id, a, b): the target's columns; the source has the same names

# A condition or value: its SQL and the Python that computes it from the target row
# (t) and the source row (s), each a dict or None; None values follow SQL (a condition
# on NULL is not true).
Fn = Callable[[dict | None, dict | None], object]


@dataclass(frozen=True)
class Choice:
    sql: str
    fn: Fn


MATCHED_CONDITIONS = [
    Choice("s.a > t.a", lambda t, s: s["a"] > t["a"]),
    Choice("t.a % 2 = 0", lambda t, s: t["a"] % 2 == 0),
    Choice("substr(s.b, 1, 1) = 'p'", lambda t, s: s["b"][:1] == "p"),
]
MATCHED_SETS = [
    ("a", Choice("s.a", lambda t, s: s["a"])),
    ("a", Choice("t.a + s.a * 10", lambda t, s: t["a"] + s["a"] * 10)),
    ("b", Choice("concat(t.b, s.b)", lambda t, s: t["b"] + s["b"])),
    ("b", Choice("upper(s.b)", lambda t, s: s["b"].upper())),
]
NOT_MATCHED_CONDITIONS = [
    Choice("s.a > 2", lambda t, s: s["a"] > 2),
    Choice("s.b <> 'q'", lambda t, s: s["b"] != "q"),
]
INSERTS = [  # (column list, values) or None: INSERT *
    None,
    (("id", "a"), (Choice("s.id", lambda t, s: s["id"]),
                   Choice("s.a * 100", lambda t, s: s["a"] * 100))),
    (("b", "id"), (Choice("lower(s.b) || '!'", lambda t, s: s["b"].lower() + "!"),
                   Choice("s.id", lambda t, s: s["id"]))),
]
BY_SOURCE_CONDITIONS = [
    Choice("t.a > 3", lambda t, s: t["a"] > 3),
    Choice("t.b = 'p'", lambda t, s: t["b"] == "p"),
]
BY_SOURCE_SETS = [
    ("a", Choice("t.a - 1", lambda t, s: t["a"] - 1)),
    ("b", Choice("'gone'", lambda t, s: "gone")),
]


@dataclass(frozen=True)
class Clause:
    kind: str                     # "matched", "not matched", "by source"
    action: str                   # "update", "delete", "insert", "nothing"
    condition: Choice | None
    sets: tuple = ()              # update: ((column, Choice), ...)
    insert: tuple | None = None   # insert: INSERTS entry

    def sql(self) -> str:
        head = {"matched": "WHEN MATCHED", "not matched": "WHEN NOT MATCHED",
                "by source": "WHEN NOT MATCHED BY SOURCE"}[self.kind]
        if self.condition is not None:
            head += f" AND {self.condition.sql}"
        if self.action == "nothing":
            return f"{head} THEN DO NOTHING"
        if self.action == "delete":
            return f"{head} THEN DELETE"
        if self.action == "update":
            return f"{head} THEN UPDATE SET " + ", ".join(f"{c} = {v.sql}" for c, v in self.sets)
        if self.insert is None:
            return f"{head} THEN INSERT *"
        columns, values = self.insert
        return (f"{head} THEN INSERT ({', '.join(columns)}) "
                f"VALUES ({', '.join(v.sql for v in values)})")


def random_clauses(rng: random.Random) -> list[Clause]:
    clauses: list[Clause] = []
    for _ in range(rng.randint(1, 5)):
        kind = rng.choice(["matched", "not matched", "by source"])
        if any(c.kind == kind and c.condition is None for c in clauses):
            continue  # an unconditional clause takes every row of its kind
        if kind == "matched":
            condition = rng.choice([None, *MATCHED_CONDITIONS])
            action = rng.choice(["update", "update", "delete", "nothing"])
            sets = dict(rng.sample(MATCHED_SETS, rng.randint(1, 2)))
            clauses.append(Clause(kind, action, condition, tuple(sets.items())))
        elif kind == "not matched":
            condition = rng.choice([None, *NOT_MATCHED_CONDITIONS])
            action = rng.choice(["insert", "insert", "nothing"])
            clauses.append(Clause(kind, action, condition, insert=rng.choice(INSERTS)))
        else:
            condition = rng.choice([None, *BY_SOURCE_CONDITIONS])
            action = rng.choice(["update", "delete", "nothing"])
            sets = dict(rng.sample(BY_SOURCE_SETS, rng.randint(1, 2)))
            clauses.append(Clause(kind, action, condition, tuple(sets.items())))
    return clauses or [Clause("matched", "delete", None)]


def model(target: list[Row], source: list[Row], clauses: list[Clause]
          ) -> tuple[list[tuple[int, Row]], list[Row], dict[str, int]] | None:
    """SQL MERGE's result: (kept and updated rows with their original position, inserted
    rows, counts), or None for a cardinality violation."""
    names = ("id", "a", "b")
    t_rows = [dict(zip(names, r, strict=True)) for r in target]
    s_rows = [dict(zip(names, r, strict=True)) for r in source]
    matches = {i: [j for j, s in enumerate(s_rows) if t["id"] is not None and t["id"] == s["id"]]
               for i, t in enumerate(t_rows)}
    if any(c.kind == "matched" and c.action in ("update", "delete") for c in clauses) and \
            any(len(m) > 1 for m in matches.values()):
        return None

    def first(kind: str, t: dict | None, s: dict | None) -> Clause | None:
        for c in clauses:
            if c.kind == kind and (c.condition is None or c.condition.fn(t, s)):
                return c
        return None

    kept: list[tuple[int, Row]] = []
    inserted: list[Row] = []
    counts = {"num_inserted_rows": 0, "num_updated_rows": 0, "num_deleted_rows": 0}
    for i, t in enumerate(t_rows):
        clause = None
        s = None
        for j in matches[i]:
            s = s_rows[j]
            clause = first("matched", t, s)
            if clause is not None:
                break
        if not matches[i]:
            clause = first("by source", t, None)
        if clause is None or clause.action == "nothing":
            kept.append((i, target[i]))
        elif clause.action == "delete":
            counts["num_deleted_rows"] += 1
        else:
            new = dict(t)
            for column, value in clause.sets:
                new[column] = value.fn(t, s)
            kept.append((i, tuple(new[n] for n in names)))
            counts["num_updated_rows"] += 1
    matched_sources = {j for m in matches.values() for j in m}
    for j, s in enumerate(s_rows):
        if j in matched_sources:
            continue
        clause = first("not matched", None, s)
        if clause is None or clause.action == "nothing":
            continue
        if clause.insert is None:
            inserted.append(source[j])
        else:
            columns, values = clause.insert
            new = dict.fromkeys(names)
            for column, value in zip(columns, values, strict=True):
                new[column] = value.fn(None, s)
            inserted.append(tuple(new[n] for n in names))
        counts["num_inserted_rows"] += 1
    return kept, inserted, counts


def random_rows(rng: random.Random, n: int) -> list[Row]:
    return [(rng.choice([None, *range(7)]) if rng.random() < 0.1 else rng.randrange(7),
             rng.randrange(6), rng.choice(["p", "q", "pa", "x"])) for _ in range(n)]


def table_of(rows: list[Row]) -> pa.Table:
    return pa.table({"id": pa.array([r[0] for r in rows], pa.int64()),
                     "a": pa.array([r[1] for r in rows], pa.int64()),
                     "b": pa.array([r[2] for r in rows], pa.string())})


def write_target(path: Path, rows: list[Row], split: int) -> None:
    """The target with stable row ids (row i has id i), in two fragments at ``split``."""
    lance_sql.write_dataset(table_of(rows[:split]), path, enable_stable_row_ids=True)
    if split < len(rows):
        lance_sql.write_dataset(table_of(rows[split:]), path, mode="append")


def read_rows(path: Path) -> list[dict]:
    table = lance_sql.dataset(path).to_table(columns=["id", "a", "b", "_rowid"])
    return table.to_pylist()


def key(row: Row) -> tuple:
    return tuple((v is None, v) for v in row)


def values_sql(rows: list[Row]) -> str:
    def lit(v: object) -> str:
        return "NULL" if v is None else f"'{v}'" if isinstance(v, str) else str(v)

    return ", ".join(f"(CAST({lit(r[0])} AS BIGINT), {lit(r[1])}, {lit(r[2])})" for r in rows)


def merge_sql(source: list[Row], clauses: list[Clause], source_table: bool) -> str:
    using = "src AS s" if source_table else \
        f"(VALUES {values_sql(source)}) AS s(id, a, b)"
    return f"MERGE INTO t USING {using} ON t.id = s.id " + " ".join(c.sql() for c in clauses)


def check_against_model(root: Path, target: list[Row], source: list[Row],
                        clauses: list[Clause], sql: str) -> None:
    path = root / "t.lance"
    session = lance_sql.connect(root)
    expected = model(target, source, clauses)
    if expected is None:
        before = lance_sql.dataset(path).version
        with pytest.raises(InvalidInputError, match="several source rows"):
            session.sql(sql)
        assert lance_sql.dataset(path).version == before
        assert sorted(((r["id"], r["a"], r["b"]) for r in read_rows(path)), key=key) == \
            sorted(target, key=key)
        return
    kept, inserted, counts = expected
    out = session.sql(sql).to_pydict()
    assert {k: out[k][0] for k in counts} == counts, sql
    got = read_rows(path)
    old = {r["_rowid"]: (r["id"], r["a"], r["b"]) for r in got if r["_rowid"] < len(target)}
    assert old == dict(kept), sql  # kept rows keep their row ids, updated ones too
    new = [(r["id"], r["a"], r["b"]) for r in got if r["_rowid"] >= len(target)]
    assert sorted(new, key=key) == sorted(inserted, key=key), sql
    theirs = lance.dataset(str(path)).to_table(columns=["id", "a", "b"]).to_pylist()
    assert sorted((tuple(r.values()) for r in theirs), key=key) == \
        sorted([r for _, r in kept] + inserted, key=key)


@pytest.mark.parametrize("seed", range(80))
def test_random_merges_match_the_sql_model(tmp_path: Path, seed: int) -> None:
    rng = random.Random(seed)
    target = random_rows(rng, rng.randint(0, 8))
    source = random_rows(rng, rng.randint(1, 6))
    clauses = random_clauses(rng)
    root = tmp_path / "root"
    write_target(root / "t.lance", target, rng.randint(0, len(target)))
    source_table = rng.random() < 0.5
    if source_table:
        lance_sql.write_dataset(table_of(source), root / "src.lance")
    sql = merge_sql(source, clauses, source_table)
    statement = parse_merge(sql)
    assert statement is not None
    fast = statement.merge_insert_form() is not None
    before = dict(MERGE_PATHS.counts)
    check_against_model(root, target, source, clauses, sql)
    taken = "merge_insert" if fast else "general"
    assert MERGE_PATHS.counts[taken] == before[taken] + 1
    if fast:
        # the same statement on the general path (a clause that never acts forces it)
        twin = tmp_path / "twin"
        write_target(twin / "t.lance", target, len(target))
        if source_table:
            lance_sql.write_dataset(table_of(source), twin / "src.lance")
        forced = sql.replace(" WHEN ", " WHEN NOT MATCHED BY SOURCE AND substr('x', 1, 1) = 'y' "
                                       "THEN DELETE WHEN ", 1)
        forced_statement = parse_merge(forced)
        assert forced_statement is not None and forced_statement.merge_insert_form() is None
        check_against_model(twin, target, source, clauses, forced)


def test_each_seed_mix_covers_both_paths_and_every_action() -> None:
    """The random statements above exercise every clause kind and action, on both paths."""
    seen, paths = set(), set()
    for seed in range(40):
        rng = random.Random(seed)
        random_rows(rng, rng.randint(0, 8))
        source = random_rows(rng, rng.randint(1, 6))
        clauses = random_clauses(rng)
        seen.update((c.kind, c.action, c.condition is None) for c in clauses)
        statement = parse_merge(merge_sql(source, clauses, False))
        assert statement is not None
        paths.add(statement.merge_insert_form() is not None)
    assert paths == {True, False}
    assert {(k, a) for k, a, _ in seen} == {
        ("matched", "update"), ("matched", "delete"), ("matched", "nothing"),
        ("not matched", "insert"), ("not matched", "nothing"),
        ("by source", "update"), ("by source", "delete"), ("by source", "nothing")}


# -- fixed cases -------------------------------------------------------------------------------
@pytest.fixture
def root(tmp_path: Path) -> Path:
    root = tmp_path / "root"
    lance_sql.write_dataset(pa.table({"id": pa.array([1, 2, 3, 4], pa.int64()),
                                      "qty": pa.array([10, 20, 30, 40], pa.int64()),
                                      "note": ["a", "b", "c", "d"]}),
                            root / "t.lance", enable_stable_row_ids=True)
    return root


def versions(root: Path) -> int:
    return lance_sql.dataset(root / "t.lance").version


def test_the_simple_upsert_stays_on_merge_insert(root: Path) -> None:
    session = lance_sql.connect(root)
    before = dict(MERGE_PATHS.counts)
    out = session.sql("MERGE INTO t USING (VALUES (2, 5, 'x'), (9, 1, 'y')) AS s(id, qty, note) "
                      "ON t.id = s.id WHEN MATCHED THEN UPDATE SET * "
                      "WHEN NOT MATCHED BY TARGET THEN INSERT *").to_pydict()
    assert out["num_updated_rows"] == [1] and out["num_inserted_rows"] == [1]
    assert session.sql("SELECT id, qty, note FROM t ORDER BY id").to_pydict() == {
        "id": [1, 2, 3, 4, 9], "qty": [10, 5, 30, 40, 1], "note": ["a", "x", "c", "d", "y"]}
    assert MERGE_PATHS.counts == {"merge_insert": before["merge_insert"] + 1,
                                  "general": before["general"]}


def test_general_merge_is_one_commit_with_row_lineage_and_change_feed(root: Path) -> None:
    session = lance_sql.connect(root)
    out = session.sql(
        "MERGE INTO t USING (VALUES (1, -10), (2, 5), (7, 70)) AS s(id, delta) ON t.id = s.id "
        "WHEN MATCHED AND t.qty + s.delta <= 0 THEN DELETE "
        "WHEN MATCHED THEN UPDATE SET qty = t.qty + s.delta "
        "WHEN NOT MATCHED THEN INSERT (id, qty) VALUES (s.id, s.delta) "
        "WHEN NOT MATCHED BY SOURCE AND t.id = 4 THEN UPDATE SET note = 'stale'").to_pydict()
    assert out == {"num_inserted_rows": [1], "num_updated_rows": [2], "num_deleted_rows": [1],
                   "version": [2]}
    got = session.sql("SELECT _rowid, _row_created_at_version AS c, "
                      "_row_last_updated_at_version AS u, id, qty, note FROM t ORDER BY id"
                      ).to_pydict()
    assert got == {"_rowid": [1, 2, 3, 4], "c": [1, 1, 1, 2], "u": [2, 1, 2, 2],
                   "id": [2, 3, 4, 7], "qty": [25, 30, 40, 70],
                   "note": ["b", "c", "stale", None]}
    changes = session.sql("SELECT _change_type AS k, id FROM table_changes('t', 2, 2) "
                          "ORDER BY id, k").to_pydict()
    assert list(zip(changes["k"], changes["id"], strict=True)) == [
        ("delete", 1), ("update_postimage", 2), ("update_preimage", 2),
        ("update_postimage", 4), ("update_preimage", 4), ("insert", 7)]
    theirs = lance.dataset(str(root / "t.lance"))
    assert theirs.version == 2
    assert theirs.to_table().sort_by("id").to_pydict() == {
        "id": [2, 3, 4, 7], "qty": [25, 30, 40, 70], "note": ["b", "c", "stale", None]}


@pytest.mark.parametrize("build, sql_clauses, path", [
    (lambda b: b.when_matched_delete().when_not_matched_insert_all(),
     "WHEN MATCHED THEN DELETE WHEN NOT MATCHED THEN INSERT *", "merge_insert"),
    (lambda b: b.when_matched_delete(), "WHEN MATCHED THEN DELETE", "merge_insert"),
    (lambda b: b.when_matched_update_all("source.qty > 1").when_not_matched_by_source_delete(),
     "WHEN MATCHED AND s.qty > 1 THEN UPDATE SET * WHEN MATCHED THEN DO NOTHING "
     "WHEN NOT MATCHED BY SOURCE THEN DELETE", "merge_insert"),
    (lambda b: b.when_matched_delete().when_not_matched_insert_all(),
     "WHEN MATCHED AND substr(t.note, 1, 1) = 'n' THEN DELETE WHEN NOT MATCHED THEN INSERT *",
     "general"),
    (lambda b: b.when_matched_update_all(),
     "WHEN MATCHED AND substr(s.note, 1, 1) <> '?' THEN UPDATE SET *", "general"),
    (lambda b: b.when_matched_update_all().when_not_matched_by_source_delete("id > 3"),
     "WHEN MATCHED THEN UPDATE SET qty = s.qty, note = s.note "
     "WHEN NOT MATCHED BY SOURCE AND substr(t.note, 1, 1) = 'n' AND t.id > 3 THEN DELETE",
     "general"),
])
def test_merges_match_pylance_merge_insert_on_twin_tables(
        tmp_path: Path, build: Callable, sql_clauses: str, path: str) -> None:
    """Forms pylance's merge_insert runs too, on either path here (WHEN MATCHED THEN
    DELETE is its when_matched_delete): same counts, rows, row ids and row versions,
    read by either library."""
    ours, theirs = tmp_path / "root" / "t.lance", tmp_path / "theirs"
    data = pa.table({"id": pa.array(range(12), pa.int64()),
                     "qty": pa.array(range(0, 120, 10), pa.int64()),
                     "note": [f"n{i}" for i in range(12)]})
    lance_sql.write_dataset(data, ours, enable_stable_row_ids=True, max_rows_per_file=5)
    shutil.copytree(ours, theirs)
    source = pa.table({"id": pa.array([2, 7, 20, 21], pa.int64()),
                       "qty": pa.array([1, 2, 3, 4], pa.int64()), "note": ["w", "x", "y", "z"]})
    lance_sql.write_dataset(source, tmp_path / "root" / "src.lance")
    before = dict(MERGE_PATHS.counts)
    got = lance_sql.connect(tmp_path / "root").sql(
        f"MERGE INTO t USING src AS s ON t.id = s.id {sql_clauses}").to_pydict()
    assert MERGE_PATHS.counts[path] == before[path] + 1
    want = build(lance.dataset(str(theirs)).merge_insert("id")).execute(source)
    assert {k: got[k][0] for k in want} == want
    columns = ["id", "qty", "note", "_rowid", "_row_created_at_version",
               "_row_last_updated_at_version"]
    for reader in (lance, lance_sql):
        a = reader.dataset(str(ours)).to_table(columns=columns).sort_by("id")
        b = reader.dataset(str(theirs)).to_table(columns=columns).sort_by("id")
        assert a.to_pylist() == b.to_pylist()
    assert lance_sql.dataset(ours).manifest.next_row_id == \
        lance_sql.dataset(theirs).manifest.next_row_id


def test_cardinality_counts_acting_clauses_only(root: Path) -> None:
    """Two source rows matching one target row: an error when a MATCHED clause may
    update or delete (even if neither pair's condition holds), nothing committed; a
    MERGE whose matched rows are left alone inserts as usual."""
    session = lance_sql.connect(root)
    dup = "(VALUES (2, 1), (2, 2), (8, 3)) AS s(id, qty)"
    for clauses in ("WHEN MATCHED THEN UPDATE SET qty = s.qty",
                    "WHEN MATCHED AND s.qty > 5 THEN DELETE",
                    "WHEN MATCHED AND upper(t.note) = 'B' THEN UPDATE SET qty = s.qty "
                    "WHEN NOT MATCHED THEN INSERT *"):
        with pytest.raises(InvalidInputError, match="several source rows"):
            session.sql(f"MERGE INTO t USING {dup} ON t.id = s.id {clauses}")
    assert versions(root) == 1
    out = session.sql(f"MERGE INTO t USING {dup} ON t.id = s.id WHEN MATCHED THEN DO NOTHING "
                      "WHEN NOT MATCHED AND s.qty > 0 THEN INSERT (id, qty) VALUES (s.id, s.qty)"
                      ).to_pydict()
    assert out["num_inserted_rows"] == [1] and versions(root) == 2


@pytest.mark.parametrize("sql, error, match", [
    ("WHEN MATCHED THEN UPDATE SET nope = s.qty", NotFoundError, "no column 'nope'"),
    ("WHEN NOT MATCHED AND s.qty > 0 THEN INSERT (id, nope) VALUES (s.id, 1)", NotFoundError,
     "no column 'nope'"),
    ("WHEN MATCHED AND s.qty > 0 THEN UPDATE SET qty = 'abc'", SchemaError, "column 'qty'"),
    ("WHEN MATCHED THEN UPDATE SET id = s.qty", StatementRefusedError, "key column 'id'"),
    ("WHEN MATCHED THEN UPDATE SET ID = 5", StatementRefusedError, "key column 'id'"),
    ("WHEN MATCHED THEN DELETE WHEN MATCHED AND s.qty > 0 THEN DELETE", InvalidInputError,
     "follows an unconditional"),
    ("WHEN NOT MATCHED AND t.qty > 0 THEN INSERT *", InvalidInputError, "no 't' row"),
    ("WHEN NOT MATCHED BY SOURCE THEN UPDATE SET qty = s.qty", InvalidInputError, "no 's' row"),
    ("WHEN NOT MATCHED BY SOURCE THEN INSERT *", InvalidInputError, "expected UPDATE SET"),
    ("WHEN MATCHED THEN UPDATE SET qty = t.nope", NotFoundError, "nope"),
    ("WHEN MATCHED AND qty > 1 THEN DELETE WHEN MATCHED THEN DO NOTHING", InvalidInputError,
     "mbiguous"),
])
def test_bad_merges_are_typed_errors_and_commit_nothing(root: Path, sql: str, error: type,
                                                        match: str) -> None:
    session = lance_sql.connect(root)
    with pytest.raises(error, match=match):
        session.sql(f"MERGE INTO t USING (VALUES (2, 7)) AS s(id, qty) ON t.id = s.id {sql}")
    assert versions(root) == 1


def test_insert_and_update_may_set_different_columns_nulls_checked(tmp_path: Path) -> None:
    schema = pa.schema([pa.field("id", pa.int64(), False), pa.field("v", pa.int64(), False),
                        pa.field("w", pa.string())])
    root = tmp_path / "root"
    lance_sql.write_dataset(pa.table({"id": [1, 2], "v": [10, 20], "w": ["a", "b"]},
                                     schema=schema), root / "t.lance")
    session = lance_sql.connect(root)
    with pytest.raises(SchemaError, match="'v'"):  # INSERT leaves a non-nullable column NULL
        session.sql("MERGE INTO t USING (VALUES (5, 'x')) AS s(id, w) ON t.id = s.id "
                    "WHEN MATCHED THEN UPDATE SET w = s.w "
                    "WHEN NOT MATCHED THEN INSERT (id, w) VALUES (s.id, s.w)")
    with pytest.raises(SchemaError, match="'v'"):  # UPDATE sets one NULL
        session.sql("MERGE INTO t USING (VALUES (1, 'x')) AS s(id, w) ON t.id = s.id "
                    "WHEN MATCHED AND s.w = 'x' THEN UPDATE SET v = NULL")
    assert lance_sql.dataset(root / "t.lance").version == 1
    out = session.sql("MERGE INTO t USING (VALUES (2, 'x'), (5, 'y')) AS s(id, w) "
                      "ON t.id = s.id WHEN MATCHED THEN UPDATE SET w = s.w "
                      "WHEN NOT MATCHED THEN INSERT (id, v) VALUES (s.id, length(s.w) * 7)"
                      ).to_pydict()
    assert out["num_updated_rows"] == [1] and out["num_inserted_rows"] == [1]
    assert lance.dataset(str(root / "t.lance")).to_table().sort_by("id").to_pydict() == {
        "id": [1, 2, 5], "v": [10, 20, 7], "w": ["a", "x", None]}


def test_values_are_computed_only_on_their_clause_rows(root: Path) -> None:
    """``100 / s.d`` would divide by zero on the row another clause takes."""
    session = lance_sql.connect(root)
    session.sql("MERGE INTO t USING (VALUES (1, 0), (2, 4)) AS s(id, d) ON t.id = s.id "
                "WHEN MATCHED AND s.d = 0 THEN DELETE "
                "WHEN MATCHED THEN UPDATE SET qty = 100 / s.d")
    assert lance_sql.connect(root).sql("SELECT id, qty FROM t ORDER BY id").to_pydict() == \
        {"id": [2, 3, 4], "qty": [25, 30, 40]}


def test_a_subquery_source_reads_the_version_the_merge_starts_from(root: Path) -> None:
    session = lance_sql.connect(root)
    session.sql("MERGE INTO t USING (SELECT id, qty FROM t WHERE id > 2) AS s ON t.id = s.id "
                "WHEN MATCHED AND s.qty > (SELECT avg(qty) + 10 FROM t) THEN DELETE "
                "WHEN MATCHED THEN UPDATE SET note = 'kept'")
    assert session.sql("SELECT id, note FROM t ORDER BY id").to_pydict() == \
        {"id": [1, 2, 3], "note": ["a", "b", "kept"]}


def test_view_typed_values_are_stored(root: Path) -> None:
    """DataFusion types ``upper(NULL)`` as ``string_view``, whose rows pyarrow cannot
    take (``array_take`` has no kernel for it): the general path failed there."""
    session = lance_sql.connect(root)
    session.sql("MERGE INTO t USING (VALUES (9, NULL)) AS s(id, w) ON t.id = s.id "
                "WHEN MATCHED THEN DELETE "
                "WHEN NOT MATCHED AND s.id > 0 THEN INSERT (id, note) VALUES (s.id, upper(s.w))")
    assert session.sql("SELECT id, note FROM t WHERE id = 9").to_pylist() == \
        [{"id": 9, "note": None}]


def test_general_values_take_the_column_types(tmp_path: Path) -> None:
    """Array literals into a fixed-size list, doubles into a decimal (rounded as
    DataFusion's CAST), intervals on timestamps; a list of another length is a
    SchemaError naming the column."""
    import datetime as dt
    from decimal import Decimal

    schema = pa.schema([pa.field("id", pa.int32()), pa.field("f", pa.list_(pa.float32(), 2)),
                        pa.field("d", pa.decimal128(5, 2)), pa.field("ts", pa.timestamp("us"))])
    root = tmp_path / "root"
    day = dt.datetime(2024, 1, 1)
    lance_sql.write_dataset(pa.table({"id": [1, 2], "f": [[1, 2], [3, 4]],
                                      "d": [Decimal("1.00"), Decimal("2.00")], "ts": [day, day]},
                                     schema=schema), root / "t.lance")
    session = lance_sql.connect(root)
    session.sql("MERGE INTO t USING (VALUES (1, 2.675), (5, 1.5)) AS s(id, x) ON t.id = s.id "
                "WHEN MATCHED AND substr('a', 1, 1) = 'a' THEN UPDATE SET f = [9.0, 8.0], "
                "d = s.x, ts = t.ts + INTERVAL '1 day' "
                "WHEN NOT MATCHED THEN INSERT (id, d, f) VALUES (s.id, s.x, [s.x, 0])")
    theirs = lance.dataset(str(root / "t.lance")).to_table()
    assert theirs.schema == schema
    assert theirs.sort_by("id").to_pylist() == [
        {"id": 1, "f": [9.0, 8.0], "d": Decimal("2.68"), "ts": day + dt.timedelta(days=1)},
        {"id": 2, "f": [3.0, 4.0], "d": Decimal("2.00"), "ts": day},
        {"id": 5, "f": [1.5, 0.0], "d": Decimal("1.50"), "ts": None}]
    with pytest.raises(SchemaError, match="column 'f'"):
        session.sql("MERGE INTO t USING (VALUES (1, 2.0)) AS s(id, x) ON t.id = s.id "
                    "WHEN MATCHED AND s.x > 0 THEN UPDATE SET f = [1.0] "
                    "WHEN MATCHED THEN DELETE")
    assert lance_sql.dataset(root / "t.lance").version == 2


def test_a_concurrent_insert_of_a_key_the_merge_inserts_is_a_conflict(root: Path) -> None:
    """As merge_insert's: the general path's inserted keys are checked against rows a
    writer committed after the version the merge read."""
    from lance_sql.errors import RetryableConflict
    from lance_sql.table.ops.merge_insert import RowChanges, apply_row_changes

    path = root / "t.lance"
    new_row = pa.table({"id": pa.array([9], pa.int64()), "qty": pa.array([1], pa.int64()),
                        "note": ["mine"]})

    def racing(base: object) -> RowChanges:
        lance_sql.write_dataset(new_row, path, mode="append")  # the other writer wins
        return RowChanges(np.zeros(0, np.uint64), (), (new_row,))

    with pytest.raises(RetryableConflict, match="keys"):
        apply_row_changes(lance_sql.dataset(path).write_context(), racing, ["id"])
    assert lance_sql.dataset(path).to_table().column("id").to_pylist() == [1, 2, 3, 4, 9]


def test_row_changes_touching_a_row_twice_are_refused(root: Path) -> None:
    from lance_sql.table.ops.merge_insert import RowChanges, apply_row_changes

    path = root / "t.lance"
    qty = pa.table({"qty": pa.array([5], pa.int64())})
    twice = RowChanges(np.array([1], np.uint64), ((np.array([1], np.uint64), qty),), ())
    with pytest.raises(InvalidInputError, match="twice"):
        apply_row_changes(lance_sql.dataset(path).write_context(), lambda _: twice)
    dead = RowChanges(np.array([7], np.uint64), (), ())  # past the fragment's 4 rows
    with pytest.raises(InvalidInputError, match="past"):
        apply_row_changes(lance_sql.dataset(path).write_context(), lambda _: dead)
    assert versions(root) == 1


# (statement, qty and note of id 2 after it): conditions that read the source's columns
_SOURCE_CONDITIONS = [
    ("USING (VALUES (2, 3)) AS s(id, qty) ON t.id = s.id "
     "WHEN MATCHED AND s.qty > 5 THEN UPDATE SET qty = s.qty * 100", (20, "b")),
    ("USING (VALUES (2, 3, 1)) AS s(id, qty, flag) ON t.id = s.id "
     "WHEN MATCHED AND s.flag = 1 THEN UPDATE SET qty = s.qty", (3, "b")),
    ("USING (VALUES (2, 3, 'zz')) AS s(id, qty, note) ON t.id = s.id "
     "WHEN MATCHED AND s.note = 'zz' THEN UPDATE SET note = 'upd', qty = s.qty", (3, "upd")),
    ("USING (VALUES (2, 3)) AS s(k, qty) ON t.id = s.k "
     "WHEN MATCHED AND s.k = 2 THEN UPDATE SET qty = s.qty", (3, "b")),
    ("USING (VALUES (2, 7, 'x')) AS s(id, qty, note) ON t.id = s.id "
     "WHEN MATCHED AND s.qty > 5 THEN UPDATE SET *", (7, "x")),
]


@pytest.mark.parametrize(("clauses", "after"), _SOURCE_CONDITIONS)
def test_a_matched_condition_reads_the_source_rows_values(tmp_path: Path, clauses: str,
                                                          after: tuple[int, str]) -> None:
    """A WHEN MATCHED condition on the source's columns tests the source row, not the
    values the UPDATE computes from it (merge_insert sees only those: such statements
    take the general path unless they are SET * with the keys named alike)."""
    lance_sql.write_dataset(pa.table({"id": pa.array([1, 2, 3], pa.int64()),
                                      "qty": pa.array([10, 20, 30], pa.int64()),
                                      "note": ["a", "b", "c"]}), tmp_path / "t.lance")
    session = lance_sql.connect(tmp_path)
    session.sql(f"MERGE INTO t {clauses}").collect()
    rows = session.sql("SELECT id, qty, note FROM t ORDER BY id").to_pydict()
    assert (rows["qty"][1], rows["note"][1]) == after
    assert rows["qty"][0::2] == [10, 30] and rows["note"][0::2] == ["a", "c"]
    statement = parse_merge(f"MERGE INTO t {clauses}")
    assert statement is not None
    assert (statement.merge_insert_form() is not None) == clauses.endswith("SET *")


_UNQUALIFIED = [
    # a name both sides have: ambiguous on every path (it read the source's on one)
    ("USING (VALUES (2, 5)) AS s(id, qty) ON t.id = s.id "
     "WHEN MATCHED THEN UPDATE SET qty = qty + 1", InvalidInputError),
    ("USING (VALUES (2, 5)) AS s(id, qty) ON t.id = s.id "
     "WHEN MATCHED THEN UPDATE SET note = CAST(qty AS VARCHAR)", InvalidInputError),
    ("USING (VALUES (2, 5)) AS s(id, qty) ON t.id = s.id "
     "WHEN MATCHED THEN UPDATE SET qty = qty + 1 WHEN NOT MATCHED BY SOURCE THEN DELETE",
     InvalidInputError),
    # a name only the target has is the target's (it was not found)
    ("USING (VALUES (2, 5)) AS s(id, extra) ON t.id = s.id "
     "WHEN MATCHED THEN UPDATE SET qty = qty + extra", (25, "b")),
    ("USING (VALUES (2, 5)) AS s(id, extra) ON t.id = s.id "
     "WHEN MATCHED AND qty > 10 THEN UPDATE SET qty = s.extra", (5, "b")),
    ("USING (VALUES (2, 5)) AS s(id, extra) ON t.id = s.id "
     "WHEN MATCHED AND note = 'zz' THEN UPDATE SET qty = s.extra", (20, "b")),
    # a name only the source has is the source's
    ("USING (VALUES (2, 5)) AS s(id, extra) ON t.id = s.id "
     "WHEN MATCHED AND extra > 1 THEN UPDATE SET qty = extra", (5, "b")),
]


@pytest.mark.parametrize(("clauses", "after"), _UNQUALIFIED)
def test_unqualified_names_bind_alike_on_both_paths(
        tmp_path: Path, clauses: str, after: tuple[int, str] | type[Exception]) -> None:
    """An unqualified column name in a WHEN MATCHED condition or UPDATE SET value binds
    as SQL binds it (the general path's DataFusion join): to the side that has it, an
    error when both do. The merge_insert path reads the source alone, so it took
    ``qty`` of ``SET qty = qty + 1`` from the source (the same statement with an INSERT
    clause was ambiguous), did not find a name only the target has, and refused any
    unqualified name in a condition: such statements take the general path."""
    path = tmp_path / "t.lance"
    lance_sql.write_dataset(pa.table({"id": pa.array([1, 2, 3], pa.int64()),
                                      "qty": pa.array([10, 20, 30], pa.int64()),
                                      "note": ["a", "b", "c"]}), path)
    session = lance_sql.connect(tmp_path)
    if not isinstance(after, tuple):
        with pytest.raises(after, match="(?i)ambiguous"):
            session.sql(f"MERGE INTO t {clauses}")
        assert lance_sql.dataset(path).version == 1
        return
    session.sql(f"MERGE INTO t {clauses}").collect()
    rows = session.sql("SELECT id, qty, note FROM t ORDER BY id").to_pydict()
    assert (rows["qty"][1], rows["note"][1]) == after
    assert rows["qty"][0::2] == [10, 30] and rows["note"][0::2] == ["a", "c"]
