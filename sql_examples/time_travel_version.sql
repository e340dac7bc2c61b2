-- VERSION AS OF n: version 1 still has the 'view' rows the delete of version 3 removed.
SELECT id, kind, amount FROM events VERSION AS OF 1 ORDER BY id;

-- Every version of the table in one query.
SELECT 1 AS version, count(*) AS n FROM events VERSION AS OF 1
UNION ALL SELECT 2, count(*) FROM events VERSION AS OF 2
UNION ALL SELECT 3, count(*) FROM events VERSION AS OF 3
UNION ALL SELECT 4, count(*) FROM events VERSION AS OF 4
ORDER BY version;
