-- The PostgreSQL schema's 0004 moves the work queue into a narrow table so that the claim and
-- the completion become HOT updates there. SQLite updates only the indexes whose columns
-- change, so the embedded schema keeps its queue on executions. Nothing changes here; the
-- file keeps the two stores' migration numbers in step.
SELECT 1;
