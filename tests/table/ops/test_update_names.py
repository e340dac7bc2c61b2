"""``update`` keys name top-level columns as field paths do: plain, or backquoted; its
``where`` names rows (a blank one is refused, as pylance refuses it)."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

import lance_sql
from lance_sql.errors import InvalidInputError, NotFoundError

lance = pytest.importorskip("lance")


@pytest.fixture
def ds(tmp_path: Path) -> lance_sql.LanceDataset:
    data = pa.table({"q`t": [1, 2], "a": [3, 4], "s": pa.array([{"x": 1}, {"x": 2}])})
    return lance_sql.write_dataset(data, tmp_path / "t.lance")


@pytest.mark.parametrize("mode", ["rewrite_rows", "rewrite_columns"])
def test_a_backquoted_key_updates_its_column(ds: lance_sql.LanceDataset, mode: str) -> None:
    """(It used to be checked under its own name, then looked up under the quoted one:
    the update committed, counted its rows and changed nothing.)"""
    assert ds.update({"`q``t`": "`q``t` * 10", "`a`": "0"}, "a = 4",
                     update_mode=mode) == {"num_rows_updated": 1}
    got = lance_sql.dataset(ds.uri).to_table().sort_by("q`t").to_pydict()
    assert got["q`t"] == [1, 20] and got["a"] == [3, 0]


def test_keys_that_are_not_one_top_level_column_are_refused(ds: lance_sql.LanceDataset
                                                            ) -> None:
    version = ds.version
    cases = [({"q`t": "1"}, InvalidInputError, "unbalanced backquote"),
             ({"a.b": "1"}, InvalidInputError, "top-level columns only"),
             ({"`a`.b": "1"}, InvalidInputError, "top-level columns only"),
             ({"s.x": "1"}, InvalidInputError, "top-level columns only"),
             ({"`q``t`": "1", "`q``t` ": "2"}, NotFoundError, "no column"),
             ({"s": "s", "`s`": "s"}, InvalidInputError, "assigns column 's' twice")]
    for updates, error, words in cases:
        with pytest.raises(error, match=words):
            ds.update(updates)
    assert lance_sql.dataset(ds.uri).version == version  # nothing committed


@pytest.mark.parametrize("where", ["", "  ", "\n"])
def test_a_blank_where_is_refused_not_read_as_every_row(tmp_path: Path, where: str) -> None:
    # pylance refuses it; read as "no condition" it silently updated every row
    data = pa.table({"id": [1, 2], "s": ["a", "b"]})
    for lib, name in ((lance_sql, "o"), (lance, "p")):
        ds = lib.write_dataset(data, str(tmp_path / name))
        with pytest.raises(ValueError):
            ds.update({"s": "'z'"}, where=where)
        assert lib.dataset(ds.uri).version == 1
        assert lib.dataset(ds.uri).to_table() == data
