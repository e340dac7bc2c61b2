"""lance_sql.memwal (see DESIGN.md)."""
