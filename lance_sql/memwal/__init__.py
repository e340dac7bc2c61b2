"""lance_sql.memwal: MemWAL (LSM) tables — regions, the region writer and background jobs.

The design lives in the "MemWAL (LSM) design" section of the project's DESIGN.md and the
format in the MemWAL specification (``spec/memwal.md`` in the shared specifications).
Nothing is implemented here yet.
"""
