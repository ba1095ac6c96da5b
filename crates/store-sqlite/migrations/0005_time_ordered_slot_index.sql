-- Indexes keyed by job cost SQLite a page per insert once a job's history spans a page: each
-- execution a trigger commit inserts lands on a page of its own, and the log receives whole
-- pages (BENCHMARKS.md, "The embedded store at a steady 10,000/s"). This migration leaves one
-- such index over the whole history (executions_job, which lists a job's executions) and
-- keeps the others small or ordered by time.
--
-- The slot's uniqueness (SPEC G1) is the same set of columns with the time first: the
-- executions one trigger commit inserts share its last pages.
DROP INDEX executions_slot;
CREATE UNIQUE INDEX executions_slot ON executions (scheduled_at, job_uid)
    WHERE trigger IN ('schedule', 'misfire');
-- A job's last execution is read through executions_job (the order of its slots), so the
-- second history-wide index keyed by job goes.
DROP INDEX executions_last;
-- The concurrency policy's question "does this job have an attempt running?" was answered by
-- walking the job's history in executions_slot; it now reads an index of running executions,
-- as small as the number of attempts in flight. (Waiting ones are in executions_pending.)
CREATE INDEX executions_running ON executions (job_uid) WHERE state = 'running';
