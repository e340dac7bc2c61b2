"""lance_sql.cli (see DESIGN.md)."""
