-- A version, tag or time inside a quoted table name.
SELECT count(*) AS n FROM "events@1";

SELECT count(*) AS n FROM "events@cleaned";

SELECT count(*) AS n FROM "events@2024-01-02T06:00:00";
