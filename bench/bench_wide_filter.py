"""Wide filters: a 10,000-term ``id = a OR id = b OR ...`` and a 10,000-term mixed OR,
lance_sql (Python API and SQL) vs pylance, one process.

Data: N rows (id int64, k int64, s utf8) in fragments of 50,000 rows, written by
lance_sql; each figure is the median of --repeat runs, the contenders interleaved,
after one warm-up run each.

    python bench/bench_wide_filter.py --rows 300000 --terms 10000 --repeat 3
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import lance
import numpy as np
import pyarrow as pa
from timing import (
    formats_line,  # bench/timing.py (scripts run from bench/)
    interleaved_medians,
)

import lance_sql


def main() -> None:
    lance_sql.tune_allocator()  # as the lance-sql command does (README: Performance)
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=300_000)
    parser.add_argument("--terms", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        ids = np.arange(args.rows, dtype=np.int64)
        lance_sql.write_dataset(
            pa.table({"id": ids, "k": ids % 7, "s": pa.array(ids.astype(str))}),
            root / "m.lance", max_rows_per_file=50_000)
        uri = str(root / "m.lance")
        print(formats_line(lance_sql=uri))
        step = max(1, args.rows // args.terms)
        filters = {
            "equalities": " OR ".join(f"id = {i * step}" for i in range(args.terms)),
            "mixed": " OR ".join(f"id {'=' if i % 2 else '>'} {args.rows - 50 + i}"
                                 for i in range(args.terms)),
        }
        session = lance_sql.connect(root)
        for name, text in filters.items():
            counts = {
                "lance_sql api": lance_sql.dataset(uri).count_rows(text),
                "pylance": lance.dataset(uri).count_rows(text),
            }
            operations = {
                "lance_sql api": (lambda t=text: lance_sql.dataset(uri).to_table(filter=t), None),
                "pylance": (lambda t=text: lance.dataset(uri).to_table(filter=t), None),
            }
            if name == "equalities":  # the mixed one is over the SQL front door's limit
                sql = f"SELECT * FROM m WHERE {text}"
                counts["lance_sql sql"] = session.sql(sql).to_arrow_table().num_rows
                operations["lance_sql sql"] = (
                    lambda q=sql: session.sql(q).to_arrow_table(), None)
            assert len(set(counts.values())) == 1, counts
            medians = interleaved_medians(operations, args.repeat)
            base = medians["pylance"]
            print(f"{name}: {args.terms} terms, {counts['pylance']} rows match")
            for who, seconds in medians.items():
                print(f"  {who:14s} {seconds * 1000:8.1f} ms  ({seconds / base:.2f}x pylance)")


if __name__ == "__main__":
    main()
