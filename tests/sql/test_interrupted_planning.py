"""Ctrl-C while a query is planned: KeyboardInterrupt in the caller, once planning is
done, never a Rust panic, a bogus "table not found" or a lost interrupt.

The interrupt is delivered from inside the table's schema (a callback DataFusion makes from
Rust while planning, unwrapping its result: a KeyboardInterrupt there was a panic), in a
fresh process whose exit code is checked.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import lance_sql

SCRIPT = textwrap.dedent('''
    import os, signal, sys
    import pyarrow as pa
    import lance_sql
    from lance_sql.sql import provider

    root = sys.argv[1]
    lance_sql.write_dataset(pa.table({"id": list(range(100))}), root + "/t.lance")
    session = lance_sql.connect(root)
    hits = []
    real = provider.LanceTableDataset.schema

    def interrupted(self):
        if len(hits) < queries:  # Ctrl-C lands while Rust waits on the table's schema
            hits.append(1)
            os.kill(os.getpid(), signal.SIGINT)
        return real.fget(self)

    provider.LanceTableDataset.schema = property(interrupted)
    outcomes = []
    for queries in (1, 2, 3):
        try:
            session.sql("SELECT count(*) AS n FROM t a JOIN t b ON a.id = b.id")
            outcomes.append("planned")
        except KeyboardInterrupt:
            outcomes.append("KeyboardInterrupt")
        except BaseException as exc:
            outcomes.append(type(exc).__name__)
    provider.LanceTableDataset.schema = real
    n = session.sql("SELECT count(*) AS n FROM t").to_pylist()[0]["n"]
    print(outcomes, len(hits), n)
''')


def test_ctrl_c_in_a_planning_callback_is_a_keyboard_interrupt(tmp_path: Path) -> None:
    package = str(Path(lance_sql.__file__).resolve().parents[1])
    done = subprocess.run([sys.executable, "-c", SCRIPT, str(tmp_path)], capture_output=True,
                          text=True, timeout=120, env={"PYTHONPATH": package, "PATH": ""})
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split("\n")[0] == f"{['KeyboardInterrupt'] * 3} 3 100"
    assert "panicked" not in done.stderr
