"""Writing rows into new fragments, and distributed write jobs."""
