"""Settings every test relies on, whatever shell started pytest, and how the suite is laid
out over pytest-xdist's workers (pyproject's ``addopts``: ``-n 2 --dist loadgroup``).

A shell without job control (``bash -c 'pytest ... &'``, a CI script's background step)
starts its background commands with SIGINT ignored, and Python then leaves it ignored:
the Ctrl-C tests would see no KeyboardInterrupt at all, and the processes they start
would inherit the ignored signal. Restoring Python's own handler here also gives those
children the default disposition (a caught signal is reset on exec).

Layout over the workers: every test that uses the session's SparkSession (the ``spark``
fixture) is one xdist group, so one worker runs them all and only one JVM starts; the
tests marked ``slow`` are collected first, so that they start early and the run does not
end with one worker idle behind the other's long test.

Bytecode: with ``PYTHONDONTWRITEBYTECODE`` set (as on our machines) every fresh process
compiled lance_sql again (~0.6 s each; the suite starts hundreds: CLI runs, writers in
other processes, Spark's Python workers) and every worker rewrote every test module's
asserts again (~14 s). The package is compiled once here and pytest's rewritten modules are
cached (both into the ``__pycache__`` directories git ignores).
"""

from __future__ import annotations

import compileall
import importlib.util
import signal
import sys
from pathlib import Path

import pytest
from hypothesis import settings

# pytest caches rewritten test modules only where bytecode may be written
sys.dont_write_bytecode = False

# Hypothesis' default deadline (200 ms an example) measures the machine, not the code: with
# both cores busy (two workers, other jobs) examples that take 50 ms alone took over 200.
settings.register_profile("lance_sql", deadline=None)
settings.load_profile("lance_sql")

SPARK_GROUP = "spark"


def pytest_configure(config: pytest.Config) -> None:
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    if not hasattr(config, "workerinput"):  # once, in the process that starts the workers
        spec = importlib.util.find_spec("lance_sql")  # (finds it without importing it)
        imported = [Path(spec.origin).resolve().parent] if spec and spec.origin else []
        for package in {*imported, Path(__file__).resolve().parents[1] / "lance_sql"}:
            if package.is_dir():
                compileall.compile_dir(package, quiet=1)


@pytest.hookimpl(tryfirst=True)  # before xdist's hook reads the groups
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if SPARK_GROUP in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.xdist_group(SPARK_GROUP))
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)  # stable
