-- Backfills (docs/time.md, "Backfill"; SPEC §11): one row each, holding the range, the rate
-- and the progress. The scheduler holding `shard`'s lease drives a running one; each step
-- moves `cursor_at` and the counts in the transaction that creates its executions or runs.
CREATE TABLE backfills (
    id             TEXT    PRIMARY KEY,   -- UUIDv7
    namespace      TEXT    NOT NULL,
    of             TEXT    NOT NULL,      -- 'job' | 'workflow'
    name           TEXT    NOT NULL,
    uid            TEXT    NOT NULL,      -- the incarnation filled
    shard          BIGINT  NOT NULL,
    from_at        BIGINT  NOT NULL,      -- ms since the epoch, inclusive
    to_at          BIGINT  NOT NULL,      -- ms since the epoch, exclusive
    max_per_second BIGINT  NOT NULL,
    state          TEXT    NOT NULL,      -- 'running' | 'done' | 'cancelled'
    slots          BIGINT  NOT NULL,      -- slots of the range at creation
    created        BIGINT  NOT NULL DEFAULT 0,
    existing       BIGINT  NOT NULL DEFAULT 0,
    cursor_at      BIGINT  NOT NULL,      -- every slot before it is dealt with
    last_id        TEXT,                  -- the last execution or run created
    reason         TEXT,
    created_at     BIGINT  NOT NULL,
    updated_at     BIGINT  NOT NULL,
    finished_at    BIGINT
);
-- The drivers' read: only running backfills, by shard.
CREATE INDEX backfills_running ON backfills (shard) WHERE state = 'running';
-- A job's or workflow's backfills, newest first.
CREATE INDEX backfills_of ON backfills (namespace, of, name, created_at DESC);
