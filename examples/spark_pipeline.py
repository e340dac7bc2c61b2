"""Spark loads a table in several jobs; lance_sql queries it, including back in time.

    python examples/spark_pipeline.py [DIR]

Each Spark job appends one day of events (one commit per job, whatever the number
of tasks); afterwards SQL compares today's table with the state after day one.
"""

from __future__ import annotations

import os
import sys
import tempfile
from typing import Any

import lance_sql
from lance_sql.spark import register


def load_days(spark: Any, uri: str, days: int = 3, rows_per_day: int = 1000) -> None:
    """One Spark job a day: the first overwrites, the others append (a version each)."""
    for day in range(days):
        df = spark.range(day * rows_per_day, (day + 1) * rows_per_day, numPartitions=4).selectExpr(
            "id", f"{day} AS day", "CASE WHEN id % 3 = 0 THEN 'buy' ELSE 'view' END AS kind",
            "cast(id % 97 AS double) AS amount")
        df.write.format("lance").mode("overwrite" if day == 0 else "append").save(uri)


def report(root: str) -> dict[str, list[dict]]:
    """The table's history, today's totals and what changed since day one, in SQL."""
    session = lance_sql.connect(root)
    queries = {
        "history": "SELECT version, operation, rows, rows_added FROM table_versions('events') "
                   "ORDER BY version",
        "today_by_kind": "SELECT kind, count(*) AS n, sum(amount) AS total FROM events "
                         "GROUP BY kind ORDER BY kind",
        "after_day_one": "SELECT count(*) AS n, max(day) AS last_day FROM events VERSION AS OF 1",
        "new_since_day_one": "SELECT count(*) AS n FROM events e "
                             "LEFT JOIN events VERSION AS OF 1 old ON e.id = old.id "
                             "WHERE old.id IS NULL",
    }
    return {name: session.sql(q).to_arrow_table().to_pylist() for name, q in queries.items()}


def main() -> None:
    """Load three days with a local Spark session, then print the report."""
    from pyspark.sql import SparkSession

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    root = sys.argv[1] if len(sys.argv) > 1 else tempfile.mkdtemp(prefix="lance-pipeline-")
    spark = (SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false")
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    load_days(spark, os.path.join(root, "events.lance"))
    for name, rows in report(root).items():
        print(f"-- {name}")
        for row in rows:
            print("  ", row)
    spark.stop()


if __name__ == "__main__":
    main()
