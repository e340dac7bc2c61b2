"""Version hint files (``latest_version_hint.json``, a region's ``version_hint.json``):
whatever their bytes, they name a usable version or none."""

from __future__ import annotations

import pytest

from lance_sql.format.naming import MAX_VERSION, parse_version_hint


@pytest.mark.parametrize(("raw", "version"), [
    (b'{"version": 7}', 7),
    (b'{"version":1,"other":"x"}', 1),
    (b'{"version": 9223372036854775807}', MAX_VERSION),
])
def test_a_hint_names_its_version(raw: bytes, version: int) -> None:
    assert parse_version_hint(raw) == version


@pytest.mark.parametrize("raw", [
    b"", b"not json", b"[]", b'"7"', b"7", b'{"version": "7"}', b'{"version": 7.0}',
    b'{"version": true}', b'{"version": null}', b'{"versions": 7}', b'{"version": 0}',
    b'{"version": -3}', b'{"version": Infinity}', b'{"version": NaN}', b'{"version": 1e308}',
    b'{"version": 9223372036854775808}', b'{"version": ' + b"9" * 300 + b"}",
    b"[" * 100_000 + b"]" * 100_000, b'{"version": 7}' + b" " * 5000, b"\xff\xfe",
])
def test_anything_else_names_none(raw: bytes) -> None:
    assert parse_version_hint(raw) is None
