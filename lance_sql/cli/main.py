"""The ``lance-sql`` command: SQL over a directory of Lance tables, from a shell or a script.

Subcommands: ``sql`` (run statements), ``shell`` (interactive prompt), ``log`` (a
table's versions), ``tag`` (create, list, delete tags), ``memwal`` (a MemWAL table's
status and background jobs, see :mod:`.memwal`), ``demo`` (build sample tables and
show off). Errors from lance_sql are one line on stderr and exit status 1;
usage errors exit 2 (argparse).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from lance_sql import __version__
from lance_sql.allocator import tune_allocator
from lance_sql.cli.arguments import whole_number
from lance_sql.cli.execute import (
    OutputOptions,
    error_message,
    is_query_error,
    run_statements,
    split_statements,
)
from lance_sql.cli.memwal import add_memwal_parser, run_memwal
from lance_sql.cli.render import FORMATS, render_table
from lance_sql.cli.shell import Shell, tags_table
from lance_sql.errors import InvalidInputError, NotFoundError
from lance_sql.table import dataset

if TYPE_CHECKING:  # the SQL layer (and DataFusion) loads when a command needs a session:
    from lance_sql.sql.session import LanceSession  # `--help` and usage errors do not

DESCRIPTION = """\
SQL over Lance tables (DataFusion), with time travel, tags and system columns.

ROOT is a directory whose subdirectories NAME.lance (or NAME) are Lance tables, each
queryable as NAME; it may also be a single table's directory."""

EPILOG = """\
examples:
  lance-sql demo                                   build sample tables, run showcase queries
  lance-sql sql ./db "SELECT count(*) FROM events"
  lance-sql sql ./db "SELECT * FROM events VERSION AS OF 2" --format csv > v2.csv
  lance-sql sql ./db -f report.sql --format json
  lance-sql shell ./db
  lance-sql log ./db/events.lance
  lance-sql tag create ./db/events.lance release-1 3
  lance-sql memwal run ./db/events.lance --every 10s   merge, snapshot, collect garbage

Run "lance-sql COMMAND --help" for a command's options."""

SQL_EPILOG = """\
Statements end at ';'; each result is printed in turn. Time travel:
  SELECT * FROM events VERSION AS OF 3            a version number
  SELECT * FROM events VERSION AS OF 'release-1'  a tag
  SELECT * FROM events TIMESTAMP AS OF '2025-06-01 12:00:00'   (UTC unless a zone is given)
  SELECT * FROM events FOR SYSTEM_TIME AS OF '2025-06-01'     SELECT * FROM "events@3"
  SELECT * FROM events AT (VERSION => 3)
System columns (hidden from *): SELECT _rowid, _rowaddr, * FROM events WHERE _rowaddr = 4294967296
History: SELECT * FROM table_versions('events')
Writes, one commit each: CREATE TABLE t AS SELECT ..., INSERT INTO t VALUES ..., UPDATE,
  DELETE, MERGE INTO, ALTER TABLE t ADD COLUMN ..., DROP TABLE t (--read-only refuses them)

examples:
  lance-sql sql ./db "SELECT kind, count(*) FROM events GROUP BY kind ORDER BY kind"
  lance-sql sql ./db -f queries.sql --format csv
  echo "SELECT 1;" | lance-sql sql ./db -"""

SHELL_EPILOG = """\
Statements may span lines and end at ';'. Commands: .tables, .schema T, .versions T,
.tags T, .format table|csv|json, .help, .quit. History is kept in ~/.lance_sql_history
(override with LANCE_SQL_HISTORY). Input from a pipe runs without prompts and exits 1
if any statement failed.

example:
  lance-sql shell ./db
  lance-sql shell ./db < script.sql"""


class _IntermixedParser(argparse.ArgumentParser):
    """Options anywhere: ``sql ROOT --format csv "SELECT ..."`` works, not only at the end.

    Plain argparse binds all positionals at their first occurrence, so a positional after an
    option is rejected; intermixed parsing fixes that (except for parsers with subcommands).
    """

    _parsing = False

    def parse_known_args(self, args=None, namespace=None):
        subparsers = argparse._SubParsersAction  # noqa: SLF001 - argparse names it nowhere else
        if self._parsing or any(isinstance(a, subparsers) for a in self._actions):
            return super().parse_known_args(args, namespace)
        self._parsing = True
        try:
            return self.parse_known_intermixed_args(args, namespace)
        finally:
            self._parsing = False




def _add_output(parser: argparse.ArgumentParser, *, streaming: bool) -> None:
    parser.add_argument("--format", choices=FORMATS, default="table",
                        help="output format (default: table)")
    if streaming:
        parser.add_argument("--max-rows", type=whole_number(0), metavar="N",
                            help="table format: show at most N rows (the count shows all)")
        parser.add_argument("--progress", action=argparse.BooleanOptionalAction, default=None,
                            help="rows/batches/elapsed on stderr while a query runs "
                                 "(default: only when stderr is a terminal)")


def _add_tables(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("root", metavar="ROOT", help="directory of Lance tables (or one table)")
    parser.add_argument("-t", "--table", action="append", default=[], metavar="NAME=PATH",
                        help="also register the table at PATH as NAME (repeatable)")
    parser.add_argument("--read-only", action="store_true",
                        help="refuse every statement that writes (INSERT, CREATE TABLE, ...)")
    parser.add_argument("--allow-external-files", action="store_true",
                        help="let CREATE EXTERNAL TABLE read and COPY ... TO write files "
                             "outside ROOT (refused by default)")


def build_parser() -> argparse.ArgumentParser:
    """The ``lance-sql`` argument parser, every subcommand included."""
    raw = argparse.RawDescriptionHelpFormatter
    parser = argparse.ArgumentParser(prog="lance-sql", description=DESCRIPTION, epilog=EPILOG,
                                     formatter_class=raw)
    parser.add_argument("--version", action="version", version=f"lance-sql {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND",
                                parser_class=_IntermixedParser)

    sql = sub.add_parser("sql", help="run SQL statements and print their results",
                         description="Run SQL statements over the tables in ROOT.",
                         epilog=SQL_EPILOG, formatter_class=raw)
    _add_tables(sql)
    sql.add_argument("query", nargs="?", metavar="SQL",
                     help="statement(s) to run; '-' reads them from stdin")
    sql.add_argument("-f", "--file", help="read the statements from FILE")
    _add_output(sql, streaming=True)

    shell = sub.add_parser("shell", help="interactive SQL prompt",
                           description="An interactive SQL prompt over the tables in ROOT.",
                           epilog=SHELL_EPILOG, formatter_class=raw)
    _add_tables(shell)
    _add_output(shell, streaming=True)

    log = sub.add_parser("log", help="list the versions of a table",
                         description="One line per version: time, operation, rows, tags.",
                         epilog="example:\n  lance-sql log ./db/events.lance",
                         formatter_class=raw)
    log.add_argument("table", metavar="TABLE_PATH", help="the table's directory")
    _add_output(log, streaming=False)

    tag = sub.add_parser("tag", help="create, list or delete tags",
                         description="Tags name versions: query them with VERSION AS OF 'tag'.",
                         epilog="examples:\n  lance-sql tag list ./db/events.lance\n"
                                "  lance-sql tag create ./db/events.lance release-1 3\n"
                                "  lance-sql tag create ./db/events.lance nightly   "
                                "(the latest version)\n"
                                "  lance-sql tag create ./db/events.lance stable release-1   "
                                "(the version tag release-1 names)\n"
                                "  lance-sql tag delete ./db/events.lance release-1",
                         formatter_class=raw)
    tag_sub = tag.add_subparsers(dest="action", required=True, metavar="ACTION",
                                 parser_class=_IntermixedParser)
    tag_list = tag_sub.add_parser("list", help="list the tags of a table")
    tag_list.add_argument("table", metavar="TABLE_PATH")
    _add_output(tag_list, streaming=False)
    tag_create = tag_sub.add_parser("create", help="tag a version (default: the latest)")
    tag_create.add_argument("table", metavar="TABLE_PATH")
    tag_create.add_argument("tag", metavar="TAG")
    tag_create.add_argument("version", metavar="VERSION", nargs="?",
                            help="a version number, or a tag whose version to tag")
    tag_delete = tag_sub.add_parser("delete", help="delete a tag (the version stays)")
    tag_delete.add_argument("table", metavar="TABLE_PATH")
    tag_delete.add_argument("tag", metavar="TAG")

    add_memwal_parser(sub, _IntermixedParser,
                      lambda p: _add_output(p, streaming=False))

    demo = sub.add_parser("demo", help="build demo tables in a temporary directory and query them",
                          description="Builds 'events' (3 versions and a tag) and 'users', then "
                                      "runs showcase queries: time travel, system columns, "
                                      "joins, table_versions, EXPLAIN.",
                          epilog="example:\n  lance-sql demo --dir ./demo && "
                                 "lance-sql shell ./demo",
                          formatter_class=raw)
    demo.add_argument("--dir", help="build the tables here and keep them (default: a temp dir)")
    return parser


def open_session(root: str, tables: Sequence[str] = (), *, read_only: bool = False,
                 allow_external_files: bool = False) -> LanceSession:
    """A session over ROOT: a directory of tables, or a single table's directory."""
    from lance_sql.sql.session import LanceSession

    path = Path(root)
    if (path / "_versions").is_dir():
        session = LanceSession(None, read_only=read_only,
                               allow_external_files=allow_external_files)
        session.register(path.name.removesuffix(".lance"), path)
    elif path.is_dir():
        session = LanceSession(path, read_only=read_only,
                               allow_external_files=allow_external_files)
    else:
        raise NotFoundError(f"{root} is not a directory of Lance tables")
    for spec in tables:
        name, eq, uri = spec.partition("=")
        if not eq or not name or not uri:
            raise InvalidInputError(f"--table expects NAME=PATH, got {spec!r}")
        try:
            dataset(uri)
        except NotFoundError as exc:
            raise NotFoundError(f"--table {spec}: {exc}") from None
        session.register(name, uri)
    return session


def _table_session(path: str) -> tuple[LanceSession, str]:
    """A session holding just the table at ``path`` (checked to exist)."""
    from lance_sql.sql.session import LanceSession

    dataset(path)
    name = Path(path).name.removesuffix(".lance") or "t"
    session = LanceSession(None)
    session.register(name, path)
    return session, name


def _not_utf8(exc: UnicodeDecodeError) -> str:
    """Where text that should be SQL stops being text, in a few words."""
    return f"not {exc.encoding} text (byte 0x{exc.object[exc.start]:02x} at offset {exc.start})"


def _read_sql(args: argparse.Namespace) -> str:
    if args.file and args.query:
        raise InvalidInputError("give the SQL as an argument or with --file, not both")
    if args.file:
        try:
            return Path(args.file).read_text(encoding="utf-8")
        except OSError as exc:
            raise NotFoundError(f"cannot read {args.file}: {exc.strerror}") from None
        except UnicodeDecodeError as exc:
            raise InvalidInputError(f"cannot read {args.file}: {_not_utf8(exc)}") from None
    if args.query == "-" or (args.query is None and not sys.stdin.isatty()):
        try:
            return sys.stdin.read()
        except UnicodeDecodeError as exc:
            raise InvalidInputError(f"cannot read the SQL on stdin: {_not_utf8(exc)}") from None
    if args.query is None:
        raise InvalidInputError("no SQL given: pass a statement, --file FILE, or '-' for stdin")
    return args.query


def _options(args: argparse.Namespace) -> OutputOptions:
    return OutputOptions(args.format, getattr(args, "max_rows", None),
                         getattr(args, "progress", None))


def _run(args: argparse.Namespace) -> int:
    out, err = sys.stdout, sys.stderr
    if args.command == "sql":
        session = open_session(args.root, args.table, read_only=args.read_only,
                               allow_external_files=args.allow_external_files)
        statements, rest = split_statements(_read_sql(args))
        if rest.strip():
            statements.append(rest.strip())
        if not statements:
            raise InvalidInputError("no SQL statement given")
        run_statements(session, statements, out, err, _options(args))
    elif args.command == "shell":
        session = open_session(args.root, args.table, read_only=args.read_only,
                               allow_external_files=args.allow_external_files)
        return Shell(session, options=_options(args)).run()
    elif args.command == "log":
        session, name = _table_session(args.table)
        render_table(session.versions(name), out, args.format)
    elif args.command == "tag":
        session, name = _table_session(args.table)
        if args.action == "list":
            render_table(tags_table(session, name), out, args.format)
        elif args.action == "create":
            given = args.version
            ds = session.dataset(name)
            version = (ds.version if given is None else int(given) if given.isdigit()
                       else ds.tags.get_version(given))
            session.create_tag(name, args.tag, version)
            out.write(f"created tag {args.tag!r} -> version {version}\n")
        else:
            session.delete_tag(name, args.tag)
            out.write(f"deleted tag {args.tag!r}\n")
    elif args.command == "memwal":
        return run_memwal(args, out, err)
    elif args.command == "demo":
        from lance_sql.cli.demo import run_demo

        if args.dir:
            target = Path(args.dir)
            if target.exists() and not target.is_dir():
                raise InvalidInputError(f"--dir {args.dir} exists and is not a directory")
            target.mkdir(parents=True, exist_ok=True)
            run_demo(target, out, err)
        else:
            with tempfile.TemporaryDirectory(prefix="lance-sql-demo-") as tmp:
                run_demo(Path(tmp), out, err)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line ``argv``; returns the exit status (0, 1 on errors, 130 on Ctrl-C)."""
    args = build_parser().parse_args(argv)
    try:
        return _run(args)
    except KeyboardInterrupt:
        sys.stderr.write("lance-sql: interrupted\n")
        return 130
    except BrokenPipeError:
        # The reader (e.g. `head`) went away: stop quietly, and keep Python from
        # complaining again when it flushes stdout at exit.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 141
    except OSError as exc:  # the file system said no (permissions, a full disk...)
        if os.environ.get("LANCE_SQL_DEBUG"):
            raise
        sys.stdout.flush()
        where = f": {exc.filename}" if exc.filename else ""
        sys.stderr.write(f"lance-sql: error: {exc.strerror or exc}{where}\n")
        return 1
    except Exception as exc:
        if not is_query_error(exc):
            raise
        sys.stdout.flush()
        sys.stderr.write(f"lance-sql: error: {error_message(exc)}\n")
        return 1


def entry() -> None:
    """The ``lance-sql`` console script: :func:`main`, then the exit status.

    The command has printed everything by then; it leaves with ``os._exit`` after
    flushing, so nothing at interpreter shutdown can make it wait — notably a query
    interrupted with Ctrl-C whose worker is still finishing the batch it was given
    (its scans stop at the next one). The command opts in to the allocator tuning
    (:func:`lance_sql.tune_allocator`).
    """
    tune_allocator()
    code = main()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(code)


if __name__ == "__main__":
    entry()
