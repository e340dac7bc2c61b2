"""Region specs: how rows are divided into regions, as values (no I/O).

A spec is a tuple of region fields; each field derives one value per row from source
columns, by a well-known transform or a DataFusion SQL expression over ``col0, col1, …``.
Rows with equal values in every field belong to the same region. Specs are built from
column *names* (``RegionSpec.bucket("id", 8)``) and bound to a table's field ids
(:meth:`RegionSpec.bind`) when the MemWAL is initialised, because the spec format refers
to source columns by field id: renaming a column keeps its regions, dropping one turns its
values into NULL.

Specs combine with ``+``: ``RegionSpec.bucket("id", 8) + RegionSpec.day("ts")``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from types import MappingProxyType

from lance_sql.errors import InvalidInputError, SchemaError
from lance_sql.format.pb import memwal_pb2
from lance_sql.format.schema import LanceSchema, arrow_type_of

__all__ = ["TRANSFORMS", "RegionField", "RegionSpec"]

# transform name -> required parameters
TRANSFORMS: Mapping[str, tuple[str, ...]] = MappingProxyType({
    "identity": (),
    "year": (),
    "month": (),
    "day": (),
    "hour": (),
    "bucket": ("num_buckets",),
    "multi_bucket": ("num_buckets",),
    "truncate": ("width",),
})
# Transforms whose value never decreases as the source value grows: ranges prune.
ORDER_PRESERVING = frozenset({"identity", "truncate", "year"})
_FIELD_ID = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# Functions whose value depends on when or how often they run: not allowed in a spec.
_VOLATILE = re.compile(
    r"\b(random|rand|uuid|now|current_date|current_time|current_timestamp|localtime|"
    r"localtimestamp|today|statement_timestamp)\s*\(", re.IGNORECASE)


@dataclass(frozen=True)
class RegionField:
    """One region value per row, from source columns by a transform or an expression.

    ``source_columns`` are names as the user gave them; ``source_ids`` are the table's
    field ids once bound (empty before). ``result_type`` is a Lance logical type string
    (``"int32"``, ``"string"``, ``"timestamp:us:UTC"`` …), filled in on binding for
    transforms whose result has the source's type.
    """

    field_id: str
    source_columns: tuple[str, ...]
    transform: str | None = None
    expression: str | None = None
    result_type: str = ""
    parameters: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    source_ids: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        if not _FIELD_ID.match(self.field_id):
            raise InvalidInputError(
                f"region field id {self.field_id!r} must be letters, digits and underscores")
        if (self.transform is None) == (self.expression is None):
            raise InvalidInputError(
                f"region field {self.field_id!r} needs exactly one of a transform or an "
                "expression")
        if not self.source_columns and not self.source_ids:
            raise InvalidInputError(f"region field {self.field_id!r} has no source columns")
        if self.transform is not None:
            if self.transform not in TRANSFORMS:
                raise InvalidInputError(
                    f"unknown region transform {self.transform!r}; known: "
                    f"{', '.join(TRANSFORMS)}")
            for name in TRANSFORMS[self.transform]:
                _positive_int_parameter(self, name)
            arity = len(self.source_columns or self.source_ids)
            if self.transform != "multi_bucket" and arity != 1:
                raise InvalidInputError(
                    f"the {self.transform} transform takes one source column, got {arity}")
        else:
            if not self.result_type:
                raise InvalidInputError(
                    f"region field {self.field_id!r}: an expression needs a result_type")
            volatile = _VOLATILE.search(self.expression or "")
            if volatile:
                raise InvalidInputError(
                    f"region expression {self.expression!r} calls {volatile.group(1)}(), "
                    "whose value changes between calls: region values must be "
                    "deterministic and stateless")
        if self.result_type:
            arrow_type_of(self.result_type)  # a SchemaError names a malformed type
        object.__setattr__(self, "parameters", MappingProxyType(dict(self.parameters)))

    @property
    def order_preserving(self) -> bool:
        """Whether ``a <= b`` implies ``f(a) <= f(b)`` (so range predicates prune)."""
        return self.transform in ORDER_PRESERVING

    def parameter(self, name: str) -> int:
        return _positive_int_parameter(self, name)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, RegionField):
            return NotImplemented
        return self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def to_proto(self) -> memwal_pb2.RegionField:
        """The field as stored: source columns by field id only (bind first)."""
        if not self.source_ids:
            raise InvalidInputError(f"region field {self.field_id!r} is not bound to a schema")
        pb = memwal_pb2.RegionField(field_id=self.field_id, source_ids=list(self.source_ids),
                                    result_type=self.result_type,
                                    parameters=dict(self.parameters))
        if self.transform is not None:
            pb.transform = self.transform
        if self.expression is not None:
            pb.expression = self.expression
        return pb

    @classmethod
    def from_proto(cls, pb: memwal_pb2.RegionField) -> RegionField:
        """A stored field; its source columns are known by field id only."""
        return cls(pb.field_id, (), transform=pb.transform if pb.HasField("transform") else None,
                   expression=pb.expression if pb.HasField("expression") else None,
                   result_type=pb.result_type, parameters=dict(pb.parameters),
                   source_ids=tuple(pb.source_ids))

    def _key(self) -> tuple:
        # A bound field is what is stored: its sources are field ids, whatever their names.
        sources = self.source_ids if self.source_ids else self.source_columns
        return (self.field_id, sources, self.transform, self.expression,
                self.result_type, tuple(sorted(self.parameters.items())))


def _positive_int_parameter(f: RegionField, name: str) -> int:
    text = f.parameters.get(name)
    if text is None:
        raise InvalidInputError(f"the {f.transform} transform needs the {name} parameter")
    if not str(text).isdigit() or not 0 < int(text) < 2**31:
        raise InvalidInputError(
            f"region field {f.field_id!r}: {name} must be an integer in [1, 2^31 - 1], "
            f"got {text!r}")
    return int(text)


@dataclass(frozen=True)
class RegionSpec:
    """An ordered set of region fields; ``spec_id`` is assigned by the MemWAL index.

    Spec id 0 is reserved for manually created regions (no spec); ids are never reused.
    """

    fields: tuple[RegionField, ...]
    spec_id: int = 0

    def __post_init__(self) -> None:
        object.__setattr__(self, "fields", tuple(self.fields))
        if not self.fields:
            raise InvalidInputError("a region spec needs at least one field")
        ids = [f.field_id for f in self.fields]
        if len(set(ids)) != len(ids):
            raise InvalidInputError(f"region field ids must be unique, got {ids}")
        if self.spec_id < 0:
            raise InvalidInputError(f"spec ids are positive, got {self.spec_id}")

    def __add__(self, other: RegionSpec) -> RegionSpec:
        if not isinstance(other, RegionSpec):
            return NotImplemented
        return RegionSpec(self.fields + other.fields)

    def with_id(self, spec_id: int) -> RegionSpec:
        return replace(self, spec_id=spec_id)

    def to_proto(self) -> memwal_pb2.RegionSpec:
        return memwal_pb2.RegionSpec(spec_id=self.spec_id,
                                     fields=[f.to_proto() for f in self.fields])

    @classmethod
    def from_proto(cls, pb: memwal_pb2.RegionSpec) -> RegionSpec:
        return cls(tuple(RegionField.from_proto(f) for f in pb.fields), pb.spec_id)

    # ---------------------------------------------------------------- constructors
    @classmethod
    def identity(cls, column: str, *, field_id: str | None = None) -> RegionSpec:
        return cls._one("identity", [column], field_id)

    @classmethod
    def year(cls, column: str, *, field_id: str | None = None) -> RegionSpec:
        return cls._one("year", [column], field_id, result_type="int32")

    @classmethod
    def month(cls, column: str, *, field_id: str | None = None) -> RegionSpec:
        return cls._one("month", [column], field_id, result_type="int32")

    @classmethod
    def day(cls, column: str, *, field_id: str | None = None) -> RegionSpec:
        return cls._one("day", [column], field_id, result_type="int32")

    @classmethod
    def hour(cls, column: str, *, field_id: str | None = None) -> RegionSpec:
        return cls._one("hour", [column], field_id, result_type="int32")

    @classmethod
    def bucket(cls, column: str, num_buckets: int, *,
               field_id: str | None = None) -> RegionSpec:
        return cls._one("bucket", [column], field_id, result_type="int32",
                        parameters={"num_buckets": str(num_buckets)})

    @classmethod
    def multi_bucket(cls, columns: Sequence[str], num_buckets: int, *,
                     field_id: str | None = None) -> RegionSpec:
        if isinstance(columns, str) or len(columns) < 1:
            raise InvalidInputError("multi_bucket takes a list of one or more column names")
        return cls._one("multi_bucket", list(columns), field_id, result_type="int32",
                        parameters={"num_buckets": str(num_buckets)})

    @classmethod
    def truncate(cls, column: str, width: int, *, field_id: str | None = None) -> RegionSpec:
        return cls._one("truncate", [column], field_id, parameters={"width": str(width)})

    @classmethod
    def expression(cls, sql: str, columns: Sequence[str], result_type: str, *,
                   field_id: str = "expr") -> RegionSpec:
        if isinstance(columns, str):
            raise InvalidInputError("expression takes a list of column names (col0, col1…)")
        if not sql or not sql.strip():
            raise InvalidInputError("a region expression must not be empty")
        return cls((RegionField(field_id, tuple(columns), expression=sql.strip(),
                                result_type=result_type),))

    @classmethod
    def _one(cls, transform: str, columns: list[str], field_id: str | None, *,
             result_type: str = "", parameters: Mapping[str, str] | None = None) -> RegionSpec:
        if field_id is None:
            field_id = "_".join([transform, *(_ident(c) for c in columns)])
        return cls((RegionField(field_id, tuple(columns), transform=transform,
                                result_type=result_type, parameters=parameters or {}),))

    # ---------------------------------------------------------------- binding
    def bind(self, schema: LanceSchema) -> RegionSpec:
        """This spec with source columns resolved to ``schema``'s field ids.

        Transforms whose result has the source's type (identity, truncate) take the
        source's logical type as their ``result_type``.
        """
        by_name = {f.name: f for f in schema.fields}
        bound = []
        for f in self.fields:
            ids, types = [], []
            for name in f.source_columns:
                column = by_name.get(name)
                if column is None:
                    raise SchemaError(
                        f"region field {f.field_id!r}: column {name!r} does not exist; "
                        f"columns: {', '.join(by_name)}")
                if column.children and column.logical_type != "fixed_size_binary":
                    raise SchemaError(
                        f"region field {f.field_id!r}: column {name!r} is nested "
                        f"({column.logical_type}); regions are derived from flat columns")
                ids.append(column.id)
                types.append(column.logical_type)
            result_type = f.result_type or types[0]
            bound.append(replace(f, source_ids=tuple(ids), result_type=result_type))
        return replace(self, fields=tuple(bound))

    def source_names(self, schema: LanceSchema) -> list[str | None]:
        """Every source column of every field, in order, by name in ``schema`` (None when
        the field id is gone: a dropped column reads as NULL)."""
        by_id = {f.id: f.name for f in schema.fields}
        return [by_id.get(i) for f in self.fields for i in f.source_ids]


def _ident(name: str) -> str:
    cleaned = re.sub(r"[^A-Za-z0-9_]", "_", name)
    return cleaned if cleaned and not cleaned[0].isdigit() else f"c_{cleaned}"
