"""Table maintenance built on transactions: compaction, restore, config and metadata.

``compact_files`` is a Rewrite: small neighbouring fragments (and fragments with many
deleted rows) are read, their live rows written to new fragments in the same order,
ids for those reserved with a ReserveFragments commit first, and the Rewrite replaces
each group in place, so row order is kept and deletions are materialised. A concurrent
delete or update of a rewritten fragment makes the Rewrite a retryable conflict.

Functions take a :class:`WriteContext` on the latest version and return the committed
manifest; ``LanceDataset`` calls them from its methods named like pylance's.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from lance_sql.errors import InvalidInputError, NotFoundError, UnsupportedFeatureError
from lance_sql.format.fragment import Fragment
from lance_sql.format.index import decode_index_section
from lance_sql.format.manifest import Manifest
from lance_sql.io.store import ObjectStore
from lance_sql.table.files.lineage import (
    FragmentLineage,
    attach_lineage,
    sequence_keys,
)
from lance_sql.table.files.reader import LINEAGE_COLUMNS
from lance_sql.table.index.remap import remap_indices
from lance_sql.table.read.scan import plan_scan, scan_fragment
from lance_sql.table.txn.operations import (
    ReserveFragments,
    Restore,
    Rewrite,
    RewriteGroup,
    UpdateConfig,
    UpdateMap,
)
from lance_sql.table.txn.writer import WriteContext
from lance_sql.table.write.fragments import FragmentWriter

DEFAULT_TARGET_ROWS = 1024 * 1024
DEFAULT_DELETION_THRESHOLD = 0.1


# ------------------------------------------------------------------------------ compaction
@dataclass(frozen=True)
class CompactionMetrics:
    """What a compaction did: fragments and files removed and added."""
    fragments_removed: int = 0
    fragments_added: int = 0
    files_removed: int = 0
    files_added: int = 0


def plan_compaction(
    manifest: Manifest,
    *,
    target_rows_per_fragment: int = DEFAULT_TARGET_ROWS,
    materialize_deletions: bool = True,
    materialize_deletions_threshold: float = DEFAULT_DELETION_THRESHOLD,
) -> list[tuple[Fragment, ...]]:
    """Groups of adjacent fragments worth rewriting (pure), planned as pylance plans them.

    A fragment is a candidate if (with ``materialize_deletions``) more than
    ``threshold`` of its rows are deleted (it is rewritten even alone), or if it is
    smaller than the target (rewritten only with neighbours). Runs of adjacent
    candidates that the same indexes cover form bins: an index follows a group's rows
    only when it covered all of its fragments, so mixing the unindexed fragments an
    append or a MemWAL merge adds into indexed ones left the index covering none. A bin
    is then cut where the rows so far reach the target and the rest can reach it too.
    """
    if target_rows_per_fragment <= 0:
        raise InvalidInputError("target_rows_per_fragment must be positive")
    covering = [entry.fragment_ids for entry in decode_index_section(manifest.index_section)
                if entry.fragment_ids is not None]

    def alone(f: Fragment) -> bool | None:
        """True: rewritten even alone; False: with neighbours only; None: not at all."""
        if materialize_deletions and f.physical_rows > 0 and (
                f.num_deleted_rows / f.physical_rows > materialize_deletions_threshold):
            return True
        return False if f.physical_rows < target_rows_per_fragment else None

    bins: list[list[tuple[Fragment, bool]]] = []
    current: list[tuple[Fragment, bool]] = []
    current_indexes: tuple[int, ...] = ()
    for frag in manifest.fragments:
        kind = alone(frag)
        if kind is None:
            if current:
                bins.append(current)
            current = []
            continue
        indexes = tuple(i for i, ids in enumerate(covering) if frag.id in ids)
        if current and indexes != current_indexes:
            bins.append(current)
            current = []
        current.append((frag, kind))
        current_indexes = indexes
    if current:
        bins.append(current)
    groups: list[tuple[Fragment, ...]] = []
    for found in bins:
        if len(found) == 1 and not found[0][1]:
            continue  # one small fragment: rewritten to itself
        groups.extend(_cut_for_size([f for f, _ in found], target_rows_per_fragment))
    return groups


def _cut_for_size(fragments: list[Fragment], target: int) -> list[tuple[Fragment, ...]]:
    """``fragments`` cut into groups of at least ``target`` rows each, where the rows
    left after a cut can make another such group (else the last group takes them)."""
    groups: list[tuple[Fragment, ...]] = []
    remaining = sum(f.num_rows for f in fragments)
    rows, start = 0, 0
    for i, frag in enumerate(fragments):
        rows += frag.num_rows
        remaining -= frag.num_rows
        if rows >= target and 0 < remaining and remaining >= target:
            groups.append(tuple(fragments[start : i + 1]))
            rows, start = 0, i + 1
    groups.append(tuple(fragments[start:]))
    return groups


def compact_files(
    ctx: WriteContext,
    *,
    target_rows_per_fragment: int | None = None,
    max_rows_per_group: int | None = None,
    materialize_deletions: bool | None = None,
    materialize_deletions_threshold: float | None = None,
    num_threads: int | None = None,
    batch_size: int | None = None,
    **unsupported: Any,
) -> tuple[CompactionMetrics, Manifest | None]:
    """Rewrite small or deletion-heavy fragments; returns metrics and the new manifest.

    Defaults come from the table config (``lance.compaction.*``), as in pylance.
    ``max_rows_per_group``, ``num_threads`` and ``batch_size`` are accepted for
    compatibility; they do not change the 2.0 files written.
    """
    given = {k: v for k, v in unsupported.items() if v is not None}
    if given:
        raise UnsupportedFeatureError(f"compact_files options not supported: {sorted(given)}")
    base = ctx.table
    cfg = base.config
    target = target_rows_per_fragment or int(
        cfg.get("lance.compaction.target_rows_per_fragment", DEFAULT_TARGET_ROWS))
    if materialize_deletions is None:
        materialize_deletions = cfg.get("lance.compaction.materialize_deletions",
                                        "true").lower() != "false"
    threshold = materialize_deletions_threshold
    if threshold is None:
        threshold = float(cfg.get("lance.compaction.materialize_deletions_threshold",
                                  DEFAULT_DELETION_THRESHOLD))
    groups = plan_compaction(base, target_rows_per_fragment=target,
                             materialize_deletions=materialize_deletions,
                             materialize_deletions_threshold=threshold)
    if not groups:
        return CompactionMetrics(), None
    writer = FragmentWriter(ctx.store, base.schema, max_rows_per_file=target,
                            data_format=base.data_format)
    with ctx.staging() as staged:
        staged.on_abort(writer.abort)
        new_groups = _rewrite_groups(ctx.store, base, groups, writer, target)
        staged.add(*(k for _, new in new_groups for frag in new for k in sequence_keys(frag)))
        total = sum(len(new) for _, new in new_groups)
        reserved = ctx.commit(ReserveFragments(total))
        top = reserved.max_fragment_id
        assert top is not None
        ids = iter(range(top - total + 1, top + 1))
        final = [(old, tuple(f.with_id(next(ids)) for f in new)) for old, new in new_groups]
        # BTREE indices over the rewritten fragments follow their rows to the new ones
        rewritten, index_keys = remap_indices(ctx.store, base, final)
        staged.add(*index_keys)
        rewrite = Rewrite(tuple(RewriteGroup(old, new) for old, new in final), rewritten)
        committed = ctx.commit(rewrite)
    metrics = CompactionMetrics(
        fragments_removed=sum(len(old) for old, _ in new_groups),
        fragments_added=total,
        # (a fragment's deletion file goes with it, counted as pylance counts it)
        files_removed=sum(len(f.files) + (f.deletion_file is not None)
                          for old, _ in new_groups for f in old),
        files_added=sum(len(f.files) for _, new in new_groups for f in new),
    )
    return metrics, committed


def _rewrite_groups(store: ObjectStore, base: Manifest, groups: list[tuple[Fragment, ...]],
                    writer: FragmentWriter, target: int
                    ) -> list[tuple[tuple[Fragment, ...], tuple[Fragment, ...]]]:
    """Each group's rows written to new fragments: one when the group holds less than
    twice the target (the planner cut it so, as pylance's does, and pylance writes it
    whole: 30 rows for a target of 25, not 25 and 5), else fragments of the target."""
    stable = base.uses_stable_row_ids
    data_names = [f.name for f in base.schema.fields]
    # Every column of the schema (dropped columns are left behind) and, on tables with
    # stable row ids, each row's id and versions, which the rewritten rows keep.
    plan = plan_scan(base, data_names + (list(LINEAGE_COLUMNS) if stable else []))
    out = []
    for group in groups:
        start = len(writer.fragments)
        rows = sum(f.num_rows for f in group)
        writer.max_rows_per_file = max(rows, 1) if rows < 2 * target else target
        lineage = []
        for frag in group:
            table = scan_fragment(store, base, frag, plan)
            if stable:
                lineage.append(FragmentLineage(*(table.column(n).to_numpy()
                                                 for n in LINEAGE_COLUMNS)))
                table = table.select(data_names)
            for batch in table.to_batches():
                if batch.num_rows:
                    writer.write(batch)
        writer.finish()  # one group's rows never share a file with the next group's
        new = tuple(writer.fragments[start:])
        if stable:
            new, _ = attach_lineage(store, base, new, FragmentLineage.concat(lineage))
        out.append((group, new))
    return out


# -------------------------------------------------------------------------------- restore
def restore(ctx: WriteContext, version: int) -> Manifest:
    """Commit the content of ``version`` as the newest version."""
    return ctx.commit(Restore(version))


# ------------------------------------------------------------------------ config/metadata
def _check_values(values: Mapping[str, str | None], what: str) -> dict[str, str | None]:
    if not isinstance(values, Mapping):
        raise InvalidInputError(f"{what} must be a dict of str -> str or None")
    for key, value in values.items():
        if not isinstance(key, str) or not (value is None or isinstance(value, str)):
            raise InvalidInputError(f"{what} must map str -> str or None, got {key!r}: "
                                    f"{value!r}")
    return dict(values)


def update_config(ctx: WriteContext, op: UpdateConfig) -> Manifest:
    """Commit the configuration or metadata change ``op``."""
    return ctx.commit(op)


def config_update(values: Mapping[str, str | None], *, replace: bool = False) -> UpdateConfig:
    """An UpdateConfig setting (None: deleting) table config keys; ``replace`` drops the others."""
    return UpdateConfig(config_updates=UpdateMap.of(_check_values(values, "config"),
                                                    replace=replace))


def table_metadata_update(values: Mapping[str, str | None], *,
                          replace: bool = False) -> UpdateConfig:
    """An UpdateConfig setting (None: deleting) table metadata keys."""
    return UpdateConfig(table_metadata_updates=UpdateMap.of(
        _check_values(values, "table metadata"), replace=replace))


def schema_metadata_update(values: Mapping[str, str | None], *,
                           replace: bool = False) -> UpdateConfig:
    """An UpdateConfig setting (None: deleting) schema metadata keys."""
    return UpdateConfig(schema_metadata_updates=UpdateMap.of(
        _check_values(values, "schema metadata"), replace=replace))


def field_metadata_update(manifest: Manifest,
                          updates: Mapping[str, Mapping[str, str | None]], *,
                          replace: bool = False) -> UpdateConfig:
    """Per-field edits, fields named by (dotted) path."""
    out = {}
    for name, values in updates.items():
        try:
            field_id = manifest.schema.field(name).id
        except NotFoundError:
            raise NotFoundError(f"cannot update metadata of {name!r}: no such field") from None
        out[field_id] = UpdateMap.of(_check_values(values, f"metadata of {name!r}"),
                                     replace=replace)
    return UpdateConfig(field_metadata_updates=out)


def delete_keys(keys: Iterable[str]) -> UpdateConfig:
    """An UpdateConfig deleting config ``keys``."""
    return config_update({k: None for k in keys})


def decoded(metadata: Mapping[str, bytes]) -> dict[str, str]:
    """Byte-valued metadata as text (undecodable bytes replaced)."""
    return {k: v.decode("utf-8", "replace") for k, v in metadata.items()}
