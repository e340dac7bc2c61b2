-- SELECT * never shows the system columns...
SELECT * FROM events ORDER BY id LIMIT 3;

-- ...not even when another part of the query names them.
SELECT * FROM events WHERE _rowaddr < 3 ORDER BY id;
