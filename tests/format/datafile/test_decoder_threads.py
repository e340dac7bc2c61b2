"""Page decoders are shared by the threads that scan one file (DataFusion runs a file's
row ranges on several workers): their first use, which parses the page's metadata, must
be safe when several threads make it at once."""

from __future__ import annotations

import threading

import numpy as np
import pyarrow as pa
import pytest
from datafile_helpers import colmap, write_ours

from lance_sql.format.datafile import BytesSource, LanceFileReader
from lance_sql.format.datafile.decode_v2_1 import make_page, parse_layout

THREADS = 4
ROUNDS = 100  # the race this guards against was hit in ~7% of rounds


def _columns() -> dict[str, pa.Array]:
    rng = np.random.default_rng(7)
    n = 20_000
    return {
        "same": pa.array(["y"] * 200_000),  # a one-item dictionary
        "few": pa.array(rng.choice(["ab", "cd", "ef"], n).tolist()),
        "ints": pa.array(rng.integers(0, 1 << 40, n)),
        "long": pa.array(["x" * 300 + str(i) for i in range(n)]),  # full-zip
        "lists": pa.array([[i, i + 1] if i % 3 else None for i in range(n)],
                          pa.list_(pa.int32())),
        "nulls": pa.nulls(n, pa.int64()),  # constant
    }


def _decode_at_once(dec, rows: int) -> list:
    """What ``THREADS`` threads released together get from decoding rows [0, rows)."""
    got: list = []
    barrier = threading.Barrier(THREADS)

    def decode() -> None:
        barrier.wait()
        try:
            got.append(dec.decode(np.array([0]), np.array([rows])))
        except BaseException as exc:  # noqa: BLE001 - the test reports it
            got.append(exc)

    threads = [threading.Thread(target=decode) for _ in range(THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return got


@pytest.mark.usefixtures("frequent_switches")
def test_a_fresh_page_decoded_by_several_threads_at_once() -> None:
    layouts: set[str] = set()
    for name, column in _columns().items():
        data, schema, written = write_ours(pa.table({name: column}), version="2.2")
        reader = LanceFileReader(BytesSource(data, "<threads>"))
        field = schema.fields[0]
        leaf = list(schema.walk())[-1]
        info = reader._column(colmap(written)[leaf.id])
        leaf_type = leaf.arrow_type
        page = info.pages[0]
        layout = parse_layout(page, "page 0")
        kind = layout.WhichOneof("layout")
        if kind == "mini_block_layout" and layout.mini_block_layout.HasField("dictionary"):
            kind += "+dictionary"
        layouts.add(kind)
        rows = min(1000, page.length)
        expected = make_page(layout, page, reader._read, leaf_type, "x").decode(
            np.array([0]), np.array([rows]))
        for _ in range(ROUNDS):
            dec = make_page(layout, page, reader._read, leaf_type, "x")
            for piece in _decode_at_once(dec, rows):
                assert not isinstance(piece, BaseException), f"{field.name}: {piece!r}"
                assert piece.values.equals(expected.values), field.name
    assert {"mini_block_layout+dictionary", "full_zip_layout", "constant_layout"} <= layouts
