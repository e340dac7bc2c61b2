"""Every command, given bad arguments, answers in one line: never a raw traceback."""

from __future__ import annotations

import io
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pytest

import lance_sql
from lance_sql.cli.main import main
from lance_sql.cli.shell import Shell
from lance_sql.errors import InvalidInputError, NotFoundError


@pytest.fixture(scope="module")
def place(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    base = tmp_path_factory.mktemp("bad_args")
    root = base / "root"
    lance_sql.write_dataset(pa.table({"id": [1, 2]}), root / "t.lance")
    (base / "file.txt").write_text("not a table\n")
    (base / "latin1.sql").write_bytes("SELECT 'café'".encode("latin-1"))
    (base / "plain").mkdir()
    return {"ROOT": str(root), "TABLE": str(root / "t.lance"), "FILE": str(base / "file.txt"),
            "LATIN1": str(base / "latin1.sql"),
            "DIR": str(base / "plain"), "MISSING": str(base / "missing"),
            "NOWHERE": "/proc/no/such/place"}


BAD = [
    [], ["nope"], ["sql"], ["sql", "MISSING", "SELECT 1"], ["sql", "FILE", "SELECT 1"],
    ["sql", "ROOT", "SELECT 1", "--max-rows", "-1"], ["sql", "ROOT", "--max-rows", "x", "SELECT 1"],
    ["sql", "ROOT", "-t", "bad", "SELECT 1"], ["sql", "ROOT", "-t", "x=MISSING", "SELECT 1"],
    ["sql", "ROOT", "-t", "x=FILE", "SELECT 1"], ["sql", "ROOT", "-t", "x=DIR", "SELECT 1"],
    ["sql", "ROOT", "-f", "MISSING"], ["sql", "ROOT", "-f", "DIR"], ["sql", "ROOT", "-f", "LATIN1"],
    ["sql", "ROOT", "SELECT 'caf\udce9'"],
    ["sql", "ROOT", "-f", "FILE", "SELECT 1"], ["sql", "ROOT", "SELEC 1"], ["sql", "ROOT", ";"],
    ["sql", "ROOT", "SELECT * FROM nope"], ["sql", "ROOT", "--format", "xml", "SELECT 1"],
    ["sql", "ROOT", "COPY (SELECT 1) TO 'FILE'"], ["sql", "ROOT", "CREATE TABLE t AS SELECT 1"],
    ["sql", "ROOT", "--read-only", "DELETE FROM t"], ["sql", "ROOT", "DROP TABLE nope"],
    ["shell", "MISSING"], ["shell", "ROOT", "-t", "bad"], ["shell", "ROOT", "--max-rows", "-3"],
    ["log"], ["log", "MISSING"], ["log", "FILE"], ["log", "ROOT"], ["log", "TABLE", "--format"],
    ["tag"], ["tag", "list"], ["tag", "list", "MISSING"], ["tag", "create", "TABLE"],
    ["tag", "create", "TABLE", "x", "99"], ["tag", "create", "TABLE", "x", "-5"],
    ["tag", "create", "TABLE", "x", "abc"], ["tag", "create", "MISSING", "x"],
    ["tag", "create", "TABLE", "a" * 300], ["tag", "delete", "TABLE", "nope"],
    ["demo", "--dir", "FILE"], ["demo", "--dir", "NOWHERE"], ["demo", "--dir"],
]


def _argv(args: list[str], place: dict[str, str]) -> list[str]:
    out = []
    for arg in args:
        for key, value in place.items():
            arg = arg.replace(key, value) if key in arg else arg
        out.append(arg)
    return out


@pytest.mark.parametrize("args", BAD, ids=lambda a: " ".join(a)[:60] or "(none)")
def test_bad_arguments_give_one_line_not_a_traceback(args: list[str], place: dict[str, str],
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    try:
        code = main(_argv(args, place))
    except SystemExit as exc:  # argparse: usage error
        code = exc.code
    err = capsys.readouterr().err
    assert code in (1, 2), err
    assert "Traceback" not in err
    last = err.strip().splitlines()[-1]
    assert last.startswith("lance-sql"), err
    if code == 1:
        assert len(err.strip().splitlines()) == 1, err


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["--version"])
    assert exit_info.value.code == 0
    assert capsys.readouterr().out.strip() == f"lance-sql {lance_sql.__version__}"


def test_max_rows_must_not_be_negative(place: dict[str, str],
                                       capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["sql", place["ROOT"], "SELECT 1", "--max-rows", "-1"])
    assert "--max-rows: must be 0 or more" in capsys.readouterr().err


def test_table_targets_are_checked_before_any_statement_runs(
        place: dict[str, str], capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["sql", place["ROOT"], "-t", f"x={place['DIR']}",
                 "CREATE TABLE made AS SELECT 1 AS a"])
    err = capsys.readouterr().err
    assert code == 1 and f"--table x={place['DIR']}" in err
    assert not (Path(place["ROOT"]) / "made.lance").exists()


def test_demo_dir_that_is_a_file(place: dict[str, str],
                                 capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo", "--dir", place["FILE"]]) == 1
    assert capsys.readouterr().err == (f"lance-sql: error: --dir {place['FILE']} exists and is "
                                       "not a directory\n")


def test_connect_to_a_missing_root_needs_create(tmp_path: Path) -> None:
    with pytest.raises(NotFoundError, match="create=True"):
        lance_sql.connect(tmp_path / "nope")
    assert not (tmp_path / "nope").exists()
    (tmp_path / "f").write_text("x")
    with pytest.raises(InvalidInputError, match="not a directory"):
        lance_sql.connect(tmp_path / "f")
    session = lance_sql.connect(tmp_path / "new", create=True)
    assert session.tables() == [] and (tmp_path / "new").is_dir()
    session.sql("CREATE TABLE first AS SELECT 1 AS a")
    assert session.tables() == ["first"]


@pytest.mark.parametrize("tables, banner", [(1, "1 table."), (2, "2 tables.")])
def test_shell_banner_plurals(tmp_path: Path, tables: int, banner: str) -> None:
    for i in range(tables):
        lance_sql.write_dataset(pa.table({"a": [i]}), tmp_path / f"t{i}.lance")
    out = io.StringIO()
    Shell(lance_sql.connect(tmp_path), stdin=io.StringIO(".quit\n"), out=out, err=out,
          interactive=True).run()
    assert out.getvalue().startswith(f"lance-sql shell: {banner} Type .help")


def test_the_console_script_entry_exits_with_mains_status(place: dict[str, str]) -> None:
    proc = subprocess.run([sys.executable, "-c", "from lance_sql.cli.main import entry; entry()",
                           "log", place["MISSING"]], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1 and proc.stderr.startswith("lance-sql: error: ")


_HELP_PROBE = r"""
import contextlib, io, sys
from lance_sql.cli.main import main
with contextlib.redirect_stdout(io.StringIO()) as out, contextlib.redirect_stderr(out):
    try:
        main(sys.argv[1:])
    except SystemExit as exc:
        code = exc.code
print(code, "datafusion" in sys.modules, "pandas" in sys.modules, len(out.getvalue()) > 50)
"""


@pytest.mark.parametrize("argv", [["--help"], ["sql", "--help"], ["memwal", "--help"],
                                  ["no-such-command"], ["sql"], ["tag", "create"]])
def test_help_and_usage_errors_do_not_load_the_sql_layer(argv: list[str]) -> None:
    """`--help` and usage errors answer without importing DataFusion (which imports
    pandas): ~0.4 s of CPU instead of ~0.8 s."""
    proc = subprocess.run([sys.executable, "-c", _HELP_PROBE, *argv], capture_output=True,
                          text=True, timeout=60, check=True)
    code, datafusion, pandas, printed = proc.stdout.split()
    assert code in ("0", "2") and printed == "True", proc.stdout
    assert (datafusion, pandas) == ("False", "False"), argv


def test_sql_on_stdin_that_is_not_utf8_is_one_line(place: dict[str, str],
                                                  monkeypatch: pytest.MonkeyPatch,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    """Bytes that are not UTF-8 (a Latin-1 file, ``-f`` or piped in) are an error naming
    the first bad byte, not a UnicodeDecodeError traceback."""
    latin1 = io.TextIOWrapper(io.BytesIO("SELECT 'café'".encode("latin-1")), encoding="utf-8")
    monkeypatch.setattr(sys, "stdin", latin1)
    assert main(["sql", place["ROOT"], "-"]) == 1
    assert capsys.readouterr().err == (
        "lance-sql: error: cannot read the SQL on stdin: not utf-8 text (byte 0xe9 at offset 11)\n")
