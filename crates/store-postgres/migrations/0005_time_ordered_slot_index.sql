-- The embedded schema's 0005 reorders its slot index by time and drops executions_last,
-- because SQLite's log receives a whole page for every index page an insert touches.
-- PostgreSQL logs the inserted tuple and answers its concurrency and last-execution
-- questions from execution_queue (0004) and executions_last. Nothing changes here; the file
-- keeps the two stores' migration numbers in step.
SELECT 1;
