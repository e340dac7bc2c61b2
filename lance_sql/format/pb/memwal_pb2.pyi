from . import table_pb2 as _table_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class FlushedGeneration(_message.Message):
    __slots__ = ("generation", "path", "in_memory_bytes", "physical_rows", "primary_key_bytes")
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    IN_MEMORY_BYTES_FIELD_NUMBER: _ClassVar[int]
    PHYSICAL_ROWS_FIELD_NUMBER: _ClassVar[int]
    PRIMARY_KEY_BYTES_FIELD_NUMBER: _ClassVar[int]
    generation: int
    path: str
    in_memory_bytes: int
    physical_rows: int
    primary_key_bytes: int
    def __init__(self, generation: _Optional[int] = ..., path: _Optional[str] = ..., in_memory_bytes: _Optional[int] = ..., physical_rows: _Optional[int] = ..., primary_key_bytes: _Optional[int] = ...) -> None: ...

class RegionManifest(_message.Message):
    __slots__ = ("region_id", "version", "region_spec_id", "writer_epoch", "replay_after_wal_id", "wal_id_last_seen", "current_generation", "flushed_generations", "region_values")
    REGION_ID_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    REGION_SPEC_ID_FIELD_NUMBER: _ClassVar[int]
    WRITER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    REPLAY_AFTER_WAL_ID_FIELD_NUMBER: _ClassVar[int]
    WAL_ID_LAST_SEEN_FIELD_NUMBER: _ClassVar[int]
    CURRENT_GENERATION_FIELD_NUMBER: _ClassVar[int]
    FLUSHED_GENERATIONS_FIELD_NUMBER: _ClassVar[int]
    REGION_VALUES_FIELD_NUMBER: _ClassVar[int]
    region_id: _table_pb2.UUID
    version: int
    region_spec_id: int
    writer_epoch: int
    replay_after_wal_id: int
    wal_id_last_seen: int
    current_generation: int
    flushed_generations: _containers.RepeatedCompositeFieldContainer[FlushedGeneration]
    region_values: bytes
    def __init__(self, region_id: _Optional[_Union[_table_pb2.UUID, _Mapping]] = ..., version: _Optional[int] = ..., region_spec_id: _Optional[int] = ..., writer_epoch: _Optional[int] = ..., replay_after_wal_id: _Optional[int] = ..., wal_id_last_seen: _Optional[int] = ..., current_generation: _Optional[int] = ..., flushed_generations: _Optional[_Iterable[_Union[FlushedGeneration, _Mapping]]] = ..., region_values: _Optional[bytes] = ...) -> None: ...

class RegionField(_message.Message):
    __slots__ = ("field_id", "source_ids", "transform", "expression", "result_type", "parameters")
    class ParametersEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    FIELD_ID_FIELD_NUMBER: _ClassVar[int]
    SOURCE_IDS_FIELD_NUMBER: _ClassVar[int]
    TRANSFORM_FIELD_NUMBER: _ClassVar[int]
    EXPRESSION_FIELD_NUMBER: _ClassVar[int]
    RESULT_TYPE_FIELD_NUMBER: _ClassVar[int]
    PARAMETERS_FIELD_NUMBER: _ClassVar[int]
    field_id: str
    source_ids: _containers.RepeatedScalarFieldContainer[int]
    transform: str
    expression: str
    result_type: str
    parameters: _containers.ScalarMap[str, str]
    def __init__(self, field_id: _Optional[str] = ..., source_ids: _Optional[_Iterable[int]] = ..., transform: _Optional[str] = ..., expression: _Optional[str] = ..., result_type: _Optional[str] = ..., parameters: _Optional[_Mapping[str, str]] = ...) -> None: ...

class RegionSpec(_message.Message):
    __slots__ = ("spec_id", "fields")
    SPEC_ID_FIELD_NUMBER: _ClassVar[int]
    FIELDS_FIELD_NUMBER: _ClassVar[int]
    spec_id: int
    fields: _containers.RepeatedCompositeFieldContainer[RegionField]
    def __init__(self, spec_id: _Optional[int] = ..., fields: _Optional[_Iterable[_Union[RegionField, _Mapping]]] = ...) -> None: ...

class MergedGeneration(_message.Message):
    __slots__ = ("region_id", "generation")
    REGION_ID_FIELD_NUMBER: _ClassVar[int]
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    region_id: _table_pb2.UUID
    generation: int
    def __init__(self, region_id: _Optional[_Union[_table_pb2.UUID, _Mapping]] = ..., generation: _Optional[int] = ...) -> None: ...

class IndexCatchupProgress(_message.Message):
    __slots__ = ("index_name", "caught_up_generations")
    INDEX_NAME_FIELD_NUMBER: _ClassVar[int]
    CAUGHT_UP_GENERATIONS_FIELD_NUMBER: _ClassVar[int]
    index_name: str
    caught_up_generations: _containers.RepeatedCompositeFieldContainer[MergedGeneration]
    def __init__(self, index_name: _Optional[str] = ..., caught_up_generations: _Optional[_Iterable[_Union[MergedGeneration, _Mapping]]] = ...) -> None: ...

class MemWalIndexDetails(_message.Message):
    __slots__ = ("snapshot_ts_millis", "num_regions", "inline_snapshots", "region_specs", "maintained_indexes", "merged_generations", "index_catchup", "writer_config_defaults", "maintain_all_indexes")
    class WriterConfigDefaultsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    SNAPSHOT_TS_MILLIS_FIELD_NUMBER: _ClassVar[int]
    NUM_REGIONS_FIELD_NUMBER: _ClassVar[int]
    INLINE_SNAPSHOTS_FIELD_NUMBER: _ClassVar[int]
    REGION_SPECS_FIELD_NUMBER: _ClassVar[int]
    MAINTAINED_INDEXES_FIELD_NUMBER: _ClassVar[int]
    MERGED_GENERATIONS_FIELD_NUMBER: _ClassVar[int]
    INDEX_CATCHUP_FIELD_NUMBER: _ClassVar[int]
    WRITER_CONFIG_DEFAULTS_FIELD_NUMBER: _ClassVar[int]
    MAINTAIN_ALL_INDEXES_FIELD_NUMBER: _ClassVar[int]
    snapshot_ts_millis: int
    num_regions: int
    inline_snapshots: bytes
    region_specs: _containers.RepeatedCompositeFieldContainer[RegionSpec]
    maintained_indexes: _containers.RepeatedScalarFieldContainer[str]
    merged_generations: _containers.RepeatedCompositeFieldContainer[MergedGeneration]
    index_catchup: _containers.RepeatedCompositeFieldContainer[IndexCatchupProgress]
    writer_config_defaults: _containers.ScalarMap[str, str]
    maintain_all_indexes: bool
    def __init__(self, snapshot_ts_millis: _Optional[int] = ..., num_regions: _Optional[int] = ..., inline_snapshots: _Optional[bytes] = ..., region_specs: _Optional[_Iterable[_Union[RegionSpec, _Mapping]]] = ..., maintained_indexes: _Optional[_Iterable[str]] = ..., merged_generations: _Optional[_Iterable[_Union[MergedGeneration, _Mapping]]] = ..., index_catchup: _Optional[_Iterable[_Union[IndexCatchupProgress, _Mapping]]] = ..., writer_config_defaults: _Optional[_Mapping[str, str]] = ..., maintain_all_indexes: _Optional[bool] = ...) -> None: ...

class LegacyMemWalId(_message.Message):
    __slots__ = ("region", "generation")
    REGION_FIELD_NUMBER: _ClassVar[int]
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    region: str
    generation: int
    def __init__(self, region: _Optional[str] = ..., generation: _Optional[int] = ...) -> None: ...

class LegacyMemWal(_message.Message):
    __slots__ = ("id", "mem_table_location", "wal_location", "wal_entries", "state", "owner_id", "last_updated_dataset_version")
    class State(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        OPEN: _ClassVar[LegacyMemWal.State]
        SEALED: _ClassVar[LegacyMemWal.State]
        FLUSHED: _ClassVar[LegacyMemWal.State]
        MERGED: _ClassVar[LegacyMemWal.State]
    OPEN: LegacyMemWal.State
    SEALED: LegacyMemWal.State
    FLUSHED: LegacyMemWal.State
    MERGED: LegacyMemWal.State
    ID_FIELD_NUMBER: _ClassVar[int]
    MEM_TABLE_LOCATION_FIELD_NUMBER: _ClassVar[int]
    WAL_LOCATION_FIELD_NUMBER: _ClassVar[int]
    WAL_ENTRIES_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    OWNER_ID_FIELD_NUMBER: _ClassVar[int]
    LAST_UPDATED_DATASET_VERSION_FIELD_NUMBER: _ClassVar[int]
    id: LegacyMemWalId
    mem_table_location: str
    wal_location: str
    wal_entries: bytes
    state: LegacyMemWal.State
    owner_id: str
    last_updated_dataset_version: int
    def __init__(self, id: _Optional[_Union[LegacyMemWalId, _Mapping]] = ..., mem_table_location: _Optional[str] = ..., wal_location: _Optional[str] = ..., wal_entries: _Optional[bytes] = ..., state: _Optional[_Union[LegacyMemWal.State, str]] = ..., owner_id: _Optional[str] = ..., last_updated_dataset_version: _Optional[int] = ...) -> None: ...
