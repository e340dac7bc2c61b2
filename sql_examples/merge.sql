-- MERGE INTO: the simple upsert runs as one merge_insert commit keyed on the ON columns.
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

-- Several clauses, taken in order (the first whose condition holds acts on a row),
-- in full SQL reading both sides: DataFusion evaluates them, still one commit.
MERGE INTO stock AS t
USING (SELECT * FROM (VALUES (1, -500), (2, 7), (5, 0), (6, 60)) AS v(sku, delta)) AS s
ON t.sku = s.sku
WHEN MATCHED AND t.qty + s.delta <= 0 THEN DELETE
WHEN MATCHED THEN UPDATE SET qty = t.qty + s.delta
WHEN NOT MATCHED AND s.delta = 0 THEN DO NOTHING
WHEN NOT MATCHED THEN INSERT (sku) VALUES (s.sku)
WHEN NOT MATCHED BY SOURCE THEN UPDATE SET qty = greatest(t.qty - 1, 0);

SELECT * FROM stock ORDER BY sku;

-- A target row matched by two source rows is an error (nothing is committed).
MERGE INTO stock AS t USING (VALUES (2, 1), (2, 2)) AS s(sku, qty) ON t.sku = s.sku
WHEN MATCHED THEN UPDATE SET qty = s.qty;

DROP TABLE stock;
