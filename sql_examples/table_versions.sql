-- The history as a table (the fixture pins the commit times).
SELECT * FROM table_versions('events') ORDER BY version;

SELECT operation, count(*) AS versions, sum(rows_added) AS added, sum(rows_removed) AS removed
FROM table_versions('events')
GROUP BY operation
ORDER BY operation;
