"""The conflict rules, pair by pair: every (ours, theirs) combination of the 15 operations,
once where the winner touches what we touch and once where it does not.

Codes: C compatible, R rebase (merge deletion vectors), T retryable, I incompatible.
Rows are our operation, columns the winner's, both in :data:`ORDER`.
"""

from __future__ import annotations

import uuid
from dataclasses import replace

import pytest
from txn_samples import BASE, KINDS, data_file, deletion, frag, ours, theirs

from lance_sql.format.fragment import Fragment
from lance_sql.format.index import IndexMetadata
from lance_sql.table.txn.apply import _indices, _with_indices, apply_transaction
from lance_sql.table.txn.conflicts import (
    RULES,
    Compatible,
    Incompatible,
    Rebase,
    RebaseState,
    Retryable,
    check_pair,
    rebase_state,
    resolve,
    without_stale,
)
from lance_sql.table.txn.operations import (
    OPERATION_TYPES,
    Append,
    DataReplacement,
    DataReplacementGroup,
    Delete,
    MergedGeneration,
    Restore,
    Transaction,
    Update,
    UpdateConfig,
    UpdateMap,
)

ORDER = ["Append", "Delete", "Overwrite", "CreateIndex", "Rewrite", "Merge", "Restore",
         "ReserveFragments", "Update", "Project", "UpdateConfig", "DataReplacement",
         "UpdateMemWalState", "Clone", "UpdateBases"]

#               Ap De Ov CI Rw Me Rs RF Up Pr UC DR MW Cl UB
OVERLAP = """
Append          C  C  I  C  C  C  I  C  C  C  C  C  I  C  C
Delete          C  R  I  C  T  T  I  C  R  C  C  T  I  C  C
Overwrite       C  C  I  C  C  C  C  C  C  C  I  C  I  C  C
CreateIndex     C  C  I  C  T  C  I  C  C  C  C  T  I  C  C
Rewrite         C  T  I  T  T  T  I  C  T  C  C  T  C  C  C
Merge           T  T  I  C  T  T  I  C  T  I  C  T  I  C  C
Restore         C  C  C  C  C  C  C  C  C  C  C  C  I  C  C
ReserveFragments C C  I  C  C  C  I  C  C  C  C  C  C  C  C
Update          C  R  I  C  T  T  I  C  I  C  C  T  I  C  C
Project         C  C  I  C  C  T  I  C  C  T  C  C  I  C  C
UpdateConfig    C  C  I  C  C  C  C  C  C  C  I  C  C  C  C
DataReplacement C  C  I  T  T  C  I  C  C  C  C  T  I  C  C
UpdateMemWalState I I I  C  C  I  I  C  C  I  C  I  I  I  C
Clone           C  C  C  C  C  C  C  C  C  C  C  C  C  C  C
UpdateBases     C  C  C  C  C  C  C  C  C  C  C  C  C  C  I
"""

#               Ap De Ov CI Rw Me Rs RF Up Pr UC DR MW Cl UB
DISJOINT = """
Append          C  C  I  C  C  C  I  C  C  C  C  C  I  C  C
Delete          C  C  I  C  C  T  I  C  C  C  C  C  I  C  C
Overwrite       C  C  C  C  C  C  C  C  C  C  C  C  I  C  C
CreateIndex     C  C  I  C  C  C  I  C  C  C  C  C  I  C  C
Rewrite         C  C  I  C  C  T  I  C  C  C  C  C  C  C  C
Merge           T  T  I  C  T  T  I  C  T  I  C  T  I  C  C
Restore         C  C  C  C  C  C  C  C  C  C  C  C  I  C  C
ReserveFragments C C  I  C  C  C  I  C  C  C  C  C  C  C  C
Update          C  C  I  C  C  T  I  C  C  C  C  C  C  C  C
Project         C  C  I  C  C  T  I  C  C  T  C  C  I  C  C
UpdateConfig    C  C  I  C  C  C  C  C  C  C  C  C  C  C  C
DataReplacement C  C  I  C  C  C  I  C  C  C  C  C  I  C  C
UpdateMemWalState I I I  C  C  I  I  C  C  I  C  I  C  I  C
Clone           C  C  C  C  C  C  C  C  C  C  C  C  C  C  C
UpdateBases     C  C  C  C  C  C  C  C  C  C  C  C  C  C  C
"""

CODES = {"C": Compatible, "R": Rebase, "T": Retryable, "I": Incompatible}


def _grid(text: str) -> dict[tuple[str, str], str]:
    out = {}
    for line in text.strip().splitlines():
        name, *codes = line.split()
        assert len(codes) == len(ORDER), name
        for col, code in zip(ORDER, codes, strict=True):
            out[(name, col)] = code
    return out


PAIRS = [(a, b) for a in ORDER for b in ORDER]


def test_every_pair_has_exactly_one_rule() -> None:
    assert sorted(ORDER) == sorted(KINDS)
    assert set(RULES) == set(OPERATION_TYPES)
    for row in RULES.values():
        assert set(row) == set(OPERATION_TYPES)


def _state(kind: str) -> RebaseState:
    return rebase_state(Transaction(BASE.version, ours(kind)), BASE, affected_rows_known=True)


@pytest.mark.parametrize(("mine", "other"), PAIRS, ids=[f"{a}-vs-{b}" for a, b in PAIRS])
def test_matrix_overlapping(mine: str, other: str) -> None:
    expected = CODES[_grid(OVERLAP)[(mine, other)]]
    decision = check_pair(ours(mine), theirs(other, overlap=True), _state(mine))
    assert isinstance(decision, expected), decision


@pytest.mark.parametrize(("mine", "other"), PAIRS, ids=[f"{a}-vs-{b}" for a, b in PAIRS])
def test_matrix_disjoint(mine: str, other: str) -> None:
    expected = CODES[_grid(DISJOINT)[(mine, other)]]
    decision = check_pair(ours(mine), theirs(other, overlap=False), _state(mine))
    assert isinstance(decision, expected), decision


def test_delete_rebase_names_the_fragments_to_merge() -> None:
    decision = check_pair(ours("Delete"), theirs("Delete", True), _state("Delete"))
    assert decision == Rebase(frozenset({1}))


def test_delete_without_affected_rows_cannot_rebase() -> None:
    state = rebase_state(Transaction(3, ours("Delete")), BASE, affected_rows_known=False)
    assert isinstance(check_pair(ours("Delete"), theirs("Delete", True), state), Retryable)


def test_delete_whose_data_files_changed_is_retryable() -> None:
    """The winner rewrote columns of the fragment (Update in rewrite-columns mode)."""
    winner = Delete((BASE.fragments[1].__class__(1, (), 100, deletion(1)),), (), "x")
    assert isinstance(check_pair(ours("Delete"), winner, _state("Delete")), Retryable)


def test_delete_of_a_fragment_the_winner_removed_is_retryable() -> None:
    winner = Delete((), (1,), "id >= 0")
    assert isinstance(check_pair(ours("Delete"), winner, _state("Delete")), Retryable)
    mine = Delete((), (1,), "true")
    state = rebase_state(Transaction(3, mine), BASE, True)
    assert isinstance(check_pair(mine, theirs("Delete", True), state), Retryable)


def test_resolve_folds_in_order() -> None:
    txn = Transaction(3, ours("Delete"))
    state = _state("Delete")
    winners = [(4, Transaction(3, Append(()))), (5, Transaction(4, theirs("Delete", True)))]
    assert resolve(txn, winners, state) == Rebase(frozenset({1}))
    winners.append((6, Transaction(5, Restore(1))))
    decision = resolve(txn, winners, state)
    assert isinstance(decision, Incompatible) and "version 6" in decision.reason


@pytest.mark.parametrize("kind", ORDER)
def test_unreadable_winner_is_a_conflict(kind: str) -> None:
    decision = resolve(Transaction(3, ours(kind)), [(4, None)], _state(kind))
    assert isinstance(decision, Retryable) and "version 4" in decision.reason


@pytest.mark.parametrize("kind", [k for k in ORDER if k not in
                                  ("Restore", "Overwrite", "Clone", "UpdateConfig",
                                   "UpdateBases")])
def test_anything_that_changes_data_against_restore_is_incompatible(kind: str) -> None:
    assert isinstance(check_pair(ours(kind), Restore(1), _state(kind)), Incompatible)


def test_config_rules_follow_keys() -> None:
    a = UpdateConfig(config_updates=UpdateMap.of({"x": "1"}))
    b = UpdateConfig(config_updates=UpdateMap.of({"y": "1"}))
    c = UpdateConfig(config_updates=UpdateMap.of({"x": None}))
    d = UpdateConfig(table_metadata_updates=UpdateMap.of({"x": "1"}))
    state = RebaseState()
    assert isinstance(check_pair(a, b, state), Compatible)
    assert isinstance(check_pair(a, c, state), Incompatible)
    assert isinstance(check_pair(c, a, state), Incompatible)
    assert isinstance(check_pair(c, c, state), Compatible)  # deleting twice is harmless
    assert isinstance(check_pair(a, d, state), Compatible)  # table metadata is separate


# ------------------------------------------------------------- MemWAL mergers (Appendix 2)
A, B = uuid.UUID(int=10), uuid.UUID(int=11)


def _merge(region: uuid.UUID, generation: int, fragment: int) -> Update:
    """A merger's commit: new rows, and the region's generation recorded as merged."""
    return Update(new_fragments=(frag(10 + fragment, 5),),
                  merged_generations=(MergedGeneration(region, generation),))


@pytest.mark.parametrize(("winner", "expected"), [
    ((A, 6), Incompatible),   # raced on the same generation: abort, do not retry
    ((A, 7), Incompatible),   # a newer generation is merged: ours is superseded
    ((A, 5), Compatible),     # the previous generation: ours goes on top of it
    ((B, 9), Compatible),     # another region: regions never share keys
])
def test_concurrent_mergers(winner: tuple[uuid.UUID, int], expected: type) -> None:
    ours_op = _merge(A, 6, 1)
    decision = check_pair(ours_op, _merge(*winner, 2),
                          rebase_state(Transaction(BASE.version, ours_op), BASE,
                                       affected_rows_known=True))
    assert isinstance(decision, expected), decision
    if expected is Incompatible:
        assert "merged" in decision.reason


def test_index_build_racing_an_update_of_its_column_drops_those_fragments() -> None:
    """As in the reference: compatible, but the new index stops covering fragments whose
    indexed column the winner rewrote in place (their indexed values are stale)."""
    mine, winner = ours("CreateIndex"), theirs("Update", overlap=True)
    decision = check_pair(mine, winner, _state("CreateIndex"))
    assert decision == Compatible(frozenset({(1, 1)}))
    resolved = resolve(Transaction(BASE.version, mine), [(4, Transaction(3, winner))],
                       _state("CreateIndex"))
    assert resolved == decision
    [index] = without_stale(mine, decision.unindexed).new_indices
    assert index.fragment_ids == frozenset() and index.uuid == mine.new_indices[0].uuid
    other_field = replace(winner, fields_modified=(0,))
    assert check_pair(mine, other_field, _state("CreateIndex")) == Compatible()


def test_two_builds_of_one_index_name_conflict() -> None:
    mine = ours("CreateIndex")
    same_name = replace(theirs("CreateIndex", overlap=False), new_indices=tuple(
        replace(i, name=mine.new_indices[0].name) for i in
        theirs("CreateIndex", overlap=False).new_indices))
    assert isinstance(check_pair(mine, same_name, _state("CreateIndex")), Retryable)


def test_data_replacement_of_an_indexed_column_uncovers_those_fragments() -> None:
    split = tuple(Fragment(i, (data_file(f"a{i}", (0,)), data_file(f"b{i}", (1,))), 100)
                  for i in range(3))
    index = IndexMetadata.new("s_idx", [1], 3, [0, 1, 2])
    other = IndexMetadata.new("id_idx", [0], 3, [0, 1, 2])
    base = _with_indices(replace(BASE, fragments=split), (index, other))
    txn = Transaction(3, DataReplacement((DataReplacementGroup(1, data_file("r1", (1,))),)))
    after = {i.name: i.fragment_ids for i in _indices(apply_transaction(base, txn, 4, 0))}
    assert after == {"s_idx": frozenset({0, 2}), "id_idx": frozenset({0, 1, 2})}
