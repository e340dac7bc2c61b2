"""Maintenance methods of ``LanceDataset``, named like pylance's, as a mixin.

Each is a thin wrapper over :mod:`maintenance`, :mod:`schema_evolution`, :mod:`clone`
and :mod:`cleanup`: it commits on top of the latest version and, like pylance, moves
the dataset object to the version it committed.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from lance_sql.errors import InvalidInputError
from lance_sql.format.fragment import BasePath
from lance_sql.format.index import IndexMetadata
from lance_sql.format.manifest import Manifest
from lance_sql.table import index as index_mod
from lance_sql.table.meta.versions import VersionRef
from lance_sql.table.ops import cleanup as cleanup_mod
from lance_sql.table.ops import clone as clone_mod
from lance_sql.table.ops import maintenance, schema_evolution
from lance_sql.table.ops import update as update_mod
from lance_sql.table.ops.merge_insert import MergeInsertBuilder
from lance_sql.table.txn.operations import CreateIndex, Transaction, UpdateBases

if TYPE_CHECKING:
    from lance_sql.table.dataset import LanceDataset


class Optimizer:
    """``ds.optimize``: compaction and index optimisation."""

    def __init__(self, dataset: LanceDataset) -> None:
        self._ds = dataset

    def compact_files(self, **options: Any) -> maintenance.CompactionMetrics:
        """Rewrite small / deletion-heavy fragments; see :func:`maintenance.compact_files`."""
        return self._ds.compact_files(**options)

    def optimize_indices(self, **_: Any) -> None:
        """Fold fragments added since each BTREE index was built into a new index."""
        index_mod.optimize_indices(self._ds)


class MaintenanceMixin:
    """Mixed into ``LanceDataset``; relies on its ``_latest_for_write``/``_commit``."""

    def _moved_to(self: LanceDataset, manifest: Manifest | None) -> None:  # type: ignore[misc]
        if manifest is not None:
            self._ref = VersionRef(manifest.version, self._ref.naming)
            self._manifest = manifest

    # -- compaction ---------------------------------------------------------------------
    @property
    def optimize(self: LanceDataset) -> Optimizer:  # type: ignore[misc]
        return Optimizer(self)

    def compact_files(self: LanceDataset, **options: Any) -> maintenance.CompactionMetrics:  # type: ignore[misc]
        metrics, manifest = maintenance.compact_files(self, **options)
        self._moved_to(manifest)
        return metrics

    # -- schema evolution ---------------------------------------------------------------
    def add_columns(self: LanceDataset, transforms: Any,  # type: ignore[misc]
                    read_columns: Sequence[str] | None = None,
                    reader_schema: pa.Schema | None = None,
                    batch_size: int | None = None) -> None:
        """New columns from SQL expressions (``{"c": "a * 3"}``), Arrow data aligned with
        the rows, a function of each batch, or Arrow fields (all NULL, metadata only)."""
        self._moved_to(schema_evolution.add_columns(self, transforms, read_columns,
                                                    reader_schema))

    def drop_columns(self: LanceDataset, columns: Sequence[str]) -> None:  # type: ignore[misc]
        self._moved_to(schema_evolution.drop_columns(self, columns))

    def alter_columns(self: LanceDataset, *alterations: Mapping[str, Any]) -> None:  # type: ignore[misc]
        """Each alteration: ``{"path": ..., "name"?: ..., "nullable"?: ..., "data_type"?: ...}``."""
        self._moved_to(schema_evolution.alter_columns(self, alterations))

    # -- rows -------------------------------------------------------------------------
    def merge_insert(self: LanceDataset, on: str | Sequence[str]  # type: ignore[misc]
                     ) -> MergeInsertBuilder:
        """Upsert by key: ``.when_matched_update_all()``, ``.when_not_matched_insert_all()``,
        ``.when_not_matched_by_source_delete()``, then ``.execute(data)`` (pylance's API)."""
        return MergeInsertBuilder(self, on)

    def update(self: LanceDataset, updates: Mapping[str, str],  # type: ignore[misc]
               where: str | None = None, *, update_mode: str = "rewrite_rows") -> dict[str, int]:
        """Set columns to SQL expressions for the rows matching ``where`` (all rows when
        None); returns ``{"num_rows_updated": n}`` like pylance. ``update_mode`` is
        ``"rewrite_rows"`` or ``"rewrite_columns"`` (see :mod:`lance_sql.table.ops.update`)."""
        count, manifest = update_mod.update(self, updates, where, update_mode)
        self._moved_to(manifest)
        return {"num_rows_updated": count}

    # -- history ----------------------------------------------------------------------
    def restore(self: LanceDataset, version: int | str | None = None) -> None:  # type: ignore[misc]
        """Make this version (or ``version``) the newest one; pylance's ``restore()``."""
        target = self.version if version is None else self.checkout_version(version).version
        self._moved_to(maintenance.restore(self, target))

    def cleanup_old_versions(self: LanceDataset, older_than: timedelta | None = None,  # type: ignore[misc]
                             retain_versions: int | None = None, *, keep_tags: bool = True,
                             delete_unverified: bool = False,
                             error_if_tagged_old_versions: bool | None = None,
                             ) -> cleanup_mod.CleanupStats:
        """Remove versions older than ``older_than`` (default 14 days) and the files only
        they need. Tagged versions are kept (``keep_tags``); with ``keep_tags=False`` a
        tagged version in range is an error, as pylance's ``error_if_tagged_old_versions``."""
        del error_if_tagged_old_versions  # accepted for pylance compatibility
        return cleanup_mod.cleanup_old_versions(self, older_than, retain_versions,
                                                keep_tags=keep_tags,
                                                delete_unverified=delete_unverified)

    def shallow_clone(self: LanceDataset, target_path: str | os.PathLike[str],  # type: ignore[misc]
                      reference: int | str | None = None) -> LanceDataset:
        return self._clone(target_path, reference, shallow=True)

    def deep_clone(self: LanceDataset, target_path: str | os.PathLike[str],  # type: ignore[misc]
                   reference: int | str | None = None) -> LanceDataset:
        return self._clone(target_path, reference, shallow=False)

    def clone(self: LanceDataset, target: str | os.PathLike[str],  # type: ignore[misc]
              reference: int | str | None = None, *, shallow: bool = True) -> LanceDataset:
        return self._clone(target, reference, shallow=shallow)

    def _clone(self: LanceDataset, target: str | os.PathLike[str],  # type: ignore[misc]
               reference: int | str | None, *, shallow: bool) -> LanceDataset:
        store, manifest = clone_mod.clone(self, target, reference, shallow=shallow)
        return type(self)(os.fspath(target), manifest.version, store=store,
                          commit_config=self.commit_config)

    # -- config and metadata ----------------------------------------------------------
    def config(self: LanceDataset) -> dict[str, str]:  # type: ignore[misc]
        return dict(self._manifest.config)

    @property
    def table_metadata(self: LanceDataset) -> dict[str, str]:  # type: ignore[misc]
        return dict(self._manifest.table_metadata)

    def update_config(self: LanceDataset, values: Mapping[str, str | None], *,  # type: ignore[misc]
                      replace: bool = False) -> dict[str, str]:
        """Set (or with None delete) config keys; returns the new config."""
        op = maintenance.config_update(values, replace=replace)
        self._moved_to(maintenance.update_config(self, op))
        return dict(self._manifest.config)

    def delete_config_keys(self: LanceDataset, keys: Iterable[str]) -> None:  # type: ignore[misc]
        self._moved_to(maintenance.update_config(self, maintenance.delete_keys(keys)))

    def update_metadata(self: LanceDataset, values: Mapping[str, str | None], *,  # type: ignore[misc]
                        replace: bool = False) -> dict[str, str]:
        """Edit the table metadata (manifest ``table_metadata``); returns it."""
        op = maintenance.table_metadata_update(values, replace=replace)
        self._moved_to(maintenance.update_config(self, op))
        return dict(self._manifest.table_metadata)

    def update_schema_metadata(self: LanceDataset, values: Mapping[str, str | None], *,  # type: ignore[misc]
                               replace: bool = False) -> dict[str, str]:
        op = maintenance.schema_metadata_update(values, replace=replace)
        self._moved_to(maintenance.update_config(self, op))
        return maintenance.decoded(self._manifest.schema.metadata)

    def replace_schema_metadata(self: LanceDataset, new_metadata: Mapping[str, str]) -> None:  # type: ignore[misc]
        self.update_schema_metadata(new_metadata, replace=True)

    def update_field_metadata(self: LanceDataset,  # type: ignore[misc]
                              field_updates: Mapping[str, Mapping[str, str | None]], *,
                              replace: bool = False) -> None:
        base, _ = self._latest_for_write()
        op = maintenance.field_metadata_update(base, field_updates, replace=replace)
        self._moved_to(maintenance.update_config(self, op))

    def replace_field_metadata(self: LanceDataset, field_name: str,  # type: ignore[misc]
                               new_metadata: Mapping[str, str]) -> None:
        self.update_field_metadata({field_name: new_metadata}, replace=True)

    # -- bases and index metadata -----------------------------------------------------
    def add_bases(self: LanceDataset, new_bases: Sequence[BasePath]) -> None:  # type: ignore[misc]
        if not all(isinstance(b, BasePath) for b in new_bases):
            raise InvalidInputError("add_bases takes lance_sql BasePath values")
        base, naming = self._latest_for_write()
        txn = Transaction(base.version, UpdateBases(tuple(new_bases)))
        self._moved_to(self._commit(base, naming, txn).manifest)

    # -- scalar indices -------------------------------------------------------------------
    def create_scalar_index(self: LanceDataset, column: str, index_type: str,  # type: ignore[misc]
                            name: str | None = None, *, replace: bool = False,
                            **_: Any) -> None:
        """Build a BTREE index of ``column`` (pylance's signature) and commit it."""
        index_mod.create_scalar_index(self, column, index_type, name, replace=replace)

    def list_indices(self: LanceDataset) -> list[dict]:  # type: ignore[misc]
        return index_mod.list_indices(self._manifest)

    def describe_indices(self: LanceDataset) -> list[index_mod.IndexDescription]:  # type: ignore[misc]
        return index_mod.describe_indices(self.store, self._manifest)

    def drop_index(self: LanceDataset, name: str) -> None:  # type: ignore[misc]
        index_mod.drop_index(self, name)

    def commit_index_metadata(self: LanceDataset, new: Sequence[IndexMetadata],  # type: ignore[misc]
                              removed: Sequence[IndexMetadata] = ()) -> None:
        """Commit a CreateIndex of ready-made index metadata (no index files are built)."""
        base, naming = self._latest_for_write()
        txn = Transaction(base.version, CreateIndex(tuple(new), tuple(removed)))
        self._moved_to(self._commit(base, naming, txn).manifest)
