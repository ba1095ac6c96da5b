-- The two history indexes end at the slot time: the execution id (36 characters of text) is
-- left out of their keys. An entry of executions_job shrinks from about 60 to about 25 bytes,
-- so the index spans less than half the pages, and each execution a trigger commit inserts
-- costs SQLite less (scripts/sqlite_index_cost.py, the store's statements replayed over
-- 200,000 executions of 10,000 jobs: 59-63 µs an execution instead of 68-74; BENCHMARKS.md).
--
-- The listing order stays (scheduled_at DESC, id DESC): SQLite walks these indexes in slot
-- order and sorts only executions that share a slot time ("USE TEMP B-TREE FOR RIGHT PART OF
-- ORDER BY"), and the page token's (scheduled_at, id) bound is still a range on scheduled_at.
DROP INDEX executions_job;
CREATE INDEX executions_job ON executions (namespace, job, scheduled_at DESC);
DROP INDEX executions_ns;
CREATE INDEX executions_ns ON executions (namespace, scheduled_at DESC);
