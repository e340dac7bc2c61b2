-- UPDATE and DELETE commit at once and report the rows they changed.
CREATE TABLE tickets AS SELECT id, kind, amount FROM events;

UPDATE tickets SET amount = amount * 2 WHERE kind = 'buy';

DELETE FROM tickets WHERE kind = 'refund' OR id > 100;

SELECT kind, count(*) AS n, sum(amount) AS total FROM tickets GROUP BY kind ORDER BY kind;

DROP TABLE tickets;
