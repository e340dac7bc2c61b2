"""The LSM scan's duplicate-key check of a base version after a merge: a full read of the
key column against the check settled from the previous version's digest and the merge's
new fragments (``lance_sql.memwal.read.duplicates``).

A base of ``--rows`` unique int64 keys; each round merges ``--merge`` rows (half updates
of existing keys, half new ones), as the MemWAL merger does, then times both checks of
the new version (CPU time, medians over the rounds). Only lance_sql: pylance's LSM scanner
has no such check to set beside it (it does not deduplicate the base).

    PYTHONPATH=. python bench/bench_base_dup_check.py --rows 2000000 --rounds 5
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time

import numpy as np
import pyarrow as pa

import lance_sql
from lance_sql.memwal.read import duplicates
from lance_sql.table.runtime.cache import BASE_KEY_DIGESTS
from lance_sql.table.runtime.context import current_runtime

PK = {"lance-schema:unenforced-primary-key": "true"}
SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False, metadata=PK),
                    pa.field("v", pa.float64())])


def rows(ids: np.ndarray) -> pa.Table:
    return pa.table({"id": ids, "v": ids.astype(np.float64)}, schema=SCHEMA)


def cpu(fn) -> float:
    start = time.process_time()
    fn()
    return time.process_time() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=2_000_000)
    parser.add_argument("--merge", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    rng = np.random.default_rng(3)
    with tempfile.TemporaryDirectory() as tmp:
        uri = f"{tmp}/t.lance"
        lance_sql.write_dataset(rows(np.arange(args.rows)), uri,
                                max_rows_per_file=1_000_000)
        first = cpu(lambda: duplicates.superseded_at(lance_sql.dataset(uri), ("id",)))
        print(f"first check of the base (full read, digest made): {first:.3f} s CPU")
        full, settled = [], []
        top = args.rows
        for _ in range(args.rounds):
            half = args.merge // 2
            keys = np.concatenate([rng.choice(top, half, replace=False),
                                   np.arange(top, top + half)])
            top += half
            lance_sql.dataset(uri).merge_insert("id").when_matched_update_all() \
                .when_not_matched_insert_all().execute(rows(np.sort(keys)))
            ds = lance_sql.dataset(uri)
            full.append(cpu(lambda ds=ds: duplicates.full_read_superseded(ds, ("id",))))
            before = duplicates.DIGEST_CHECKS[0]
            settled.append(cpu(lambda ds=ds: duplicates.superseded_at(ds, ("id",))))
            assert duplicates.DIGEST_CHECKS[0] == before + 1, "not settled from the digest"
        digest = current_runtime().cache.peek(BASE_KEY_DIGESTS, (uri, ("id",)))
        print(f"after a merge of {args.merge} rows into {args.rows}, CPU s medians over "
              f"{args.rounds} rounds:")
        print(f"  full read of the keys      {statistics.median(full):.4f}")
        print(f"  from the digest            {statistics.median(settled):.4f}")
        ratio = statistics.median(full) / statistics.median(settled)
        print(f"  ratio full / digest        {ratio:.1f}x")
        print(f"  digest held: {digest.nbytes / 2**20:.0f} MiB")


if __name__ == "__main__":
    main()
