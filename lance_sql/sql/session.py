"""``lance_sql.connect()``: a DataFusion session over a directory of Lance tables.

:class:`LanceSession.sql` is the front door. It rewrites time travel and pins
versions (:mod:`lance_sql.sql.rewrite`), plans with DataFusion, hands ``LIMIT``
hints to the scans, renders ``EXPLAIN`` with our scan's operators, and turns
DataFusion's flattened errors back into lance_sql's typed ones. Primary-key lookups of
MemWAL tables in one narrow shape are answered without DataFusion
(:mod:`lance_sql.sql.point_get`).

Snapshot rule: each query sees exactly one version of each table it names — the
latest when the query is planned, unless a time-travel clause says otherwise.
The next query sees newer commits.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import os
import re
import threading
import traceback
from collections.abc import Callable, Iterator, Mapping
from typing import Any, cast

import pyarrow as pa
from datafusion import DataFrame, SessionConfig, SessionContext, SQLOptions, udtf

from lance_sql.errors import (
    InvalidInputError,
    LanceError,
    NotFoundError,
    QueryError,
    StatementRefusedError,
    VersionCleanedUpError,
)
from lance_sql.expr.engine_fork import check_engine_usable, engine_started
from lance_sql.format.manifest import Manifest
from lance_sql.memwal.dataset import MemWalDataset, dataset
from lance_sql.sql.catalog import (
    CATALOG,
    SCHEMA,
    LanceCatalog,
    LanceSchemaProvider,
    Planned,
    TableDirectory,
    TableName,
    VersionResolver,
)
from lance_sql.sql.changes_provider import ChangesDataset
from lance_sql.sql.dml import DeleteStatement, UpdateStatement, needs_engine, parse_dml
from lance_sql.sql.error_bridge import ErrorRegistry, pushes_constant, translate
from lance_sql.sql.explain import render_explain
from lance_sql.sql.functions import (
    make_nearest,
    make_table_changes,
    make_table_versions,
    table_versions,
)
from lance_sql.sql.identifiers import check_sql_names, check_sql_target, names_system_column
from lance_sql.sql.interrupt import run_interruptibly, run_streaming_interruptibly
from lance_sql.sql.interrupts import deferred_interrupts
from lance_sql.sql.lsm_provider import LSM_ONLY
from lance_sql.sql.merge import parse_merge
from lance_sql.sql.nearest_provider import NearestDataset
from lance_sql.sql.parameters import Params, bind_parameters
from lance_sql.sql.point_get import PointAnswer, PointGets
from lance_sql.sql.provider import LanceTableDataset
from lance_sql.sql.rewrite import VersionSpec, rewrite
from lance_sql.sql.shortcuts import (
    bulk_scans,
    count_result,
    counted_table,
    live_row_count,
    only_streams,
)
from lance_sql.sql.statements import External, parse_statement
from lance_sql.sql.streams import ScanScope, active, is_engine_thread, keep_track
from lance_sql.sql.tokens import column_path, filter_text, quote_identifier, requalify
from lance_sql.sql.unpushed import UnpushedPlanner
from lance_sql.sql.wide_filters import check_chains, fold_disjunctions
from lance_sql.sql.writes import WriteRunner, refuse_lsm_row_writes
from lance_sql.table import (
    ROW_ADDR,
    SYSTEM_COLUMNS,
    Runtime,
    current_runtime,
)

Translator = Callable[[BaseException], BaseException]
# a logical plan -> the context to run it in without filter pushdown and its plan there,
# optimized (see lance_sql.sql.unpushed)
Replanner = Callable[[Any], tuple[SessionContext, Any]]
MAX_ROWS = (1 << 63) - 1  # no table holds more rows than an int64 counts


class _StreamGroup:
    """The streams of one execution (one, or one per partition): when the last is
    closed, the execution is over and its scans are settled."""

    def __init__(self, scope: ScanScope, members: int, frame: DataFrame) -> None:
        self.scope = scope
        self._open = members
        self._frame: DataFrame | None = frame  # holds the plan the streams run
        self._lock = threading.Lock()

    def closed_one(self, wait: bool) -> None:
        with self._lock:
            self._open -= 1
            last = self._open == 0
        if last:
            self._frame = None
            if wait:
                self.scope.settle()
            else:
                self.scope.cancel("its stream was dropped")


# DataFrame methods that run the query: on the main thread they run on a worker so that
# Ctrl-C reaches Python (see lance_sql.sql.interrupt).
_EXECUTING = frozenset({
    "cache", "collect", "collect_column", "collect_partitioned", "count", "describe",
    "execute_stream", "execute_stream_partitioned", "show", "to_arrow_table", "to_pandas",
    "to_polars", "to_pydict", "to_pylist", "write_csv", "write_json", "write_parquet",
    "write_parquet_with_options", "write_table", "__repr__",
})


class _CancelScope:
    """What :func:`run_interruptibly` sets on Ctrl-C: the execution's scans stop."""

    def __init__(self, scope: ScanScope) -> None:
        self._scope = scope

    def set(self) -> None:
        self._scope.cancel("the query was interrupted (Ctrl-C)")

    # what run_streaming_interruptibly reads and sets: the scope's own flags
    @property
    def inline(self) -> bool:
        return self._scope.inline

    @inline.setter
    def inline(self, value: bool) -> None:
        self._scope.inline = value

    @property
    def worker_wanted(self) -> bool:
        return self._scope.worker_wanted

    @worker_wanted.setter
    def worker_wanted(self, value: bool) -> None:
        self._scope.worker_wanted = value


class TypedStream:
    """A record-batch stream whose errors come back typed (errors can surface mid-stream)
    and whose batches can be waited for with Ctrl-C.

    Exhausted, failed, closed or dropped, it lets go of DataFusion's stream and waits
    until the scans DataFusion was running for it have stopped.
    """

    def __init__(self, stream: Any, translator: Translator, group: _StreamGroup) -> None:
        self._stream = stream
        self._translate = translator
        self._group = group
        self._closed = False
        keep_track(self)

    def __iter__(self) -> TypedStream:
        return self

    def __next__(self) -> Any:
        if self._stream is None:
            raise StopIteration
        try:
            # no local reference to DataFusion's stream: once closed, nothing may pin it
            return run_interruptibly(self._pull, _CancelScope(self._group.scope))
        except StopIteration:
            self.close()
            raise
        except BaseException as exc:  # errors and Ctrl-C both end the stream
            _release_frames(exc)
            # Ctrl-C: its scans are cancelled, but a join mid-batch is not waited for
            self.close(wait=not isinstance(exc, KeyboardInterrupt))
            if isinstance(exc, LanceError) or not isinstance(exc, Exception):
                raise
            raise _typed(exc, self._translate) from None

    def _pull(self) -> Any:
        if self._stream is None:
            raise StopIteration
        return next(self._stream)

    def close(self, *, wait: bool = True) -> None:
        """Stop reading: DataFusion's tasks end, and (``wait``) we wait for its scans."""
        if self._closed:
            return
        self._closed = True
        self._stream = None  # dropping DataFusion's stream cancels its tasks
        self._group.closed_one(wait)

    def __enter__(self) -> TypedStream:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        if not getattr(self, "_closed", True):
            # Never wait on one of DataFusion's threads: it may be what we wait for.
            self.close(wait=not is_engine_thread())

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        return getattr(self._stream, name)


def _release_frames(exc: BaseException) -> None:
    """Clear the locals of the finished frames ``exc`` passed through: DataFusion's
    stream wrapper is one of them, and while it is pinned its tasks cannot end."""
    traceback.clear_frames(exc.__traceback__)


def _typed(exc: BaseException, translator: Translator) -> BaseException:
    translated = translator(exc)
    return exc if translated is exc else translated


class FunctionScans:
    """Counts the datasets of table functions (``nearest()``, ``table_changes()``) among
    the providers of the query being planned, so that EXPLAIN prints their plans.
    DataFusion calls a table function on the thread that plans the query. Kept apart from
    the session: the function registered in the session's context holds it, and must not
    hold the session."""

    def __init__(self, provider: LanceSchemaProvider) -> None:
        self.provider = provider
        self._local = threading.local()
        self._calls = itertools.count(1)

    @contextlib.contextmanager
    def planning(self, query_id: str, system_columns: tuple[str, ...] = ()) -> Iterator[None]:
        """Within the block, this thread plans query ``query_id``, which shows
        ``system_columns`` (those it names hide from its wildcards; see the rewrite)."""
        self._local.query_id = query_id
        self._local.system_columns = system_columns
        try:
            yield
        finally:
            self._local.query_id = None
            self._local.system_columns = ()

    def system_columns(self) -> tuple[str, ...]:
        """The system columns the query being planned on this thread shows (none outside
        a query's planning)."""
        return getattr(self._local, "system_columns", ())

    def planned(self, dataset: NearestDataset | ChangesDataset) -> None:
        """A table function's dataset joins the providers of the query being planned
        (outside a query's planning: nothing)."""
        query_id = getattr(self._local, "query_id", None)
        if query_id is not None:
            call = next(self._calls)  # increasing: EXPLAIN orders a query's calls by it
            dataset.query_id = f"{query_id}.f{call}"  # no table scan's id: no LIMIT hint
            dataset.sequence = call
            self.provider.add_planned(query_id, dataset)


class LanceDataFrame(DataFrame):
    """A DataFusion DataFrame whose errors come back as lance_sql's typed exceptions, and
    whose executions end completely (:mod:`lance_sql.sql.streams`)."""

    def __init__(self, df: Any, translator: Translator, ctx: SessionContext,
                 runtime: Runtime | None = None, *, in_memory: bool = False,
                 optimized: Any = None, streaming: bool = False,
                 replan: Replanner | None = None,
                 again: Callable[[], LanceDataFrame] | None = None) -> None:
        super().__init__(df)
        self._translate = translator
        self._ctx = ctx
        # the query planned afresh (its tables at their latest versions then), for a
        # query that names no version: see _guard (None: not to be planned again)
        self._again = again
        # plans the frame again without filter pushdown, when DataFusion cannot build
        # the pyarrow filter of a scan (a constant operand first: lance_sql.sql.unpushed)
        self._replan = replan
        # once that happened: the context the frame runs in and its plan there
        self._unpushed: tuple[SessionContext, Any] | None = None
        self._runtime = runtime or current_runtime()
        # the frame reads one in-memory table only (no scan, nothing to interrupt):
        # it runs on the calling thread (frames derived from it do not)
        self._in_memory = in_memory
        # the frame's plan as the session optimized it when planning (None: not known);
        # executions start from it (DataFusion's optimizer then has little left to do)
        self._optimized = optimized
        # the plan only streams one scan: it runs on the calling thread, Ctrl-C still
        # stopping it (lance_sql.sql.interrupt.run_streaming_interruptibly)
        self._streaming = streaming

    def __repr__(self) -> str:
        return self._guard(DataFrame.__repr__)()

    def __aiter__(self) -> Any:
        """Refused: DataFusion's async stream, iterated so, ran its scans beyond this
        library's tracking (and DataFusion's own aborted the interpreter at exit)."""
        raise InvalidInputError(
            "async iteration over a query is not supported: iterate execute_stream() "
            "(for example in asyncio.to_thread), or read to_arrow_table()")

    def __arrow_c_stream__(self, requested_schema: object = None) -> object:
        """The rows as an Arrow C stream (``pa.table(df)``,
        ``pa.RecordBatchReader.from_stream(df)``, polars...), read from
        :meth:`execute_stream`: DataFusion's own export was unguarded, so a stream left
        open held the interpreter's exit. An error before the first batch is raised here,
        typed; one later crosses the C interface, which carries a message only: the
        reader raises pyarrow's ArrowInvalid, its message naming lance_sql's error."""
        stream = cast(TypedStream, self.execute_stream())  # (the guard's stream)
        pulled = next(stream, None)
        first = pulled.to_pyarrow() if pulled is not None else None
        schema = first.schema if first is not None else self.schema()

        def batches() -> Iterator[pa.RecordBatch]:
            with stream:
                if first is not None:
                    yield first
                try:
                    for batch in stream:
                        yield batch.to_pyarrow()
                except LanceError as exc:
                    raise pa.ArrowInvalid(f"{type(exc).__module__}.{type(exc).__name__}: "
                                          f"{exc}") from exc

        reader = pa.RecordBatchReader.from_batches(schema, batches())
        return reader.__arrow_c_stream__(requested_schema)

    def _guard(self, method: Any) -> Any:
        """``method`` run as one guarded query (see :meth:`_guarded`). A query that names
        no version reads its tables' latest versions as it was planned; when
        ``cleanup_old_versions`` removes one of them before the query has read it
        (VersionCleanedUpError: a merger and cleanup running beside the readers make
        that routine), a call that hands nothing over before it ends (``collect``,
        ``to_arrow_table``...) plans the query again, at the versions latest then, up
        to :data:`_CLEANED_UP_ATTEMPTS` times in all. Streams are never run again."""
        guarded = self._guarded(method)
        name = method.__name__
        if self._again is None or name not in _RUN_AGAIN:
            return guarded

        @functools.wraps(method)
        def call(*args: Any, **kwargs: Any) -> Any:
            attempt: Callable[..., Any] = guarded
            for left in range(_CLEANED_UP_ATTEMPTS - 1, -1, -1):
                try:
                    return attempt(*args, **kwargs)
                except VersionCleanedUpError:
                    if not left or self._again is None:
                        raise
                # (the fresh frame's own call without its own retries: one count here)
                attempt = self._again()._guarded(method)  # noqa: SLF001 - same class
            raise AssertionError("unreachable")  # (the last attempt returns or raises)

        return call

    def _guarded(self, method: Any) -> Any:
        @functools.wraps(method)
        def call(*args: Any, **kwargs: Any) -> Any:
            check_engine_usable()
            engine_started()
            name = method.__name__
            # Scans planned by this call belong to it: when it returns or fails they
            # are stopped and waited for, unless it hands out streams that read on.
            scope = ScanScope(f"query ({name})", strict=name not in _HANDS_OUT_PLAN,
                              runtime=self._runtime)
            # Run on a copy of this frame: DataFusion keeps the last plan a frame ran
            # (with its scan units); the copy's plan goes when the execution does.
            executing = name in _EXECUTING
            scope.collects = executing and self._streaming and name in _COLLECTING
            target: DataFrame | None = self._target(executing)
            group = None
            interrupted = False
            try:
                def attempt() -> Any:
                    # planning happens on the thread that runs it
                    with active(scope), self._runtime.activate():
                        return method(target, *args, **kwargs)

                def run() -> Any:
                    nonlocal target
                    try:
                        if name == "explain" and self._replan is not None \
                                and self._unpushed is None:
                            # DataFrame.explain prints a physical plan that fails to
                            # build instead of raising: build it first, to find out
                            with active(scope), self._runtime.activate():
                                cast(DataFrame, target).execution_plan()
                        return attempt()
                    except Exception as exc:
                        if self._replan is None or self._unpushed is not None \
                                or not pushes_constant(exc):
                            raise
                    # DataFusion could not build a scan's pushed filter (no scan has
                    # read a row): the frame runs from now on with filters above scans
                    self._unpushed = self._replan(DataFrame.logical_plan(self))
                    target = self._target(executing)
                    return attempt()

                if executing and self._streaming:
                    result = run_streaming_interruptibly(run, _CancelScope(scope))
                elif executing and not self._in_memory:
                    result = run_interruptibly(run, _CancelScope(scope))
                else:
                    result = run()
                if name.startswith("execute_stream"):
                    many = isinstance(result, list)
                    members = result if many else [result]
                    if members:
                        assert target is not None
                        group = _StreamGroup(scope, len(members), target)
                        streams = [TypedStream(r, self._translate, group) for r in members]
                        result = streams if many else streams[0]
            except BaseException as exc:
                _release_frames(exc)
                interrupted = isinstance(exc, KeyboardInterrupt)
                if isinstance(exc, LanceError) or not isinstance(exc, Exception):
                    raise
                translated = _typed(exc, self._translate)
                if translated is exc:
                    raise
                raise translated from None
            finally:
                target = None
                if group is None:
                    if interrupted:  # Ctrl-C: scans stop; a join mid-batch is not awaited
                        scope.cancel("the query was interrupted (Ctrl-C)")
                    else:
                        scope.settle()
            if isinstance(result, DataFrame) and not isinstance(result, LanceDataFrame):
                ctx = self._ctx if self._unpushed is None else self._unpushed[0]
                return LanceDataFrame(result.df, self._translate, ctx, self._runtime,
                                      replan=self._replan)
            return result

        return call

    def _target(self, executing: bool) -> DataFrame:
        """A copy of this frame for one call (its optimized plan if the call runs it),
        in the context the frame plans in."""
        if self._unpushed is not None:
            ctx, optimized = self._unpushed
            plan = optimized if executing else DataFrame.logical_plan(self)
        else:
            ctx = self._ctx
            plan = self._optimized if executing and self._optimized is not None \
                else DataFrame.logical_plan(self)
        return DataFrame(ctx.create_dataframe_from_logical_plan(plan).df)


class _AnsweredFrame(LanceDataFrame):
    """A point get's frame (:mod:`lance_sql.sql.point_get`): its rows were read when the
    query was planned; ``to_arrow_table`` and ``collect`` hand them over as DataFusion's
    plan would return them, every other method runs over them in memory, in a DataFusion
    frame made on first use (``make``)."""

    def __init__(self, make: Callable[[], Any], translator: Translator, ctx: SessionContext,
                 runtime: Runtime, rows: pa.Table) -> None:
        self._make: Callable[[], Any] | None = make
        self._made: Any = None
        self._making = threading.Lock()
        super().__init__(None, translator, ctx, runtime, in_memory=True)
        self._rows = rows

    @property
    def df(self) -> Any:
        """DataFusion's frame over the rows, made the first time it is asked for."""
        if self._made is None:
            with self._making:
                if self._made is None and self._make is not None:
                    self._made, self._make = self._make(), None
        return self._made

    @df.setter
    def df(self, value: Any) -> None:
        if value is not None:  # (DataFrame.__init__ sets None: made on first use)
            self._made = value

    def to_arrow_table(self) -> pa.Table:
        return self._rows

    def collect(self) -> list[pa.RecordBatch]:
        return self._rows.to_batches()


# DataFrame methods that take every batch of the result into one value: a plan that only
# streams its scans (no join, window or aggregate working per batch) then has its scans
# hand over whole chunks (ScanScope.collects).
_COLLECTING = frozenset({
    "collect", "collect_column", "collect_partitioned", "to_arrow_table", "to_pandas",
    "to_polars", "to_pydict", "to_pylist",
})

# Methods whose result holds the physical plan (and its scan units) for the caller.
_HANDS_OUT_PLAN = frozenset({"execution_plan"})
# a collecting call of a query that names no version, when cleanup removed a version it
# read: how many times it is run in all, each planned afresh (see LanceDataFrame._guard)
_CLEANED_UP_ATTEMPTS = 3
_RUN_AGAIN = _COLLECTING | {"count"}


def _install_guards() -> None:
    for name in dir(DataFrame):
        if name.startswith("_") or name in ("df",):
            continue
        attr = getattr(DataFrame, name)
        if callable(attr):
            setattr(
                LanceDataFrame, name,
                (lambda method: lambda self, *a, **k: self._guard(method)(*a, **k))(attr),
            )


_install_guards()


def _options(*, ddl: bool = False, dml: bool = False) -> SQLOptions:
    """What DataFusion may run itself: by default queries only (no DDL, DML, ``SET``...)."""
    return SQLOptions().with_allow_ddl(ddl).with_allow_dml(dml).with_allow_statements(False)


# The first word of a statement, after any comments; a query's (see _plainly_a_query).
_FIRST_WORD = re.compile(r"\s*(?:(?:--[^\n]*(?:\n|$)|/\*.*?\*/)\s*)*([A-Za-z_]+|\()", re.S)
_QUERY_STARTS = frozenset({"SELECT", "WITH", "VALUES", "EXPLAIN", "("})


def _plainly_a_query(sql: str) -> bool:
    """True when ``sql`` starts as only a query does (``SELECT``, ``WITH``...): none of the
    session's statements (:mod:`~lance_sql.sql.statements`, DML, MERGE) starts so."""
    found = _FIRST_WORD.match(sql)
    return found is not None and found.group(1).upper() in _QUERY_STARTS


_NAMES_LSM_COLUMN = re.compile(r"\b(_gen|_region)\b", re.IGNORECASE)


def _system_columns(query: str) -> tuple[str, ...]:
    """The hidden columns of the query's tables: the LSM view's ``_gen`` and ``_region``
    join the table's own when the query names one of them."""
    if _NAMES_LSM_COLUMN.search(query):
        return (*SYSTEM_COLUMNS, *LSM_ONLY)
    return SYSTEM_COLUMNS


def _check_unicode(query: str) -> None:
    """Refuse SQL text that cannot be UTF-8 (a lone surrogate: on the command line or a
    pipe, bytes that were not UTF-8 come in so), which DataFusion cannot take."""
    try:
        query.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InvalidInputError(
            f"the SQL text is not valid Unicode: {query[exc.start]!r} at offset {exc.start} "
            "(bytes that were not UTF-8?)") from None


class LanceSession:
    """SQL over Lance tables. Create with :func:`connect`."""

    def __init__(self, root: str | os.PathLike[str] | None = None, *,
                 config: SessionConfig | None = None, read_only: bool = False,
                 allow_external_files: bool = False, create: bool = False,
                 runtime: Runtime | None = None, consistency: str = "strong") -> None:
        """See :func:`connect`; ``runtime`` owns the caches the session's reads use (by
        default the one current when the session is created)."""
        if root is not None and not os.path.isdir(root):
            if os.path.exists(root):
                raise InvalidInputError(f"{os.fspath(root)} is not a directory")
            if not create:
                raise NotFoundError(f"no directory {os.fspath(root)} (pass create=True to "
                                    "start an empty one)")
            os.makedirs(root, exist_ok=True)
        self.read_only = read_only
        self.allow_external_files = allow_external_files
        self.runtime = runtime or current_runtime()
        self.directory = TableDirectory(root)
        self.resolver = VersionResolver(self.directory, self.runtime)
        self.errors = ErrorRegistry()
        self.schema_provider = LanceSchemaProvider(self.resolver, self.errors, consistency)
        self.consistency = consistency
        # information_schema lists the catalog's Lance tables as DataFusion finds them
        # (SHOW TABLES, SHOW COLUMNS FROM t, information_schema.tables / .columns)
        config = (config or SessionConfig()).with_information_schema(True)
        config = config.with_default_catalog_and_schema(CATALOG, SCHEMA)
        self.ctx = SessionContext(config)
        # the queries whose filters DataFusion cannot hand to our scans plan again there
        self.unpushed = UnpushedPlanner(config)
        self.ctx.register_catalog_provider(CATALOG, LanceCatalog(self.schema_provider))
        versions_fn = make_table_versions(self.resolver, self.errors)
        self.ctx.register_udtf(udtf(versions_fn, "table_versions"))
        self._function_scans = FunctionScans(self.schema_provider)
        self.ctx.register_udtf(udtf(make_table_changes(self.resolver, self.errors,
                                                       self._function_scans.planned),
                                    "table_changes"))
        self.ctx.register_udtf(udtf(make_nearest(self.resolver, self.errors, consistency,
                                                 self._function_scans.planned,
                                                 self._function_scans.system_columns),
                                    "nearest"))
        self._ids = itertools.count(1)
        self._lock = threading.Lock()
        self._writes = WriteRunner(self)
        self.point_gets = PointGets()  # primary-key lookups of LSM tables, unplanned

    # -- tables --------------------------------------------------------------------
    def register(self, name: str, uri: str | os.PathLike[str]) -> None:
        """Make the Lance table at ``uri`` queryable as ``name``."""
        self.directory.register(name, uri)

    def tables(self) -> list[str]:
        return self.directory.names()

    def dataset(self, name: str, version: int | str | None = None) -> MemWalDataset:
        """The table ``name`` (at ``version``) as a dataset, as ``lance_sql.dataset`` opens
        it (``.mem_wal``; schema changes keep clear of the ids its MemWAL holds); it reads
        on the runtime current where it is used (``with session.runtime.activate():`` for
        the session's)."""
        with self.runtime.activate():
            return dataset(self.directory.uri(name), version)

    def versions(self, name: str) -> pa.Table:
        with self.runtime.activate():
            return table_versions(self.resolver, name)

    def create_tag(self, table: str, tag: str, version: int) -> None:
        self.dataset(table).tags.create(tag, version)

    def delete_tag(self, table: str, tag: str) -> None:
        self.dataset(table).tags.delete(tag)

    def list_tags(self, table: str) -> dict[str, dict]:
        return self.dataset(table).tags.list()

    # -- queries ---------------------------------------------------------------------
    def sql(self, query: str, params: Params | None = None) -> LanceDataFrame:
        """Plan ``query`` (DataFusion SQL plus time travel); returns a lazy DataFrame.

        ``params`` fill placeholders: ``$1, $2...`` from a sequence, ``$name`` from a
        mapping, each replaced by the SQL literal of its value (strings quoted; see
        :mod:`lance_sql.sql.parameters`), in queries and write statements alike.

        Write statements (``CREATE TABLE``, ``INSERT``, ``UPDATE``, ``DELETE``, ``MERGE``,
        ``ALTER TABLE``, ``DROP TABLE``...; see :mod:`lance_sql.sql.statements`) run at
        once as Lance commits under the root; their frame says what they did. Statements
        DataFusion would run in memory only, or against files outside the root, raise
        :class:`StatementRefusedError` (external files: see ``allow_external_files``).
        What it reads is cached in the session's runtime.
        """
        check_engine_usable()
        if params is not None:
            query = bind_parameters(query, params)
        _check_unicode(query)
        with self.runtime.activate():
            return self._sql(query)

    def _sql(self, query: str) -> LanceDataFrame:
        if _plainly_a_query(query):  # no statement starts so: skip the statement parsers
            with self.directory.one_listing(), deferred_interrupts():
                return self._query(query)
        try:
            statement = parse_dml(query) or parse_merge(query) or parse_statement(query)
        except LanceError:
            raise
        except Exception as exc:  # noqa: BLE001 - translated into our types
            raise self.translate_error(exc) from None
        if isinstance(statement, External):
            return self._external(query, statement)
        if statement is not None:
            if self.read_only:
                raise StatementRefusedError(
                    f"this session is read-only (connect(..., read_only=True)); the statement "
                    f"would write table {statement.table!r}")
            if isinstance(statement, UpdateStatement | DeleteStatement):
                return self._run_dml(statement)
            return self._memory_frame(self._writes.run(statement))
        with self.directory.one_listing(), deferred_interrupts():  # tables looked up once
            return self._query(query)

    def _query(self, query: str, pins: Mapping[str, int] | None = None) -> LanceDataFrame:
        """Plan a read query: its tables pinned, its LIMITs handed to the scans, a
        ``count(*)`` answered from metadata when it can be, a point get at once.
        ``pins``: table uri -> the version its unversioned mentions read."""
        probed: dict[str, int] = {}  # latest versions looked up for a point get
        answer = self.point_gets.answer(query, self.directory, self.resolver,
                                        self.schema_provider, probed)
        if answer is not None:
            return self._answered_frame(answer)
        asked = query
        travels: list[bool] = []  # whether a mention names a version (not the latest)
        # Long OR-ed equality lists become IN lists; what is still too wide to plan is
        # refused (DataFusion would overflow its stack planning it).
        query = fold_disjunctions(query)
        check_chains(query)
        with self._lock:
            qid = str(next(self._ids))
        counter = itertools.count(1)

        def resolve(name: str, spec: VersionSpec | None, system: bool
                    ) -> tuple[str, tuple[str, ...]]:
            if spec is None and pins and self.directory.uri(name) in pins:
                version = pins[self.directory.uri(name)]
            elif spec is None and name in probed:
                version = probed[name]
            else:
                version = self.resolver.version_of(name, spec)
            travels.append(spec is not None)
            pinned = TableName(name, VersionSpec("version", version), system,
                               f"{qid}.{next(counter)}", travel=spec is not None)
            shown: tuple[str, ...] = ()
            if system:  # what the provider shows besides the table's columns
                shown = SYSTEM_COLUMNS
                if self.schema_provider.reads_as_lsm(name, version):
                    shown = (*SYSTEM_COLUMNS, *LSM_ONLY)
            return f"{CATALOG}.{SCHEMA}.{quote_identifier(pinned.render())}", shown

        def is_lance(name: str) -> bool:
            try:
                self.directory.uri(name)
            except LanceError:
                if self.directory.ambiguous(name):
                    raise  # (tables differing by case: say so, not "unknown table")
                return False
            return True

        try:
            rewritten = rewrite(query, is_lance, resolve, _system_columns(query))
            with self._function_scans.planning(
                    qid, _system_columns(query) if rewritten.system_columns else ()):
                df = self.ctx.sql(rewritten.text, options=_options())
            planned = self.schema_provider.planned(qid)
            self.unpushed.track(planned)
            if rewritten.explain:
                scope = ScanScope("EXPLAIN", strict=False, runtime=self.runtime)
                # run on a copy, dropped before settling: DataFusion keeps the last plan a
                # frame ran, with the units of scans EXPLAIN ANALYZE never read (a join's
                # probe side when its build side is empty), until the frame goes
                target: DataFrame | None = DataFrame(
                    self.ctx.create_dataframe_from_logical_plan(df.logical_plan()).df)
                try:
                    with active(scope):  # EXPLAIN ANALYZE runs the query
                        plan = _explained(cast(DataFrame, target))
                        if plan is None:  # a scan's filter could not be built: see _replan
                            target = DataFrame(self.unpushed.context()
                                               .create_dataframe_from_logical_plan(
                                                   df.logical_plan()).df)
                            plan = target.to_arrow_table()
                finally:
                    target = None
                    scope.settle()
                explained = render_explain(plan, planned,
                                           df.logical_plan().display_indent())
                note = self.point_gets.explain(query, self.directory, self.resolver,
                                               self.schema_provider)
                if note is not None:  # the query alone is answered as a point get
                    explained = pa.concat_tables([explained, pa.table(
                        {"plan_type": ["point_get"], "plan": [note]})])
                return self._memory_frame(explained)
            if planned:
                optimized = df.optimized_logical_plan()  # planning errors show here
                self._limit_hints(optimized, planned)
                bulk = {_query_id(name) for name in bulk_scans(optimized)}
                for ds in planned:
                    ds.bulk_batches = ds.query_id in bulk
                counted = self._metadata_count(df, optimized, planned)
                if counted is not None:
                    return counted
                ids = {ds.query_id for ds in planned}
                streaming = only_streams(optimized, lambda name: _query_id(name) in ids)
                for ds in planned:
                    ds.streams_only = streaming
                # (what reads the latest versions is planned again when cleanup removes
                # one before it is read: see LanceDataFrame._guard)
                again = None if pins or any(travels) else functools.partial(self._again, asked)
                return self._frame(df, optimized=optimized, streaming=streaming,
                                   again=again)
        except LanceError:
            raise
        except Exception as exc:  # translated into our types
            translated = translate(exc, self.errors, self.tables, planning=True)
            if translated is exc:
                raise
            raise translated from None
        finally:
            # a query that failed while planning registered providers too: forget them
            # (a no-op after the success path took them)
            self.schema_provider.planned(qid)
        return self._frame(df)

    def _run_dml(self, statement: UpdateStatement | DeleteStatement) -> LanceDataFrame:
        ds = self.dataset(statement.table)
        verb = "UPDATE" if isinstance(statement, UpdateStatement) else "DELETE"
        refuse_lsm_row_writes(ds, statement.table, verb)
        # t.col and x.col (an alias) name the table's own columns; a top-level column of
        # that name (a struct) keeps its meaning
        own = {n.lower() for n in (statement.table, statement.alias) if n} \
            - {n.lower() for n in ds.schema.names}

        def unqualified(text: str | None) -> str | None:
            return requalify(text, dict.fromkeys(own)) if text is not None and own else text

        where = unqualified(statement.where)
        # expressions with subqueries or beyond the filter language: DataFusion runs them
        # (and any statement joining other tables: UPDATE ... FROM, DELETE ... USING)
        schema = ds.schema
        engine_values = isinstance(statement, UpdateStatement) and (
            statement.joined is not None
            or any(needs_engine(unqualified(e) or e, schema, condition=False)
                   or names_system_column(e) for e in statement.assignments.values()))
        engine_where = statement.joined is not None or (
            where is not None and needs_engine(where, schema))
        # the table layer binds the rest's column names as SQL does (lower-cased unless
        # quoted), as SELECT binds them
        for target in getattr(statement, "assignments", {}):
            check_sql_target(target, schema, verb)
        if not engine_values:
            for text in ([] if where is None or engine_where else [where]) + [
                    unqualified(e) or e for e in getattr(statement, "assignments", {}).values()]:
                check_sql_names(text, ds.schema, verb)
        select_rows = select_values = None
        if engine_values:
            # SET c = (SELECT ...), round(x, 1)...: DataFusion computes the rows and all
            # their new values
            assert isinstance(statement, UpdateStatement)
            select_values = self._values_computed(ds.uri, statement)
        elif engine_where:
            # the condition, subqueries and all, as DataFusion runs it on the version
            # the write starts from; the write changes the rows it gives
            where = statement.where
            select_rows = self._rows_matching(ds.uri, statement)
        try:
            # the table layer reads filter text, where "x" is a string: names in backticks
            where = None if where is None else filter_text(where)
            if isinstance(statement, UpdateStatement):
                values = {column_path(c): filter_text(unqualified(e) or e)
                          for c, e in statement.assignments.items()}
                count = ds.update(values, where, select_rows=select_rows,
                                  select_values=select_values,
                                  sql_typing=True)["num_rows_updated"]
                name = "num_rows_updated"
            else:
                count = ds.delete(where or "true", select_rows=select_rows)["num_deleted_rows"]
                name = "num_deleted_rows"
        except InvalidInputError as exc:
            if statement.joined is not None and "selected twice" in str(exc):
                raise InvalidInputError(
                    f"{verb} {statement.table}: a row matches several rows of the joined "
                    "tables; each row may match at most one") from exc
            if str(exc).startswith("update values"):  # said of the statement's values
                raise InvalidInputError(f"{verb} {statement.table}: {exc}") from exc
            raise
        except QueryError as exc:
            if engine_values or engine_where:  # DataFusion failed on the statement's values
                raise InvalidInputError(f"{verb} {statement.table}: {exc}") from exc
            raise
        except LanceError:
            raise
        except (pa.ArrowException, ValueError, TypeError, ArithmeticError) as exc:
            # the values do not evaluate (division by zero, a failed cast, NULL into a
            # NOT NULL column): nothing was committed
            raise InvalidInputError(f"{verb} {statement.table}: {exc}") from exc
        return self._memory_frame(pa.table({name: pa.array([count], pa.uint64())}))

    def _rows_matching(self, uri: str, statement: UpdateStatement | DeleteStatement
                       ) -> Callable[[Manifest], pa.Array]:
        """The row addresses an UPDATE/DELETE condition keeps, found by DataFusion with
        every unversioned mention of the table (the subqueries' too) pinned to the
        version the write starts from (the write's conflict check covers the rest)."""
        select = self._pinned_select(uri, statement, self._row_addr(statement))
        return lambda base: select(base).column(ROW_ADDR).combine_chunks()

    @staticmethod
    def _row_addr(statement: UpdateStatement | DeleteStatement) -> str:
        """The target's ``_rowaddr``, qualified (a joined Lance table has one too)."""
        owner = quote_identifier(statement.alias or statement.table)
        return f"{owner}.{ROW_ADDR} AS {ROW_ADDR}"

    def _values_computed(self, uri: str, statement: UpdateStatement
                         ) -> Callable[[Manifest], pa.Table]:
        """An UPDATE's rows (``_rowaddr``) and the new value of each assigned column, in
        assignment order, computed by DataFusion as :meth:`_rows_matching` finds rows."""
        values = ", ".join(f"{expr} AS {quote_identifier(f'__lance_sql_value_{i}')}"
                           for i, expr in enumerate(statement.assignments.values()))
        return self._pinned_select(uri, statement, f"{self._row_addr(statement)}, {values}")

    def _pinned_select(self, uri: str, statement: UpdateStatement | DeleteStatement,
                       projection: str) -> Callable[[Manifest], pa.Table]:
        table = quote_identifier(statement.table)
        alias = f" AS {quote_identifier(statement.alias)}" if statement.alias else ""
        where = f" WHERE {statement.where}" if statement.where is not None else ""
        joined = f", {statement.joined}" if statement.joined is not None else ""
        return self.pinned_query(uri, f"SELECT {projection} FROM {table}{alias}{joined}{where}")

    def pinned_query(self, uri: str, query: str) -> Callable[[Manifest], pa.Table]:
        """``query``'s rows for the version a write of table ``uri`` starts from: every
        unversioned mention of the table (its subqueries' too) reads that version."""
        def select(base: Manifest) -> pa.Table:
            with self.directory.one_listing():
                frame = self._query(query, pins={uri: base.version})
            return frame.to_arrow_table()

        return select

    def _external(self, query: str, statement: External) -> LanceDataFrame:
        """``CREATE EXTERNAL TABLE`` / ``COPY``: files outside the root, on request only."""
        if not self.allow_external_files:
            raise StatementRefusedError(
                f"{statement.what} reads or writes files outside the session's root; "
                "connect(..., allow_external_files=True) allows it")
        if statement.kind == "write" and self.read_only:
            raise StatementRefusedError(f"{statement.what}: this session is read-only")
        try:
            df = self.ctx.sql(query, options=_options(ddl=statement.kind == "read",
                                                      dml=statement.kind == "write"))
            if statement.kind == "write":
                try:
                    written = df.to_arrow_table()  # COPY runs now, once
                except Exception as exc:
                    if not pushes_constant(exc):
                        raise
                    # its query's filter could not be handed to a Lance scan (nothing
                    # was written): COPY runs with the filters above the scans
                    written = self.unpushed.context().create_dataframe_from_logical_plan(
                        df.logical_plan()).to_arrow_table()
                df = self._from_arrow(written)
        except Exception as exc:  # noqa: BLE001 - translated into our types
            raise self.translate_error(exc) from None
        return self._frame(df)

    def _from_arrow(self, table: pa.Table) -> DataFrame:
        """A frame over ``table`` that leaves no table behind in the catalog.

        DataFusion's ``from_arrow`` registers its table in the default schema (ours);
        the frame keeps its own reference, so the name can go at once.
        """
        with self._lock:
            name = f"__lance_sql_result_{next(self._ids)}"
        df = self.ctx.from_arrow(table, name=name)
        self.schema_provider.deregister_table(name)
        return df

    def _memory_frame(self, table: pa.Table) -> LanceDataFrame:
        """A frame over ``table``, run on the calling thread (it reads no Lance table)."""
        return self._frame(self._from_arrow(table), in_memory=True)

    def _answered_frame(self, answer: PointAnswer) -> LanceDataFrame:
        """A frame over a point get's rows, declaring the query's schema (see
        :class:`_AnsweredFrame`)."""
        def make() -> Any:
            with self._lock:
                name = f"__lance_sql_result_{next(self._ids)}"
            batches = [pa.RecordBatch.from_arrays(b.columns, schema=answer.schema)
                       for b in answer.rows.to_batches()]
            df = self.ctx.create_dataframe([batches], name=name, schema=answer.schema)
            self.schema_provider.deregister_table(name)
            return df.df

        return _AnsweredFrame(make, self.translate_error, self.ctx, self.runtime, answer.rows)

    def plan_only(self, query: str) -> pa.Schema:
        """The result schema of a query, planned but not run."""
        return self.ctx.sql(query, options=_options()).schema()

    def explain(self, query: str, analyze: bool = False) -> str:
        """The plan of ``query`` as text, with our scan operators beneath DataFusion's;
        ``analyze``: the query runs (its rows dropped) and each operator's line says what
        it did (``EXPLAIN ANALYZE``)."""
        verb = "EXPLAIN ANALYZE" if analyze else "EXPLAIN"
        table = self.sql(f"{verb} {query}").to_arrow_table()
        return "\n\n".join(f"{t}:\n{p}" for t, p in zip(table["plan_type"].to_pylist(),
                                                          table["plan"].to_pylist(), strict=False))

    def translate_error(self, exc: BaseException) -> BaseException:
        """The typed lance_sql exception for an error DataFusion raised (or ``exc``)."""
        return translate(exc, self.errors, self.tables)

    def _frame(self, df: DataFrame, *, in_memory: bool = False, optimized: Any = None,
               streaming: bool = False, again: Callable[[], LanceDataFrame] | None = None
               ) -> LanceDataFrame:
        return LanceDataFrame(df.df, self.translate_error, self.ctx, self.runtime,
                              in_memory=in_memory, optimized=optimized, streaming=streaming,
                              replan=self._replan, again=again)

    def _again(self, query: str) -> LanceDataFrame:
        """The read query ``query`` planned afresh (see LanceDataFrame._guard)."""
        with self.runtime.activate(), self.directory.one_listing(), deferred_interrupts():
            return self._query(query)

    def _replan(self, plan: Any) -> tuple[SessionContext, Any]:
        """``plan`` (a frame's logical plan) in the context without filter pushdown, and
        its optimized plan there (see :mod:`lance_sql.sql.unpushed`).

        The scans' LIMIT hints are taken again from that plan: a hint given where the
        filter was pushed into the scan would stop the scan before the filter, now above
        it, has seen the rows it keeps."""
        ctx = self.unpushed.context()
        optimized = ctx.create_dataframe_from_logical_plan(plan).optimized_logical_plan()
        scans = []
        for scan in _table_scans(optimized):
            query_id = _query_id(scan.table_name())
            ds = self.unpushed.dataset(query_id) if query_id else None
            if ds is not None:
                ds.limit_hint = None
                scans.append(ds)
        self._limit_hints(optimized, scans)
        return ctx, optimized

    def _metadata_count(self, df: DataFrame, optimized: Any,
                        planned: list[Planned]) -> LanceDataFrame | None:
        """The frame of a ``count(*)``-only query answered from the pinned version's
        metadata (None: the query runs; see :mod:`lance_sql.sql.shortcuts`)."""
        name = counted_table(optimized)
        if name is None:
            return None
        parsed = TableName.parse(name.removeprefix(f"{CATALOG}.{SCHEMA}.").strip('"'))
        found = [ds for ds in planned if ds.query_id == parsed.query_id]
        if len(found) != 1 or not isinstance(found[0], LanceTableDataset):
            return None  # the LSM view counts each key's newest row: it runs
        result = count_result(df.schema(), live_row_count(found[0]))
        return self._memory_frame(result)

    @staticmethod
    def _limit_hints(optimized: Any, planned: list[Planned]) -> None:
        """Tell each scan the LIMIT DataFusion pushed into it, so it can stop early."""
        fetches: dict[str, int] = {}
        for scan in _table_scans(optimized):
            query_id = _query_id(scan.table_name())
            if query_id and scan.fetch() is not None:
                # LIMIT n OFFSET m fetches n + m rows, which may exceed any table
                fetches[query_id] = min(scan.fetch(), MAX_ROWS)
        for ds in planned:
            if ds.query_id in fetches:
                ds.limit_hint = fetches[ds.query_id]


def _table_scans(plan: Any) -> Iterator[Any]:
    """The TableScan nodes of a logical ``plan`` (DataFusion's variants)."""
    stack = [plan]
    while stack:
        node = stack.pop()
        variant = node.to_variant()
        if type(variant).__name__ == "TableScan":
            yield variant
        stack.extend(node.inputs())


def _explained(frame: DataFrame) -> pa.Table | None:
    """An EXPLAIN frame's result, or None when DataFusion could not build a scan's
    pushed filter (EXPLAIN reports that as its physical plan; EXPLAIN ANALYZE raises it)."""
    try:
        table = frame.to_arrow_table()
    except Exception as exc:
        if pushes_constant(exc):
            return None
        raise
    failed = any(t == "physical_plan_error" and pushes_constant(p)
                 for t, p in zip(table["plan_type"].to_pylist(), table["plan"].to_pylist(),
                                 strict=True))
    return None if failed else table


def _query_id(table_name: str) -> str | None:
    """The query (and reference) id of a provider name in a plan (None: not pinned by
    the front door)."""
    name = table_name.removeprefix(f"{CATALOG}.{SCHEMA}.").strip('"')
    return TableName.parse(name).query_id


def connect(root: str | os.PathLike[str] | None = None, *, read_only: bool = False,
            allow_external_files: bool = False, create: bool = False,
            runtime: Runtime | None = None, consistency: str = "strong") -> LanceSession:
    """A session over every Lance table in ``root`` (and any you ``register``).

    SQL may read and write Lance tables under ``root`` only: ``read_only=True`` refuses
    every write statement; ``allow_external_files=True`` lets ``CREATE EXTERNAL TABLE``
    read and ``COPY ... TO`` write files anywhere the process can. A missing ``root`` is
    an error unless ``create=True``. ``runtime`` owns the caches its reads fill (see
    :class:`lance_sql.Runtime`; by default the current one, normally process-wide).

    Tables with a MemWAL index read as their LSM view (each key's newest row):
    ``consistency="strong"`` (default) takes the regions from their manifests plus this
    process's MemTables; ``"snapshot"`` from the MemWAL index snapshot (as fresh as its
    last refresh); ``"base"`` reads the base table alone.
    """
    return LanceSession(root, read_only=read_only, allow_external_files=allow_external_files,
                        create=create, runtime=runtime, consistency=consistency)
