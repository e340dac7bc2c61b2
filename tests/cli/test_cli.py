"""The lance-sql command."""

from __future__ import annotations

import io
from contextlib import redirect_stdout
from pathlib import Path

from lance_sql.cli.main import main, run_demo


def test_demo_shows_time_travel_and_history(tmp_path: Path) -> None:
    out = io.StringIO()
    run_demo(tmp_path, out)
    text = out.getvalue()
    assert "view" not in text.split("Time travel")[0].split("row addresses")[1]
    assert "buy" in text and "_rowaddr" in text
    history = text.split("History:")[1]
    assert "overwrite" in history and "append" in history and "delete" in history
    assert "loaded" in history


def test_log_command(tmp_path: Path, capsys) -> None:  # noqa: ANN001
    run_demo(tmp_path, io.StringIO())
    with redirect_stdout(io.StringIO()) as buf:
        assert main(["log", str(tmp_path / "events.lance")]) == 0
    lines = buf.getvalue().splitlines()
    assert lines[0].split()[0] == "version" and len(lines) == 2 + 3
    assert main(["log", str(tmp_path / "missing")]) == 1
    assert "no Lance table" in capsys.readouterr().err
