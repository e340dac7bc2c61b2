-- CREATE TABLE with columns: an empty Lance table; PRIMARY KEY columns are recorded as the
-- table's (unenforced) primary key and are NOT NULL.
CREATE TABLE products (
    id BIGINT PRIMARY KEY,
    name VARCHAR NOT NULL,
    price DECIMAL(10, 2),
    tags VARCHAR[]
);

SELECT count(*) AS n FROM products;

DESCRIBE products;

INSERT INTO products (id, price) VALUES (1, 9.99);

DROP TABLE products;
