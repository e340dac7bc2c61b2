-- One table at two versions in one query: what the delete removed...
SELECT old.id, old.kind
FROM events VERSION AS OF 'loaded' AS old
LEFT JOIN events VERSION AS OF 'cleaned' AS cur ON old.id = cur.id
WHERE cur.id IS NULL
ORDER BY old.id;

-- ...and what arrived since version 1.
SELECT cur.id, cur.kind, cur.amount
FROM events AS cur
WHERE cur.id NOT IN (SELECT id FROM events VERSION AS OF 1)
ORDER BY cur.id;

-- Per kind: rows then and now (a CTE per version).
WITH v1 AS (SELECT kind, count(*) AS n FROM events VERSION AS OF 1 GROUP BY kind),
     now AS (SELECT kind, count(*) AS n FROM events GROUP BY kind)
SELECT coalesce(v1.kind, now.kind) AS kind, coalesce(v1.n, 0) AS at_v1, coalesce(now.n, 0) AS latest
FROM v1 FULL OUTER JOIN now ON v1.kind = now.kind
ORDER BY kind;
