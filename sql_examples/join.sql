-- A join of two Lance tables; user 4 has events but no row in users.
SELECT u.name, count(*) AS events, sum(e.amount) AS spent
FROM events e
JOIN users u ON e.user_id = u.user_id
GROUP BY u.name
ORDER BY u.name;

SELECT e.id, e.user_id, u.name
FROM events AS e
LEFT JOIN users AS u ON e.user_id = u.user_id
WHERE e.id >= 12
ORDER BY e.id;
