from google.protobuf import any_pb2 as _any_pb2
from . import file_pb2 as _file_pb2
from . import table_pb2 as _table_pb2
from . import memwal_pb2 as _memwal_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Transaction(_message.Message):
    __slots__ = ("read_version", "uuid", "tag", "transaction_properties", "append", "delete", "overwrite", "create_index", "rewrite", "merge", "restore", "reserve_fragments", "update", "project", "update_config", "data_replacement", "update_mem_wal_state", "clone", "update_bases")
    class UpdateMode(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        REWRITE_ROWS: _ClassVar[Transaction.UpdateMode]
        REWRITE_COLUMNS: _ClassVar[Transaction.UpdateMode]
    REWRITE_ROWS: Transaction.UpdateMode
    REWRITE_COLUMNS: Transaction.UpdateMode
    class Append(_message.Message):
        __slots__ = ("fragments",)
        FRAGMENTS_FIELD_NUMBER: _ClassVar[int]
        fragments: _containers.RepeatedCompositeFieldContainer[_table_pb2.DataFragment]
        def __init__(self, fragments: _Optional[_Iterable[_Union[_table_pb2.DataFragment, _Mapping]]] = ...) -> None: ...
    class Delete(_message.Message):
        __slots__ = ("updated_fragments", "deleted_fragment_ids", "predicate")
        UPDATED_FRAGMENTS_FIELD_NUMBER: _ClassVar[int]
        DELETED_FRAGMENT_IDS_FIELD_NUMBER: _ClassVar[int]
        PREDICATE_FIELD_NUMBER: _ClassVar[int]
        updated_fragments: _containers.RepeatedCompositeFieldContainer[_table_pb2.DataFragment]
        deleted_fragment_ids: _containers.RepeatedScalarFieldContainer[int]
        predicate: str
        def __init__(self, updated_fragments: _Optional[_Iterable[_Union[_table_pb2.DataFragment, _Mapping]]] = ..., deleted_fragment_ids: _Optional[_Iterable[int]] = ..., predicate: _Optional[str] = ...) -> None: ...
    class Overwrite(_message.Message):
        __slots__ = ("fragments", "schema", "schema_metadata", "config_upsert_values", "initial_bases")
        class SchemaMetadataEntry(_message.Message):
            __slots__ = ("key", "value")
            KEY_FIELD_NUMBER: _ClassVar[int]
            VALUE_FIELD_NUMBER: _ClassVar[int]
            key: str
            value: bytes
            def __init__(self, key: _Optional[str] = ..., value: _Optional[bytes] = ...) -> None: ...
        class ConfigUpsertValuesEntry(_message.Message):
            __slots__ = ("key", "value")
            KEY_FIELD_NUMBER: _ClassVar[int]
            VALUE_FIELD_NUMBER: _ClassVar[int]
            key: str
            value: str
            def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
        FRAGMENTS_FIELD_NUMBER: _ClassVar[int]
        SCHEMA_FIELD_NUMBER: _ClassVar[int]
        SCHEMA_METADATA_FIELD_NUMBER: _ClassVar[int]
        CONFIG_UPSERT_VALUES_FIELD_NUMBER: _ClassVar[int]
        INITIAL_BASES_FIELD_NUMBER: _ClassVar[int]
        fragments: _containers.RepeatedCompositeFieldContainer[_table_pb2.DataFragment]
        schema: _containers.RepeatedCompositeFieldContainer[_file_pb2.Field]
        schema_metadata: _containers.ScalarMap[str, bytes]
        config_upsert_values: _containers.ScalarMap[str, str]
        initial_bases: _containers.RepeatedCompositeFieldContainer[_table_pb2.BasePath]
        def __init__(self, fragments: _Optional[_Iterable[_Union[_table_pb2.DataFragment, _Mapping]]] = ..., schema: _Optional[_Iterable[_Union[_file_pb2.Field, _Mapping]]] = ..., schema_metadata: _Optional[_Mapping[str, bytes]] = ..., config_upsert_values: _Optional[_Mapping[str, str]] = ..., initial_bases: _Optional[_Iterable[_Union[_table_pb2.BasePath, _Mapping]]] = ...) -> None: ...
    class CreateIndex(_message.Message):
        __slots__ = ("new_indices", "removed_indices")
        NEW_INDICES_FIELD_NUMBER: _ClassVar[int]
        REMOVED_INDICES_FIELD_NUMBER: _ClassVar[int]
        new_indices: _containers.RepeatedCompositeFieldContainer[_table_pb2.IndexMetadata]
        removed_indices: _containers.RepeatedCompositeFieldContainer[_table_pb2.IndexMetadata]
        def __init__(self, new_indices: _Optional[_Iterable[_Union[_table_pb2.IndexMetadata, _Mapping]]] = ..., removed_indices: _Optional[_Iterable[_Union[_table_pb2.IndexMetadata, _Mapping]]] = ...) -> None: ...
    class Rewrite(_message.Message):
        __slots__ = ("old_fragments", "new_fragments", "groups", "rewritten_indices")
        class RewrittenIndex(_message.Message):
            __slots__ = ("old_id", "new_id", "new_index_details", "new_index_version", "new_index_files")
            OLD_ID_FIELD_NUMBER: _ClassVar[int]
            NEW_ID_FIELD_NUMBER: _ClassVar[int]
            NEW_INDEX_DETAILS_FIELD_NUMBER: _ClassVar[int]
            NEW_INDEX_VERSION_FIELD_NUMBER: _ClassVar[int]
            NEW_INDEX_FILES_FIELD_NUMBER: _ClassVar[int]
            old_id: _table_pb2.UUID
            new_id: _table_pb2.UUID
            new_index_details: _any_pb2.Any
            new_index_version: int
            new_index_files: _containers.RepeatedCompositeFieldContainer[_table_pb2.IndexFile]
            def __init__(self, old_id: _Optional[_Union[_table_pb2.UUID, _Mapping]] = ..., new_id: _Optional[_Union[_table_pb2.UUID, _Mapping]] = ..., new_index_details: _Optional[_Union[_any_pb2.Any, _Mapping]] = ..., new_index_version: _Optional[int] = ..., new_index_files: _Optional[_Iterable[_Union[_table_pb2.IndexFile, _Mapping]]] = ...) -> None: ...
        class RewriteGroup(_message.Message):
            __slots__ = ("old_fragments", "new_fragments")
            OLD_FRAGMENTS_FIELD_NUMBER: _ClassVar[int]
            NEW_FRAGMENTS_FIELD_NUMBER: _ClassVar[int]
            old_fragments: _containers.RepeatedCompositeFieldContainer[_table_pb2.DataFragment]
            new_fragments: _containers.RepeatedCompositeFieldContainer[_table_pb2.DataFragment]
            def __init__(self, old_fragments: _Optional[_Iterable[_Union[_table_pb2.DataFragment, _Mapping]]] = ..., new_fragments: _Optional[_Iterable[_Union[_table_pb2.DataFragment, _Mapping]]] = ...) -> None: ...
        OLD_FRAGMENTS_FIELD_NUMBER: _ClassVar[int]
        NEW_FRAGMENTS_FIELD_NUMBER: _ClassVar[int]
        GROUPS_FIELD_NUMBER: _ClassVar[int]
        REWRITTEN_INDICES_FIELD_NUMBER: _ClassVar[int]
        old_fragments: _containers.RepeatedCompositeFieldContainer[_table_pb2.DataFragment]
        new_fragments: _containers.RepeatedCompositeFieldContainer[_table_pb2.DataFragment]
        groups: _containers.RepeatedCompositeFieldContainer[Transaction.Rewrite.RewriteGroup]
        rewritten_indices: _containers.RepeatedCompositeFieldContainer[Transaction.Rewrite.RewrittenIndex]
        def __init__(self, old_fragments: _Optional[_Iterable[_Union[_table_pb2.DataFragment, _Mapping]]] = ..., new_fragments: _Optional[_Iterable[_Union[_table_pb2.DataFragment, _Mapping]]] = ..., groups: _Optional[_Iterable[_Union[Transaction.Rewrite.RewriteGroup, _Mapping]]] = ..., rewritten_indices: _Optional[_Iterable[_Union[Transaction.Rewrite.RewrittenIndex, _Mapping]]] = ...) -> None: ...
    class Merge(_message.Message):
        __slots__ = ("fragments", "schema", "schema_metadata", "preserves_nullability")
        class SchemaMetadataEntry(_message.Message):
            __slots__ = ("key", "value")
            KEY_FIELD_NUMBER: _ClassVar[int]
            VALUE_FIELD_NUMBER: _ClassVar[int]
            key: str
            value: bytes
            def __init__(self, key: _Optional[str] = ..., value: _Optional[bytes] = ...) -> None: ...
        FRAGMENTS_FIELD_NUMBER: _ClassVar[int]
        SCHEMA_FIELD_NUMBER: _ClassVar[int]
        SCHEMA_METADATA_FIELD_NUMBER: _ClassVar[int]
        PRESERVES_NULLABILITY_FIELD_NUMBER: _ClassVar[int]
        fragments: _containers.RepeatedCompositeFieldContainer[_table_pb2.DataFragment]
        schema: _containers.RepeatedCompositeFieldContainer[_file_pb2.Field]
        schema_metadata: _containers.ScalarMap[str, bytes]
        preserves_nullability: bool
        def __init__(self, fragments: _Optional[_Iterable[_Union[_table_pb2.DataFragment, _Mapping]]] = ..., schema: _Optional[_Iterable[_Union[_file_pb2.Field, _Mapping]]] = ..., schema_metadata: _Optional[_Mapping[str, bytes]] = ..., preserves_nullability: _Optional[bool] = ...) -> None: ...
    class Project(_message.Message):
        __slots__ = ("schema", "preserves_nullability")
        SCHEMA_FIELD_NUMBER: _ClassVar[int]
        PRESERVES_NULLABILITY_FIELD_NUMBER: _ClassVar[int]
        schema: _containers.RepeatedCompositeFieldContainer[_file_pb2.Field]
        preserves_nullability: bool
        def __init__(self, schema: _Optional[_Iterable[_Union[_file_pb2.Field, _Mapping]]] = ..., preserves_nullability: _Optional[bool] = ...) -> None: ...
    class Restore(_message.Message):
        __slots__ = ("version",)
        VERSION_FIELD_NUMBER: _ClassVar[int]
        version: int
        def __init__(self, version: _Optional[int] = ...) -> None: ...
    class ReserveFragments(_message.Message):
        __slots__ = ("num_fragments",)
        NUM_FRAGMENTS_FIELD_NUMBER: _ClassVar[int]
        num_fragments: int
        def __init__(self, num_fragments: _Optional[int] = ...) -> None: ...
    class Clone(_message.Message):
        __slots__ = ("is_shallow", "ref_name", "ref_version", "ref_path", "branch_name")
        IS_SHALLOW_FIELD_NUMBER: _ClassVar[int]
        REF_NAME_FIELD_NUMBER: _ClassVar[int]
        REF_VERSION_FIELD_NUMBER: _ClassVar[int]
        REF_PATH_FIELD_NUMBER: _ClassVar[int]
        BRANCH_NAME_FIELD_NUMBER: _ClassVar[int]
        is_shallow: bool
        ref_name: str
        ref_version: int
        ref_path: str
        branch_name: str
        def __init__(self, is_shallow: _Optional[bool] = ..., ref_name: _Optional[str] = ..., ref_version: _Optional[int] = ..., ref_path: _Optional[str] = ..., branch_name: _Optional[str] = ...) -> None: ...
    class Update(_message.Message):
        __slots__ = ("removed_fragment_ids", "updated_fragments", "new_fragments", "fields_modified", "merged_generations", "fields_for_preserving_frag_bitmap", "update_mode")
        REMOVED_FRAGMENT_IDS_FIELD_NUMBER: _ClassVar[int]
        UPDATED_FRAGMENTS_FIELD_NUMBER: _ClassVar[int]
        NEW_FRAGMENTS_FIELD_NUMBER: _ClassVar[int]
        FIELDS_MODIFIED_FIELD_NUMBER: _ClassVar[int]
        MERGED_GENERATIONS_FIELD_NUMBER: _ClassVar[int]
        FIELDS_FOR_PRESERVING_FRAG_BITMAP_FIELD_NUMBER: _ClassVar[int]
        UPDATE_MODE_FIELD_NUMBER: _ClassVar[int]
        removed_fragment_ids: _containers.RepeatedScalarFieldContainer[int]
        updated_fragments: _containers.RepeatedCompositeFieldContainer[_table_pb2.DataFragment]
        new_fragments: _containers.RepeatedCompositeFieldContainer[_table_pb2.DataFragment]
        fields_modified: _containers.RepeatedScalarFieldContainer[int]
        merged_generations: _containers.RepeatedCompositeFieldContainer[_memwal_pb2.MergedGeneration]
        fields_for_preserving_frag_bitmap: _containers.RepeatedScalarFieldContainer[int]
        update_mode: Transaction.UpdateMode
        def __init__(self, removed_fragment_ids: _Optional[_Iterable[int]] = ..., updated_fragments: _Optional[_Iterable[_Union[_table_pb2.DataFragment, _Mapping]]] = ..., new_fragments: _Optional[_Iterable[_Union[_table_pb2.DataFragment, _Mapping]]] = ..., fields_modified: _Optional[_Iterable[int]] = ..., merged_generations: _Optional[_Iterable[_Union[_memwal_pb2.MergedGeneration, _Mapping]]] = ..., fields_for_preserving_frag_bitmap: _Optional[_Iterable[int]] = ..., update_mode: _Optional[_Union[Transaction.UpdateMode, str]] = ...) -> None: ...
    class UpdateMapEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    class UpdateMap(_message.Message):
        __slots__ = ("update_entries", "replace")
        UPDATE_ENTRIES_FIELD_NUMBER: _ClassVar[int]
        REPLACE_FIELD_NUMBER: _ClassVar[int]
        update_entries: _containers.RepeatedCompositeFieldContainer[Transaction.UpdateMapEntry]
        replace: bool
        def __init__(self, update_entries: _Optional[_Iterable[_Union[Transaction.UpdateMapEntry, _Mapping]]] = ..., replace: _Optional[bool] = ...) -> None: ...
    class UpdateConfig(_message.Message):
        __slots__ = ("upsert_values", "delete_keys", "schema_metadata", "field_metadata", "config_updates", "table_metadata_updates", "schema_metadata_updates", "field_metadata_updates")
        class FieldMetadataUpdate(_message.Message):
            __slots__ = ("metadata",)
            class MetadataEntry(_message.Message):
                __slots__ = ("key", "value")
                KEY_FIELD_NUMBER: _ClassVar[int]
                VALUE_FIELD_NUMBER: _ClassVar[int]
                key: str
                value: str
                def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
            METADATA_FIELD_NUMBER: _ClassVar[int]
            metadata: _containers.ScalarMap[str, str]
            def __init__(self, metadata: _Optional[_Mapping[str, str]] = ...) -> None: ...
        class UpsertValuesEntry(_message.Message):
            __slots__ = ("key", "value")
            KEY_FIELD_NUMBER: _ClassVar[int]
            VALUE_FIELD_NUMBER: _ClassVar[int]
            key: str
            value: str
            def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
        class SchemaMetadataEntry(_message.Message):
            __slots__ = ("key", "value")
            KEY_FIELD_NUMBER: _ClassVar[int]
            VALUE_FIELD_NUMBER: _ClassVar[int]
            key: str
            value: str
            def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
        class FieldMetadataEntry(_message.Message):
            __slots__ = ("key", "value")
            KEY_FIELD_NUMBER: _ClassVar[int]
            VALUE_FIELD_NUMBER: _ClassVar[int]
            key: int
            value: Transaction.UpdateConfig.FieldMetadataUpdate
            def __init__(self, key: _Optional[int] = ..., value: _Optional[_Union[Transaction.UpdateConfig.FieldMetadataUpdate, _Mapping]] = ...) -> None: ...
        class FieldMetadataUpdatesEntry(_message.Message):
            __slots__ = ("key", "value")
            KEY_FIELD_NUMBER: _ClassVar[int]
            VALUE_FIELD_NUMBER: _ClassVar[int]
            key: int
            value: Transaction.UpdateMap
            def __init__(self, key: _Optional[int] = ..., value: _Optional[_Union[Transaction.UpdateMap, _Mapping]] = ...) -> None: ...
        UPSERT_VALUES_FIELD_NUMBER: _ClassVar[int]
        DELETE_KEYS_FIELD_NUMBER: _ClassVar[int]
        SCHEMA_METADATA_FIELD_NUMBER: _ClassVar[int]
        FIELD_METADATA_FIELD_NUMBER: _ClassVar[int]
        CONFIG_UPDATES_FIELD_NUMBER: _ClassVar[int]
        TABLE_METADATA_UPDATES_FIELD_NUMBER: _ClassVar[int]
        SCHEMA_METADATA_UPDATES_FIELD_NUMBER: _ClassVar[int]
        FIELD_METADATA_UPDATES_FIELD_NUMBER: _ClassVar[int]
        upsert_values: _containers.ScalarMap[str, str]
        delete_keys: _containers.RepeatedScalarFieldContainer[str]
        schema_metadata: _containers.ScalarMap[str, str]
        field_metadata: _containers.MessageMap[int, Transaction.UpdateConfig.FieldMetadataUpdate]
        config_updates: Transaction.UpdateMap
        table_metadata_updates: Transaction.UpdateMap
        schema_metadata_updates: Transaction.UpdateMap
        field_metadata_updates: _containers.MessageMap[int, Transaction.UpdateMap]
        def __init__(self, upsert_values: _Optional[_Mapping[str, str]] = ..., delete_keys: _Optional[_Iterable[str]] = ..., schema_metadata: _Optional[_Mapping[str, str]] = ..., field_metadata: _Optional[_Mapping[int, Transaction.UpdateConfig.FieldMetadataUpdate]] = ..., config_updates: _Optional[_Union[Transaction.UpdateMap, _Mapping]] = ..., table_metadata_updates: _Optional[_Union[Transaction.UpdateMap, _Mapping]] = ..., schema_metadata_updates: _Optional[_Union[Transaction.UpdateMap, _Mapping]] = ..., field_metadata_updates: _Optional[_Mapping[int, Transaction.UpdateMap]] = ...) -> None: ...
    class DataReplacementGroup(_message.Message):
        __slots__ = ("fragment_id", "new_file")
        FRAGMENT_ID_FIELD_NUMBER: _ClassVar[int]
        NEW_FILE_FIELD_NUMBER: _ClassVar[int]
        fragment_id: int
        new_file: _table_pb2.DataFile
        def __init__(self, fragment_id: _Optional[int] = ..., new_file: _Optional[_Union[_table_pb2.DataFile, _Mapping]] = ...) -> None: ...
    class DataReplacement(_message.Message):
        __slots__ = ("replacements",)
        REPLACEMENTS_FIELD_NUMBER: _ClassVar[int]
        replacements: _containers.RepeatedCompositeFieldContainer[Transaction.DataReplacementGroup]
        def __init__(self, replacements: _Optional[_Iterable[_Union[Transaction.DataReplacementGroup, _Mapping]]] = ...) -> None: ...
    class UpdateMemWalState(_message.Message):
        __slots__ = ("added", "updated", "removed")
        ADDED_FIELD_NUMBER: _ClassVar[int]
        UPDATED_FIELD_NUMBER: _ClassVar[int]
        REMOVED_FIELD_NUMBER: _ClassVar[int]
        added: _containers.RepeatedCompositeFieldContainer[_memwal_pb2.LegacyMemWal]
        updated: _containers.RepeatedCompositeFieldContainer[_memwal_pb2.LegacyMemWal]
        removed: _containers.RepeatedCompositeFieldContainer[_memwal_pb2.LegacyMemWal]
        def __init__(self, added: _Optional[_Iterable[_Union[_memwal_pb2.LegacyMemWal, _Mapping]]] = ..., updated: _Optional[_Iterable[_Union[_memwal_pb2.LegacyMemWal, _Mapping]]] = ..., removed: _Optional[_Iterable[_Union[_memwal_pb2.LegacyMemWal, _Mapping]]] = ...) -> None: ...
    class UpdateBases(_message.Message):
        __slots__ = ("new_bases",)
        NEW_BASES_FIELD_NUMBER: _ClassVar[int]
        new_bases: _containers.RepeatedCompositeFieldContainer[_table_pb2.BasePath]
        def __init__(self, new_bases: _Optional[_Iterable[_Union[_table_pb2.BasePath, _Mapping]]] = ...) -> None: ...
    class TransactionPropertiesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    READ_VERSION_FIELD_NUMBER: _ClassVar[int]
    UUID_FIELD_NUMBER: _ClassVar[int]
    TAG_FIELD_NUMBER: _ClassVar[int]
    TRANSACTION_PROPERTIES_FIELD_NUMBER: _ClassVar[int]
    APPEND_FIELD_NUMBER: _ClassVar[int]
    DELETE_FIELD_NUMBER: _ClassVar[int]
    OVERWRITE_FIELD_NUMBER: _ClassVar[int]
    CREATE_INDEX_FIELD_NUMBER: _ClassVar[int]
    REWRITE_FIELD_NUMBER: _ClassVar[int]
    MERGE_FIELD_NUMBER: _ClassVar[int]
    RESTORE_FIELD_NUMBER: _ClassVar[int]
    RESERVE_FRAGMENTS_FIELD_NUMBER: _ClassVar[int]
    UPDATE_FIELD_NUMBER: _ClassVar[int]
    PROJECT_FIELD_NUMBER: _ClassVar[int]
    UPDATE_CONFIG_FIELD_NUMBER: _ClassVar[int]
    DATA_REPLACEMENT_FIELD_NUMBER: _ClassVar[int]
    UPDATE_MEM_WAL_STATE_FIELD_NUMBER: _ClassVar[int]
    CLONE_FIELD_NUMBER: _ClassVar[int]
    UPDATE_BASES_FIELD_NUMBER: _ClassVar[int]
    read_version: int
    uuid: str
    tag: str
    transaction_properties: _containers.ScalarMap[str, str]
    append: Transaction.Append
    delete: Transaction.Delete
    overwrite: Transaction.Overwrite
    create_index: Transaction.CreateIndex
    rewrite: Transaction.Rewrite
    merge: Transaction.Merge
    restore: Transaction.Restore
    reserve_fragments: Transaction.ReserveFragments
    update: Transaction.Update
    project: Transaction.Project
    update_config: Transaction.UpdateConfig
    data_replacement: Transaction.DataReplacement
    update_mem_wal_state: Transaction.UpdateMemWalState
    clone: Transaction.Clone
    update_bases: Transaction.UpdateBases
    def __init__(self, read_version: _Optional[int] = ..., uuid: _Optional[str] = ..., tag: _Optional[str] = ..., transaction_properties: _Optional[_Mapping[str, str]] = ..., append: _Optional[_Union[Transaction.Append, _Mapping]] = ..., delete: _Optional[_Union[Transaction.Delete, _Mapping]] = ..., overwrite: _Optional[_Union[Transaction.Overwrite, _Mapping]] = ..., create_index: _Optional[_Union[Transaction.CreateIndex, _Mapping]] = ..., rewrite: _Optional[_Union[Transaction.Rewrite, _Mapping]] = ..., merge: _Optional[_Union[Transaction.Merge, _Mapping]] = ..., restore: _Optional[_Union[Transaction.Restore, _Mapping]] = ..., reserve_fragments: _Optional[_Union[Transaction.ReserveFragments, _Mapping]] = ..., update: _Optional[_Union[Transaction.Update, _Mapping]] = ..., project: _Optional[_Union[Transaction.Project, _Mapping]] = ..., update_config: _Optional[_Union[Transaction.UpdateConfig, _Mapping]] = ..., data_replacement: _Optional[_Union[Transaction.DataReplacement, _Mapping]] = ..., update_mem_wal_state: _Optional[_Union[Transaction.UpdateMemWalState, _Mapping]] = ..., clone: _Optional[_Union[Transaction.Clone, _Mapping]] = ..., update_bases: _Optional[_Union[Transaction.UpdateBases, _Mapping]] = ...) -> None: ...
