"""A lookup of many keys with every newer source probed at once, instead of node by node.

The lookup plan is a ``CoalesceFirstExec`` over a ``BloomFilterGuardExec`` +
``TakeLastExec`` per newer source: each source is asked in turn for the keys still
unresolved. With 1000 keys and 32 newer sources (8 regions of 3 flushed generations and
a MemTable) the work per node (the keys of its region, its bloom filter, a key-set probe,
tagging and conforming its rows, resolving keys) costs more than the lookups themselves.
:class:`ManyKeyLookup` gives the same rows this way:

* the view's flushed generations (immutable) are merged once into one sorted
  :class:`KeyDirectory` of the keys each holds (its newest row of the key and whether
  that row is a tombstone), cached like the generations' own key rows; all the keys are
  searched in it at once. A lookup whose keys touch some regions only (a few keys)
  searches one directory per region instead, built once too;
* each MemTable answers from its own key index (it changes: never cached), for the keys
  that may live in its region;
* each key's winner is the first source in the plan's order that holds it and that the
  key may live in (its region, or any for a key of unknown region): the one the coalesce
  picks, since a bloom filter never turns away a key its source holds;
* the winners' rows are taken source by source (a tombstone drops its key), and the base
  table is asked once (its ``TakeLastExec``'s lookup), for the keys no newer source
  holds, its rows left in the order read; every output column is then joined from the
  pieces and put in the keys' order by one take, ``_gen`` / ``_region`` made for the
  answers only when asked for.

Only for a single primary-key column of integers (its codes are the keys themselves) or
of strings / binary (its codes are hashes: each entry a code finds in a directory is
confirmed to hold the very key asked, as a key set confirms them), and generation /
MemTable sources; other lookups take the nodes.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from lance_sql.format.datafile.compressive import range_indices
from lance_sql.memwal.bloom import identity_keys
from lance_sql.memwal.read.keys import Keys
from lance_sql.memwal.read.metrics import NodeMetrics, own_work
from lance_sql.memwal.read.nodes import (
    GEN,
    KEY_POSITION,
    REGION,
    TakeLastExec,
    conformed_column,
    key_text,
)
from lance_sql.memwal.read.sources import (
    BaseSource,
    GenerationSource,
    MemTableSource,
    Source,
)
from lance_sql.memwal.wal import TOMBSTONE
from lance_sql.numpy_arrow import array_from_numpy
from lance_sql.table.files.reader import ROW_ADDR
from lance_sql.table.read.scan import rows_only
from lance_sql.table.runtime.cache import LSM_KEY_DIRECTORIES
from lance_sql.table.runtime.context import current_runtime

__all__ = ["MANY_KEYS", "MAX_DIRECTORY_KEYS", "KeyDirectory", "ManyKeyLookup"]

# Lookups of at least this many keys take this path (one key: the view's lookup_one).
# With one directory per region it is cheaper than the nodes from two keys on
# (measured, bench_lsm 10M rows, 8 regions: 2 keys 4.5 vs 6.6 ms CPU, 16 keys 13.9 vs
# 17.5, 63 keys 19.3 vs 27.2), so every lookup of many keys takes it: no cliff between.
MANY_KEYS = 2
# Generations holding more rows than this take the nodes: their directory (21 bytes a key)
# would crowd the cache, or not fit it and be built again for every lookup.
MAX_DIRECTORY_KEYS = 1 << 22
# A directory keeps one copy of its generations' rows, joined into one table, when they
# are of one schema and this many bytes or fewer: a lookup then takes its rows from all
# of them in one call (24 generations: ~0.1 ms, against ~0.85 ms for a take from each).
MAX_JOINED_ROW_BYTES = 32 << 20


@dataclass(frozen=True)
class KeyDirectory:
    """Every key held by a list of flushed generations, sorted by key code (and by
    generation within a code): for each, the generation (its position in the list), its
    newest row of the key (a row of :meth:`GenerationSource.rows`) and whether that row is
    a tombstone; and, when small, the generations' rows joined (one take for a lookup)."""

    codes: np.ndarray      # int64, ascending
    source: np.ndarray     # int32
    row: np.ndarray        # int64
    tombstone: np.ndarray  # bool
    # every generation's rows joined (see MAX_JOINED_ROW_BYTES), generation j's from
    # row first[j]; None when they are not of one schema or too large
    joined: pa.Table | None = None
    first: np.ndarray | None = None

    @property
    def nbytes(self) -> int:
        return int(self.codes.nbytes + self.source.nbytes + self.row.nbytes
                   + self.tombstone.nbytes
                   + (self.joined.nbytes if self.joined is not None else 0))

    @classmethod
    def of(cls, generations: Sequence[GenerationSource]) -> KeyDirectory:
        codes, source, row, tombstone = [], [], [], []
        for j, g in enumerate(generations):
            rows = g.key_rows()
            key_set = rows.key_set()  # codes sorted; order: their rows among latest()
            at = rows.latest()[key_set.order]
            codes.append(key_set.codes)
            source.append(np.full(at.size, j, np.int32))
            row.append(at)
            tombstone.append(rows.tombstone[at])
        if not codes:
            return cls(np.zeros(0, np.int64), np.zeros(0, np.int32), np.zeros(0, np.int64),
                       np.zeros(0, bool))
        all_codes = np.concatenate(codes)
        # generations in list order, so a stable sort by code keeps them so within a code
        order = np.argsort(all_codes, kind="stable")
        tables = [g.rows() for g in generations]
        joined, first = None, None
        if all(t.schema.equals(tables[0].schema) for t in tables) and \
                sum(t.nbytes for t in tables) <= MAX_JOINED_ROW_BYTES:
            joined = pa.concat_tables(tables).combine_chunks()
            sizes = np.array([t.num_rows for t in tables], np.int64)
            first = sizes.cumsum() - sizes
        return cls(all_codes[order], np.concatenate(source)[order], np.concatenate(row)[order],
                   np.concatenate(tombstone)[order], joined, first)


def usable(sources: Sequence[Source], keys: Keys, key_type: pa.DataType) -> bool:
    """Whether :class:`ManyKeyLookup` answers this lookup: enough keys, one key column of
    integers, strings or binary, the base table first and only generations and MemTables
    after it, each with the key's type (codes of one type compare), the generations' rows
    not too many."""
    if keys.num_rows < MANY_KEYS or len(sources[0].key_columns) != 1 or \
            not (pa.types.is_integer(key_type) or _hashed(key_type)) or \
            not isinstance(sources[0], BaseSource):
        return False
    rows = 0
    for s in sources[1:]:
        if type(s) is GenerationSource:
            assert isinstance(s, GenerationSource)
            held_rows, held_type = s.key_facts()
            rows += held_rows
            if not held_type.equals(key_type) or rows > MAX_DIRECTORY_KEYS:
                return False
        elif type(s) is not MemTableSource:
            return False
    return True


def _hashed(t: pa.DataType) -> bool:
    """Whether keys of type ``t`` probe by hash codes this path confirms (equal keys are
    equal bytes: strings and binary)."""
    return (pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_binary(t)
            or pa.types.is_large_binary(t))


# Counts of lookups whose generations' rows were taken from a directory's joined rows.
JOINED_TAKES = [0]
# Counts of directory entries a hash code found for another key, dropped (tests).
CODE_COLLISIONS = [0]
# Counts of MemTables probed by key codes alone (MemTable.lookup_codes) (tests).
CODE_PROBES = [0]


def _repeats(codes: np.ndarray, wanted: np.ndarray, lo: np.ndarray) -> np.ndarray:
    """How many entries of ``codes`` (ascending) equal each of ``wanted``, whose first
    place (the left search) is ``lo``: a step past each while the code repeats (a key
    repeats once per generation holding it: a few steps, each for the keys left)."""
    counts = np.zeros(wanted.size, np.int64)
    live = np.arange(wanted.size)
    at = lo.copy()
    while live.size:
        live = live[at[live] < codes.size]
        live = live[codes[at[live]] == wanted[live]]
        counts[live] += 1
        at[live] += 1
    return counts


class _SortedKeys:
    """The lookup's keys in ascending code order, and those that may live in a region (its
    own and those of any region, -1) in that order: one sort shared by every search (the
    directories', the MemTables'; nearby codes share cache lines)."""

    def __init__(self, codes: np.ndarray, region: np.ndarray) -> None:
        self.order = np.argsort(codes, kind="stable")  # positions among the keys
        self._region = region[self.order]
        self._any = bool((self._region == -1).any())
        self._grouped: tuple[np.ndarray, np.ndarray] | None = None

    def of_region(self, r: int) -> np.ndarray:
        """The positions of the keys that may live in region ``r``, by ascending code."""
        if self._any:
            return self.order[(self._region == r) | (self._region == -1)]
        if self._grouped is None:  # by region, each region's keys still by code
            by = np.argsort(self._region, kind="stable")
            self._grouped = (self.order[by], self._region[by])
        keys, regions = self._grouped
        lo, hi = np.searchsorted(regions, [r, r + 1]).tolist()
        return keys[lo:hi]

    @property
    def any_region(self) -> bool:
        """Whether some key may live in any region (-1)."""
        return self._any


def _as_type(a: pa.Array, t: pa.DataType) -> pa.Array:
    """``a`` as type ``t`` (cast when of another)."""
    return a if a.type.equals(t) else a.cast(t)


def _conformed_table(rows: pa.Table, schema: pa.Schema) -> pa.Table:
    """``rows`` as a table of exactly ``schema`` (missing columns NULL, types cast; its
    chunks kept: the pieces are joined and taken once after)."""
    return pa.Table.from_arrays([conformed_column(rows, f, combine=False) for f in schema],
                                schema=schema)


def _groups(homes: np.ndarray, keys: _SortedKeys, every_region: bool
            ) -> list[tuple[np.ndarray, np.ndarray]]:
    """The generations searched together, each group in one directory, and the keys
    searched in it: (positions among the generations, positions among the keys, by
    ascending code).

    A lookup over every region of the view (or with keys of any region): one directory
    of all the generations, one search. A lookup over some regions only (a few keys:
    the others pruned): one directory for each of its regions, so the directories do
    not depend on which regions a lookup's keys touch (else each such set of regions
    would be built and cached apart)."""
    if every_region or keys.any_region:
        return [(np.arange(homes.size), keys.order)] if homes.size else []
    out = []
    for home in dict.fromkeys(homes.tolist()):
        mine = keys.of_region(home)
        if mine.size:
            out.append((np.flatnonzero(homes == home), mine))
    return out


@dataclass(frozen=True)
class _Piece:
    """Winning rows of one source or take: each answer's ``_gen``, its region
    (``regions[region_at]``, a region id or None), the key it answers (a position among
    the lookup's keys) and its row in ``rows`` (``row_at``; None: the rows in order)."""

    rows: pa.Table
    gen: np.ndarray        # int64, per answer
    regions: list          # region ids (uuid.UUID) or None
    region_at: np.ndarray  # per answer, into regions
    key_of: np.ndarray     # per answer
    row_at: np.ndarray | None = None

    @classmethod
    def of(cls, source: Source, rows: pa.Table, key_of: np.ndarray,
           row_at: np.ndarray | None = None) -> _Piece:
        """Answers of one source."""
        n = key_of.size
        return cls(rows, np.full(n, source.gen, np.int64), [source.region],
                   np.zeros(n, np.int64), key_of, row_at)


class ManyKeyLookup:
    """The lookup plan's answer for many keys, every newer source probed at once (see the
    module docstring). ``runs`` counts the lookups answered this way; ``metrics`` says
    what they did (EXPLAIN ANALYZE)."""

    def __init__(self, sources: Sequence[Source], schema: pa.Schema, output: Sequence[str],
                 keys: Keys, base: TakeLastExec, *, every_region: bool = False) -> None:
        """``sources``: the plan's, base first; ``schema``: its lookup schema; ``base``:
        its base table's ``TakeLastExec``; ``keys``: all the lookup's keys (positions
        ``0..n-1``); ``every_region``: the sources are of every region of the view (no
        region pruned: one key directory for all their generations, see _groups)."""
        self.every_region = every_region
        self.sources = list(sources)
        self.schema = schema
        self.output = list(output)
        self.keys = keys
        self.base = base
        self.runs = 0
        self.metrics = NodeMetrics()

    def _directory(self, generations: list[GenerationSource]) -> KeyDirectory:
        key = tuple(g.identity for g in generations)
        return current_runtime().cache.get_or_load(LSM_KEY_DIRECTORIES, key,
                                                   lambda: KeyDirectory.of(generations))

    def explain_lines(self) -> list[str]:
        """EXPLAIN ANALYZE's lines: this path and the base table's lookup it ran."""
        generations = sum(type(s) is GenerationSource for s in self.sources)
        memtables = sum(type(s) is MemTableSource for s in self.sources)
        return [f"ManyKeyProbeExec: {key_text(self.base.source.key_columns, self.keys)}, "
                f"{generations} generations (one key directory), {memtables} memtables, "
                f"{self.metrics.text()}",
                f"  {self.base.describe()}, {self.base.metrics.text()}"]

    def to_table(self) -> pa.Table:
        with own_work(self.metrics):
            table = self._to_table()
        self.metrics.output(table.num_rows)
        return table

    def _to_table(self) -> pa.Table:
        self.runs += 1
        keys, sources = self.keys, self.sources
        n = keys.num_rows
        codes, region = keys.codes, keys.region
        none = len(sources)  # no newer source holds the key: the base is asked
        best = np.full(n, none, np.int64)  # each key's winner: its position in sources
        # ---- flushed generations: the directory, every key at once
        gen_at = [i for i, s in enumerate(sources) if type(s) is GenerationSource]
        generations: list[GenerationSource] = [sources[i] for i in gen_at]  # type: ignore[misc]
        # (key, generation, row, tombstone) of every generation holding a key, found in
        # the directories of the generations the keys may live in (see _groups)
        parts: list[tuple[np.ndarray, ...]] = []
        directories: list[tuple[KeyDirectory, np.ndarray]] = []
        homes = np.array([g.region_index for g in generations], np.int64)
        hashed = _hashed(self.schema.field(0).type)
        by_code = _SortedKeys(codes, region)
        for members, order in _groups(homes, by_code, self.every_region):
            d = self._directory([generations[m] for m in members.tolist()])
            directories.append((d, members))
            # the keys searched in ascending order, each one's entries counted by
            # stepping past its first while the code repeats
            lo = np.searchsorted(d.codes, codes[order], "left")
            counts = _repeats(d.codes, codes[order], lo)
            entry = range_indices(lo, counts)
            key_of, j = np.repeat(order, counts), members[d.source[entry]]
            may = (region[key_of] == -1) | (region[key_of] == homes[j])  # Keys.for_region
            if hashed:  # codes are hashes: only the entries holding the very key asked
                may[may] = self._same_keys(generations, key_of[may], j[may],
                                           d.row[entry[may]])
            parts.append((key_of[may], j[may], d.row[entry[may]], d.tombstone[entry[may]]))
        found = (tuple(np.concatenate(c) for c in zip(*parts, strict=True)) if parts else
                 (np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.int64),
                  np.zeros(0, bool)))
        if parts:
            np.minimum.at(best, found[0], np.array(gen_at, np.int64)[found[1]])
        # ---- MemTables: their own key indices, for the keys of their region
        held: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        # keys with no nulls probe each MemTable by their codes alone (see lookup_codes)
        key_type = self.schema.field(0).type if not keys.table.column(0).null_count else None
        for i, s in enumerate(sources):
            if type(s) is not MemTableSource:
                continue
            assert isinstance(s, MemTableSource)
            # (by ascending code; a MemTable of no region: the keys of any region)
            mine = by_code.of_region(-1 if s.region_index is None else s.region_index)
            if not mine.size:
                continue
            addresses = (None if key_type is None
                         else s.lookup_codes(codes[mine], key_type))
            if addresses is None:
                if mine.size == n:  # every key: the table as it is, keys in their order
                    mine, table = np.arange(n), keys.table
                else:
                    table = keys.table.take(array_from_numpy(mine, pa.int64()))
                addresses = s.lookup_keys(table)
            else:
                CODE_PROBES[0] += 1
            hit = addresses >= 0
            if hit.any():
                held[i] = (mine[hit], addresses[hit])
                np.minimum.at(best, mine[hit], i)
        # ---- the winners' rows, source by source (put together by _assembled)
        taken: list[_Piece] = []
        key_of, j, row, tombstone = found
        # the winning generation of its key, and not a tombstone (the key is deleted)
        first = best[key_of] == np.array(gen_at, np.int64)[j]
        won = first & ~tombstone
        in_memtables = sum(int(np.count_nonzero(best[mine] == i))
                           for i, (mine, _) in held.items())
        self.metrics.count(keys=n, keys_in_generations=int(np.count_nonzero(first)),
                           keys_in_memtables=in_memtables,
                           keys_deleted=int(np.count_nonzero(first & tombstone)),
                           keys_asked_of_base=int(np.count_nonzero(best == none)))
        key_of, j, row = key_of[won], j[won], row[won]
        gen_of = np.array([g.gen for g in generations], np.int64)
        gen_regions = [g.region for g in generations]  # one list, shared by the pieces
        for d, members in directories:  # each region's winners
            here = np.flatnonzero(np.isin(j, members)) if len(directories) > 1 else \
                np.arange(j.size)
            if not here.size:
                continue
            if d.joined is None:
                for g in np.unique(j[here]).tolist():
                    mine = here[j[here] == g]
                    rows = generations[g].rows().take(pa.array(row[mine], pa.int64()))
                    taken.append(_Piece.of(generations[g], rows, key_of[mine]))
                continue
            # every winner's row in one take, each row's generation noted
            local = np.searchsorted(members, j[here])  # the generation within the region
            assert d.first is not None
            rows = d.joined.take(array_from_numpy(d.first[local] + row[here], pa.int64()))
            JOINED_TAKES[0] += 1
            taken.append(_Piece(rows, gen_of[j[here]], gen_regions, j[here], key_of[here]))
        for i, (mine, addresses) in held.items():
            won = best[mine] == i
            if won.any():
                taken.extend(self._memtable(sources[i], mine[won], addresses[won]))
        rest = best == none
        if rest.any():
            base = self._base(keys if rest.all() else keys.take(rest))
            if base is not None:
                taken.append(base)
        return self._assembled(taken)

    def _same_keys(self, generations: Sequence[GenerationSource], key_of: np.ndarray,
                   j: np.ndarray, row: np.ndarray) -> np.ndarray:
        """Whether each directory entry (generation ``j``'s row ``row``, found by the hash
        code of key ``key_of``) holds that very key: one comparison per generation met."""
        same = np.zeros(key_of.size, bool)
        asked = self.keys.columns[0]
        for g in np.unique(j).tolist():
            at = np.flatnonzero(j == g)
            held = generations[g].key_rows().keys[0].take(pa.array(row[at], pa.int64()))
            wanted = asked.take(pa.array(key_of[at], pa.int64()))
            equal = pc.fill_null(pc.equal(identity_keys(held), identity_keys(wanted)), False)
            same[at] = np.asarray(equal.to_numpy(zero_copy_only=False), bool)
        CODE_COLLISIONS[0] += int(same.size - np.count_nonzero(same))
        return same

    def _base(self, keys: Keys) -> _Piece | None:
        """The base table's answers for ``keys`` (its ``TakeLastExec``'s lookup, counted
        in its metrics), its rows left in the order read: :meth:`_assembled` puts every
        answer in the keys' order with one take."""
        table, rows, key_at = self.base.found_rows(keys)
        if not key_at.size:
            return None
        if TOMBSTONE in self.output:  # (asked for: the base holds no tombstones)
            table = table.append_column(TOMBSTONE, pa.array(np.zeros(table.num_rows, bool)))
        return _Piece.of(self.base.source, table, keys.position[key_at], rows)

    def _assembled(self, taken: list[_Piece]) -> pa.Table:
        """The answers ``taken`` as the output columns, in the order of the keys (as the
        coalesce gives them): the pieces' data columns joined and taken once, ``_gen``,
        ``_region`` and ``_key`` made for the answers alone; a column a piece lacks is
        NULL there, one of another type cast (as ``conform`` does)."""
        sizes = np.array([p.rows.num_rows for p in taken], np.int64)
        starts = sizes.cumsum() - sizes
        key_of = (np.concatenate([p.key_of for p in taken]) if taken
                  else np.zeros(0, np.int64))
        order = np.argsort(self.keys.position[key_of], kind="stable")
        out_schema = pa.schema([self.schema.field(n) for n in self.output],
                               metadata=self.schema.metadata)
        if not len(out_schema):  # no columns: the rows still count
            return rows_only(int(order.size))
        at = np.concatenate([
            s + (p.row_at if p.row_at is not None else np.arange(p.key_of.size))
            for p, s in zip(taken, starts.tolist(), strict=True)]) if taken \
            else np.zeros(0, np.int64)
        pick = array_from_numpy(at[order], pa.int64())
        # the pieces' data columns as one table of them (a column a piece lacks NULL
        # there, one of another type cast), taken once; the tags made per answer
        tags = (GEN, REGION, KEY_POSITION)
        data = pa.schema(list({f.name: f for f in out_schema if f.name not in tags}.values()))
        picked = None
        if len(data):
            tables = [_conformed_table(p.rows, data) for p in taken]
            joined = (tables[0] if len(tables) == 1 else pa.concat_tables(tables)) if tables \
                else data.empty_table()
            picked = joined.take(pick).combine_chunks()
        columns: list[pa.Array | pa.ChunkedArray] = []
        for f in out_schema:
            if f.name == GEN:
                gens = np.concatenate([p.gen for p in taken]) if taken \
                    else np.zeros(0, np.int64)
                columns.append(_as_type(array_from_numpy(gens[order], pa.int64()), f.type))
            elif f.name == REGION:
                columns.append(_as_type(self._regions(taken, order), f.type))
            elif f.name == KEY_POSITION:
                columns.append(_as_type(array_from_numpy(
                    self.keys.position[key_of[order]], pa.int64()), f.type))
            else:
                assert picked is not None
                columns.append(picked.column(f.name))
        return pa.Table.from_arrays(columns, schema=out_schema)

    @staticmethod
    def _regions(taken: list[_Piece], order: np.ndarray) -> pa.Array:
        """Each answer's ``_region`` label (in ``order``): each piece's region list (the
        generations' one is shared by every region's piece) labelled once."""
        labels: list[str | None] = []
        start_of: dict[int, int] = {}
        starts = []
        for p in taken:
            start = start_of.get(id(p.regions))
            if start is None:
                start = start_of[id(p.regions)] = len(labels)
                labels.extend(None if r is None else str(r) for r in p.regions)
            starts.append(start)
        at = (np.concatenate([p.region_at + s for p, s in zip(taken, starts, strict=True)])
              if taken else np.zeros(0, np.int64))
        return pa.array(labels, pa.string()).take(array_from_numpy(at[order], pa.int64()))

    def _memtable(self, s: Source, key_of: np.ndarray, addresses: np.ndarray
                  ) -> list[_Piece]:
        """A MemTable's rows at ``addresses`` (the keys at ``key_of``), tombstones left
        out (their keys are deleted)."""
        assert isinstance(s, MemTableSource)
        rows = s.memtable.take(addresses)
        rows = rows.append_column(ROW_ADDR, pa.array(addresses.astype(np.uint64)))
        if TOMBSTONE in rows.column_names:
            dead = np.asarray(pc.fill_null(rows.column(TOMBSTONE), False)
                              .to_numpy(zero_copy_only=False), bool)
            if dead.any():
                self.metrics.add("keys_deleted", int(np.count_nonzero(dead)))
                rows, key_of = rows.filter(pa.array(~dead)), key_of[~dead]
        return [_Piece.of(s, rows, key_of)] if rows.num_rows else []
