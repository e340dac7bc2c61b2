"""Which values a put, delete or key lookup may cast to a column's type.

A put casts its columns to the table's types, so ``int32`` keys fit an ``int64`` key
and ``string`` values a ``large_string`` column. pyarrow's cast goes further than that:
it parses text as numbers, dates and times, turns numbers into text or booleans and
cuts timestamps to dates. An append refuses all of those (pylance's too); a put took
them, so ``"51"`` landed in an integer column and a timestamp lost its time of day.
Casts are allowed within a kind of value only; a value of another kind is the caller's
error to name.
"""

from __future__ import annotations

from collections.abc import Hashable

import pyarrow as pa

__all__ = ["same_kind"]


def same_kind(given: pa.DataType, target: pa.DataType) -> bool:
    """Whether values of type ``given`` are the kind of value a ``target`` column holds
    (numbers, text, binaries, dates, timestamps...; nested types member by member, a
    struct's by name: members it lacks read NULL, as the cast makes them)."""
    if pa.types.is_dictionary(given):
        given = given.value_type
    if pa.types.is_dictionary(target):
        target = target.value_type
    if pa.types.is_null(given):
        return True  # no value: it fits any column
    if pa.types.is_struct(given) or pa.types.is_struct(target):
        if not (pa.types.is_struct(given) and pa.types.is_struct(target)):
            return False
        names = {f.name for f in target}
        return all(f.name in names and same_kind(f.type, target.field(f.name).type)
                   for f in given)
    if pa.types.is_fixed_size_list(given) or pa.types.is_fixed_size_list(target):
        return (pa.types.is_fixed_size_list(given) and pa.types.is_fixed_size_list(target)
                and given.list_size == target.list_size
                and same_kind(given.value_type, target.value_type))
    if pa.types.is_map(given) or pa.types.is_map(target):
        return (pa.types.is_map(given) and pa.types.is_map(target)
                and same_kind(given.key_type, target.key_type)
                and same_kind(given.item_type, target.item_type))
    if _is_list(given) or _is_list(target):
        return _is_list(given) and _is_list(target) and same_kind(given.value_type,
                                                                   target.value_type)
    return _flat_kind(given) == _flat_kind(target)


def _is_list(t: pa.DataType) -> bool:
    return (pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_list_view(t)
            or pa.types.is_large_list_view(t))


def _flat_kind(t: pa.DataType) -> Hashable:
    if pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_decimal(t):
        return "number"
    if pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_string_view(t):
        return "text"
    if pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_binary_view(t):
        return "binary"
    if pa.types.is_fixed_size_binary(t):
        return ("fixed_size_binary", t.byte_width)
    for kind, test in _KINDS:
        if test(t):
            return kind
    return str(t)  # any other type: only itself


_KINDS = (("bool", pa.types.is_boolean), ("date", pa.types.is_date),
          ("timestamp", pa.types.is_timestamp), ("time", pa.types.is_time),
          ("duration", pa.types.is_duration), ("interval", pa.types.is_interval))
