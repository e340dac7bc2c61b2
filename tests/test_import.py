"""``import lance_sql`` stays light: processes that only write (Spark workers) or print
help must not pay for pandas, which pyarrow imports when it first converts Python values
or when ``pyarrow.dataset`` is imported (~0.3 s)."""

from __future__ import annotations

import subprocess
import sys


def test_import_does_not_load_pandas() -> None:
    probe = ("import sys, lance_sql, lance_sql.table.write.jobs, lance_sql.table.write.fragments; "
             "print(sorted(m for m in ('pandas', 'pyarrow.dataset') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip() == "[]"
