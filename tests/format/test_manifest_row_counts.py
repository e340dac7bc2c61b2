"""A manifest's row counts (``num_rows``, ``physical_rows``, ``num_deleted_rows``) are
summed over its fragments once and then kept: ``count_rows()`` on a table of many
fragments costs O(1) after the first call. The kept numbers take no part in equality,
a changed copy (``evolve``) sums its own, and threads racing on the first call agree."""

from __future__ import annotations

import pickle
from concurrent.futures import ThreadPoolExecutor

import pyarrow as pa

from lance_sql.format.fragment import DataFile, DeletionFile, Fragment
from lance_sql.format.manifest import Manifest
from lance_sql.format.schema import LanceSchema


class _CountedTuple(tuple):
    """A tuple that counts the passes made over it."""

    passes = 0

    def __iter__(self):  # type: ignore[no-untyped-def]
        type(self).passes += 1
        return super().__iter__()


def _fragment(i: int, deleted: int) -> Fragment:
    deletion = DeletionFile("arrow", 1, i, deleted) if deleted else None
    return Fragment(id=i, files=(DataFile(f"{i}.lance", (0,), (0,), 2, 0, 100),),
                    physical_rows=10, deletion_file=deletion)


def _manifest(fragments: tuple[Fragment, ...]) -> Manifest:
    schema = LanceSchema.from_arrow(pa.schema([("id", pa.int64())]))
    return Manifest(schema=schema, fragments=fragments, version=3)


def test_row_counts_are_summed_once() -> None:
    frags = _CountedTuple(_fragment(i, i % 3) for i in range(50))
    manifest = _manifest(frags)
    _CountedTuple.passes = 0
    for _ in range(5):
        assert manifest.num_rows == 500 - sum(i % 3 for i in range(50))
        assert manifest.physical_rows == 500
        assert manifest.num_deleted_rows == sum(i % 3 for i in range(50))
    assert _CountedTuple.passes == 2  # one for the physical rows, one for the deleted


def test_kept_counts_change_nothing_else() -> None:
    manifest = _manifest(tuple(_fragment(i, 1) for i in range(4)))
    fresh = _manifest(tuple(_fragment(i, 1) for i in range(4)))
    assert manifest.num_rows == 36
    assert manifest == fresh and repr(manifest) == repr(fresh)
    fewer = manifest.evolve(fragments=manifest.fragments[:1])
    assert (fewer.num_rows, fewer.num_deleted_rows, fewer.physical_rows) == (9, 1, 10)
    assert pickle.loads(pickle.dumps(manifest)).num_rows == 36


def test_threads_agree_on_the_first_count() -> None:
    manifest = _manifest(tuple(_fragment(i, i % 2) for i in range(2000)))
    with ThreadPoolExecutor(4) as pool:
        counts = set(pool.map(lambda _: manifest.num_rows, range(64)))
    assert counts == {20000 - 1000}
