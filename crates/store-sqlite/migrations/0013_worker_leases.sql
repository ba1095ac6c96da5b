-- Worker liveness (docs/guarantees.md, "G4 Failover", "Workers"): one lease per
-- worker process, renewed in one statement however many attempts the worker holds. `epoch`
-- grows with every lease taken (AUTOINCREMENT: never reused, even after the row is deleted),
-- and every attempt records the epoch it was claimed under (`worker_epoch`). A reaper that
-- finds a lease lapsed by the store's clock deletes it and marks that epoch's running attempts
-- lapsed, in one transaction: from then on the worker's renewals, claims, heartbeats and
-- completions under that epoch are refused.
CREATE TABLE worker_leases (
    epoch       INTEGER PRIMARY KEY AUTOINCREMENT,
    worker      TEXT    NOT NULL,   -- the node id
    acquired_at INTEGER NOT NULL,   -- ms since the epoch, UTC, by the store's clock
    renewed_at  INTEGER NOT NULL,
    expires_at  INTEGER NOT NULL
);
ALTER TABLE executions ADD COLUMN worker_epoch INTEGER;
