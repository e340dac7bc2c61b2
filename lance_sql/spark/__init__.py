"""lance_sql.spark (see DESIGN.md)."""
