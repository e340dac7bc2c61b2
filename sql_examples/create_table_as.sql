-- CREATE TABLE ... AS SELECT writes a Lance table under the root: one commit, version 1.
CREATE TABLE spend AS
SELECT u.name, sum(e.amount) AS total
FROM events e JOIN users u ON u.user_id = e.user_id
GROUP BY u.name;

SELECT * FROM spend ORDER BY name;

SELECT version, operation, rows FROM table_versions('spend');

-- The name is taken now; IF NOT EXISTS makes that a no-op, OR REPLACE writes version 2.
CREATE TABLE spend AS SELECT 1 AS x;

CREATE TABLE IF NOT EXISTS spend AS SELECT 1 AS x;

CREATE OR REPLACE TABLE spend AS SELECT name FROM users WHERE country = 'NL';

SELECT * FROM spend;

DROP TABLE spend;
