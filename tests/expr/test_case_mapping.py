"""upper() and lower() in filters map case as DataFusion and pylance do (the full
Unicode mapping), through the Python API and SQL alike."""

from __future__ import annotations

from pathlib import Path

import lance
import pyarrow as pa
import pytest

import lance_sql
from lance_sql.expr.case_mapping import full_case

WORDS = ["ß", "Straße", "a", "ΣΑΣ", "ΟΔΟΣ ΟΔΟΣ", "ǰ", "İstanbul", "ﬁ", "ŉ", "", None, "plain"]
FILTERS = ["upper(k) = 'SS'", "upper(k) = 'STRASSE'", "lower(k) = 'σας'",
           "lower(k) = 'σασ'", "lower(k) = 'οδος οδος'", "upper(k) = 'J̌'",
           "lower(k) = 'i̇stanbul'", "upper(k) = 'FI'", "upper(k) = 'ʼN'",
           "length(upper(k)) = 2", "upper(k) = 'A'", "upper(k) IS NULL", "lower(k) = ''",
           "upper(k) = upper('plain')"]


def test_full_case_maps_as_python_does() -> None:
    for typ in (pa.string(), pa.large_string()):
        values = pa.array(WORDS, typ)
        for op in ("upper", "lower"):
            got = full_case(op, values)
            assert got.type == typ
            assert got.to_pylist() == [None if w is None else getattr(w, op)() for w in WORDS]


@pytest.fixture(scope="module")
def tables(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("case")
    for name, typ in (("s", pa.string()), ("l", pa.large_string())):
        lance_sql.write_dataset(pa.table({"k": pa.array(WORDS, typ)}), str(root / name))
    return root


@pytest.mark.parametrize("where", FILTERS)
def test_python_filters_match_pylance_and_sql(tables: Path, where: str) -> None:
    session = lance_sql.connect(str(tables))
    for name in ("s", "l"):
        ours = lance_sql.dataset(str(tables / name)).to_table(filter=where)
        theirs = lance.dataset(str(tables / name)).to_table(filter=where)
        sql = session.sql(f"SELECT k FROM {name} WHERE {where}").to_arrow_table()
        assert ours.column("k").to_pylist() == theirs.column("k").to_pylist(), (name, where)
        assert sorted(map(str, sql.column("k").to_pylist())) == \
            sorted(map(str, ours.column("k").to_pylist())), (name, where)
