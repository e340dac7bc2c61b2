"""A fragment reader opens each of its data files once.

Every read of a column used to look its data file up in the runtime cache again; for a
MemWAL generation's files that lookup checks the file's identity on disk (lstat and
realpath on its path), ~0.2 ms a column read, paid by every first lookup of a region.
"""

from __future__ import annotations

import gc
import weakref
from dataclasses import replace
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

import lance_sql
from lance_sql.errors import FormatError
from lance_sql.table.files import reader as reader_module
from lance_sql.table.files.reader import FragmentReader
from lance_sql.table.runtime.context import current_runtime


@pytest.fixture()
def fragment_reader(tmp_path: Path) -> FragmentReader:
    ids = np.arange(5_000, dtype=np.int64)
    table = pa.table({"id": ids, "v": ids * 0.5, "s": pa.array([f"s{i}" for i in ids])})
    ds = lance_sql.write_dataset(table, tmp_path / "t.lance")
    manifest = ds.manifest
    return FragmentReader(ds.store, manifest, manifest.fragments[0])


def test_reads_open_each_data_file_once(fragment_reader: FragmentReader,
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    opened: list[str] = []
    real = reader_module.open_data_file

    def counting(store, manifest, data_file):  # type: ignore[no-untyped-def]
        opened.append(data_file.path)
        return real(store, manifest, data_file)

    monkeypatch.setattr(reader_module, "open_data_file", counting)
    fields = fragment_reader.manifest.schema.fields
    first = fragment_reader.read(fields, offset=10, length=5)
    for field in fields:  # column by column, as a scan reads them, with page bounds
        fragment_reader.read([field], offset=4_000, length=1_000)
        fragment_reader.page_bounds(field)
    assert first[0].to_pylist() == list(range(10, 15))
    assert first[2].to_pylist() == [f"s{i}" for i in range(10, 15)]
    assert len(opened) == 1  # one data file, opened once (its row count checked then)


def test_a_file_that_disagrees_with_its_fragment_is_still_refused(
        fragment_reader: FragmentReader) -> None:
    """The memo keeps only files whose row count was checked: every read is refused."""
    lying = FragmentReader(fragment_reader.store, fragment_reader.manifest,
                           replace(fragment_reader.fragment, physical_rows=4_000))
    for _ in range(2):
        with pytest.raises(FormatError, match="has 5000 rows but fragment 0 declares 4000"):
            lying.read(fragment_reader.manifest.schema.fields[:1], offset=0, length=10)


def test_a_kept_reader_does_not_hold_files_open(fragment_reader: FragmentReader) -> None:
    """Open files belong to the runtime's bounded cache: once it lets one go, a reader
    kept for later lookups (see scan.FragmentReaders) does not keep it open, and reads
    again through a newly opened file."""
    fields = fragment_reader.manifest.schema.fields[:1]
    first = fragment_reader.read(fields, offset=0, length=3)[0]
    opened = fragment_reader._reader(fragment_reader.fragment.files[0])
    gone = weakref.ref(opened)
    del opened
    current_runtime().cache.clear("data_files")
    gc.collect()
    assert gone() is None  # the reader's memo did not keep it alive
    assert fragment_reader.read(fields, offset=0, length=3)[0].equals(first)
