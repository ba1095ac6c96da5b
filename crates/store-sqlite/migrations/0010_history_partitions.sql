-- The shared store's 0010 partitions its history by day, so that retention drops whole days.
-- The embedded store keeps one table per kind of history and deletes expired rows in
-- batches (history_retention); the file keeps the two stores' migration numbers in step.
SELECT 1;
