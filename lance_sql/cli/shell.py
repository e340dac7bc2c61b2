"""``lance-sql shell``: an interactive SQL prompt over a directory of Lance tables.

Statements may span lines and end at ``;``. Lines starting with ``.`` are commands
(``.help`` lists them). An error prints one line and the shell carries on. On a
terminal, line editing and history come from the standard ``readline`` module when it
exists; history is kept in ``~/.lance_sql_history`` (or ``$LANCE_SQL_HISTORY``), one
entry per statement. With input from a pipe there are no prompts, and the exit status
is 1 if any statement failed.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

import pyarrow as pa

from lance_sql.cli.execute import (
    OutputOptions,
    error_message,
    is_blank,
    is_query_error,
    run_statements,
    split_statements,
)
from lance_sql.cli.render import FORMATS, render_table
from lance_sql.errors import InvalidInputError

if TYPE_CHECKING:
    from lance_sql.sql.session import LanceSession

PROMPT = "lance-sql> "
CONTINUE = "      ...> "
HELP = """\
Enter SQL statements ending with ';' (they may span several lines), or a command:
  .tables             list the tables
  .schema TABLE       columns of a table (system columns _rowid, _rowaddr on request)
  .versions TABLE     versions of a table: operation, rows added and removed, tags
  .tags TABLE         tags of a table
  .format FMT         output format: table, csv or json
  .help               this text
  .quit               leave (also .exit or Ctrl-D)
Time travel: SELECT * FROM t VERSION AS OF 3 | VERSION AS OF 'tag' |
             TIMESTAMP AS OF '2025-01-01 00:00:00' | FOR SYSTEM_TIME AS OF ... |
             AT (VERSION => 3); history: SELECT * FROM table_versions('t');
Writes (one commit each): CREATE TABLE t AS SELECT ...; INSERT INTO t VALUES (...);
             UPDATE; DELETE; MERGE INTO; ALTER TABLE; DROP TABLE t;
"""


def history_path() -> Path:
    """Where the shell keeps its history: ``$LANCE_SQL_HISTORY``, else ``~/.lance_sql_history``."""
    override = os.environ.get("LANCE_SQL_HISTORY")
    return Path(override) if override else Path.home() / ".lance_sql_history"


class _History:
    """readline history, loaded at start and saved at exit; a no-op without readline."""

    def __init__(self) -> None:
        try:
            import readline  # optional, and only for terminals
        except ImportError:  # e.g. Windows without pyreadline
            self.readline: Any = None
            return
        self.readline = readline
        self.path = history_path()
        readline.set_history_length(1000)
        try:
            readline.read_history_file(self.path)
        except OSError:
            pass

    def lines_added(self) -> int:
        return self.readline.get_current_history_length() if self.readline else 0

    def collapse(self, since: int, statement: str) -> None:
        """Replace the lines typed since ``since`` by the statement they formed."""
        if self.readline is None:
            return
        rl = self.readline
        try:
            while rl.get_current_history_length() > since:
                rl.remove_history_item(rl.get_current_history_length() - 1)
            rl.add_history(statement)
        except (ValueError, OSError):
            pass

    def save(self) -> None:
        if self.readline is None:
            return
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self.readline.write_history_file(self.path)
        except OSError:
            pass


class Shell:
    """Reads lines, runs statements and dot-commands, reports errors and keeps going."""

    def __init__(self, session: LanceSession, *, stdin: TextIO | None = None,
                 out: TextIO | None = None, err: TextIO | None = None,
                 options: OutputOptions | None = None, interactive: bool | None = None) -> None:
        self.session = session
        self.stdin = stdin or sys.stdin
        self.out = out or sys.stdout
        self.err = err or sys.stderr
        self.options = options or OutputOptions()
        if interactive is None:
            interactive = _isatty(self.stdin) and _isatty(self.out)
        self.interactive = interactive
        self.failures = 0
        self._outputs = 0  # results and command outputs so far, to separate them
        self.commands: dict[str, Callable[[list[str]], None]] = {
            ".tables": self._tables, ".schema": self._schema, ".versions": self._versions,
            ".tags": self._tags, ".format": self._format, ".help": self._help,
        }

    def run(self) -> int:
        """Read until end of input or ``.quit``; returns the process exit status."""
        history = _History() if self.interactive else None
        if self.interactive:
            count = len(self.session.tables())
            self.out.write(f"lance-sql shell: {count} table{'' if count == 1 else 's'}. "
                           "Type .help for help, .quit to leave.\n")
        buffer = ""
        first_line = history.lines_added() if history else 0
        while True:
            try:
                line = self._read(CONTINUE if buffer else PROMPT)
            except KeyboardInterrupt:
                self.out.write("^C\n")
                buffer = ""
                continue
            if line is None:
                break
            if not buffer and not line.strip():
                first_line = history.lines_added() if history else 0
                continue
            if not buffer and line.strip().startswith("."):
                if self._command(line.strip()) == "quit":
                    break
                first_line = history.lines_added() if history else 0
                continue
            buffer += line + "\n"
            statements, rest = split_statements(buffer)
            if statements:
                if history:
                    history.collapse(first_line, " ".join(buffer.split()))
                self._execute(statements)
                buffer = "" if is_blank(rest) else rest
                first_line = history.lines_added() if history else 0
        if not is_blank(buffer):
            self._execute([buffer.strip()])  # a last statement without its ';'
        if history:
            history.save()
        if self.interactive:
            self.out.write("\n")
        return 0 if self.interactive or not self.failures else 1

    # -- input -----------------------------------------------------------------------
    def _read(self, prompt: str) -> str | None:
        if self.interactive and self.stdin is sys.stdin:
            try:
                return input(prompt)
            except EOFError:
                return None
        if self.interactive:
            self.out.write(prompt)
            self.out.flush()
        line = self.stdin.readline()
        return line.rstrip("\n") if line else None

    # -- execution -------------------------------------------------------------------
    def _separate(self) -> None:
        """A blank line between one output and the next, as ``lance-sql sql`` prints."""
        if self._outputs:
            self.out.write("\n")
        self._outputs += 1

    def _execute(self, statements: list[str]) -> None:
        self._separate()
        try:
            self.failures += run_statements(self.session, statements, self.out, self.err,
                                            self.options, keep_going=True)
        except KeyboardInterrupt:
            self.out.flush()
            self.err.write("interrupted\n")
            self.failures += 1

    def _command(self, line: str) -> str | None:
        name, *args = line.split()
        name = name.lower()
        if name in (".quit", ".exit", ".q"):
            return "quit"
        handler = self.commands.get(name)
        self._separate()
        try:
            if handler is None:
                raise InvalidInputError(f"unknown command {name}; type .help for the list")
            handler(args)
        except Exception as exc:
            if not is_query_error(exc):
                raise
            self.failures += 1
            self.out.flush()
            self.err.write(f"error: {error_message(exc)}\n")
        self.out.flush()
        return None

    def _table_arg(self, args: list[str], command: str) -> str:
        if len(args) != 1:
            raise InvalidInputError(f"usage: {command} TABLE")
        return args[0]

    def _tables(self, args: list[str]) -> None:
        for name in self.session.tables():
            self.out.write(name + "\n")

    def _schema(self, args: list[str]) -> None:
        schema = self.session.dataset(self._table_arg(args, ".schema")).schema
        render_table(pa.table({
            "column": [f.name for f in schema],
            "type": [str(f.type) for f in schema],
            "nullable": [f.nullable for f in schema],
        }), self.out, self.options.fmt)

    def _versions(self, args: list[str]) -> None:
        table = self._table_arg(args, ".versions")
        self.session.dataset(table)  # a clear error if it is not a table
        render_table(self.session.versions(table), self.out, self.options.fmt)

    def _tags(self, args: list[str]) -> None:
        render_table(tags_table(self.session, self._table_arg(args, ".tags")), self.out,
                     self.options.fmt)

    def _format(self, args: list[str]) -> None:
        if len(args) != 1 or args[0] not in FORMATS:
            raise InvalidInputError(f"usage: .format {'|'.join(FORMATS)}")
        self.options.fmt = args[0]

    def _help(self, args: list[str]) -> None:
        self.out.write(HELP)


def tags_table(session: LanceSession, table: str) -> pa.Table:
    """A table's tags, sorted by name."""
    tags = session.list_tags(table)
    names = sorted(tags)
    return pa.table({
        "tag": pa.array(names, pa.string()),
        "version": pa.array([tags[n]["version"] for n in names], pa.uint64()),
    })


def _isatty(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False
