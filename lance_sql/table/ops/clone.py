"""Cloning a version of a table into a new location (a Clone transaction).

* Shallow: metadata only. The new table's manifest lists the source's fragments with
  every file that lived at the source root now under a base path pointing at the source
  (``is_dataset_root``), as the reference writes it; the version number is kept.
* Deep: every file the version needs (data, deletion and index files, from whichever
  base they live under) is copied into the new table's root and the manifest refers to
  them there, so the clone does not depend on the source at all.
"""

from __future__ import annotations

import os
from dataclasses import replace

from lance_sql.errors import TableExistsError
from lance_sql.format.fragment import Fragment
from lance_sql.format.index import IndexMetadata, decode_index_section, encode_index_section
from lance_sql.format.manifest import Manifest
from lance_sql.format.naming import ManifestNaming
from lance_sql.io.store import ObjectStore
from lance_sql.io.uri import open_store
from lance_sql.table.files.reader import base_store
from lance_sql.table.txn.commit import CommitConfig
from lance_sql.table.txn.operations import Clone
from lance_sql.table.txn.writer import WriteContext


def clone(store: ObjectStore, source: Manifest, naming: ManifestNaming,
          target: str | os.PathLike[str], config: CommitConfig, *, shallow: bool = True,
          ref_name: str | None = None) -> tuple[ObjectStore, Manifest]:
    """Clone ``source`` (a version of the table at ``store``, tagged ``ref_name`` if it
    was named by a tag) to ``target``; returns the new table's store and manifest."""
    target_store = open_store(target)
    ctx = WriteContext.open(target_store, config, naming=naming)
    if ctx.base is not None:
        raise TableExistsError(f"cannot clone into {target_store.uri}: a table exists there")
    op = Clone(is_shallow=shallow, ref_version=source.version, ref_path=store.uri,
               ref_name=ref_name)
    if shallow:
        return target_store, ctx.commit(op, read_version=source.version, source=source,
                                        data_format=source.data_format)
    with ctx.staging() as staged:
        local = _copy_files(store, source, target_store, staged.keys)
        return target_store, ctx.commit(op, read_version=source.version, source=local,
                                        data_format=source.data_format)


def _copy(src: ObjectStore, dst: ObjectStore, key: str, copied: list[str]) -> None:
    data = src.read(key)
    copied.append(key)
    dst.put(key, data)


def _copy_files(store: ObjectStore, source: Manifest, target: ObjectStore,
                copied: list[str]) -> Manifest:
    """Copy everything ``source`` needs into ``target``; the manifest rooted there."""
    fragments: list[Fragment] = []
    for frag in source.fragments:
        files = []
        for data_file in frag.files:
            _copy(base_store(store, source, data_file.base_id), target, data_file.key, copied)
            files.append(replace(data_file, base_id=None))
        deletion = frag.deletion_file
        if deletion is not None:
            root = base_store(store, source, deletion.base_id)
            _copy(root, target, deletion.key(frag.id), copied)
            deletion = replace(deletion, base_id=None)
        fragments.append(replace(frag, files=tuple(files), deletion_file=deletion))
    indices = []
    for index in decode_index_section(source.index_section):
        pb = index.to_proto()
        root = base_store(store, source, pb.base_id if pb.HasField("base_id") else None)
        directory = f"_indices/{index.uuid}"
        for name in root.list_dir(directory):
            _copy(root, target, f"{directory}/{name}", copied)
        pb.ClearField("base_id")
        indices.append(IndexMetadata.from_proto(pb))
    return replace(source, fragments=tuple(fragments), base_paths=(),
                   index_section=encode_index_section(indices))
