-- History retention (docs/configuration.md, "history_retention"): the pruner walks the
-- history of jobs, and the runs, in (slot, id) order. Neither column ever changes, so the
-- claim's and the completion's updates of an execution stay HOT (0004); workflow tasks are
-- pruned with their run.
CREATE INDEX executions_time ON executions (scheduled_at, id) WHERE run_id IS NULL;
CREATE INDEX workflow_runs_time ON workflow_runs (scheduled_at, id);
