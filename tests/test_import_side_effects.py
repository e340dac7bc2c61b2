"""Importing and using lance_sql changes nothing process-wide: no class of DataFusion or
pyarrow is rebound, no interpreter setting, warning filter, signal handler or
environment variable changes. (The malloc tuning, the one process-wide change lance_sql
offers, is opt-in: tests/test_allocator.py checks that importing does not apply it.)"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

_PROBE = r"""
import inspect, os, signal, sys, threading, warnings
import datafusion, datafusion.catalog, datafusion.dataframe, datafusion.context
import pyarrow, pyarrow.compute, pyarrow.dataset

MODULES = [m for name, m in sorted(sys.modules.items())
           if name.split(".")[0] in ("datafusion", "pyarrow") and m is not None]

def classes():
    out = {}
    for module in MODULES:
        for name, value in list(vars(module).items()):
            if inspect.isclass(value):
                out[f"{module.__name__}.{name}"] = (value, dict(vars(value)))
    return out

def state():
    return {
        "recursionlimit": sys.getrecursionlimit(),
        "switchinterval": sys.getswitchinterval(),
        "excepthook": sys.excepthook,
        "threading.excepthook": threading.excepthook,
        "warnings": list(warnings.filters),
        "signals": {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)},
        "environ": dict(os.environ),
        "modules": {n: getattr(datafusion, n) for n in dir(datafusion)},
    }

before_classes, before = classes(), state()
import lance_sql
import pyarrow as pa
lance_sql.write_dataset(pa.table({"x": [1, 2, 3]}), sys.argv[1])
session = lance_sql.connect(os.path.dirname(sys.argv[1]))
assert session.sql("SELECT sum(x) AS s FROM t").to_pydict() == {"s": [6]}
after_classes, after = classes(), state()
changed = [name for name, (cls, attrs) in before_classes.items()
           if after_classes.get(name, (None,))[0] is not cls
           or after_classes[name][1] != attrs]
changed += [key for key in before if before[key] != after[key]]
print("changed:", changed)
"""


def test_importing_and_querying_changes_no_process_wide_state(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent.parent)}
    out = subprocess.run([sys.executable, "-c", _PROBE, str(tmp_path / "t")], env=env,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "changed: []"
