-- MERGE INTO runs as one merge_insert commit keyed on the ON columns.
CREATE TABLE stock (sku BIGINT, qty BIGINT);

INSERT INTO stock VALUES (1, 10), (2, 20), (3, 30);

MERGE INTO stock AS t
USING (SELECT * FROM (VALUES (2, 25), (4, 40)) AS v(sku, qty)) AS s
ON t.sku = s.sku
WHEN MATCHED THEN UPDATE SET *
WHEN NOT MATCHED THEN INSERT *;

SELECT * FROM stock ORDER BY sku;

-- Explicit columns (the same for UPDATE and INSERT), and deleting rows the source lacks.
MERGE INTO stock AS t
USING (SELECT * FROM (VALUES (1, 5), (2, 6)) AS v(id, delta)) AS s
ON t.sku = s.id
WHEN MATCHED THEN UPDATE SET qty = s.delta * 100
WHEN NOT MATCHED THEN INSERT (sku, qty) VALUES (s.id, s.delta * 100)
WHEN NOT MATCHED BY SOURCE AND t.sku > 3 THEN DELETE;

SELECT * FROM stock ORDER BY sku;

-- What merge_insert cannot do is refused, not approximated.
MERGE INTO stock AS t USING stock AS s ON t.sku = s.sku WHEN MATCHED THEN DELETE;

DROP TABLE stock;
