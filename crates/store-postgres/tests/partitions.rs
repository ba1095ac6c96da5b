//! The history partitioned by day (migration 0010; ARCHITECTURE.md, "History partitions"): a
//! database from before the partitions keeps its history and goes on; the maintenance
//! service makes the days ahead by the store's clock; a slot's execution, its attempts and a
//! run land in the partition of their day; a lookup by id reads one partition; a day whose
//! ids the default partition already holds is left to it.

use std::sync::Arc;

use sqlx::{Connection, PgConnection};
use sundial_clock::{Clock, ManualClock};
use sundial_store::maintenance::{MaintenanceConfig, Service};
use sundial_store::testkit::{complete_ok, first_slots_commit, new_job_writes, t0};
use sundial_store::{ExecutionClaim, Store};
use sundial_store_postgres::testing::TestDatabase;
use sundial_store_postgres::{PARTITION_DAYS_AHEAD, PARTITIONED, PgStore};

/// The store's partition service (`history_partitions`).
fn partition_service(store: &PgStore) -> Arc<dyn Service> {
    store
        .maintenance(&MaintenanceConfig::default())
        .into_iter()
        .find(|s| s.name() == "history_partitions")
        .expect("the PostgreSQL store runs history_partitions")
}

/// The partition each of `ids` of `table` lives in.
async fn partitions_of(url: &str, table: &str, key: &str, ids: &[String]) -> Vec<String> {
    let mut conn = PgConnection::connect(url).await.expect("connect");
    sqlx::query_scalar(&format!(
        "SELECT t.tableoid::regclass::text FROM UNNEST($1::text[]) WITH ORDINALITY AS u(id, i) \
         JOIN {table} t ON t.{key} = u.id ORDER BY u.i"
    ))
    .bind(ids)
    .fetch_all(&mut conn)
    .await
    .expect("partitions")
}

/// Claims and completes everything due; returns the ids completed.
async fn run_everything(store: &PgStore) -> Vec<String> {
    let mut done = Vec::new();
    loop {
        let claimed = store
            .execution_claim(&ExecutionClaim {
                worker: "w1".into(),
                limit: 512,
                rate_limits: Default::default(),
            })
            .await
            .expect("claim");
        if claimed.is_empty() {
            return done;
        }
        let completions: Vec<_> = claimed
            .iter()
            .map(|e| complete_ok(&e.id, e.attempt))
            .collect();
        let applied = store
            .attempt_complete_batch(&completions)
            .await
            .expect("complete");
        assert!(applied.iter().all(|a| *a), "every completion applies");
        done.extend(claimed.into_iter().map(|e| e.id));
    }
}

#[tokio::test]
async fn a_database_from_before_the_partitions_keeps_its_history_and_goes_on() {
    let db = TestDatabase::create("sundial_parts").await;
    // The schema as it was before 0010: the migrations up to 0009, from a copy of them.
    let dir = std::env::temp_dir().join(format!("sundial-0009-{}", db.name()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    for entry in
        std::fs::read_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/migrations")).expect("migrations")
    {
        let path = entry.expect("entry").path();
        let name = path
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or_default();
        if name
            .as_bytes()
            .get(..4)
            .is_some_and(|v| v < b"0010".as_slice())
        {
            std::fs::copy(&path, dir.join(name)).expect("copy");
        }
    }
    let pool = sqlx::PgPool::connect(db.url()).await.expect("connect");
    sqlx::migrate::Migrator::new(dir.as_path())
        .await
        .expect("migrations 0001-0009")
        .run(&pool)
        .await
        .expect("apply 0001-0009");
    std::fs::remove_dir_all(&dir).expect("remove temp dir");
    // A finished execution with its attempt, and a finished run, as the store wrote them then
    // (UUIDv7 ids of 2026-11-01).
    let (execution, run) = (
        "019a3d1c-0000-7000-8000-000000000001",
        "019a3d1c-0000-7000-8000-000000000002",
    );
    sqlx::raw_sql(&format!(
        "INSERT INTO executions (id, namespace, job, job_uid, job_version, shard, trigger, \
           scheduled_at, fire_at, queued_at, state, attempt, max_attempts, lease_ms, run, created_at, \
           started_at, finished_at) \
         VALUES ('{execution}', 'ns', 'old', 'u-old', 1, 7, 'schedule', 1761955200000, 1761955200000, \
           1761955200000, 'succeeded', 1, 3, 30000, '{{}}', 1761955200000, 1761955200000, 1761955201000); \
         INSERT INTO attempts (execution_id, attempt, worker, started_at, finished_at, outcome) \
         VALUES ('{execution}', 1, 'w0', 1761955200000, 1761955201000, 'succeeded'); \
         INSERT INTO workflow_runs (id, namespace, workflow, workflow_uid, workflow_version, shard, \
           trigger, scheduled_at, fire_at, state, params, created_at, finished_at) \
         VALUES ('{run}', 'ns', 'flow', 'w-flow', 1, 7, 'schedule', 1761955200000, 1761955200000, \
           'succeeded', '{{}}', 1761955200000, 1761955201000);"
    ))
    .execute(&pool)
    .await
    .expect("history from before 0010");
    pool.close().await;

    // Opening the store applies 0010; the rows are where they were, and readable.
    let clock: Arc<dyn Clock> = Arc::new(ManualClock::new(t0()));
    let store = PgStore::open(db.url(), Some(clock))
        .await
        .expect("open store");
    let record = store
        .execution_get("ns", execution)
        .await
        .expect("get")
        .expect("the execution from before 0010 is there");
    assert_eq!(record.attempts.len(), 1, "with its attempt");
    assert_eq!(
        partitions_of(db.url(), "executions", "id", &[execution.into()]).await,
        ["executions_before"]
    );
    assert_eq!(
        partitions_of(db.url(), "attempts", "execution_id", &[execution.into()]).await,
        ["attempts_before"]
    );
    assert_eq!(
        partitions_of(db.url(), "workflow_runs", "id", &[run.into()]).await,
        ["workflow_runs_before"]
    );
    // And the store goes on: jobs fire, run and complete on the new layout.
    let jobs = store
        .job_write_batch(&new_job_writes("ns", 5))
        .await
        .expect("jobs");
    let commit = first_slots_commit(&store, "n1", &jobs)
        .await
        .expect("leases");
    let done = store.trigger_commit(&commit).await.expect("trigger");
    assert_eq!(done.executions_inserted, 5);
    // The same slots committed again insert nothing (G1, by the derived ids' primary key).
    let again = first_slots_commit(&store, "n1", &jobs)
        .await
        .expect("leases");
    assert_eq!(
        store
            .trigger_commit(&again)
            .await
            .expect("trigger again")
            .executions_inserted,
        0
    );
    assert_eq!(run_everything(&store).await.len(), 5);
    store.close().await;
}

#[tokio::test]
async fn the_days_ahead_get_partitions_and_history_lands_in_its_day() {
    let db = TestDatabase::create("sundial_parts").await;
    // 2027-01-01: after the first partition's end, whenever this test runs before 2027.
    let clock = Arc::new(ManualClock::new(t0()));
    let dyn_clock: Arc<dyn Clock> = clock.clone();
    let store = PgStore::open(db.url(), Some(dyn_clock))
        .await
        .expect("open store");
    let service = partition_service(&store);
    let days = u64::try_from(PARTITION_DAYS_AHEAD + 1).unwrap_or(0);
    assert_eq!(
        service.run_once().await.expect("pass"),
        days * PARTITIONED.len() as u64,
        "today and the days ahead, for each table"
    );
    assert_eq!(service.run_once().await.expect("pass"), 0, "made once");

    let jobs = store
        .job_write_batch(&new_job_writes("ns", 4))
        .await
        .expect("jobs");
    let commit = first_slots_commit(&store, "n1", &jobs)
        .await
        .expect("leases");
    store.trigger_commit(&commit).await.expect("trigger");
    clock.advance(jiff::SignedDuration::from_secs(60));
    let ids = run_everything(&store).await;
    assert_eq!(ids.len(), 4);
    assert_eq!(
        partitions_of(db.url(), "executions", "id", &ids).await,
        vec!["executions_20270101".to_owned(); 4]
    );
    assert_eq!(
        partitions_of(db.url(), "attempts", "execution_id", &ids).await,
        vec!["attempts_20270101".to_owned(); 4]
    );
    // A lookup by id reads its day's partition and no other.
    let mut conn = PgConnection::connect(db.url()).await.expect("connect");
    let plan: Vec<String> = sqlx::query_scalar(&format!(
        "EXPLAIN (COSTS OFF) SELECT * FROM executions WHERE id = '{}'",
        ids[0]
    ))
    .fetch_all(&mut conn)
    .await
    .expect("explain");
    let plan = plan.join("\n");
    assert!(
        plan.contains("executions_20270101") && !plan.contains("executions_20270102"),
        "one partition read:\n{plan}"
    );
    // A day later, the next day's partition is there already; four days later, the days
    // after it are made.
    clock.advance(jiff::SignedDuration::from_hours(24 * 4));
    assert_eq!(
        service.run_once().await.expect("pass"),
        4 * PARTITIONED.len() as u64
    );
    store.close().await;
}

#[tokio::test]
async fn a_day_whose_ids_the_default_partition_holds_is_left_to_it() {
    let db = TestDatabase::create("sundial_parts").await;
    let clock = Arc::new(ManualClock::new(t0()));
    let dyn_clock: Arc<dyn Clock> = clock.clone();
    let store = PgStore::open(db.url(), Some(dyn_clock))
        .await
        .expect("open store");
    // Executions of 2027-01-01 written before any partition of that day exists.
    let jobs = store
        .job_write_batch(&new_job_writes("ns", 3))
        .await
        .expect("jobs");
    let commit = first_slots_commit(&store, "n1", &jobs)
        .await
        .expect("leases");
    store.trigger_commit(&commit).await.expect("trigger");
    let service = partition_service(&store);
    let days = u64::try_from(PARTITION_DAYS_AHEAD + 1).unwrap_or(0);
    assert_eq!(
        service.run_once().await.expect("pass"),
        days * PARTITIONED.len() as u64 - 1,
        "every day of every table but today's executions"
    );
    clock.advance(jiff::SignedDuration::from_secs(60));
    let ids = run_everything(&store).await;
    assert_eq!(ids.len(), 3, "the default partition's executions run");
    assert_eq!(
        partitions_of(db.url(), "executions", "id", &ids).await,
        vec!["executions_other".to_owned(); 3]
    );
    store.close().await;
}
