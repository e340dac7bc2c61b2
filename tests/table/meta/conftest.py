"""Fixtures of the table-metadata tests."""

from __future__ import annotations

import pytest

from lance_sql.io.local import LocalStore


@pytest.fixture
def listings(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The prefixes local stores list from here on, in order."""
    listed: list[str] = []
    real = LocalStore.list_dir

    def list_dir(self: LocalStore, prefix: str) -> list[str]:
        listed.append(prefix)
        return real(self, prefix)

    monkeypatch.setattr(LocalStore, "list_dir", list_dir)
    return listed
