-- TIMESTAMP AS OF: the latest version committed at or before the time (UTC unless a
-- zone is given). The fixture commits version v at 2024-01-0v 00:00:00 UTC.
SELECT count(*) AS n FROM events TIMESTAMP AS OF '2024-01-02 12:00:00';

-- Exactly at a commit time: that version.
SELECT count(*) AS n FROM events TIMESTAMP AS OF '2024-01-03T00:00:00Z';

-- With a time zone: 2024-01-02 20:00 in New York is 2024-01-03 01:00 UTC (version 3).
SELECT count(*) AS n FROM events TIMESTAMP AS OF '2024-01-02T20:00:00-05:00';

-- Far in the future: the latest version.
SELECT count(*) AS n FROM events TIMESTAMP AS OF '2999-01-01 00:00:00';

-- Before the table existed: an error, never an empty result.
SELECT count(*) AS n FROM events TIMESTAMP AS OF '2023-12-31 23:59:59';
