"""String columns in Lance file format 2.2: file size, write and read time, lance_sql vs pylance.

Corpus (built here, deterministic, vectorised): one-column tables of N rows each of

* ``user_ids``: ``user-<9 digits>`` (high cardinality, short);
* ``names``: first and last names made of random syllables, with a middle initial sometimes;
* ``urls``: ``https://<host>.<tld>/<path words>?id=<n>&ref=<word>`` over a few thousand hosts;
* ``json``: JSON-like records ``{"id": n, "name": "...", "tags": [...], "score": 0.123, ...}``;
* ``categories``: 40 distinct values (dictionary territory).

Each table is written as one 2.2 data file by ``lance_sql.write_dataset`` (with its default
compression, LZ4, and with ``lance-encoding:compression=zstd`` / ``fsst`` in the field
metadata, which both libraries honour) and by pylance; sizes are the data files' bytes.
Reads are full scans of the column (``to_table``) of each file by both libraries; takes
are 100 random rows (``take``, the point path index lookups and IN lists use) from our
default file, our FSST file and pylance's file, each by its writer's library. Medians of --repeat
runs, lance_sql and pylance interleaved.

    python bench/bench_strings.py --rows 1000000 --repeat 5
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from timing import formats_line  # bench/timing.py (scripts run from bench/)

import lance_sql

_SYLLABLES = ("ka ri to mi an el or is ta ne lo ru sa vi ber han mar jo li ed win fre da "
              "gar son ley ton ric al bert ine ette bo ca de fi gu ha ja ke la mo nu pe "
              "qu ro su ti ul ve wa xi yo ze").split()
_WORDS = ("data table query index search news blog shop cart item user account login "
          "image video music sport travel food health money cloud code docs help about "
          "contact archive page post tag category product review order report").split()


def _pick(rng: np.random.Generator, words: pa.Array, n: int) -> pa.Array:
    return words.take(pa.array(rng.integers(0, len(words), n)))


def _words(rng: np.random.Generator, count: int, lo: int, hi: int, cap: bool) -> pa.Array:
    """``count`` random pseudo-words of ``lo..hi`` syllables (distinct-ish vocabulary)."""
    syl = pa.array(_SYLLABLES)
    parts = [_pick(rng, syl, count) for _ in range(hi)]
    n_syl = rng.integers(lo, hi + 1, count)
    empty = pa.array([""] * count)
    cols = [parts[0]] + [pc.if_else(pa.array(n_syl > k), parts[k], empty) for k in range(1, hi)]
    out = pc.binary_join_element_wise(*cols, "")
    return pc.utf8_capitalize(out) if cap else out


def corpus(rows: int, seed: int = 0) -> dict[str, pa.Array]:
    rng = np.random.default_rng(seed)
    digits = pa.array(rng.integers(100_000_000, 999_999_999, rows)).cast(pa.string())
    firsts = _words(rng, 3000, 2, 3, True)
    lasts = _words(rng, 20000, 2, 4, True)
    initials = pa.array([f" {c}." for c in "ABCDEFGHJKLMNPRSTW"] + [""] * 30)
    names = pc.binary_join_element_wise(_pick(rng, firsts, rows), _pick(rng, initials, rows),
                                        pa.array([" "] * rows), _pick(rng, lasts, rows), "")
    hosts = pc.binary_join_element_wise(
        _words(rng, 4000, 2, 4, False), _pick(rng, pa.array([".com", ".org", ".net", ".io",
                                                           ".de", ".co.uk"]), 4000), "")
    words = pa.array(_WORDS)
    urls = pc.binary_join_element_wise(
        pa.array(["https://www."] * rows), _pick(rng, hosts, rows), pa.array(["/"] * rows),
        _pick(rng, words, rows), pa.array(["/"] * rows), _pick(rng, words, rows),
        pa.array(["?id="] * rows), pa.array(rng.integers(1, 10**7, rows)).cast(pa.string()),
        pa.array(["&ref="] * rows), _pick(rng, words, rows), "")
    score = pc.round(pa.array(rng.random(rows)), 3).cast(pa.string())
    json = pc.binary_join_element_wise(
        pa.array(['{"id": '] * rows), pa.array(rng.integers(1, 10**8, rows)).cast(pa.string()),
        pa.array([', "name": "'] * rows), names, pa.array(['", "tags": ["'] * rows),
        _pick(rng, words, rows), pa.array(['", "'] * rows), _pick(rng, words, rows),
        pa.array(['"], "score": '] * rows), score,
        pa.array([', "active": '] * rows), _pick(rng, pa.array(["true", "false"]), rows),
        pa.array(["}"] * rows), "")
    cats = _pick(rng, pc.binary_join_element_wise(pa.array(["category-"] * 40),
                                                   _words(rng, 40, 1, 2, False), ""), rows)
    return {"user_ids": pc.binary_join_element_wise(pa.array(["user-"] * rows), digits, ""),
            "names": names, "urls": urls, "json": json, "categories": cats}


def _size(uri: Path) -> int:
    return sum(p.stat().st_size for p in (uri / "data").glob("*.lance"))


def _interleaved(runs: dict[str, tuple[Callable[[], object], Callable[[], None] | None]],
                 repeat: int) -> dict[str, float]:
    times: dict[str, list[float]] = {k: [] for k in runs}
    for i in range(repeat + 1):  # the first round is a warm-up
        for name, (fn, setup) in runs.items():
            if setup is not None:
                setup()
            start = time.perf_counter()
            fn()
            if i:
                times[name].append(time.perf_counter() - start)
    return {k: statistics.median(v) for k, v in times.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()

    import lance  # the reference, imported here so the package never depends on it

    work = Path(tempfile.mkdtemp(prefix="lance-sql-bench-strings-"))
    try:
        print(f"{args.rows:,} rows per table, one 2.2 data file each; median of {args.repeat} "
              "interleaved runs (the machine may be shared: compare ratios)")
        print(f"{'column':<11}{'mean B':>7}{'ours MB':>9}{'zstd MB':>9}{'pylance MB':>11}"
              f"{'size':>7}{'zstd':>7}{'write ms':>10}{'zstd ms':>9}{'pylance ms':>11}"
              f"{'write':>7}{'read ms':>9}{'pylance ms':>11}{'read':>7}")
        for name, arr in corpus(args.rows).items():
            table = pa.table({"s": arr})
            zfield = pa.field("s", pa.string(), metadata={"lance-encoding:compression": "zstd"})
            ztable = pa.table({"s": arr}, schema=pa.schema([zfield]))
            ffield = pa.field("s", pa.string(), metadata={"lance-encoding:compression": "fsst"})
            ftable = pa.table({"s": arr}, schema=pa.schema([ffield]))
            uris = {k: work / f"{name}-{k}.lance" for k in ("ours", "zstd", "fsst", "ref")}

            def clean(key: str, uris: dict[str, Path] = uris) -> Callable[[], None]:
                return lambda: shutil.rmtree(uris[key], ignore_errors=True)

            def write(key: str, data: pa.Table, uris: dict[str, Path] = uris
                      ) -> tuple[Callable[[], object], Callable[[], None]]:
                if key == "ref":
                    return (lambda: lance.write_dataset(data, str(uris[key]))), clean(key)
                return (lambda: lance_sql.write_dataset(data, uris[key])), clean(key)

            writes = _interleaved({"ours": write("ours", table), "zstd": write("zstd", ztable),
                                   "fsst": write("fsst", ftable), "ref": write("ref", table)},
                                  args.repeat)
            ours_ds, ref_ds = lance_sql.dataset(uris["ours"]), lance.dataset(str(uris["ref"]))
            assert ours_ds.to_table().equals(table) and ref_ds.to_table().equals(table)
            assert lance.dataset(str(uris["ours"])).to_table().equals(table)
            assert lance.dataset(str(uris["zstd"])).to_table().equals(table)
            assert lance_sql.dataset(uris["zstd"]).to_table().equals(table)
            # both libraries read the file pylance wrote, and our reader ours
            fsst_ds = lance_sql.dataset(uris["fsst"])
            assert fsst_ds.to_table().equals(table)
            assert lance.dataset(str(uris["fsst"])).to_table().equals(table)
            reads = _interleaved({"ours": (ours_ds.to_table, None),
                                  "fsst": (fsst_ds.to_table, None),
                                  "ours_on_ref": (lance_sql.dataset(uris["ref"]).to_table, None),
                                  "ref": (ref_ds.to_table, None)}, args.repeat)
            rows = np.sort(np.random.default_rng(1).choice(args.rows, 100, replace=False))
            expected = table.take(pa.array(rows))
            assert ours_ds.take(rows).equals(expected) and fsst_ds.take(rows).equals(expected)
            assert ref_ds.take(rows.tolist()).equals(expected)
            takes = _interleaved({"ours": (partial(ours_ds.take, rows), None),
                                  "fsst": (partial(fsst_ds.take, rows), None),
                                  "ref": (partial(ref_ds.take, rows.tolist()), None)},
                                 max(args.repeat, 5))
            sizes = {k: _size(u) / 1e6 for k, u in uris.items()}
            mean = pc.mean(pc.binary_length(arr)).as_py()
            print(f"{name:<11}{mean:7.1f}{sizes['ours']:9.2f}{sizes['zstd']:9.2f}"
                  f"{sizes['ref']:11.2f}{sizes['ours'] / sizes['ref']:6.2f}x"
                  f"{sizes['zstd'] / sizes['ref']:6.2f}x{writes['ours'] * 1e3:10.1f}"
                  f"{writes['zstd'] * 1e3:9.1f}{writes['ref'] * 1e3:11.1f}"
                  f"{writes['ours'] / writes['ref']:6.2f}x{reads['ours'] * 1e3:9.1f}"
                  f"{reads['ref'] * 1e3:11.1f}{reads['ours'] / reads['ref']:6.2f}x"
                  f"   (lance_sql reading pylance's file: {reads['ours_on_ref'] * 1e3:.1f} ms)")
            print(f"{'':<11}take 100 rows: ours {takes['ours'] * 1e3:.2f} ms, pylance "
                  f"{takes['ref'] * 1e3:.2f} ms ({takes['ours'] / takes['ref']:.2f}x)")
            print(f"{'':<11}with fsst: {sizes['fsst']:.2f} MB "
                  f"({sizes['fsst'] / sizes['ref']:.2f}x), write "
                  f"{writes['fsst'] * 1e3:.1f} ms ({writes['fsst'] / writes['ref']:.2f}x), "
                  f"read {reads['fsst'] * 1e3:.1f} ms ({reads['fsst'] / reads['ref']:.2f}x), "
                  f"take 100 rows {takes['fsst'] * 1e3:.2f} ms "
                  f"({takes['fsst'] / takes['ref']:.2f}x)")
            if name == "user_ids":
                print("  " + formats_line(lance_sql=uris["ours"], zstd=uris["zstd"],
                                          pylance=uris["ref"]))
        print("(size/write/read = lance_sql / pylance; zstd = lance_sql with "
              "lance-encoding:compression=zstd; read = each library on its own file)")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
