-- DROP TABLE removes a Lance table's directory under the root; IF EXISTS tolerates a missing one.
CREATE TABLE scratch AS SELECT 1 AS x;

DROP TABLE scratch;

DROP TABLE IF EXISTS scratch;

DROP TABLE scratch;

SELECT * FROM scratch;
