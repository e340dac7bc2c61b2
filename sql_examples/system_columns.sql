-- _rowid and _rowaddr are returned when named. A row address is (fragment id << 32) | offset;
-- without stable row ids the row id equals the address. Deleted rows keep their gaps.
SELECT _rowid, _rowaddr, id FROM events ORDER BY _rowaddr;

-- A lookup by address reads one fragment.
SELECT _rowaddr, * FROM events WHERE _rowaddr = 4294967297;

SELECT id, kind FROM events WHERE _rowid = 8589934592;

-- System columns of an old version.
SELECT _rowaddr, id, kind FROM events VERSION AS OF 1 WHERE kind = 'view' ORDER BY _rowaddr;
