-- GROUP BY with HAVING.
SELECT kind, count(*) AS n, sum(amount) AS total
FROM events
GROUP BY kind
ORDER BY kind;

SELECT user_id, sum(amount) AS total
FROM events
GROUP BY user_id
HAVING sum(amount) > 10
ORDER BY user_id;
