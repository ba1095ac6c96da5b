-- Sundial schema, version 1. Instants are INTEGER milliseconds since the Unix epoch, UTC.

CREATE TABLE jobs (
    namespace    TEXT    NOT NULL,
    name         TEXT    NOT NULL,
    uid          TEXT    NOT NULL UNIQUE,   -- incarnation of the name
    shard        INTEGER NOT NULL,
    version      INTEGER NOT NULL,
    spec         TEXT    NOT NULL,          -- JobSpec as JSON
    paused       INTEGER NOT NULL,
    created_at   INTEGER NOT NULL,
    updated_at   INTEGER NOT NULL,
    next_slot_at INTEGER,                   -- NULL when paused or completed
    next_fire_at INTEGER,
    PRIMARY KEY (namespace, name)
);
-- The due lookup: its cost grows with what is due, not with what is stored.
CREATE INDEX jobs_due ON jobs (next_fire_at) WHERE next_fire_at IS NOT NULL;

CREATE TABLE executions (
    id               TEXT    PRIMARY KEY,   -- UUIDv7
    namespace        TEXT    NOT NULL,
    job              TEXT    NOT NULL,
    job_uid          TEXT    NOT NULL,
    job_version      INTEGER NOT NULL,
    shard            INTEGER NOT NULL,
    trigger          TEXT    NOT NULL,
    scheduled_at     INTEGER NOT NULL,
    fire_at          INTEGER NOT NULL,
    queued_at        INTEGER NOT NULL,
    due_at           INTEGER,               -- set exactly while waiting for a worker
    started_at       INTEGER,
    finished_at      INTEGER,
    state            TEXT    NOT NULL,
    attempt          INTEGER NOT NULL DEFAULT 0,
    max_attempts     INTEGER NOT NULL,
    worker           TEXT,
    lease_expires_at INTEGER,
    lease_ms         INTEGER NOT NULL,
    created_at       INTEGER NOT NULL,
    triggered_by     TEXT,                  -- scheduler node that created it (NULL: the API)
    run              TEXT    NOT NULL       -- RunSpec as JSON
);
-- One execution per slot of a job incarnation (SPEC G1); manual runs are outside the schedule.
CREATE UNIQUE INDEX executions_slot ON executions (job_uid, scheduled_at)
    WHERE trigger IN ('schedule', 'misfire');
CREATE INDEX executions_due ON executions (due_at) WHERE due_at IS NOT NULL;
CREATE INDEX executions_pending ON executions (job_uid) WHERE due_at IS NOT NULL;
CREATE INDEX executions_lease ON executions (lease_expires_at) WHERE state = 'running';
CREATE INDEX executions_job ON executions (namespace, job, scheduled_at DESC, id DESC);
CREATE INDEX executions_ns ON executions (namespace, scheduled_at DESC, id DESC);
CREATE INDEX executions_last ON executions (job_uid, fire_at DESC);

CREATE TABLE attempts (
    execution_id TEXT    NOT NULL,
    attempt      INTEGER NOT NULL,
    worker       TEXT    NOT NULL,
    started_at   INTEGER NOT NULL,
    finished_at  INTEGER,
    outcome      TEXT,
    status_code  INTEGER,
    error        TEXT,
    detail       TEXT,
    PRIMARY KEY (execution_id, attempt)
);

CREATE TABLE shard_leases (
    shard      INTEGER PRIMARY KEY,
    owner      TEXT    NOT NULL,
    epoch      INTEGER NOT NULL,
    expires_at INTEGER NOT NULL
);

-- Processes, by heartbeat (for GET /v1/cluster).
CREATE TABLE nodes (
    id                   TEXT    PRIMARY KEY,
    instance             TEXT    NOT NULL,
    roles                TEXT    NOT NULL DEFAULT '',
    started_at           INTEGER NOT NULL,
    heartbeat_at         INTEGER NOT NULL,
    expires_at           INTEGER NOT NULL,
    scheduler_expires_at INTEGER NOT NULL DEFAULT 0
);

-- Per-namespace dispatch token buckets (max_dispatch_per_second), shared by every worker.
CREATE TABLE namespace_rates (
    namespace  TEXT PRIMARY KEY,
    tokens     REAL NOT NULL,
    updated_at INTEGER NOT NULL
);
CREATE INDEX executions_ns_due ON executions (namespace, due_at) WHERE due_at IS NOT NULL;
