-- Sundial schema, version 1 (PostgreSQL). Instants are BIGINT milliseconds since the Unix
-- epoch, UTC, as in the embedded store; the database clock is read as
-- (extract(epoch from clock_timestamp()) * 1000)::bigint.

CREATE TABLE jobs (
    namespace    TEXT    NOT NULL,
    name         TEXT    NOT NULL,
    uid          TEXT    NOT NULL UNIQUE,   -- incarnation of the name
    shard        BIGINT  NOT NULL,
    version      BIGINT  NOT NULL,
    spec         JSONB   NOT NULL,          -- JobSpec
    paused       BOOLEAN NOT NULL,
    created_at   BIGINT  NOT NULL,
    updated_at   BIGINT  NOT NULL,
    next_slot_at BIGINT,                    -- NULL when paused or completed
    next_fire_at BIGINT,
    PRIMARY KEY (namespace, name)
);
-- The due lookup per shard: its cost grows with what is due, not with what is stored.
CREATE INDEX jobs_due ON jobs (shard, next_fire_at) WHERE next_fire_at IS NOT NULL;

CREATE TABLE executions (
    id               TEXT    PRIMARY KEY,   -- UUIDv7
    namespace        TEXT    NOT NULL,
    job              TEXT    NOT NULL,
    job_uid          TEXT    NOT NULL,
    job_version      BIGINT  NOT NULL,
    shard            BIGINT  NOT NULL,
    trigger          TEXT    NOT NULL,
    scheduled_at     BIGINT  NOT NULL,
    fire_at          BIGINT  NOT NULL,
    queued_at        BIGINT  NOT NULL,
    due_at           BIGINT,                -- set exactly while waiting for a worker
    started_at       BIGINT,
    finished_at      BIGINT,
    state            TEXT    NOT NULL,
    attempt          BIGINT  NOT NULL DEFAULT 0,
    max_attempts     BIGINT  NOT NULL,
    worker           TEXT,
    lease_expires_at BIGINT,
    lease_ms         BIGINT  NOT NULL,
    run              TEXT    NOT NULL,      -- RunSpec as JSON
    created_at       BIGINT NOT NULL,
    triggered_by     TEXT                   -- scheduler node that created it (NULL: the API)
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
    attempt      BIGINT  NOT NULL,
    worker       TEXT    NOT NULL,
    started_at   BIGINT  NOT NULL,
    finished_at  BIGINT,
    outcome      TEXT,
    status_code  BIGINT,
    error        TEXT,
    detail       TEXT,
    PRIMARY KEY (execution_id, attempt)
);

-- One row per logical shard; owner '' and expires_at 0 mean free.
CREATE TABLE shard_leases (
    shard      BIGINT PRIMARY KEY,
    owner      TEXT   NOT NULL,
    epoch      BIGINT NOT NULL,
    expires_at BIGINT NOT NULL
);
INSERT INTO shard_leases (shard, owner, epoch, expires_at)
    SELECT g, '', 0, 0 FROM generate_series(0, 1023) AS g;

-- Processes, by heartbeat. The live schedulers (scheduler_expires_at in the future) share
-- the shards; expires_at is the process's own liveness, whatever its roles.
CREATE TABLE nodes (
    id                   TEXT   PRIMARY KEY,
    instance             TEXT   NOT NULL,          -- the process behind the id
    roles                TEXT   NOT NULL DEFAULT '',
    started_at           BIGINT NOT NULL,
    heartbeat_at         BIGINT NOT NULL,
    expires_at           BIGINT NOT NULL,
    scheduler_expires_at BIGINT NOT NULL DEFAULT 0
);

-- Per-namespace dispatch token buckets (max_dispatch_per_second), shared by every worker.
CREATE TABLE namespace_rates (
    namespace  TEXT PRIMARY KEY,
    tokens     DOUBLE PRECISION NOT NULL,
    updated_at BIGINT NOT NULL
);
CREATE INDEX executions_ns_due ON executions (namespace, due_at) WHERE due_at IS NOT NULL;
