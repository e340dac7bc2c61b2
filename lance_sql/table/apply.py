"""Applying a transaction to a manifest: pure, no I/O.

``apply_transaction(previous, txn, version, timestamp_ns)`` returns the manifest of
the new version. New fragments receive ids after ``max_fragment_id`` (which only
ever grows, so ids are never reused), and feature flags are recomputed from the
result.
"""

from __future__ import annotations

from dataclasses import replace
from functools import singledispatch

from lance_sql.errors import InvalidInputError, NotFoundError
from lance_sql.format.feature_flags import STABLE_ROW_IDS, flags_for
from lance_sql.format.fragment import Fragment
from lance_sql.format.manifest import Manifest
from lance_sql.table.operations import Append, Delete, Overwrite, Transaction


def apply_transaction(
    previous: Manifest | None,
    txn: Transaction,
    version: int,
    timestamp_ns: int,
    *,
    transaction_file: str = "",
    data_format: str = "2.0",
    stable_row_ids: bool = False,
) -> Manifest:
    """The manifest at ``version`` after ``txn`` on top of ``previous``.

    ``data_format`` and ``stable_row_ids`` only matter when ``previous`` is None
    (table creation); later versions inherit them.
    """
    if previous is None and not isinstance(txn.operation, Overwrite):
        raise NotFoundError("the table does not exist yet; create it with mode='create'")
    manifest = _apply(txn.operation, previous, data_format)
    stable = stable_row_ids if previous is None else previous.uses_stable_row_ids
    reader, writer = flags_for(
        has_deletion_files=any(f.deletion_file is not None for f in manifest.fragments),
        stable_row_ids=stable,
        has_config=bool(manifest.config),
        has_base_paths=bool(manifest.base_paths),
    )
    if previous is not None:
        # Keep flags we do not derive (e.g. ones a newer writer set and we tolerate).
        derived_mask = 1 | STABLE_ROW_IDS | 8 | 16
        reader |= previous.reader_feature_flags & ~derived_mask
        writer |= previous.writer_feature_flags & ~derived_mask
    return replace(
        manifest,
        version=version,
        timestamp_ns=timestamp_ns,
        transaction_file=transaction_file,
        reader_feature_flags=reader,
        writer_feature_flags=writer,
        tag=txn.tag,
    )


def _assign_ids(
    previous: Manifest | None, fragments: tuple[Fragment, ...]
) -> tuple[tuple[Fragment, ...], int | None]:
    """Give new fragments ids; ``max_fragment_id`` is a high-water mark that never drops.

    Overwrite continues after the mark too (pylance 14 does), so a row address never
    names a row of an older version's fragment.
    """
    next_id = 0 if previous is None else previous.next_fragment_id()
    assigned = tuple(f.with_id(next_id + i) for i, f in enumerate(fragments))
    max_id = previous.max_fragment_id if previous is not None else None
    if assigned:
        max_id = assigned[-1].id if max_id is None else max(max_id, assigned[-1].id)
    return assigned, max_id


@singledispatch
def _apply(op: object, previous: Manifest | None, data_format: str) -> Manifest:
    raise InvalidInputError(f"cannot apply operation {type(op).__name__}")


@_apply.register
def _(op: Append, previous: Manifest | None, data_format: str) -> Manifest:
    assert previous is not None
    new, max_id = _assign_ids(previous, op.fragments)
    return replace(previous, fragments=previous.fragments + new, max_fragment_id=max_id)


@_apply.register
def _(op: Delete, previous: Manifest | None, data_format: str) -> Manifest:
    assert previous is not None
    updated = {f.id: f for f in op.updated_fragments}
    removed = set(op.deleted_fragment_ids)
    existing = {f.id for f in previous.fragments}
    missing = (set(updated) | removed) - existing
    if missing:
        raise NotFoundError(f"delete refers to fragments {sorted(missing)} that do not exist")
    fragments = tuple(
        updated.get(f.id, f) for f in previous.fragments if f.id not in removed
    )
    return replace(previous, fragments=fragments)


@_apply.register
def _(op: Overwrite, previous: Manifest | None, data_format: str) -> Manifest:
    new, max_id = _assign_ids(previous, op.fragments)
    config = dict(previous.config) if previous is not None else {}
    config.update(op.config_upsert_values)
    if previous is None:
        return Manifest(
            schema=op.schema,
            fragments=new,
            version=0,
            data_format=data_format,
            max_fragment_id=max_id,
            config=config,
            base_paths=op.initial_bases,
        )
    return replace(
        previous,
        schema=op.schema,
        fragments=new,
        max_fragment_id=max_id,
        config=config,
        index_section=None,
    )
