from google.protobuf import empty_pb2 as _empty_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Buffer(_message.Message):
    __slots__ = ("buffer_index", "buffer_type")
    class BufferType(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        page: _ClassVar[Buffer.BufferType]
        column: _ClassVar[Buffer.BufferType]
        file: _ClassVar[Buffer.BufferType]
    page: Buffer.BufferType
    column: Buffer.BufferType
    file: Buffer.BufferType
    BUFFER_INDEX_FIELD_NUMBER: _ClassVar[int]
    BUFFER_TYPE_FIELD_NUMBER: _ClassVar[int]
    buffer_index: int
    buffer_type: Buffer.BufferType
    def __init__(self, buffer_index: _Optional[int] = ..., buffer_type: _Optional[_Union[Buffer.BufferType, str]] = ...) -> None: ...

class Nullable(_message.Message):
    __slots__ = ("no_nulls", "some_nulls", "all_nulls")
    class NoNull(_message.Message):
        __slots__ = ("values",)
        VALUES_FIELD_NUMBER: _ClassVar[int]
        values: ArrayEncoding
        def __init__(self, values: _Optional[_Union[ArrayEncoding, _Mapping]] = ...) -> None: ...
    class AllNull(_message.Message):
        __slots__ = ()
        def __init__(self) -> None: ...
    class SomeNull(_message.Message):
        __slots__ = ("validity", "values")
        VALIDITY_FIELD_NUMBER: _ClassVar[int]
        VALUES_FIELD_NUMBER: _ClassVar[int]
        validity: ArrayEncoding
        values: ArrayEncoding
        def __init__(self, validity: _Optional[_Union[ArrayEncoding, _Mapping]] = ..., values: _Optional[_Union[ArrayEncoding, _Mapping]] = ...) -> None: ...
    NO_NULLS_FIELD_NUMBER: _ClassVar[int]
    SOME_NULLS_FIELD_NUMBER: _ClassVar[int]
    ALL_NULLS_FIELD_NUMBER: _ClassVar[int]
    no_nulls: Nullable.NoNull
    some_nulls: Nullable.SomeNull
    all_nulls: Nullable.AllNull
    def __init__(self, no_nulls: _Optional[_Union[Nullable.NoNull, _Mapping]] = ..., some_nulls: _Optional[_Union[Nullable.SomeNull, _Mapping]] = ..., all_nulls: _Optional[_Union[Nullable.AllNull, _Mapping]] = ...) -> None: ...

class List(_message.Message):
    __slots__ = ("offsets", "null_offset_adjustment", "num_items")
    OFFSETS_FIELD_NUMBER: _ClassVar[int]
    NULL_OFFSET_ADJUSTMENT_FIELD_NUMBER: _ClassVar[int]
    NUM_ITEMS_FIELD_NUMBER: _ClassVar[int]
    offsets: ArrayEncoding
    null_offset_adjustment: int
    num_items: int
    def __init__(self, offsets: _Optional[_Union[ArrayEncoding, _Mapping]] = ..., null_offset_adjustment: _Optional[int] = ..., num_items: _Optional[int] = ...) -> None: ...

class FixedSizeList(_message.Message):
    __slots__ = ("dimension", "items", "has_validity")
    DIMENSION_FIELD_NUMBER: _ClassVar[int]
    ITEMS_FIELD_NUMBER: _ClassVar[int]
    HAS_VALIDITY_FIELD_NUMBER: _ClassVar[int]
    dimension: int
    items: ArrayEncoding
    has_validity: bool
    def __init__(self, dimension: _Optional[int] = ..., items: _Optional[_Union[ArrayEncoding, _Mapping]] = ..., has_validity: _Optional[bool] = ...) -> None: ...

class Compression(_message.Message):
    __slots__ = ("scheme", "level")
    SCHEME_FIELD_NUMBER: _ClassVar[int]
    LEVEL_FIELD_NUMBER: _ClassVar[int]
    scheme: str
    level: int
    def __init__(self, scheme: _Optional[str] = ..., level: _Optional[int] = ...) -> None: ...

class Flat(_message.Message):
    __slots__ = ("bits_per_value", "buffer", "compression")
    BITS_PER_VALUE_FIELD_NUMBER: _ClassVar[int]
    BUFFER_FIELD_NUMBER: _ClassVar[int]
    COMPRESSION_FIELD_NUMBER: _ClassVar[int]
    bits_per_value: int
    buffer: Buffer
    compression: Compression
    def __init__(self, bits_per_value: _Optional[int] = ..., buffer: _Optional[_Union[Buffer, _Mapping]] = ..., compression: _Optional[_Union[Compression, _Mapping]] = ...) -> None: ...

class Constant(_message.Message):
    __slots__ = ("value",)
    VALUE_FIELD_NUMBER: _ClassVar[int]
    value: bytes
    def __init__(self, value: _Optional[bytes] = ...) -> None: ...

class Bitpacked(_message.Message):
    __slots__ = ("compressed_bits_per_value", "uncompressed_bits_per_value", "buffer", "signed")
    COMPRESSED_BITS_PER_VALUE_FIELD_NUMBER: _ClassVar[int]
    UNCOMPRESSED_BITS_PER_VALUE_FIELD_NUMBER: _ClassVar[int]
    BUFFER_FIELD_NUMBER: _ClassVar[int]
    SIGNED_FIELD_NUMBER: _ClassVar[int]
    compressed_bits_per_value: int
    uncompressed_bits_per_value: int
    buffer: Buffer
    signed: bool
    def __init__(self, compressed_bits_per_value: _Optional[int] = ..., uncompressed_bits_per_value: _Optional[int] = ..., buffer: _Optional[_Union[Buffer, _Mapping]] = ..., signed: _Optional[bool] = ...) -> None: ...

class BitpackedForNonNeg(_message.Message):
    __slots__ = ("compressed_bits_per_value", "uncompressed_bits_per_value", "buffer")
    COMPRESSED_BITS_PER_VALUE_FIELD_NUMBER: _ClassVar[int]
    UNCOMPRESSED_BITS_PER_VALUE_FIELD_NUMBER: _ClassVar[int]
    BUFFER_FIELD_NUMBER: _ClassVar[int]
    compressed_bits_per_value: int
    uncompressed_bits_per_value: int
    buffer: Buffer
    def __init__(self, compressed_bits_per_value: _Optional[int] = ..., uncompressed_bits_per_value: _Optional[int] = ..., buffer: _Optional[_Union[Buffer, _Mapping]] = ...) -> None: ...

class InlineBitpacking(_message.Message):
    __slots__ = ("uncompressed_bits_per_value",)
    UNCOMPRESSED_BITS_PER_VALUE_FIELD_NUMBER: _ClassVar[int]
    uncompressed_bits_per_value: int
    def __init__(self, uncompressed_bits_per_value: _Optional[int] = ...) -> None: ...

class OutOfLineBitpacking(_message.Message):
    __slots__ = ("uncompressed_bits_per_value", "compressed_bits_per_value")
    UNCOMPRESSED_BITS_PER_VALUE_FIELD_NUMBER: _ClassVar[int]
    COMPRESSED_BITS_PER_VALUE_FIELD_NUMBER: _ClassVar[int]
    uncompressed_bits_per_value: int
    compressed_bits_per_value: int
    def __init__(self, uncompressed_bits_per_value: _Optional[int] = ..., compressed_bits_per_value: _Optional[int] = ...) -> None: ...

class SimpleStruct(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class Binary(_message.Message):
    __slots__ = ("indices", "bytes", "null_adjustment")
    INDICES_FIELD_NUMBER: _ClassVar[int]
    BYTES_FIELD_NUMBER: _ClassVar[int]
    NULL_ADJUSTMENT_FIELD_NUMBER: _ClassVar[int]
    indices: ArrayEncoding
    bytes: ArrayEncoding
    null_adjustment: int
    def __init__(self, indices: _Optional[_Union[ArrayEncoding, _Mapping]] = ..., bytes: _Optional[_Union[ArrayEncoding, _Mapping]] = ..., null_adjustment: _Optional[int] = ...) -> None: ...

class Variable(_message.Message):
    __slots__ = ("bits_per_offset",)
    BITS_PER_OFFSET_FIELD_NUMBER: _ClassVar[int]
    bits_per_offset: int
    def __init__(self, bits_per_offset: _Optional[int] = ...) -> None: ...

class Fsst(_message.Message):
    __slots__ = ("binary", "symbol_table")
    BINARY_FIELD_NUMBER: _ClassVar[int]
    SYMBOL_TABLE_FIELD_NUMBER: _ClassVar[int]
    binary: ArrayEncoding
    symbol_table: bytes
    def __init__(self, binary: _Optional[_Union[ArrayEncoding, _Mapping]] = ..., symbol_table: _Optional[bytes] = ...) -> None: ...

class Dictionary(_message.Message):
    __slots__ = ("indices", "items", "num_dictionary_items")
    INDICES_FIELD_NUMBER: _ClassVar[int]
    ITEMS_FIELD_NUMBER: _ClassVar[int]
    NUM_DICTIONARY_ITEMS_FIELD_NUMBER: _ClassVar[int]
    indices: ArrayEncoding
    items: ArrayEncoding
    num_dictionary_items: int
    def __init__(self, indices: _Optional[_Union[ArrayEncoding, _Mapping]] = ..., items: _Optional[_Union[ArrayEncoding, _Mapping]] = ..., num_dictionary_items: _Optional[int] = ...) -> None: ...

class PackedStruct(_message.Message):
    __slots__ = ("inner", "buffer")
    INNER_FIELD_NUMBER: _ClassVar[int]
    BUFFER_FIELD_NUMBER: _ClassVar[int]
    inner: _containers.RepeatedCompositeFieldContainer[ArrayEncoding]
    buffer: Buffer
    def __init__(self, inner: _Optional[_Iterable[_Union[ArrayEncoding, _Mapping]]] = ..., buffer: _Optional[_Union[Buffer, _Mapping]] = ...) -> None: ...

class PackedStructFixedWidthMiniBlock(_message.Message):
    __slots__ = ("Flat", "bits_per_values")
    FLAT_FIELD_NUMBER: _ClassVar[int]
    BITS_PER_VALUES_FIELD_NUMBER: _ClassVar[int]
    Flat: ArrayEncoding
    bits_per_values: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, Flat: _Optional[_Union[ArrayEncoding, _Mapping]] = ..., bits_per_values: _Optional[_Iterable[int]] = ...) -> None: ...

class FixedSizeBinary(_message.Message):
    __slots__ = ("bytes", "byte_width")
    BYTES_FIELD_NUMBER: _ClassVar[int]
    BYTE_WIDTH_FIELD_NUMBER: _ClassVar[int]
    bytes: ArrayEncoding
    byte_width: int
    def __init__(self, bytes: _Optional[_Union[ArrayEncoding, _Mapping]] = ..., byte_width: _Optional[int] = ...) -> None: ...

class Block(_message.Message):
    __slots__ = ("scheme",)
    SCHEME_FIELD_NUMBER: _ClassVar[int]
    scheme: str
    def __init__(self, scheme: _Optional[str] = ...) -> None: ...

class Rle(_message.Message):
    __slots__ = ("bits_per_value",)
    BITS_PER_VALUE_FIELD_NUMBER: _ClassVar[int]
    bits_per_value: int
    def __init__(self, bits_per_value: _Optional[int] = ...) -> None: ...

class ByteStreamSplit(_message.Message):
    __slots__ = ("bits_per_value",)
    BITS_PER_VALUE_FIELD_NUMBER: _ClassVar[int]
    bits_per_value: int
    def __init__(self, bits_per_value: _Optional[int] = ...) -> None: ...

class GeneralMiniBlock(_message.Message):
    __slots__ = ("inner", "compression")
    INNER_FIELD_NUMBER: _ClassVar[int]
    COMPRESSION_FIELD_NUMBER: _ClassVar[int]
    inner: ArrayEncoding
    compression: Compression
    def __init__(self, inner: _Optional[_Union[ArrayEncoding, _Mapping]] = ..., compression: _Optional[_Union[Compression, _Mapping]] = ...) -> None: ...

class ArrayEncoding(_message.Message):
    __slots__ = ("flat", "nullable", "fixed_size_list", "list", "struct", "binary", "dictionary", "fsst", "packed_struct", "bitpacked", "fixed_size_binary", "bitpacked_for_non_neg", "constant", "inline_bitpacking", "out_of_line_bitpacking", "variable", "packed_struct_fixed_width_mini_block", "block", "rle", "general_mini_block", "byte_stream_split")
    FLAT_FIELD_NUMBER: _ClassVar[int]
    NULLABLE_FIELD_NUMBER: _ClassVar[int]
    FIXED_SIZE_LIST_FIELD_NUMBER: _ClassVar[int]
    LIST_FIELD_NUMBER: _ClassVar[int]
    STRUCT_FIELD_NUMBER: _ClassVar[int]
    BINARY_FIELD_NUMBER: _ClassVar[int]
    DICTIONARY_FIELD_NUMBER: _ClassVar[int]
    FSST_FIELD_NUMBER: _ClassVar[int]
    PACKED_STRUCT_FIELD_NUMBER: _ClassVar[int]
    BITPACKED_FIELD_NUMBER: _ClassVar[int]
    FIXED_SIZE_BINARY_FIELD_NUMBER: _ClassVar[int]
    BITPACKED_FOR_NON_NEG_FIELD_NUMBER: _ClassVar[int]
    CONSTANT_FIELD_NUMBER: _ClassVar[int]
    INLINE_BITPACKING_FIELD_NUMBER: _ClassVar[int]
    OUT_OF_LINE_BITPACKING_FIELD_NUMBER: _ClassVar[int]
    VARIABLE_FIELD_NUMBER: _ClassVar[int]
    PACKED_STRUCT_FIXED_WIDTH_MINI_BLOCK_FIELD_NUMBER: _ClassVar[int]
    BLOCK_FIELD_NUMBER: _ClassVar[int]
    RLE_FIELD_NUMBER: _ClassVar[int]
    GENERAL_MINI_BLOCK_FIELD_NUMBER: _ClassVar[int]
    BYTE_STREAM_SPLIT_FIELD_NUMBER: _ClassVar[int]
    flat: Flat
    nullable: Nullable
    fixed_size_list: FixedSizeList
    list: List
    struct: SimpleStruct
    binary: Binary
    dictionary: Dictionary
    fsst: Fsst
    packed_struct: PackedStruct
    bitpacked: Bitpacked
    fixed_size_binary: FixedSizeBinary
    bitpacked_for_non_neg: BitpackedForNonNeg
    constant: Constant
    inline_bitpacking: InlineBitpacking
    out_of_line_bitpacking: OutOfLineBitpacking
    variable: Variable
    packed_struct_fixed_width_mini_block: PackedStructFixedWidthMiniBlock
    block: Block
    rle: Rle
    general_mini_block: GeneralMiniBlock
    byte_stream_split: ByteStreamSplit
    def __init__(self, flat: _Optional[_Union[Flat, _Mapping]] = ..., nullable: _Optional[_Union[Nullable, _Mapping]] = ..., fixed_size_list: _Optional[_Union[FixedSizeList, _Mapping]] = ..., list: _Optional[_Union[List, _Mapping]] = ..., struct: _Optional[_Union[SimpleStruct, _Mapping]] = ..., binary: _Optional[_Union[Binary, _Mapping]] = ..., dictionary: _Optional[_Union[Dictionary, _Mapping]] = ..., fsst: _Optional[_Union[Fsst, _Mapping]] = ..., packed_struct: _Optional[_Union[PackedStruct, _Mapping]] = ..., bitpacked: _Optional[_Union[Bitpacked, _Mapping]] = ..., fixed_size_binary: _Optional[_Union[FixedSizeBinary, _Mapping]] = ..., bitpacked_for_non_neg: _Optional[_Union[BitpackedForNonNeg, _Mapping]] = ..., constant: _Optional[_Union[Constant, _Mapping]] = ..., inline_bitpacking: _Optional[_Union[InlineBitpacking, _Mapping]] = ..., out_of_line_bitpacking: _Optional[_Union[OutOfLineBitpacking, _Mapping]] = ..., variable: _Optional[_Union[Variable, _Mapping]] = ..., packed_struct_fixed_width_mini_block: _Optional[_Union[PackedStructFixedWidthMiniBlock, _Mapping]] = ..., block: _Optional[_Union[Block, _Mapping]] = ..., rle: _Optional[_Union[Rle, _Mapping]] = ..., general_mini_block: _Optional[_Union[GeneralMiniBlock, _Mapping]] = ..., byte_stream_split: _Optional[_Union[ByteStreamSplit, _Mapping]] = ...) -> None: ...

class ZoneIndex(_message.Message):
    __slots__ = ("rows_per_zone", "zone_map_buffer", "inner")
    ROWS_PER_ZONE_FIELD_NUMBER: _ClassVar[int]
    ZONE_MAP_BUFFER_FIELD_NUMBER: _ClassVar[int]
    INNER_FIELD_NUMBER: _ClassVar[int]
    rows_per_zone: int
    zone_map_buffer: Buffer
    inner: ColumnEncoding
    def __init__(self, rows_per_zone: _Optional[int] = ..., zone_map_buffer: _Optional[_Union[Buffer, _Mapping]] = ..., inner: _Optional[_Union[ColumnEncoding, _Mapping]] = ...) -> None: ...

class Blob(_message.Message):
    __slots__ = ("inner",)
    INNER_FIELD_NUMBER: _ClassVar[int]
    inner: ColumnEncoding
    def __init__(self, inner: _Optional[_Union[ColumnEncoding, _Mapping]] = ...) -> None: ...

class ColumnEncoding(_message.Message):
    __slots__ = ("values", "zone_index", "blob")
    VALUES_FIELD_NUMBER: _ClassVar[int]
    ZONE_INDEX_FIELD_NUMBER: _ClassVar[int]
    BLOB_FIELD_NUMBER: _ClassVar[int]
    values: _empty_pb2.Empty
    zone_index: ZoneIndex
    blob: Blob
    def __init__(self, values: _Optional[_Union[_empty_pb2.Empty, _Mapping]] = ..., zone_index: _Optional[_Union[ZoneIndex, _Mapping]] = ..., blob: _Optional[_Union[Blob, _Mapping]] = ...) -> None: ...
