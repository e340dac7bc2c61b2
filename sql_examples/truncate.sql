-- TRUNCATE deletes every row (one Delete commit).
CREATE TABLE temp_rows AS SELECT id FROM events;

TRUNCATE TABLE temp_rows;

SELECT count(*) AS now, (SELECT count(*) FROM temp_rows VERSION AS OF 1) AS before FROM temp_rows;

DROP TABLE temp_rows;
