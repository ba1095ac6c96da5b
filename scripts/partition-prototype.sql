-- A partitioned history, measured before it is built (ARCHITECTURE.md, "History
-- partitions"): 40 daily partitions by the text of a time-ordered id plus a DEFAULT one,
-- 2 M rows, then the plans of the store's two ways of reaching executions by id.
-- Run: psql -h 127.0.0.1 -f scripts/partition-prototype.sql postgres
-- It creates and leaves the database part_x.
DROP DATABASE IF EXISTS part_x;
CREATE DATABASE part_x;
\c part_x
CREATE TABLE ex (id text PRIMARY KEY, job_uid text NOT NULL, scheduled_at bigint NOT NULL,
    state text NOT NULL, attempt bigint NOT NULL DEFAULT 0, pad text) PARTITION BY RANGE (id);
-- The leading 12 hex digits of a UUIDv7/v8 are its milliseconds: a day's bounds are the
-- first two groups of the ids at its start and end.
CREATE FUNCTION id_at(ms bigint) RETURNS text LANGUAGE sql IMMUTABLE AS
  $$ SELECT substr(lpad(to_hex(ms), 12, '0'), 1, 8) || '-' || substr(lpad(to_hex(ms), 12, '0'), 9, 4) $$;
DO $$
DECLARE d int; base bigint := 1790000000000; day bigint := 86400000;
BEGIN
  FOR d IN 0..39 LOOP
    EXECUTE format('CREATE TABLE ex_%s PARTITION OF ex FOR VALUES FROM (%L) TO (%L)', d,
                   id_at(base + d * day), id_at(base + (d + 1) * day));
  END LOOP;
  CREATE TABLE ex_kept PARTITION OF ex DEFAULT;
END $$;
INSERT INTO ex (id, job_uid, scheduled_at, state, pad)
SELECT id_at(t) || '-7' || substr(md5(g::text), 1, 3) || '-8' || substr(md5(g::text), 4, 3)
         || '-' || substr(md5(g::text), 7, 12),
       'job' || (g % 10000), t, 'succeeded', repeat('x', 200)
FROM (SELECT g, 1790000000000 + (g::bigint * 86400000 * 40 / 2000000) AS t
      FROM generate_series(0, 1999999) g) s;
ANALYZE ex;
SELECT array_agg(id)::text AS ids20 FROM (SELECT id FROM ex_20 LIMIT 256) s \gset
SELECT array_agg(id)::text AS ids21 FROM (SELECT id FROM ex_21 LIMIT 256) s \gset
-- The completion's shape: an UPDATE joined to UNNEST of 256 ids (run-time pruning, one
-- partition a row), generic and custom plans.
PREPARE upd(text[], bigint[]) AS
  WITH c AS (SELECT * FROM UNNEST($1::text[], $2::bigint[]) AS c(id, attempt)),
  e AS (UPDATE ex x SET state = 'running', attempt = x.attempt + 1 FROM c
        WHERE x.id = c.id AND x.attempt = c.attempt RETURNING x.id)
  SELECT count(*) FROM e;
-- The lookups' shape: id = ANY($1).
PREPARE sel(text[]) AS SELECT count(*) FROM ex WHERE id = ANY($1);
SET plan_cache_mode = force_generic_plan;
EXPLAIN (ANALYZE, COSTS OFF, SUMMARY ON) EXECUTE upd(:'ids20', array_fill(0::bigint, ARRAY[256]));
EXPLAIN (ANALYZE, COSTS OFF, SUMMARY ON) EXECUTE sel(:'ids21');
SET plan_cache_mode = force_custom_plan;
EXPLAIN (ANALYZE, COSTS OFF, SUMMARY ON) EXECUTE sel(:'ids21');
EXPLAIN (ANALYZE, COSTS OFF, SUMMARY ON) EXECUTE upd(:'ids21', array_fill(0::bigint, ARRAY[256]));
-- A default partition forbids a concurrent detach (expected: an ERROR naming it).
ALTER TABLE ex DETACH PARTITION ex_0 CONCURRENTLY;
