-- The plans of the store's statements on the partitioned history (migration 0010;
-- BENCHMARKS.md, "The history partitioned by day"), each under a generic and a custom plan.
-- Run against a database a bench has filled, e.g. after
--   sundial bench steady --rate 1000 --duration 60s --database-url postgres://root@127.0.0.1:5432/bench_r
-- with: psql -h 127.0.0.1 -f scripts/partition-plans.sql bench_r
\pset pager off
SELECT c.relname AS partition, c.reltuples::bigint AS rows_estimated
FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
WHERE i.inhparent = 'executions'::regclass ORDER BY 1;
ANALYZE executions;
ANALYZE attempts;
SELECT array_agg(id) AS ids FROM (SELECT id FROM executions ORDER BY id DESC LIMIT 256) s \gset
SELECT id AS one, namespace AS ns, job AS job FROM executions ORDER BY id DESC LIMIT 1 \gset

-- A lookup by id (execution_get, the claim's re-read, the API).
PREPARE by_id(text) AS SELECT * FROM executions WHERE id = $1;
-- The claim's and the reaper's shape: id = ANY($1).
PREPARE by_any(text[]) AS UPDATE executions SET attempt = attempt WHERE id = ANY($1);
-- The completion's shape: an UPDATE joined to UNNEST.
PREPARE by_join(text[]) AS
  UPDATE executions x SET attempt = x.attempt FROM UNNEST($1::text[]) AS c(id) WHERE x.id = c.id;
-- A job's history page and a namespace's (keyset paging, newest first).
PREPARE job_page(text, text) AS
  SELECT id, scheduled_at FROM executions WHERE namespace = $1 AND job = $2
  ORDER BY scheduled_at DESC, id DESC LIMIT 50;
PREPARE ns_page(text, bigint, text) AS
  SELECT id, scheduled_at FROM executions WHERE namespace = $1 AND (scheduled_at, id) < ($2, $3)
  ORDER BY scheduled_at DESC, id DESC LIMIT 50;
-- An execution's attempts.
PREPARE attempts_of(text) AS SELECT * FROM attempts WHERE execution_id = $1 ORDER BY attempt;

SET plan_cache_mode = force_generic_plan;
EXPLAIN (ANALYZE, COSTS OFF, SUMMARY ON) EXECUTE by_id(:'one');
EXPLAIN (ANALYZE, COSTS OFF, SUMMARY ON) EXECUTE by_any(:'ids');
EXPLAIN (ANALYZE, COSTS OFF, SUMMARY ON) EXECUTE by_join(:'ids');
EXPLAIN (ANALYZE, COSTS OFF, SUMMARY ON) EXECUTE job_page(:'ns', :'job');
EXPLAIN (ANALYZE, COSTS OFF, SUMMARY ON) EXECUTE ns_page(:'ns', 9223372036854775807, '');
EXPLAIN (ANALYZE, COSTS OFF, SUMMARY ON) EXECUTE attempts_of(:'one');
SET plan_cache_mode = force_custom_plan;
EXPLAIN (ANALYZE, COSTS OFF, SUMMARY ON) EXECUTE by_id(:'one');
EXPLAIN (ANALYZE, COSTS OFF, SUMMARY ON) EXECUTE by_any(:'ids');
EXPLAIN (ANALYZE, COSTS OFF, SUMMARY ON) EXECUTE by_join(:'ids');
EXPLAIN (ANALYZE, COSTS OFF, SUMMARY ON) EXECUTE job_page(:'ns', :'job');
