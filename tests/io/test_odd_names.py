"""Names no file can have: a NUL byte in a table path, a path segment longer than the
file system allows (from a damaged manifest, say). Typed errors, not ValueError/OSError."""

from __future__ import annotations

import struct
from pathlib import Path

import pyarrow as pa
import pytest

import lance_sql
from lance_sql.errors import InvalidInputError, NotFoundError
from lance_sql.format.pb import table_pb2
from lance_sql.io import open_store


def test_a_nul_byte_in_a_table_path_is_refused(tmp_path: Path) -> None:
    with pytest.raises(InvalidInputError, match="NUL byte"):
        open_store(f"{tmp_path}/a\x00b")
    with pytest.raises(InvalidInputError, match="NUL byte"):
        lance_sql.dataset(f"{tmp_path}/a\x00b")


def test_a_name_too_long_for_the_file_system_is_not_found(tmp_path: Path) -> None:
    store = open_store(str(tmp_path))
    long = "x" * 300
    assert not store.exists(long)
    assert not store.exists(f"{long}/y")
    assert store.list_dir(long) == []
    for call in (store.read, store.open_source, store.size, store.modified_ns,
                 store.identity):
        with pytest.raises(NotFoundError):
            call(long)


def test_a_manifest_naming_a_data_file_too_long_to_exist(tmp_path: Path) -> None:
    path = tmp_path / "t.lance"
    lance_sql.write_dataset(pa.table({"id": list(range(10))}), str(path))
    (manifest,) = (path / "_versions").glob("*.manifest")
    data = manifest.read_bytes()
    pos, major, minor, magic = struct.unpack_from("<Qhh4s", data, len(data) - 16)
    (length,) = struct.unpack_from("<I", data, pos)
    pb = table_pb2.Manifest()
    pb.ParseFromString(data[pos + 4 : pos + 4 + length])
    pb.fragments[0].files[0].path = "x" * 300
    body = pb.SerializeToString()
    head = data[: len(data) - 16]
    manifest.write_bytes(head + struct.pack("<I", len(body)) + body
                         + struct.pack("<Qhh4s", len(head), major, minor, magic))
    with pytest.raises(NotFoundError, match="x" * 300):
        lance_sql.dataset(str(path)).to_table()
