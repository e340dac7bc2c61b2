"""``ds.get_fragments()``: one fragment of a table version, read on its own.

What pylance's ``LanceFragment`` offers for reading (its id and row counts, its files,
scans, ``take`` and ``head`` of its rows), so code that splits a table by fragment, for a
worker pool or a Spark job, runs unchanged. A fragment is bound to the version it was
listed from: a later write to the dataset object does not move it. The value the manifest
holds (``metadata``) is what ``ds.scanner(fragments=...)`` also takes.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any, Protocol

import numpy as np
import pyarrow as pa

from lance_sql.format.fragment import DataFile, Fragment
from lance_sql.format.manifest import Manifest
from lance_sql.io.store import ObjectStore
from lance_sql.table.read.positions import checked_integers, live_addresses

__all__ = ["LanceFragment", "fragment_values"]


class _Dataset(Protocol):
    """What a fragment reads through: a dataset object (``LanceDataset``)."""

    store: ObjectStore

    @property
    def manifest(self) -> Manifest: ...

    @property
    def schema(self) -> pa.Schema: ...

    def scanner(self, *args: Any, **kwargs: Any) -> Any: ...

    def take_addresses(self, *args: Any, **kwargs: Any) -> pa.Table: ...


class LanceFragment:
    """A fragment of ``dataset``'s version (``dataset`` must not move: see
    ``LanceDataset.get_fragments``)."""

    def __init__(self, dataset: _Dataset, metadata: Fragment) -> None:
        self._dataset = dataset
        self._metadata = metadata

    @property
    def fragment_id(self) -> int:
        return self._metadata.id

    @property
    def metadata(self) -> Fragment:
        """The manifest's record of the fragment: ``id``, ``files``, ``physical_rows``,
        ``deletion_file``, row-lineage sequences."""
        return self._metadata

    @property
    def physical_rows(self) -> int:
        """Rows in its data files, deleted ones included."""
        return self._metadata.physical_rows

    @property
    def num_deletions(self) -> int:
        return self._metadata.num_deleted_rows

    @property
    def schema(self) -> pa.Schema:
        return self._dataset.schema

    def data_files(self) -> list[DataFile]:
        return list(self._metadata.files)

    def deletion_file(self) -> str | None:
        """The deletion file's path under the table root, None when no row is deleted."""
        deletion = self._metadata.deletion_file
        return None if deletion is None else deletion.key(self._metadata.id)

    def count_rows(self, filter: str | None = None) -> int:
        """Live rows, or live rows matching ``filter`` (SQL, as for the dataset)."""
        if filter is None:
            return self._metadata.num_rows
        return self.scanner(columns=[], filter=filter).count_rows()

    def scanner(self, *, columns: Sequence[str] | None = None, filter: str | None = None,
                **kwargs: Any) -> Any:
        """The dataset's scanner (same options) restricted to this fragment."""
        return self._dataset.scanner(columns, filter, fragments=[self._metadata], **kwargs)

    def to_table(self, columns: Sequence[str] | None = None, filter: str | None = None,
                 **kwargs: Any) -> pa.Table:
        return self.scanner(columns=columns, filter=filter, **kwargs).to_table()

    def to_batches(self, *, columns: Sequence[str] | None = None, filter: str | None = None,
                   **kwargs: Any) -> Iterator[pa.RecordBatch]:
        return self.scanner(columns=columns, filter=filter, **kwargs).to_batches()

    def to_pandas(self, columns: Sequence[str] | None = None, filter: str | None = None,
                  **kwargs: Any) -> Any:
        return self.to_table(columns, filter, **kwargs).to_pandas()

    def head(self, num_rows: int) -> pa.Table:
        return self.scanner(limit=num_rows).to_table()

    def take(self, indices: Sequence[int] | np.ndarray,
             columns: Sequence[str] | None = None) -> pa.Table:
        """Rows at ``indices``, positions among the fragment's live rows (0 ..
        ``count_rows() - 1``), in that order."""
        live = self._metadata.num_rows
        positions = checked_integers(
            indices, f"take index (fragment {self.fragment_id} has {live} rows)", live - 1)
        ds = self._dataset
        addresses = live_addresses(ds.store, ds.manifest, self._metadata,
                                   positions.astype(np.int64))
        return ds.take_addresses(addresses, columns)

    def __repr__(self) -> str:
        files = [f.path for f in self._metadata.files]
        return (f"LanceFragment(id={self.fragment_id}, data_files={files}, "
                f"deletion_file={self.deletion_file()!r})")


def fragment_values(fragments: Sequence[LanceFragment | Fragment]) -> list[Fragment]:
    """``ds.scanner(fragments=...)``'s argument as manifest values: it takes the
    fragments ``get_fragments`` lists, or their ``metadata``."""
    return [f.metadata if isinstance(f, LanceFragment) else f for f in fragments]
