"""Bad input, continued: every mistake a caller (or a damaged manifest) can make comes back
as a lance_sql error of the right class whose message names the culprit, never a builtin
TypeError / OverflowError / OSError or DataFusion's bare Exception. Valid SQL that used to
fail (``IN (NULL)``) answers as the Python API does, and a datetime opens the version
current at that instant (pylance's ``asof``).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import os
from collections.abc import Callable
from pathlib import Path

import lance
import numpy as np
import pyarrow as pa
import pytest

import lance_sql
from lance_sql.errors import (
    FormatError,
    InvalidInputError,
    LanceError,
    NotFoundError,
    SchemaError,
)
from lance_sql.format.manifest import Manifest, ManifestCodec
from lance_sql.io import open_store
from lance_sql.table.meta.versions import latest_version


@pytest.fixture
def root(tmp_path: Path) -> Path:
    """``t``: ids 0..99 with names, in two fragments; version 2 deletes id 50."""
    data = pa.table({"id": pa.array(np.arange(100), pa.int64()),
                     "s": [f"s{i}" for i in range(100)]})
    lance_sql.write_dataset(data, tmp_path / "t.lance", max_rows_per_file=60)
    lance_sql.dataset(tmp_path / "t.lance").delete("id = 50")
    return tmp_path


def uri_of(root: Path) -> str:
    return str(root / "t.lance")


def raises(error: type[LanceError], action: Callable[[], object], *culprits: str) -> LanceError:
    """``action`` raises exactly ``error`` (not a subclass), naming every culprit."""
    with pytest.raises(LanceError) as info:
        action()
    assert type(info.value) is error, f"{type(info.value).__name__}: {info.value}"
    for culprit in culprits:
        assert culprit in str(info.value), f"{culprit!r} not in {info.value}"
    return info.value


# --------------------------------------------------------------------------------------------
# SQL
# --------------------------------------------------------------------------------------------


def sql_rows(root: Path, query: str) -> list[dict]:
    return lance_sql.connect(root).sql(query).to_arrow_table().to_pylist()


@pytest.mark.parametrize("where", [
    "id IN (NULL)", "id NOT IN (NULL)", "s IN (NULL)", "id IN (NULL, NULL)",
    "id IN (NULL, 3)", "id IN (3, NULL)", "id NOT IN (NULL, 3)", "s IN (NULL, 's7')",
    "id IN (NULL, 3, 4, 5)", "id IN (-1, NULL)", "id = 3 OR id IN (NULL)",
    "id IN (NULL) AND id = 3", "id IN (3, NULL) OR id = 5",
    "(id IN (3, NULL)) IS NULL AND id = 4", "id NOT IN (NULL, 3) OR id = 3",
])
def test_sql_in_lists_with_null_answer_as_the_python_api(root: Path, where: str) -> None:
    """``IN (NULL)`` is valid SQL (never true): a TypeError in the filter decoder before."""
    expected = lance_sql.dataset(uri_of(root)).to_table(columns=["id"], filter=where)
    assert sql_rows(root, f"SELECT id FROM t WHERE {where} ORDER BY id") == expected.to_pylist()
    assert sql_rows(root, f"SELECT count(*) AS n FROM t WHERE {where}") == [
        {"n": expected.num_rows}]


def test_sql_in_list_with_null_in_a_projection(root: Path) -> None:
    rows = sql_rows(root, "SELECT id IN (NULL, 3) AS x, id NOT IN (NULL) AS y, "
                          "'IN (NULL)' AS z FROM t WHERE id < 5 ORDER BY id")
    assert [r["x"] for r in rows] == [None, None, None, True, None]
    assert [r["y"] for r in rows] == [None] * 5
    assert {r["z"] for r in rows} == {"IN (NULL)"}  # strings are never rewritten


@pytest.mark.parametrize(("where", "constant_last", "expected"), [
    ("NULL AND id = 3", "id = 3 AND NULL", []),
    ("id IN (NULL) OR id = 3", "id = 3 OR id IN (NULL)", [{"id": 3}]),
    # two constants pushed (the float comparison kept above the scan): NULL AND NULL
    ("id >= 1e1 AND id != NULL AND id IN (NULL)", "id >= 1e1 AND id != NULL", []),
])
def test_sql_constant_before_a_column_condition_answers_as_written_last(
        root: Path, where: str, constant_last: str, expected: list) -> None:
    """A constant operand first in a pushed filter (which datafusion-python cannot build
    as a pyarrow expression) no longer fails: the query runs with its filters above the
    scan (lance_sql.sql.unpushed) and answers as the constant written last does."""
    assert sql_rows(root, f"SELECT id FROM t WHERE {where}") == expected
    assert sql_rows(root, f"SELECT id FROM t WHERE {constant_last}") == expected


SQL_ERRORS = [
    ("SELECT id FROM t LIMIT -1", "-1"),
    ("SELECT id FROM t LIMIT 18446744073709551615", "18446744073709551615"),
    ("SELECT id FROM t OFFSET 18446744073709551615", "18446744073709551615"),
    ("SELECT id FROM t LIMIT 1 OFFSET 18446744073709551615", "18446744073709551615"),
    ("SELECT id FROM t WHERE _rowid = 'abc'", "'abc'"),
    ("SELECT id FROM t WHERE _rowaddr > 'x1'", "'x1'"),
    ("SELECT 1; SELECT 2", "position 10"),
    ("SELECT id FROM t; DELETE FROM t", "position 18"),
    ("DELETE FROM t WHERE id = 1; SELECT 2", "position 28"),
]


@pytest.mark.parametrize(("query", "culprit"), SQL_ERRORS)
def test_bad_sql_is_invalid_input(root: Path, query: str, culprit: str) -> None:
    raises(InvalidInputError, lambda: lance_sql.connect(root).sql(query).to_arrow_table(),
           culprit)
    assert lance_sql.dataset(uri_of(root)).version == 2  # nothing ran
    assert sql_rows(root, "SELECT count(*) AS n FROM t") == [{"n": 99}]


# --------------------------------------------------------------------------------------------
# the Python API
# --------------------------------------------------------------------------------------------


PY_ERRORS = {
    "take 2**63": (lambda ds: ds.take([2**63]), str(2**63)),
    "take -1": (lambda ds: ds.take([0, -1]), "-1"),
    "take None": (lambda ds: ds.take([None]), "None"),
    "take 1.5": (lambda ds: ds.take([1.5]), "1.5"),
    "take past the end": (lambda ds: ds.take([99]), "99 rows"),
    "take_rows -1": (lambda ds: ds.take_rows([-1]), "-1"),
    "take_rows 2**64": (lambda ds: ds.take_rows([2**64]), str(2**64)),
    "take_rows None": (lambda ds: ds.take_rows([3, None]), "None"),
    "limit 2**64": (lambda ds: ds.to_table(limit=2**64), str(2**64)),
    "limit -1": (lambda ds: ds.to_table(limit=-1), "-1"),
    "offset 2**64": (lambda ds: ds.to_table(offset=2**64), str(2**64)),
    "limit '5'": (lambda ds: ds.to_table(limit="5"), "'5'"),
    "batch_size 0": (lambda ds: ds.scanner(batch_size=0).to_table(), "batch_size"),
    "tag of 300 characters": (lambda ds: ds.tags.create("x" * 300, 1), "200 characters"),
    "tag of 201 bytes": (lambda ds: ds.tags.create("é" * 100 + "x", 1), "ASCII"),
    "version 1.5": (lambda ds: ds.checkout_version(1.5), "1.5"),
    "version [1]": (lambda ds: ds.checkout_version([1]), "[1]"),
}


@pytest.mark.parametrize("case", sorted(PY_ERRORS))
def test_bad_arguments_are_invalid_input(root: Path, case: str) -> None:
    action, culprit = PY_ERRORS[case]
    ds = lance_sql.dataset(uri_of(root))
    raises(InvalidInputError, lambda: action(ds), culprit)
    assert ds.to_table().num_rows == 99 and not ds.tags.list()


def test_tag_names_up_to_the_limit_work(root: Path) -> None:
    ds = lance_sql.dataset(uri_of(root))
    ds.tags.create("t" * 200, 1)
    assert lance_sql.dataset(uri_of(root), version="t" * 200).version == 1
    assert lance.dataset(uri_of(root), version="t" * 200).version == 1


def test_take_still_accepts_numpy_and_large_ids(root: Path) -> None:
    """The positive control for the checks above."""
    ds = lance_sql.dataset(uri_of(root))
    assert ds.take(np.array([0, 98], np.uint64)).column("id").to_pylist() == [0, 99]
    assert ds.take([]).num_rows == 0
    addr = (1 << 32) | 10  # fragment 1, offset 10: id 70
    assert ds.take_rows(np.array([addr], np.int64)).column("id").to_pylist() == [70]
    assert ds.to_table(limit=2**63 - 1, offset=98).column("id").to_pylist() == [99]


# --------------------------------------------------------------------------------------------
# damaged manifests
# --------------------------------------------------------------------------------------------


def craft(root: Path, change: Callable[[Manifest], Manifest]) -> str:
    """Commit the next version as ``change`` of the latest; return its path."""
    store = open_store(uri_of(root))
    ref = latest_version(store)
    data = store.read(ref.key)
    crafted = change(ManifestCodec.decode(data, ref.key)).evolve(version=ref.version + 1)
    key = ref.naming.key(crafted.version)
    assert store.put_if_absent(
        key, ManifestCodec.encode(crafted, ManifestCodec.decode_transaction(data, key)))
    return os.path.join(uri_of(root), key)


def _empty_data_path(m: Manifest) -> Manifest:
    frag = m.fragments[1]
    files = (dataclasses.replace(frag.files[0], path=""),)
    return m.evolve(fragments=(m.fragments[0], dataclasses.replace(frag, files=files)))


def _huge_list_type(m: Manifest) -> Manifest:
    fields = list(m.schema.fields)
    fields[1] = dataclasses.replace(fields[1], logical_type="fixed_size_list:int64:99999999999")
    return m.evolve(schema=dataclasses.replace(m.schema, fields=tuple(fields)))


@pytest.mark.parametrize(("change", "culprit"), [
    (_empty_data_path, "empty name"), (_huge_list_type, "fixed_size_list:int64:99999999999")])
def test_damaged_manifest_is_a_format_error(root: Path, change: Callable, culprit: str) -> None:
    path = craft(root, change)
    for action in (lambda: lance_sql.dataset(uri_of(root)).to_table(),
                   lambda: lance_sql.dataset(uri_of(root)).schema,
                   lambda: sql_rows(root, "SELECT count(*) FROM t")):
        raises(FormatError, action, path, culprit)
    assert lance_sql.dataset(uri_of(root), version=2).count_rows() == 99


def test_next_row_id_without_room_is_a_format_error(tmp_path: Path) -> None:
    """A manifest whose next_row_id leaves no room below 2**64 - 1 (the placeholder id):
    an append failed with a builtin ValueError from protobuf before."""
    uri = str(tmp_path / "s.lance")
    data = pa.table({"id": pa.array(np.arange(10), pa.int64())})
    lance_sql.write_dataset(data, uri, enable_stable_row_ids=True)
    store = open_store(uri)
    ref = latest_version(store)
    raw = store.read(ref.key)
    crafted = ManifestCodec.decode(raw, ref.key).evolve(version=2, next_row_id=(1 << 64) - 5)
    store.put_if_absent(ref.naming.key(2), ManifestCodec.encode(
        crafted, ManifestCodec.decode_transaction(raw, ref.key)))
    raises(FormatError, lambda: lance_sql.write_dataset(data, uri, mode="append"),
           "manifest of version 2", str((1 << 64) - 5))
    assert lance_sql.dataset(uri).version == 2
    assert sorted(os.listdir(os.path.join(uri, "data"))) == sorted(
        f.files[0].path for f in lance_sql.dataset(uri).manifest.fragments)  # nothing left


# --------------------------------------------------------------------------------------------
# time travel by instant
# --------------------------------------------------------------------------------------------


def test_dataset_as_of_an_instant(root: Path) -> None:
    """``version=datetime`` (a TypeError before) and ``asof=`` open the latest version
    committed at or before the instant, as pylance's ``asof`` does and as SQL's
    ``TIMESTAMP AS OF`` does."""
    uri = uri_of(root)
    lance_sql.write_dataset(pa.table({"id": pa.array([1000], pa.int64()), "s": ["x"]}), uri,
                            mode="append")  # version 3
    times = {v["version"]: v["timestamp_utc"] for v in lance_sql.dataset(uri).versions()}
    assert sorted(times) == [1, 2, 3] and times[1] < times[2] < times[3]
    one_us = dt.timedelta(microseconds=1)
    for version, when in times.items():
        for instant, expected in ((when, version), (when - one_us, version - 1)):
            if expected == 0:
                raises(NotFoundError, lambda i=instant: lance_sql.dataset(uri, version=i),
                       "no version committed at or before")
                continue
            assert lance_sql.dataset(uri, version=instant).version == expected
            assert lance_sql.dataset(uri, asof=instant).version == expected
            assert lance_sql.dataset(uri, asof=instant.isoformat()).version == expected
            naive = instant.astimezone(dt.UTC).replace(tzinfo=None)  # naive means UTC
            assert lance_sql.dataset(uri, version=naive).version == expected
            assert lance_sql.dataset(uri).checkout_version(instant).version == expected
            rows = sql_rows(root, f"SELECT count(*) AS n FROM t TIMESTAMP AS OF "
                                  f"'{instant.isoformat()}'")
            assert rows == [{"n": lance_sql.dataset(uri, version=expected).count_rows()}]
    # pylance's asof takes naive local times and excludes the instant itself: between two
    # commits both pick the earlier one
    for version in (1, 2):
        mid = times[version] + (times[version + 1] - times[version]) / 2
        assert lance_sql.dataset(uri, asof=mid).version == version
        assert lance.dataset(uri, asof=mid.astimezone().replace(tzinfo=None)).version == version
    raises(InvalidInputError, lambda: lance_sql.dataset(uri, version=2, asof=times[2]),
           "version or asof")
    raises(InvalidInputError, lambda: lance_sql.dataset(uri, asof="yesterday"), "'yesterday'")
    raises(InvalidInputError, lambda: lance_sql.dataset(uri, asof=12), "12")


def test_a_filter_failing_on_the_values_is_invalid_input_and_changes_nothing(
        tmp_path: Path) -> None:  # fmt: skip
    """A string column compared with a number casts each string (as SQL does): a value
    that does not parse used to escape as pyarrow's ArrowInvalid from scans, deletes,
    updates and the change feed; strings that all parse still compare as numbers."""
    data = pa.table({"id": pa.array(np.arange(6), pa.int64()),
                     "s": ["1", "22", "x", None, "5", "6"],
                     "n": ["1", "22", "3", None, "5", "6"]})
    path = tmp_path / "t.lance"
    lance_sql.write_dataset(data, path, max_rows_per_file=4, enable_stable_row_ids=True)
    ds = lance_sql.dataset(path)
    calls: list[Callable[[], object]] = [
        lambda: ds.to_table(filter="s > 3"),
        lambda: ds.to_table(columns=["id"], filter="s = 1 AND id >= 0"),
        lambda: ds.count_rows("s > 3"),
        lambda: ds.delete("s > 3"),
        lambda: ds.update({"s": "'y'"}, where="s > 3"),
        lambda: ds.table_changes(1, 1, filter="s > 3"),
    ]
    for call in calls:
        with pytest.raises(InvalidInputError, match="'x'"):
            call()
    assert lance_sql.dataset(path).version == 1
    assert ds.to_table(filter="n > 3")["id"].to_pylist() == [1, 4, 5]
    assert lance.dataset(path).to_table().equals(data)


@pytest.mark.parametrize("name", ["_rowid", "_rowaddr", "_rowoffset", "_row_created_at_version",
                                  "_row_last_updated_at_version"])
def test_reserved_column_names_are_refused_as_pylance_refuses_them(tmp_path: Path,
                                                                   name: str) -> None:
    """A table with a column named like a system column was written, then every read of it
    failed (a KeyError from the scan, DataFusion's duplicate field in SQL); pylance refuses
    the name on write. Adding or renaming a column to it is refused too."""
    data = pa.table({"id": [1, 2], name: pa.array([7, 8], pa.uint64())})
    with pytest.raises(SchemaError, match=f"'{name}': reserved"):
        lance_sql.write_dataset(data, tmp_path / "new.lance")
    assert not (tmp_path / "new.lance" / "_versions").exists() or \
        not any((tmp_path / "new.lance" / "_versions").iterdir())
    with pytest.raises(OSError, match="reserved name"):
        lance.write_dataset(data, tmp_path / "oracle.lance")
    path = tmp_path / "t.lance"
    ds = lance_sql.write_dataset(pa.table({"id": [1, 2]}), path)
    for change in (lambda: lance_sql.write_dataset(data, path, mode="overwrite"),
                   lambda: ds.add_columns(pa.table({name: [1, 2]})),
                   lambda: ds.add_columns({name: "id * 2"}),
                   lambda: ds.alter_columns({"path": "id", "name": name})):
        with pytest.raises(SchemaError, match="reserved"):
            change()
    assert lance_sql.dataset(path).version == 1
    assert lance.dataset(path).to_table().to_pydict() == {"id": [1, 2]}


def test_dotted_top_level_names_are_refused_as_pylance_refuses_them(tmp_path: Path) -> None:
    """A top-level column named ``a.b`` was written, and pylance could not read the table
    (``a.b`` names field b of a struct a); pylance refuses the name on write."""
    data = pa.table({"a.b": [1, 2], "c": [3, 4]})
    with pytest.raises(SchemaError, match="'a.b': a top-level column's name may not hold"):
        lance_sql.write_dataset(data, tmp_path / "new.lance")
    with pytest.raises(OSError, match="cannot contain"):
        lance.write_dataset(data, tmp_path / "oracle.lance")
    path = tmp_path / "t.lance"
    ds = lance_sql.write_dataset(pa.table({"c": [3, 4], "s": [{"x": 1}, {"x": 2}]}), path)
    for change in (lambda: ds.add_columns(pa.table({"a.b": [1, 2]})),
                   lambda: ds.add_columns({"a.b": "c * 2"}),
                   lambda: ds.alter_columns({"path": "c", "name": "a.b"})):
        with pytest.raises(SchemaError, match="may not hold a '.'"):
            change()
    assert lance_sql.dataset(path).version == 1
    ds.alter_columns({"path": "s.x", "name": "y.z"})  # (a struct's field: pylance allows)
    assert lance.dataset(path).to_table().column("s").to_pylist() == [{"y.z": 1}, {"y.z": 2}]


def test_stable_names_the_newest_stable_format(tmp_path: Path) -> None:
    ds = lance_sql.write_dataset(pa.table({"id": [1]}), tmp_path / "t.lance",
                                 data_storage_version="stable")
    assert ds.data_storage_version == lance.write_dataset(
        pa.table({"id": [1]}), tmp_path / "o.lance", data_storage_version="stable"
    ).data_storage_version == "2.2"


def test_names_pylance_allows_stay_allowed_and_a_change_feed_copies_with_an_alias(
        tmp_path: Path) -> None:  # fmt: skip
    data = pa.table({"_ROWID": [1], "_distance": [0.5], "_commit_version": [3]})
    lance_sql.write_dataset(data, tmp_path / "ok.lance")
    assert lance.dataset(tmp_path / "ok.lance").to_table().equals(data)
    lance_sql.write_dataset(pa.table({"id": [1, 2]}), tmp_path / "t.lance",
                            enable_stable_row_ids=True)
    session = lance_sql.connect(tmp_path)
    with pytest.raises(SchemaError, match="'_rowid': reserved"):
        session.sql("CREATE TABLE cdc AS SELECT * FROM table_changes('t', 1, 1)")
    session.sql("CREATE TABLE cdc AS SELECT id, _change_type, _rowid AS row_id "
                "FROM table_changes('t', 1, 1)")
    assert session.sql("SELECT * FROM cdc ORDER BY row_id").to_pydict() == \
        {"id": [1, 2], "_change_type": ["insert", "insert"], "row_id": [0, 1]}
