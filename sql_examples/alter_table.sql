-- ALTER TABLE: add (all NULL), rename and drop columns; each is one commit.
CREATE TABLE people AS SELECT user_id, name, country FROM users;

ALTER TABLE people ADD COLUMN email VARCHAR;

ALTER TABLE people RENAME COLUMN country TO cc;

ALTER TABLE people DROP COLUMN user_id;

SELECT * FROM people ORDER BY name;

SELECT version, operation FROM table_versions('people') ORDER BY version;

ALTER TABLE people ADD COLUMN name VARCHAR;

ALTER TABLE people RENAME TO persons;

DROP TABLE people;
