"""The MemWAL index builder: a snapshot of every region, and the WAL hints brought forward.

Readers that ask for ``consistency="snapshot"`` plan from the MemWAL index alone instead
of opening every region's manifests; this job keeps that snapshot fresh. It also moves each
region's ``wal_id_last_seen`` hint up to the last WAL entry that exists (writers do not
update the manifest on every WAL flush), best effort.

The snapshot is a Lance file, one row per region (the spec's schema: the region manifest's
fields, flushed generations as a list of structs, and a ``region_field_{id}`` column per
field of the newest region spec), stored inline in the index details up to
``inline_threshold`` regions and as ``_indices/{uuid}/index.lance`` above.
"""

from __future__ import annotations

import io
import time
import uuid

import pyarrow as pa
import pyarrow.compute as pc

from lance_sql.errors import FormatError, LanceError, NotFoundError
from lance_sql.format.datafile import BytesSource, LanceFileReader, LanceFileWriter
from lance_sql.format.memwal import RegionManifest, with_details
from lance_sql.format.region_spec import RegionSpec
from lance_sql.format.schema import LanceSchema, arrow_type_of
from lance_sql.memwal import index as mem_wal_index
from lance_sql.memwal.merger import region_ids
from lance_sql.memwal.region_log import RegionLog
from lance_sql.memwal.routing import decode_region_values
from lance_sql.table.dataset import LanceDataset, dataset
from lance_sql.table.txn.operations import CreateIndex

__all__ = ["INLINE_THRESHOLD", "check_snapshot", "read_snapshot", "refresh_index",
           "snapshot_schema"]

INLINE_THRESHOLD = 100
SNAPSHOT_FILE = "index.lance"
_GENERATIONS = pa.list_(pa.struct([pa.field("generation", pa.uint64()),
                                   pa.field("path", pa.string())]))


def snapshot_schema(spec: RegionSpec | None) -> pa.Schema:
    """Schema of the MemWAL index's region snapshot table (region values per ``spec``)."""
    fields = [
        pa.field("region_id", pa.binary(16)), pa.field("version", pa.uint64()),
        pa.field("region_spec_id", pa.uint32()), pa.field("writer_epoch", pa.uint64()),
        pa.field("replay_after_wal_id", pa.uint64()), pa.field("wal_id_last_seen", pa.uint64()),
        pa.field("current_generation", pa.uint64()),
        pa.field("flushed_generations", _GENERATIONS),
    ]
    for f in spec.fields if spec is not None else ():
        fields.append(pa.field(f"region_field_{f.field_id}", arrow_type_of(f.result_type)))
    return pa.schema(fields)


def _snapshot_rows(manifests: list[RegionManifest], spec: RegionSpec | None) -> pa.Table:
    schema = snapshot_schema(spec)
    columns: dict[str, list] = {f.name: [] for f in schema}
    for m in manifests:
        columns["region_id"].append(m.region_id.bytes)
        for name in ("version", "region_spec_id", "writer_epoch", "replay_after_wal_id",
                     "wal_id_last_seen", "current_generation"):
            columns[name].append(getattr(m, name))
        columns["flushed_generations"].append(
            [{"generation": g.generation, "path": g.path} for g in m.flushed_generations])
        values = None
        if spec is not None and m.region_values is not None and m.region_spec_id == spec.spec_id:
            values = decode_region_values(m.region_values, f"region {m.region_id}", spec)
        for f in spec.fields if spec is not None else ():
            name = f"region_field_{f.field_id}"
            columns[name].append(
                values.column(f.field_id)[0].as_py()
                if values is not None and f.field_id in values.column_names else None)
    return pa.table(columns, schema=schema)


def _lance_file_bytes(table: pa.Table) -> bytes:
    sink = io.BytesIO()
    writer = LanceFileWriter(sink, LanceSchema.from_arrow(table.schema), version="2.2")
    if table.num_rows:
        writer.write_batch(table)
    writer.finish()
    return sink.getvalue()


def refresh_index(ds: LanceDataset, *, inline_threshold: int = INLINE_THRESHOLD,
                  skip_unchanged: bool = False) -> LanceDataset:
    """Build a new region snapshot and commit it; returns the table at the new version.

    ``skip_unchanged``: when every region's state equals the snapshot the index holds,
    commit nothing and return the latest version (a periodic job would otherwise add a
    table version each round)."""
    current = dataset(ds.uri, commit_config=ds.commit_config)
    loaded = mem_wal_index.load(current)
    if loaded is None:
        raise NotFoundError(f"{ds.uri} has no MemWAL index")
    entry, details = loaded
    manifests = []
    for region_id in region_ids(current):
        log = RegionLog(current.store, region_id)
        manifest = log.latest()
        if manifest is None:
            continue
        last = log.last_wal_entry(manifest)
        if last > manifest.wal_id_last_seen:
            try:  # a hint: losing it to a racing writer or job costs nothing
                def note(m: RegionManifest, seen: int = last) -> RegionManifest:
                    return m.evolve(wal_id_last_seen=max(m.wal_id_last_seen, seen))

                manifest = log.update(note)
            except LanceError:
                pass
        manifests.append(manifest)
    spec = max(details.region_specs, key=lambda s: s.spec_id, default=None)
    rows = _snapshot_rows(manifests, spec)
    if skip_unchanged and (details.num_regions or rows.num_rows) and \
            read_snapshot(current).equals(rows):
        return current
    snapshot = _lance_file_bytes(rows)
    new_uuid = uuid.uuid4()
    inline = None
    if len(manifests) <= inline_threshold:
        inline = snapshot
    else:
        current.store.put(f"_indices/{new_uuid}/{SNAPSHOT_FILE}", snapshot)
    refreshed = details.evolve(snapshot_ts_millis=int(time.time() * 1000),
                               num_regions=len(manifests), inline_snapshots=inline)
    ctx = current.write_context()
    new_entry = with_details(entry, refreshed.encode(), ctx.table.version, new_uuid)
    return current.at_manifest(ctx.commit(CreateIndex((new_entry,), (entry,))))


def read_snapshot(ds: LanceDataset) -> pa.Table:
    """The region snapshot of ``ds``'s MemWAL index (empty before any refresh)."""
    loaded = mem_wal_index.load(ds)
    if loaded is None:
        raise NotFoundError(f"{ds.uri} has no MemWAL index")
    entry, details = loaded
    spec = max(details.region_specs, key=lambda s: s.spec_id, default=None)
    if details.inline_snapshots is not None:
        data, where = details.inline_snapshots, f"{ds.uri}: inline MemWAL snapshot"
    elif details.num_regions:
        key = f"_indices/{entry.uuid}/{SNAPSHOT_FILE}"
        data, where = ds.store.read(key), f"{ds.uri}/{key}"
    else:
        return snapshot_schema(spec).empty_table()
    reader = LanceFileReader(BytesSource(data, where))
    # Format 2.2 files hold one column per leaf, in schema order.
    leaves = [f for f in reader.schema.walk() if not f.children]
    columns = {f.id: i for i, f in enumerate(leaves)}
    arrays = reader.read(reader.schema.fields, columns)
    table = pa.Table.from_arrays(arrays, schema=reader.schema.to_arrow())
    check_snapshot(table, spec, where)
    return table


def check_snapshot(table: pa.Table, spec: RegionSpec | None, where: str) -> None:
    """A FormatError naming ``where`` unless ``table`` has every column of
    :func:`snapshot_schema` with its type (the region values of ``spec`` when a row is
    of that spec), and the values reads rely on: a region id of 16 bytes, a spec id
    and a list of flushed generations, each with its number and directory, on every
    row."""
    wanted = snapshot_schema(None)
    at = table.schema.get_field_index("region_spec_id")
    if spec is not None and at >= 0 and pa.types.is_integer(table.schema.field(at).type) \
            and pc.any(pc.equal(table.column(at), spec.spec_id)).as_py():
        wanted = snapshot_schema(spec)
    for want in wanted:
        at = table.schema.get_field_index(want.name)
        if at < 0 or table.schema.field(at).type != want.type:
            found = "none" if at < 0 else str(table.schema.field(at).type)
            raise FormatError(f"{where}: the MemWAL snapshot's column {want.name!r} should "
                              f"be {want.type}, found {found}")
    for name in ("region_id", "region_spec_id", "flushed_generations"):
        if table.column(name).null_count:
            raise FormatError(f"{where}: a MemWAL snapshot row without its {name}")
    items = pc.list_flatten(table.column("flushed_generations"))
    if items.null_count or any(items.combine_chunks().field(k).null_count
                               for k in ("generation", "path")):  # fmt: skip
        raise FormatError(f"{where}: a flushed generation without its number or directory "
                          "in the MemWAL snapshot")
