-- INSERT OVERWRITE replaces the rows (one Overwrite commit); the old version stays readable.
CREATE TABLE daily AS SELECT id, amount FROM events WHERE id <= 3;

INSERT OVERWRITE daily SELECT id, amount FROM events WHERE id >= 13;

SELECT * FROM daily ORDER BY id;

SELECT count(*) AS before FROM daily VERSION AS OF 1;

DROP TABLE daily;
