"""Point gets (lance_sql.sql.point_get): primary-key lookups of LSM tables answered without
DataFusion planning, held equal — schema, metadata and rows — to the same query with the
point-get path switched off, and taken only for the shape they are meant for."""

from __future__ import annotations

import random
import threading
from pathlib import Path

import pyarrow as pa
import pytest
from datafusion import col, lit

import lance_sql
from lance_sql.errors import LanceError
from lance_sql.format.region_spec import RegionSpec
from lance_sql.memwal.api import MemWal
from lance_sql.sql.point_get import PointQuery, parse
from lance_sql.sql.session import LanceSession, connect

PK = {"lance-schema:unenforced-primary-key": "true"}
SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False, metadata=PK),
                    pa.field("v", pa.int64()), pa.field("s", pa.string()),
                    pa.field("Mixed", pa.float64(), metadata={"unit": "m"})],
                   metadata={"owner": "tests"})
COMPOSITE = pa.schema([pa.field("tenant", pa.string(), nullable=False, metadata=PK),
                       pa.field("n", pa.int32(), nullable=False, metadata=PK),
                       pa.field("v", pa.int64())])
BASE_KEYS = 200


def _rows(model: dict[int, tuple[int, str] | None], ids: list[int]) -> pa.Table:
    live = [i for i in ids if model[i] is not None]
    return pa.table({"id": live, "v": [model[i][0] for i in live],  # type: ignore[index]
                     "s": [model[i][1] for i in live],  # type: ignore[index]
                     "Mixed": [i / 2 for i in live]}, schema=SCHEMA)


def _build_lsm(tmp_path: Path):
    """Table ``t``: keys in the base only, in three flushed generations, in the MemTable,
    deleted by tombstones (in a generation and in the MemTable); ``model`` maps each key
    ever written to its newest row (None: deleted). Also a plain table ``plain``."""
    rng = random.Random(7)
    model: dict[int, tuple[int, str] | None] = {i: (i, f"base{i}") for i in range(BASE_KEYS)}
    ds = lance_sql.write_dataset(_rows(model, list(model)), tmp_path / "t.lance")
    lance_sql.write_dataset(_rows(model, list(range(10))), tmp_path / "plain.lance")
    mw = MemWal.initialize(ds, RegionSpec.bucket("id", 3), durable_write=False,
                           max_wal_flush_interval_ms=3_600_000)
    writer = mw.writer()
    next_key = BASE_KEYS
    for gen in range(4):  # three flushed generations, then the MemTable
        updated = rng.sample(range(next_key), 15) + list(range(next_key, next_key + 5))
        next_key += 5
        for key in updated:
            model[key] = (1000 * (gen + 1) + key, f"g{gen}-{key}")
        writer.put(_rows(model, updated))
        gone = rng.sample(sorted(k for k, v in model.items() if v is not None), 4)
        writer.delete(pa.table({"id": pa.array(gone, pa.int64())}))
        for key in gone:
            model[key] = None
        if gen < 3:
            writer.flush_memtable()
    try:
        yield tmp_path, mw, writer, model
    finally:
        for region_writer in writer.writers:
            region_writer.abort()


@pytest.fixture
def lsm(tmp_path: Path):
    """The tables of :func:`_build_lsm`, for a test of its own (it may write)."""
    yield from _build_lsm(tmp_path)


@pytest.fixture(scope="module")
def lsm_read_only(tmp_path_factory: pytest.TempPathFactory):
    """The same tables, built once for the tests that only query them (each through a
    session of its own)."""
    yield from _build_lsm(tmp_path_factory.mktemp("point_get"))


def _both(session: LanceSession, sql: str) -> tuple[pa.Table, pa.Table, bool]:
    """(the point-get path's table, DataFusion's table, whether the point get answered)."""
    before = session.point_gets.answered
    session.point_gets.enabled = True
    fast = session.sql(sql).to_arrow_table()
    taken = session.point_gets.answered == before + 1
    session.point_gets.enabled = False
    try:
        slow = session.sql(sql).to_arrow_table()
    finally:
        session.point_gets.enabled = True
    return fast, slow, taken


def _assert_same(fast: pa.Table, slow: pa.Table, *, order: str | None = None) -> None:
    """The same schema (metadata too) and rows, in the same order unless ``order`` names
    a column to sort both by (DataFusion scans where it cannot push the filter)."""
    assert fast.schema.equals(slow.schema, check_metadata=True), (fast.schema, slow.schema)
    for a, b in zip(fast.schema, slow.schema, strict=True):
        assert a.nullable == b.nullable and a.metadata == b.metadata
    if order is not None:
        fast, slow = fast.sort_by(order), slow.sort_by(order)
    assert fast.to_pylist() == slow.to_pylist()


def _spell(rng: random.Random, name: str) -> str:
    """``name`` as a query may spell it: quoted as is, or unquoted in any case when it is
    lower case (DataFusion folds unquoted names)."""
    if name != name.lower() or rng.random() < 0.3:
        return f'"{name}"'
    return "".join(c.upper() if rng.random() < 0.5 else c for c in name)


def test_random_lookups_equal_the_datafusion_path(lsm) -> None:
    root, _, _, model = lsm
    session = connect(root)
    rng = random.Random(3)
    written = sorted(model)
    in_base_only = [k for k in range(BASE_KEYS) if model[k] == (k, f"base{k}")]
    deleted = [k for k, v in model.items() if v is None]
    newer = [k for k, v in model.items() if v is not None and v[0] >= 1000]
    absent = list(range(10_000, 10_050))
    pools = [in_base_only, deleted, newer, absent, written]
    names = SCHEMA.names
    for _ in range(120):
        shape = rng.choice(["eq", "in", "in-dup"])
        if shape == "eq":
            keys = [rng.choice(rng.choice(pools))]
        else:
            keys = [rng.choice(rng.choice(pools)) for _ in range(rng.randint(1, 20))]
            if shape == "in-dup":
                keys += rng.sample(keys, min(3, len(keys)))
                rng.shuffle(keys)
        if rng.random() < 0.3:
            select = "*"
            wanted = names
        else:
            wanted = rng.sample(names, rng.randint(1, len(names)))
            select = ", ".join(_spell(rng, c) for c in wanted)
        key = _spell(rng, "id")
        listed = ", ".join(map(str, keys))
        cond = f"{key} = {keys[0]}" if shape == "eq" else f"{key} IN ({listed})"
        if rng.random() < 0.3:
            cond = f"({cond})"
        sql = f"SELECT {select} FROM t WHERE {cond}" + (";" if rng.random() < 0.2 else "")
        fast, slow, taken = _both(session, sql)
        assert taken, sql
        _assert_same(fast, slow)
        # and the model's answer: each live key once, in the order first asked
        want = [k for k in dict.fromkeys(keys) if model.get(k) is not None]
        assert fast.column_names == list(wanted)
        assert [r["id"] for r in fast.select(["id"]).to_pylist()] == want if "id" in wanted \
            else fast.num_rows == len(want)
        if "v" in wanted:
            assert fast["v"].to_pylist() == [model[k][0] for k in want]  # type: ignore[index]


def test_long_in_lists_and_their_number_runs(lsm) -> None:
    root, _, _, model = lsm
    session = connect(root)
    rng = random.Random(5)
    keys = [rng.randrange(BASE_KEYS + 40) for _ in range(300)] + [99_999, -3]
    fast, slow, taken = _both(session, f"SELECT * FROM t WHERE id IN ({', '.join(map(str, keys))})")
    assert taken
    _assert_same(fast, slow)
    assert fast["id"].to_pylist() == [k for k in dict.fromkeys(keys) if model.get(k) is not None]


@pytest.mark.parametrize("sql", [
    "SELECT tenant, n, v FROM c WHERE tenant = 'B' AND n = 1",
    "SELECT v, N, TENANT FROM c WHERE (n = 1) AND (tenant = 'A')",
    "SELECT * FROM c WHERE (n = 3 AND tenant = 'A')",
    "SELECT * FROM c WHERE tenant = 'B' AND n = 4",   # deleted
    "SELECT * FROM c WHERE tenant = 'C' AND n = 1",   # no such region
    "SELECT v FROM c WHERE tenant = 'it''s' AND n = 2",
])
def test_composite_keys(tmp_path: Path, sql: str) -> None:
    base = pa.table({"tenant": ["A"] * 5 + ["B"] * 5 + ["it's"], "n": [*range(5), *range(5), 2],
                     "v": list(range(11))}, schema=COMPOSITE)
    ds = lance_sql.write_dataset(base, tmp_path / "c.lance")
    mw = MemWal.initialize(ds, RegionSpec.identity("tenant"), durable_write=False,
                           max_wal_flush_interval_ms=3_600_000)
    writer = mw.writer()
    try:
        writer.put(pa.table({"tenant": ["A", "B"], "n": [1, 1], "v": [70, 80]},
                            schema=COMPOSITE))
        writer.flush_memtable()
        writer.put(pa.table({"tenant": ["A"], "n": [3], "v": [90]}, schema=COMPOSITE))
        writer.delete(pa.table({"tenant": ["B"], "n": pa.array([4], pa.int32())}))
        session = connect(tmp_path)
        fast, slow, taken = _both(session, sql)
        assert taken
        _assert_same(fast, slow)
        assert fast.num_rows == (0 if "'C'" in sql or "n = 4" in sql else 1)
    finally:
        for region_writer in writer.writers:
            region_writer.abort()


@pytest.mark.parametrize("key_type", [pa.int32(), pa.uint16(), pa.uint64()])
def test_in_lists_of_narrow_and_unsigned_integer_keys(tmp_path: Path,
                                                      key_type: pa.DataType) -> None:
    """An ``IN`` list of integers becomes the key column in numpy: each key once, in the
    order first asked, in the key's type; a literal the key's type does not hold (or a
    negative one for an unsigned key) leaves the query to DataFusion."""
    schema = pa.schema([pa.field("k", key_type, nullable=False, metadata=PK),
                        pa.field("v", pa.int64())])
    ds = lance_sql.write_dataset(pa.table({"k": [1, 2, 3, 500], "v": [1, 2, 3, 5]},
                                          schema=schema), tmp_path / "n.lance")
    ds.create_scalar_index("k", "BTREE")
    mw = MemWal.initialize(ds, RegionSpec.bucket("k", 2), durable_write=False,
                           max_wal_flush_interval_ms=3_600_000)
    writer = mw.writer()
    try:
        writer.put(pa.table({"k": [2, 7], "v": [20, 70]}, schema=schema))
        session = connect(tmp_path)
        fast, slow, taken = _both(session, "SELECT * FROM n WHERE k IN (7, 500, 9, 2, 7, 1)")
        assert taken
        _assert_same(fast, slow, order="k")
        assert fast.to_pylist() == [{"k": 7, "v": 70}, {"k": 500, "v": 5},
                                    {"k": 2, "v": 20}, {"k": 1, "v": 1}]
        assert fast.schema.field("k").type.equals(key_type)
        too_big = {32: 2**31, 16: 2**16, 64: 2**63}[key_type.bit_width]
        for listed in (f"1, {too_big}", "2, -1" if pa.types.is_unsigned_integer(key_type)
                       else f"2, {-2**31 - 1}"):
            before = session.point_gets.answered
            try:
                session.sql(f"SELECT k FROM n WHERE k IN ({listed})").to_arrow_table()
            except LanceError:
                pass  # DataFusion's casts decide
            assert session.point_gets.answered == before, listed
    finally:
        for region_writer in writer.writers:
            region_writer.abort()


@pytest.mark.parametrize("key_type", [pa.string(), pa.large_string()])
def test_string_keys(tmp_path: Path, key_type: pa.DataType) -> None:
    schema = pa.schema([pa.field("k", key_type, nullable=False, metadata=PK),
                        pa.field("v", pa.int64())])
    ds = lance_sql.write_dataset(pa.table({"k": ["a", "b", "c"], "v": [1, 2, 3]},
                                          schema=schema), tmp_path / "s.lance")
    mw = MemWal.initialize(ds, RegionSpec.bucket("k", 2), durable_write=False,
                           max_wal_flush_interval_ms=3_600_000)
    writer = mw.writer()
    try:
        writer.put(pa.table({"k": ["b", "d"], "v": [20, 40]}, schema=schema))
        session = connect(tmp_path)
        for sql in ["SELECT * FROM s WHERE k = 'b'", "SELECT v, k FROM s WHERE k IN "
                    "('d', 'zz', 'a', 'd', '')", "SELECT k FROM s WHERE k = 'B'"]:
            fast, slow, taken = _both(session, sql)
            assert taken, sql
            # (DataFusion pushes no large_string IN list of 4 or more: it scans, in the
            # scan's order)
            _assert_same(fast, slow,
                         order="k" if pa.types.is_large_string(key_type) else None)
        fast = session.sql("SELECT k FROM s WHERE k IN ('d', 'zz', 'a', 'd', '')")
        assert fast.to_pylist() == [{"k": "d"}, {"k": "a"}]  # keys in the order first asked
        assert session.sql("SELECT v FROM s WHERE k = 'b'").to_pylist() == [{"v": 20}]
        # an integer literal for a string key: DataFusion's casts decide (here: an error)
        for enabled in (True, False):
            session.point_gets.enabled = enabled
            with pytest.raises(LanceError, match="Cannot cast string"):
                session.sql("SELECT v FROM s WHERE k = 1").to_arrow_table()
        assert session.point_gets.answered == 5
    finally:
        for region_writer in writer.writers:
            region_writer.abort()


@pytest.mark.parametrize("sql", [
    "SELECT * FROM t WHERE id = 5 LIMIT 1",
    "SELECT * FROM t WHERE id IN (5, 6) ORDER BY v",
    "SELECT * FROM t WHERE id = 5 AND v > 0",
    "SELECT * FROM t WHERE id = 5 OR id = 6",
    "SELECT * FROM t WHERE v = 5",
    "SELECT * FROM t WHERE id = 5.0",
    "SELECT * FROM t WHERE id IN (5, 6.5)",
    "SELECT * FROM t WHERE id = 1e1",
    "SELECT * FROM t WHERE id = -0",
    "SELECT * FROM t WHERE id = +5",
    "SELECT * FROM t WHERE id = NULL",
    "SELECT * FROM t WHERE id IN (5, NULL)",
    "SELECT * FROM t WHERE id = '5'",
    "SELECT * FROM t WHERE id = CAST(5 AS BIGINT)",
    "SELECT * FROM t WHERE id = 5 + 0",
    "SELECT * FROM t WHERE id NOT IN (5)",
    "SELECT * FROM t WHERE 5 = id",
    "SELECT * FROM t WHERE id = 5 AND id = 5",
    "SELECT * FROM t WHERE id = 99999999999999999999",
    "SELECT * FROM t VERSION AS OF 1 WHERE id = 5",
    "SELECT * FROM t AS x WHERE id = 5",
    "SELECT * FROM t x WHERE id = 5",
    "SELECT DISTINCT id FROM t WHERE id = 5",
    "SELECT id AS k FROM t WHERE id = 5",
    "SELECT id, id FROM t WHERE id = 5",
    "SELECT t.id FROM t WHERE id = 5",
    "SELECT id + 1 FROM t WHERE id = 5",
    "SELECT count(*) FROM t WHERE id = 5",
    "SELECT _gen FROM t WHERE id = 5",
    "SELECT id, _rowaddr FROM t WHERE id = 5",
    "SELECT id, _rowid FROM t WHERE id = 5",
    "SELECT * FROM t WHERE id = 5 UNION ALL SELECT * FROM t WHERE id = 6",
    "SELECT * FROM t JOIN plain USING (id) WHERE id = 5",
    "SELECT * FROM plain WHERE id = 5",
    "SELECT * FROM default.t WHERE id = 5",
    "WITH x AS (SELECT * FROM t) SELECT * FROM x WHERE id = 5",
    "SELECT * FROM t WHERE id = E'5'",
    # DataFusion's block comments nest: it reads "id = 6" here, not "id = 5"
    "SELECT * FROM t WHERE /* /* */ id = 5 -- */ id = 6\n",
    "SELECT * FROM t WHERE id = 5\x1c",  # whitespace to Python's re, not to DataFusion
])
def test_near_misses_take_datafusion_path(lsm_read_only, sql: str) -> None:
    root, _, _, _ = lsm_read_only
    session = connect(root)
    try:
        fast, slow, taken = _both(session, sql)
    except LanceError:  # DataFusion refuses it either way (checked below)
        taken = session.point_gets.answered > 0
        fast = slow = None
    assert not taken, sql
    if fast is not None:  # (UNION ALL's order varies)
        assert fast.schema.equals(slow.schema, check_metadata=True)
        assert sorted(map(str, fast.to_pylist())) == sorted(map(str, slow.to_pylist()))


@pytest.mark.parametrize("sql", [
    "SELECT * FROM plain WHERE id = 5",  # the shape, on a table without a MemWAL
    "SELECT * FROM t WHERE v = 5",       # an LSM table, not its key
])
def test_a_query_that_falls_through_probes_the_latest_version_once(lsm, sql: str,
                                                                   monkeypatch) -> None:
    root, _, _, _ = lsm
    session = connect(root)
    probes: list[str] = []
    views: list[object] = []
    probe, dataset = session.resolver.version_of, session.schema_provider.dataset

    def counted_probe(name: str, spec: object) -> int:
        probes.append(name)
        return probe(name, spec)  # type: ignore[arg-type]

    def counted_dataset(parsed: object) -> object:
        views.append(parsed)
        return dataset(parsed)  # type: ignore[arg-type]

    monkeypatch.setattr(session.resolver, "version_of", counted_probe)
    monkeypatch.setattr(session.schema_provider, "dataset", counted_dataset)
    fast, slow, taken = _both(session, sql)
    assert not taken and fast.equals(slow)
    assert len(probes) == 2  # one a query: the point-get attempt's, reused by the plan
    assert len(views) == 2   # no view opened for the point-get attempt


@pytest.mark.parametrize("sql", [
    'SELECT * FROM t WHERE "ID" = 5',         # a quoted mixed-case name that does not exist
    "SELECT mixed FROM t WHERE id = 5",        # unquoted: folded to lower case, no such column
    "SELECT nope FROM t WHERE id = 5",
    "SELECT * FROM nope WHERE id = 5",
    "SELECT * FROM t WHERE nope = 5",
])
def test_unknown_names_raise_the_same_typed_error(lsm_read_only, sql: str) -> None:
    root, _, _, _ = lsm_read_only
    session = connect(root)
    errors = []
    for enabled in (True, False):
        session.point_gets.enabled = enabled
        with pytest.raises(LanceError) as raised:
            session.sql(sql).to_arrow_table()
        errors.append((type(raised.value), str(raised.value)))
    assert errors[0] == errors[1]
    assert session.point_gets.answered == 0


def test_case_and_quoting_resolve_as_datafusion_does(lsm) -> None:
    root, _, _, model = lsm
    session = connect(root)
    key = next(k for k, v in model.items() if v is not None)
    for sql in [f'SELECT "Mixed", ID FROM T WHERE "id" = {key}',
                f'select "Mixed" from "t" where Id in ({key})']:
        fast, slow, taken = _both(session, sql)
        assert taken, sql
        _assert_same(fast, slow)
        assert fast["Mixed"].to_pylist() == [key / 2]
        assert fast.schema.field("Mixed").metadata == {b"unit": b"m"}


@pytest.mark.parametrize("sql", [
    "SELECT current_date FROM kw WHERE id = 1",      # DataFusion: the function
    "SELECT id, current_timestamp FROM kw WHERE id = 1",
    "SELECT current_time, id FROM kw WHERE id IN (1, 2)",
    "SELECT top FROM kw WHERE id = 1",               # a parse error in DataFusion
    "SELECT id, values FROM kw WHERE id = 1",
    "SELECT id, view FROM kw WHERE id = 1",
    "SELECT id, into FROM kw WHERE id = 1",
    "SELECT id, sort FROM kw WHERE id = 1",
    "SELECT struct FROM kw WHERE id = 1",
    "SELECT trim FROM kw WHERE id = 1",
    "SELECT * FROM table WHERE id = 1",
])
def test_columns_and_tables_named_like_keywords_take_datafusion_path(tmp_path: Path,
                                                                     sql: str) -> None:
    words = ["current_date", "current_timestamp", "current_time", "top", "values", "view",
             "into", "sort", "struct", "trim"]
    schema = pa.schema([pa.field("id", pa.int64(), nullable=False, metadata=PK),
                        *(pa.field(w, pa.int64()) for w in words)])
    rows = pa.table({"id": [1, 2, 3], **{w: [10, 20, 30] for w in words}}, schema=schema)
    for name in ("kw", "table"):
        ds = lance_sql.write_dataset(rows, tmp_path / f"{name}.lance")
        mw = MemWal.initialize(ds, RegionSpec.bucket("id", 2), durable_write=False,
                               max_wal_flush_interval_ms=3_600_000)
        writer = mw.writer()
        writer.put(rows.slice(1, 1))
        writer.flush_memtable()
        for region_writer in writer.writers:
            region_writer.abort()
    session = connect(tmp_path)
    outcomes = []
    for enabled in (True, False):
        session.point_gets.enabled = enabled
        try:
            found = session.sql(sql).to_arrow_table()
            steady = [n for n in found.column_names if not n.startswith("current_")]
            outcomes.append((found.schema, found.num_rows, found.select(steady).to_pylist()))
        except LanceError as exc:
            outcomes.append((type(exc), str(exc)))
    assert session.point_gets.answered == 0
    assert outcomes[0] == outcomes[1]


def test_the_frame_works_as_a_datafusion_frame(lsm) -> None:
    root, _, _, model = lsm
    session = connect(root)
    live = [k for k, v in model.items() if v is not None][:6]
    sql = f"SELECT s, id, v FROM t WHERE id IN ({', '.join(map(str, live))})"
    session.point_gets.enabled = False
    slow = session.sql(sql)
    session.point_gets.enabled = True
    fast = session.sql(sql)
    assert session.point_gets.answered == 1
    assert fast.schema().equals(slow.schema(), check_metadata=True)
    assert fast.to_pylist() == slow.to_pylist()
    assert fast.to_pydict() == slow.to_pydict()
    assert fast.to_pandas().equals(slow.to_pandas())
    assert fast.count() == slow.count() == len(live)
    assert [b.schema for b in fast.collect()] == [b.schema for b in slow.collect()]
    assert pa.Table.from_batches(fast.collect()).equals(pa.Table.from_batches(slow.collect()))
    chained = fast.filter(col("v") > lit(1000)).select("id").sort(col("id"))
    want = slow.filter(col("v") > lit(1000)).select("id").sort(col("id"))
    assert chained.to_arrow_table().equals(want.to_arrow_table())
    streamed = [b.to_pyarrow() for b in fast.execute_stream()]
    assert pa.Table.from_batches(streamed).to_pylist() == slow.to_pylist()
    assert "s" in repr(fast)
    empty = session.sql("SELECT * FROM t WHERE id = 123456")
    assert empty.count() == 0 and empty.to_arrow_table().num_rows == 0
    assert empty.collect() == []


def test_writes_before_sql_are_seen(lsm) -> None:
    root, mw, writer, model = lsm
    session = connect(root)
    key = next(k for k, v in model.items() if v is not None)
    writer.put(_rows({key: (-1, "fresh")}, [key]))
    assert session.sql(f"SELECT v, s FROM t WHERE id = {key}").to_pylist() == \
        [{"v": -1, "s": "fresh"}]
    writer.delete(pa.table({"id": pa.array([key], pa.int64())}))
    assert session.sql(f"SELECT v FROM t WHERE id = {key}").to_pylist() == []
    writer.put(_rows({key: (-2, "again")}, [key]))
    writer.flush_memtable()  # now in a flushed generation
    assert session.sql(f"SELECT v FROM t WHERE id IN ({key})").to_pylist() == [{"v": -2}]
    mw.merge()  # a commit of the base table: the next query reads the new version
    fast, slow, taken = _both(session, f"SELECT * FROM t WHERE id = {key}")
    assert taken and fast["v"].to_pylist() == [-2]
    _assert_same(fast, slow)


def test_the_lookup_runs_when_sql_is_called(lsm) -> None:
    """What the README says: the answer is read by ``sql()``; a put after it is seen by
    the next query. DataFusion's path reads the rows of the MemTables it found at
    ``sql()`` when it runs."""
    root, _, writer, _ = lsm
    session = connect(root)
    frame = session.sql("SELECT v FROM t WHERE id = 777777")
    writer.put(_rows({777777: (5, "late")}, [777777]))
    assert frame.to_pylist() == []
    assert session.sql("SELECT v FROM t WHERE id = 777777").to_pylist() == [{"v": 5}]
    session.point_gets.enabled = False
    frame = session.sql("SELECT v FROM t WHERE id = 777778")
    writer.put(_rows({777778: (6, "late")}, [777778]))
    assert frame.to_pylist() == [{"v": 6}]


def test_consistency_base_and_snapshot_sessions(lsm) -> None:
    root, mw, _, model = lsm
    newer = next(k for k, v in model.items() if v is not None and v[0] >= 1000)
    base = connect(root, consistency="base")
    fast, slow, taken = _both(base, f"SELECT v FROM t WHERE id = {newer}")
    assert not taken and fast.to_pylist() == [{"v": newer}]  # the base table's row
    snapshot = connect(root, consistency="snapshot")
    mw.refresh_index()
    fast, slow, taken = _both(snapshot, f"SELECT * FROM t WHERE id IN ({newer}, 3, 4)")
    assert taken
    _assert_same(fast, slow)


def test_concurrent_point_gets(lsm) -> None:
    root, _, _, model = lsm
    session = connect(root)
    keys = sorted(model)
    failures: list[str] = []

    def ask(seed: int) -> None:
        rng = random.Random(seed)
        for _ in range(30):
            key = rng.choice(keys)
            got = session.sql(f"SELECT v FROM t WHERE id = {key}").to_pylist()
            want = [] if model[key] is None else [{"v": model[key][0]}]  # type: ignore[index]
            if got != want:
                failures.append(f"{key}: {got} != {want}")

    threads = [threading.Thread(target=ask, args=(seed,)) for seed in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not failures
    assert session.point_gets.answered == 120


def test_parse_reads_the_shape_and_nothing_else() -> None:
    assert parse("SELECT * FROM t WHERE id = 3") == PointQuery("t", None, (("id", (3,), False),))
    assert parse('select A, "B" from "T" where (X = -4 and y = \'o\'\'k\');') == PointQuery(
        "T", ("a", "B"), (("x", (-4,), False), ("y", ("o'k",), False)))
    run = ", ".join(map(str, range(40)))
    assert parse(f"SELECT * FROM t WHERE id IN ({run}, -1)") == PointQuery(
        "t", None, (("id", (*range(40), -1), True),))
    assert parse("SELECT * FROM t WHERE " + "(" * 16 + "id = 1" + ")" * 16) is not None
    assert parse("SELECT * FROM t WHERE id = " + "9" * 5000) is None  # past int()'s limit
    assert parse("SELECT * FROM t WHERE id IN (" + ", ".join(["9" * 5000] * 20) + ")") is None
    for sql in ["SELECT * FROM t WHERE id IN (1.5, " + run + ")", "SELECT * FROM t",
                "SELECT * FROM t WHERE " + "(" * 10_000 + "id = 1" + ")" * 10_000,
                "SELECT * FROM t WHERE id = 3; SELECT 1", "SELECT * FROM t WHERE id = 3 --",
                "SELECT `id` FROM t WHERE id = 1", "SELECT * FROM t WHERE id = 3)"]:
        if sql.endswith("--"):
            assert parse(sql) is not None  # a comment is not a token
        else:
            assert parse(sql) is None, sql


def test_explain_says_when_a_query_is_a_point_get(lsm) -> None:
    root, _, _, _ = lsm
    session = connect(root)
    plan = session.explain("SELECT v, id FROM t WHERE id IN (5, 6, 5)")
    assert "LsmPointLookup" in plan  # DataFusion's plan and the LSM tree, as before
    assert plan.splitlines()[-1].startswith("PointGet: t, 2 keys on [id], projection=[v, id]: "
                                            "answered when sql() is called")
    assert session.point_gets.answered == 0  # EXPLAIN looks nothing up
    for other in ["SELECT v FROM t WHERE id = 5 LIMIT 1", "SELECT * FROM plain WHERE id = 5"]:
        assert "PointGet" not in session.explain(other)
    session.point_gets.enabled = False
    assert "PointGet" not in session.explain("SELECT v FROM t WHERE id = 5")
