"""``sample``, ``has_index``, ``max_field_id`` and takes of projected columns, against
pylance 14.0.2 on the same tables."""

from __future__ import annotations

import pyarrow as pa
import pytest

import lance_sql
from lance_sql.errors import InvalidInputError, NotFoundError

lance = pytest.importorskip("lance")


@pytest.fixture()
def uri(tmp_path) -> str:
    path = str(tmp_path / "t")
    data = pa.table({
        "id": pa.array(range(50), pa.int64()),
        "st": pa.array([{"x": i, "y": f"y{i}"} for i in range(50)]),
        "drop_me": pa.array(range(50), pa.int32()),
    })
    py = lance.write_dataset(data, path, max_rows_per_file=20)
    py.delete("id % 7 = 3")
    return path


def test_take_of_expressions_and_struct_fields_matches_pylance(uri: str) -> None:
    ours, theirs = lance_sql.dataset(uri), lance.dataset(uri)
    picks = [0, 17, 40, 3]
    for columns in ({"double": "id * 2", "label": "st.y"}, {"r": "_rowid", "i": "id"},
                    # struct fields stay nested in a take (not in a scan), as pylance's
                    ["st.x", "id"], ["st.y", "id", "st.x"], ["st.x", "st"], ["id", "_rowid"]):
        assert ours.take(picks, columns=columns) == theirs.take(picks, columns=columns)


def test_take_of_nested_struct_fields_matches_pylance(tmp_path) -> None:
    uri = str(tmp_path / "n")
    rows = [{"x": i, "y": f"y{i}", "z": {"q": i, "r": -i}} if i % 3 else None
            for i in range(12)]
    lance.write_dataset(pa.table({"id": range(12), "st": pa.array(rows)}), uri,
                        max_rows_per_file=5)
    ours, theirs = lance_sql.dataset(uri), lance.dataset(uri)
    picks = [1, 3, 6, 11, 0]
    for columns in (["st.z.q"], ["st.z", "st.z.q", "id"], ["st.z.r", "st.x"]):
        assert ours.take(picks, columns=columns) == theirs.take(picks, columns=columns)
    for missing in (["st.w"], ["st.z.q.deeper"], ["nope.x"]):  # pylance panics on these
        with pytest.raises(NotFoundError):
            ours.take(picks, columns=missing)
    ids = theirs.to_table(columns=["id"], with_row_id=True).column("_rowid").to_pylist()[:3]
    assert ours.take_rows(ids, columns={"n": "id + 1"}).column("n").to_pylist() == [1, 2, 3]


def test_take_of_backquoted_struct_fields_matches_pylance(tmp_path) -> None:
    # a backquoted field (one holding a space or a '.') is taken as the scan takes it;
    # splitting the name on every '.' looked for a field named '`e' instead
    uri = str(tmp_path / "q")
    rows = [{"c d": i, "e.f": -i} if i % 4 else None for i in range(9)]
    lance.write_dataset(pa.table({"id": range(9), "st": pa.array(rows)}), uri)
    ours, theirs = lance_sql.dataset(uri), lance.dataset(uri)
    for columns in (["st.`c d`"], ["st.`e.f`", "id"], ["id", "st.`e.f`", "st.`c d`"]):
        assert ours.take([5, 0, 2], columns=columns) == theirs.take([5, 0, 2], columns=columns)
        assert ours.to_table(columns=columns) == theirs.to_table(columns=columns)


def test_sample_picks_distinct_live_rows(uri: str) -> None:
    ds = lance_sql.dataset(uri)
    live = set(ds.to_table(columns=["id"]).column("id").to_pylist())
    sample = ds.sample(10, seed=1)
    ids = sample.column("id").to_pylist()
    assert len(set(ids)) == 10 and set(ids) <= live
    assert sample.schema == ds.schema
    assert ds.sample(10, seed=1) == sample  # a seed repeats it
    ordered = ds.sample(len(live), columns=["id"], randomize_order=False, seed=2)
    assert ordered.column("id").to_pylist() == sorted(live)
    assert ds.sample(0).num_rows == 0
    assert ds.sample(3, columns={"twice": "id * 2"}).column_names == ["twice"]
    assert ds.sample(3, columns=["st.x"]).schema == pa.schema(
        [pa.field("st", pa.struct([pa.field("x", pa.int64())]))])
    for bad in (len(live) + 1, -1, 2.5, True):
        with pytest.raises(InvalidInputError, match="sample of"):
            ds.sample(bad)


def test_has_index_and_max_field_id_match_pylance(uri: str) -> None:
    ours = lance_sql.dataset(uri)
    assert ours.has_index is lance.dataset(uri).has_index is False
    assert ours.max_field_id == lance.dataset(uri).max_field_id == 4  # id st st.x st.y drop_me
    ours.drop_columns(["drop_me"])  # its values stay in the data files
    ours.create_scalar_index("id", "BTREE")
    theirs = lance.dataset(uri)
    assert ours.has_index is theirs.has_index is True
    assert ours.max_field_id == theirs.max_field_id == 4
    ours.optimize.compact_files()  # rewrites the files without it
    assert ours.max_field_id == lance.dataset(uri).max_field_id
