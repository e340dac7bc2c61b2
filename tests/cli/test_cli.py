"""The lance-sql command: every subcommand, output formats, errors, the shell, the demo."""

from __future__ import annotations

import csv
import io
import json
import os
import resource
import select
import subprocess
import sys
import time
from pathlib import Path

import pytest

from lance_sql.cli.demo import build_demo_tables, run_demo
from lance_sql.cli.main import main
from lance_sql.cli.shell import Shell
from lance_sql.sql.session import connect

LANCE_SQL = [sys.executable, "-m", "lance_sql.cli.main"]


@pytest.fixture(scope="module")
def db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The demo tables: events (v1 create 8 rows, v2 append 4 + tag 'loaded', v3 delete
    the 4 'view' rows) and users."""
    root = tmp_path_factory.mktemp("db")
    build_demo_tables(root)
    return root


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def assert_one_line_error(err: str, *fragments: str) -> None:
    lines = err.splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("lance-sql: error: "), err
    assert "Traceback" not in err
    for fragment in fragments:
        assert fragment in lines[0], err


# -- sql -----------------------------------------------------------------------------
def test_sql_table_format(db: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "sql", str(db),
                         "SELECT kind, count(*) AS n FROM events VERSION AS OF 'loaded' "
                         "GROUP BY kind ORDER BY kind")
    assert code == 0 and err == ""
    assert out == (" kind  | n\n"
                   "-------+---\n"
                   " buy   | 3\n"
                   " click | 5\n"
                   " view  | 4\n"
                   "(3 rows)\n")


def test_sql_csv_and_json(db: Path, capsys: pytest.CaptureFixture[str]) -> None:
    query = "SELECT id, kind, amount FROM events VERSION AS OF 1 WHERE id <= 3 ORDER BY id"
    code, out, _ = run(capsys, "sql", str(db), query, "--format", "csv")
    assert code == 0
    assert list(csv.reader(io.StringIO(out))) == [
        ["id", "kind", "amount"], ["1", "click", "1.5"], ["2", "view", "0.0"],
        ["3", "click", "2.25"]]
    code, out, _ = run(capsys, "sql", str(db), query, "--format", "json")
    assert code == 0
    assert json.loads(out) == [{"id": 1, "kind": "click", "amount": 1.5},
                               {"id": 2, "kind": "view", "amount": 0.0},
                               {"id": 3, "kind": "click", "amount": 2.25}]
    code, out, _ = run(capsys, "sql", str(db), "SELECT * FROM events WHERE id < 0",
                       "--format", "json")
    assert code == 0 and json.loads(out) == []
    # several statements: one JSON document, an array of their results
    code, out, _ = run(capsys, "sql", str(db), "SELECT 1 AS a; SELECT 'x' AS b",
                       "--format", "json")
    assert code == 0 and json.loads(out) == [[{"a": 1}], [{"b": "x"}]]
    code, out, _ = run(capsys, "sql", str(db), "SELECT 1 AS a; SELECT nope",
                       "--format", "json")
    assert code == 1 and json.loads(out) == [[{"a": 1}], None]


def test_sql_several_statements_file_and_stdin(db: Path, tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str],
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    script = tmp_path / "q.sql"
    script.write_text("-- two statements; the ';' in the string is not an end\n"
                      "SELECT 'a;b' AS s;\nSELECT count(*) AS n FROM events\n")
    code, out, _ = run(capsys, "sql", str(db), "-f", str(script), "--format", "csv")
    assert code == 0 and out == "s\na;b\n\nn\n8\n"
    monkeypatch.setattr(sys, "stdin", io.StringIO("SELECT count(*) AS n FROM users;"))
    code, out, _ = run(capsys, "sql", str(db), "-", "--format", "csv")
    assert code == 0 and out == "n\n3\n"


def test_sql_system_columns_and_single_table_root(db: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "sql", str(db / "events.lance"),
                       "SELECT _rowaddr, id FROM events WHERE _rowaddr = 4294967297",
                       "--format", "csv")
    assert code == 0 and out == "_rowaddr,id\n4294967297,10\n"
    code, out, _ = run(capsys, "sql", str(db), "-t", f"ev={db / 'events.lance'}",
                       "SELECT * FROM ev ORDER BY id LIMIT 1", "--format", "csv")
    assert code == 0 and out == "id,user_id,kind,amount\n1,1,click,1.5\n"


def test_sql_max_rows(db: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "sql", str(db), "SELECT id FROM events ORDER BY id",
                       "--max-rows", "2")
    assert code == 0
    assert out.splitlines()[2:] == ["  1", "  3", "(8 rows, first 2 shown)"]


@pytest.mark.parametrize(
    ("query", "fragments"),
    [
        ("SELECT * FROM nope", ["unknown table", "nope"]),
        ("SELECT nope FROM events", ["unknown column", "nope"]),
        ("SELEC 1", ["invalid SQL"]),
        ("SELECT * FROM events VERSION AS OF 42", ["version 42", "does not exist"]),
        ("SELECT * FROM events TIMESTAMP AS OF '2000-01-01'", ["no version committed"]),
        ("SELECT 1/0", ["Divide by zero"]),  # DataFusion's own error: one line too
        ("SELECT * FROM table_versions('nope')", ["unknown table 'nope'"]),
    ],
)
def test_sql_errors_are_one_line(db: Path, capsys: pytest.CaptureFixture[str], query: str,
                                 fragments: list[str]) -> None:
    code, out, err = run(capsys, "sql", str(db), query)
    assert code == 1 and out == ""
    assert_one_line_error(err, *fragments)


def test_sql_error_while_streaming_is_typed(tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    """A scan that fails mid-query (a truncated data file) still ends in one line."""
    build_demo_tables(tmp_path)
    data_file = next((tmp_path / "users.lance" / "data").iterdir())
    data_file.write_bytes(data_file.read_bytes()[:-60])
    for fmt in ("table", "csv"):
        code, out, err = run(capsys, "sql", str(tmp_path), "SELECT * FROM users", "--format", fmt)
        assert code == 1 and out == ""
        assert_one_line_error(err, data_file.name)


def test_sql_stops_at_the_first_error(db: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "sql", str(db), "SELECT 1 AS a; SELECT * FROM nope; SELECT 2",
                         "--format", "csv")
    assert code == 1 and out == "a\n1\n\n"
    assert_one_line_error(err, "nope")


def test_sql_bad_root_and_usage(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "sql", str(tmp_path / "missing"), "SELECT 1")
    assert code == 1
    assert_one_line_error(err, "not a directory of Lance tables")
    code, _, err = run(capsys, "sql", str(tmp_path), "-t", "oops", "SELECT 1")
    assert code == 1
    assert_one_line_error(err, "NAME=PATH")
    with pytest.raises(SystemExit) as exit_info:
        main(["sql", str(tmp_path), "SELECT 1", "--format", "xml"])
    assert exit_info.value.code == 2


def test_progress_forced_and_off(db: Path, capsys: pytest.CaptureFixture[str]) -> None:
    query = "SELECT id FROM events"
    code, _, err = run(capsys, "sql", str(db), query, "--progress", "--format", "csv")
    assert code == 0
    assert err.startswith("lance-sql: 8 rows, ") and "batch" in err
    code, _, err = run(capsys, "sql", str(db), query, "--format", "csv")
    assert code == 0 and err == ""  # stderr is not a terminal: no progress by default


# -- log and tag ------------------------------------------------------------------------
def test_log(db: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "log", str(db / "events.lance"), "--format", "csv")
    assert code == 0
    rows = list(csv.DictReader(io.StringIO(out)))
    assert [(r["version"], r["operation"], r["rows"], r["tag"]) for r in rows] == [
        ("1", "overwrite", "8", ""), ("2", "append", "12", "loaded"), ("3", "delete", "8", "")]
    code, out, _ = run(capsys, "log", str(db / "events.lance"))
    assert code == 0 and out.split()[0] == "version" and out.endswith("(3 rows)\n")
    code, _, err = run(capsys, "log", str(db / "missing"))
    assert code == 1
    assert_one_line_error(err, "no Lance table")


def test_tags(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    build_demo_tables(tmp_path)
    table = str(tmp_path / "events.lance")
    assert run(capsys, "tag", "create", table, "first", "1")[:2] == (
        0, "created tag 'first' -> version 1\n")
    assert run(capsys, "tag", "create", table, "newest")[:2] == (
        0, "created tag 'newest' -> version 3\n")
    code, out, _ = run(capsys, "tag", "list", table, "--format", "json")
    assert code == 0 and json.loads(out) == [
        {"tag": "first", "version": 1}, {"tag": "loaded", "version": 2},
        {"tag": "newest", "version": 3}]
    code, _, err = run(capsys, "tag", "create", table, "bad", "no-such-tag")
    assert code == 1
    assert_one_line_error(err, "no-such-tag")
    code, out, _ = run(capsys, "sql", str(tmp_path),
                       "SELECT count(*) AS n FROM events VERSION AS OF 'first'", "--format", "csv")
    assert out == "n\n8\n"
    assert run(capsys, "tag", "create", table, "again", "first")[:2] == (
        0, "created tag 'again' -> version 1\n")  # the version another tag names
    assert run(capsys, "tag", "delete", table, "first")[:2] == (0, "deleted tag 'first'\n")
    code, _, err = run(capsys, "tag", "delete", table, "first")
    assert code == 1
    assert_one_line_error(err, "first")
    code, _, err = run(capsys, "tag", "create", table, "bad", "99")
    assert code == 1
    assert_one_line_error(err, "99")


# -- shell ---------------------------------------------------------------------------
def shell(db: Path, text: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = Shell(connect(db), stdin=io.StringIO(text), out=out, err=err).run()
    return code, out.getvalue(), err.getvalue()


def test_shell_statements_commands_and_errors(db: Path) -> None:
    code, out, err = shell(db, (
        ".tables\n"
        "SELECT kind,\n"
        "       count(*) AS n   -- a comment; with a semicolon\n"
        "FROM events\n"
        "GROUP BY kind ORDER BY kind;\n"
        ".versions events\n"
        ".tags events\n"
        "SELECT * FROM nope;\n"
        "SELECT count(*) AS n FROM events VERSION AS OF 1;\n"
    ))
    assert code == 1  # piped input with a failed statement
    assert err.startswith("error: unknown table") and err.count("\n") == 1
    blocks = out.split("\n\n")
    assert blocks[0] == "events\nusers"
    assert blocks[1].splitlines()[2:] == [" buy   | 3", " click | 5", "(2 rows)"]
    assert "overwrite" in blocks[2] and "loaded" in blocks[2] and "(3 rows)" in blocks[2]
    assert blocks[3].splitlines()[2:] == [" loaded |       2", "(1 row)"]
    # the failed statement printed nothing on stdout, between its separating blank lines
    assert out.endswith(" loaded |       2\n(1 row)\n\n\n n\n---\n 8\n(1 row)\n")


def test_shell_format_schema_help_and_quit(db: Path) -> None:
    code, out, err = shell(db, (
        ".format csv\n"
        "SELECT 1 AS a; SELECT 2 AS b;\n"
        ".schema users\n"
        ".help\n"
        ".quit\n"
        "SELECT 'never run';\n"
    ))
    assert code == 0 and err == ""
    assert out.startswith("\na\n1\n\nb\n2\n\ncolumn,type,nullable\nuser_id,int64,true\n")
    assert ".versions TABLE" in out and "never run" not in out


def test_shell_keeps_going_after_errors(db: Path) -> None:
    code, out, err = shell(db, (
        ".bogus\n"
        ".versions nope\n"
        ".format xml\n"
        "SELECT count(*) AS n FROM users\n"  # the last statement may omit its ';'
    ))
    assert code == 1
    errors = err.splitlines()
    assert len(errors) == 3 and all(e.startswith("error: ") for e in errors)
    assert "unknown command .bogus" in errors[0] and "nope" in errors[1]
    assert out.rstrip().endswith(" 3\n(1 row)")


def test_shell_through_main(db: Path, capsys: pytest.CaptureFixture[str],
                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "stdin", io.StringIO("SELECT count(*) AS n FROM events;\n"))
    code, out, err = run(capsys, "shell", str(db), "--format", "json")
    assert code == 0 and json.loads(out) == [{"n": 8}] and err == ""


@pytest.mark.skipif(not hasattr(os, "openpty"), reason="needs a pseudo-terminal")
def test_interactive_shell_on_a_terminal(db: Path, tmp_path: Path) -> None:
    """Prompts, a continuation prompt, readline history (one entry per statement)."""
    history = tmp_path / "history"
    leader, follower = os.openpty()
    env = dict(os.environ, LANCE_SQL_HISTORY=str(history), TERM="dumb")
    proc = subprocess.Popen([*LANCE_SQL, "shell", str(db)], stdin=follower, stdout=follower,
                            stderr=follower, env=env, close_fds=True)
    os.close(follower)
    seen = b""

    def read_until(marker: bytes) -> None:
        nonlocal seen
        deadline = time.monotonic() + 30
        while marker not in seen and time.monotonic() < deadline:
            ready, _, _ = select.select([leader], [], [], 0.1)
            if ready:
                try:
                    seen += os.read(leader, 4096)
                except OSError:
                    break
        assert marker in seen, seen.decode(errors="replace")
        seen = seen[seen.index(marker) + len(marker):]

    try:
        read_until(b"lance-sql> ")
        os.write(leader, b"SELECT count(*) AS n\r")
        read_until(b"...> ")
        os.write(leader, b"FROM events;\r")
        read_until(b"(1 row)")
        read_until(b"lance-sql> ")
        os.write(leader, b"SELECT * FROM nope;\r")
        read_until(b"error: unknown table")
        read_until(b"lance-sql> ")
        os.write(leader, b".quit\r")
        assert proc.wait(timeout=30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        os.close(leader)
    assert history.read_text().splitlines()[-3:] == [
        "SELECT count(*) AS n FROM events;", "SELECT * FROM nope;", ".quit"]


# -- demo and help -------------------------------------------------------------------------
def test_demo_showcase(tmp_path: Path) -> None:
    out, err = io.StringIO(), io.StringIO()
    run_demo(tmp_path, out, err)
    text = out.getvalue()
    assert err.getvalue() == ""
    for fragment in ("VERSION AS OF 1", "VERSION AS OF 'loaded'", "TIMESTAMP AS OF '",
                     "_rowaddr, * FROM events WHERE _rowaddr = 4294967297",
                     "table_versions('events')", "EXPLAIN", "ScanExec: events[v=3]",
                     "JOIN users"):
        assert fragment in text, fragment
    sections = {s.split("\n", 1)[0]: s for s in text.split("\n-- ")}
    by_time = next(s for k, s in sections.items() if k.startswith("Time travel by commit time"))
    assert by_time.splitlines()[-2:] == [" 12", "(1 row)"]  # version 2's rows
    removed = next(s for k, s in sections.items() if k.startswith("A self-join"))
    assert [line.split("|")[0].strip() for line in removed.splitlines()[4:8]] == [
        "2", "5", "8", "11"]
    feed = next(s for k, s in sections.items() if k.startswith("The change feed"))
    rows = [[c.strip() for c in line.split("|")] for line in feed.splitlines()
            if line.count("|") == 5 and "_commit_version" not in line]
    assert [(r[1], r[3]) for r in rows if r[1] == "delete"] == [("delete", i)
                                                               for i in ("2", "5", "8", "11")]
    updates = [(r[1], r[3], r[5]) for r in rows if r[1].startswith("update")]
    assert updates == [("update_preimage", "4", "99.0"), ("update_postimage", "4", "100.0"),
                       ("update_preimage", "7", "42.0"), ("update_postimage", "7", "43.0"),
                       ("update_preimage", "9", "15.0"), ("update_postimage", "9", "16.0")]


def _children_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def test_demo_command_from_a_fresh_process(tmp_path: Path) -> None:
    # the demo's own CPU time (~1.5 s): its wall time measured the machine, 11.7 s once
    # beside the other test worker and other jobs
    before = _children_cpu_s()
    proc = subprocess.run([*LANCE_SQL, "demo"], capture_output=True, text=True, timeout=60,
                          cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert _children_cpu_s() - before < 10
    assert "Time travel to version 1" in proc.stdout and proc.stderr == ""


def test_demo_dir_is_kept_and_not_overwritten(tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    assert run(capsys, "demo", "--dir", str(tmp_path / "d"))[0] == 0
    assert (tmp_path / "d" / "events.lance" / "_versions").is_dir()
    code, _, err = run(capsys, "demo", "--dir", str(tmp_path / "d"))
    assert code == 1
    assert_one_line_error(err, "already")


def test_errors_exit_without_traceback_in_a_real_process(db: Path) -> None:
    proc = subprocess.run([*LANCE_SQL, "sql", str(db), "SELECT * FROM nope"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1 and proc.stdout == ""
    assert_one_line_error(proc.stderr, "nope")


@pytest.mark.parametrize("command", [[], ["sql"], ["shell"], ["log"], ["tag"], ["demo"]])
def test_help_explains_each_command(command: list[str],
                                    capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main([*command, "--help"])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    assert "example" in out
    if not command:
        for name in ("sql", "shell", "log", "tag", "demo"):
            assert f"  {name} " in out or f"lance-sql {name}" in out
