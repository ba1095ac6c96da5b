-- Dead letters and alert events, kept by triggers on the state column as on the shared store
-- (its 0008 says why): every path that ends an execution or a run records them in its own
-- transaction.
CREATE TABLE dead_letters (
    id           TEXT    PRIMARY KEY,   -- executions.id
    namespace    TEXT    NOT NULL,
    scheduled_at INTEGER NOT NULL
) WITHOUT ROWID;
CREATE INDEX dead_letters_ns ON dead_letters (namespace, scheduled_at DESC, id DESC);
INSERT INTO dead_letters (id, namespace, scheduled_at)
    SELECT id, namespace, scheduled_at FROM executions WHERE state = 'dead';

-- The states some process's `[[alerts]]` names; with none, no alert event is written.
CREATE TABLE alert_states (
    state TEXT PRIMARY KEY
) WITHOUT ROWID;

-- The outbox of alerts (SPEC §10): written in the transaction that ends the execution or run,
-- deleted once every matching alert has taken it, held under a lease while delivered.
CREATE TABLE alert_events (
    seq              INTEGER PRIMARY KEY AUTOINCREMENT,
    kind             TEXT    NOT NULL,             -- 'execution' or 'run'
    id               TEXT    NOT NULL,             -- execution or run id
    state            TEXT    NOT NULL,             -- as alert_states names it
    namespace        TEXT    NOT NULL,
    due_at           INTEGER NOT NULL DEFAULT 0,   -- ms; 0: at once
    lease_expires_at INTEGER,
    attempts         INTEGER NOT NULL DEFAULT 0,   -- delivery rounds so far
    delivered        TEXT    NOT NULL DEFAULT '[]' -- JSON array of the alert names that took it
);
CREATE INDEX alert_events_due ON alert_events (due_at);

CREATE TRIGGER executions_dead_in AFTER UPDATE OF state ON executions
    WHEN NEW.state = 'dead' AND OLD.state <> 'dead'
BEGIN
    INSERT OR IGNORE INTO dead_letters (id, namespace, scheduled_at)
        VALUES (NEW.id, NEW.namespace, NEW.scheduled_at);
END;
CREATE TRIGGER executions_dead_out AFTER UPDATE OF state ON executions
    WHEN OLD.state = 'dead' AND NEW.state <> 'dead'
BEGIN
    DELETE FROM dead_letters WHERE id = OLD.id;
END;
CREATE TRIGGER executions_dead_deleted AFTER DELETE ON executions
    WHEN OLD.state = 'dead'
BEGIN
    DELETE FROM dead_letters WHERE id = OLD.id;
END;
CREATE TRIGGER executions_alert AFTER UPDATE OF state ON executions
    WHEN NEW.state <> OLD.state AND NEW.state IN ('failed', 'dead', 'cancelled')
         AND EXISTS (SELECT 1 FROM alert_states WHERE state = NEW.state)
BEGIN
    INSERT INTO alert_events (kind, id, state, namespace)
        VALUES ('execution', NEW.id, NEW.state, NEW.namespace);
END;
CREATE TRIGGER workflow_runs_alert AFTER UPDATE OF state ON workflow_runs
    WHEN NEW.state <> OLD.state AND NEW.state IN ('failed', 'cancelled')
         AND EXISTS (SELECT 1 FROM alert_states WHERE state = 'run_' || NEW.state)
BEGIN
    INSERT INTO alert_events (kind, id, state, namespace)
        VALUES ('run', NEW.id, 'run_' || NEW.state, NEW.namespace);
END;
