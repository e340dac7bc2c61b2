"""Mapping between Lance (Arrow) types and Spark SQL types.

Spark has no unsigned integers, half floats, large offsets or fixed-size lists, so
reading maps each Arrow type to the narrowest Spark type that holds every value:

=====================  ==========================  ==========================================
Arrow (Lance)          Spark                       note
=====================  ==========================  ==========================================
bool                   BooleanType
int8/16/32/64          Byte/Short/Integer/LongType
uint8 / uint16         ShortType / IntegerType     widened
uint32                 LongType                    widened
uint64                 DecimalType(20, 0)          no 64-bit unsigned in Spark
halffloat / float      FloatType                   half floats widen to float
double                 DoubleType
string, large_string   StringType
binary, large_binary,  BinaryType
fixed_size_binary
date32 / date64        DateType
timestamp (with tz)    TimestampType               instants
timestamp (no tz)      TimestampNTZType            wall-clock times
duration               DayTimeIntervalType         microsecond precision
decimal128(p, s)       DecimalType(p, s)           p <= 38; decimal256 beyond that fails
list / large_list /    ArrayType
fixed_size_list
struct                 StructType
map<k, v>              MapType                     (file format 2.2; keys never NULL)
dictionary<k, v>       (type of v)                 decoded
=====================  ==========================  ==========================================

Anything else (time of day, decimal256 with precision > 38, ...) raises a
:class:`SchemaError` naming the column. Writing into an existing table casts Spark's
values back to the table's Arrow types (checked, so an out-of-range value fails).
"""

from __future__ import annotations

import pyarrow as pa
from pyspark.sql import types as T

from lance_sql.errors import SchemaError


def spark_type(t: pa.DataType, column: str) -> T.DataType:
    """The Spark type that holds every value of Arrow type ``t``."""
    if pa.types.is_dictionary(t):
        return spark_type(t.value_type, column)
    if pa.types.is_boolean(t):
        return T.BooleanType()
    simple = {
        pa.int8(): T.ByteType(), pa.int16(): T.ShortType(), pa.int32(): T.IntegerType(),
        pa.int64(): T.LongType(), pa.uint8(): T.ShortType(), pa.uint16(): T.IntegerType(),
        pa.uint32(): T.LongType(), pa.uint64(): T.DecimalType(20, 0),
        pa.float16(): T.FloatType(), pa.float32(): T.FloatType(), pa.float64(): T.DoubleType(),
        pa.string(): T.StringType(), pa.large_string(): T.StringType(),
        pa.binary(): T.BinaryType(), pa.large_binary(): T.BinaryType(),
        pa.date32(): T.DateType(), pa.date64(): T.DateType(),
    }
    if t in simple:
        return simple[t]
    if pa.types.is_fixed_size_binary(t):
        return T.BinaryType()
    if pa.types.is_timestamp(t):
        return T.TimestampType() if t.tz else T.TimestampNTZType()
    if pa.types.is_duration(t):
        return T.DayTimeIntervalType()
    if pa.types.is_decimal(t):
        if t.precision > 38:
            raise SchemaError(
                f"column {column!r}: {t} has more digits than Spark's DecimalType allows (38)"
            )
        return T.DecimalType(t.precision, t.scale)
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        return T.ArrayType(spark_type(t.value_type, column), t.value_field.nullable)
    if pa.types.is_struct(t):
        return T.StructType([
            T.StructField(f.name, spark_type(f.type, f"{column}.{f.name}"), f.nullable)
            for f in t
        ])
    if pa.types.is_map(t):
        return T.MapType(spark_type(t.key_type, f"{column}.key"),
                         spark_type(t.item_type, f"{column}.value"), t.item_field.nullable)
    raise SchemaError(f"column {column!r}: Arrow type {t} has no Spark equivalent")


def spark_schema(schema: pa.Schema) -> T.StructType:
    """The Spark schema of Arrow ``schema``."""
    return T.StructType([
        T.StructField(f.name, spark_type(f.type, f.name), f.nullable) for f in schema
    ])


def arrow_type(t: T.DataType, column: str) -> pa.DataType:
    """The Arrow type a new Lance table uses for a Spark column."""
    simple = {
        T.BooleanType: pa.bool_(), T.ByteType: pa.int8(), T.ShortType: pa.int16(),
        T.IntegerType: pa.int32(), T.LongType: pa.int64(), T.FloatType: pa.float32(),
        T.DoubleType: pa.float64(), T.StringType: pa.string(), T.BinaryType: pa.binary(),
        T.DateType: pa.date32(), T.TimestampNTZType: pa.timestamp("us"),
    }
    for spark_cls, arrow in simple.items():
        if type(t) is spark_cls:
            return arrow
    if isinstance(t, T.TimestampType):
        return pa.timestamp("us", tz="UTC")
    if isinstance(t, T.DayTimeIntervalType):
        return pa.duration("us")
    if isinstance(t, T.DecimalType):
        return pa.decimal128(t.precision, t.scale)
    if isinstance(t, T.ArrayType):
        item = pa.field("item", arrow_type(t.elementType, column), t.containsNull)
        return pa.list_(item)
    if isinstance(t, T.StructType):
        return pa.struct([
            pa.field(f.name, arrow_type(f.dataType, f"{column}.{f.name}"), f.nullable)
            for f in t.fields
        ])
    if isinstance(t, T.MapType):
        return pa.map_(pa.field("key", arrow_type(t.keyType, f"{column}.key"), False),
                       pa.field("value", arrow_type(t.valueType, f"{column}.value"),
                                t.valueContainsNull))
    raise SchemaError(f"column {column!r}: Spark type {t.simpleString()} cannot be stored in Lance")


def arrow_schema(schema: T.StructType) -> pa.Schema:
    """The Arrow schema of Spark ``schema``."""
    return pa.schema([
        pa.field(f.name, arrow_type(f.dataType, f.name), f.nullable) for f in schema.fields
    ])


def check_writable(table: pa.Schema, incoming: T.StructType) -> None:
    """Spark data can be appended to ``table`` if each column maps to the same Spark type."""
    expected = {f.name: f.dataType for f in spark_schema(table).fields}
    given = {f.name: f.dataType for f in incoming.fields}
    problems = []
    for name in expected.keys() - given.keys():
        problems.append(f"column {name!r} is missing from the DataFrame")
    for name in given.keys() - expected.keys():
        problems.append(f"column {name!r} is not in the table")
    for name in expected.keys() & given.keys():
        # nested nullability aside: values that fit are written, a NULL where the table
        # takes none is refused when the rows are written
        if _without_nullability(expected[name]) != _without_nullability(given[name]):
            problems.append(
                f"column {name!r} is {given[name].simpleString()} in the DataFrame but the "
                f"table stores {expected[name].simpleString()}"
            )
    if problems:
        raise SchemaError("; ".join(sorted(problems)))


def _without_nullability(t: T.DataType) -> T.DataType:
    """``t`` with every nested element, field and value nullable."""
    if isinstance(t, T.ArrayType):
        return T.ArrayType(_without_nullability(t.elementType), True)
    if isinstance(t, T.MapType):
        return T.MapType(_without_nullability(t.keyType), _without_nullability(t.valueType), True)
    if isinstance(t, T.StructType):
        return T.StructType([T.StructField(f.name, _without_nullability(f.dataType), True)
                             for f in t.fields])
    return t
