"""lance_sql.sql (see DESIGN.md)."""
