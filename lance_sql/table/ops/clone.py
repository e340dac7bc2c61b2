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
from typing import TYPE_CHECKING

from lance_sql.errors import InvalidInputError
from lance_sql.format.fragment import Fragment
from lance_sql.format.index import IndexMetadata, decode_index_section, encode_index_section
from lance_sql.format.manifest import Manifest
from lance_sql.io.store import ObjectStore
from lance_sql.io.uri import open_store
from lance_sql.table.files.reader import base_store
from lance_sql.table.meta.versions import list_versions, read_tag
from lance_sql.table.txn.commit import commit_transaction, committed_version
from lance_sql.table.txn.operations import Clone, Transaction

if TYPE_CHECKING:
    from lance_sql.table.dataset import LanceDataset


def clone(ds: LanceDataset, target: str | os.PathLike[str],
          reference: int | str | None = None, *, shallow: bool = True) -> tuple[
              ObjectStore, Manifest]:
    """Clone version ``reference`` (number, tag, or None for ``ds``'s version) to ``target``."""
    ref_name = reference if isinstance(reference, str) and not reference.isdigit() else None
    if ref_name is not None:
        version = read_tag(ds.store, ref_name)["version"]
    else:
        version = ds.version if reference is None else int(reference)
    source_ds = ds if version == ds.version else ds.checkout_version(version)
    source = source_ds.manifest
    target_store = open_store(target)
    existing = list_versions(target_store)
    if existing:
        raise InvalidInputError(f"cannot clone into {target_store.uri}: a table exists there")
    naming = source_ds._ref.naming
    op = Clone(is_shallow=shallow, ref_version=version, ref_path=ds.store.uri,
               ref_name=ref_name)
    txn = Transaction(read_version=version, operation=op)
    if shallow:
        manifest = commit_transaction(target_store, None, naming, txn, source=source,
                                      data_format=source.data_format, config=ds.commit_config)
        return target_store, manifest
    copied: list[str] = []
    try:
        local = _copy_files(ds.store, source, target_store, copied)
        manifest = commit_transaction(target_store, None, naming, txn, source=local,
                                      data_format=source.data_format, config=ds.commit_config)
    except BaseException as exc:
        if committed_version(exc) is None:
            for key in copied:
                target_store.delete(key)
        raise
    return target_store, manifest


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
