//! Plans the hot path must keep on PostgreSQL, checked from the server's own index counters
//! (`pg_stat_user_indexes`) after the store has done the work, on a database whose
//! statistics were never gathered (autovacuum off, as on this machine, or not yet run).

use std::sync::Arc;

use sqlx::Connection;
use sundial_clock::{Clock, ManualClock};
use sundial_store::prelude::*;
use sundial_store::testkit::{claim_and_complete_all, first_slots_commit, new_job_writes, t0};
use sundial_store_postgres::PgStore;
use sundial_store_postgres::testing::TestDatabase;

/// Reads `idx_scan` of each named index (summed over its partitions' indexes when it is
/// the index of a partitioned table), once the counters of the store's finished sessions
/// have reached the server's statistics (each backend flushes them when it exits).
async fn index_scans(url: &str, names: &[&str]) -> Vec<i64> {
    let mut conn = sqlx::PgConnection::connect(url).await.expect("connect");
    for _ in 0..300 {
        let scans: Vec<i64> = sqlx::query_scalar(
            "SELECT coalesce((SELECT sum(s.idx_scan)::bigint FROM pg_partition_tree(n::regclass) t \
               JOIN pg_stat_user_indexes s ON s.indexrelid = t.relid), -1) \
             FROM UNNEST($1::text[]) WITH ORDINALITY AS u(n, i) ORDER BY i",
        )
        .bind(names)
        .fetch_all(&mut conn)
        .await
        .expect("index counters");
        // The first index is one the work must have used: until its count shows, the
        // sessions' counters have not arrived.
        if scans[0] > 0 {
            return scans;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    panic!("the store's index counters never reached pg_stat_user_indexes");
}

/// A batch of job completions finds its executions by primary key, never by walking
/// `executions_time` (0009), whose predicate `run_id IS NULL` the completion's job/task test
/// would match once its parameter is folded into the plan; that walk made a 10,000-job burst
/// six times slower (BENCHMARKS.md, "A partial index the completion must not use").
#[tokio::test]
async fn job_completions_never_walk_the_retention_index() {
    const N: usize = 3000;
    let db = TestDatabase::create("sundial_plans").await;
    let clock = Arc::new(ManualClock::new(t0()));
    let dyn_clock: Arc<dyn Clock> = clock.clone();
    let store = PgStore::open(db.url(), Some(dyn_clock))
        .await
        .expect("open store");
    let jobs = store
        .job_write_batch(&new_job_writes("ns", N))
        .await
        .expect("create jobs");
    let commit = first_slots_commit(&store, "n1", &jobs)
        .await
        .expect("leases");
    let done = store.trigger_commit(&commit).await.expect("trigger");
    assert_eq!(done.executions_inserted as usize, N);
    let completed = claim_and_complete_all(&store).await.len();
    assert_eq!(completed, N);
    // Ending the store's sessions makes each backend flush its counters as it exits.
    store.close().await;
    let scans = index_scans(db.url(), &["executions_pkey", "executions_time"]).await;
    assert_eq!(
        scans[1], 0,
        "executions_time was read {} times on the job path (executions_pkey {} times)",
        scans[1], scans[0]
    );
}
