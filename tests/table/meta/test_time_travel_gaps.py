"""Time travel to an instant when a version cleanup removed was current: a
VersionCleanedUpError, not the rows of the older version a tag kept (which answered
silently, in Python and SQL; pylance does so too)."""

from __future__ import annotations

import datetime as dt
import time
from pathlib import Path

import pyarrow as pa
import pytest

import lance_sql
from lance_sql.errors import VersionCleanedUpError


def test_an_instant_inside_removed_versions_is_refused(tmp_path: Path) -> None:
    uri = str(tmp_path / "t.lance")
    ds = lance_sql.write_dataset(pa.table({"id": [1]}), uri)
    for i in (2, 3, 4):
        time.sleep(0.01)
        ds = lance_sql.write_dataset(pa.table({"id": [i]}), uri, mode="append")
    stamps = [v["timestamp_utc"] for v in ds.versions()]
    at_3 = stamps[2] + dt.timedelta(microseconds=5)
    assert lance_sql.dataset(uri, asof=at_3).count_rows() == 3
    ds.tags.create("keep", 1)
    ds.cleanup_old_versions(older_than=dt.timedelta(0),
        error_if_tagged_old_versions=False)
    assert [v["version"] for v in ds.versions()] == [1, 4]
    with pytest.raises(VersionCleanedUpError, match="versions 2..3 were removed"):
        lance_sql.dataset(uri, asof=at_3)
    session = lance_sql.connect(str(tmp_path))
    with pytest.raises(VersionCleanedUpError):
        session.sql(f"SELECT count(*) FROM t TIMESTAMP AS OF '{at_3.isoformat()}'")
    # the kept versions' own instants still open them
    assert lance_sql.dataset(uri, asof=stamps[0]).version == 1
    assert lance_sql.dataset(uri, asof=stamps[3]).count_rows() == 4
    assert lance_sql.dataset(uri, version=1).count_rows() == 1


def test_an_instant_before_the_oldest_kept_version_is_refused(tmp_path: Path) -> None:
    """Versions 1 and 2 removed: an instant of theirs is a VersionCleanedUpError (it said
    the table had no version committed by then, which was false); a table never cleaned
    still says it had none."""
    uri = str(tmp_path / "t.lance")
    ds = lance_sql.write_dataset(pa.table({"id": [1]}), uri)
    for i in (2, 3):
        time.sleep(0.01)
        ds = lance_sql.write_dataset(pa.table({"id": [i]}), uri, mode="append")
    stamps = [v["timestamp_utc"] for v in ds.versions()]
    before = stamps[0] - dt.timedelta(seconds=1)
    with pytest.raises(lance_sql.errors.NotFoundError, match="no version committed") as seen:
        lance_sql.dataset(uri, asof=before)
    assert not isinstance(seen.value, VersionCleanedUpError)
    ds.cleanup_old_versions(older_than=dt.timedelta(0))
    assert [v["version"] for v in ds.versions()] == [3]
    for when in (stamps[1], before):
        with pytest.raises(VersionCleanedUpError, match="versions 1..2 were removed"):
            lance_sql.dataset(uri, asof=when)
    session = lance_sql.connect(str(tmp_path))
    with pytest.raises(VersionCleanedUpError):
        session.sql(f"SELECT count(*) FROM t TIMESTAMP AS OF '{stamps[1].isoformat()}'")
    assert lance_sql.dataset(uri, asof=stamps[2]).count_rows() == 3
