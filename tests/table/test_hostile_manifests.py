"""Manifests edited at the protobuf level: what a damaged or hostile manifest says is
checked before it sizes memory or changes answers (each of these allocated tens of GB,
returned NULL-filtered counts, raised a raw OverflowError, returned no rows, or read a
MemWAL table as a plain one)."""

from __future__ import annotations

import os
import struct
import warnings
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

import lance_sql
from lance_sql.errors import FormatError, IndexFallbackWarning
from lance_sql.format.manifest import FOOTER
from lance_sql.format.pb import table_pb2
from lance_sql.memwal import RegionSpec

SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("s", pa.string())])


def _table(tmp_path: Path, **options: object) -> str:
    uri = str(tmp_path / "t.lance")
    ids = np.arange(200, dtype=np.int64)
    lance_sql.write_dataset(pa.table({"id": ids, "s": [f"r{i}" for i in ids]}, schema=SCHEMA),
                            uri, max_rows_per_file=100, **options)
    return uri


def _latest_manifest(uri: str) -> str:
    folder = os.path.join(uri, "_versions")
    names = sorted(n for n in os.listdir(folder) if n.endswith(".manifest"))
    return os.path.join(folder, names[0])  # (the newest sorts first)


def _edit(uri: str, change: Callable[[table_pb2.Manifest], None] = lambda pb: None,
          indices: Callable[[table_pb2.IndexSection], None] | None = None) -> None:
    """Rewrite the latest manifest's protobuf in place, its framing kept; ``indices``
    edits its index section, written again after the old blocks."""
    path = _latest_manifest(uri)
    data = Path(path).read_bytes()
    footer = FOOTER.unpack_from(data, len(data) - FOOTER.size)

    def block(at: int) -> bytes:
        (length,) = struct.unpack_from("<I", data, at)
        return data[at + 4: at + 4 + length]

    pb = table_pb2.Manifest()
    pb.ParseFromString(block(footer[0]))
    head = data[:footer[0]]
    if indices is not None:
        section = table_pb2.IndexSection()
        section.ParseFromString(block(pb.index_section))
        indices(section)
        raw = section.SerializeToString()
        pb.index_section = len(head)
        head += struct.pack("<I", len(raw)) + raw
    change(pb)
    body = pb.SerializeToString()
    Path(path).write_bytes(head + struct.pack("<I", len(body)) + body
                           + FOOTER.pack(len(head), *footer[1:]))
    lance_sql.default_runtime().clear()


def test_a_huge_fixed_size_column_no_file_holds_is_refused(tmp_path: Path) -> None:
    uri = _table(tmp_path, enable_stable_row_ids=True)
    _edit(uri, lambda pb: pb.fields.add(name="zz", id=100, parent_id=-1, nullable=True,
                                        logical_type="fixed_size_list:float:100000000"))
    ds = lance_sql.dataset(uri)
    for read in (ds.to_table, lambda: ds.take([0, 1]), lambda: ds.table_changes(1, 1)):
        with pytest.raises(FormatError, match="'zz'.*would take"):
            read()
    assert ds.to_table(columns=["id"]).num_rows == 200  # the other columns still read


def test_a_column_that_takes_no_nulls_must_be_in_a_file(tmp_path: Path) -> None:
    uri = _table(tmp_path)

    def drop_id(pb: table_pb2.Manifest) -> None:
        fields = pb.fragments[0].files[0].fields
        fields[list(fields).index(0)] = -2  # (the id column's data "tombstoned")

    _edit(uri, drop_id)
    ds = lance_sql.dataset(uri)
    for read in (ds.to_table, lambda: ds.count_rows("id % 2 = 0"),
                 lambda: ds.to_table(filter="id >= 0")):
        with pytest.raises(FormatError, match="no data file holds column 'id'"):
            read()


def test_a_version_past_int64_is_refused_when_opened(tmp_path: Path) -> None:
    uri = _table(tmp_path)
    _edit(uri, lambda pb: setattr(pb, "version", 2**64 - 1))
    with pytest.raises(FormatError, match="past the largest version"):
        lance_sql.dataset(uri)


def test_an_index_of_a_negative_version_is_not_used(tmp_path: Path) -> None:
    uri = _table(tmp_path, enable_stable_row_ids=True)
    lance_sql.dataset(uri).create_scalar_index("id", "BTREE")

    _edit(uri, indices=lambda section: setattr(section.indices[0], "index_version", -1))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        got = lance_sql.dataset(uri).to_table(filter="id = 150").column("id").to_pylist()
    assert got == [150]
    assert any(isinstance(w.message, IndexFallbackWarning) and "version -1" in str(w.message)
               for w in caught)


def test_sql_refuses_a_memwal_table_whose_index_section_is_corrupt(tmp_path: Path) -> None:
    key = pa.field("id", pa.int64(), nullable=False,
                   metadata={"lance-schema:unenforced-primary-key": "true"})
    schema = pa.schema([key, pa.field("v", pa.float64())])
    uri = str(tmp_path / "t.lance")
    ds = lance_sql.write_dataset(pa.table({"id": list(range(10)),
                                           "v": [float(i) for i in range(10)]}, schema=schema),
                                 uri)
    mw = ds.initialize_mem_wal(region_spec=RegionSpec.bucket("id", 2), durable_write=True)
    with mw.writer() as writer:
        writer.put(pa.table({"id": [1, 11], "v": [10.0, 110.0]}, schema=schema))
        writer.flush_memtable()
    assert lance_sql.connect(tmp_path).sql("SELECT count(*) AS n FROM t").to_pylist() == [
        {"n": 11}]
    path = _latest_manifest(uri)
    data = bytearray(Path(path).read_bytes())
    at = data.find(b"__lance_mem_wal")
    assert at >= 0
    data[at + 9: at + 17] = bytes(8)
    Path(path).write_bytes(bytes(data))
    lance_sql.default_runtime().clear()
    with pytest.raises(FormatError, match="t.lance: version .*corrupt index section"):
        lance_sql.connect(tmp_path).sql("SELECT * FROM t").to_arrow_table()
    with pytest.raises(FormatError, match="t.lance: version .*corrupt index section"):
        lance_sql.dataset(uri).mem_wal.scanner().to_table()


@pytest.mark.parametrize("fragment_id", [2**32, 2**40, 2**64 - 1])
def test_a_fragment_id_past_32_bits_is_refused_when_opened(tmp_path: Path,
                                                           fragment_id: int) -> None:
    """A row address holds the fragment id in its high 32 bits; a larger id (one damaged
    varint byte of a uint64 field) failed later with raw OverflowErrors (row addresses,
    deletes) and protobuf ValueErrors (every commit)."""
    uri = _table(tmp_path)
    _edit(uri, lambda pb: setattr(pb.fragments[1], "id", fragment_id))
    with pytest.raises(FormatError, match="fragment id"):
        lance_sql.dataset(uri)
    with pytest.raises(FormatError, match="fragment id"):
        lance_sql.connect(str(tmp_path)).sql("SELECT max(_rowaddr) FROM t").to_arrow_table()


def test_a_table_whose_fragment_ids_are_used_up_refuses_new_fragments(tmp_path: Path) -> None:
    """``max_fragment_id`` at 2**32 - 1 (a legal value) leaves no id for a new fragment:
    commits that add one are a FormatError saying so, and nothing is written."""
    uri = _table(tmp_path)
    _edit(uri, lambda pb: setattr(pb, "max_fragment_id", 2**32 - 1))
    ds = lance_sql.dataset(uri)
    assert ds.count_rows() == 200
    files = sorted(p for p in Path(uri).rglob("*") if p.is_file())
    with pytest.raises(FormatError, match="used up"):
        lance_sql.write_dataset(pa.table({"id": [7], "s": ["x"]}, schema=SCHEMA), uri,
                                mode="append")
    with pytest.raises(FormatError, match="used up"):
        ds.update({"s": "'y'"}, where="id = 3")
    assert lance_sql.dataset(uri).version == ds.version
    ds.delete("id = 3")  # a commit that adds no fragment still works
    assert lance_sql.dataset(uri).count_rows() == 199
    left = [p for p in sorted(p for p in Path(uri).rglob("*") if p.is_file())
            if p not in files and "_deletions" not in p.parts
            and "_versions" not in p.parts and "_transactions" not in p.parts]
    assert left == []


def test_a_fragment_id_listed_twice_is_refused_when_opened(tmp_path: Path) -> None:
    """Reads answered with a NotFoundError about the other fragment's deletion file."""
    uri = _table(tmp_path)
    _edit(uri, lambda pb: setattr(pb.fragments[1], "id", pb.fragments[0].id))
    with pytest.raises(FormatError, match="twice"):
        lance_sql.dataset(uri)
