-- INSERT appends: one commit per statement. Values are matched to columns by position
-- and cast to the table's types; columns left out of a column list are NULL.
CREATE TABLE visits (id BIGINT, user_id BIGINT, note VARCHAR);

INSERT INTO visits VALUES (1, 1, 'first'), (2, 3, NULL);

INSERT INTO visits SELECT id + 100, user_id, kind FROM events WHERE amount > 40;

INSERT INTO visits (id, note) VALUES (500, 'anonymous');

SELECT * FROM visits ORDER BY id;

SELECT version, operation, rows_added FROM table_versions('visits') ORDER BY version;

-- Wrong arity or a value that does not fit the column's type: an error, nothing written.
INSERT INTO visits VALUES (9);

INSERT INTO visits VALUES ('x', 1, 'y');

DROP TABLE visits;
