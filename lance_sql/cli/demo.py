"""``lance-sql demo``: build two small tables with a history, then show SQL over them.

``events`` gets three versions (create, append, delete) and a tag; ``users`` joins
to it. Each showcase query is printed as typed at the shell, followed by its result.
"""

from __future__ import annotations

from pathlib import Path
from typing import TextIO

import pyarrow as pa

from lance_sql.cli.execute import OutputOptions, run_query
from lance_sql.errors import InvalidInputError
from lance_sql.sql.session import LanceSession, connect
from lance_sql.table import write_dataset


def build_demo_tables(root: Path) -> None:
    """``events`` (stable row ids) v1 create (8 rows), v2 append (4 rows, tagged 'loaded'),
    v3 delete views; the showcase's UPDATE makes v4."""
    uri = str(root / "events.lance")
    write_dataset(pa.table({
        "id": pa.array(range(1, 9), pa.int64()),
        "user_id": pa.array([1, 2, 1, 3, 2, 1, 3, 2], pa.int64()),
        "kind": ["click", "view", "click", "buy", "view", "click", "buy", "view"],
        "amount": [1.5, 0.0, 2.25, 99.0, 0.0, 3.0, 42.0, 0.0],
    }), uri, enable_stable_row_ids=True)
    ds = write_dataset(pa.table({
        "id": pa.array(range(9, 13), pa.int64()),
        "user_id": pa.array([1, 3, 3, 2], pa.int64()),
        "kind": ["buy", "click", "view", "click"],
        "amount": [15.0, 0.75, 0.0, 1.25],
    }), uri, mode="append")
    ds.tags.create("loaded", ds.version)
    ds.delete("kind = 'view'")
    write_dataset(pa.table({
        "user_id": pa.array([1, 2, 3], pa.int64()),
        "name": ["ada", "grace", "edsger"],
        "country": ["UK", "US", "NL"],
    }), str(root / "users.lance"))


def showcase(session: LanceSession) -> list[tuple[str, str]]:
    """(caption, query) pairs; the timestamp query uses version 2's real commit time."""
    versions = session.versions("events").to_pylist()
    v2_time = next(v["timestamp"] for v in versions if v["version"] == 2)
    stamp = v2_time.strftime("%Y-%m-%d %H:%M:%S.%f")
    return [
        ("The history of events (a table function)",
         "SELECT version, operation, rows, rows_added, rows_removed, tag "
         "FROM table_versions('events') ORDER BY version"),
        ("The latest version: the delete removed the 'view' events",
         "SELECT kind, count(*) AS n, sum(amount) AS total FROM events "
         "GROUP BY kind ORDER BY kind"),
        ("Time travel to version 1",
         "SELECT count(*) AS n FROM events VERSION AS OF 1"),
        ("Time travel to the tag 'loaded' (version 2, before the delete)",
         "SELECT kind, count(*) AS n FROM events VERSION AS OF 'loaded' "
         "GROUP BY kind ORDER BY kind"),
        ("Time travel by commit time (the latest version at or before version 2's timestamp)",
         f"SELECT count(*) AS n FROM events TIMESTAMP AS OF '{stamp}'"),
        ("System columns are hidden from * and returned when named; "
         "a row address is (fragment << 32) | offset",
         "SELECT _rowaddr, * FROM events WHERE _rowaddr = 4294967297"),
        ("A self-join across versions: the rows the delete removed",
         "SELECT old.id, old.kind FROM events VERSION AS OF 'loaded' AS old "
         "LEFT JOIN events AS cur ON old.id = cur.id WHERE cur.id IS NULL ORDER BY old.id"),
        ("A join of two tables",
         "SELECT u.name, count(*) AS events, sum(e.amount) AS spent FROM events e "
         "JOIN users u ON e.user_id = u.user_id GROUP BY u.name ORDER BY spent DESC"),
        ("EXPLAIN shows the Lance scan under DataFusion's plan",
         "EXPLAIN SELECT kind, sum(amount) FROM events WHERE amount > 1 GROUP BY kind"),
        ("UPDATE commits version 4; rows keep their stable _rowid",
         "UPDATE events SET amount = amount + 1 WHERE kind = 'buy'"),
        ("The change feed of versions 3..4: the delete and the update's pre/post-images",
         "SELECT _commit_version, _change_type, _rowid, id, kind, amount "
         "FROM table_changes('events', 3, 4) "
         "ORDER BY _commit_version, _rowid, _change_type DESC"),
    ]


def run_demo(root: Path, out: TextIO, err: TextIO) -> None:
    """Build the demo tables in ``root`` and print each showcase query with its result."""
    taken = [name for name in ("events.lance", "users.lance") if (root / name).exists()]
    if taken:
        raise InvalidInputError(f"{root} already holds {', '.join(taken)}; choose an empty --dir")
    out.write(f"Building the demo tables in {root}\n")
    build_demo_tables(root)
    session = connect(root)
    out.write(f"Tables: {', '.join(session.tables())}\n")
    options = OutputOptions(progress=False)
    for caption, query in showcase(session):
        out.write(f"\n-- {caption}\nlance-sql> {query};\n")
        run_query(session, query, out, err, options)
    out.write(
        "\nExplore further: lance-sql demo --dir DIR keeps the tables; then\n"
        "  lance-sql shell DIR\n"
        "  lance-sql sql DIR \"SELECT * FROM events VERSION AS OF 2\"\n"
        "  lance-sql log DIR/events.lance\n"
    )
