"""What each version's transaction was, for history listings (``versions()``, SQL's
``table_versions``)."""

from __future__ import annotations

from lance_sql.io.store import ObjectStore
from lance_sql.table.meta.versions import VersionRef, load_transaction_bytes
from lance_sql.table.txn.operations import Transaction


def operation_of(store: ObjectStore, ref: VersionRef) -> str | None:
    """The name of the operation that committed ``ref`` (``append``, ``delete``, ...);
    None when its transaction file is missing or unreadable."""
    data = load_transaction_bytes(store, ref)
    return Transaction.operation_name(data) if data else None
