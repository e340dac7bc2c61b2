"""Build the tables the SQL examples run against, the same bytes-for-rows every time.

    python sql_examples/build_tables.py DIR       # then: lance-sql shell DIR < NAME.sql

``events`` has four versions and two tags; ``users`` one version:

=======  ====================  ==========================================  =========
version  committed (UTC)       operation                                   tag
=======  ====================  ==========================================  =========
1        2024-01-01 00:00:00   create: ids 1-8                             -
2        2024-01-02 00:00:00   append: ids 9-12                            loaded
3        2024-01-03 00:00:00   delete kind = 'view' (ids 2, 5, 8, 11)      cleaned
4        2024-01-04 00:00:00   append: ids 13-14 (user 4 is not in users)  -
=======  ====================  ==========================================  =========

``orders`` has stable row ids (ORDERS): 1 create ids 1-6 (status 'new'); 2 update ids 1-2
to 'paid'; 3 merge_insert: id 3 'paid', new id 7; 4 delete id 4 (one day apart from
2024-01-01, like events).

Commit times are real when written; the fixture then sets each manifest's timestamp
to the time in this table (re-encoding the manifest with lance_sql's own codec) so
that ``TIMESTAMP AS OF`` and ``table_versions`` give the same answer on every run.
Tags are created afterwards, so they record the final manifests. Amounts are
multiples of 1/4, so sums are exact whatever order DataFusion adds them in.
"""

from __future__ import annotations

import datetime as dt
import sys
from pathlib import Path

import pyarrow as pa

from lance_sql.format.manifest import ManifestCodec
from lance_sql.io.uri import open_store
from lance_sql.table.dataset import dataset, write_dataset
from lance_sql.table.meta.versions import list_versions

DAY0 = dt.datetime(2024, 1, 1, tzinfo=dt.UTC)


def _events(ids: range, users: list[int], kinds: list[str], amounts: list[float]) -> pa.Table:
    return pa.table({
        "id": pa.array(ids, pa.int64()),
        "user_id": pa.array(users, pa.int64()),
        "kind": pa.array(kinds, pa.string()),
        "amount": pa.array(amounts, pa.float64()),
    })


def pin_timestamps(uri: str, times: dict[int, dt.datetime]) -> None:
    """Rewrite version ``v``'s manifest so that it records ``times[v]`` as its commit time."""
    store = open_store(uri)
    for ref in list_versions(store):
        if ref.version not in times:
            continue
        data = store.read(ref.key)
        path = f"{uri}/{ref.key}"
        manifest = ManifestCodec.decode(data, path)
        txn = ManifestCodec.decode_transaction(data, path)
        stamp = times[ref.version]
        ns = int(stamp.timestamp()) * 1_000_000_000 + stamp.microsecond * 1000
        store.put(ref.key, ManifestCodec.encode(manifest.evolve(timestamp_ns=ns), txn))


def build(root: Path) -> None:
    """Write ``events`` and ``users`` under ``root`` (which must not hold them yet)."""
    root.mkdir(parents=True, exist_ok=True)
    events = str(root / "events.lance")
    write_dataset(_events(range(1, 9), [1, 2, 1, 3, 2, 1, 3, 2],
                          ["click", "view", "click", "buy", "view", "click", "buy", "view"],
                          [1.5, 0.0, 2.25, 99.0, 0.0, 3.0, 42.0, 0.0]), events)
    write_dataset(_events(range(9, 13), [1, 3, 3, 2], ["buy", "click", "view", "click"],
                          [15.0, 0.75, 0.0, 1.25]), events, mode="append")
    dataset(events).delete("kind = 'view'")
    write_dataset(_events(range(13, 15), [4, 1], ["refund", "click"], [-15.0, 0.5]), events,
                  mode="append")
    pin_timestamps(events, {v: DAY0 + dt.timedelta(days=v - 1) for v in range(1, 5)})
    ds = dataset(events)
    ds.tags.create("loaded", 2)
    ds.tags.create("cleaned", 3)

    users = str(root / "users.lance")
    write_dataset(pa.table({
        "user_id": pa.array([1, 2, 3], pa.int64()),
        "name": ["ada", "grace", "edsger"],
        "country": ["UK", "US", "NL"],
    }), users)
    pin_timestamps(users, {1: DAY0})
    _orders(str(root / "orders.lance"))


def _orders(uri: str) -> None:
    """``orders``: stable row ids, so row versions and a change feed (see ORDERS)."""
    def rows(ids: list[int], status: list[str]) -> pa.Table:
        return pa.table({"id": pa.array(ids, pa.int64()), "status": status})

    write_dataset(rows([1, 2, 3, 4, 5, 6], ["new"] * 6), uri, enable_stable_row_ids=True)
    dataset(uri).update({"status": "'paid'"}, where="id <= 2")
    dataset(uri).merge_insert("id").when_matched_update_all().when_not_matched_insert_all() \
        .execute(rows([3, 7], ["paid", "new"]))
    dataset(uri).delete("id = 4")
    pin_timestamps(uri, {v: DAY0 + dt.timedelta(days=v - 1) for v in range(1, 5)})


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python sql_examples/build_tables.py DIR")
    build(Path(sys.argv[1]))
    print(f"built events, users and orders in {sys.argv[1]}")
