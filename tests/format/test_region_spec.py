"""Region specs as values: constructors, validation, combination and binding to field ids."""

from __future__ import annotations

from dataclasses import replace

import pyarrow as pa
import pytest

from lance_sql.errors import InvalidInputError, SchemaError
from lance_sql.format.region_spec import RegionField, RegionSpec
from lance_sql.format.schema import LanceSchema

SCHEMA = LanceSchema.from_arrow(pa.schema([
    pa.field("id", pa.int64()), pa.field("name", pa.string()),
    pa.field("ts", pa.timestamp("us", "UTC")), pa.field("tags", pa.list_(pa.string())),
]))


def test_constructors_name_their_fields_and_parameters() -> None:
    spec = RegionSpec.bucket("id", 8) + RegionSpec.day("ts") + RegionSpec.truncate("name", 3)
    assert [f.field_id for f in spec.fields] == ["bucket_id", "day_ts", "truncate_name"]
    assert spec.fields[0].parameter("num_buckets") == 8
    assert spec.fields[2].parameter("width") == 3
    assert spec.fields[1].result_type == "int32"
    multi = RegionSpec.multi_bucket(["id", "name"], 4, field_id="shard")
    assert multi.fields[0].source_columns == ("id", "name")
    expr = RegionSpec.expression("col0 % 10", ["id"], "int64", field_id="tens")
    assert expr.fields[0].expression == "col0 % 10" and expr.fields[0].transform is None


def test_binding_resolves_field_ids_and_result_types() -> None:
    spec = (RegionSpec.identity("name") + RegionSpec.bucket("id", 8)).bind(SCHEMA)
    ids = {f.name: f.id for f in SCHEMA.fields}
    assert spec.fields[0].source_ids == (ids["name"],)
    assert spec.fields[0].result_type == "string"  # identity keeps the source's type
    assert spec.fields[1].source_ids == (ids["id"],)
    assert spec.source_names(SCHEMA) == ["name", "id"]
    renamed = LanceSchema(tuple(f if f.name != "id" else _renamed(f, "key")
                                for f in SCHEMA.fields), SCHEMA.metadata)
    assert spec.source_names(renamed) == ["name", "key"]  # ids survive a rename
    dropped = LanceSchema(tuple(f for f in SCHEMA.fields if f.name != "id"), SCHEMA.metadata)
    assert spec.source_names(dropped) == ["name", None]


def _renamed(field, name: str):
    return replace(field, name=name)


def test_binding_refuses_missing_and_nested_columns() -> None:
    with pytest.raises(SchemaError, match="'nope' does not exist"):
        RegionSpec.bucket("nope", 4).bind(SCHEMA)
    with pytest.raises(SchemaError, match="nested"):
        RegionSpec.identity("tags").bind(SCHEMA)


@pytest.mark.parametrize(("make", "message"), [
    (lambda: RegionSpec.bucket("id", 0), "num_buckets"),
    (lambda: RegionSpec.bucket("id", 2**31), "num_buckets"),
    (lambda: RegionSpec.truncate("name", -1), "width"),
    (lambda: RegionSpec.multi_bucket("id", 4), "list"),
    (lambda: RegionSpec.expression("", ["id"], "int64"), "empty"),
    (lambda: RegionSpec.expression("col0", ["id"], ""), "result_type"),
    (lambda: RegionSpec.expression("now()", ["id"], "int64"), "deterministic"),
    (lambda: RegionSpec.identity("id") + RegionSpec.identity("id"), "unique"),
    (lambda: RegionSpec(()), "at least one"),
    (lambda: RegionField("bad id", ("id",), transform="identity"), "letters"),
    (lambda: RegionField("x", ("id",), transform="squash"), "unknown region transform"),
    (lambda: RegionField("x", ("a", "b"), transform="bucket",
                         parameters={"num_buckets": "4"}), "one source column"),
    (lambda: RegionField("x", ("id",), transform="identity", expression="col0"), "exactly one"),
], ids=lambda v: v if isinstance(v, str) else "")
def test_bad_specs_are_refused(make, message: str) -> None:
    with pytest.raises(InvalidInputError, match=message):
        make()


def test_a_malformed_result_type_is_refused() -> None:
    with pytest.raises(SchemaError, match="not a Lance logical type"):
        RegionSpec.expression("col0", ["id"], "int33")


def test_specs_are_values() -> None:
    a = RegionSpec.bucket("id", 8)
    assert a == RegionSpec.bucket("id", 8) and hash(a) == hash(RegionSpec.bucket("id", 8))
    assert a != RegionSpec.bucket("id", 9)
    assert a.with_id(3).spec_id == 3 and a.spec_id == 0
    with pytest.raises(AttributeError):
        a.spec_id = 5  # type: ignore[misc]
