"""A query read through the Arrow C stream protocol (``pa.table(df)``,
``pa.RecordBatchReader.from_stream(df)``, polars...) is read as ``execute_stream``
reads it: tracked (a reader left open no longer held the interpreter's exit ~30 s and
warned of scans still held), its errors lance_sql's (they were pyarrow's ArrowInvalid)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

import lance_sql
from lance_sql.errors import FormatError


def _table(root: Path, rows: int = 50_000) -> None:
    ids = np.arange(rows, dtype=np.int64)
    lance_sql.write_dataset(pa.table({"id": ids, "s": pa.array(ids.astype(str))}),
                            str(root / "m.lance"), max_rows_per_file=rows // 5)


def test_the_stream_holds_the_querys_rows(tmp_path: Path) -> None:
    _table(tmp_path)
    session = lance_sql.connect(str(tmp_path))
    query = "SELECT id, s FROM m WHERE id % 3 = 0"
    expected = session.sql(query).to_arrow_table().sort_by("id")
    assert pa.table(session.sql(query)).sort_by("id").equals(expected)
    reader = pa.RecordBatchReader.from_stream(session.sql(query))
    assert reader.read_all().sort_by("id").equals(expected)
    empty = pa.table(session.sql("SELECT id FROM m WHERE id < 0"))
    assert empty.num_rows == 0 and empty.schema.names == ["id"]
    wanted = pa.schema([("id", pa.int64()), ("s", pa.large_string())])
    cast = pa.RecordBatchReader.from_stream(session.sql(query), schema=wanted).read_all()
    assert cast.schema == wanted and cast.num_rows == expected.num_rows


def test_a_damaged_file_is_named_as_lance_sql_names_it(tmp_path: Path) -> None:
    """Before the first batch the error is raised typed; after it, it crosses the C
    interface, which carries a message only: pyarrow's error, naming ours."""
    _table(tmp_path)
    files = sorted((tmp_path / "m.lance" / "data").iterdir())
    os.truncate(files[2], 5000)
    session = lance_sql.connect(str(tmp_path))
    with pytest.raises((FormatError, pa.ArrowInvalid)) as raised:
        pa.table(session.sql("SELECT * FROM m"))
    assert isinstance(raised.value, FormatError) or \
        "lance_sql.errors.FormatError: " in str(raised.value)
    assert "not a Lance file" in str(raised.value)
    for f in files:
        os.truncate(f, 5000)
    with pytest.raises(FormatError):  # (every file damaged: the first batch fails)
        pa.table(lance_sql.connect(str(tmp_path)).sql("SELECT * FROM m"))


SCRIPT = textwrap.dedent('''
    import sys
    import pyarrow as pa
    import lance_sql
    session = lance_sql.connect(sys.argv[1])
    reader = pa.RecordBatchReader.from_stream(session.sql("SELECT * FROM m WHERE id > 10"))
    print("first", reader.read_next_batch().num_rows, flush=True)
''')  # (and the interpreter exits with the reader open)


def test_a_reader_left_open_does_not_hold_the_exit(tmp_path: Path) -> None:
    _table(tmp_path, 200_000)
    package = str(Path(lance_sql.__file__).parent.parent)
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-c", SCRIPT, str(tmp_path)], capture_output=True,
                          text=True, timeout=120, env={"PYTHONPATH": package, "PATH": ""})
    took = time.monotonic() - started
    assert done.returncode == 0 and done.stdout.startswith("first"), done.stderr[-2000:]
    assert "still held" not in done.stderr, done.stderr[-2000:]
    assert took < 20, f"exit took {took:.1f} s"


def test_async_iteration_is_refused_with_a_typed_error(tmp_path: Path) -> None:
    """It failed with AttributeError: __aiter__ (and DataFusion's own async stream, which
    runs beyond the query's tracking, aborted the interpreter at exit)."""
    import asyncio

    from lance_sql.errors import InvalidInputError

    _table(tmp_path, 1000)
    frame = lance_sql.connect(str(tmp_path)).sql("SELECT id FROM m")

    async def read() -> None:
        async for _ in frame:
            pass

    with pytest.raises(InvalidInputError, match="execute_stream"):
        asyncio.run(read())
