"""Applying a transaction to a manifest: pure, no I/O.

``apply_transaction(previous, txn, version, timestamp_ns)`` returns the manifest of the
new version. Rules common to every operation:

* new fragments get ids after ``max_fragment_id``, a high-water mark that never drops,
  so no id is ever reused (fragments a ReserveFragments set aside keep theirs);
* on tables with stable row ids, new rows take ids from ``next_row_id`` and row
  versions the writer left open become this version (see ``table/files/lineage.py``);
* data files left holding only tombstoned fields (-2) are removed from fragments;
* fragment order is kept (a rewrite replaces its fragments in place);
* feature flags are recomputed from the result.

Restore and Clone build on another manifest (the version restored, the clone source);
the caller loads it and passes it as ``source``.
"""

from __future__ import annotations

import uuid
from dataclasses import replace
from functools import singledispatch

from lance_sql.errors import FormatError, InvalidInputError, NotFoundError
from lance_sql.format.datafile import DEFAULT_DATA_FORMAT
from lance_sql.format.feature_flags import (
    BASE_PATHS,
    DELETION_FILES,
    MIXED_FILE_VERSIONS,
    STABLE_ROW_IDS,
    TABLE_CONFIG,
    flags_for,
)
from lance_sql.format.fragment import MAX_FRAGMENT_ID, BasePath, DataFile, Fragment
from lance_sql.format.index import IndexMetadata, decode_index_section, encode_index_section
from lance_sql.format.manifest import WRITER_LIBRARY, WRITER_VERSION, Manifest
from lance_sql.format.memwal import (
    MEM_WAL_INDEX_NAME,
    carry_progress,
    details_of,
    record_catchup,
    record_merged,
    with_details,
)
from lance_sql.format.schema import LanceSchema
from lance_sql.table.files.lineage import stamp_fragments
from lance_sql.table.meta.field_ids import restored_config
from lance_sql.table.txn.operations import (
    Append,
    Clone,
    CreateIndex,
    DataReplacement,
    Delete,
    Merge,
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

TOMBSTONE = -2
_DERIVED_FLAGS = DELETION_FILES | STABLE_ROW_IDS | TABLE_CONFIG | BASE_PATHS | MIXED_FILE_VERSIONS


class _Ctx:
    """What one application needs besides the operation (mutable scratch, never shared)."""

    def __init__(self, previous: Manifest | None, version: int, data_format: str,
                 stable_row_ids: bool, source: Manifest | None) -> None:
        self.previous = previous
        self.version = version
        self.data_format = data_format
        self.stable = stable_row_ids if previous is None else previous.uses_stable_row_ids
        self.source = source
        self.next_id = 0 if previous is None else previous.next_fragment_id()
        self.next_row_id = 0 if previous is None else previous.next_row_id

    def new_fragments(self, fragments: tuple[Fragment, ...], *,
                      keep_ids: bool = False) -> tuple[Fragment, ...]:
        """Assign ids (unless ``keep_ids`` and the fragment already has one) and row ids."""
        out = []
        for frag in fragments:
            if not (keep_ids and frag.id != 0):
                frag = frag.with_id(self.next_id)
                self.next_id += 1
            out.append(frag)
        result = tuple(out)
        if self.stable:
            try:
                result, self.next_row_id = stamp_fragments(result, self.next_row_id,
                                                           self.version)
            except FormatError as exc:  # next_row_id comes from the previous manifest
                version = self.previous.version if self.previous else 0
                raise FormatError(f"manifest of version {version}: {exc}") from exc
        return result

    def changed_fragments(self, fragments: tuple[Fragment, ...]) -> tuple[Fragment, ...]:
        """Existing fragments an operation rewrote: pending row versions become ours."""
        if not self.stable:
            return fragments
        result, _ = stamp_fragments(fragments, self.next_row_id, self.version, new=False)
        return result


def apply_transaction(
    previous: Manifest | None,
    txn: Transaction,
    version: int,
    timestamp_ns: int,
    *,
    transaction_file: str = "",
    data_format: str = DEFAULT_DATA_FORMAT,
    stable_row_ids: bool = False,
    source: Manifest | None = None,
) -> Manifest:
    """The manifest at ``version`` after ``txn`` on top of ``previous``.

    ``data_format`` is the format of a new table or of an overwrite; ``stable_row_ids``
    only matters when ``previous`` is None (table creation); later versions inherit it.
    """
    op = txn.operation
    if previous is None and not isinstance(op, Overwrite | Clone):
        raise NotFoundError("the table does not exist yet; create it with mode='create'")
    ctx = _Ctx(previous, version, data_format, stable_row_ids, source)
    manifest = _apply(op, previous, ctx)
    fragments = manifest.fragments
    files = [d for f in fragments for d in f.files]
    if any(TOMBSTONE in d.fields for d in files):
        fragments = tuple(_drop_tombstoned(f) for f in fragments)
        files = [d for f in fragments for d in f.files]
    ids = [f.id for f in fragments]
    if len(set(ids)) != len(ids):
        raise InvalidInputError(f"{op.name} would leave duplicate fragment ids")
    max_id = manifest.max_fragment_id
    if ids:
        max_id = max(ids) if max_id is None else max(max_id, max(ids))
    if max_id is not None and max_id > MAX_FRAGMENT_ID:
        raise FormatError(f"{op.name} needs fragment id {max_id}, but ids are used up at "
                          f"{MAX_FRAGMENT_ID} (row addresses hold them in 32 bits): the "
                          "table takes no new fragments")
    stable = manifest.uses_stable_row_ids if isinstance(op, Restore | Clone) else ctx.stable
    reader, writer = flags_for(
        has_deletion_files=any(f.deletion_file is not None for f in fragments),
        stable_row_ids=stable,
        has_config=bool(manifest.config),
        has_base_paths=bool(manifest.base_paths),
        mixed_file_versions=any(_version(v) != manifest.data_format for v in
                                {(d.file_major_version, d.file_minor_version) for d in files}),
    )
    basis = previous if previous is not None else source
    if basis is not None:
        # Keep flags we do not derive (e.g. ones a newer writer set and we tolerate).
        reader |= basis.reader_feature_flags & ~_DERIVED_FLAGS
        writer |= basis.writer_feature_flags & ~_DERIVED_FLAGS
    return replace(
        manifest,
        fragments=fragments,
        max_fragment_id=max_id,
        next_row_id=max(manifest.next_row_id, ctx.next_row_id) if stable else 0,
        version=version,
        timestamp_ns=timestamp_ns,
        transaction_file=transaction_file,
        reader_feature_flags=reader,
        writer_feature_flags=writer,
        tag=txn.tag,
        # Whoever wrote the previous version, this one is ours (the reference keys
        # version-specific workarounds on the writer it finds here).
        writer_library=WRITER_LIBRARY,
        writer_version=WRITER_VERSION,
    )


def _version(major_minor: tuple[int, int]) -> str:
    """A data file's format as the manifest names it ("2.0"; legacy files "0.1")."""
    major, minor = major_minor
    return "0.1" if major == 0 else f"{major}.{minor}"


def _drop_tombstoned(frag: Fragment) -> Fragment:
    files = tuple(f for f in frag.files if any(fid != TOMBSTONE for fid in f.fields))
    return frag if len(files) == len(frag.files) else replace(frag, files=files)


# ------------------------------------------------------------------------------ indices
def _indices(m: Manifest) -> tuple[IndexMetadata, ...]:
    return decode_index_section(m.index_section)


def _with_indices(m: Manifest, indices: tuple[IndexMetadata, ...]) -> Manifest:
    return replace(m, index_section=encode_index_section(indices))


def _retain_relevant(m: Manifest) -> Manifest:
    """Drop indices on fields the schema no longer has; forget fragments that are gone."""
    if m.index_section is None:
        return m
    field_ids = set(m.schema.field_ids())
    live = {f.id for f in m.fragments}
    kept = []
    for index in _indices(m):
        if index.fields and not set(index.fields) <= field_ids:
            continue
        if index.fragment_ids is not None and not index.fragment_ids <= live:
            index = index.with_fragments(index.fragment_ids & live)
        kept.append(index)
    return _with_indices(m, tuple(kept))


def _existing(previous: Manifest, ids: set[int], what: str) -> None:
    missing = ids - {f.id for f in previous.fragments}
    if missing:
        raise NotFoundError(f"{what} refers to fragments {sorted(missing)} that do not exist")


# --------------------------------------------------------------------------- operations
@singledispatch
def _apply(op: object, previous: Manifest | None, ctx: _Ctx) -> Manifest:
    raise InvalidInputError(f"cannot apply operation {type(op).__name__}")


@_apply.register
def _(op: Append, previous: Manifest, ctx: _Ctx) -> Manifest:
    return replace(previous, fragments=previous.fragments + ctx.new_fragments(op.fragments))


@_apply.register
def _(op: Delete, previous: Manifest, ctx: _Ctx) -> Manifest:
    updated = {f.id: f for f in op.updated_fragments}
    removed = set(op.deleted_fragment_ids)
    _existing(previous, set(updated) | removed, "delete")
    fragments = tuple(updated.get(f.id, f) for f in previous.fragments if f.id not in removed)
    return _retain_relevant(replace(previous, fragments=fragments))


@_apply.register
def _(op: Update, previous: Manifest, ctx: _Ctx) -> Manifest:
    updated = {f.id: f for f in ctx.changed_fragments(op.updated_fragments)}
    removed = set(op.removed_fragment_ids)
    _existing(previous, set(updated) | removed, "update")
    kept = tuple(updated.get(f.id, f) for f in previous.fragments if f.id not in removed)
    m = replace(previous, fragments=kept + ctx.new_fragments(op.new_fragments))
    if m.index_section is not None and op.fields_modified:
        # Rows of updated fragments changed in the modified fields: indices on those
        # fields no longer cover those fragments.
        changed, modified = set(updated), set(op.fields_modified)
        m = _with_indices(m, tuple(
            i.with_fragments(i.fragment_ids - changed)
            if i.fragment_ids is not None and modified & set(i.fields) else i
            for i in _indices(m)
        ))
    if op.merged_generations:
        m = _record_merged(m, op, ctx)
    return _retain_relevant(m)


def _record_merged(m: Manifest, op: Update, ctx: _Ctx) -> Manifest:
    """A MemWAL merge's progress goes into the MemWAL index in the same commit."""
    indices = _indices(m)
    entry = next((i for i in indices if i.name == MEM_WAL_INDEX_NAME), None)
    if entry is None:
        raise InvalidInputError("an update records MemWAL merge progress, but the table has "
                                "no MemWAL index")
    details = record_merged(details_of(entry), op.merged_generations, MEM_WAL_INDEX_NAME)
    # the uuid stays: it names the directory of the region snapshot file, if any
    new_entry = with_details(entry, details, ctx.version, uuid.UUID(entry.uuid))
    return _with_indices(m, tuple(new_entry if i is entry else i for i in indices))


@_apply.register
def _(op: Overwrite, previous: Manifest | None, ctx: _Ctx) -> Manifest:
    new = ctx.new_fragments(op.fragments)
    config = dict(previous.config) if previous is not None else {}
    config.update(op.config_upsert_values)
    if previous is None:
        ids = [b.id for b in op.initial_bases]
        if len(set(ids)) != len(ids):
            raise InvalidInputError(f"duplicate base path ids in {ids}")
        return Manifest(schema=op.schema, fragments=new, version=0,
                        data_format=ctx.data_format, config=config,
                        base_paths=op.initial_bases)
    if op.initial_bases:
        raise InvalidInputError("an overwrite of an existing table cannot register base paths")
    return replace(previous, schema=op.schema, fragments=new, config=config,
                   data_format=ctx.data_format, index_section=None)


@_apply.register
def _(op: CreateIndex, previous: Manifest, ctx: _Ctx) -> Manifest:
    names = {i.name for i in op.new_indices}
    removed = {i.uuid for i in op.removed_indices}
    existing = _indices(previous)
    kept = tuple(i for i in existing if i.name not in names and i.uuid not in removed)
    m = _with_indices(previous, kept + tuple(_keep_mem_wal_progress(i, existing)
                                             for i in op.new_indices))
    return _record_catchup(m, op, ctx)


def _record_catchup(m: Manifest, op: CreateIndex, ctx: _Ctx) -> Manifest:
    """A new index covering every fragment covers every merged MemWAL generation: its
    ``index_catchup`` advances to the merge progress (the spec's base index builder)."""
    live = {f.id for f in m.fragments}
    names = [i.name for i in op.new_indices if not i.name.startswith("__lance")
             and i.fragment_ids is not None and live <= set(i.fragment_ids)]
    indices = _indices(m)
    entry = next((i for i in indices if i.name == MEM_WAL_INDEX_NAME), None)
    if not names or entry is None:
        return m
    old = details_of(entry)
    details = record_catchup(old, names, MEM_WAL_INDEX_NAME)
    if details == old:
        return m
    new_entry = with_details(entry, details, ctx.version, uuid.UUID(entry.uuid))
    return _with_indices(m, tuple(new_entry if i is entry else i for i in indices))


def _keep_mem_wal_progress(new: IndexMetadata, existing: tuple[IndexMetadata, ...]
                           ) -> IndexMetadata:
    """A replaced MemWAL index entry keeps the merge progress committed since it was read."""
    if new.name != MEM_WAL_INDEX_NAME:
        return new
    old = next((i for i in existing if i.name == MEM_WAL_INDEX_NAME), None)
    if old is None:
        return new
    details = carry_progress(details_of(old), details_of(new), MEM_WAL_INDEX_NAME)
    return with_details(new, details, new.dataset_version, uuid.UUID(new.uuid))


@_apply.register
def _(op: Rewrite, previous: Manifest, ctx: _Ctx) -> Manifest:
    fragments = list(previous.fragments)
    replaced: list[tuple[set[int], set[int]]] = []  # (old ids, new ids) of each group
    for group in op.groups:
        if not group.old_fragments:
            raise InvalidInputError("a rewrite group must replace at least one fragment")
        old_ids = [f.id for f in group.old_fragments]
        _existing(replace(previous, fragments=tuple(fragments)), set(old_ids), "rewrite")
        new = ctx.new_fragments(group.new_fragments, keep_ids=True)
        for frag in new:
            if previous.max_fragment_id is None or frag.id > previous.max_fragment_id:
                # Reserved ids are at most max_fragment_id; higher ones are fresh.
                ctx.next_id = max(ctx.next_id, frag.id + 1)
        positions = [i for i, f in enumerate(fragments) if f.id in set(old_ids)]
        start = positions[0]
        fragments = [f for f in fragments if f.id not in set(old_ids)]
        fragments[start:start] = new  # in place: row order is kept
        replaced.append((set(old_ids), {f.id for f in new}))
    m = replace(previous, fragments=tuple(fragments))
    if m.index_section is None:
        return m
    renamed = {r.old_id: r for r in op.rewritten_indices}
    indices = []
    for index in _indices(m):
        if index.uuid in renamed and index.fragment_ids is not None:
            # New fragments are covered only when every fragment their rows came from
            # was: a group mixing in rows the index never saw is not covered.
            ids = set(index.fragment_ids)
            for sources, results in replaced:
                covered = sources <= ids
                ids -= sources
                if covered:
                    ids |= results
            index = renamed[index.uuid].applied_to(index.with_fragments(ids))
        elif index.fragment_ids is not None:
            # Not remapped: the rewritten fragments are simply no longer covered.
            gone = set().union(*(old for old, _ in replaced))
            index = index.with_fragments(index.fragment_ids - gone)
        indices.append(index)
    return _with_indices(m, tuple(indices))


@_apply.register
def _(op: ReserveFragments, previous: Manifest, ctx: _Ctx) -> Manifest:
    if op.num_fragments < 0:
        raise InvalidInputError("cannot reserve a negative number of fragments")
    return replace(previous, max_fragment_id=(previous.max_fragment_id or 0) + op.num_fragments)


@_apply.register
def _(op: Merge, previous: Manifest, ctx: _Ctx) -> Manifest:
    listed = {f.id for f in op.fragments}
    lost = [f.id for f in previous.fragments if f.id not in listed]
    if lost:
        raise InvalidInputError(f"merge must list every fragment; missing {sorted(lost)}")
    known = {f.id for f in previous.fragments}
    added = tuple(f for f in op.fragments if f.id not in known)
    if added and previous.max_fragment_id is not None and \
            min(f.id for f in added) <= previous.max_fragment_id:
        raise InvalidInputError("merge adds fragments with ids that were already used")
    fragments = ctx.changed_fragments(op.fragments)
    return _retain_relevant(replace(previous, schema=op.schema, fragments=fragments))


@_apply.register
def _(op: Project, previous: Manifest, ctx: _Ctx) -> Manifest:
    schema = LanceSchema(op.schema.fields, previous.schema.metadata)
    keep = set(schema.field_ids())
    fragments = tuple(
        replace(f, files=tuple(d for d in f.files if any(i in keep for i in d.fields)))
        for f in previous.fragments
    )
    return _retain_relevant(replace(previous, schema=schema, fragments=fragments))


@_apply.register
def _(op: Restore, previous: Manifest, ctx: _Ctx) -> Manifest:
    source = ctx.source
    if source is None or source.version != op.version:
        raise InvalidInputError(f"restore needs the manifest of version {op.version}")
    # Ids stay unique across the whole history: the high-water marks never go back
    # (field ids too, on a table with a MemWAL: see table/meta/field_ids.py).
    max_ids = [x for x in (previous.max_fragment_id, source.max_fragment_id) if x is not None]
    ctx.next_row_id = max(previous.next_row_id, source.next_row_id)
    return replace(source, max_fragment_id=max(max_ids) if max_ids else None,
                   next_row_id=ctx.next_row_id, config=restored_config(previous, source))


@_apply.register
def _(op: UpdateConfig, previous: Manifest, ctx: _Ctx) -> Manifest:
    m = previous
    if op.config_updates is not None:
        m = replace(m, config=op.config_updates.apply(m.config))
    if op.table_metadata_updates is not None:
        m = replace(m, table_metadata=op.table_metadata_updates.apply(m.table_metadata))
    schema = m.schema
    if op.schema_metadata_updates is not None:
        schema = LanceSchema(schema.fields, op.schema_metadata_updates.apply_bytes(schema.metadata))
    for field_id, update in op.field_metadata_updates.items():
        if field_id not in set(schema.field_ids()):
            raise InvalidInputError(f"field with id {field_id} does not exist")
        schema = _replace_field(schema, field_id, lambda f, u=update: replace(
            f, metadata=u.apply_bytes(f.metadata)))
    return replace(m, schema=schema)


def _replace_field(schema: LanceSchema, field_id: int, change) -> LanceSchema:
    def walk(f):
        if f.id == field_id:
            return change(f)
        if not f.children:
            return f
        return replace(f, children=tuple(walk(c) for c in f.children))

    return LanceSchema(tuple(walk(f) for f in schema.fields), schema.metadata)


@_apply.register
def _(op: DataReplacement, previous: Manifest, ctx: _Ctx) -> Manifest:
    if len({r.new_file.fields for r in op.replacements}) > 1:
        raise InvalidInputError("all replacement files must hold the same fields")
    by_id = {f.id: f for f in previous.fragments}
    changed: dict[int, Fragment] = {}
    for r in op.replacements:
        frag = changed.get(r.fragment_id, by_id.get(r.fragment_id))
        if frag is None:
            raise NotFoundError(f"data replacement: fragment {r.fragment_id} does not exist")
        new = r.new_file
        files: list[DataFile] = []
        covered: set[int] = set()
        for d in frag.files:
            covered.update(d.fields)
            same = (d.fields == new.fields and d.file_major_version == new.file_major_version
                    and d.file_minor_version == new.file_minor_version)
            files.append(replace(d, path=new.path, file_size_bytes=new.file_size_bytes)
                         if same else d)
        if covered.isdisjoint(new.fields):  # the columns were all-NULL here: add the file
            files.append(new)
        result = replace(frag, files=tuple(files))
        if result == frag:
            raise InvalidInputError(
                f"data replacement file {new.path} matches no data file of fragment {frag.id}"
            )
        changed[frag.id] = result
    m = replace(previous, fragments=tuple(changed.get(f.id, f) for f in previous.fragments))
    if m.index_section is None:
        return m
    # indices of the replaced columns no longer describe the replaced fragments
    fields = {fid for r in op.replacements for fid in r.new_file.fields}
    return _with_indices(m, tuple(
        i.with_fragments(i.fragment_ids - set(changed))
        if i.fragment_ids is not None and fields & set(i.fields) else i
        for i in _indices(m)))


@_apply.register
def _(op: UpdateMemWalState, previous: Manifest, ctx: _Ctx) -> Manifest:
    # The lance 1.x operation: nothing in today's MemWAL index records it.
    return previous


@_apply.register
def _(op: UpdateBases, previous: Manifest, ctx: _Ctx) -> Manifest:
    bases = list(previous.base_paths)
    for new in op.new_bases:
        clash = next((b for b in bases if (new.name is not None and b.name == new.name)
                      or b.path == new.path or (new.id != 0 and b.id == new.id)), None)
        if clash is not None:
            raise InvalidInputError(
                f"base path {new.name or new.path!r} clashes with existing base "
                f"{clash.name or clash.path!r} (id {clash.id})"
            )
        if new.id == 0:
            new = replace(new, id=max((b.id for b in bases), default=0) + 1)
        bases.append(new)
    return replace(previous, base_paths=tuple(bases))


@_apply.register
def _(op: Clone, previous: Manifest | None, ctx: _Ctx) -> Manifest:
    source = ctx.source
    if source is None or source.version != op.ref_version:
        raise InvalidInputError(f"clone needs the manifest of version {op.ref_version}")
    if previous is not None:
        raise InvalidInputError("clone target already holds a table")
    if not op.is_shallow:
        return source  # the caller copied the files and rooted them here
    return shallow_clone_manifest(source, op)


def shallow_clone_manifest(source: Manifest, op: Clone) -> Manifest:
    """The source manifest with everything that lived at its root now under a base path."""
    base_id = max((b.id for b in source.base_paths), default=-1) + 1
    base = BasePath(id=base_id, path=op.ref_path, is_dataset_root=True, name=op.ref_name)

    def rebase(frag: Fragment) -> Fragment:
        files = tuple(d if d.base_id is not None else replace(d, base_id=base_id)
                      for d in frag.files)
        deletion = frag.deletion_file
        if deletion is not None and deletion.base_id is None:
            deletion = replace(deletion, base_id=base_id)
        return replace(frag, files=files, deletion_file=deletion)

    m = replace(source, fragments=tuple(rebase(f) for f in source.fragments),
                base_paths=source.base_paths + (base,), branch=op.branch_name)
    if m.index_section is not None:
        indices = []
        for index in _indices(m):
            pb = index.to_proto()
            if not pb.HasField("base_id"):
                pb.base_id = base_id
            indices.append(IndexMetadata.from_proto(pb))
        m = _with_indices(m, tuple(indices))
    return m
