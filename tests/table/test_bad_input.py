"""Bad input at the table level: corrupt, truncated, missing or hostile files and bad writes.

Every case must end in a typed :class:`lance_sql.LanceError` whose message names the file
(or table) at fault, write nothing (the table directory is compared file by file, bytes
included, before and after), and leave the table readable at its last good version.
"""

from __future__ import annotations

import os
import shutil
import struct
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import lance
import numpy as np
import pyarrow as pa
import pytest

import lance_sql
from lance_sql.errors import (
    CommitConflict,
    FormatError,
    IncompatibleConflict,
    InvalidInputError,
    LanceError,
    NotFoundError,
    PathEscapeError,
    RetryableConflict,
    SchemaError,
    UnsupportedFeatureError,
)
from lance_sql.format.fragment import DataFile
from lance_sql.format.manifest import FOOTER, Manifest, ManifestCodec
from lance_sql.io import open_store
from lance_sql.table.meta.versions import latest_version, list_versions, load_manifest
from lance_sql.table.txn.commit import CommitConfig, commit_transaction
from lance_sql.table.txn.operations import Append, Delete, Overwrite, Transaction
from lance_sql.table.write.fragments import write_fragments

ROWS = 6000
FIRST_FILE = 5500

SCHEMA = pa.schema([
    pa.field("id", pa.int64(), nullable=False),
    pa.field("s", pa.string()),
    pa.field("l", pa.list_(pa.int32())),
    pa.field("st", pa.struct([("a", pa.int32()), ("b", pa.string())])),
    pa.field("ls", pa.list_(pa.struct([("x", pa.int64())]))),
])  # fmt: skip


def rows(start: int, n: int) -> pa.Table:
    ids = np.arange(start, start + n, dtype=np.int64)
    return pa.Table.from_arrays(
        [
            pa.array(ids),
            pa.array([f"r{i}" for i in ids], mask=ids % 5 == 0),
            pa.array([[int(i), None] if i % 3 else ([] if i % 2 else None) for i in ids],
                     pa.list_(pa.int32())),
            pa.StructArray.from_arrays(
                [pa.array((ids % 100).astype(np.int32), mask=ids % 7 == 0),
                 pa.array([f"b{i}" for i in ids])],
                fields=list(SCHEMA.field("st").type),
            ),
            pa.array([[{"x": int(i)}] if i % 4 else [] for i in ids], SCHEMA.field("ls").type),
        ],
        schema=SCHEMA,
    )


@dataclass
class Table:
    """A three-version table: v1 create (fragments of 5500 + 500 rows), v2 deletes 5200 rows
    of fragment 0 (a roaring .bin), v3 deletes one row of fragment 1 (an Arrow file)."""

    uri: str
    expected: pa.Table  # rows of the latest version (3)

    @property
    def store(self):
        return open_store(self.uri)

    def manifest(self, version: int | None = None) -> Manifest:
        store = self.store
        refs = {r.version: r for r in list_versions(store)}
        return load_manifest(store, refs[version or max(refs)])

    def manifest_path(self, version: int) -> str:
        (ref,) = [r for r in list_versions(self.store) if r.version == version]
        return os.path.join(self.uri, ref.key)

    def data_path(self, fragment: int) -> str:
        return os.path.join(self.uri, self.manifest().fragments[fragment].files[0].key)

    def deletion_path(self, kind: str) -> str:
        for frag in self.manifest().fragments:
            if frag.deletion_file is not None and frag.deletion_file.kind == kind:
                return os.path.join(self.uri, frag.deletion_file.key(frag.id))
        raise AssertionError(f"no {kind} deletion file")

    def assert_intact(self) -> None:
        """Readable at its last version, with the same rows, by lance_sql and pylance."""
        forget_files()  # make sure the files are read again
        ds = lance_sql.dataset(self.uri)
        assert ds.version == 3
        assert ds.to_table() == self.expected
        assert ds.count_rows("id >= 5200") == self.expected.num_rows
        assert lance.dataset(self.uri).to_table() == self.expected


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> Table:
    """The three-version table, written and checked once; tests get copies of it."""
    uri = str(tmp_path_factory.mktemp("bad_input") / "t.lance")
    ds = lance_sql.write_dataset(rows(0, ROWS), uri, max_rows_per_file=FIRST_FILE)
    ds.delete("id < 5200")
    ds.delete("id = 5600")
    expected = rows(5200, 800)
    expected = expected.filter(pa.compute.not_equal(expected["id"], 5600))
    t = Table(uri, expected)
    assert ds.version == 3 and t.deletion_path("bitmap").endswith(".bin")
    assert t.deletion_path("arrow").endswith(".arrow")
    t.assert_intact()
    return t


@pytest.fixture
def table(pristine: Table, tmp_path: Path) -> Table:
    """A private copy of the table (every file, byte for byte): tests damage and restore it."""
    uri = str(tmp_path / "t.lance")
    shutil.copytree(pristine.uri, uri)
    return Table(uri, pristine.expected)


def forget_files() -> None:
    """Empty the caches of open data files and decoded deletion vectors."""
    lance_sql.default_runtime().clear("data_files", "deletions")


def snapshot(root: str) -> dict[str, bytes]:
    out = {}
    for dirpath, _dirs, files in os.walk(root):
        for name in files:
            path = os.path.join(dirpath, name)
            with open(path, "rb") as f:
                out[os.path.relpath(path, root)] = f.read()
    return out


def fails_cleanly(
    uri: str, error: type[BaseException] | tuple, action: Callable[[], object], *names: str
) -> LanceError:
    """``action`` raises ``error`` naming every one of ``names`` and writes nothing."""
    before = snapshot(uri)
    forget_files()
    with pytest.raises(error) as info:
        action()
    assert isinstance(info.value, LanceError)
    for name in names:
        assert name in str(info.value), f"{name!r} not in error: {info.value}"
    after = snapshot(uri)
    assert after.keys() == before.keys(), f"files changed: {set(after) ^ set(before)}"
    assert after == before, "file contents changed"
    return info.value


def write_bytes(path: str, data: bytes) -> None:
    with open(path, "wb") as f:
        f.write(data)


def read_bytes(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def flip(data: bytes, pos: int) -> bytes:
    return data[:pos] + bytes([data[pos] ^ 0xFF]) + data[pos + 1 :]


def read_everything(uri: str) -> None:
    ds = lance_sql.dataset(uri)
    table = ds.to_table(with_row_address=True)
    table.validate()  # structurally sound arrays (values may differ: 2.0 has no checksums)
    assert table.num_rows == ds.count_rows()
    assert ds.count_rows("id % 2 = 0") == int(np.sum(table["id"].to_numpy() % 2 == 0))


def fuzz(uri: str, path: str, positions, names: tuple[str, ...]) -> dict[str, int]:
    """Flip each position of ``path`` in turn: every read either succeeds consistently or
    raises a LanceError naming one of ``names``; nothing is ever written."""
    original = read_bytes(path)
    before = snapshot(uri)
    outcomes: dict[str, int] = {}
    try:
        for pos in positions:
            write_bytes(path, flip(original, pos))
            forget_files()
            try:
                read_everything(uri)
                outcome = "ok"
            except LanceError as exc:
                assert any(n in str(exc) for n in names), f"flip at {pos}: {exc}"
                outcome = type(exc).__name__
            outcomes[outcome] = outcomes.get(outcome, 0) + 1
    finally:
        write_bytes(path, original)
    assert snapshot(uri) == before
    return outcomes


# --------------------------------------------------------------------------------------------
# manifests
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("keep", [0, 1, 15, 19, "half", -1, -4, -16])
def test_truncated_latest_manifest(table: Table, keep: int | str) -> None:
    path = table.manifest_path(3)
    original = read_bytes(path)
    cut = len(original) // 2 if keep == "half" else keep % len(original)
    write_bytes(path, original[:cut])
    opened_before = lance_sql.dataset(table.uri, version=2)
    fails_cleanly(table.uri, FormatError, lambda: lance_sql.dataset(table.uri), path)
    fails_cleanly(table.uri, FormatError, lambda: lance_sql.dataset(table.uri, version=3), path)
    fails_cleanly(table.uri, FormatError,
                  lambda: lance_sql.write_dataset(rows(9000, 5), table.uri, mode="append"), path)
    fails_cleanly(table.uri, FormatError, lambda: opened_before.delete("id = 5300"), path)
    assert lance_sql.dataset(table.uri, version=2).count_rows() == ROWS - 5200
    write_bytes(path, original)
    table.assert_intact()


@pytest.mark.parametrize("keep", [0, 10, "half", -1])
def test_truncated_old_manifest(table: Table, keep: int | str) -> None:
    path = table.manifest_path(1)
    original = read_bytes(path)
    write_bytes(path, original[: len(original) // 2 if keep == "half" else keep % len(original)])
    fails_cleanly(table.uri, FormatError, lambda: lance_sql.dataset(table.uri, version=1), path)
    fails_cleanly(table.uri, FormatError, lambda: lance_sql.dataset(table.uri).versions(), path)
    table.assert_intact()  # the latest version does not need version 1


def _footer_positions(data: bytes) -> dict[str, int]:
    manifest_pos = FOOTER.unpack_from(data, len(data) - FOOTER.size)[0]
    return {
        "magic": len(data) - 1,
        "major version": len(data) - 8,
        "minor version": len(data) - 6,
        "manifest offset": len(data) - FOOTER.size + 5,
        "manifest length": manifest_pos + 3,
        "transaction length": 3,
    }


@pytest.mark.parametrize("where", ["magic", "major version", "minor version", "manifest offset",
                                   "manifest length"])
def test_bit_flipped_manifest_framing(table: Table, where: str) -> None:
    path = table.manifest_path(3)
    original = read_bytes(path)
    write_bytes(path, flip(original, _footer_positions(original)[where]))
    for action in (lambda: lance_sql.dataset(table.uri),
                   lambda: lance_sql.dataset(table.uri, version=2).versions(),
                   lambda: lance_sql.write_dataset(rows(9000, 5), table.uri, mode="append"),
                   lambda: lance_sql.dataset(table.uri, version=2).delete("id = 5900")):
        fails_cleanly(table.uri, FormatError, action, path)
    write_bytes(path, original)
    table.assert_intact()


def test_bit_flipped_inline_transaction_length(table: Table) -> None:
    """Only the transaction block is damaged: the version reads, its history entry does not."""
    path = table.manifest_path(3)
    original = read_bytes(path)
    write_bytes(path, flip(original, _footer_positions(original)["transaction length"]))
    assert lance_sql.dataset(table.uri).to_table() == table.expected
    fails_cleanly(table.uri, FormatError, lambda: lance_sql.dataset(table.uri).versions(), path)
    write_bytes(path, original)
    table.assert_intact()


@pytest.mark.slow
def test_bit_flipped_manifest_fuzz(table: Table) -> None:
    """Every byte of the latest manifest flipped in turn: a typed error or a consistent read."""
    path = table.manifest_path(3)
    outcomes = fuzz(table.uri, path, range(os.path.getsize(path)), (table.uri,))
    assert outcomes.get("FormatError", 0) > outcomes.get("ok", 0) > 0
    table.assert_intact()


# --------------------------------------------------------------------------------------------
# data files
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("keep", [0, 3, "half", -1, -8, -40])
@pytest.mark.parametrize("fragment", [0, 1])
def test_truncated_data_file(table: Table, keep: int | str, fragment: int) -> None:
    path = table.data_path(fragment)
    original = read_bytes(path)
    write_bytes(path, original[: len(original) // 2 if keep == "half" else keep % len(original)])
    for action in (lambda: lance_sql.dataset(table.uri).to_table(),
                   lambda: lance_sql.dataset(table.uri).count_rows("id > 0"),
                   lambda: lance_sql.dataset(table.uri).take([0, 700]),
                   lambda: lance_sql.dataset(table.uri).delete("id = 5900")):
        fails_cleanly(table.uri, FormatError, action, path)
    write_bytes(path, original)
    table.assert_intact()


@pytest.mark.parametrize("where", [-1, -2, -3, -4, -5, -6, -7, -8])
def test_bit_flipped_data_file_footer(table: Table, where: int) -> None:
    """The footer (magic, format version, metadata offsets) is always checked."""
    path = table.data_path(1)
    original = read_bytes(path)
    write_bytes(path, flip(original, len(original) + where))
    fails_cleanly(table.uri, FormatError, lambda: lance_sql.dataset(table.uri).to_table(), path)
    write_bytes(path, original)
    table.assert_intact()


@pytest.mark.slow
def test_bit_flipped_data_file_fuzz(table: Table) -> None:
    """Metadata bytes (the tail) all flipped, plus a sample of data bytes: 2.0 files carry no
    checksums, so a flipped value may read back changed, but never crash or mislead."""
    path = table.data_path(1)
    size = os.path.getsize(path)
    rng = np.random.default_rng(7)
    positions = sorted(set(range(max(0, size - 400), size)) | set(rng.integers(0, size, 100)))
    outcomes = fuzz(table.uri, path, positions, (path,))
    assert outcomes.get("FormatError", 0) + outcomes.get("UnsupportedFeatureError", 0) > 100
    table.assert_intact()


@pytest.mark.slow
def test_bit_flipped_data_file_of_every_type(tmp_path: Path, tables) -> None:
    """The same for a file holding every type (its column metadata is the tail)."""
    uri = str(tmp_path / "all.lance")
    data = tables.make(60, seed=9)
    ds = lance_sql.write_dataset(data, uri)
    path = os.path.join(uri, ds.manifest.fragments[0].files[0].key)
    size = os.path.getsize(path)
    rng = np.random.default_rng(9)
    positions = sorted(set(range(size - 700, size)) | set(rng.integers(0, size, 150)))
    outcomes = fuzz(uri, path, positions, (path,))
    assert outcomes.get("FormatError", 0) > 100 and outcomes.get("ok", 0) > 0
    tables.assert_equal(lance_sql.dataset(uri).to_table(), data, "restored")


def test_missing_data_file(table: Table, tmp_path: Path) -> None:
    path = table.data_path(1)
    shutil.move(path, tmp_path / "moved.lance")
    for action in (lambda: lance_sql.dataset(table.uri).to_table(),
                   lambda: lance_sql.dataset(table.uri).count_rows("id > 0"),
                   lambda: lance_sql.dataset(table.uri).take_rows([1 << 32]),
                   lambda: lance_sql.dataset(table.uri).delete("id > 5000")):
        fails_cleanly(table.uri, NotFoundError, action, path)
    # fragment 0 alone still reads
    assert lance_sql.dataset(table.uri).take_rows([5300]).column("id").to_pylist() == [5300]
    shutil.move(tmp_path / "moved.lance", path)
    table.assert_intact()


def test_data_file_with_wrong_row_count(table: Table) -> None:
    """A data file swapped for another fragment's: the row counts disagree."""
    path0, path1 = table.data_path(0), table.data_path(1)
    original = read_bytes(path1)
    shutil.copy(path0, path1)
    fails_cleanly(table.uri, FormatError, lambda: lance_sql.dataset(table.uri).to_table(), path1)
    write_bytes(path1, original)
    table.assert_intact()


# --------------------------------------------------------------------------------------------
# deletion files
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["arrow", "bitmap"])
@pytest.mark.parametrize("keep", [0, 4, "half", -1])
def test_truncated_deletion_file(table: Table, kind: str, keep: int | str) -> None:
    path = table.deletion_path(kind)
    original = read_bytes(path)
    write_bytes(path, original[: len(original) // 2 if keep == "half" else keep % len(original)])
    for action in (lambda: lance_sql.dataset(table.uri).to_table(),
                   lambda: lance_sql.dataset(table.uri).count_rows("id > 0"),
                   lambda: lance_sql.dataset(table.uri).take([0, 700]),
                   lambda: lance_sql.dataset(table.uri).delete("id > 5900")):
        fails_cleanly(table.uri, FormatError, action, path)
    write_bytes(path, original)
    table.assert_intact()


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["arrow", "bitmap"])
def test_bit_flipped_deletion_file(table: Table, kind: str) -> None:
    path = table.deletion_path(kind)
    original = read_bytes(path)
    # the Arrow file's trailing magic (pyarrow ignores the leading one) / the roaring cookie
    write_bytes(path, flip(original, len(original) - 1 if kind == "arrow" else 0))
    fails_cleanly(table.uri, FormatError, lambda: lance_sql.dataset(table.uri).to_table(), path)
    write_bytes(path, original)
    outcomes = fuzz(table.uri, path, range(len(original)), (path,))
    assert outcomes.get("FormatError", 0) > 0
    table.assert_intact()


def test_deletion_file_disagreeing_with_the_manifest(table: Table) -> None:
    """A deletion file replaced by another one: its count no longer matches the manifest."""
    bitmap, arrow = table.deletion_path("bitmap"), table.deletion_path("arrow")
    # fragment 0's vector says "5200 rows", fragment 1's manifest entry says 1
    shutil.copy(arrow, arrow + ".keep")
    bitmap_copy = read_bytes(bitmap)
    from lance_sql.format.deletion import encode_deletions

    kind, data = encode_deletions(np.array([1, 2], dtype=np.uint32))
    assert kind == "arrow"
    write_bytes(arrow, data)
    fails_cleanly(table.uri, FormatError, lambda: lance_sql.dataset(table.uri).to_table(), arrow)
    shutil.move(arrow + ".keep", arrow)
    assert read_bytes(bitmap) == bitmap_copy
    table.assert_intact()


def test_missing_deletion_file(table: Table, tmp_path: Path) -> None:
    path = table.deletion_path("arrow")
    shutil.move(path, tmp_path / "moved")
    fails_cleanly(table.uri, NotFoundError, lambda: lance_sql.dataset(table.uri).to_table(), path)
    fails_cleanly(table.uri, NotFoundError,
                  lambda: lance_sql.dataset(table.uri).delete("id = 5900"), path)
    shutil.move(tmp_path / "moved", path)
    table.assert_intact()


# --------------------------------------------------------------------------------------------
# hostile manifests: path escapes and feature flags
# --------------------------------------------------------------------------------------------


def commit_crafted(table: Table, change: Callable[[Manifest], Manifest]) -> str:
    """Write version 4 as ``change`` of version 3 (its transaction copied); return its path."""
    store = table.store
    ref = latest_version(store)
    data = store.read(ref.key)
    manifest = ManifestCodec.decode(data, ref.key)
    crafted = change(manifest).evolve(version=ref.version + 1)
    key = ref.naming.key(crafted.version)
    assert store.put_if_absent(key, ManifestCodec.encode(crafted,
                                                         ManifestCodec.decode_transaction(data,
                                                                                          key)))
    return os.path.join(table.uri, key)


def _with_data_path(manifest: Manifest, fragment: int, path: str) -> Manifest:
    frags = list(manifest.fragments)
    old = frags[fragment].files[0]
    new_file = DataFile(path, old.fields, old.column_indices, old.file_major_version,
                        old.file_minor_version, old.file_size_bytes)
    frags[fragment] = frags[fragment].__class__(
        id=frags[fragment].id, files=(new_file,), physical_rows=frags[fragment].physical_rows,
        deletion_file=frags[fragment].deletion_file,
    )
    return manifest.evolve(fragments=tuple(frags))


@pytest.mark.parametrize("escape", ["../../outside.lance", "../../t.lance/../outside.lance",
                                    "sub/../../../outside.lance", "./../../outside.lance"])
def test_data_path_escaping_the_table(table: Table, escape: str, tmp_path: Path) -> None:
    # A perfectly readable file waits outside the table: only the path check stops the read.
    target = os.path.normpath(os.path.join(table.uri, "data", escape))
    assert target == str(tmp_path / "outside.lance")
    shutil.copy(table.data_path(1), target)
    manifest_path = commit_crafted(table, lambda m: _with_data_path(m, 1, escape))
    for action in (lambda: lance_sql.dataset(table.uri).to_table(),
                   lambda: lance_sql.dataset(table.uri).count_rows("id > 5"),
                   lambda: lance_sql.dataset(table.uri).take_rows([1 << 32]),
                   lambda: lance_sql.dataset(table.uri).delete("id = 5900")):
        fails_cleanly(table.uri, PathEscapeError, action, escape)
    assert lance_sql.dataset(table.uri, version=3).to_table() == table.expected
    os.remove(manifest_path)
    table.assert_intact()


def test_unknown_reader_feature_flag(table: Table) -> None:
    path = commit_crafted(table, lambda m: m.evolve(
        reader_feature_flags=m.reader_feature_flags | 1 << 20,
        writer_feature_flags=m.writer_feature_flags | 1 << 20,
    ))
    err = fails_cleanly(table.uri, UnsupportedFeatureError, lambda: lance_sql.dataset(table.uri),
                        path)
    assert "1048576" in str(err)
    fails_cleanly(table.uri, UnsupportedFeatureError,
                  lambda: lance_sql.write_dataset(rows(9000, 5), table.uri, mode="append"), path)
    fails_cleanly(table.uri, UnsupportedFeatureError,
                  lambda: lance_sql.write_dataset(rows(9000, 5), table.uri, mode="overwrite"),
                  path)
    fails_cleanly(table.uri, UnsupportedFeatureError,
                  lambda: lance_sql.dataset(table.uri, version=3).delete("id = 5900"), path)
    assert lance_sql.dataset(table.uri, version=3).to_table() == table.expected
    os.remove(path)
    table.assert_intact()


def test_unknown_writer_feature_flag(table: Table) -> None:
    path = commit_crafted(table, lambda m: m.evolve(
        writer_feature_flags=m.writer_feature_flags | 1 << 20,
    ))
    ds = lance_sql.dataset(table.uri)  # reading is fine
    assert ds.version == 4 and ds.to_table() == table.expected
    for action in (
        lambda: lance_sql.write_dataset(rows(9000, 5), table.uri, mode="append"),
        lambda: lance_sql.write_dataset(rows(9000, 5), table.uri, mode="overwrite"),
        lambda: lance_sql.dataset(table.uri).delete("id = 5900"),
        lambda: lance_sql.dataset(table.uri, version=3).delete("id = 5900"),
    ):
        err = fails_cleanly(table.uri, UnsupportedFeatureError, action, path)
        assert "write" in str(err)
    assert [v["version"] for v in lance_sql.dataset(table.uri).versions()] == [1, 2, 3, 4]
    os.remove(path)
    table.assert_intact()


# --------------------------------------------------------------------------------------------
# bad writes
# --------------------------------------------------------------------------------------------


BAD_APPENDS = {
    # (data without a nullable column appends NULLs for it, as pylance appends it:
    # tests/table/test_pylance_edge_types.py)
    "extra column": (lambda t: t.append_column("extra", pa.array([1.0] * len(t))),
                     ["'extra'", "not in the table"]),
    "wrong type": (lambda t: t.set_column(1, "s", pa.array(range(len(t)), pa.int64())),
                   ["'s'", "int64"]),
    "wrong id type": (lambda t: t.set_column(0, pa.field("id", pa.int32(), nullable=False),
                                             t["id"].cast(pa.int32())), ["'id'", "int32"]),
    "wrong list item type": (
        lambda t: t.set_column(2, "l", t["l"].cast(pa.list_(pa.int64()))), ["'l'"]),
    "wrong struct child": (
        lambda t: t.set_column(3, "st", pa.StructArray.from_arrays(
            [t["st"].combine_chunks().field(0).cast(pa.float64()),
             t["st"].combine_chunks().field(1)], names=["a", "b"])), ["'st'"]),
    "renamed struct child": (
        lambda t: t.set_column(3, "st", pa.StructArray.from_arrays(
            t["st"].combine_chunks().flatten(), names=["a", "c"])), ["'st'"]),
    "duplicate column": (lambda t: t.append_column("s", t["s"]), ["'s'"]),
}


@pytest.mark.parametrize("case", sorted(BAD_APPENDS))
def test_append_with_the_wrong_schema(table: Table, case: str) -> None:
    make, words = BAD_APPENDS[case]
    data = make(rows(9000, 50))
    fails_cleanly(table.uri, SchemaError,
                  lambda: lance_sql.write_dataset(data, table.uri, mode="append",
                                                  max_rows_per_file=10), table.uri, *words)
    table.assert_intact()


def test_append_with_reordered_columns_is_fine(table: Table) -> None:
    """The positive control for the schema checks: same columns, another order."""
    data = rows(9000, 20)
    data = data.select(list(reversed(data.column_names)))
    ds = lance_sql.write_dataset(data, table.uri, mode="append")
    assert ds.version == 4
    assert ds.to_table().slice(table.expected.num_rows) == rows(9000, 20)
    assert lance.dataset(table.uri).to_table().slice(table.expected.num_rows) == rows(9000, 20)


def _with_null_ids(t: pa.Table) -> pa.Table:
    ids = pa.array(t["id"].to_numpy(), mask=np.arange(len(t)) == len(t) - 1)
    return pa.Table.from_arrays([ids, *t.columns[1:]], schema=SCHEMA)


def test_nulls_in_a_non_nullable_column(table: Table) -> None:
    bad = _with_null_ids(rows(9000, 30))
    fails_cleanly(table.uri, SchemaError,
                  lambda: lance_sql.write_dataset(bad, table.uri, mode="append"), "'id'", "null")


def test_nulls_in_a_later_batch_leave_nothing(table: Table) -> None:
    """Earlier batches already went to finished files: those are removed again."""
    good = rows(9000, 100).to_batches()
    bad = _with_null_ids(rows(9100, 10)).to_batches()
    reader = pa.RecordBatchReader.from_batches(SCHEMA, iter(good + bad))
    fails_cleanly(table.uri, SchemaError,
                  lambda: lance_sql.write_dataset(reader, table.uri, mode="append",
                                                  max_rows_per_file=30), "'id'")
    table.assert_intact()


def test_nulls_in_a_non_nullable_struct_child(table: Table, tmp_path: Path) -> None:
    child = pa.field("a", pa.int32(), nullable=False)
    schema = pa.schema([pa.field("st", pa.struct([child]))])
    bad = pa.Table.from_arrays(
        [pa.StructArray.from_arrays([pa.array([1, None], pa.int32())], fields=[child])],
        schema=schema,
    )
    uri = str(tmp_path / "nested.lance")
    os.makedirs(uri)
    fails_cleanly(uri, SchemaError, lambda: lance_sql.write_dataset(bad, uri), "st.a")
    with pytest.raises(NotFoundError):
        lance_sql.dataset(uri)


def _null_struct(t: pa.Table) -> pa.Table:
    st = t["st"].combine_chunks()
    mask = pa.array(np.arange(len(t)) == 3)
    nulled = pa.StructArray.from_arrays(st.flatten(), fields=list(st.type), mask=mask)
    return t.set_column(3, SCHEMA.field("st"), nulled)


def _null_struct_in_list(t: pa.Table) -> pa.Table:
    items = pa.array([{"x": 1}, None, {"x": 3}], SCHEMA.field("ls").type.value_type)
    ls = pa.ListArray.from_arrays(pa.array([0, 1, 3] + [3] * (len(t) - 2), pa.int32()), items)
    return t.set_column(4, SCHEMA.field("ls"), ls)


@pytest.mark.parametrize(("make", "column"), [(_null_struct, "st"),
                                              (_null_struct_in_list, "ls")])
def test_null_struct_values_in_a_2_0_table(tmp_path: Path, make, column) -> None:
    bad = make(rows(9000, 40))
    assert bad.schema == SCHEMA
    uri20 = str(tmp_path / "t20.lance")
    lance_sql.write_dataset(rows(0, 40), uri20, data_storage_version="2.0")
    err = fails_cleanly(uri20, (SchemaError, UnsupportedFeatureError),
                        lambda: lance_sql.write_dataset(bad, uri20, mode="append",
                                                        max_rows_per_file=10), repr(column)[:-1])
    assert "null struct" in str(err)
    assert lance_sql.dataset(uri20).to_table() == rows(0, 40)
    uri = str(tmp_path / "new.lance")
    os.makedirs(uri)
    fails_cleanly(uri, (SchemaError, UnsupportedFeatureError),
                  lambda: lance_sql.write_dataset(bad, uri, data_storage_version="2.0"),
                  repr(column)[:-1])


@pytest.mark.parametrize("make", [_null_struct, _null_struct_in_list])
def test_null_struct_values_round_trip_in_2_2(tmp_path: Path, make) -> None:
    data = make(rows(9000, 40))
    uri = str(tmp_path / "t22.lance")
    ds = lance_sql.write_dataset(data, uri)
    assert ds.data_storage_version == "2.2"
    assert ds.to_table() == data
    assert lance.dataset(uri).to_table() == data


def test_create_on_an_existing_table(table: Table) -> None:
    for naming_v2 in (True, False):
        fails_cleanly(table.uri, InvalidInputError,
                      lambda v=naming_v2: lance_sql.write_dataset(
                          rows(9000, 5), table.uri, enable_v2_manifest_paths=v),
                      table.uri, "exists")
    table.assert_intact()


def test_write_modes_and_data_format_errors(table: Table) -> None:
    fails_cleanly(table.uri, InvalidInputError,
                  lambda: lance_sql.write_dataset(rows(9000, 5), table.uri, mode="upsert"),
                  "upsert")
    fails_cleanly(table.uri, UnsupportedFeatureError,
                  lambda: lance_sql.write_dataset(rows(9000, 5), table.uri, mode="overwrite",
                                                  data_storage_version="2.3"), "2.3")
    table.assert_intact()


# --------------------------------------------------------------------------------------------
# racing writers
# --------------------------------------------------------------------------------------------


def _race(workers: list[Callable[[], object]]) -> list[object]:
    """Run ``workers`` in threads released together; results or raised exceptions."""
    barrier = threading.Barrier(len(workers))
    results: list[object] = [None] * len(workers)

    def run(i: int) -> None:
        barrier.wait()
        try:
            results[i] = workers[i]()
        except BaseException as exc:  # noqa: BLE001 - collected and checked by the caller
            results[i] = exc

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(workers))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return results


def _manifest_files(uri: str) -> list[str]:
    return sorted(n for n in os.listdir(os.path.join(uri, "_versions")) if n.endswith(".manifest"))


@pytest.mark.parametrize("round_", range(4))
def test_racing_appends_all_land_once(table: Table, round_: int) -> None:
    store = table.store
    base = table.manifest()
    naming = latest_version(store).naming
    batches = [rows(10_000 + 100 * i, 20 + i) for i in range(4)]
    txns = []
    for data in batches:
        frags = write_fragments(store, base.schema, pa.RecordBatchReader.from_batches(
            data.schema, data.to_batches()), max_rows_per_file=15)
        txns.append(Transaction(read_version=base.version, operation=Append(tuple(frags))))
    results = _race([lambda t=t: commit_transaction(store, base, naming, t) for t in txns])
    assert all(isinstance(r, Manifest) for r in results), results
    assert sorted(r.version for r in results) == [4, 5, 6, 7]  # one version each
    assert _manifest_files(table.uri) == sorted(naming.file_name(v) for v in range(1, 8))
    final = lance_sql.dataset(table.uri)
    got = final.to_table()
    assert got.num_rows == table.expected.num_rows + sum(len(b) for b in batches)
    ids = got["id"].to_numpy()
    assert len(np.unique(ids)) == len(ids)  # every append landed exactly once
    for data in batches:
        assert np.isin(data["id"].to_numpy(), ids).all()
    assert lance.dataset(table.uri).to_table().sort_by("id") == got.sort_by("id")
    # every fragment id is unique and every transaction file belongs to a version
    assert len({f.id for f in final.manifest.fragments}) == len(final.manifest.fragments)
    assert len(os.listdir(os.path.join(table.uri, "_transactions"))) == 7


def test_racing_appends_without_retries_have_one_winner(table: Table) -> None:
    store = table.store
    base = table.manifest()
    naming = latest_version(store).naming
    txns = [Transaction(read_version=base.version, operation=Append(tuple(write_fragments(
        store, base.schema, pa.RecordBatchReader.from_batches(SCHEMA, rows(20_000 + i, 1)
                                                              .to_batches())))))
            for i in range(3)]
    config = CommitConfig(max_retries=0)
    results = _race([lambda t=t: commit_transaction(store, base, naming, t, config=config)
                     for t in txns])
    winners = [r for r in results if isinstance(r, Manifest)]
    losers = [r for r in results if not isinstance(r, Manifest)]
    assert len(winners) == 1 and winners[0].version == 4
    assert len(losers) == 2 and all(isinstance(r, RetryableConflict) for r in losers), losers
    assert _manifest_files(table.uri) == sorted(naming.file_name(v) for v in range(1, 5))
    assert lance_sql.dataset(table.uri).count_rows() == table.expected.num_rows + 1
    # the losers' transaction files are gone; only committed ones remain
    assert len(os.listdir(os.path.join(table.uri, "_transactions"))) == 4


def test_racing_deletes_of_one_fragment_rebase(table: Table,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """Two deletes built on the same version rewrite fragment 1's deletion file: the loser
    rebases (merges the winner's deletion vector with its own rows, writes the merged file)
    and both land; the loser's first deletion file is removed."""
    for attempt in range(3):
        ds_a, ds_b = lance_sql.dataset(table.uri), lance_sql.dataset(table.uri)
        start = ds_a.version
        ctx = ds_a.write_context()
        # both read the same version, however the threads happen to be scheduled
        monkeypatch.setattr(lance_sql.LanceDataset, "write_context",
                            lambda self, ctx=ctx: ctx)
        results = _race([lambda a=ds_a, n=attempt: a.delete(f"id = {5700 + n}"),
                         lambda b=ds_b, n=attempt: b.delete(f"id = {5800 + n}")])
        monkeypatch.undo()
        assert results == [{"num_deleted_rows": 1}] * 2, results
        assert lance_sql.dataset(table.uri).version == start + 2
        assert sorted([ds_a.version, ds_b.version]) == [start + 1, start + 2]
        assert _manifest_files(table.uri) == sorted(
            latest_version(table.store).naming.file_name(v) for v in range(1, start + 3))
    final = lance_sql.dataset(table.uri)
    assert final.count_rows() == table.expected.num_rows - 6
    assert lance.dataset(table.uri).count_rows() == final.count_rows()
    # every deletion file on disk belongs to some version: superseded ones were removed
    history = set()
    for v in range(1, final.version + 1):
        for f in lance_sql.dataset(table.uri, version=v).manifest.fragments:
            if f.deletion_file:
                history.add(f.deletion_file.key(f.id).split("/")[1])
    assert set(os.listdir(os.path.join(table.uri, "_deletions"))) == history
    assert len(os.listdir(os.path.join(table.uri, "_transactions"))) == final.version


def test_racing_deletes_of_one_row_conflict(table: Table,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """Two deletes of the same row: one wins, the other gets a retryable conflict and
    removes the deletion file it wrote."""
    ds_a, ds_b = lance_sql.dataset(table.uri), lance_sql.dataset(table.uri)
    start = ds_a.version
    ctx = ds_a.write_context()
    monkeypatch.setattr(lance_sql.LanceDataset, "write_context", lambda self: ctx)
    results = _race([lambda: ds_a.delete("id = 5700"), lambda: ds_b.delete("id = 5700")])
    monkeypatch.undo()
    errors = [r for r in results if r != {"num_deleted_rows": 1}]
    assert len(errors) == 1 and isinstance(errors[0], RetryableConflict), results
    assert lance_sql.dataset(table.uri).version == start + 1
    final = lance_sql.dataset(table.uri)
    keys = {f.deletion_file.key(f.id).split("/")[1]
            for v in range(1, final.version + 1)
            for f in lance_sql.dataset(table.uri, version=v).manifest.fragments if f.deletion_file}
    assert set(os.listdir(os.path.join(table.uri, "_deletions"))) == keys
    assert len(os.listdir(os.path.join(table.uri, "_transactions"))) == final.version


def test_racing_overwrite_and_append(table: Table) -> None:
    store = table.store
    base = table.manifest()
    naming = latest_version(store).naming
    new_rows = rows(30_000, 10)
    frags = write_fragments(store, base.schema, pa.RecordBatchReader.from_batches(
        SCHEMA, new_rows.to_batches()))
    append = Transaction(read_version=base.version, operation=Append(tuple(frags)))
    over_frags = write_fragments(store, base.schema, pa.RecordBatchReader.from_batches(
        SCHEMA, rows(40_000, 5).to_batches()))
    overwrite = Transaction(read_version=base.version,
                            operation=Overwrite(tuple(over_frags), base.schema))
    results = _race([lambda: commit_transaction(store, base, naming, append),
                     lambda: commit_transaction(store, base, naming, overwrite)])
    versions = [r.version for r in results if isinstance(r, Manifest)]
    errors = [r for r in results if not isinstance(r, Manifest)]
    assert len(set(versions)) == len(versions)
    if len(versions) == 2:  # the append went first; the overwrite replaced it
        assert lance_sql.dataset(table.uri).to_table() == rows(40_000, 5)
        assert lance_sql.dataset(table.uri, version=4).count_rows() == len(table.expected) + 10
    else:  # the overwrite went first: the append can never apply on top of it
        assert versions == [4] and len(errors) == 1
        assert isinstance(errors[0], IncompatibleConflict), errors
        assert lance_sql.dataset(table.uri).to_table() == rows(40_000, 5)
    assert _manifest_files(table.uri) == sorted(naming.file_name(v)
                                                for v in range(1, 4 + len(versions)))


def test_racing_creates_have_one_winner(tmp_path: Path) -> None:
    for attempt in range(4):
        uri = str(tmp_path / f"race{attempt}.lance")
        results = _race([lambda i=i, u=uri: lance_sql.write_dataset(rows(i * 100, 7), u)
                         for i in range(3)])
        winners = [r for r in results if isinstance(r, lance_sql.LanceDataset)]
        losers = [r for r in results if not isinstance(r, lance_sql.LanceDataset)]
        assert len(winners) == 1, results
        assert all(isinstance(r, (CommitConflict, InvalidInputError)) for r in losers), losers
        assert _manifest_files(uri) == [winners[0]._ref.key.split("/")[1]]
        (frag,) = lance_sql.dataset(uri).manifest.fragments
        # the losers removed their data files (and transaction files)
        assert os.listdir(os.path.join(uri, "data")) == [frag.files[0].path]
        assert len(os.listdir(os.path.join(uri, "_transactions"))) == 1
        assert lance.dataset(uri).to_table() == winners[0].to_table()


def test_manifest_length_field_pointing_past_the_end(table: Table) -> None:
    """A manifest whose footer offset points at a length running past the end."""
    path = table.manifest_path(3)
    original = read_bytes(path)
    pos = FOOTER.unpack_from(original, len(original) - FOOTER.size)[0]
    corrupted = original[:pos] + struct.pack("<I", 0xFFFFFF00) + original[pos + 4 :]
    write_bytes(path, corrupted)
    fails_cleanly(table.uri, FormatError, lambda: lance_sql.dataset(table.uri), path)
    write_bytes(path, original)
    table.assert_intact()


def test_append_then_read_back_after_all_failures(table: Table) -> None:
    """After a failed append of every kind, a good append still lands as version 4."""
    for make, _words in BAD_APPENDS.values():
        with pytest.raises(SchemaError):
            lance_sql.write_dataset(make(rows(9000, 5)), table.uri, mode="append")
    with pytest.raises(SchemaError):
        lance_sql.write_dataset(_with_null_ids(rows(9000, 5)), table.uri, mode="append")
    ds = lance_sql.write_dataset(rows(9000, 5), table.uri, mode="append")
    assert ds.version == 4
    assert lance.dataset(table.uri).count_rows() == table.expected.num_rows + 5
    assert sorted(os.listdir(os.path.join(table.uri, "data"))) == sorted(
        f.files[0].path for f in ds.manifest.fragments
    )


def test_delete_with_a_bad_predicate_writes_nothing(table: Table) -> None:
    ds = lance_sql.dataset(table.uri)
    fails_cleanly(table.uri, (InvalidInputError, NotFoundError), lambda: ds.delete("nope > 1"),
                  "nope")
    fails_cleanly(table.uri, InvalidInputError, lambda: ds.delete("id >"), "id >")
    fails_cleanly(table.uri, InvalidInputError, lambda: ds.delete("  "))
    assert ds.version == 3
    table.assert_intact()


def test_delete_failing_on_a_later_fragment_writes_nothing(table: Table, tmp_path: Path) -> None:
    """Fragment 0 matches first, then fragment 1's data file is missing: no deletion file
    for fragment 0 may be left behind."""
    path = table.data_path(1)
    shutil.move(path, tmp_path / "moved.lance")
    fails_cleanly(table.uri, NotFoundError,
                  lambda: lance_sql.dataset(table.uri).delete("id % 2 = 0"), path)
    shutil.move(tmp_path / "moved.lance", path)
    table.assert_intact()


def test_overwrite_with_conflicting_delete_leaves_no_files(table: Table) -> None:
    """A delete whose commit fails cleans up its deletion file and transaction file."""
    ds = lance_sql.dataset(table.uri)
    lance_sql.write_dataset(rows(50_000, 3), table.uri, mode="overwrite")  # version 4
    fails_cleanly(table.uri, CommitConflict, lambda: _stale_delete(ds), table.uri)
    assert lance_sql.dataset(table.uri).to_table() == rows(50_000, 3)


def _stale_delete(ds: lance_sql.LanceDataset) -> None:
    """Commit a delete built against ``ds``'s version even though the table moved on."""
    base = ds.manifest
    frag = base.fragments[1]
    txn = Transaction(read_version=base.version,
                      operation=Delete((frag,), (), "id = 5900"))
    commit_transaction(ds.store, base, latest_version(ds.store).naming, txn)
