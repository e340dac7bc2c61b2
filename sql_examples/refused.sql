-- The session touches Lance tables under its root only: DataFusion's external tables and
-- COPY (files anywhere), and statements that would live in memory only, are refused.
CREATE EXTERNAL TABLE secrets STORED AS CSV LOCATION '/etc/passwd';

COPY (SELECT * FROM events) TO '/tmp/events.csv';

CREATE VIEW v AS SELECT * FROM events;

SET datafusion.execution.batch_size = 1;
