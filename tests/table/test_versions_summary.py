"""``versions()[i]["metadata"]``, pylance's per-version summary of files and rows, agrees
with pylance's own on one table, across versions with several fragments, deletion
files and fragments of more than one data file (the summary is summed without a Python
pass per fragment, and the row counts come from the manifest's kept sums)."""

from __future__ import annotations

from pathlib import Path

import lance
import pyarrow as pa

import lance_sql


def test_summaries_agree_with_pylance(tmp_path: Path) -> None:
    uri = str(tmp_path / "t.lance")
    lance.write_dataset(pa.table({"id": pa.array(range(300), pa.int64())}), uri,
                        max_rows_per_file=100)
    ds = lance.dataset(uri)
    ds.delete("id % 7 = 0")
    ds.add_columns({"y": "id * 2"})  # a second data file in every fragment
    lance.write_dataset(pa.table({"id": pa.array(range(5), pa.int64()),
                                  "y": pa.array(range(5), pa.int64())}), uri, mode="append")
    lance.dataset(uri).delete("id = 1")
    theirs = [v["metadata"] for v in lance.dataset(uri).versions()]
    ours = lance_sql.dataset(uri).versions()
    assert [v["metadata"] for v in ours] == theirs
    assert [v["num_rows"] for v in ours] == [int(m["total_rows"]) for m in theirs]
    assert theirs[-1]["total_deletion_files"] != "0" and theirs[-1]["total_data_files"] != \
        theirs[-1]["total_fragments"]
