"""lance_sql: the Lance table format in pure Python, queried with SQL.

Start with :func:`write_dataset` and :func:`dataset`; errors live in
:mod:`lance_sql.errors`.
"""

from lance_sql import allocator  # noqa: F401 - tunes malloc once, see its docstring
from lance_sql.errors import (
    CommitConflict,
    FormatError,
    IncompatibleConflict,
    InvalidInputError,
    LanceError,
    NotFoundError,
    PathEscapeError,
    QueryError,
    RetryableConflict,
    SchemaError,
    StatementRefusedError,
    UnsupportedFeatureError,
    VersionCleanedUpError,
    WriterFencedError,
)
from lance_sql.memwal.dataset import MemWalDataset, dataset, write_dataset
from lance_sql.table import LanceDataset

__version__ = "0.1.0"


def __getattr__(name: str) -> object:
    # The SQL layer imports DataFusion (~0.75 s). Loading it on first use keeps
    # `import lance_sql` fast for processes that never query, such as Spark workers.
    if name in ("connect", "LanceSession"):
        from lance_sql.sql import session

        return getattr(session, name)
    raise AttributeError(f"module 'lance_sql' has no attribute {name!r}")

__all__ = [
    "CommitConflict",
    "FormatError",
    "IncompatibleConflict",
    "InvalidInputError",
    "LanceDataset",
    "LanceError",
    "LanceSession",
    "MemWalDataset",
    "NotFoundError",
    "PathEscapeError",
    "QueryError",
    "RetryableConflict",
    "SchemaError",
    "StatementRefusedError",
    "UnsupportedFeatureError",
    "VersionCleanedUpError",
    "WriterFencedError",
    "connect",
    "dataset",
    "write_dataset",
]
