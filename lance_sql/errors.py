"""The one exception tree of lance_sql.

Every error our code raises on purpose derives from :class:`LanceError`, so callers
can catch the whole family or one branch of it::

    LanceError
    ├── FormatError              bytes that do not decode: corrupt, truncated, unsupported
    │   ├── UnsupportedFeatureError   valid but beyond what we implement (flags, file versions)
    │   └── PathEscapeError           a path read from metadata leaves the table root
    ├── NotFoundError            a table, version, tag, file or column that does not exist
    │   ├── VersionNotFoundError     a version of an existing table that does not exist
    │   │   └── VersionCleanedUpError   history (manifests, files) removed by cleanup
    │   └── IndexNotFoundError       ``stats.index_stats`` of a name no index has
    ├── SchemaError              data whose schema does not fit the table
    │   └── AppendSchemaError        rows to append whose columns are not the table's
    ├── InvalidInputError        a bad argument or expression from the caller
    │   ├── StatementRefusedError    SQL the session may not run (files outside its root,
    │   │                            writes in a read-only session, in-memory-only DDL)
    │   ├── TableExistsError         a new table asked for where one already is
    │   └── TaggedVersionError       cleanup would remove a tagged version
    ├── QueryError               the SQL engine failed while running a query (division by
    │                            zero, a failed cast...)
    ├── CommitConflict           another writer committed first
    │   ├── RetryableConflict        retrying against the new version may succeed
    │   └── IncompatibleConflict     the transaction can never apply on top of the winner
    └── WriterFencedError        a newer writer has taken over (MemWAL)

Some branches also derive from the built-in class pylance raises in the same case, so
code written against pylance catches them: NotFoundError and InvalidInputError are
ValueErrors; VersionNotFoundError, AppendSchemaError, TableExistsError and
TaggedVersionError are OSErrors too (FileExistsError for TableExistsError);
IndexNotFoundError is also a KeyError; CommitConflict (and so both conflicts) is an
OSError, as pylance's CommitConflictError is.

Warnings: IndexFallbackWarning (a UserWarning) when a query scans because an index it
would have used is unreadable.
"""

from __future__ import annotations


class LanceError(Exception):
    """Root of every error raised by lance_sql."""


class FormatError(LanceError):
    """A file's bytes do not decode (corrupt, truncated or malformed)."""


class UnsupportedFeatureError(FormatError):
    """Well-formed input that needs a feature lance_sql does not implement."""


class NotFoundError(LanceError, ValueError):
    """A table, version, tag, file or column does not exist (a ValueError, as pylance's
    ``dataset()`` of a missing table is)."""


class VersionNotFoundError(NotFoundError, OSError):
    """A version the table does not have. Also an OSError: pylance's ``checkout_version``
    raises one (and a ValueError from ``dataset(uri, version=)``, which this is too)."""


class VersionCleanedUpError(VersionNotFoundError):
    """An old version, or a file it needs, was removed by ``cleanup_old_versions``.

    ``files_of_version``: when a read of version n found one of its files gone, n
    (a write that read version n, the newest then, may retry on the new newest)."""

    files_of_version: int | None = None


class IndexNotFoundError(NotFoundError, KeyError):
    """No index of the name asked for (also a KeyError, as pylance's ``index_stats``
    raises)."""

    def __str__(self) -> str:  # (KeyError's would quote the message)
        return str(self.args[0]) if self.args else ""


class SchemaError(LanceError):
    """Data or a request whose schema does not match the table."""


class AppendSchemaError(SchemaError, OSError):
    """Rows to append whose columns do not match the table's (an OSError, as pylance's
    ``write_dataset(mode="append")`` raises); nothing was written."""


class InvalidInputError(LanceError, ValueError):
    """A malformed argument from the caller (bad filter expression, bad mode...)."""


class StatementRefusedError(InvalidInputError):
    """A SQL statement this session refuses: it would read or write files outside the
    session's root, write in a read-only session, or change nothing lasting."""


class TableExistsError(InvalidInputError, FileExistsError):
    """A table was to be created where one already exists (pylance: an OSError)."""


class TaggedVersionError(InvalidInputError, OSError):
    """Cleanup would remove a tagged version; nothing was removed (pylance: an OSError)."""


class PathEscapeError(FormatError):
    """A path stored in table metadata would resolve outside the table's base paths."""


class QueryError(LanceError):
    """DataFusion failed to plan or run a query for a reason that is not ours to type."""


class CommitConflict(LanceError, OSError):
    """Another writer committed a version this transaction conflicts with (an OSError,
    as pylance's ``CommitConflictError``, which code written for it catches)."""


class RetryableConflict(CommitConflict):
    """The conflict may disappear if the operation is re-run on the new version."""


class IncompatibleConflict(CommitConflict):
    """The operation can never be applied on top of the winning commit."""


class WriterFencedError(LanceError):
    """A newer writer epoch has fenced this writer out."""


class IndexFallbackWarning(UserWarning):
    """An index could not be used (missing, corrupt); the query scanned instead."""
