-- The scheduler's due lookup walks jobs in fire-time order and keeps those of its shards:
-- its cost follows the jobs due within the lookahead, not the stored jobs, and not the
-- 1,024 probes an index led by the shard needed on every pass (BENCHMARKS.md, query plans).
DROP INDEX jobs_due;
CREATE INDEX jobs_due ON jobs (next_fire_at) WHERE next_fire_at IS NOT NULL;
