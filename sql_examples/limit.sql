-- LIMIT and OFFSET (over a sorted result, so the rows are always the same).
SELECT id, kind FROM events ORDER BY id LIMIT 3;

SELECT id, kind FROM events ORDER BY id DESC LIMIT 2 OFFSET 1;

-- A LIMIT without ORDER BY may return any rows; how many is certain.
SELECT count(*) AS n FROM (SELECT * FROM events LIMIT 4) AS t;
