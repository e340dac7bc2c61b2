-- Time travel that cannot be honoured fails loudly.
SELECT count(*) FROM events VERSION AS OF 99;

SELECT count(*) FROM events VERSION AS OF 'no-such-tag';

-- A clause that does not follow a Lance table name is an error, not silently ignored.
SELECT count(*) FROM (SELECT * FROM events) AS e VERSION AS OF 1;
