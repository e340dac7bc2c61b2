"""The front door's rewrite, without DataFusion."""

from __future__ import annotations

import datetime as dt

import pytest

from lance_sql.errors import InvalidInputError
from lance_sql.sql.rewrite import VersionSpec, rewrite

SYSTEM = ("_rowid", "_rowaddr")


def _rewrite(sql: str) -> tuple[str, list]:
    seen = []

    def resolve(name: str, spec: VersionSpec | None, system: bool) -> tuple[str, tuple]:
        seen.append((name, spec, system))
        text = f'"{name}@{spec.value if spec else "latest"}{"#sys" if system else ""}"'
        return text, SYSTEM if system else ()

    out = rewrite(sql, lambda n: n in {"t", "u"}, resolve, SYSTEM)
    return out.text, seen


def test_plain_reference_is_pinned_and_aliased() -> None:
    text, seen = _rewrite("SELECT * FROM t WHERE x = 1")
    assert text == 'SELECT * FROM "t@latest" AS "t" WHERE x = 1'
    assert seen == [("t", None, False)]


@pytest.mark.parametrize(
    "clause, spec",
    [
        ("VERSION AS OF 3", VersionSpec("version", 3)),
        ("version as of '7'", VersionSpec("version", 7)),
        ("VERSION AS OF 'nightly'", VersionSpec("tag", "nightly")),
        ("AT (VERSION => 4)", VersionSpec("version", 4)),
        ("FOR SYSTEM_TIME AS OF '2026-11-01 10:00:00'",
         VersionSpec("timestamp", dt.datetime(2026, 11, 1, 10, tzinfo=dt.UTC))),
        ("TIMESTAMP AS OF TIMESTAMP '2026-11-01T10:00:00+01:00'",
         VersionSpec("timestamp", dt.datetime(2026, 11, 1, 9, tzinfo=dt.UTC))),
        ("AT (TIMESTAMP => '2026-11-01 10:00:00')",
         VersionSpec("timestamp", dt.datetime(2026, 11, 1, 10, tzinfo=dt.UTC))),
    ],
)
def test_time_travel_clauses(clause: str, spec: VersionSpec) -> None:
    text, seen = _rewrite(f"SELECT a FROM t {clause} x JOIN u ON x.a = u.a")
    assert seen[0] == ("t", spec, False)
    assert text.startswith('SELECT a FROM "t@') and '" x JOIN "u@latest" AS "u" ON' in text


def test_wildcards_exclude_system_columns_only_when_named() -> None:
    text, seen = _rewrite("SELECT *, t.* FROM t WHERE _rowaddr > 5")
    assert text.startswith('SELECT * EXCLUDE (_rowid, _rowaddr), t.* EXCLUDE (_rowid, _rowaddr)')
    assert seen[0][2] is True
    text, _ = _rewrite("SELECT count(*), 2 * 3 FROM t")
    assert "EXCLUDE" not in text


def test_a_wildcard_over_joined_tables_becomes_one_per_relation() -> None:
    """``* EXCLUDE (_rowid)`` over two tables that both show ``_rowid`` is ambiguous to
    DataFusion: each relation's wildcard excludes its own (non-Lance items stay whole)."""
    text, _ = _rewrite("SELECT *, x._rowid FROM t AS x JOIN u ON x.a = u.a, (SELECT 1 AS z) s")
    assert text.startswith('SELECT x.* EXCLUDE (_rowid, _rowaddr), "u".* EXCLUDE (_rowid, '
                           '_rowaddr), s.*, x._rowid FROM')
    # one relation showing them: one wildcard, as before
    text, _ = _rewrite("SELECT *, _rowid FROM t, other")
    assert text.startswith("SELECT * EXCLUDE (_rowid, _rowaddr), _rowid FROM")
    text, _ = _rewrite("SELECT u.*, t._rowid FROM t JOIN u ON t.a = u.a")
    assert text.startswith("SELECT u.* EXCLUDE (_rowid, _rowaddr), t._rowid FROM")


@pytest.mark.parametrize("sql", [
    "SELECT *, t._rowid FROM t JOIN u USING (a)",
    "SELECT *, t._rowid FROM t NATURAL JOIN u",
    "SELECT *, t._rowid FROM t, u, (SELECT 1 AS z)",
])
def test_an_ambiguous_wildcard_is_refused_with_a_way_out(sql: str) -> None:
    with pytest.raises(InvalidInputError, match=r"a\.\*, b\.\*"):
        _rewrite(sql)


def test_each_relation_excludes_what_its_provider_shows() -> None:
    def resolve(name: str, spec: VersionSpec | None, system: bool) -> tuple[str, tuple]:
        return f'"{name}"', (("_rowid", "_gen") if name == "t" else ("_rowid",))

    out = rewrite("SELECT t.*, u.*, n.* FROM t JOIN u ON t.a = u.a, "
                  "nearest('t', 'e', [0.0], 3) AS n WHERE t._rowid = 1",
                  lambda n: n in {"t", "u"}, resolve, ("_rowid", "_gen"))
    assert out.text.startswith('SELECT t.* EXCLUDE (_rowid, _gen), u.* EXCLUDE (_rowid), '
                               'n.* EXCLUDE (_rowid, _gen) FROM')


def test_subquery_wildcard_over_a_subquery_is_untouched() -> None:
    text, _ = _rewrite("SELECT * FROM (SELECT _rowid, a FROM t) s")
    assert text == 'SELECT * FROM (SELECT _rowid, a FROM "t@latest#sys" AS "t") s'


def test_ctes_functions_strings_and_comments_are_left_alone() -> None:
    text, seen = _rewrite(
        "WITH t AS (SELECT 1 AS a) SELECT 'FROM t VERSION AS OF 1' /* FROM t */ "
        "FROM t, table_versions('u')"
    )
    assert seen == [] and "VERSION AS OF 1'" in text


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT * FROM (SELECT * FROM t) VERSION AS OF 2",
        "SELECT * FROM other VERSION AS OF 2",
        "SELECT * FROM t VERSION AS OF",
        "SELECT * FROM t AT (VERSION => 3",
        "SELECT * FROM t TIMESTAMP AS OF 'yesterday'",
    ],
)
def test_clauses_that_cannot_be_honoured_fail_loudly(sql: str) -> None:
    with pytest.raises(InvalidInputError):
        _rewrite(sql)


def _reference_tokens(sql: str) -> list[tuple[str, str, int, int]]:
    """Tokens as a plain match-at-position loop finds them (what ``tokenize`` must give)."""
    from lance_sql.sql.tokens import _TOKEN

    out, pos = [], 0
    while pos < len(sql):
        match = _TOKEN.match(sql, pos)
        if match is None:
            raise InvalidInputError(f"position {pos}")
        if match.lastgroup not in ("ws", "comment"):
            out.append((match.lastgroup or "op", match.group(), match.start(), match.end()))
        pos = match.end()
    return out


@pytest.mark.parametrize("sql", [
    "SELECT * FROM t WHERE x = 1",
    "SELECT a.\"b \"\"c\"\"\", 'it''s', E'x', `q` FROM t -- tail\n/* block\n */ WHERE 1.5e-3 >= .5",
    "WITH c (x) AS (SELECT 1) SELECT * FROM c, t AS v WHERE y IN (1, -2, +3, NULL) ;",
    "SELECT 1",
    "  ",
    "SELECT * FROM t WHERE id IN (" + ", ".join(str(i) for i in range(3000)) + ")",
])
def test_tokens_are_those_of_a_match_at_position_loop(sql: str) -> None:
    from lance_sql.sql.tokens import tokenize

    assert [tuple(t) for t in tokenize(sql)] == _reference_tokens(sql)


@pytest.mark.parametrize("sql", ["SELECT \x01", "SELECT 1 \x01 2", "\x02", "SELECT 'open"])
def test_an_unexpected_character_is_reported_where_it_stands(sql: str) -> None:
    from lance_sql.sql.tokens import tokenize

    with pytest.raises(InvalidInputError) as caught:
        _reference_tokens(sql)
    position = str(caught.value).split()[-1]
    with pytest.raises(InvalidInputError, match=f"at position {position} "):
        tokenize(sql)


def test_long_literal_lists_keep_their_text_and_put_nulls_last() -> None:
    """A 2,000-literal IN list is passed through as written (no NULLs) or with its NULLs
    moved to the end; literals inside strings and comments are not lists."""
    keys = ", ".join(str(i) for i in range(2000))
    sql = f"SELECT * FROM t WHERE id IN ({keys}) AND s = 'IN (NULL, 1)'"
    text, _ = _rewrite(sql)
    assert text == sql.replace("FROM t", 'FROM "t@latest" AS "t"')
    text, _ = _rewrite(f"SELECT * FROM t WHERE id IN (NULL, {keys}, -5, NULL) -- IN (NULL, 2)")
    assert f"id IN ({keys}, -5, NULL, NULL) -- IN (NULL, 2)" in text
    text, _ = _rewrite("SELECT * FROM t WHERE id IN (NULL, NULL)")
    assert text.endswith("id IN (NULL, NULL)")
    text, _ = _rewrite("SELECT * FROM t WHERE id IN (NULL, (1), 2)")  # not a literal list
    assert text.endswith("id IN (NULL, (1), 2)")


# -- long literal lists: one token each ------------------------------------------------------

_LONG = ", ".join(str(i * 7) for i in range(40))


@pytest.mark.parametrize("sql", [
    f"SELECT * FROM t WHERE id IN ({_LONG})",
    f"SELECT * FROM t WHERE id IN ({_LONG}, NULL, 3)",
    f"SELECT * FROM t WHERE id IN (NULL, {_LONG})",
    f"SELECT _rowid, * FROM t VERSION AS OF 3 WHERE id IN ({_LONG}) AND v IN (1.5, 2)",
    f"SELECT * FROM t WHERE id IN ({_LONG}, 3e5, 4.) OR s = '{_LONG}' -- {_LONG}",
    f"SELECT {_LONG}, * FROM t, u WHERE t.id NOT IN ({_LONG},{_LONG})",
    "SELECT * FROM t WHERE id IN (" + ",".join(map(str, range(15))) + ")",
])
def test_literal_runs_rewrite_as_single_tokens_would(sql: str,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    from lance_sql.sql import rewrite as module
    from lance_sql.sql import tokens

    fast = _rewrite(sql)
    monkeypatch.setattr(module, "tokenize", lambda text, **_: tokens.tokenize(text))
    assert fast == _rewrite(sql)


def test_a_long_list_is_one_token_and_a_short_one_is_not() -> None:
    from lance_sql.sql.tokens import LITERAL_RUN, tokenize

    long = ", ".join(map(str, range(LITERAL_RUN)))
    short = ", ".join(map(str, range(LITERAL_RUN - 1)))
    sql = f"SELECT * FROM t WHERE a IN ({long}) AND b IN ({short}) AND c = '{long}'"
    toks = tokenize(sql, literal_runs=True)
    runs = [t for t in toks if t.kind == "numbers"]
    assert [t.text for t in runs] == [long]
    assert sql[runs[0].start:runs[0].end] == long
    assert sum(t.kind == "number" for t in toks) == LITERAL_RUN - 1  # the short list
    # a run never splits a number: 3e5 and 4.5e1 stay whole numbers after it
    tail = tokenize(f"({long}, 3e5, 4.5e1)", literal_runs=True)
    assert [t.text for t in tail if t.kind == "number"] == ["3e5", "4.5e1"]
    assert tokenize(sql) == [t for t in tokenize(sql) if t.kind != "numbers"]


def test_a_null_in_a_long_list_goes_last_with_every_value_kept() -> None:
    text, _ = _rewrite(f"SELECT * FROM t WHERE id IN (NULL, {_LONG}, 5)")
    assert text.endswith(f"WHERE id IN ({_LONG}, 5, NULL)")
