"""The Spark example pipeline runs and its SQL answers are right."""

from __future__ import annotations

import importlib.util
from pathlib import Path

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "spark_pipeline.py"


def test_spark_pipeline(spark, tmp_path: Path) -> None:
    spec = importlib.util.spec_from_file_location("spark_pipeline", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    assert spec.loader is not None
    spec.loader.exec_module(module)
    module.load_days(spark, str(tmp_path / "events.lance"), days=3, rows_per_day=300)
    result = module.report(str(tmp_path))
    assert result["history"] == [
        {"version": 1, "operation": "overwrite", "rows": 300, "rows_added": 300},
        {"version": 2, "operation": "append", "rows": 600, "rows_added": 300},
        {"version": 3, "operation": "append", "rows": 900, "rows_added": 300},
    ]
    assert result["after_day_one"] == [{"n": 300, "last_day": 0}]
    assert result["new_since_day_one"] == [{"n": 600}]
    assert {r["kind"]: r["n"] for r in result["today_by_kind"]} == {"buy": 300, "view": 600}
