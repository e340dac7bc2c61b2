"""lance_sql: the Lance table format in pure Python, queried with SQL.

Start with :func:`write_dataset` and :func:`dataset`; errors live in
:mod:`lance_sql.errors`. Reads share a bounded cache owned by a :class:`Runtime`
(:func:`default_runtime` unless another is active). Importing lance_sql changes nothing
process-wide; :func:`tune_allocator` is an opt-in speed-up (see its module).
"""

from lance_sql.allocator import tune_allocator
from lance_sql.errors import (
    AppendSchemaError,
    CommitConflict,
    FormatError,
    IncompatibleConflict,
    IndexNotFoundError,
    InvalidInputError,
    LanceError,
    NotFoundError,
    PathEscapeError,
    QueryError,
    RetryableConflict,
    SchemaError,
    StatementRefusedError,
    TableExistsError,
    TaggedVersionError,
    UnsupportedFeatureError,
    VersionCleanedUpError,
    VersionNotFoundError,
    WriterFencedError,
)
from lance_sql.io.external import ExternalManifestCommit, SqliteManifestStore
from lance_sql.memwal.dataset import MemWalDataset, dataset, write_dataset
from lance_sql.table import CacheStats, CommitConfig, LanceDataset, Runtime, default_runtime

__version__ = "0.1.0"


def __getattr__(name: str) -> object:
    # The SQL layer imports DataFusion (~0.75 s). Loading it on first use keeps
    # `import lance_sql` fast for processes that never query, such as Spark workers.
    if name in ("connect", "LanceSession"):
        from lance_sql.sql import session

        return getattr(session, name)
    raise AttributeError(f"module 'lance_sql' has no attribute {name!r}")

__all__ = [
    "AppendSchemaError",
    "CacheStats",
    "CommitConfig",
    "CommitConflict",
    "ExternalManifestCommit",
    "FormatError",
    "IncompatibleConflict",
    "IndexNotFoundError",
    "InvalidInputError",
    "LanceDataset",
    "LanceError",
    "LanceSession",
    "MemWalDataset",
    "NotFoundError",
    "PathEscapeError",
    "QueryError",
    "RetryableConflict",
    "Runtime",
    "SchemaError",
    "SqliteManifestStore",
    "StatementRefusedError",
    "TableExistsError",
    "TaggedVersionError",
    "UnsupportedFeatureError",
    "VersionCleanedUpError",
    "VersionNotFoundError",
    "WriterFencedError",
    "connect",
    "dataset",
    "default_runtime",
    "tune_allocator",
    "write_dataset",
]
