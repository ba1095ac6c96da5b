-- History retention (docs/configuration.md, "history_retention"): the pruner walks the
-- history of jobs, and the runs, in (slot, id) order. Keyed by time, so a trigger commit's
-- inserts land on the last pages (0005); workflow tasks are pruned with their run.
CREATE INDEX executions_time ON executions (scheduled_at, id) WHERE run_id IS NULL;
CREATE INDEX workflow_runs_time ON workflow_runs (scheduled_at, id);
