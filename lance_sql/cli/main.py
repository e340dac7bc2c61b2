"""The ``lance-sql`` command.

For now it offers ``demo`` (build a small table in a temporary directory, append,
delete, and show its history) and ``log`` (list a table's versions). SQL
subcommands arrive with the SQL layer.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

import pyarrow as pa

from lance_sql.errors import LanceError
from lance_sql.table.dataset import dataset, write_dataset


def _print_table(table: pa.Table, out) -> None:  # noqa: ANN001
    columns = table.column_names
    rows = table.to_pylist()
    widths = {c: max([len(c)] + [len(str(r[c])) for r in rows]) for c in columns}
    print(" | ".join(c.ljust(widths[c]) for c in columns), file=out)
    print("-+-".join("-" * widths[c] for c in columns), file=out)
    for row in rows:
        print(" | ".join(str(row[c]).ljust(widths[c]) for c in columns), file=out)


def _print_log(uri: str, out) -> None:  # noqa: ANN001
    ds = dataset(uri)
    tags = {info["version"]: name for name, info in ds.tags.list().items()}
    table = pa.table(
        {
            "version": [v["version"] for v in ds.versions()],
            "timestamp": [v["timestamp"].isoformat(timespec="seconds") for v in ds.versions()],
            "operation": [v["operation"] for v in ds.versions()],
            "rows": [v["num_rows"] for v in ds.versions()],
            "tag": [tags.get(v["version"], "") for v in ds.versions()],
        }
    )
    _print_table(table, out)


def run_demo(root: Path, out=sys.stdout) -> None:  # noqa: ANN001
    uri = str(root / "events.lance")
    print(f"Creating a Lance table at {uri}", file=out)
    first = pa.table(
        {
            "id": pa.array(range(6), pa.int64()),
            "kind": ["click", "view", "click", "buy", "view", "click"],
            "amount": [1.5, 0.0, 2.25, 99.0, 0.0, 3.0],
        }
    )
    write_dataset(first, uri)
    more = pa.table(
        {
            "id": pa.array(range(6, 9), pa.int64()),
            "kind": ["buy", "view", "click"],
            "amount": [42.0, 0.0, 1.0],
        }
    )
    ds = write_dataset(more, uri, mode="append")
    ds.tags.create("loaded", ds.version)
    ds.delete("kind = 'view'")
    print(f"\nLatest version {ds.version}: rows without 'view' events, with row addresses", file=out)
    _print_table(ds.to_table(with_row_address=True), out)
    print("\nTime travel to the tag 'loaded' (before the delete), filtered on amount > 2:",
          file=out)
    _print_table(dataset(uri, version="loaded").to_table(filter="amount > 2"), out)
    print("\nHistory:", file=out)
    _print_log(uri, out)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="lance-sql",
        description="Lance tables from Python: create, time travel, inspect.",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    demo = sub.add_parser("demo", help="build a small demo table in a temporary directory")
    demo.add_argument("--dir", help="directory to build the demo in (default: a temp dir)")
    log = sub.add_parser("log", help="list the versions of a table")
    log.add_argument("table", help="path of the table")
    args = parser.parse_args(argv)
    try:
        if args.command == "demo":
            if args.dir:
                run_demo(Path(args.dir))
            else:
                with tempfile.TemporaryDirectory(prefix="lance-sql-demo-") as tmp:
                    run_demo(Path(tmp))
        elif args.command == "log":
            _print_log(args.table, sys.stdout)
    except LanceError as exc:
        print(f"lance-sql: error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
