-- Tags in the history, and a query through each tag.
SELECT version, tag FROM table_versions('events') WHERE tag IS NOT NULL ORDER BY version;

SELECT 'loaded' AS tag, count(*) AS n FROM events VERSION AS OF 'loaded'
UNION ALL
SELECT 'cleaned', count(*) FROM events VERSION AS OF 'cleaned'
ORDER BY tag;
