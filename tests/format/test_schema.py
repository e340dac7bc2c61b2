"""Tests for lance_sql.format.schema, checked against what pylance writes into manifests."""

from __future__ import annotations

import struct
from pathlib import Path

import lance
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lance_sql.errors import FormatError, NotFoundError, SchemaError
from lance_sql.format.pb import file_pb2, table_pb2
from lance_sql.format.schema import Encoding, LanceField, LanceSchema

PROTO_FIELDS = [
    "type",
    "name",
    "id",
    "parent_id",
    "logical_type",
    "nullable",
    "encoding",
    "metadata",
    "extension_name",
    "unenforced_primary_key",
    "unenforced_primary_key_position",
]

# Every type pylance 14.0.2 can write, including the lossy ones (views, FSL item naming).
REFERENCE_FIELDS = [
    pa.field("n", pa.null()),
    pa.field("b", pa.bool_()),
    *(pa.field(f"i{w}", getattr(pa, f"int{w}")()) for w in (8, 16, 32, 64)),
    *(pa.field(f"u{w}", getattr(pa, f"uint{w}")(), nullable=False) for w in (8, 16, 32, 64)),
    pa.field("h", pa.float16()),
    pa.field("f", pa.float32()),
    pa.field("d", pa.float64()),
    pa.field("s", pa.string()),
    pa.field("ls", pa.large_string()),
    pa.field("bi", pa.binary()),
    pa.field("lb", pa.large_binary()),
    pa.field("sv", pa.string_view()),
    pa.field("bv", pa.binary_view()),
    pa.field("d32", pa.date32()),
    pa.field("d64", pa.date64()),
    pa.field("t32s", pa.time32("s")),
    pa.field("t32ms", pa.time32("ms")),
    pa.field("t64us", pa.time64("us")),
    pa.field("t64ns", pa.time64("ns")),
    *(pa.field(f"ts_{u}", pa.timestamp(u)) for u in ("s", "ms", "us", "ns")),
    pa.field("ts_utc", pa.timestamp("us", tz="UTC")),
    pa.field("ts_off", pa.timestamp("ms", tz="+05:30")),
    pa.field("ts_ny", pa.timestamp("ns", tz="America/New_York")),
    *(pa.field(f"dur_{u}", pa.duration(u)) for u in ("s", "ms", "us", "ns")),
    pa.field("dec", pa.decimal128(10, 3)),
    pa.field("dec_neg", pa.decimal128(5, -2)),
    pa.field("dec256", pa.decimal256(40, 5)),
    pa.field("fsb", pa.binary(16)),
    pa.field("vec", pa.list_(pa.float32(), 4)),
    pa.field("fsl_named", pa.list_(pa.field("elem", pa.int32(), nullable=False), 2)),
    pa.field("fsl_fsl", pa.list_(pa.list_(pa.int8(), 2), 3)),
    pa.field("fsl_struct", pa.list_(pa.field("x", pa.struct([("a", pa.int32())]), False), 2)),
    pa.field("l", pa.list_(pa.int32())),
    pa.field("l_named", pa.list_(pa.field("elem", pa.int64(), nullable=False))),
    pa.field("l_meta", pa.list_(pa.field("item", pa.int32(), metadata={"m": "1"}))),
    pa.field("ll", pa.large_list(pa.string())),
    pa.field("l_fsl", pa.list_(pa.list_(pa.float32(), 2))),
    pa.field("l_dict", pa.list_(pa.dictionary(pa.int32(), pa.string()))),
    pa.field("ls_", pa.list_(pa.struct([("x", pa.int32()), ("y", pa.list_(pa.string()))]))),
    pa.field("lls", pa.large_list(pa.struct([("x", pa.int32())]))),
    pa.field(
        "st",
        pa.struct([("a", pa.int32()), pa.field("b", pa.struct([("c", pa.string())]), False)]),
    ),
    pa.field("empty", pa.struct([])),
    pa.field("mp", pa.map_(pa.string(), pa.struct([("a", pa.int8())]))),
    pa.field("l_mp", pa.list_(pa.map_(pa.int32(), pa.list_(pa.int32())))),
    pa.field("dict", pa.dictionary(pa.int32(), pa.string())),
    pa.field("dict_lb", pa.dictionary(pa.int8(), pa.large_string())),
    pa.field("dict_b", pa.dictionary(pa.uint16(), pa.binary())),
    pa.field("dict_i", pa.dictionary(pa.int32(), pa.int64())),
    pa.field("meta", pa.int32(), metadata={"k": "v", "lance-encoding:compression": "zstd"}),
    pa.field("uuid", pa.uuid()),
    pa.field("tensor", pa.fixed_shape_tensor(pa.int8(), [2, 2])),
    pa.field("b8", pa.bool8()),
    pa.field("json", pa.json_()),
    pa.field("json_l", pa.json_(pa.large_string())),
    pa.field("json_m", pa.string(), metadata={"ARROW:extension:name": "arrow.json"}),
    pa.field("my_ext", pa.string(), metadata={"ARROW:extension:name": "my.ext", "x": "y"}),
    pa.field("pk", pa.int64(), False, metadata={"lance-schema:unenforced-primary-key": "yes"}),
    pa.field(
        "pk2",
        pa.string(),
        False,
        metadata={"lance-schema:unenforced-primary-key:position": "2"},
    ),
]


# 2.0/2.1 keep a blob column as large_binary; 2.2 rewrites it (see test_blob_v2_read).
BLOB_FIELD = pa.field("blob", pa.large_binary(), metadata={"lance-encoding:blob": "true"})


def read_manifest(path: Path) -> table_pb2.Manifest:
    """The newest manifest of a table (V2 names sort newest first)."""
    data = sorted((path / "_versions").glob("*.manifest"))[0].read_bytes()
    (offset,) = struct.unpack("<Q", data[-16:-8])
    (length,) = struct.unpack("<I", data[offset : offset + 4])
    manifest = table_pb2.Manifest()
    manifest.ParseFromString(data[offset + 4 : offset + 4 + length])
    return manifest


def assert_protos_equal(ours: list[file_pb2.Field], theirs: list[file_pb2.Field]) -> None:
    assert [p.name for p in ours] == [p.name for p in theirs]
    for a, b in zip(ours, theirs, strict=True):
        for name in PROTO_FIELDS:
            va, vb = getattr(a, name), getattr(b, name)
            if name == "metadata":
                va, vb = dict(va), dict(vb)
            assert va == vb, f"field {a.name!r} (id {a.id}): {name} {va!r} != {vb!r}"
        assert not b.HasField("dictionary")
        assert a == b


@pytest.mark.parametrize("version", ["2.0", "2.1", "2.2"])
def test_matches_pylance(tmp_path: Path, version: str) -> None:
    blob = [BLOB_FIELD] if version != "2.2" else []
    schema = pa.schema(REFERENCE_FIELDS + blob, metadata={"sk": "sv"})
    lance.write_dataset(schema.empty_table(), tmp_path, data_storage_version=version)
    manifest = read_manifest(tmp_path)

    ours = LanceSchema.from_arrow(schema)
    assert_protos_equal(ours.to_protos(), list(manifest.fields))
    assert ours.metadata == dict(manifest.schema_metadata)

    read = LanceSchema.from_protos(manifest.fields, manifest.schema_metadata)
    expected = lance.dataset(tmp_path).schema
    for a, b in zip(read.to_arrow(), expected, strict=True):
        assert a.equals(b, check_metadata=True), (a, a.metadata, b, b.metadata)
    assert read.to_arrow().equals(expected, check_metadata=True)
    assert read == ours


def test_blob_v2_read(tmp_path: Path) -> None:
    """2.2 stores blobs as a lance.blob.v2 struct {data, uri}; reading must follow pylance."""
    lance.write_dataset(pa.schema([BLOB_FIELD]).empty_table(), tmp_path, data_storage_version="2.2")
    manifest = read_manifest(tmp_path)
    read = LanceSchema.from_protos(manifest.fields, manifest.schema_metadata)
    assert [(f.name, f.logical_type) for f in read.walk()] == [
        ("blob", "struct"),
        ("data", "large_binary"),
        ("uri", "string"),
    ]
    assert read.fields[0].extension_name == "lance.blob.v2"
    assert read.to_arrow().equals(lance.dataset(tmp_path).schema, check_metadata=True)
    assert_protos_equal(read.to_protos(), list(manifest.fields))


def test_add_fields_matches_pylance_add_columns(tmp_path: Path) -> None:
    ds = lance.write_dataset(
        pa.table({"a": [1], "s": pa.array([{"x": 1}])}), tmp_path, data_storage_version="2.0"
    )
    new = pa.schema([pa.field("n", pa.struct([("q", pa.int32()), ("r", pa.list_(pa.string()))]))])
    ds.add_columns(new)
    before = LanceSchema.from_arrow(
        pa.schema([("a", pa.int64()), ("s", pa.struct([("x", pa.int64())]))])
    )
    after = before.add_fields(new)
    assert after.field_ids() == [0, 1, 2, 3, 4, 5, 6]
    assert_protos_equal(after.to_protos(), list(read_manifest(tmp_path).fields))


# --------------------------------------------------------------------------- unit behaviour
def _tree() -> LanceSchema:
    return LanceSchema.from_arrow(
        pa.schema(
            [
                pa.field("id", pa.int64(), nullable=False),
                pa.field(
                    "s", pa.struct([("a", pa.int32()), ("b", pa.struct([("c", pa.string())]))])
                ),
                pa.field("l", pa.list_(pa.float64())),
                pa.field("x.y", pa.bool_()),
            ],
            metadata={"k": "v"},
        )
    )


def test_ids_and_lookup() -> None:
    schema = _tree()
    assert schema.field_ids() == list(range(8))
    assert schema.max_field_id() == 7
    assert LanceSchema(()).max_field_id() == -1
    assert [f.name for f in schema.walk()] == ["id", "s", "a", "b", "c", "l", "item", "x.y"]
    assert schema.field("s.b.c").id == 4
    assert schema.field("x.y").id == 7
    assert schema.by_id(6).name == "item"
    assert schema.field("l").children[0].arrow_type == pa.float64()
    with pytest.raises(NotFoundError, match="'nope'.*'id', 's', 'l', 'x.y'"):
        schema.field("nope")
    with pytest.raises(NotFoundError):
        schema.field("l.item")  # dotted paths enter structs only
    with pytest.raises(NotFoundError):
        schema.by_id(99)


def test_project() -> None:
    schema = _tree()
    projected = schema.project(["l", "s.b.c", "id", "s.a"])
    assert [f.name for f in projected.fields] == ["l", "s", "id"]
    assert [f.name for f in projected.field("s").children] == ["a", "b"]  # schema order
    assert projected.field_ids() == [5, 6, 1, 2, 3, 4, 0]
    assert projected.metadata == {"k": b"v"}
    assert schema.project(["s.a", "s"]).field("s") == schema.field("s")
    assert schema.project(["s", "s.a"]).field("s") == schema.field("s")
    assert schema.project([]).fields == ()
    with pytest.raises(NotFoundError, match="'s.zz'"):
        schema.project(["id", "s.zz"])


def test_check_append_compatible() -> None:
    schema = _tree()
    ok = schema.to_arrow()
    schema.check_append_compatible(ok)
    reordered = pa.schema([ok.field(i).with_nullable(True) for i in (3, 2, 1, 0)])
    schema.check_append_compatible(reordered)  # order and nullability are not checked here
    bad = pa.schema(
        [
            pa.field("id", pa.int32()),
            pa.field("s", pa.struct([("a", pa.int32())])),
            pa.field("extra", pa.int8()),
            pa.field("x.y", pa.bool_()),
        ]
    )
    with pytest.raises(SchemaError) as info:
        schema.check_append_compatible(bad)
    message = str(info.value)
    for part in ["'id'", "'s'", "'extra'", "'l' is missing"]:
        assert part in message
    assert "'x.y'" not in message
    with pytest.raises(SchemaError, match="'dup'"):
        LanceSchema(()).check_append_compatible(pa.schema([("dup", pa.int8()), ("dup", pa.int8())]))


def test_add_fields() -> None:
    schema = _tree()
    grown = schema.add_fields(pa.schema([("z", pa.list_(pa.int8())), ("w", pa.string())]))
    assert grown.field_ids() == list(range(11))
    assert grown.field("w").id == 10 and grown.metadata == schema.metadata
    with pytest.raises(SchemaError, match="'s'"):
        schema.add_fields(pa.schema([("s", pa.int8())]))
    empty = LanceSchema(()).add_fields(pa.schema([("a", pa.int8())]))
    assert empty.field_ids() == [0]


def test_from_arrow_first_id_and_pk() -> None:
    schema = LanceSchema.from_arrow(_tree().to_arrow(), first_id=10)
    assert schema.field_ids() == list(range(10, 18))
    with pytest.raises(SchemaError, match="primary key"):
        LanceSchema.from_arrow(
            pa.schema(
                [pa.field("k", pa.int8(), metadata={"lance-schema:unenforced-primary-key": "1"})]
            )
        )
    pk = LanceSchema.from_arrow(
        pa.schema(
            [pa.field("k", pa.int8(), False, {"lance-schema:unenforced-primary-key:position": "x"})]
        )
    )
    assert not pk.fields[0].unenforced_primary_key  # an unparsable position is ignored


@pytest.mark.parametrize(
    "arrow_type",
    [
        pa.month_day_nano_interval(),
        pa.decimal32(5, 2),
        pa.list_view(pa.int32()),
        pa.dictionary(pa.int32(), pa.timestamp("us", "UTC")),
        pa.list_(pa.list_(pa.int32()), 2),
        pa.list_(pa.uuid(), 2),
        pa.map_(pa.string(), pa.int8(), keys_sorted=True),
        pa.dense_union([pa.field("a", pa.int32())]),
    ],
)
def test_unsupported_arrow_types(arrow_type: pa.DataType) -> None:
    with pytest.raises(SchemaError, match="'col'"):
        LanceSchema.from_arrow(pa.schema([pa.field("col", arrow_type)]))


def test_logical_type_parsing() -> None:
    cases = {
        "timestamp:ms:+05:30": pa.timestamp("ms", "+05:30"),
        "timestamp:ns:-": pa.timestamp("ns"),
        "decimal:256:40:-3": pa.decimal256(40, -3),
        "dict:large_string:uint8:false": pa.dictionary(pa.uint8(), pa.large_string()),
        "dict:string:int32:true": pa.dictionary(pa.int32(), pa.string(), ordered=True),
        "fixed_size_list:fixed_size_list:int8:2:3": pa.list_(pa.list_(pa.int8(), 2), 3),
        "json": pa.json_(),
    }
    for lt, expected in cases.items():
        assert LanceField(0, "f", lt).arrow_type == expected, lt
    bf16 = LanceField(0, "v", "fixed_size_list:lance.bfloat16:4").to_arrow()
    item = bf16.type.value_field
    assert bf16.type.list_size == 4
    assert (item.metadata or {}).get(
        b"ARROW:extension:name", b"lance.bfloat16"
    ) == b"lance.bfloat16"
    round_trip = LanceSchema.from_arrow(pa.schema([bf16])).fields[0]
    assert round_trip.logical_type == "fixed_size_list:lance.bfloat16:4"


def _proto(name: str, fid: int, parent: int, lt: str) -> file_pb2.Field:
    return file_pb2.Field(name=name, id=fid, parent_id=parent, logical_type=lt, nullable=True)


def test_from_protos_any_order() -> None:
    schema = _tree()
    protos = schema.to_protos()
    depth: dict[int, int] = {}
    for p in protos:
        depth[p.id] = 0 if p.parent_id == -1 else 1 + depth[p.parent_id]
    children_first = sorted(protos, key=lambda p: -depth[p.id])  # stable: siblings keep order
    assert LanceSchema.from_protos(children_first, schema.metadata) == schema
    wire = file_pb2.Schema.FromString(schema.to_proto_schema().SerializeToString())
    assert LanceSchema.from_protos(wire.fields, wire.metadata) == schema


@pytest.mark.parametrize(
    ("protos", "match"),
    [
        ([_proto("a", 0, -1, "int8"), _proto("b", 1, 7, "int8")], "'b'.*parent 7"),
        ([_proto("a", 0, -1, "int8"), _proto("b", 0, -1, "int8")], "'b'.*id 0"),
        ([_proto("a", 0, -1, "struct"), _proto("weird", 1, 0, "varchar")], "'weird'"),
        ([_proto("lst", 0, -1, "list")], "'lst'.*1 child"),
        ([_proto("x", 0, -1, "int8"), _proto("c", 1, 0, "int8")], "'x'.*0 child"),
        ([_proto("a", 0, 1, "struct"), _proto("b", 1, 0, "struct")], "'a', 'b'"),
        ([_proto("m", 0, -1, "map"), _proto("e", 1, 0, "int8")], "'m'.*map"),
        ([_proto("d", 0, -1, "decimal:64:5:2")], "'d'"),
        ([_proto("d", 0, -1, "dict:string:string:false")], "'d'"),
        ([_proto("t", 0, -1, "timestamp:xs:-")], "'t'"),
        ([_proto("neg", -1, -1, "int8")], "'neg'"),
    ],
)
def test_from_protos_errors(protos: list[file_pb2.Field], match: str) -> None:
    with pytest.raises(FormatError, match=match):
        LanceSchema.from_protos(protos)


def test_legacy_extension_name_only() -> None:
    proto = _proto("u", 0, -1, "fixed_size_binary:16")
    proto.extension_name = "arrow.uuid"
    assert LanceSchema.from_protos([proto]).fields[0].arrow_type == pa.uuid()
    # metadata a registered extension rejects stays as storage type plus metadata
    meta = {"ARROW:extension:name": b"arrow.fixed_shape_tensor", "ARROW:extension:metadata": b"?"}
    odd = LanceField(0, "t", "fixed_size_list:int8:4", metadata=meta).to_arrow()
    assert odd.type == pa.list_(pa.int8(), 4)
    assert odd.metadata == {k.encode(): v for k, v in meta.items()}


def test_encodings() -> None:
    schema = LanceSchema.from_arrow(
        pa.schema(
            [
                ("n", pa.null()),
                ("s", pa.struct([("v", pa.string())])),
                ("d", pa.dictionary(pa.int8(), pa.string())),
                ("l", pa.list_(pa.int8(), 2)),
            ]
        )
    )
    assert [f.encoding for f in schema.walk()] == [
        Encoding.NONE,
        Encoding.NONE,
        Encoding.VAR_BINARY,
        Encoding.DICTIONARY,
        Encoding.PLAIN,
    ]


# --------------------------------------------------------------------------- properties
_names = st.text(min_size=1, max_size=6)
_metadata = st.dictionaries(
    _names.filter(lambda k: not k.startswith(("ARROW:", "lance-schema:"))),
    st.binary(max_size=4),
    max_size=2,
)
_leaf_types = st.sampled_from(
    [
        pa.null(), pa.bool_(), pa.int8(), pa.uint16(), pa.int32(), pa.uint64(), pa.float16(),
        pa.float64(), pa.string(), pa.large_string(), pa.binary(), pa.large_binary(),
        pa.date32(), pa.date64(), pa.time32("ms"), pa.time64("ns"), pa.timestamp("s"),
        pa.timestamp("us", "Europe/Paris"), pa.timestamp("ns", "-03:00"), pa.duration("ms"),
        pa.decimal128(38, 10), pa.decimal256(76, 0), pa.binary(3), pa.list_(pa.float32(), 8),
        pa.list_(pa.list_(pa.int16(), 2), 2), pa.dictionary(pa.int16(), pa.string()),
        pa.dictionary(pa.uint8(), pa.float64()), pa.uuid(), pa.bool8(), pa.json_(),
        pa.fixed_shape_tensor(pa.float32(), [2, 3]),
    ]
)  # fmt: skip
_key_types = st.sampled_from([pa.string(), pa.int64(), pa.binary(4)])


def _fields(types: st.SearchStrategy[pa.DataType]) -> st.SearchStrategy[pa.Field]:
    return st.builds(
        lambda name, t, nullable, meta: pa.field(
            name, t, nullable or pa.types.is_null(t), meta or None
        ),
        _names,
        types,
        st.booleans(),
        _metadata,
    )


def _nested(children: st.SearchStrategy[pa.DataType]) -> st.SearchStrategy[pa.DataType]:
    fields = _fields(children)
    return st.one_of(
        st.lists(fields, max_size=4, unique_by=lambda f: f.name).map(pa.struct),
        fields.map(pa.list_),
        fields.map(pa.large_list),
        st.builds(lambda k, v: pa.map_(pa.field("key", k, False), v), _key_types, fields),
        st.builds(
            lambda f, n: pa.list_(f, n),
            _fields(st.lists(fields, max_size=3, unique_by=lambda f: f.name).map(pa.struct)),
            st.integers(1, 4),
        ),
    )


_types = st.recursive(_leaf_types, _nested, max_leaves=12)
_schemas = st.builds(
    lambda fields, meta: pa.schema(fields, metadata=meta or None),
    st.lists(_fields(_types), max_size=5, unique_by=lambda f: f.name),
    _metadata,
)


@settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(schema=_schemas, first_id=st.integers(0, 1000))
def test_round_trip_property(schema: pa.Schema, first_id: int) -> None:
    lance_schema = LanceSchema.from_arrow(schema, first_id=first_id)
    protos = lance_schema.to_protos()
    ids = [p.id for p in protos]
    assert ids == list(range(first_id, first_id + len(protos)))
    seen: set[int] = set()
    for p in protos:
        assert p.parent_id == -1 or p.parent_id in seen  # parents come first
        seen.add(p.id)
    wire = file_pb2.Schema.FromString(lance_schema.to_proto_schema().SerializeToString())
    back = LanceSchema.from_protos(wire.fields, wire.metadata)
    assert back == lance_schema
    assert back.to_arrow().equals(schema, check_metadata=True), (back.to_arrow(), schema)


def test_scan_arrow_is_made_once_and_equals_a_fresh_build() -> None:
    """``to_scan_arrow`` is cached per schema and per field (lookups ask for it many times):
    the same object each call, equal to what a fresh copy of the schema builds, blob
    columns given as their descriptions."""
    nested = pa.field("st", pa.struct([pa.field("b", pa.large_binary(),
                                                metadata={"lance-encoding:blob": "true"}),
                                       pa.field("x", pa.int32())]))
    arrow = pa.schema([pa.field("id", pa.int64()), BLOB_FIELD, nested], metadata={"k": "v"})
    schema = LanceSchema.from_arrow(arrow)
    first = schema.to_scan_arrow()
    assert schema.to_scan_arrow() is first
    assert all(f.to_scan_arrow() is f.to_scan_arrow() for f in schema.fields)
    fresh = LanceSchema(tuple(LanceField(**{k: getattr(f, k) for k in (
        "id", "name", "logical_type", "nullable", "children", "metadata")})
        for f in schema.fields), dict(schema.metadata))
    assert fresh.to_scan_arrow() is not first
    assert first.equals(fresh.to_scan_arrow(), check_metadata=True)
    assert first.field("blob").type == pa.struct([("position", pa.uint64()),
                                                  ("size", pa.uint64())])
    assert first.field("st").type.field("b").type == first.field("blob").type
    assert first.metadata == {b"k": b"v"}


@pytest.mark.parametrize("arrow", [pa.list_(pa.float32(), 0),
                                   pa.list_(pa.list_(pa.int8(), 0), 2),
                                   pa.struct([("v", pa.list_(pa.int64(), 0))])])
def test_fixed_size_lists_of_no_items_are_refused(arrow: pa.DataType) -> None:
    """As pylance refuses them ("dimension must be a positive integer"); the 2.1/2.2
    writer failed with a ZeroDivisionError and 2.0 wrote a file pylance cannot read."""
    with pytest.raises(SchemaError, match="positive dimension"):
        LanceSchema.from_arrow(pa.schema([("c", arrow)]))
