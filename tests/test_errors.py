"""The error tree: every class is exported from ``lance_sql`` and drawn where it really sits."""

from __future__ import annotations

import datetime as dt
import inspect
import re
from pathlib import Path

import pyarrow as pa
import pytest

import lance_sql
from lance_sql import errors

CLASSES = {name: cls for name, cls in vars(errors).items()
           if inspect.isclass(cls) and issubclass(cls, errors.LanceError)}


def _drawn_parents() -> dict[str, str]:
    """Each class named in the module docstring's tree, with the class drawn above it."""
    parents: dict[str, str] = {}
    stack: list[tuple[int, str]] = []
    for line in (errors.__doc__ or "").splitlines():
        match = re.search(r"[A-Z]\w+", line)
        if not match or match.group() not in CLASSES or line[:match.start()].strip(" │├└─"):
            continue
        depth, name = match.start(), match.group()
        while stack and stack[-1][0] >= depth:
            stack.pop()
        if stack:
            parents[name] = stack[-1][1]
        stack.append((depth, name))
    return parents


def test_every_error_is_exported() -> None:
    missing = [name for name in CLASSES if getattr(lance_sql, name, None) is not CLASSES[name]]
    assert not missing, f"not exported from lance_sql: {missing}"
    assert set(CLASSES) <= set(lance_sql.__all__)


def test_docstring_tree_matches_the_classes() -> None:
    drawn = _drawn_parents()
    for name, cls in CLASSES.items():
        if cls is errors.LanceError:
            continue
        assert name in drawn, f"{name} is missing from the tree in lance_sql/errors.py"
        assert drawn[name] == cls.__mro__[1].__name__, (
            f"the tree draws {name} under {drawn[name]}, but it derives from "
            f"{cls.__mro__[1].__name__}")


def test_errors_are_the_builtin_classes_pylance_raises(tmp_path: Path) -> None:
    """Code written against pylance catches lance_sql's errors with the same ``except``:
    each case raises, in both libraries, an instance of pylance's class."""
    lance = pytest.importorskip("lance")
    data = pa.table({"id": pa.array(range(4), pa.int64())})

    def tagged_then_cleaned(lib, uri):
        ds = lib.dataset(uri)
        ds.tags.create("keep", 1)
        lib.write_dataset(data, uri, mode="append")
        lib.dataset(uri).cleanup_old_versions(older_than=dt.timedelta(0))

    cases = {
        "missing table": lambda lib, uri: lib.dataset(uri + ".missing"),
        "missing version": lambda lib, uri: lib.dataset(uri, version=99),
        "missing tag": lambda lib, uri: lib.dataset(uri, version="no-such-tag"),
        "delete a missing tag": lambda lib, uri: lib.dataset(uri).tags.delete("nope"),
        "unknown projected column": lambda lib, uri: lib.dataset(uri).to_table(columns=["x"]),
        "unknown filter column": lambda lib, uri: lib.dataset(uri).to_table(filter="x > 1"),
        "drop an unknown column": lambda lib, uri: lib.dataset(uri).drop_columns(["x"]),
        "create over a table": lambda lib, uri: lib.write_dataset(data, uri),
        "cleanup of a tagged version": tagged_then_cleaned,
        "checkout of a missing version": lambda lib, uri: lib.dataset(uri).checkout_version(9),
        "append of other columns": lambda lib, uri: lib.write_dataset(
            pa.table({"name": ["a"]}), uri, mode="append"),
    }
    for number, (name, call) in enumerate(cases.items()):
        caught = {}
        for lib in (lance, lance_sql):
            uri = str(tmp_path / f"{lib.__name__}-{number}.lance")
            lib.write_dataset(data, uri)
            with pytest.raises(Exception) as info:
                call(lib, uri)
            caught[lib.__name__] = info.value
        theirs, ours = caught["lance"], caught["lance_sql"]
        assert isinstance(ours, errors.LanceError), name
        assert isinstance(ours, type(theirs)), (
            f"{name}: pylance raises {type(theirs).__name__}, lance_sql "
            f"{type(ours).__name__}")
    cleaned = lance_sql.dataset(str(tmp_path / f"lance_sql-{len(cases) - 3}.lance"))
    assert [v["version"] for v in cleaned.versions()] == [1, 2], "the refusal removed nothing"
