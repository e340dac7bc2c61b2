"""LSM reads over MemWAL tables: the spec's plan nodes and the planner that builds them.

:mod:`.nodes` holds the operators (:mod:`.search` the top-k ones), :mod:`.sources` the
datasets they read (base table, flushed generations, MemTables), :mod:`.keys` vectorised
key sets, :mod:`.pruning` region pruning and :mod:`.planner` the view that puts them
together (``MemWal.scanner()``, ``get()``, ``nearest()``).
"""
