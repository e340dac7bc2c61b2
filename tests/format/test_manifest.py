"""Manifest framing, naming and feature flags."""

from __future__ import annotations

import struct
from pathlib import Path

import pyarrow as pa
import pytest

from lance_sql.errors import FormatError, UnsupportedFeatureError
from lance_sql.format.fragment import DataFile, DeletionFile, Fragment
from lance_sql.format.manifest import Manifest, ManifestCodec, _FragmentCache
from lance_sql.format.naming import ManifestNaming, data_file_name, parse_manifest_name
from lance_sql.format.pb import table_pb2
from lance_sql.format.schema import LanceSchema


def _manifest(**changes: object) -> Manifest:
    schema = LanceSchema.from_arrow(pa.schema([("id", pa.int64()), ("s", pa.string())]))
    frag = Fragment(
        id=0,
        files=(DataFile("abc.lance", (0, 1), (0, 1), 2, 0, 1234),),
        physical_rows=10,
        deletion_file=DeletionFile("arrow", 1, 77, 2),
    )
    base = Manifest(schema=schema, fragments=(frag,), version=2, max_fragment_id=0,
                    timestamp_ns=1_700_000_000_123_456_789, config={"k": "v"})
    return base.evolve(**changes)


def test_round_trip_with_transaction_and_index() -> None:
    m = _manifest(index_section=b"\x0a\x00")
    data = ManifestCodec.encode(m, b"txn-bytes")
    back = ManifestCodec.decode(data, "m")
    assert back == m
    assert ManifestCodec.decode_transaction(data, "m") == b"txn-bytes"
    assert back.fragments[0].num_rows == 8


def test_footer_layout() -> None:
    data = ManifestCodec.encode(_manifest(), b"t")
    pos, major, minor, magic = struct.unpack("<Qhh4s", data[-16:])
    assert (major, minor, magic) == (0, 2, b"LANC")
    (length,) = struct.unpack_from("<I", data, pos)
    pb = table_pb2.Manifest.FromString(data[pos + 4 : pos + 4 + length])
    assert pb.transaction_section == 0 and pb.version == 2


def test_unknown_fields_survive_a_rewrite() -> None:
    pb = ManifestCodec.to_proto(_manifest())
    pb.fragments[0].MergeFromString(b"\xa8\x06\x07")   # field 101 varint 7 in a fragment
    pb.MergeFromString(b"\xd0\x0f\x2a")                 # field 250 varint 42 in the manifest
    raw = pb.SerializeToString()
    framed = struct.pack("<I", len(raw)) + raw + struct.pack("<Qhh4s", 0, 0, 2, b"LANC")
    decoded = ManifestCodec.decode(framed, "m")
    rewritten = ManifestCodec.to_proto(decoded.evolve(version=3)).SerializeToString()
    assert b"\xd0\x0f\x2a" in rewritten and b"\xa8\x06\x07" in rewritten


def test_unknown_reader_flag_is_refused() -> None:
    data = ManifestCodec.encode(_manifest(reader_feature_flags=1 | 64), None)
    with pytest.raises(UnsupportedFeatureError, match=r"\[64\]"):
        ManifestCodec.decode(data, "_versions/x.manifest")


@pytest.mark.parametrize("cut", [0, 3, 15, 16, 40])
def test_truncated_manifest(cut: int) -> None:
    data = ManifestCodec.encode(_manifest(), b"t")
    with pytest.raises(FormatError, match="bad.manifest"):
        ManifestCodec.decode(data[: len(data) - cut - 1] if cut else data[:10], "bad.manifest")


def test_every_single_byte_flip_is_an_error_or_a_valid_manifest() -> None:
    data = ManifestCodec.encode(_manifest(), b"txn")
    for i in range(len(data)):
        flipped = bytearray(data)
        flipped[i] ^= 0xFF
        try:
            ManifestCodec.decode(bytes(flipped), "m")
        except FormatError:
            pass


def test_naming_schemes() -> None:
    assert ManifestNaming.V2.file_name(1) == "18446744073709551614.manifest"
    assert ManifestNaming.V1.file_name(12) == "12.manifest"
    assert parse_manifest_name("18446744073709551614.manifest") == (1, ManifestNaming.V2)
    assert parse_manifest_name("12.manifest") == (12, ManifestNaming.V1)
    assert parse_manifest_name("latest_version_hint.json") is None
    assert parse_manifest_name(".tmp.manifest") is None
    names = [ManifestNaming.V2.file_name(v) for v in (1, 2, 10, 11)]
    assert min(names) == ManifestNaming.V2.file_name(11)


def test_data_file_names_look_like_the_reference() -> None:
    name = data_file_name()
    assert name.endswith(".lance") and len(name) == 24 + 26 + len(".lance")
    assert set(name[:24]) <= {"0", "1"}


def test_decodes_a_pylance_manifest(tmp_path: Path) -> None:
    lance = pytest.importorskip("lance")
    tbl = pa.table({"id": pa.array(range(100), pa.int64()), "s": [str(i) for i in range(100)]})
    lance.write_dataset(tbl, tmp_path / "t", data_storage_version="2.0", max_rows_per_file=40)
    ds = lance.dataset(tmp_path / "t")
    ds.delete("id < 5")
    files = sorted((tmp_path / "t" / "_versions").glob("*.manifest"))
    m = ManifestCodec.decode(files[0].read_bytes(), str(files[0]))  # smallest name = latest
    assert m.version == 2
    assert m.data_format == "2.0"
    assert [f.physical_rows for f in m.fragments] == [40, 40, 20]
    assert m.fragments[0].deletion_file.num_deleted_rows == 5
    assert m.schema.to_arrow() == ds.schema
    assert ManifestCodec.decode_transaction(files[0].read_bytes(), "m") is not None


def test_the_fragment_cache_is_bounded_by_bytes_too() -> None:
    """Fragments with big inline row-id sequences fill the decode cache by bytes long
    before they reach its count bound."""
    cache = _FragmentCache(capacity=1000, max_bytes=64 << 10)

    def fragment(i: int, payload: int) -> table_pb2.DataFragment:
        pb = table_pb2.DataFragment(id=i, physical_rows=1)
        pb.inline_row_ids = bytes(payload)
        return pb

    for i in range(100):
        got = cache.get(fragment(i, 2000))
        assert got.id == i
        assert cache.nbytes <= 64 << 10
    assert 0 < len(cache) < 100
    assert cache.get(fragment(5, 2000)) == Fragment.from_proto(fragment(5, 2000))
    big = fragment(1000, 8 << 10)  # over a sixteenth of the bound: decoded, not kept
    held = len(cache)
    assert cache.get(big).id == 1000 and len(cache) == held
