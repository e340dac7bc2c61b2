-- Tags (Iceberg's ALTER TABLE ... CREATE TAG) and RESTORE (Delta's), each one step.
CREATE TABLE ledger AS SELECT id, amount FROM events WHERE id <= 2;

INSERT INTO ledger VALUES (99, 1000.0);

ALTER TABLE ledger CREATE TAG opening AS OF VERSION 1;

ALTER TABLE ledger CREATE TAG audited;

SELECT version, operation, tag FROM table_versions('ledger') ORDER BY version;

RESTORE TABLE ledger TO VERSION AS OF 'opening';

SELECT * FROM ledger ORDER BY id;

RESTORE ledger TO VERSION 2;

SELECT count(*) AS n FROM ledger;

ALTER TABLE ledger DROP TAG opening;

DROP TABLE ledger;
