-- count(*) is answered from metadata and deletion vectors, without reading columns.
SELECT count(*) FROM events;

SELECT count(*) AS clicks FROM events WHERE kind = 'click';
