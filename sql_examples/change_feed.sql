-- orders was created with stable row ids: rows keep their _rowid through updates and
-- merge_insert, and carry the versions that created and last updated them.
SELECT _rowid, id, status, _row_created_at_version, _row_last_updated_at_version
FROM orders ORDER BY _rowid;

-- Every change of versions 2..4 (both ends included): update pre- and post-images,
-- merge_insert's update and insert, the delete with the deleted row's values.
SELECT _commit_version, _change_type, _rowid, id, status
FROM table_changes('orders', 2, 4) ORDER BY _commit_version, _rowid, _change_type DESC;

-- Filters on the metadata columns are applied before any data file is read.
SELECT _commit_version, _commit_timestamp, id, status
FROM table_changes('orders', 1, 4) WHERE _change_type = 'delete';

-- Timestamps work as window ends too.
SELECT _commit_version, _change_type, id
FROM table_changes('orders', '2024-01-03 00:00:00', '2024-01-03 23:59:59')
ORDER BY id, _change_type DESC;

-- The spec's SQL patterns on the version columns: rows inserted after version 1, and rows
-- that existed at version 1 and were updated since.
SELECT id FROM orders WHERE _row_created_at_version > 1 AND _row_created_at_version <= 4
ORDER BY id;
SELECT id, status FROM orders
WHERE _row_created_at_version <= 1 AND _row_last_updated_at_version > 1 ORDER BY id;

-- A row found by its stable id after an update moved it.
SELECT _rowid, _rowaddr, id, status FROM orders WHERE _rowid = 2;

-- A window must be in order and inside the history.
SELECT * FROM table_changes('orders', 3, 2);
SELECT * FROM table_changes('events', 1, 2);
