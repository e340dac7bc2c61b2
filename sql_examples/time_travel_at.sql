-- The AT (...) spelling, with a version or a timestamp.
SELECT count(*) AS n FROM events AT (VERSION => 3);

SELECT count(*) AS n FROM events AT (TIMESTAMP => '2024-01-02 00:00:00');
