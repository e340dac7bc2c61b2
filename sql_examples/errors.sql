-- Errors come back typed, with a one-line message.
SELECT * FROM no_such_table;

SELECT no_such_column FROM events;

SELEC 1;

SELECT * FROM table_versions('no_such_table');
