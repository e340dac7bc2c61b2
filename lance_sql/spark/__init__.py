"""Spark integration: the ``lance`` data source and ``write_dataset(df, uri)``."""

from lance_sql.spark.datasource import FilteringLanceDataSource, LanceDataSource
from lance_sql.spark.session import register, write_dataset

__all__ = ["FilteringLanceDataSource", "LanceDataSource", "register", "write_dataset"]
