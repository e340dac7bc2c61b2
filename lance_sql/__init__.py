"""lance_sql: the Lance table format in pure Python, queried with SQL.

Start with :func:`write_dataset` and :func:`dataset`; errors live in
:mod:`lance_sql.errors`.
"""

from lance_sql.errors import (
    CommitConflict,
    FormatError,
    IncompatibleConflict,
    InvalidInputError,
    LanceError,
    NotFoundError,
    PathEscapeError,
    RetryableConflict,
    SchemaError,
    UnsupportedFeatureError,
    WriterFencedError,
)
from lance_sql.sql.session import LanceSession, connect
from lance_sql.table.dataset import LanceDataset, dataset, write_dataset

__version__ = "0.1.0"

__all__ = [
    "CommitConflict",
    "FormatError",
    "IncompatibleConflict",
    "InvalidInputError",
    "LanceDataset",
    "LanceError",
    "LanceSession",
    "NotFoundError",
    "PathEscapeError",
    "RetryableConflict",
    "SchemaError",
    "UnsupportedFeatureError",
    "WriterFencedError",
    "connect",
    "dataset",
    "write_dataset",
]
