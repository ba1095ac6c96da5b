-- The work queue moves out of the history into a narrow table (BENCHMARKS.md, "where the
-- time goes"). An execution has a row in execution_queue exactly while it is not finished:
-- due_at is set while it waits for a worker (claimable once due_at <= now), and
-- lease_expires_at while an attempt runs. Both columns stay on executions too, equal to the
-- queue row's, for readers.
--
-- Why: every index of executions that named due_at, lease_expires_at or state made the claim
-- and the completion non-HOT updates, each writing a new entry in all nine indexes. Without
-- them the two updates of an execution row are HOT (no index writes; fillfactor leaves room
-- on the page), and the queue's own writes touch a row of five short columns.
--
-- Lock order, to keep claims from deadlocking with cancels and completions: writers lock the
-- executions row before its queue row; the claim locks both in that order with SKIP LOCKED,
-- so it never waits and never holds a queue row without its execution row.
CREATE TABLE execution_queue (
    id               TEXT   PRIMARY KEY,   -- executions.id
    namespace        TEXT   NOT NULL,
    job_uid          TEXT   NOT NULL,
    due_at           BIGINT,
    lease_expires_at BIGINT
);
INSERT INTO execution_queue (id, namespace, job_uid, due_at, lease_expires_at)
    SELECT id, namespace, job_uid, due_at, CASE WHEN state = 'running' THEN lease_expires_at END
    FROM executions WHERE due_at IS NOT NULL OR state = 'running';
-- Vacuum leaves the emptied pages in place: truncating them would take an exclusive lock
-- that stalls claims (worker processes vacuum this table every 10 s).
ALTER TABLE execution_queue SET (vacuum_truncate = false);
CREATE INDEX execution_queue_due ON execution_queue (due_at) WHERE due_at IS NOT NULL;
CREATE INDEX execution_queue_ns_due ON execution_queue (namespace, due_at) WHERE due_at IS NOT NULL;
CREATE INDEX execution_queue_job ON execution_queue (job_uid);
CREATE INDEX execution_queue_lease ON execution_queue (lease_expires_at)
    WHERE lease_expires_at IS NOT NULL;

DROP INDEX executions_due;
DROP INDEX executions_pending;
DROP INDEX executions_lease;
DROP INDEX executions_ns_due;
-- Room on each page for the claim's and the completion's new row versions (HOT updates).
ALTER TABLE executions SET (fillfactor = 50);
