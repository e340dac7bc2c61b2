"""One default file format: every layer that can create files or tables agrees on it."""

from __future__ import annotations

import pyarrow as pa

from lance_sql.format.datafile import DEFAULT_DATA_FORMAT
from lance_sql.format.naming import ManifestNaming
from lance_sql.format.schema import LanceSchema
from lance_sql.io.memory import MemoryStore
from lance_sql.table.txn.apply import apply_transaction
from lance_sql.table.txn.commit import commit_transaction
from lance_sql.table.txn.operations import Overwrite, Transaction
from lance_sql.table.write.fragments import write_fragments

DATA = pa.table({"id": pa.array([1, 2, 3], pa.int64())})


def _fragments(store: MemoryStore):
    schema = LanceSchema.from_arrow(DATA.schema)
    return schema, write_fragments(store, schema, DATA.to_reader())


def test_default_is_the_reference_default() -> None:
    assert DEFAULT_DATA_FORMAT == "2.2"


def test_helpers_that_omit_the_format_write_the_default() -> None:
    store = MemoryStore()
    schema, fragments = _fragments(store)
    files = [f for frag in fragments for f in frag.files]
    assert files and all(f.version_string == DEFAULT_DATA_FORMAT for f in files)

    txn = Transaction(read_version=0, operation=Overwrite(tuple(fragments), schema))
    assert apply_transaction(None, txn, 1, 0).data_format == DEFAULT_DATA_FORMAT
    manifest = commit_transaction(store, None, ManifestNaming.V2, txn)
    assert manifest.data_format == DEFAULT_DATA_FORMAT
