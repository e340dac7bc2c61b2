"""Routing: region ids derived from region values, region values stored and read back."""

from __future__ import annotations

import uuid

import pyarrow as pa
import pytest

from lance_sql.errors import FormatError
from lance_sql.format.memwal import RegionManifest
from lance_sql.format.region_spec import RegionSpec
from lance_sql.memwal.routing import (
    decode_region_values,
    encode_region_values,
    group_by_region,
    region_id_for,
)

SPEC = (RegionSpec.bucket("id", 8) + RegionSpec.identity("kind")).with_id(1)


def _values(bucket: list, kind: list, kind_type: pa.DataType | None = None) -> pa.Table:
    return pa.table({"bucket_id": pa.array(bucket, pa.int32()),
                     "identity_kind": pa.array(kind, kind_type or pa.string())})


def test_equal_values_name_one_region_in_every_process() -> None:
    a = region_id_for(SPEC, _values([3], ["x"]))
    assert a == region_id_for(SPEC, _values([3], ["x"]))
    assert a == region_id_for(SPEC, _values([3], ["x"], pa.large_string()))  # widths alike
    assert a.version == 4 and a.variant == uuid.RFC_4122
    others = {region_id_for(SPEC, _values([b], [k])) for b in range(8) for k in ("x", "y", None)}
    assert len(others) == 24  # every value tuple its own region
    assert region_id_for(SPEC.with_id(2), _values([3], ["x"])) != a  # specs never share
    table = _values([1, 3, 1], ["a", "x", "b"])
    assert region_id_for(SPEC, table, 1) == a


def test_values_round_trip_through_the_region_manifest() -> None:
    values = _values([5], [None])
    manifest = RegionManifest(uuid.uuid4(), 1, 1, writer_epoch=1,
                              region_values=encode_region_values(values))
    back = RegionManifest.decode(manifest.encode(), "m")
    assert decode_region_values(back.region_values, "m") == values
    with pytest.raises(FormatError, match="corrupt region values"):
        decode_region_values(b"garbage", "m")
    with pytest.raises(FormatError, match="not one"):
        decode_region_values(encode_region_values(_values([1, 2], ["a", "b"])), "m")


def test_rows_group_by_region_values() -> None:
    table = _values([1, 2, 1, None, 2, None], ["a", "a", "a", "z", "b", "z"])
    groups = [g.tolist() for g in group_by_region(table)]
    assert groups == [[0, 2], [1], [3, 5], [4]]
    assert group_by_region(table.slice(0, 0)) == []
