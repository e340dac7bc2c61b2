-- Aggregates over the latest version (ids 2, 5, 8, 11 were deleted in version 3).
SELECT count(*) AS n, sum(amount) AS total, min(amount) AS smallest, max(amount) AS largest,
       avg(amount) AS mean, count(DISTINCT kind) AS kinds
FROM events;
