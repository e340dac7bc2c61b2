"""The generated protobuf modules are exactly what protos/ compiles to."""

from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _generator():
    spec = importlib.util.spec_from_file_location("gen_protos", ROOT / "scripts" / "gen_protos.py")
    module = importlib.util.module_from_spec(spec)
    assert spec.loader is not None
    spec.loader.exec_module(module)
    return module


def test_regenerating_protos_changes_nothing(tmp_path: Path) -> None:
    written = _generator().generate(tmp_path)
    assert written, "no modules generated"
    checked_in = ROOT / "lance_sql" / "format" / "pb"
    for path in written:
        assert (checked_in / path.name).read_text() == path.read_text(), (
            f"{path.name} is stale: run `python scripts/gen_protos.py`"
        )
    expected = {p.name for p in written} | {"__init__.py"}
    assert {p.name for p in checked_in.glob("*.py*")} == expected
    assert {p.suffix for p in written} == {".py", ".pyi"}


def test_reference_field_numbers() -> None:
    """Spot-check numbers the reference's bytes depend on."""
    from lance_sql.format.pb import table_pb2, transaction_pb2

    manifest = table_pb2.Manifest.DESCRIPTOR.fields_by_name
    assert manifest["transaction_section"].number == 23
    assert manifest["transaction_section_deprecated"].number == 21
    assert manifest["data_format"].number == 15
    ops = transaction_pb2.Transaction.DESCRIPTOR.oneofs_by_name["operation"].fields
    assert {f.name: f.number for f in ops}["update_bases"] == 114
    assert {f.name: f.number for f in ops}["append"] == 100
