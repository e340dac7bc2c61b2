"""Conflict resolution: may our transaction go on top of what others committed meanwhile?

Pure: no I/O. For every ordered pair (our operation, the winner's operation) there is
exactly one rule in :data:`RULES`, returning a decision:

* :class:`Compatible` — rebuild the manifest on the newer version as is;
* :class:`Rebase` — compatible once our deletion vectors of ``merge_deletions``
  fragments absorb the winner's (the commit loop reads, merges, re-checks row overlap
  and writes the merged files: the I/O half of a rebase);
* :class:`Retryable` — cannot be rebased, but re-running the operation on the new
  version is expected to mean the same thing;
* :class:`Incompatible` — re-running could mean something different (e.g. the winner
  restored or overwrote the table).

The rules follow the transaction specification and, pair by pair, the reference
implementation. Deviations: none of lance_sql's own writers produce fragment-reuse
indices, so the rules about them reduce to the fragment-overlap checks. A winner
whose transaction is missing or cannot be decoded is a retryable conflict.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace

from lance_sql.format.fragment import Fragment
from lance_sql.format.manifest import Manifest
from lance_sql.table.txn.operations import (
    OPERATION_TYPES,
    Append,
    Clone,
    CreateIndex,
    DataReplacement,
    Delete,
    LegacyMemWal,
    Merge,
    Operation,
    Overwrite,
    Project,
    ReserveFragments,
    Restore,
    Rewrite,
    Transaction,
    Update,
    UpdateBases,
    UpdateConfig,
    UpdateMemWalState,
)


# ---------------------------------------------------------------------------- decisions
@dataclass(frozen=True)
class Compatible:
    """``unindexed``: (field id, fragment id) pairs a winner rewrote in place, which our
    CreateIndex must stop claiming to cover (its values there are stale)."""

    unindexed: frozenset[tuple[int, int]] = frozenset()


@dataclass(frozen=True)
class Rebase:
    """Compatible after merging the winners' deletion vectors of these fragments into ours."""

    merge_deletions: frozenset[int]


@dataclass(frozen=True)
class Retryable:
    """Our commit must be retried from the new version (redo the work)."""
    reason: str


@dataclass(frozen=True)
class Incompatible:
    """Our commit can never apply over theirs."""
    reason: str


Decision = Compatible | Rebase | Retryable | Incompatible
COMPATIBLE = Compatible()


@dataclass(frozen=True)
class RebaseState:
    """What the rules know about our side beyond the operation itself.

    ``initial``: the fragments our operation modifies, as they were at our read version.
    ``affected_rows_known``: whether the commit knows exactly which rows we deleted or
    updated (needed to merge deletion vectors with a concurrent delete/update).
    """

    initial: Mapping[int, Fragment] = field(default_factory=dict)
    affected_rows_known: bool = False


Rule = Callable[[Operation, Operation, RebaseState], Decision]


def modified_fragment_ids(op: Operation) -> frozenset[int]:
    """Existing fragments an operation changes or removes."""
    if isinstance(op, Delete):
        return frozenset(f.id for f in op.updated_fragments) | frozenset(op.deleted_fragment_ids)
    if isinstance(op, Update):
        return frozenset(f.id for f in op.updated_fragments) | frozenset(op.removed_fragment_ids)
    if isinstance(op, Rewrite):
        return op.old_fragment_ids
    if isinstance(op, DataReplacement):
        return frozenset(r.fragment_id for r in op.replacements)
    if isinstance(op, Merge):
        return frozenset(f.id for f in op.fragments)
    return frozenset()


def rebase_state(txn: Transaction, read_manifest: Manifest | None,
                 affected_rows_known: bool) -> RebaseState:
    """What rebasing ``txn`` needs: the fragments it modified as it read them."""
    ids = modified_fragment_ids(txn.operation)
    frags = read_manifest.fragments if read_manifest is not None else ()
    return RebaseState({f.id: f for f in frags if f.id in ids}, affected_rows_known)


# ---------------------------------------------------------------------- rule building
def ok(ours: Operation, theirs: Operation, state: RebaseState) -> Decision:
    """Rule: the two operations commute."""
    return COMPATIBLE


def retry(ours: Operation, theirs: Operation, state: RebaseState) -> Decision:
    """Rule: ours must be redone over theirs."""
    return Retryable(f"{ours.name} was preempted by a concurrent {theirs.name}; retry it")


def incompatible(ours: Operation, theirs: Operation, state: RebaseState) -> Decision:
    """Rule: ours can never follow theirs."""
    return Incompatible(f"{ours.name} is incompatible with a concurrent {theirs.name}")


def _retry_if(overlap: bool, ours: Operation, theirs: Operation, what: str) -> Decision:
    if overlap:
        return Retryable(f"{ours.name} and a concurrent {theirs.name} both changed {what}; "
                         "retry it")
    return COMPATIBLE


def fragments_overlap(ours: Operation, theirs: Operation, state: RebaseState) -> Decision:
    """Retryable when the winner rewrote, replaced or updated fragments we modify."""
    return _retry_if(bool(modified_fragment_ids(ours) & modified_fragment_ids(theirs)),
                     ours, theirs, "the same fragments")


def rows_overlap(ours: Operation, theirs: Operation, state: RebaseState) -> Decision:
    """Our delete/update against a concurrent delete/update.

    Disjoint fragments: compatible. Shared fragments whose data files the winner left
    alone: rebase by merging deletion vectors (if we know our affected rows).
    Anything else (the winner rewrote columns, removed a fragment, or we removed one
    it touched): retryable.
    """
    assert isinstance(ours, Delete | Update) and isinstance(theirs, Delete | Update)
    mine = modified_fragment_ids(ours)
    if isinstance(theirs, Delete):
        their_updated, their_removed = theirs.updated_fragments, theirs.deleted_fragment_ids
    else:
        their_updated, their_removed = theirs.updated_fragments, theirs.removed_fragment_ids
    touched = {f.id for f in their_updated} | set(their_removed)
    if not touched & mine:
        return COMPATIBLE
    if not state.affected_rows_known:
        return retry(ours, theirs, state)
    our_removed = set(ours.deleted_fragment_ids if isinstance(ours, Delete)
                      else ours.removed_fragment_ids)
    if touched & our_removed or set(their_removed) & mine:
        return _retry_if(True, ours, theirs, "whole fragments")
    merge = set()
    for frag in their_updated:
        initial = state.initial.get(frag.id)
        if initial is None:
            continue
        if frag.files != initial.files:
            return _retry_if(True, ours, theirs, f"the data files of fragment {frag.id}")
        if frag.deletion_file != initial.deletion_file:
            merge.add(frag.id)
    return Rebase(frozenset(merge)) if merge else COMPATIBLE


def _memwal_ids(mem_wals: Iterable[LegacyMemWal]) -> set[tuple[str, int]]:
    return {(m.region, m.generation) for m in mem_wals}


def update_vs_memwal(ours: Operation, theirs: Operation, state: RebaseState) -> Decision:
    """Rule: an Update merging MemWAL generations against a MemWAL state change."""
    assert isinstance(ours, Update) and isinstance(theirs, UpdateMemWalState)
    mine = {(str(m.region_id), m.generation) for m in ours.merged_generations}
    if mine & _memwal_ids(theirs.added + theirs.updated):
        return incompatible(ours, theirs, state)
    return COMPATIBLE


def memwal_vs_memwal(ours: Operation, theirs: Operation, state: RebaseState) -> Decision:
    """Rule: two MemWAL state changes; they conflict when they touch the same region."""
    assert isinstance(ours, UpdateMemWalState) and isinstance(theirs, UpdateMemWalState)
    mine = ours.added + ours.updated
    committed = theirs.added + theirs.updated
    if not mine or not committed:  # trimming flushed MemWALs goes with anything
        return COMPATIBLE
    if _memwal_ids(mine) & _memwal_ids(committed):
        return incompatible(ours, theirs, state)
    return COMPATIBLE


def memwal_vs_update(ours: Operation, theirs: Operation, state: RebaseState) -> Decision:
    """Rule: a MemWAL state change after an Update (fine unless the Update merged none)."""
    assert isinstance(theirs, Update)
    return COMPATIBLE if theirs.merged_generations else incompatible(ours, theirs, state)


def update_vs_update(ours: Operation, theirs: Operation, state: RebaseState) -> Decision:
    """Row overlap decides, except that a MemWAL merge aborts (no retry) when the winner
    already merged the same region's generation or a newer one: its rows are in the base
    table, or superseded by newer ones (the spec's merger rule)."""
    assert isinstance(ours, Update) and isinstance(theirs, Update)
    done: dict = {}
    for m in theirs.merged_generations:
        done[m.region_id] = max(done.get(m.region_id, 0), m.generation)
    for m in ours.merged_generations:
        if done.get(m.region_id, 0) >= m.generation:
            return Incompatible(
                f"region {m.region_id}: generation {done[m.region_id]} was merged by a "
                f"concurrent commit, so generation {m.generation} is merged or superseded")
    return rows_overlap(ours, theirs, state)


def index_vs_index(ours: Operation, theirs: Operation, state: RebaseState) -> Decision:
    """Indices have distinct UUIDs; two fragment-reuse indices collide, and so do two
    builds of an index of the same name (the later would silently replace the other)."""
    assert isinstance(ours, CreateIndex) and isinstance(theirs, CreateIndex)
    reuse = "__lance_frag_reuse"
    both = any(i.name == reuse for i in ours.new_indices) and any(
        i.name == reuse for i in theirs.new_indices)
    if both:
        return _retry_if(both, ours, theirs, "the fragment reuse index")
    names = {i.name for i in ours.new_indices} & {i.name for i in theirs.new_indices}
    return _retry_if(bool(names - {reuse}), ours, theirs, f"indices named {sorted(names)}")


def index_vs_update(ours: Operation, theirs: Operation, state: RebaseState) -> Decision:
    """Compatible; but fragments whose indexed columns the update rewrote in place are no
    longer covered by our new indices (their indexed values are stale)."""
    assert isinstance(ours, CreateIndex) and isinstance(theirs, Update)
    modified = set(theirs.fields_modified)
    updated = {f.id for f in theirs.updated_fragments}
    stale = frozenset(
        (field_id, frag) for index in ours.new_indices for field_id in index.fields
        if field_id in modified for frag in (index.fragment_ids or ()) if frag in updated)
    return Compatible(stale) if stale else COMPATIBLE


def without_stale(op: CreateIndex, unindexed: frozenset[tuple[int, int]]) -> CreateIndex:
    """``op`` whose new indices no longer cover the (field, fragment) pairs given."""
    indices = []
    for index in op.new_indices:
        gone = {frag for field_id, frag in unindexed if field_id in index.fields}
        if gone and index.fragment_ids is not None:
            index = index.with_fragments(index.fragment_ids - gone)
        indices.append(index)
    return replace(op, new_indices=tuple(indices))


def _indexed_fragments(op: CreateIndex) -> set[int] | None:
    ids: set[int] = set()
    for index in op.new_indices:
        if index.fragment_ids is None:
            return None
        ids |= index.fragment_ids
    return ids


def index_vs_rewrite(ours: Operation, theirs: Operation, state: RebaseState) -> Decision:
    """An index over fragments a rewrite replaced would point at rows that moved."""
    index, rewrite = (ours, theirs) if isinstance(ours, CreateIndex) else (theirs, ours)
    assert isinstance(index, CreateIndex) and isinstance(rewrite, Rewrite)
    covered = _indexed_fragments(index)
    overlap = covered is None or bool(covered & rewrite.old_fragment_ids)
    return _retry_if(overlap, ours, theirs, "fragments an index covers")


def index_vs_replacement(ours: Operation, theirs: Operation, state: RebaseState) -> Decision:
    """Replacing the data of an indexed field invalidates the new index."""
    index, repl = (ours, theirs) if isinstance(ours, CreateIndex) else (theirs, ours)
    assert isinstance(index, CreateIndex) and isinstance(repl, DataReplacement)
    indexed = {f for i in index.new_indices for f in i.fields}
    replaced = {f for r in repl.replacements for f in r.new_file.fields}
    return _retry_if(bool(indexed & replaced), ours, theirs, "indexed fields")


def replacement_vs_replacement(ours: Operation, theirs: Operation,
                               state: RebaseState) -> Decision:
    """Rule: two data replacements conflict when they replace the same fields of a fragment."""
    assert isinstance(ours, DataReplacement) and isinstance(theirs, DataReplacement)
    overlap = any(a.fragment_id == b.fragment_id and set(a.new_file.fields) & set(b.new_file.fields)
                  for a in ours.replacements for b in theirs.replacements)
    return _retry_if(overlap, ours, theirs, "the same columns of the same fragments")


def _upserts(op: Operation) -> frozenset[str]:
    if isinstance(op, Overwrite):
        return frozenset(op.config_upsert_values)
    if isinstance(op, UpdateConfig) and op.config_updates is not None:
        return op.config_updates.upserted
    return frozenset()


def _deletes(op: Operation) -> frozenset[str]:
    if isinstance(op, UpdateConfig) and op.config_updates is not None:
        return op.config_updates.deleted
    return frozenset()


def _config_keys_clash(ours: Operation, theirs: Operation) -> bool:
    a, b = _upserts(ours), _upserts(theirs)
    return bool(a & (b | _deletes(theirs)) or b & (a | _deletes(ours)))


def config_keys(ours: Operation, theirs: Operation, state: RebaseState) -> Decision:
    """Overwrite/UpdateConfig pairs clash when one sets a config key the other sets or
    deletes; UpdateConfig pairs also when both edit schema metadata or one field's."""
    if _config_keys_clash(ours, theirs):
        return incompatible(ours, theirs, state)
    if isinstance(ours, UpdateConfig) and isinstance(theirs, UpdateConfig):
        both_schema = (ours.schema_metadata_updates is not None
                       and theirs.schema_metadata_updates is not None)
        same_field = set(ours.field_metadata_updates) & set(theirs.field_metadata_updates)
        if both_schema or same_field:
            return incompatible(ours, theirs, state)
    return COMPATIBLE


def config_vs_overwrite(ours: Operation, theirs: Operation, state: RebaseState) -> Decision:
    """Schema or field metadata edits cannot survive an overwrite (new schema)."""
    assert isinstance(ours, UpdateConfig)
    if ours.schema_metadata_updates is not None or ours.field_metadata_updates:
        return incompatible(ours, theirs, state)
    return config_keys(ours, theirs, state)


def bases_vs_bases(ours: Operation, theirs: Operation, state: RebaseState) -> Decision:
    """Rule: two base-path additions conflict on a shared id, name or path."""
    assert isinstance(ours, UpdateBases) and isinstance(theirs, UpdateBases)
    for a in ours.new_bases:
        for b in theirs.new_bases:
            if (a.id != 0 and a.id == b.id) or (a.name is not None and a.name == b.name) \
                    or a.path == b.path:
                return incompatible(ours, theirs, state)
    return COMPATIBLE


# ---------------------------------------------------------------------------- the table
def _row(default: Rule, **special: Rule) -> dict[type, Rule]:
    by_name = {t.__name__: t for t in OPERATION_TYPES}
    row = {t: default for t in OPERATION_TYPES}
    for name, rule in special.items():
        row[by_name[name]] = rule
    return row


_DELETE_ROW = dict(
    Rewrite=fragments_overlap, DataReplacement=fragments_overlap,
    Delete=rows_overlap, Update=rows_overlap, Merge=retry,
    Overwrite=incompatible, Restore=incompatible,
)

RULES: dict[type, dict[type, Rule]] = {
    Append: _row(ok, Overwrite=incompatible, Restore=incompatible,
                 UpdateMemWalState=incompatible),
    Delete: _row(ok, **_DELETE_ROW, UpdateMemWalState=incompatible),
    Update: _row(ok, **{**_DELETE_ROW, "Update": update_vs_update},
                 UpdateMemWalState=update_vs_memwal),
    CreateIndex: _row(ok, CreateIndex=index_vs_index, Rewrite=index_vs_rewrite,
                      Update=index_vs_update, DataReplacement=index_vs_replacement,
                      Overwrite=incompatible, Restore=incompatible,
                      UpdateMemWalState=incompatible),
    Rewrite: _row(ok, Delete=fragments_overlap, Update=fragments_overlap,
                  Rewrite=fragments_overlap, DataReplacement=fragments_overlap, Merge=retry,
                  CreateIndex=index_vs_rewrite, Overwrite=incompatible, Restore=incompatible),
    Overwrite: _row(ok, Overwrite=config_keys, UpdateConfig=config_keys,
                    UpdateMemWalState=incompatible),
    DataReplacement: _row(ok, CreateIndex=index_vs_replacement, Rewrite=fragments_overlap,
                          DataReplacement=replacement_vs_replacement, Overwrite=incompatible,
                          Restore=incompatible, UpdateMemWalState=incompatible),
    Merge: _row(retry, CreateIndex=ok, ReserveFragments=ok, Clone=ok, UpdateConfig=ok,
                UpdateBases=ok, Overwrite=incompatible, Restore=incompatible,
                Project=incompatible, UpdateMemWalState=incompatible),
    Restore: _row(ok, UpdateMemWalState=incompatible),
    ReserveFragments: _row(ok, Overwrite=incompatible, Restore=incompatible),
    Project: _row(ok, Merge=retry, Project=retry, Overwrite=incompatible,
                  Restore=incompatible, UpdateMemWalState=incompatible),
    UpdateConfig: _row(ok, Overwrite=config_vs_overwrite, UpdateConfig=config_keys),
    UpdateMemWalState: _row(incompatible, UpdateMemWalState=memwal_vs_memwal,
                            Update=memwal_vs_update, UpdateConfig=ok, Rewrite=ok,
                            CreateIndex=ok, ReserveFragments=ok, UpdateBases=ok),
    Clone: _row(ok),
    UpdateBases: _row(ok, UpdateBases=bases_vs_bases),
}


def check_pair(ours: Operation, theirs: Operation, state: RebaseState) -> Decision:
    """The one rule for this pair of operation types."""
    return RULES[type(ours)][type(theirs)](ours, theirs, state)


def resolve(txn: Transaction, winners: Iterable[tuple[int, Transaction | None]],
            state: RebaseState) -> Decision:
    """Fold the rules over every version committed since our read version, in order.

    The first retryable or incompatible decision wins; rebases accumulate.
    """
    merge: set[int] = set()
    unindexed: set[tuple[int, int]] = set()
    for version, winner in winners:
        if winner is None:
            return Retryable(
                f"version {version} has no readable transaction, so {txn.operation.name} "
                "cannot be proven compatible with it; retry it"
            )
        decision = check_pair(txn.operation, winner.operation, state)
        if isinstance(decision, Retryable | Incompatible):
            reason = f"{decision.reason} (committed as version {version})"
            return type(decision)(reason)
        if isinstance(decision, Rebase):
            merge |= decision.merge_deletions
        if isinstance(decision, Compatible):
            unindexed |= decision.unindexed
    if merge:
        return Rebase(frozenset(merge))
    return Compatible(frozenset(unindexed)) if unindexed else COMPATIBLE
