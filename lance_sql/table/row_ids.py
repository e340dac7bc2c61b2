"""Stable row ids for new fragments: the part of row lineage a commit needs.

On a table with stable row ids (reader/writer flag 2) every fragment carries the
sequence of its rows' ids, and new rows take ids from ``Manifest.next_row_id``
upwards. :func:`assign_row_ids` gives fragments that have no sequence yet a single
range segment, plus created-at / last-updated-at version sequences of one run, which
is what the reference writes for freshly written rows.

Hook for the row-lineage work: fragments that arrive with a sequence (rewrites, updates
that keep ids) are passed through untouched here; decoding partial sequences, filling
them up, and carrying per-row versions through updates and compaction belong there.
"""

from __future__ import annotations

from dataclasses import replace

from lance_sql.format.fragment import Fragment
from lance_sql.format.pb import rowids_pb2


def range_sequence(start: int, end: int) -> bytes:
    """A RowIdSequence of one ``[start, end)`` range segment."""
    seq = rowids_pb2.RowIdSequence()
    seq.segments.add().range.CopyFrom(rowids_pb2.U64Segment.Range(start=start, end=end))
    return seq.SerializeToString()


def version_sequence(start: int, end: int, version: int) -> bytes:
    """A RowDatasetVersionSequence giving every row of ``[start, end)`` one version."""
    seq = rowids_pb2.RowDatasetVersionSequence()
    run = seq.runs.add(version=version)
    run.span.range.CopyFrom(rowids_pb2.U64Segment.Range(start=start, end=end))
    return seq.SerializeToString()


def assign_row_ids(
    fragments: tuple[Fragment, ...], next_row_id: int, version: int
) -> tuple[tuple[Fragment, ...], int]:
    """Give fragments without a row-id sequence fresh ids; returns them and the next id."""
    out = []
    for frag in fragments:
        if frag.row_id_sequence is None:
            start, end = next_row_id, next_row_id + frag.physical_rows
            versions = version_sequence(start, end, version)
            frag = replace(
                frag,
                row_id_sequence=range_sequence(start, end),
                created_at_version_sequence=frag.created_at_version_sequence or versions,
                last_updated_at_version_sequence=(
                    frag.last_updated_at_version_sequence or versions
                ),
            )
            next_row_id = end
        out.append(frag)
    return tuple(out), next_row_id
