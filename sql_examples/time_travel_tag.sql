-- VERSION AS OF 'tag': 'loaded' is version 2, 'cleaned' is version 3.
SELECT kind, count(*) AS n FROM events VERSION AS OF 'loaded' GROUP BY kind ORDER BY kind;

SELECT kind, count(*) AS n FROM events VERSION AS OF 'cleaned' GROUP BY kind ORDER BY kind;
