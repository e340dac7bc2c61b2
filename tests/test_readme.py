"""Every Python snippet of the README runs as written.

The ```python blocks run in order in one namespace (later snippets use what earlier
ones made, as a reader following along would), with the ``/tmp/`` paths they write
moved into a temporary directory. The Spark snippet needs a SparkSession and a
DataFrame from the reader's own job; it is the one block left out (tests/spark covers
each of its calls).
"""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"
BLOCK = re.compile(r"^```python\n(.*?)^```", re.S | re.M)


def python_blocks() -> list[str]:
    return BLOCK.findall(README.read_text())


def test_the_readme_has_python_snippets() -> None:
    blocks = python_blocks()
    assert len(blocks) >= 5
    assert sum("spark" in b for b in blocks) == 1


def test_every_python_snippet_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    namespace: dict[str, object] = {"__name__": "readme"}
    ran = 0
    for index, block in enumerate(python_blocks()):
        if "spark" in block:
            continue
        code = block.replace("/tmp/", f"{tmp_path}/")
        with contextlib.redirect_stdout(io.StringIO()):
            exec(compile(code, f"README.md python block {index + 1}", "exec"), namespace)
        ran += 1
    assert ran == len(python_blocks()) - 1
    assert (tmp_path / "lake" / "events.lance" / "_versions").is_dir()
