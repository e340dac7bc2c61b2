"""Lance JSON columns (stored as JSONB) are refused, never returned as wrong text."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

import lance_sql
from lance_sql.errors import UnsupportedFeatureError


def test_json_columns_are_refused_not_misread(tmp_path: Path) -> None:
    lance = pytest.importorskip("lance")
    uri = str(tmp_path / "j.lance")
    lance.write_dataset(pa.table({"id": [1], "doc": pa.array(['{"a": 1}'], pa.json_())}), uri)
    ds = lance_sql.dataset(uri)
    assert ds.to_table(columns=["id"])["id"].to_pylist() == [1]
    with pytest.raises(UnsupportedFeatureError, match="'doc'"):
        ds.to_table()
    with pytest.raises(UnsupportedFeatureError, match="'doc'"):
        lance_sql.write_dataset(pa.table({"doc": pa.array(['{}'], pa.json_())}),
                                str(tmp_path / "mine.lance"))
