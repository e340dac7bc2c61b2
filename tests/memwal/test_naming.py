"""Bit-reversed names and region paths."""

from __future__ import annotations

import uuid

import pytest
from hypothesis import given
from hypothesis import strategies as st

from lance_sql.errors import FormatError, InvalidInputError
from lance_sql.memwal.naming import (
    GenerationDir,
    RegionPaths,
    bit_reversed,
    parse_bit_reversed,
    parse_manifest_name,
    parse_wal_name,
)


def test_the_specs_examples() -> None:
    assert bit_reversed(5) == "101" + "0" * 61
    assert bit_reversed(1) == "1" + "0" * 63
    assert bit_reversed(2) == "01" + "0" * 62
    region = RegionPaths(uuid.UUID("12345678-1234-4234-8234-123456789abc"))
    assert region.wal_entry(5) == (
        "_mem_wal/12345678-1234-4234-8234-123456789abc/wal/101" + "0" * 61 + ".lance")
    assert region.manifest(5).endswith("/manifest/101" + "0" * 61 + ".binpb")
    assert region.version_hint.endswith("/manifest/version_hint.json")


@given(st.integers(0, 2**64 - 1))
def test_names_round_trip(n: int) -> None:
    name = bit_reversed(n)
    assert len(name) == 64 and parse_bit_reversed(name) == n
    assert parse_wal_name(name + ".lance") == n
    assert parse_manifest_name(name + ".binpb") == n


def test_other_names_are_not_numbers() -> None:
    for name in ("", "0" * 63, "2" * 64, "1" * 65, "version_hint.json"):
        assert parse_bit_reversed(name) is None
        assert parse_wal_name(name) is None and parse_manifest_name(name) is None
    assert parse_wal_name("1" * 64 + ".binpb") is None


def test_out_of_range_numbers_are_refused() -> None:
    with pytest.raises(InvalidInputError):
        bit_reversed(-1)
    with pytest.raises(InvalidInputError):
        bit_reversed(2**64)
    region = RegionPaths(uuid.uuid4())
    with pytest.raises(InvalidInputError):
        region.wal_entry(0)
    with pytest.raises(InvalidInputError):
        region.manifest(0)


def test_generation_directories() -> None:
    made = GenerationDir.new(3)
    assert len(made.prefix) == 8 and made.generation == 3
    assert GenerationDir.parse(made.name) == made
    assert GenerationDir.new(3).prefix != made.prefix or GenerationDir.new(3) != made
    for bad in ("a1b2c3d4_gen_0", "a1b2c3d4_gen_", "A1B2C3D4_gen_1", "a1b2c3_gen_1",
                "a1b2c3d4-gen-1", "../x_gen_1"):
        assert GenerationDir.parse(bad) is None
    region = RegionPaths(uuid.uuid4())
    assert region.generation("a1b2c3d4_gen_7") == f"{region.root}/a1b2c3d4_gen_7"
    with pytest.raises(FormatError):
        region.generation("../../etc")
    with pytest.raises(InvalidInputError):
        GenerationDir.new(0)


def test_region_directories_are_canonical_uuids() -> None:
    u = uuid.uuid4()
    assert RegionPaths.parse_region_dir(str(u)) == RegionPaths(u)
    assert RegionPaths.parse_region_dir(str(u).upper()) is None
    assert RegionPaths.parse_region_dir("not-a-uuid") is None
