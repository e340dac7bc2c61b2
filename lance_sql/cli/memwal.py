"""``lance-sql memwal``: look at a MemWAL table and run its background jobs.

``status`` prints one line per region (writer epoch, generations flushed and merged, WAL
backlog); ``merge``, ``refresh``, ``gc`` and ``recover`` run one job once; ``run`` runs
the first three every ``--every`` until interrupted (not ``recover``: it may fence a
writer, so it is run on purpose). ``run`` does the work on one worker thread while the main
thread waits for a signal: Ctrl-C (SIGINT) or SIGTERM lets the job in progress finish,
joins the worker and exits 0; a second Ctrl-C abandons the job (exit 130). A job that
fails is reported on stderr and retried at the next round (a conflict with another
merger, a file another process removed...).
"""

from __future__ import annotations

import argparse
import re
import signal
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import timedelta
from typing import Any, TextIO

import pyarrow as pa

from lance_sql.cli.arguments import whole_number
from lance_sql.cli.render import render_table
from lance_sql.errors import InvalidInputError, LanceError
from lance_sql.format.region_spec import RegionSpec
from lance_sql.format.schema import LanceSchema
from lance_sql.memwal.api import MemWal
from lance_sql.memwal.dataset import MemWalDataset, dataset
from lance_sql.memwal.gc import DEFAULT_GRACE, GcResult
from lance_sql.memwal.merger import MergeResult
from lance_sql.memwal.recovery import RecoveryResult

__all__ = ["add_memwal_parser", "parse_duration", "run_memwal"]

EPILOG = """\
examples:
  lance-sql memwal status ./db/events.lance
  lance-sql memwal merge ./db/events.lance        merge flushed generations into the table
  lance-sql memwal refresh ./db/events.lance      snapshot the regions into the MemWAL index
  lance-sql memwal gc ./db/events.lance           remove merged generations and their WAL
  lance-sql memwal recover ./db/events.lance      flush the WAL a dead writer left behind
  lance-sql memwal run ./db/events.lance --every 10s   all three, until Ctrl-C"""

_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h)?\s*$")
_JOBS = ("merge", "refresh", "gc")


def parse_duration(text: str) -> float:
    """``10s``, ``500ms``, ``2m``, ``1h`` or plain seconds -> seconds (more than 0)."""
    match = _DURATION.match(text)
    if not match:
        raise argparse.ArgumentTypeError(f"expected a duration such as 10s, 500ms, 2m or 1h, "
                                         f"got {text!r}")
    seconds = float(match.group(1)) * _UNITS[match.group(2) or "s"]
    if seconds <= 0:
        raise argparse.ArgumentTypeError(f"must be more than 0, got {text!r}")
    return seconds




def add_memwal_parser(sub: Any, parser_class: type[argparse.ArgumentParser],
                      output: Callable[[argparse.ArgumentParser], None]) -> None:
    """Register ``memwal`` and its actions on the top-level subcommand set ``sub``."""
    raw = argparse.RawDescriptionHelpFormatter
    memwal = sub.add_parser(
        "memwal", help="status and background jobs of a MemWAL (streaming upsert) table",
        description="A MemWAL table takes streaming upserts into regions; flushed "
                    "generations are merged into the table by background jobs.",
        epilog=EPILOG, formatter_class=raw)
    actions = memwal.add_subparsers(dest="action", required=True, metavar="ACTION",
                                    parser_class=parser_class)
    status = actions.add_parser("status", help="one line per region: epoch, generations "
                                               "flushed and merged, WAL backlog")
    status.add_argument("table", metavar="TABLE_PATH")
    output(status)
    merge = actions.add_parser("merge", help="merge flushed generations into the table, "
                                             "oldest first")
    merge.add_argument("table", metavar="TABLE_PATH")
    merge.add_argument("--max-generations", type=whole_number(1), metavar="N",
                       help="merge at most N generations (default: all)")
    refresh = actions.add_parser("refresh", help="snapshot every region into the MemWAL "
                                                 "index (and bring WAL hints forward)")
    refresh.add_argument("table", metavar="TABLE_PATH")
    gc = actions.add_parser("gc", help="remove merged generations, their WAL entries, old "
                                       "region manifests and orphaned directories")
    gc.add_argument("table", metavar="TABLE_PATH")
    _add_gc_options(gc)
    recover = actions.add_parser(
        "recover", help="flush the WAL entries a dead writer acknowledged but never "
                        "flushed (claims each such region, fencing a writer still there)")
    recover.add_argument("table", metavar="TABLE_PATH")
    recover.add_argument("--idle", type=parse_duration, default=60.0, metavar="DURATION",
                         help="leave regions whose WAL was written more recently than this "
                              "(their writer may be alive; default: 1m)")
    run = actions.add_parser(
        "run", help="run merge, refresh and gc periodically until Ctrl-C",
        description="Runs merge, refresh and gc every --every, one round at a time. "
                    "Ctrl-C or SIGTERM finishes the job in progress and exits 0.",
        epilog="example:\n  lance-sql memwal run ./db/events.lance --every 10s",
        formatter_class=raw)
    run.add_argument("table", metavar="TABLE_PATH")
    run.add_argument("--every", type=parse_duration, default=10.0, metavar="DURATION",
                     help="time between the starts of two rounds: 10s, 500ms, 2m... "
                          "(default: 10s)")
    run.add_argument("--rounds", type=whole_number(1), metavar="N",
                     help="stop after N rounds (default: until interrupted)")
    _add_gc_options(run)


def _add_gc_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--keep-manifests", type=whole_number(1), default=10, metavar="N",
                        help="region manifest versions to keep per region (default: 10)")
    parser.add_argument("--grace", type=parse_duration, metavar="DURATION",
                        default=DEFAULT_GRACE.total_seconds(),
                        help="leave orphaned generation directories younger than this "
                             "(a flush may still be writing them; default: 1h)")


# ------------------------------------------------------------------------ describing
def describe_spec(spec: RegionSpec | None, schema: LanceSchema) -> str:
    """``bucket(id, 8) + day(ts)``; ``manual`` for a MemWAL without a spec."""
    if spec is None:
        return "manual regions"
    names = iter(spec.source_names(schema))
    parts = []
    for f in spec.fields:
        columns = [next(names) or "<dropped>" for _ in f.source_ids]
        if f.expression is not None:
            parts.append(f"expression({f.expression!r} over {', '.join(columns)})")
            continue
        params = [str(v) for _, v in sorted(f.parameters.items())]
        parts.append(f"{f.transform}({', '.join(columns + params)})")
    return " + ".join(parts)


def status_table(rows: list[dict[str, Any]]) -> pa.Table:
    """The status rows as a table; generation lists shortened to ranges (``1-4, 7``)."""
    return pa.table({
        "region": pa.array([r["region"] for r in rows], pa.string()),
        "spec": pa.array([r["spec_id"] for r in rows], pa.uint32()),
        "epoch": pa.array([r["writer_epoch"] for r in rows], pa.uint64()),
        "manifest": pa.array([r["manifest_version"] for r in rows], pa.uint64()),
        "writing_gen": pa.array([r["current_generation"] for r in rows], pa.uint64()),
        "flushed_gens": pa.array([_ranges(r["flushed"]) for r in rows], pa.string()),
        "merged_up_to": pa.array([r["merged_up_to"] for r in rows], pa.uint64()),
        "unmerged": pa.array([r["unmerged"] for r in rows], pa.uint64()),
        "wal_backlog": pa.array([r["wal_backlog"] for r in rows], pa.uint64()),
    })


def _ranges(numbers: list[int]) -> str:
    if not numbers:
        return "-"
    out, start, prev = [], numbers[0], numbers[0]
    for n in [*numbers[1:], None]:
        if n is not None and n == prev + 1:
            prev = n
            continue
        out.append(str(start) if start == prev else f"{start}-{prev}")
        if n is not None:
            start = prev = n
    return ", ".join(out)


def _merge_line(results: list[MergeResult]) -> str:
    done = [r for r in results if r.version is not None]
    skipped = len(results) - len(done)
    if not results:
        return "merge: nothing to merge"
    counts = (f"+{sum(r.inserted for r in done)} ~{sum(r.updated for r in done)} "
              f"-{sum(r.deleted for r in done)} rows")
    extra = f", {skipped} already merged by another merger" if skipped else ""
    return f"merge: {len(done)} generation(s) merged ({counts}){extra}"


def _gc_line(result: GcResult) -> str:
    return (f"gc: removed {len(result.generations)} generation(s), {result.wal_entries} WAL "
            f"entr{'y' if result.wal_entries == 1 else 'ies'}, {result.manifests} region "
            f"manifest(s), {len(result.orphans)} orphaned director"
            f"{'y' if len(result.orphans) == 1 else 'ies'}")


# ------------------------------------------------------------------------ actions
def _handle(table: str) -> MemWal:
    mw = dataset(table).mem_wal
    if mw is None:
        raise InvalidInputError(f"{table} has no MemWAL (set one up with "
                                "ds.initialize_mem_wal(...))")
    return mw


def _gc_options(args: argparse.Namespace) -> dict[str, Any]:
    return {"keep_manifests": args.keep_manifests, "grace": timedelta(seconds=args.grace)}


def _job(name: str, mw: MemWal, args: argparse.Namespace) -> str:
    """Run one job; its one-line summary."""
    if name == "merge":
        return _merge_line(mw.merge(max_generations=getattr(args, "max_generations", None)))
    if name == "refresh":
        before = dataset(mw.dataset.uri).version
        new = mw.refresh_index(skip_unchanged=True)
        regions = MemWalDataset.of(new).mem_wal.details.num_regions  # type: ignore[union-attr]
        if new.version == before:
            return f"refresh: snapshot of {regions} region(s) unchanged"
        return f"refresh: snapshot of {regions} region(s), table version {new.version}"
    if name == "recover":
        return _recover_line(mw.recover(idle=timedelta(seconds=args.idle)))
    return _gc_line(mw.collect_garbage(**_gc_options(args)))


def _recover_line(results: list[RecoveryResult]) -> str:
    done = [r for r in results if r.generation is not None]
    line = (f"recover: {len(done)} region(s) flushed "
            f"({sum(r.entries for r in done)} WAL entries)")
    left = [r for r in results if r.generation is None]
    if left:
        line += f", {len(left)} left: " + "; ".join(f"{str(r.region)[:8]} {r.reason}"
                                                    for r in left)
    return line


def run_memwal(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    """Run ``lance-sql memwal ACTION``; returns the exit status."""
    if args.action == "run":
        return _run_periodically(args, out, err)
    mw = _handle(args.table)
    if args.action == "status":
        ds = mw.dataset
        out.write(f"table {ds.uri} version {ds.version}, region spec: "
                  f"{describe_spec(mw.region_spec, ds.manifest.schema)}\n")
        render_table(status_table(mw.status()), out, args.format)
        return 0
    out.write(_job(args.action, mw, args) + "\n")
    return 0


# ------------------------------------------------------------------------ run
class _Rounds:
    """The worker of ``memwal run``: rounds of the three jobs until told to stop."""

    def __init__(self, args: argparse.Namespace, out: TextIO, err: TextIO) -> None:
        self.args, self.out, self.err = args, out, err
        self.stop = threading.Event()
        self.rounds = 0
        self.failures = 0

    def _say(self, stream: TextIO, text: str) -> None:
        stream.write(f"[{time.strftime('%H:%M:%S')}] {text}\n")
        stream.flush()

    def run(self) -> None:
        every, limit = self.args.every, self.args.rounds
        while not self.stop.is_set():
            started = time.monotonic()
            self.rounds += 1
            for name in _JOBS:
                if self.stop.is_set():
                    break
                try:
                    line = _job(name, _handle(self.args.table), self.args)
                    self._say(self.out, f"round {self.rounds} {line}")
                except (LanceError, OSError) as exc:
                    self.failures += 1
                    self._say(self.err, f"round {self.rounds} {name} failed: {exc}")
            if limit is not None and self.rounds >= limit:
                break
            self.stop.wait(max(0.0, every - (time.monotonic() - started)))


@contextmanager
def _stop_on_signals(stop: threading.Event) -> Iterator[None]:
    """SIGINT and SIGTERM set ``stop`` (a second SIGINT raises KeyboardInterrupt)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum: int, frame: object) -> None:
        if signum == signal.SIGINT and stop.is_set():
            raise KeyboardInterrupt
        stop.set()

    previous = {s: signal.signal(s, handler) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for s, h in previous.items():
            signal.signal(s, h)


def _run_periodically(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    mw = _handle(args.table)  # refuse a table without a MemWAL before starting
    rounds = _Rounds(args, out, err)
    out.write(f"running merge, refresh and gc on {mw.dataset.uri} every {args.every:g}s; "
              "Ctrl-C to stop\n")
    out.flush()
    worker = threading.Thread(target=rounds.run, name="lance-sql-memwal-run")
    with _stop_on_signals(rounds.stop):
        worker.start()
        try:
            while worker.is_alive():
                worker.join(0.2)
        except KeyboardInterrupt:
            rounds.stop.set()
            raise
    if rounds.stop.is_set():
        err.write("lance-sql: stopped\n")
    out.write(f"{rounds.rounds} round(s), {rounds.failures} failed job(s)\n")
    return 0
