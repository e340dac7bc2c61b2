"""One local SparkSession for the whole run (Spark needs Java; CI installs it)."""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

NO_JAVA = "Spark tests need a Java runtime ('java' is not on PATH)"
try:
    import pyspark  # noqa: F401 - only whether it is installed
except ImportError:  # every module here imports lance_sql.spark, which needs pyspark
    collect_ignore_glob = ["test_*.py"]


def pytest_report_header() -> list[str]:
    if "collect_ignore_glob" in globals():
        return ["tests/spark: skipped, pyspark is not installed (pip install '.[spark]')"]
    return [] if shutil.which("java") else [f"tests/spark: {NO_JAVA}"]


@pytest.fixture(scope="session")
def spark(tmp_path_factory: pytest.TempPathFactory) -> Iterator[object]:
    if shutil.which("java") is None:
        pytest.skip(NO_JAVA)
    from pyspark.sql import SparkSession

    from lance_sql.spark import register

    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    work = tmp_path_factory.mktemp("spark")
    session = (
        SparkSession.builder.master("local[2]")
        .appName("lance_sql-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.python.filterPushdown.enabled", "true")
        .config("spark.sql.warehouse.dir", str(work / "warehouse"))
        # the client JIT only: the test JVM lives two minutes, which full optimisation
        # spends mostly compiling (tests/spark: 95.5 -> 87.8 s, one run each)
        .config("spark.driver.extraJavaOptions",
                f"-Dderby.system.home={work / 'derby'} -XX:TieredStopAtLevel=1")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    register(session)
    yield session
    session.stop()


@pytest.fixture
def uri(tmp_path: Path) -> str:
    return str(tmp_path / "table.lance")
