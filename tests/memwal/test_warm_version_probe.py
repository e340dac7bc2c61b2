"""A warm view finds the table's latest version before every strong read by listing
``_versions/`` while the listing is short, and from the version hint once it is not; both
see a commit made through another handle at the very next read."""

from __future__ import annotations

from pathlib import Path

import pytest
from warm_helpers import counting, keyed_table, value

import lance_sql
from lance_sql.memwal.read import warm


def test_few_versions_are_listed(tmp_path: Path, monkeypatch) -> None:
    uri, mw = keyed_table(tmp_path, 2)
    listed = counting(monkeypatch, warm, "list_versions")
    hinted = counting(monkeypatch, warm, "latest_version")
    assert value(mw, 7) == ["b7"]
    assert value(mw, 7) == ["b7"]  # the warm view, its version probed by a listing
    lance_sql.dataset(uri).delete("id = 7")  # a commit through another handle
    assert value(mw, 7) == []
    assert value(mw, 8) == ["b8"]
    assert listed[0] == 3 and hinted[0] == 0  # (the first read opens the view)


@pytest.mark.parametrize("kept", [0, 2])
def test_many_versions_take_the_hint(tmp_path: Path, monkeypatch, kept: int) -> None:
    uri, mw = keyed_table(tmp_path, 2)  # three versions or more
    monkeypatch.setattr(warm, "LISTED_VERSIONS_MAX", kept)
    listed = counting(monkeypatch, warm, "list_versions")
    hinted = counting(monkeypatch, warm, "latest_version")
    assert value(mw, 7) == ["b7"]
    assert value(mw, 7) == ["b7"]  # the listing found too many: the hint from now on
    lance_sql.dataset(uri).delete("id = 7")
    assert value(mw, 7) == []
    assert value(mw, 8) == ["b8"]
    assert listed[0] == 1 and hinted[0] == 2
