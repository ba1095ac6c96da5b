-- Dead letters and alert events, both kept by triggers on the state column, so that every
-- path that ends an execution or a run (a worker's completion, the reaper, a release that
-- fails a task, a cancel, a run timeout) records them in its own transaction, and no path
-- can forget to.
--
-- dead_letters: one row per execution now in state 'dead' (SPEC §3: re-drive takes it out).
-- It is the index a partial index `WHERE state = 'dead'` on executions would be, without
-- naming `state` in an index of executions: that would make every claim and completion a
-- non-HOT update (0004). Dead letters are few; the count per namespace and the dead-letter
-- listing read this table.
CREATE TABLE dead_letters (
    id           TEXT   PRIMARY KEY,   -- executions.id
    namespace    TEXT   NOT NULL,
    scheduled_at BIGINT NOT NULL
);
CREATE INDEX dead_letters_ns ON dead_letters (namespace, scheduled_at DESC, id DESC);
INSERT INTO dead_letters (id, namespace, scheduled_at)
    SELECT id, namespace, scheduled_at FROM executions WHERE state = 'dead';

-- alert_states: the states some process's `[[alerts]]` names (docs/configuration.md,
-- "alerts"): 'failed', 'dead', 'cancelled' of an execution, 'run_failed', 'run_cancelled' of
-- a run. Each process adds its own at start; with none, no alert event is written.
CREATE TABLE alert_states (
    state TEXT PRIMARY KEY
);

-- alert_events: the outbox of alerts (SPEC §10). A row is written in the transaction that
-- ends the execution or run, and deleted once every matching alert has taken it; a
-- dispatcher holds it under a lease while it delivers (at least once: a dispatcher that dies
-- leaves it to the next once the lease lapses).
CREATE TABLE alert_events (
    seq              BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    kind             TEXT   NOT NULL,             -- 'execution' or 'run'
    id               TEXT   NOT NULL,             -- execution or run id
    state            TEXT   NOT NULL,             -- as alert_states names it
    namespace        TEXT   NOT NULL,
    due_at           BIGINT NOT NULL DEFAULT 0,   -- ms; 0: at once
    lease_expires_at BIGINT,
    attempts         BIGINT NOT NULL DEFAULT 0,   -- delivery rounds so far
    delivered        TEXT   NOT NULL DEFAULT '[]' -- JSON array of the alert names that took it
);
CREATE INDEX alert_events_due ON alert_events (due_at);

CREATE FUNCTION sundial_execution_state_changed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'DELETE' THEN
        DELETE FROM dead_letters WHERE id = OLD.id;
        RETURN NULL;
    END IF;
    IF OLD.state = 'dead' THEN
        DELETE FROM dead_letters WHERE id = OLD.id;
    END IF;
    IF NEW.state = 'dead' THEN
        INSERT INTO dead_letters (id, namespace, scheduled_at)
            VALUES (NEW.id, NEW.namespace, NEW.scheduled_at) ON CONFLICT (id) DO NOTHING;
    END IF;
    IF EXISTS (SELECT 1 FROM alert_states WHERE state = NEW.state) THEN
        INSERT INTO alert_events (kind, id, state, namespace)
            VALUES ('execution', NEW.id, NEW.state, NEW.namespace);
    END IF;
    RETURN NULL;
END $$;

-- The WHEN clauses keep the function out of the ordinary path: a claim (to 'running') and a
-- successful completion never call it.
CREATE TRIGGER executions_state_changed AFTER UPDATE OF state ON executions FOR EACH ROW
    WHEN (OLD.state IS DISTINCT FROM NEW.state
          AND (NEW.state IN ('failed', 'dead', 'cancelled') OR OLD.state = 'dead'))
    EXECUTE FUNCTION sundial_execution_state_changed();
CREATE TRIGGER executions_dead_deleted AFTER DELETE ON executions FOR EACH ROW
    WHEN (OLD.state = 'dead')
    EXECUTE FUNCTION sundial_execution_state_changed();

CREATE FUNCTION sundial_run_state_changed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM alert_states WHERE state = 'run_' || NEW.state) THEN
        INSERT INTO alert_events (kind, id, state, namespace)
            VALUES ('run', NEW.id, 'run_' || NEW.state, NEW.namespace);
    END IF;
    RETURN NULL;
END $$;

CREATE TRIGGER workflow_runs_state_changed AFTER UPDATE OF state ON workflow_runs FOR EACH ROW
    WHEN (OLD.state IS DISTINCT FROM NEW.state AND NEW.state IN ('failed', 'cancelled'))
    EXECUTE FUNCTION sundial_run_state_changed();
