"""Operations on a table built on transactions: delete, update, merge_insert, schema
evolution, compaction, cleanup and clone."""
