"""What a table keeps as a file but is not one (a directory, a FIFO) ends a read in a
FormatError naming it: not an OSError, and not a read that never returns."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pytest

import lance_sql
from lance_sql.errors import FormatError
from lance_sql.io import open_store
from lance_sql.table.runtime.context import current_runtime

ROOT = Path(lance_sql.__file__).resolve().parent.parent


def _table(path: Path) -> Path:
    ds = lance_sql.write_dataset(pa.table({"id": list(range(100))}), str(path))
    ds.delete("id % 7 = 1")
    return path


def _replace_with_directory(path: Path) -> None:
    path.unlink()
    path.mkdir()


@pytest.mark.parametrize("where", ["data", "_deletions"])
def test_a_directory_in_a_files_place(tmp_path: Path, where: str) -> None:
    table = _table(tmp_path / "t.lance")
    victim = next((table / where).iterdir())
    _replace_with_directory(victim)
    current_runtime().clear()  # (the write left the file open in the runtime's cache)
    with pytest.raises(FormatError, match="not a regular file") as caught:
        lance_sql.dataset(str(table)).to_table()
    assert victim.name in str(caught.value)


def test_a_directory_named_as_the_newest_manifest(tmp_path: Path) -> None:
    table = _table(tmp_path / "t.lance")
    (table / "_versions" / f"{(1 << 64) - 1 - 3}.manifest").mkdir()
    with pytest.raises(FormatError, match="not a regular file"):
        lance_sql.dataset(str(table))


def test_store_reads_refuse_directories(tmp_path: Path) -> None:
    (tmp_path / "d").mkdir()
    store = open_store(str(tmp_path))
    with pytest.raises(FormatError, match="not a regular file"):
        store.read("d")
    with pytest.raises(FormatError, match="not a regular file"):
        store.open_source("d")


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs named pipes (POSIX)")
def test_a_fifo_in_a_data_files_place_does_not_block(tmp_path: Path) -> None:
    """In a child process with a timeout: opening a FIFO for reading waits for a writer
    unless asked not to, so the old code never returned."""
    table = _table(tmp_path / "t.lance")
    victim = next((table / "data").iterdir())
    victim.unlink()
    os.mkfifo(victim)
    child = ("import sys, lance_sql\n"
             "try:\n"
             "    lance_sql.dataset(sys.argv[1]).to_table()\n"
             "except lance_sql.FormatError as e:\n"
             "    print('FormatError', e)\n")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-c", child, str(table)], capture_output=True,
                          text=True, timeout=60, env=env)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("FormatError") and "not a regular file" in done.stdout
    assert victim.name in done.stdout


def test_a_socket_in_a_files_place(tmp_path: Path) -> None:
    import socket

    with socket.socket(socket.AF_UNIX) as sock:
        sock.bind(str(tmp_path / "s"))
        with pytest.raises(FormatError, match="not a regular file"):
            open_store(str(tmp_path)).read("s")
