-- Worker liveness (docs/guarantees.md, "G4 Failover", "Workers"): one lease per
-- worker process, renewed in one statement however many attempts the worker holds. `epoch`
-- grows with every lease taken (a process that lost its lease takes a new one), and every
-- attempt records the epoch it was claimed under (`worker_epoch`, on the execution and on its
-- queue row while it runs). A reaper that finds a lease lapsed by the store's clock deletes it
-- and marks that epoch's running attempts lapsed, in one transaction: from then on the
-- worker's renewals, claims, heartbeats and completions under that epoch are refused.
CREATE TABLE worker_leases (
    epoch       BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    worker      TEXT   NOT NULL,   -- the node id
    acquired_at BIGINT NOT NULL,   -- ms since the epoch, UTC, by the store's clock
    renewed_at  BIGINT NOT NULL,
    expires_at  BIGINT NOT NULL
);
CREATE INDEX worker_leases_expiry ON worker_leases (expires_at);
-- No index on either new column: an update of executions keeps the claim and completion HOT,
-- and the queue rows of a lapsed epoch are looked for only when a lease was reaped.
ALTER TABLE executions ADD COLUMN worker_epoch BIGINT;
ALTER TABLE execution_queue ADD COLUMN worker_epoch BIGINT;
