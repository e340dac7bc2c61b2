"""Transactions as data: one frozen class per operation, plus the Transaction record.

Each operation converts to and from its protobuf oneof member; applying one to a
manifest is the pure function :func:`lance_sql.table.apply.apply_transaction`.
This module covers the operations the table core needs (Append, Delete,
Overwrite); the others of the transaction specification are added with the
transactions work and follow the same pattern.
"""

from __future__ import annotations

import uuid as uuidlib
from collections.abc import Mapping
from dataclasses import dataclass, field

from google.protobuf.message import DecodeError

from lance_sql.errors import FormatError, UnsupportedFeatureError
from lance_sql.format.fragment import BasePath, Fragment
from lance_sql.format.pb import transaction_pb2
from lance_sql.format.schema import LanceSchema


@dataclass(frozen=True)
class Append:
    """Add fragments; their ids are assigned when the manifest is built."""

    fragments: tuple[Fragment, ...]

    name = "append"

    def fill(self, pb: transaction_pb2.Transaction) -> None:
        pb.append.fragments.extend(f.to_proto() for f in self.fragments)

    @classmethod
    def from_proto(cls, pb: transaction_pb2.Transaction.Append) -> Append:
        return cls(tuple(Fragment.from_proto(f) for f in pb.fragments))


@dataclass(frozen=True)
class Delete:
    """Replace fragments' deletion files and drop fully deleted fragments."""

    updated_fragments: tuple[Fragment, ...]
    deleted_fragment_ids: tuple[int, ...]
    predicate: str

    name = "delete"

    def fill(self, pb: transaction_pb2.Transaction) -> None:
        pb.delete.updated_fragments.extend(f.to_proto() for f in self.updated_fragments)
        pb.delete.deleted_fragment_ids.extend(self.deleted_fragment_ids)
        pb.delete.predicate = self.predicate

    @classmethod
    def from_proto(cls, pb: transaction_pb2.Transaction.Delete) -> Delete:
        return cls(
            tuple(Fragment.from_proto(f) for f in pb.updated_fragments),
            tuple(pb.deleted_fragment_ids),
            pb.predicate,
        )


@dataclass(frozen=True)
class Overwrite:
    """Replace all data (and possibly the schema); also how a table is created."""

    fragments: tuple[Fragment, ...]
    schema: LanceSchema
    config_upsert_values: Mapping[str, str] = field(default_factory=dict)
    initial_bases: tuple[BasePath, ...] = ()

    name = "overwrite"

    def fill(self, pb: transaction_pb2.Transaction) -> None:
        op = pb.overwrite
        op.fragments.extend(f.to_proto() for f in self.fragments)
        op.schema.extend(self.schema.to_protos())
        for key, value in self.schema.metadata.items():
            op.schema_metadata[key] = value
        for key, value in self.config_upsert_values.items():
            op.config_upsert_values[key] = value
        op.initial_bases.extend(b.to_proto() for b in self.initial_bases)

    @classmethod
    def from_proto(cls, pb: transaction_pb2.Transaction.Overwrite) -> Overwrite:
        return cls(
            fragments=tuple(Fragment.from_proto(f) for f in pb.fragments),
            schema=LanceSchema.from_protos(pb.schema, dict(pb.schema_metadata)),
            config_upsert_values=dict(pb.config_upsert_values),
            initial_bases=tuple(BasePath.from_proto(b) for b in pb.initial_bases),
        )


Operation = Append | Delete | Overwrite

_DECODERS = {"append": Append, "delete": Delete, "overwrite": Overwrite}


@dataclass(frozen=True)
class Transaction:
    """What one commit read and what it changed."""

    read_version: int
    operation: Operation
    uuid: str = field(default_factory=lambda: str(uuidlib.uuid4()))
    tag: str = ""
    properties: Mapping[str, str] = field(default_factory=dict)

    def to_proto(self) -> transaction_pb2.Transaction:
        pb = transaction_pb2.Transaction(
            read_version=self.read_version,
            uuid=self.uuid,
            tag=self.tag,
            transaction_properties=dict(self.properties),
        )
        self.operation.fill(pb)
        return pb

    def encode(self) -> bytes:
        return self.to_proto().SerializeToString()

    @classmethod
    def decode(cls, data: bytes, path: str) -> Transaction:
        pb = transaction_pb2.Transaction()
        try:
            pb.ParseFromString(data)
        except DecodeError as exc:
            raise FormatError(f"{path}: corrupt transaction ({exc})") from exc
        kind = pb.WhichOneof("operation")
        decoder = _DECODERS.get(kind or "")
        if decoder is None:
            raise UnsupportedFeatureError(
                f"{path}: transaction operation {kind!r} is not supported yet"
            )
        return cls(
            read_version=pb.read_version,
            operation=decoder.from_proto(getattr(pb, kind)),
            uuid=pb.uuid,
            tag=pb.tag,
            properties=dict(pb.transaction_properties),
        )

    @staticmethod
    def operation_name(data: bytes) -> str | None:
        """The oneof name of a serialized transaction (for history listings)."""
        pb = transaction_pb2.Transaction()
        try:
            pb.ParseFromString(data)
        except DecodeError:
            return None
        return pb.WhichOneof("operation")
