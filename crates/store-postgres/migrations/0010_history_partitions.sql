-- The history partitioned by day (ARCHITECTURE.md, "History partitions"): executions,
-- attempts and workflow_runs become tables partitioned by range of their id, whose first 48
-- bits are a time in milliseconds (the slot's for an execution or run of a slot, the
-- creation's for a manual one; sundial_core::ids). A day's partition holds the ids of that
-- UTC day, so one day of history is one partition of each table, and the lookups by id
-- keep their primary keys (a key of a partitioned table must contain the partition key).
--
-- What was there becomes each table's first partition, `<table>_before`, for the ids up to
-- the end of the day the migration ran (by the database's clock): nothing is copied (an
-- empty table is dropped instead, so a new database has day partitions only). The
-- maintenance service (`HistoryPartitions`) creates the day partitions after it, ahead of
-- time. `<table>_other` (DEFAULT) takes an id no day partition covers (a catch-up of a slot
-- older than the partitions, a clock far from the database's in tests) so that no insert
-- ever fails for want of a partition.
--
-- G1 (one execution per slot, one run per slot, one execution per run task) is kept by the
-- primary keys: those executions and runs have ids derived from what makes them one
-- (sundial_core::ids), and a second insert of the same id conflicts. The partial unique
-- indexes that kept it before (executions_slot, workflow_runs_slot, executions_run_task)
-- cannot be indexes of a partitioned table (they lack the id); the old rows keep them in
-- `<table>_before`.
--
-- An id's text orders like its bits under any collation that sorts 0-9 before a-f and
-- either compares '-' or ignores it (C, C.UTF-8, the ICU and glibc locales): the hyphens of
-- a UUID's text stand at the same places in every id.

-- The lower bound of the ids of millisecond `ms`: the id's first 12 hex digits.
CREATE FUNCTION sundial_id_bound(ms BIGINT) RETURNS TEXT LANGUAGE sql IMMUTABLE AS $$
    SELECT substr(lpad(to_hex(ms), 12, '0'), 1, 8) || '-' || substr(lpad(to_hex(ms), 12, '0'), 9, 4)
$$;

-- The end of the migration's UTC day, in milliseconds since the epoch.
CREATE FUNCTION sundial_history_first_day_end() RETURNS BIGINT LANGUAGE sql STABLE AS $$
    SELECT (floor(extract(epoch FROM now()) / 86400)::bigint + 1) * 86400000
$$;

-- Creates the partition of `parent` (partitioned by `key`) for the UTC day starting at
-- `day_start` (ms since the epoch, a midnight), named `<parent>_YYYYMMDD`; true when it made
-- one. False when another transaction holds the advisory lock `lock_key` (it is making
-- partitions), when the partition exists already, when the day overlaps another partition
-- (the first, `<parent>_before`), or when the default partition holds ids of that day (they
-- stay there). The attach takes SHARE UPDATE EXCLUSIVE on the parent, which no read or
-- write waits for, and ACCESS EXCLUSIVE on the new table and on the default partition for
-- the scan of the latter's few rows, waiting at most `lock_ms` for them. Called as one
-- statement of its own, so that its locks end with it even if the caller stalls.
CREATE FUNCTION sundial_history_day_create(parent TEXT, key TEXT, day_start BIGINT,
                                           lock_ms INT, lock_key BIGINT)
RETURNS BOOLEAN LANGUAGE plpgsql AS $$
DECLARE
    part TEXT := parent || '_' || to_char(to_timestamp(day_start / 1000) AT TIME ZONE 'UTC', 'YYYYMMDD');
    lo   TEXT := sundial_id_bound(day_start);
    hi   TEXT := sundial_id_bound(day_start + 86400000);
BEGIN
    IF NOT pg_try_advisory_xact_lock(lock_key) OR to_regclass(part) IS NOT NULL THEN
        RETURN FALSE;
    END IF;
    PERFORM set_config('lock_timeout', lock_ms || 'ms', true);
    EXECUTE format('CREATE TABLE %I (LIKE %I INCLUDING DEFAULTS INCLUDING STORAGE)%s', part, parent,
                   CASE WHEN parent = 'executions' THEN ' WITH (fillfactor = 50)' ELSE '' END);
    -- Proves the bounds, so the attach does not scan the (empty) table.
    EXECUTE format('ALTER TABLE %I ADD CONSTRAINT %I CHECK (%I >= %L AND %I < %L)',
                   part, part || '_bounds', key, lo, key, hi);
    EXECUTE format('ALTER TABLE %I ATTACH PARTITION %I FOR VALUES FROM (%L) TO (%L)',
                   parent, part, lo, hi);
    RETURN TRUE;
EXCEPTION
    -- 42P17: the day overlaps a partition; 23514: the default partition holds ids of the
    -- day; 42P07 and 23505: another process made the same partition first.
    WHEN invalid_object_definition OR check_violation OR duplicate_table OR unique_violation THEN
        RETURN FALSE;
END $$;

-- Detaches the day partitions of the UTC day starting at `day_start` (executions, attempts
-- and, when it has one, workflow_runs), keeping the executions and runs of history_drop_kept
-- (retention's survivors, found before) and whatever of the day is still unfinished now,
-- which it adds: they are inserted back through the parents, where the default partitions
-- take them. Deletes the day's other dead letters (a dropped table fires no DELETE trigger)
-- and marks the day detached; the caller drops the detached tables next, each in a statement
-- of its own. Takes ACCESS EXCLUSIVE on the three parents, waiting at most `lock_ms`, and
-- reads the day only through indexes (the queue's, the unfinished runs'), so it holds them
-- for milliseconds; called as one statement of its own, so that the locks end with it even
-- if the caller stalls.
CREATE FUNCTION sundial_history_day_drop(day_start BIGINT, lock_ms INT) RETURNS VOID
LANGUAGE plpgsql AS $$
DECLARE
    day      TEXT := to_char(to_timestamp(day_start / 1000) AT TIME ZONE 'UTC', 'YYYYMMDD');
    lo       TEXT := sundial_id_bound(day_start);
    hi       TEXT := sundial_id_bound(day_start + 86400000);
    e        TEXT := 'executions_' || day;
    a        TEXT := 'attempts_' || day;
    r        TEXT := 'workflow_runs_' || day;
    has_runs BOOLEAN := to_regclass('workflow_runs_' || day) IS NOT NULL;
    open_runs TEXT[] := '{}';
    kept      TEXT[];
    kept_runs TEXT[];
BEGIN
    PERFORM set_config('lock_timeout', lock_ms || 'ms', true);
    LOCK TABLE executions, attempts, workflow_runs IN ACCESS EXCLUSIVE MODE;
    kept := ARRAY(SELECT k.id FROM history_drop_kept k
                  WHERE k.day_start = sundial_history_day_drop.day_start AND NOT k.is_run);
    kept_runs := ARRAY(SELECT k.id FROM history_drop_kept k
                       WHERE k.day_start = sundial_history_day_drop.day_start AND k.is_run);
    IF has_runs THEN
        EXECUTE format('SELECT coalesce(array_agg(id), ''{}'') FROM %I '
                       'WHERE state IN (''scheduled'', ''running'')', r) INTO open_runs;
        kept_runs := kept_runs || open_runs;
        EXECUTE format('SELECT $1 || coalesce(array_agg(id), ''{}'') FROM %I WHERE run_id = ANY($2)', e)
            INTO kept USING kept, open_runs;
    END IF;
    kept := kept || ARRAY(SELECT q.id FROM execution_queue q WHERE q.id >= lo AND q.id < hi);
    EXECUTE format('ALTER TABLE executions DETACH PARTITION %I', e);
    EXECUTE format('ALTER TABLE attempts DETACH PARTITION %I', a);
    EXECUTE format('INSERT INTO executions SELECT * FROM %I WHERE id = ANY($1)', e) USING kept;
    EXECUTE format('INSERT INTO attempts SELECT * FROM %I WHERE execution_id = ANY($1)', a) USING kept;
    IF has_runs THEN
        EXECUTE format('ALTER TABLE workflow_runs DETACH PARTITION %I', r);
        EXECUTE format('INSERT INTO workflow_runs SELECT * FROM %I WHERE id = ANY($1)', r) USING kept_runs;
    END IF;
    DELETE FROM dead_letters d WHERE d.id >= lo AND d.id < hi AND NOT (d.id = ANY(kept));
    UPDATE history_drops h SET detached = true WHERE h.day_start = sundial_history_day_drop.day_start;
END $$;

-- executions -------------------------------------------------------------------------------
DROP TRIGGER executions_state_changed ON executions;
DROP TRIGGER executions_dead_deleted ON executions;
ALTER TABLE executions RENAME TO executions_before;
ALTER INDEX executions_pkey RENAME TO executions_before_pkey;
ALTER INDEX executions_job RENAME TO executions_before_job;
ALTER INDEX executions_ns RENAME TO executions_before_ns;
ALTER INDEX executions_time RENAME TO executions_before_time;
ALTER INDEX executions_slot RENAME TO executions_before_slot;
ALTER INDEX executions_run_task RENAME TO executions_before_run_task;

CREATE TABLE executions (LIKE executions_before INCLUDING DEFAULTS INCLUDING STORAGE)
    PARTITION BY RANGE (id);
ALTER TABLE executions ADD CONSTRAINT executions_pkey PRIMARY KEY (id);
CREATE INDEX executions_job ON executions (namespace, job, scheduled_at DESC, id DESC);
CREATE INDEX executions_ns ON executions (namespace, scheduled_at DESC, id DESC);
CREATE INDEX executions_time ON executions (scheduled_at, id) WHERE run_id IS NULL;
-- A run's tasks (the release reads them); unique per run by the derived task ids.
CREATE INDEX executions_run_task ON executions (run_id, task) WHERE run_id IS NOT NULL;

DO $$ BEGIN
    IF EXISTS (SELECT 1 FROM executions_before) THEN
        EXECUTE format('ALTER TABLE executions ATTACH PARTITION executions_before '
                       'FOR VALUES FROM (MINVALUE) TO (%L)',
                       sundial_id_bound(sundial_history_first_day_end()));
    ELSE
        DROP TABLE executions_before;
    END IF;
END $$;
CREATE TABLE executions_other PARTITION OF executions DEFAULT WITH (fillfactor = 50);

CREATE TRIGGER executions_state_changed AFTER UPDATE OF state ON executions FOR EACH ROW
    WHEN (OLD.state IS DISTINCT FROM NEW.state
          AND (NEW.state IN ('failed', 'dead', 'cancelled') OR OLD.state = 'dead'))
    EXECUTE FUNCTION sundial_execution_state_changed();
CREATE TRIGGER executions_dead_deleted AFTER DELETE ON executions FOR EACH ROW
    WHEN (OLD.state = 'dead')
    EXECUTE FUNCTION sundial_execution_state_changed();

-- attempts ---------------------------------------------------------------------------------
ALTER TABLE attempts RENAME TO attempts_before;
ALTER INDEX attempts_pkey RENAME TO attempts_before_pkey;
CREATE TABLE attempts (LIKE attempts_before INCLUDING DEFAULTS INCLUDING STORAGE)
    PARTITION BY RANGE (execution_id);
ALTER TABLE attempts ADD CONSTRAINT attempts_pkey PRIMARY KEY (execution_id, attempt);
DO $$ BEGIN
    IF EXISTS (SELECT 1 FROM attempts_before) THEN
        EXECUTE format('ALTER TABLE attempts ATTACH PARTITION attempts_before '
                       'FOR VALUES FROM (MINVALUE) TO (%L)',
                       sundial_id_bound(sundial_history_first_day_end()));
    ELSE
        DROP TABLE attempts_before;
    END IF;
END $$;
CREATE TABLE attempts_other PARTITION OF attempts DEFAULT;

-- workflow_runs ----------------------------------------------------------------------------
DROP TRIGGER workflow_runs_state_changed ON workflow_runs;
ALTER TABLE workflow_runs RENAME TO workflow_runs_before;
ALTER INDEX workflow_runs_pkey RENAME TO workflow_runs_before_pkey;
ALTER INDEX workflow_runs_slot RENAME TO workflow_runs_before_slot;
ALTER INDEX workflow_runs_history RENAME TO workflow_runs_before_history;
ALTER INDEX workflow_runs_ns RENAME TO workflow_runs_before_ns;
ALTER INDEX workflow_runs_unfinished RENAME TO workflow_runs_before_unfinished;
ALTER INDEX workflow_runs_timeout RENAME TO workflow_runs_before_timeout;
ALTER INDEX workflow_runs_time RENAME TO workflow_runs_before_time;

CREATE TABLE workflow_runs (LIKE workflow_runs_before INCLUDING DEFAULTS INCLUDING STORAGE)
    PARTITION BY RANGE (id);
ALTER TABLE workflow_runs ADD CONSTRAINT workflow_runs_pkey PRIMARY KEY (id);
CREATE INDEX workflow_runs_history ON workflow_runs (namespace, workflow, scheduled_at DESC, id DESC);
CREATE INDEX workflow_runs_ns ON workflow_runs (namespace, scheduled_at DESC, id DESC);
CREATE INDEX workflow_runs_unfinished ON workflow_runs (workflow_uid)
    WHERE state IN ('scheduled', 'running');
CREATE INDEX workflow_runs_timeout ON workflow_runs (timeout_at) WHERE timeout_at IS NOT NULL;
CREATE INDEX workflow_runs_time ON workflow_runs (scheduled_at, id);
DO $$ BEGIN
    IF EXISTS (SELECT 1 FROM workflow_runs_before) THEN
        EXECUTE format('ALTER TABLE workflow_runs ATTACH PARTITION workflow_runs_before '
                       'FOR VALUES FROM (MINVALUE) TO (%L)',
                       sundial_id_bound(sundial_history_first_day_end()));
    ELSE
        DROP TABLE workflow_runs_before;
    END IF;
END $$;
CREATE TABLE workflow_runs_other PARTITION OF workflow_runs DEFAULT;

CREATE TRIGGER workflow_runs_state_changed AFTER UPDATE OF state ON workflow_runs FOR EACH ROW
    WHEN (OLD.state IS DISTINCT FROM NEW.state AND NEW.state IN ('failed', 'cancelled'))
    EXECUTE FUNCTION sundial_run_state_changed();

-- The day whose partitions retention is dropping (retention.rs, `drop_step`), one at a time:
-- while a day is listed, nothing re-opens a finished execution or run of it (a re-drive, a
-- retry from failure), so the survivors its scan finds are all there are. The scan goes a
-- chunk a call, by id, runs first: `scanned_to` is the last id read, `owner` the process
-- scanning (taken over once `started_at` is a minute old).
CREATE TABLE history_drops (
    day_start  BIGINT  PRIMARY KEY,   -- ms since the epoch, a UTC midnight
    started_at BIGINT  NOT NULL,      -- ms; the owner's last step
    owner      TEXT    NOT NULL,
    runs_done  BOOLEAN NOT NULL DEFAULT false,
    scanned_to TEXT    NOT NULL DEFAULT '',
    -- What the scan found expired, for the report.
    expired_executions BIGINT NOT NULL DEFAULT 0,
    expired_tasks      BIGINT NOT NULL DEFAULT 0,
    expired_runs       BIGINT NOT NULL DEFAULT 0,
    -- The day's partitions are detached (their tables are dropped next, apart, so that the
    -- removal of their files holds no lock of the parents).
    detached   BOOLEAN NOT NULL DEFAULT false
);
-- The survivors found so far: executions (is_run false) and runs of the day being dropped.
CREATE TABLE history_drop_kept (
    day_start BIGINT  NOT NULL,
    is_run    BOOLEAN NOT NULL,
    id        TEXT    NOT NULL,
    PRIMARY KEY (day_start, is_run, id)
);
