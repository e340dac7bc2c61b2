-- Projection and a filter (pushed into the Lance scan).
SELECT id, kind, amount
FROM events
WHERE amount > 2 AND kind <> 'buy'
ORDER BY id;
