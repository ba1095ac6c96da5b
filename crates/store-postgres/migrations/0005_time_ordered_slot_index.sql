-- A job's last execution is read through executions_job (the order of its slots), as on the
-- embedded store since its 0005, so executions_last goes: one index fewer for every execution
-- inserted. The embedded schema's 0005 also reorders its slot index by time and adds an index
-- of running executions, because SQLite's log receives a whole page for every index page an
-- insert touches; PostgreSQL logs the inserted tuple and answers its concurrency questions
-- from execution_queue (0004), so neither change is made here.
DROP INDEX executions_last;
