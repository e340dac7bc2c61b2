"""The error tree: every class is exported from ``lance_sql`` and drawn where it really sits."""

from __future__ import annotations

import inspect
import re

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
