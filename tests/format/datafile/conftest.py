"""Fixtures shared by the data-file thread tests."""

from __future__ import annotations

import sys
from collections.abc import Iterator

import pytest


@pytest.fixture
def frequent_switches() -> Iterator[None]:
    """Threads switch every microsecond, so a window between two statements is hit."""
    before = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        yield
    finally:
        sys.setswitchinterval(before)
