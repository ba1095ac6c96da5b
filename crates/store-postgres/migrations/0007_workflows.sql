-- Workflows (docs/workflows.md): DAGs of tasks on one schedule. A run is a row of
-- workflow_runs; each of its tasks is an ordinary execution carrying run_id and task, made
-- due by the transaction that ends its upstream (never by a polling loop).
CREATE TABLE workflows (
    namespace    TEXT    NOT NULL,
    name         TEXT    NOT NULL,
    uid          TEXT    NOT NULL UNIQUE,   -- incarnation of the name
    shard        BIGINT  NOT NULL,
    version      BIGINT  NOT NULL,
    spec         TEXT    NOT NULL,          -- WorkflowSpec as JSON
    paused       BOOLEAN NOT NULL,
    created_at   BIGINT  NOT NULL,
    updated_at   BIGINT  NOT NULL,
    next_slot_at BIGINT,                    -- NULL without a schedule, paused or completed
    next_fire_at BIGINT,
    PRIMARY KEY (namespace, name)
);
CREATE INDEX workflows_due ON workflows (shard, next_fire_at) WHERE next_fire_at IS NOT NULL;

-- Every version ever written, never changed: a run executes the version it was created with.
CREATE TABLE workflow_versions (
    uid     TEXT   NOT NULL,
    version BIGINT NOT NULL,
    spec    TEXT   NOT NULL,
    PRIMARY KEY (uid, version)
);

CREATE TABLE workflow_runs (
    id               TEXT   PRIMARY KEY,   -- UUIDv7
    namespace        TEXT   NOT NULL,
    workflow         TEXT   NOT NULL,
    workflow_uid     TEXT   NOT NULL,
    workflow_version BIGINT NOT NULL,
    shard            BIGINT NOT NULL,
    trigger          TEXT   NOT NULL,
    scheduled_at     BIGINT NOT NULL,
    fire_at          BIGINT NOT NULL,
    state            TEXT   NOT NULL,
    params           TEXT   NOT NULL,      -- JSON object
    created_at       BIGINT NOT NULL,
    finished_at      BIGINT,
    timeout_at       BIGINT                -- set while unfinished under a run_timeout
);
-- One run per slot of a workflow incarnation (W1); manual runs are outside the schedule.
CREATE UNIQUE INDEX workflow_runs_slot ON workflow_runs (workflow_uid, scheduled_at)
    WHERE trigger IN ('schedule', 'misfire');
CREATE INDEX workflow_runs_history ON workflow_runs (namespace, workflow, scheduled_at DESC, id DESC);
CREATE INDEX workflow_runs_ns ON workflow_runs (namespace, scheduled_at DESC, id DESC);
CREATE INDEX workflow_runs_unfinished ON workflow_runs (workflow_uid)
    WHERE state IN ('scheduled', 'running');
CREATE INDEX workflow_runs_timeout ON workflow_runs (timeout_at) WHERE timeout_at IS NOT NULL;

ALTER TABLE executions ADD COLUMN run_id TEXT, ADD COLUMN task TEXT, ADD COLUMN output TEXT;
-- Exactly one execution per (run, task) (W1); the release reads a run's tasks through it.
CREATE UNIQUE INDEX executions_run_task ON executions (run_id, task) WHERE run_id IS NOT NULL;
