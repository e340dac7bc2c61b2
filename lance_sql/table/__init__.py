"""Table semantics: versions, operations, commits, scans and writes."""
