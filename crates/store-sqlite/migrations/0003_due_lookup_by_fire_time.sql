-- The PostgreSQL schema's 0003 makes its due lookup walk jobs in fire-time order, as the
-- embedded store's jobs_due index has done from the start (one process holds every shard).
-- Nothing changes here; the file keeps the two stores' migration numbers in step.
SELECT 1;
