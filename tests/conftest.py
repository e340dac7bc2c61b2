"""Settings every test relies on, whatever shell started pytest, and how the suite is laid
out over pytest-xdist's workers (pyproject's ``addopts``: ``-n 2``).

A shell without job control (``bash -c 'pytest ... &'``, a CI script's background step)
starts its background commands with SIGINT ignored, and Python then leaves it ignored:
the Ctrl-C tests would see no KeyboardInterrupt at all, and the processes they start
would inherit the ignored signal. Restoring Python's own handler here also gives those
children the default disposition (a caught signal is reset on exec).

Layout over the workers: the tests under tests/spark are one unit of work, so one worker
runs them all and only one JVM starts (the session's SparkSession); every other test is
handed out alone, the Spark unit first and then in collection order, where the tests
marked ``slow`` come first: they start early and the run does not end with one worker
idle behind the other's long test. (xdist's own ``--dist loadgroup`` would group by an
``xdist_group`` mark, but since pytest 9.2 it silently stops grouping: it renames the
tests' node ids, which pytest now derives from elsewhere; pytest-xdist issue 1386.)

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
from xdist.remote import Producer
from xdist.scheduler import LoadScopeScheduling

# pytest caches rewritten test modules only where bytecode may be written
sys.dont_write_bytecode = False

# Hypothesis' default deadline (200 ms an example) measures the machine, not the code: with
# both cores busy (two workers, other jobs) examples that take 50 ms alone took over 200.
settings.register_profile("lance_sql", deadline=None)
settings.load_profile("lance_sql")

SPARK_TESTS = "tests/spark/"


def pytest_configure(config: pytest.Config) -> None:
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    if not hasattr(config, "workerinput"):  # once, in the process that starts the workers
        spec = importlib.util.find_spec("lance_sql")  # (finds it without importing it)
        imported = [Path(spec.origin).resolve().parent] if spec and spec.origin else []
        for package in {*imported, Path(__file__).resolve().parents[1] / "lance_sql"}:
            if package.is_dir():
                compileall.compile_dir(package, quiet=1)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)  # stable


class SparkTogether(LoadScopeScheduling):
    """Each test its own unit of work, except the Spark tests: one unit (one JVM). The
    largest unit goes first (xdist orders the units by size), the rest keep their order."""

    def _split_scope(self, nodeid: str) -> str:
        return SPARK_TESTS if nodeid.startswith(SPARK_TESTS) else nodeid


@pytest.hookimpl(optionalhook=True)  # a hook of pytest-xdist's
def pytest_xdist_make_scheduler(config: pytest.Config, log: Producer) -> SparkTogether | None:
    """The scheduler of ``--dist load`` (what ``-n`` implies); other modes are xdist's."""
    return SparkTogether(config, log) if config.getvalue("dist") == "load" else None
