"""The change feed against a model: random, seeded histories of every kind of commit.

The model never reads the table's values: it keeps, per version, the schema (columns as
identities, so a column dropped and added again under its old name is another column)
and every live row by stable row id, with its values and the version that last changed
it. Only the row ids new rows get are taken from the table (and checked to stay put
afterwards). From two consecutive model versions it derives what the feed must report,
and from the window's ends what net changes must be; both are compared with
``table_changes`` through the Python API and SQL, for many windows, with filters on the
metadata and data columns and with projections. Writers alternate between lance_sql and
pylance, so the feed also reads tables pylance wrote. SQL ``MERGE INTO`` statements with
random WHEN clauses (the general path and the forms run as one merge_insert) are among
the commits. SQL's path for feeds too large for one partition runs on these small
histories with its partition size lowered.
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

import lance
import pyarrow as pa
import pytest

import lance_sql
from lance_sql.errors import VersionCleanedUpError
from lance_sql.sql import changes_provider
from lance_sql.table.changes import feed

META = ["_change_type", "_commit_version", "_commit_timestamp", "_rowid"]
RANK = {"insert": 0, "update_preimage": 1, "update_postimage": 1, "delete": 2}
TYPES = {"int": pa.int64(), "float": pa.float64(), "str": pa.string()}


@dataclass(frozen=True)
class Col:
    name: str
    token: int  # the column's identity
    kind: str   # a key of TYPES


@dataclass
class Row:
    values: dict[int, Any]  # by column token
    updated: int            # the version that last changed the row


@dataclass(frozen=True)
class When:
    """One WHEN clause of a generated MERGE and what it does in the model."""
    kind: str           # MATCHED, NOT MATCHED or NOT MATCHED BY SOURCE
    condition: str      # SQL after AND ("": none)
    holds: Callable[[Row | None, tuple | None], bool]  # (target row, source row)
    action: str         # SQL after THEN
    # an UPDATE changes the target row in place, an INSERT returns the new row's values
    act: Callable | None


@dataclass
class State:
    schema: list[Col]
    rows: dict[int, Row] = field(default_factory=dict)  # by _rowid

    def copy(self) -> State:
        return State(list(self.schema),
                     {r: Row(dict(row.values), row.updated) for r, row in self.rows.items()})

    def col(self, name: str) -> Col:
        return next(c for c in self.schema if c.name == name)

    def value(self, rowid: int, column: Col) -> Any:
        """The row's value of ``column`` (an end column) here: NULL when this version
        does not have that column; cast to the end type."""
        held = next((c for c in self.schema if c.token == column.token), None)
        if held is None:
            return None
        value = self.rows[rowid].values.get(column.token)
        if value is not None and column.kind == "float":
            value = float(value)
        elif isinstance(value, float) and column.kind == "int":
            value = int(value)  # (a restore's older type: CAST truncates toward zero)
        return value


class Model:
    """The table's versions as the model sees them."""

    def __init__(self, path: Path, rng: random.Random, pylance_share: float) -> None:
        self.path, self.rng, self.pylance_share = path, rng, pylance_share
        self.states: dict[int, State] = {0: State([])}
        self.tokens = itertools.count()
        self.keys = itertools.count()
        self.log: list[str] = []

    # --------------------------------------------------------------- bookkeeping

    @property
    def latest(self) -> int:
        return max(self.states)

    @property
    def now(self) -> State:
        return self.states[self.latest]

    def pylance(self) -> bool:
        return self.rng.random() < self.pylance_share

    def commit(self, state: State, what: str, versions: int = 1) -> None:
        """Record ``state`` as the table's new version (checks one was committed; a
        compaction may first commit a ReserveFragments, a version changing no row)."""
        version = lance_sql.dataset(self.path).version
        assert self.latest < version <= self.latest + versions, (what, version, self.latest)
        for between in range(self.latest + 1, version):
            self.states[between] = state.copy()
        self.states[version] = state
        self.log.append(f"v{version}: {what}")
        self._check_snapshot(version)

    def _check_snapshot(self, version: int) -> None:
        """The table's rows at ``version`` are the model's (a sanity check of the model)."""
        state = self.states[version]
        names = [c.name for c in state.schema]
        got = lance_sql.dataset(self.path, version).to_table(
            columns=[*names, "_rowid", "_row_last_updated_at_version"]).to_pylist()
        want = {r: ([state.value(r, c) for c in state.schema], row.updated)
                for r, row in state.rows.items()}
        have = {g["_rowid"]: ([g[n] for n in names], g["_row_last_updated_at_version"])
                for g in got}
        assert have == want, (self.log, version)

    def _new_rows(self, n: int, state: State) -> list[dict[str, Any]]:
        """``n`` rows of new keys in ``state``'s columns."""
        rows = []
        for _ in range(n):
            k = next(self.keys)
            row: dict[str, Any] = {}
            for c in state.schema:
                if c.name == "k":
                    row["k"] = k
                elif c.name == "x":
                    row["x"] = self.rng.randrange(100)
                elif c.name == "s":
                    row["s"] = None if self.rng.random() < 0.2 else f"s{k}"
                else:
                    row[c.name] = (None if self.rng.random() < 0.3
                                   else self.rng.randrange(50) if c.kind == "int"
                                   else self.rng.randrange(50) / 2)
            rows.append(row)
        return rows

    def _arrow(self, rows: list[dict[str, Any]], state: State) -> pa.Table:
        return pa.table({c.name: pa.array([r[c.name] for r in rows], TYPES[c.kind])
                         for c in state.schema})

    def _learn_ids(self, state: State, rows: list[dict[str, Any]], version: int) -> None:
        """Give the model's new rows the ids the table gave them (by key)."""
        ids = {r["k"]: r["_rowid"] for r in lance_sql.dataset(self.path).to_table(
            columns=["k", "_rowid"]).to_pylist()}
        for row in rows:
            rowid = ids[row["k"]]
            assert rowid not in state.rows
            state.rows[rowid] = Row({c.token: row[c.name] for c in state.schema}, version)

    def _keys(self, state: State) -> dict[int, int]:
        """Key -> row id of the live rows."""
        k = state.col("k").token
        return {row.values[k]: r for r, row in state.rows.items()}

    # ------------------------------------------------------------------ operations

    def create(self) -> None:
        schema = [Col("k", next(self.tokens), "int"), Col("x", next(self.tokens), "int"),
                  Col("s", next(self.tokens), "str")]
        state = State(schema)
        rows = self._new_rows(self.rng.randrange(4, 12), state)
        write = lance.write_dataset if self.pylance() else lance_sql.write_dataset
        write(self._arrow(rows, state), self.path, max_rows_per_file=4,
              enable_stable_row_ids=True)
        self._learn_ids(state, rows, 1)
        self.commit(state, "create")

    def append(self) -> None:
        state = self.now.copy()
        rows = self._new_rows(self.rng.randrange(1, 8), state)
        write = lance.write_dataset if self.pylance() else lance_sql.write_dataset
        write(self._arrow(rows, state), self.path, mode="append", max_rows_per_file=4)
        self._learn_ids(state, rows, self.latest + 1)
        self.commit(state, f"append {len(rows)}")

    def overwrite(self) -> None:
        old = self.now
        # columns of the same name and type carry on through an overwrite
        schema = [next((c for c in old.schema if c.name == n and c.kind == kind),
                       Col(n, next(self.tokens), kind))
                  for n, kind in (("k", "int"), ("x", "int"), ("s", "str"))]
        state = State(schema)
        rows = self._new_rows(self.rng.randrange(0, 6), state)
        write = lance.write_dataset if self.pylance() else lance_sql.write_dataset
        write(self._arrow(rows, state), self.path, mode="overwrite", max_rows_per_file=4)
        self._learn_ids(state, rows, self.latest + 1)
        self.commit(state, f"overwrite {len(rows)}")

    def _predicate(self, state: State) -> tuple[str, Callable[[Row], bool]]:
        k, x, s = (state.col(n).token for n in ("k", "x", "s"))
        m, r, c = self.rng.randrange(2, 5), self.rng.randrange(2), self.rng.randrange(100)
        keys = self.rng.sample(sorted(self._keys(state)) or [0], min(3, len(state.rows) or 1))
        return self.rng.choice([
            (f"k % {m} = {r}", lambda row: row.values[k] % m == r),
            (f"x < {c}", lambda row: row.values[x] < c),
            (f"k IN ({', '.join(map(str, keys))})", lambda row: row.values[k] in keys),
            ("s IS NULL", lambda row: row.values[s] is None),
        ])

    def _sql(self, statement: str) -> None:
        session = lance_sql.connect()
        session.register("t", str(self.path))
        session.sql(statement).collect()

    def delete(self) -> None:
        state = self.now.copy()
        text, pred = self._predicate(state)
        state.rows = {r: row for r, row in state.rows.items() if not pred(row)}
        how = "pylance" if self.pylance() else self.rng.choice(["api", "sql", "subquery"])
        if how == "pylance":
            lance.dataset(self.path).delete(text)
        elif how == "api":
            lance_sql.dataset(self.path).delete(text)
        else:
            self._sql(f"DELETE FROM t WHERE {text}" if how == "sql" else
                      f"DELETE FROM t WHERE k IN (SELECT k FROM t WHERE {text})")
        if lance_sql.dataset(self.path).version == self.latest:
            return  # nothing deleted and nothing committed (pylance)
        self.commit(state, f"delete {text} ({how})")

    def update(self) -> None:
        state = self.now.copy()
        version = self.latest + 1
        text, pred = self._predicate(state)
        x, s = state.col("x").token, state.col("s").token
        extra = [c for c in state.schema if c.name not in ("k", "x", "s")]
        choice = self.rng.randrange(3 if extra else 2)
        if choice == 0:
            updates = {"x": "x + 1000"}
        elif choice == 1:
            updates = {"s": f"'u{version}'"}
        else:
            target = self.rng.choice(extra)
            updates = {target.name: "x"}
        for row in state.rows.values():
            if not pred(row):
                continue
            row.updated = version
            if choice == 0:
                row.values[x] += 1000
            elif choice == 1:
                row.values[s] = f"u{version}"
            else:
                row.values[target.token] = (row.values[x] if target.kind == "int"
                                            else float(row.values[x]))
        how = "pylance" if self.pylance() else self.rng.choice(["api", "sql", "subquery"])
        if how == "pylance":
            lance.dataset(self.path).update(updates, where=text)
        elif how == "api":
            mode = self.rng.choice(["rewrite_rows", "rewrite_columns"])
            lance_sql.dataset(self.path).update(updates, where=text, update_mode=mode)
        else:
            sets = ", ".join(f"{c} = {e}" for c, e in updates.items())
            self._sql(f"UPDATE t SET {sets} WHERE {text}" if how == "sql" else
                      f"UPDATE t SET {sets} WHERE k IN (SELECT k FROM t WHERE {text})")
        if lance_sql.dataset(self.path).version == self.latest:
            assert not any(row.updated == version for row in state.rows.values())
            return
        self.commit(state, f"update {updates} where {text} ({how})")

    def merge(self) -> None:
        """merge_insert on k, its source all columns or some (``k``, ``x`` and a random
        few: matched rows keep the others, inserted rows have them NULL)."""
        state = self.now.copy()
        version = self.latest + 1
        keys = self._keys(state)
        matched = self.rng.sample(sorted(keys), self.rng.randrange(0, min(4, len(keys)) + 1))
        others = [c for c in state.schema if c.name not in ("k", "x")]
        given = [c for c in state.schema
                 if c.name in ("k", "x") or c not in others or self.rng.random() < 0.5]
        if self.rng.random() < 0.5:
            given = list(state.schema)
        x = state.col("x").token
        source = []
        for key in matched:
            row = {c.name: state.rows[keys[key]].values.get(c.token) for c in given}
            row["x"] = row["x"] + 7
            source.append(row)
        insert = self.rng.random() < 0.8
        fresh = self._new_rows(self.rng.randrange(0, 4), state) if insert else []
        by_source = self.rng.random() < 0.3
        for key in matched:
            row = state.rows[keys[key]]
            row.values[x] += 7
            row.updated = version
        if by_source:
            state.rows = {r: row for r, row in state.rows.items()
                          if row.values[state.col("k").token] in matched}
        for row in fresh:
            for c in state.schema:
                if c not in given:
                    row[c.name] = None
        data = pa.table({c.name: pa.array([r[c.name] for r in source + fresh], TYPES[c.kind])
                         for c in given})
        ds = lance.dataset(self.path) if self.pylance() else lance_sql.dataset(self.path)
        builder = ds.merge_insert("k").when_matched_update_all()
        if insert:
            builder = builder.when_not_matched_insert_all()
        if by_source:
            builder = builder.when_not_matched_by_source_delete()
        builder.execute(data)
        if lance_sql.dataset(self.path).version == self.latest:
            assert not matched and not fresh and not by_source
            return
        self._learn_ids(state, fresh, version)
        self.commit(state, f"merge {len(matched)} matched, {len(fresh)} new, "
                           f"by_source={by_source}, columns {[c.name for c in given]}")

    def merge_sql(self) -> None:
        """SQL ``MERGE INTO``: up to two WHEN clauses of each kind (only the last of a
        kind may be unconditional), kinds interleaved; the source a VALUES list or a
        query of the table itself with new keys appended, its key named ``k`` or
        renamed. The model gives each row the first clause of its kind whose condition
        holds on the version the MERGE starts from; forms merge_insert runs and the
        general path alike."""
        state = self.now.copy()
        version = self.latest + 1
        rng = self.rng
        k, x, s = (state.col(n).token for n in ("k", "x", "s"))
        keys = self._keys(state)
        t = rng.choice(["t", "tgt"])
        key = rng.choice(["k", "key"])  # the source's name for the key
        fresh = [(r["k"], r["x"], r["s"]) for r in self._new_rows(rng.randrange(0, 4), state)]
        if rng.random() < 0.5:
            matched = rng.sample(sorted(keys), rng.randrange(0, min(4, len(keys)) + 1))
            source = [(m, rng.randrange(100), rng.choice([None, f"v{m}"])) for m in matched]
            source += fresh
            using = (f"(VALUES {_values(source)}) AS src({key}, x, s)" if source else
                     f"(SELECT k AS {key}, x, s FROM t WHERE false) AS src")
            how = "values"
        else:
            text, pred = self._predicate(state)
            source = [(row.values[k], row.values[x] + 3, row.values[s])
                      for row in state.rows.values() if pred(row)] + fresh
            query = f"SELECT k AS {key}, x + 3 AS x, s FROM t WHERE {text}"
            if fresh:
                query += f" UNION ALL SELECT * FROM (VALUES {_values(fresh)})"
            using = f"({query}) AS src"
            how = f"source: rows where {text}"
        clauses = self._merge_clauses(state, t, key, version)
        sql = " ".join(f"WHEN {c.kind}{' AND ' + c.condition if c.condition else ''} "
                       f"THEN {c.action}" for c in clauses)
        statement = (f"MERGE INTO t{' AS tgt' if t == 'tgt' else ''} USING {using} "
                     f"ON {t}.k = src.{key} {sql}")

        def clause(kind: str, target: Row | None, src: tuple | None) -> When | None:
            return next((c for c in clauses if c.kind == kind and c.holds(target, src)), None)

        by_key = {row[0]: row for row in source}
        for rowid, row in list(state.rows.items()):
            src = by_key.get(row.values[k])
            taken = clause("MATCHED" if src is not None else "NOT MATCHED BY SOURCE", row,
                           src)
            if taken is None or taken.action == "DO NOTHING":
                continue
            if taken.action == "DELETE":
                del state.rows[rowid]
                continue
            taken.act(row, src)
            row.updated = version
        inserted = []
        for src in source:
            taken = clause("NOT MATCHED", None, src) if src[0] not in keys else None
            if taken is not None and taken.action != "DO NOTHING":
                given = taken.act(None, src)
                inserted.append({c.name: given.get(c.name) for c in state.schema})
        self._sql(statement)
        if lance_sql.dataset(self.path).version == self.latest:
            assert not inserted and not any(row.updated == version
                                            for row in state.rows.values()) \
                and state.rows.keys() == self.now.rows.keys(), (statement, self.log)
            return
        self._learn_ids(state, inserted, version)
        self.commit(state, f"{statement} ({how})")

    def _merge_clauses(self, state: State, t: str, key: str, version: int) -> list[When]:
        """Random WHEN clauses for :meth:`merge_sql` over target alias ``t`` and source
        ``src`` (``src.{key}``, ``src.x``, ``src.s``), with what they do in the model."""
        rng = self.rng
        k, x, s = (state.col(n).token for n in ("k", "x", "s"))
        extra = [c for c in state.schema if c.name not in ("k", "x", "s")]
        c1, c2 = rng.randrange(100), rng.randrange(200)

        def setter(**values: Callable[[Row, tuple], Any]) -> Callable:
            """UPDATE SET ``name = value``: every value from the row before the update."""
            def act(row: Row, src: tuple) -> None:
                new = {name: value(row, src) for name, value in values.items()}
                for name, value in new.items():
                    column = state.col(name)
                    row.values[column.token] = _as_kind(value, column.kind)
            return act

        matched_if = [
            (f"{t}.x < {c1}", lambda tr, sr: tr.values[x] < c1),
            (f"src.x > {c1}", lambda tr, sr: sr[1] > c1),
            (f"{t}.k % 2 = 0", lambda tr, sr: tr.values[k] % 2 == 0),
            ("src.s IS NULL", lambda tr, sr: sr[2] is None),
            (f"{t}.x + src.x > {c2}", lambda tr, sr: tr.values[x] + sr[1] > c2),
        ]
        matched_do = [
            ("UPDATE SET *", setter(x=lambda tr, sr: sr[1], s=lambda tr, sr: sr[2])),
            ("UPDATE SET x = src.x", setter(x=lambda tr, sr: sr[1])),
            (f"UPDATE SET x = {t}.x + src.x, s = 'm{version}'",
             setter(x=lambda tr, sr: tr.values[x] + sr[1], s=lambda tr, sr: f"m{version}")),
            (f"UPDATE SET k = src.{key}, x = {t}.x + 1",
             setter(x=lambda tr, sr: tr.values[x] + 1)),
            ("DELETE", None), ("DELETE", None), ("DO NOTHING", None),
        ] + [(f"UPDATE SET {c.name} = src.x * 2",
              setter(**{c.name: lambda tr, sr: sr[1] * 2})) for c in extra]
        insert_if = [
            (f"src.x < {c1}", lambda tr, sr: sr[1] < c1),
            ("src.s IS NOT NULL", lambda tr, sr: sr[2] is not None),
            (f"src.{key} % 2 = 1", lambda tr, sr: sr[0] % 2 == 1),
        ]
        insert_do = [
            ("INSERT *", lambda tr, sr: {"k": sr[0], "x": sr[1], "s": sr[2]}),
            (f"INSERT (k, x) VALUES (src.{key}, src.x * 10)",
             lambda tr, sr: {"k": sr[0], "x": sr[1] * 10}),
            (f"INSERT (x, k, s) VALUES (src.x, src.{key}, upper(src.s))",
             lambda tr, sr: {"k": sr[0], "x": sr[1],
                             "s": None if sr[2] is None else sr[2].upper()}),
            ("DO NOTHING", None),
        ] + [(f"INSERT (k, x, {c.name}) VALUES (src.{key}, src.x, src.x + 1)",
              lambda tr, sr, c=c: {"k": sr[0], "x": sr[1],
                                   c.name: _as_kind(sr[1] + 1, c.kind)}) for c in extra]
        gone_if = [
            (f"{t}.x < {c1}", lambda tr, sr: tr.values[x] < c1),
            (f"{t}.s IS NULL", lambda tr, sr: tr.values[s] is None),
            (f"{t}.k % 3 = 0", lambda tr, sr: tr.values[k] % 3 == 0),
        ]
        gone_do = [
            ("DELETE", None), ("DO NOTHING", None),
            (f"UPDATE SET s = 'gone{version}'", setter(s=lambda tr, sr: f"gone{version}")),
            (f"UPDATE SET x = {t}.x - 1", setter(x=lambda tr, sr: tr.values[x] - 1)),
        ]
        # Often the shapes one merge_insert runs: a clause of each kind at most, an
        # UPDATE or DELETE, an unconditional INSERT *, a DELETE by source
        upsert = rng.random() < 0.4
        if upsert:
            matched_do = matched_do[:2] + [("DELETE", None)]
            insert_do, insert_if = insert_do[:1], []
            gone_do = gone_do[:1]
        by_kind: dict[str, list[When]] = {}
        for kind, conditions, actions in (("MATCHED", matched_if, matched_do),
                                          ("NOT MATCHED", insert_if, insert_do),
                                          ("NOT MATCHED BY SOURCE", gone_if, gone_do)):
            count = rng.choice([0, 1] if upsert else [0, 0, 1, 1, 2])
            for j in range(count):
                last_unconditional = j == count - 1 and (not conditions or rng.random() < 0.5)
                condition, holds = ("", lambda tr, sr: True) if last_unconditional \
                    else rng.choice(conditions)
                action, act = rng.choice(actions)
                by_kind.setdefault(kind, []).append(When(kind, condition, holds, action, act))
        if not by_kind:
            return [When("MATCHED", "", lambda tr, sr: True, "DELETE", None)]
        # kinds interleaved at random, each kind's clauses in their order
        slots = [kind for kind, whens in by_kind.items() for _ in whens]
        rng.shuffle(slots)
        queues = {kind: iter(whens) for kind, whens in by_kind.items()}
        return [next(queues[kind]) for kind in slots]

    def compact(self) -> None:
        ds = lance.dataset(self.path) if self.pylance() else lance_sql.dataset(self.path)
        ds.optimize.compact_files(target_rows_per_fragment=self.rng.choice([3, 8, 1000]))
        if lance_sql.dataset(self.path).version > self.latest:
            self.commit(self.now.copy(), "compact", versions=2)

    def add_column(self) -> None:
        state = self.now.copy()
        taken = {c.name for c in state.schema}
        free = [n for n in ("c0", "c1", "c2") if n not in taken]
        if not free:
            return
        name = self.rng.choice(free)
        col = Col(name, next(self.tokens), "int")
        state.schema.append(col)
        x = state.col("x").token
        pyl = self.pylance()
        ds = lance.dataset(self.path) if pyl else lance_sql.dataset(self.path)
        if self.rng.random() < 0.5:
            ds.add_columns({name: "x * 2"})
            for row in state.rows.values():
                row.values[col.token] = row.values[x] * 2
                row.updated = self.latest + 1
            what = f"add {name} = x * 2"
        else:
            ds.add_columns(pa.field(name, pa.int64()))
            what = f"add {name} NULL"
        self.commit(state, what)

    def drop_column(self) -> None:
        state = self.now.copy()
        extra = [c for c in state.schema if c.name not in ("k", "x", "s")]
        if not extra:
            return
        col = self.rng.choice(extra)
        state.schema.remove(col)
        for row in state.rows.values():
            row.values.pop(col.token, None)
        ds = lance.dataset(self.path) if self.pylance() else lance_sql.dataset(self.path)
        ds.drop_columns([col.name])
        self.commit(state, f"drop {col.name}")

    def alter_type(self) -> None:
        state = self.now.copy()
        ints = [c for c in state.schema if c.name not in ("k", "x", "s") and c.kind == "int"]
        if not ints:
            return
        col = self.rng.choice(ints)
        at = state.schema.index(col)
        state.schema[at] = Col(col.name, col.token, "float")
        for row in state.rows.values():
            value = row.values.get(col.token)
            row.values[col.token] = None if value is None else float(value)
            row.updated = self.latest + 1
        # (pylance 14 refuses to cast int64 to float64)
        lance_sql.dataset(self.path).alter_columns({"path": col.name,
                                                    "data_type": pa.float64()})
        self.commit(state, f"alter {col.name} to float64")

    def restore(self) -> None:
        target = self.rng.randrange(1, self.latest)
        if self.pylance():
            lance.dataset(self.path, version=target).restore()
        else:
            lance_sql.dataset(self.path).restore(target)
        self.commit(self.states[target].copy(), f"restore {target}")

    # (the histories of seeds kept for what they caught are drawn from these weights)
    OPS = {"append": 4, "delete": 3, "update": 4, "merge": 3, "compact": 2, "add_column": 3,
           "drop_column": 1.5, "alter_type": 1.5, "restore": 1.5, "overwrite": 0.5}
    WITH_MERGE_SQL = {**OPS, "merge_sql": 4}

    def run(self, steps: int, ops: dict[str, float] = WITH_MERGE_SQL) -> None:
        self.create()
        names, weights = zip(*ops.items(), strict=True)
        for _ in range(steps):
            op = self.rng.choices(names, weights)[0]
            if op == "restore" and self.latest < 2:
                continue
            getattr(self, op)()

    # ---------------------------------------------------------- what the feed says

    def changes(self, a: int, b: int) -> list[dict[str, Any]]:
        """Every change of versions a..b, in the feed's documented order, with the
        end version's columns."""
        end = self.states[b].schema
        out = []
        for v in range(a, b + 1):
            old, new = self.states[v - 1], self.states[v]
            ins = sorted(new.rows.keys() - old.rows.keys())
            dels = sorted(old.rows.keys() - new.rows.keys())
            upd = sorted(r for r in old.rows.keys() & new.rows.keys()
                         if old.rows[r].updated != new.rows[r].updated)
            out += [_change(new, r, end, "insert", v) for r in ins]
            for r in upd:
                out += [_change(old, r, end, "update_preimage", v),
                        _change(new, r, end, "update_postimage", v)]
            out += [_change(old, r, end, "delete", v) for r in dels]
        return out

    def net(self, a: int, b: int) -> list[dict[str, Any]]:
        """One change per row for the window: its net effect."""
        end = self.states[b].schema
        last: dict[int, int] = {}
        for change in self.changes(a, b):
            last[change["_rowid"]] = change["_commit_version"]
        before, after = self.states[a - 1], self.states[b]
        out = []
        for r, v in last.items():
            was, now = r in before.rows, r in after.rows
            if not was and now:
                out.append(_change(after, r, end, "insert", v))
            elif was and not now:
                out.append(_change(before, r, end, "delete", v))
            elif was and now:
                out += [_change(before, r, end, "update_preimage", v),
                        _change(after, r, end, "update_postimage", v)]
        return sorted(out, key=_order)


def _as_kind(value: Any, kind: str) -> Any:
    """``value`` as a column of ``kind`` holds it (SQL casts an integer into a double)."""
    return float(value) if kind == "float" and value is not None else value


def _values(rows: list[tuple]) -> str:
    """``rows`` as the rows of a SQL VALUES list."""
    def literal(value: Any) -> str:
        return "NULL" if value is None else f"'{value}'" if isinstance(value, str) \
            else str(value)
    return ", ".join(f"({', '.join(map(literal, row))})" for row in rows)


def _change(state: State, rowid: int, end: list[Col], kind: str, version: int
            ) -> dict[str, Any]:
    row = {c.name: state.value(rowid, c) for c in end}
    row.update(_change_type=kind, _commit_version=version, _rowid=rowid)
    return row


def _order(row: dict[str, Any]) -> tuple:
    return (row["_commit_version"], RANK[row["_change_type"]], row["_rowid"],
            row["_change_type"] == "update_postimage")


# ------------------------------------------------------------------------ the checks

# (filter text, the same in Python: SQL's three-valued logic, NULL never matches)
def _filters(model: Model, a: int, b: int) -> list[tuple[str, Callable[[dict], bool]]]:
    rng = model.rng
    m = rng.randrange(a, b + 1)
    rid = rng.randrange(0, 40)
    c = rng.randrange(0, 1100)
    out: list[tuple[str, Callable[[dict], bool]]] = [
        ("_change_type = 'delete'", lambda r: r["_change_type"] == "delete"),
        ("_change_type IN ('update_preimage', 'update_postimage')",
         lambda r: r["_change_type"].startswith("update")),
        ("_change_type != 'insert'", lambda r: r["_change_type"] != "insert"),
        (f"_commit_version = {m}", lambda r: r["_commit_version"] == m),
        (f"_commit_version >= {m} AND _change_type = 'insert'",
         lambda r: r["_commit_version"] >= m and r["_change_type"] == "insert"),
        (f"_commit_version < {m} OR _rowid = {rid}",
         lambda r: r["_commit_version"] < m or r["_rowid"] == rid),
        (f"_rowid <= {rid}", lambda r: r["_rowid"] <= rid),
        (f"_rowid IN ({rid}, {rid + 1}, {rid + 5})", lambda r: r["_rowid"] in
         (rid, rid + 1, rid + 5)),
        (f"x > {c}", lambda r: r.get("x") is not None and r["x"] > c),
        (f"x < {c} AND _change_type = 'update_postimage'",
         lambda r: r.get("x") is not None and r["x"] < c
         and r["_change_type"] == "update_postimage"),
        (f"_change_type = 'delete' OR x >= {c}",
         lambda r: r["_change_type"] == "delete" or (r.get("x") is not None and r["x"] >= c)),
        ("s IS NULL", lambda r: r.get("s") is None),
        (f"NOT (_commit_version = {m}) AND s IS NOT NULL",
         lambda r: r["_commit_version"] != m and r.get("s") is not None),
    ]
    names = [col.name for col in model.states[b].schema]
    out += [(f"{n} IS NOT NULL", lambda r, n=n: r[n] is not None) for n in names
            if n not in ("k", "x", "s")]
    return out


def _strip(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{k: v for k, v in r.items() if k != "_commit_timestamp"} for r in rows]


def _key(row: dict[str, Any]) -> tuple:
    return tuple(sorted((k, repr(v)) for k, v in row.items()))


def check_window(model: Model, a: int, b: int, session: lance_sql.LanceSession,
                 sql: bool) -> None:
    ds = lance_sql.dataset(model.path)
    where = f"window {a}..{b} of {model.log}"
    stamps = {v["version"]: v["timestamp_utc"] for v in ds.versions()}
    for mode in ("all", "net"):
        want = model.changes(a, b) if mode == "all" else model.net(a, b)
        got = ds.table_changes(a, b, mode=mode)
        rows = got.to_pylist()
        # the whole feed, in its documented order
        assert _strip(rows) == want, (mode, where)
        assert got.column_names == [c.name for c in model.states[b].schema] + META
        # each row carries its version's commit time
        assert all(r["_commit_timestamp"] == stamps[r["_commit_version"]] for r in rows)
        for text, pred in model.rng.sample(_filters(model, a, b), 3):
            expected = [r for r in want if pred(r)]
            got_f = _strip(ds.table_changes(a, b, filter=text, mode=mode).to_pylist())
            assert got_f == expected, (mode, text, where)
        names = list(want[0]) if want else ["k", "_rowid"]
        names = model.rng.sample(names, model.rng.randrange(1, len(names) + 1))
        text, pred = model.rng.choice(_filters(model, a, b))
        got_p = ds.table_changes(a, b, columns=names, filter=text, mode=mode).to_pylist()
        assert got_p == [{n: r[n] for n in names} for r in want if pred(r)], \
            (mode, names, text, where)
        # bounds as commit times: the first version at or after, the last at or before
        if stamps[a] != stamps.get(a - 1) and stamps[b] != stamps.get(b + 1):
            got_t = ds.table_changes(stamps[a], stamps[b].isoformat(), mode=mode)
            assert _strip(got_t.to_pylist()) == want, (mode, "timestamps", where)
        # a filter on commit times
        at = stamps[model.rng.randrange(a, b + 1)]
        got_t = ds.table_changes(a, b, mode=mode,
                                 filter=f"_commit_timestamp >= '{at.isoformat()}'")
        assert _strip(got_t.to_pylist()) == [r for r in want
                                             if stamps[r["_commit_version"]] >= at], \
            (mode, "timestamp filter", where)
        if not sql:
            continue
        got_n = session.sql(f"SELECT count(*) AS n FROM table_changes('t', {a}, {b}"
                            f"{', ' + repr(mode) if mode == 'net' else ''})").to_pylist()
        assert got_n == [{"n": len(want)}], (mode, "count", where)
        net = ", 'net'" if mode == "net" else ""
        query = f"SELECT * FROM table_changes('t', {a}, {b}{net})"
        got_s = _strip(session.sql(query).to_pylist())
        assert sorted(got_s, key=_key) == sorted(want, key=_key), (mode, "sql", where)
        text, pred = model.rng.choice(_filters(model, a, b))
        cols = ", ".join(names)
        got_s = session.sql(f"SELECT {cols} FROM table_changes('t', {a}, {b}{net}) "
                            f"WHERE {text}").to_pylist()
        expected = [{n: r[n] for n in names} for r in want if pred(r)]
        assert sorted(got_s, key=_key) == sorted(expected, key=_key), \
            (mode, "sql", cols, text, where)


WHOLE = changes_provider.UNIT_ROWS  # change rows per partition: these histories' in one


class Partitions:
    """SQL's feed in partitions of a few change rows: ``UNIT_ROWS`` lowered, as a feed of
    more than 2**20 change rows is split, and every fragment read on the read pool, as
    large reads are (``PARALLEL_ROWS``); counts the partitions planned, to show the path
    ran."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.monkeypatch = monkeypatch
        self.most = 0
        plan = changes_provider.ChangesDataset._units

        def counted(dataset: changes_provider.ChangesDataset, *args: Any) -> list:
            units = plan(dataset, *args)
            self.most = max(self.most, len(units))
            return units

        monkeypatch.setattr(changes_provider.ChangesDataset, "_units", counted)
        monkeypatch.setattr(feed, "PARALLEL_ROWS", 1)
        monkeypatch.setattr(feed, "READ_THREADS", max(2, feed.READ_THREADS))
        self.split(3)

    def split(self, rows: int) -> None:
        self.monkeypatch.setattr(changes_provider, "UNIT_ROWS", rows)

    def whole(self) -> None:
        self.monkeypatch.setattr(changes_provider, "UNIT_ROWS", WHOLE)


def check_partitioned(model: Model, a: int, b: int, session: lance_sql.LanceSession,
                      partitions: Partitions) -> None:
    """The SQL feed read in partitions equals the model and the feed read whole, for the
    whole feed, a filtered projection, counts per change type, a LIMIT and an ordered
    LIMIT."""
    where = f"window {a}..{b} of {model.log}"
    for mode, net in (("all", ""), ("net", ", 'net'")):
        want = model.changes(a, b) if mode == "all" else model.net(a, b)
        feed_sql = f"table_changes('t', {a}, {b}{net})"
        text, pred = model.rng.choice(_filters(model, a, b))
        queries = [f"SELECT * FROM {feed_sql}",
                   f"SELECT _rowid, x, _change_type FROM {feed_sql} WHERE {text}",
                   f"SELECT _change_type, count(*) AS n FROM {feed_sql} GROUP BY _change_type",
                   f"SELECT _rowid FROM {feed_sql} ORDER BY _commit_version DESC, _rowid "
                   f"LIMIT 4"]
        partitions.split(model.rng.choice([1, 2, 3, 5]))
        split = [_sorted(_strip(session.sql(q).to_pylist())) for q in queries]
        partitions.whole()
        assert split == [_sorted(_strip(session.sql(q).to_pylist())) for q in queries], \
            (mode, where)
        counts: dict[str, int] = {}
        for r in want:
            counts[r["_change_type"]] = counts.get(r["_change_type"], 0) + 1
        last = sorted(want, key=lambda r: (-r["_commit_version"], r["_rowid"]))[:4]
        assert split == [
            _sorted(_strip(want)),
            _sorted([{n: r[n] for n in ("_rowid", "x", "_change_type")} for r in want
                     if pred(r)]),
            _sorted([{"_change_type": t, "n": n} for t, n in counts.items()]),
            _sorted([{"_rowid": r["_rowid"]} for r in last])], (mode, where)
        partitions.split(2)
        limited = session.sql(f"SELECT * FROM {feed_sql} LIMIT 3").to_pylist()
        assert len(limited) == min(3, len(want))
        assert all(_key(r) in {_key(w) for w in _strip(want)} for r in _strip(limited)), \
            (mode, where)


def _sorted(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return sorted(rows, key=_key)


def check_history(model: Model, windows: int) -> None:
    session = lance_sql.connect()
    session.register("t", str(model.path))
    latest = model.latest
    every = [(a, b) for a in range(1, latest + 1) for b in range(a, latest + 1)]
    picked = set(model.rng.sample(every, min(windows, len(every))))
    picked |= {(1, latest), (latest, latest), (1, 1)}
    for a, b in sorted(picked):
        check_window(model, a, b, session, sql=model.rng.random() < 0.35)


def check_cleanup(model: Model) -> None:
    """Tag a version, clean up everything else old: windows needing a removed version
    raise VersionCleanedUpError; the rest still match the model."""
    latest = model.latest
    tagged = model.rng.randrange(1, latest)
    ds = lance_sql.dataset(model.path)
    ds.tags.create("kept", tagged)
    ds.cleanup_old_versions(older_than=timedelta(0), error_if_tagged_old_versions=False)
    kept = {v["version"] for v in ds.versions()}
    assert kept == {tagged, latest}, (kept, tagged, latest)
    session = lance_sql.connect()
    session.register("t", str(model.path))
    for a in range(1, latest + 1):
        for b in range(a, latest + 1):
            needed = set(range(max(a - 1, 1), b + 1))
            if needed <= kept:
                check_window(model, a, b, session, sql=True)
                continue
            with pytest.raises(VersionCleanedUpError):
                ds.table_changes(a, b)
            with pytest.raises(VersionCleanedUpError):
                ds.table_changes(a, b, mode="net")
    if tagged + 1 < latest:
        with pytest.raises(VersionCleanedUpError):
            ds.table_changes("kept", latest)
        with pytest.raises(VersionCleanedUpError):
            session.sql(f"SELECT * FROM table_changes('t', 'kept', {latest})").to_pylist()


# (seed 43's history caught a pre-image read at its post-image after a type change, seed
# 49's a restored column read wrongly in the versions between it and the restore)
@pytest.mark.parametrize("seed", [0, 43, 49])
def test_feed_matches_model(tmp_path: Path, seed: int) -> None:
    model = Model(tmp_path / "t.lance", random.Random(seed), pylance_share=0.0)
    model.run(12, Model.OPS)
    check_history(model, windows=8)


@pytest.mark.parametrize("seed", range(2))
def test_feed_of_pylance_writes_matches_model(tmp_path: Path, seed: int) -> None:
    """Most commits by pylance (its stable row ids, lineage and transactions)."""
    model = Model(tmp_path / "t.lance", random.Random(1000 + seed), pylance_share=0.7)
    model.run(12)
    check_history(model, windows=8)


def test_feed_of_sql_merges_matches_model(tmp_path: Path) -> None:
    """A history of mostly SQL MERGEs (the general path, and the forms merge_insert runs)
    between the other commits."""
    model = Model(tmp_path / "t.lance", random.Random(5000), pylance_share=0.3)
    model.run(8, {**Model.WITH_MERGE_SQL, "merge_sql": 25})
    assert sum("MERGE INTO" in line for line in model.log) >= 3
    check_history(model, windows=2)


@pytest.mark.parametrize("seed", range(2))
def test_feed_after_cleanup_matches_model(tmp_path: Path, seed: int) -> None:
    model = Model(tmp_path / "t.lance", random.Random(2000 + seed), pylance_share=0.3)
    model.run(10)
    check_cleanup(model)


# (seed 749's history caught a column restored twice read NULL in the first restore's rows)
@pytest.mark.slow
@pytest.mark.parametrize("seed", [749])
def test_long_histories_of_sql_merges_match_model(tmp_path: Path, seed: int) -> None:
    model = Model(tmp_path / "t.lance", random.Random(seed), pylance_share=0.2)
    model.run(22, {**Model.OPS, "merge_sql": 10})
    check_history(model, windows=6)


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(3000, 3008))
def test_longer_histories_match_model(tmp_path: Path, seed: int,
                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """More and longer histories, both writers; SQL reads odd seeds' feeds in partitions
    of a few change rows."""
    model = Model(tmp_path / "t.lance", random.Random(seed), pylance_share=0.4)
    model.run(18)
    if seed % 2:
        Partitions(monkeypatch)
    check_history(model, windows=12)


def check_partitioned_history(model: Model, monkeypatch: pytest.MonkeyPatch,
                              windows: int) -> None:
    """:func:`check_partitioned` for the whole history and ``windows`` random windows."""
    partitions = Partitions(monkeypatch)
    session = lance_sql.connect()
    session.register("t", str(model.path))
    latest = model.latest
    every = [(a, b) for a in range(1, latest + 1) for b in range(a, latest + 1)]
    for a, b in sorted({(1, latest), *model.rng.sample(every, min(windows, len(every)))}):
        check_partitioned(model, a, b, session, partitions)
    assert partitions.most > 1


def test_partitioned_sql_feed_matches_model(tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """SQL's path for feeds of more than UNIT_ROWS change rows (several partitions, each
    reading its fragments on the pool) on a small history: the same as one partition,
    and the model's."""
    model = Model(tmp_path / "t.lance", random.Random(4000), pylance_share=0.3)
    model.run(10)
    check_partitioned_history(model, monkeypatch, windows=1)


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(4001, 4005))
def test_partitioned_sql_feeds_of_longer_histories(tmp_path: Path, seed: int,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """More windows of longer histories read in partitions."""
    model = Model(tmp_path / "t.lance", random.Random(seed), pylance_share=0.4)
    model.run(16)
    check_partitioned_history(model, monkeypatch, windows=5)
