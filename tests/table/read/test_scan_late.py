"""Filtered Python scans read the filter's columns first and fetch the other output
columns for the matching rows only (``scan._scan_late``): taken when few rows match,
read over the range and filtered when many do. Both ways give the rows pylance's own
filtered scan gives, every row compared."""

from __future__ import annotations

import lance
import numpy as np
import pyarrow as pa
import pytest

import lance_sql
from lance_sql.table.files.reader import FragmentReader
from lance_sql.table.read import scan

ROWS = 30_000
FILTERS = {
    "x > 0.3": True,          # ~70% match: the range is read
    "x > 0.99": False,        # ~1%: the rows are taken
    "x >= 0": True,           # every live row
    "x > 2": None,            # none: nothing fetched
    "k = 3 AND x < 0.5": False,
}


@pytest.fixture(scope="module", params=["lance_sql", "pylance"])
def table_uri(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> str:
    rng = np.random.default_rng(11)
    ids = np.arange(ROWS)
    table = pa.table({"id": ids, "x": rng.random(ROWS), "k": (ids % 7).astype(np.int32),
                      "s": pa.array(np.char.add("row-", ids.astype(str)))})
    uri = str(tmp_path_factory.mktemp("late") / "t.lance")
    if request.param == "pylance":
        lance.write_dataset(table, uri, max_rows_per_file=12_000, data_storage_version="2.1")
        lance.dataset(uri).delete("id % 5 = 1")
    else:
        lance_sql.write_dataset(table, uri, max_rows_per_file=12_000)
        lance_sql.dataset(uri).delete("id % 5 = 1")
    return uri


@pytest.mark.parametrize("filter", list(FILTERS))
def test_late_columns_read_over_the_range_when_many_rows_match(
        table_uri: str, filter: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # fragments read one by one: read together, decoded columns are taken in memory
    # (test_batched_scan.py), not through FragmentReader.take
    monkeypatch.setattr(scan, "BATCH_FRAGMENT_ROWS", 0)
    takes: list[int] = []
    original = FragmentReader.take

    def counted(self, fields, rows):
        takes.append(len(rows))
        return original(self, fields, rows)

    monkeypatch.setattr(FragmentReader, "take", counted)
    ds = lance_sql.dataset(table_uri)
    got = ds.to_table(columns=["id", "s", "k"], filter=filter)
    reads_range = FILTERS[filter]
    if reads_range is None:
        assert got.num_rows == 0 and takes == []
    else:
        assert (takes == []) is reads_range, takes
    takes.clear()
    monkeypatch.setattr(scan, "_reads_range", lambda matched, length: False)
    general = ds.to_table(columns=["id", "s", "k"], filter=filter)  # always taken
    assert got.equals(general)
    assert bool(takes) == (got.num_rows > 0)  # (the forced way took them)
    theirs = lance.dataset(table_uri).to_table(columns=["id", "s", "k"], filter=filter)
    assert got.sort_by("id").equals(theirs.sort_by("id").cast(got.schema))
