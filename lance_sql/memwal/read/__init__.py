"""LSM reads over MemWAL tables: the spec's plan nodes and the planner that builds them.

:mod:`.nodes` holds the operators, :mod:`.sources` the datasets they read (base table,
flushed generations, MemTables), :mod:`.pruning` region pruning and :mod:`.planner` the
view that puts them together (``MemWal.scanner()``, ``get()``, ``nearest()``).
"""
