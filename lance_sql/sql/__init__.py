"""SQL over Lance tables through DataFusion (see :mod:`lance_sql.sql.session`)."""

from lance_sql.sql.session import LanceDataFrame, LanceSession, connect

__all__ = ["LanceDataFrame", "LanceSession", "connect"]
