//! The history partitioned by day (migration 0010; ARCHITECTURE.md, "History partitions"): a
//! database from before the partitions keeps its history and goes on; the maintenance
//! service makes the days ahead by the store's clock; a slot's execution, its attempts and a
//! run land in the partition of their day; a lookup by id reads one partition; a day whose
//! ids the default partition already holds is left to it.

use std::sync::Arc;

use sqlx::{Connection, PgConnection};
use sundial_clock::{Clock, ManualClock};
use sundial_store::maintenance::{MaintenanceConfig, Service};
use sundial_store::prelude::*;
use sundial_store::testkit::{
    claim_and_complete_all, create_workflow, first_slots_commit, manual_run, new_job_writes, t0,
};
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

/// A store on `db` whose clock stands at `t0()` (2027-01-01, after the first partition's end
/// whenever this runs before 2027).
async fn open_at_t0(db: &TestDatabase) -> (Arc<ManualClock>, PgStore) {
    let clock = Arc::new(ManualClock::new(t0()));
    let dyn_clock: Arc<dyn Clock> = clock.clone();
    let store = PgStore::open(db.url(), Some(dyn_clock))
        .await
        .expect("open store");
    (clock, store)
}

/// `n` jobs of namespace `ns`, the first slot of each of `fire` of them triggered.
async fn jobs_fired(
    store: &PgStore,
    n: usize,
    fire: std::ops::Range<usize>,
) -> Vec<sundial_store::JobRecord> {
    let jobs = store
        .job_write_batch(&new_job_writes("ns", n))
        .await
        .expect("jobs");
    let commit = first_slots_commit(store, "n1", &jobs[fire])
        .await
        .expect("leases");
    store.trigger_commit(&commit).await.expect("trigger");
    jobs
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
    assert_eq!(claim_and_complete_all(&store).await.len(), 5);
    store.close().await;
}

#[tokio::test]
async fn the_days_ahead_get_partitions_and_history_lands_in_its_day() {
    let db = TestDatabase::create("sundial_parts").await;
    // 2027-01-01: after the first partition's end, whenever this test runs before 2027.
    let (clock, store) = open_at_t0(&db).await;
    let service = partition_service(&store);
    let days = u64::try_from(PARTITION_DAYS_AHEAD + 1).unwrap_or(0);
    assert_eq!(
        service.run_once().await.expect("pass"),
        days * PARTITIONED.len() as u64,
        "today and the days ahead, for each table"
    );
    assert_eq!(service.run_once().await.expect("pass"), 0, "made once");

    jobs_fired(&store, 4, 0..4).await;
    clock.advance(jiff::SignedDuration::from_secs(60));
    let ids = claim_and_complete_all(&store).await;
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
    let (clock, store) = open_at_t0(&db).await;
    // Executions of 2027-01-01 written before any partition of that day exists.
    jobs_fired(&store, 3, 0..3).await;
    let service = partition_service(&store);
    let days = u64::try_from(PARTITION_DAYS_AHEAD + 1).unwrap_or(0);
    assert_eq!(
        service.run_once().await.expect("pass"),
        days * PARTITIONED.len() as u64 - 1,
        "every day of every table but today's executions"
    );
    clock.advance(jiff::SignedDuration::from_secs(60));
    let ids = claim_and_complete_all(&store).await;
    assert_eq!(ids.len(), 3, "the default partition's executions run");
    assert_eq!(
        partitions_of(db.url(), "executions", "id", &ids).await,
        vec!["executions_other".to_owned(); 3]
    );
    store.close().await;
}

/// Where `id` of `table` lives, or `None` when it is gone.
async fn partition_of(url: &str, table: &str, id: &str) -> Option<String> {
    let mut conn = PgConnection::connect(url).await.expect("connect");
    sqlx::query_scalar(&format!(
        "SELECT tableoid::regclass::text FROM {table} WHERE id = $1"
    ))
    .bind(id)
    .fetch_optional(&mut conn)
    .await
    .expect("partition")
}

/// Runs `sql` on the database at `url`.
async fn exec(url: &str, sql: &str) {
    let mut conn = PgConnection::connect(url).await.expect("connect");
    sqlx::raw_sql(sql).execute(&mut conn).await.expect(sql);
}

#[tokio::test]
async fn an_expired_day_is_dropped_whole_keeping_what_retention_keeps() {
    let db = TestDatabase::create("sundial_parts").await;
    let (clock, store) = open_at_t0(&db).await;
    partition_service(&store).run_once().await.expect("pass");
    // Four jobs fire on 2027-01-01; three run to the end, the fourth's slot is left due.
    let jobs = jobs_fired(&store, 4, 0..3).await;
    clock.advance(jiff::SignedDuration::from_secs(60));
    let finished = claim_and_complete_all(&store).await;
    assert_eq!(finished.len(), 3);
    // Two runs of a workflow on the same day, both finished: the second is its last.
    let wf = create_workflow(
        &store,
        "flow",
        serde_json::json!({"tasks": [{"name": "a", "target": {"type": "http", "url": "http://127.0.0.1:9/a"}}]}),
    )
    .await;
    let mut runs = Vec::new();
    for slot in [t0(), t0() + jiff::SignedDuration::from_secs(10)] {
        let run = store
            .run_create(&sundial_store::NewRun {
                id: sundial_core::ids::slot_run_id(&wf.uid, slot),
                trigger: sundial_core::execution::Trigger::Schedule,
                ..manual_run(&wf, slot, serde_json::json!({}))
            })
            .await
            .expect("run");
        runs.push(run.id);
    }
    assert_eq!(
        claim_and_complete_all(&store).await.len(),
        2,
        "the runs' tasks"
    );
    let commit = first_slots_commit(&store, "n1", &jobs[3..])
        .await
        .expect("leases");
    store.trigger_commit(&commit).await.expect("trigger");
    let unfinished = sundial_core::ids::slot_execution_id(&jobs[3].uid, t0());
    // The third job's execution ended dead, and the job was deleted: it has no last
    // execution to keep, and its dead letter goes with it.
    let deleted = finished
        .iter()
        .find(|id| **id == sundial_core::ids::slot_execution_id(&jobs[2].uid, t0()))
        .expect("the third job's execution")
        .clone();
    exec(
        db.url(),
        &format!("UPDATE executions SET state = 'dead' WHERE id = '{deleted}'"),
    )
    .await;
    store
        .job_delete("ns", &jobs[2].spec.name, None)
        .await
        .expect("delete job");

    // Forty days on, retention (30 days) starts a walk.
    clock.advance(jiff::SignedDuration::from_hours(24 * 40));
    partition_service(&store).run_once().await.expect("pass");
    // The walk's calls, as the retention service makes them, until it is over.
    let (mut pruned, mut after, mut calls) = (sundial_store::HistoryPruned::default(), None, 0);
    loop {
        let step = store
            .history_prune(&sundial_store::HistoryPrune {
                kind: sundial_store::HistoryKind::Executions,
                before: clock.now() - jiff::SignedDuration::from_hours(24 * 30),
                limit: 1,
                after,
                dry_run: false,
            })
            .await
            .expect("prune");
        pruned.deleted += step.deleted;
        pruned.task_executions += step.task_executions;
        calls += 1;
        after = step.next;
        if after.is_none() || calls == 100 {
            break;
        }
    }
    assert!(
        calls > 2,
        "the day is scanned a chunk a call ({calls} calls)"
    );
    assert_eq!(pruned.deleted, 1, "the deleted job's execution");
    assert_eq!(pruned.task_executions, 1, "the first run's task");
    assert_eq!(
        partition_of(db.url(), "workflow_runs", &runs[0]).await,
        None
    );
    assert_eq!(
        partition_of(db.url(), "workflow_runs", &runs[1])
            .await
            .as_deref(),
        Some("workflow_runs_other"),
        "the workflow's last run is kept"
    );
    let kept_run = store
        .run_get("ns", &runs[1])
        .await
        .expect("get run")
        .expect("kept");
    assert_eq!(kept_run.tasks.len(), 1, "with its task");
    assert_eq!(
        partition_of(db.url(), "executions", &deleted).await,
        None,
        "dropped"
    );
    let mut conn = PgConnection::connect(db.url()).await.expect("connect");
    let (day, dead_letters): (Option<String>, i64) = sqlx::query_as(
        "SELECT to_regclass('executions_20270101')::text, (SELECT count(*) FROM dead_letters)",
    )
    .fetch_one(&mut conn)
    .await
    .expect("read");
    assert_eq!(day, None, "the day's partition is gone");
    assert_eq!(
        dead_letters, 0,
        "the dropped execution's dead letter with it"
    );
    // Each remaining job's last execution, and the one still due, are kept with their
    // attempts, in the default partition.
    for id in finished.iter().filter(|id| **id != deleted) {
        assert_eq!(
            partition_of(db.url(), "executions", id).await.as_deref(),
            Some("executions_other")
        );
        let record = store
            .execution_get("ns", id)
            .await
            .expect("get")
            .expect("kept");
        assert_eq!(record.attempts.len(), 1, "with its attempt");
    }
    assert_eq!(
        partition_of(db.url(), "executions", &unfinished)
            .await
            .as_deref(),
        Some("executions_other")
    );
    // Still in the queue: the next claim judges it (forty days late, a misfire).
    claim_and_complete_all(&store).await;
    let record = store
        .execution_get("ns", &unfinished)
        .await
        .expect("get")
        .expect("kept");
    assert!(
        record.state.is_terminal(),
        "claimed and judged: {:?}",
        record.state
    );
    store.close().await;
}

#[tokio::test]
async fn nothing_of_a_day_being_dropped_is_re_opened() {
    let db = TestDatabase::create("sundial_parts").await;
    let (clock, store) = open_at_t0(&db).await;
    partition_service(&store).run_once().await.expect("pass");
    jobs_fired(&store, 1, 0..1).await;
    clock.advance(jiff::SignedDuration::from_secs(60));
    let id = claim_and_complete_all(&store).await.remove(0);
    exec(
        db.url(),
        &format!("UPDATE executions SET state = 'dead' WHERE id = '{id}'"),
    )
    .await;
    exec(
        db.url(),
        &format!(
            "INSERT INTO history_drops (day_start, started_at, owner) VALUES ({}, 0, 'test')",
            t0().as_millisecond()
        ),
    )
    .await;
    match store.execution_redrive("ns", &id, 1).await {
        Err(sundial_store::Error::Conflict(why)) => {
            assert!(why.contains("2027-01-01"), "{why}")
        }
        other => panic!("a re-drive during the drop: {other:?}"),
    }
    exec(db.url(), "DELETE FROM history_drops").await;
    store
        .execution_redrive("ns", &id, 1)
        .await
        .expect("re-drive once the drop is over");
    store.close().await;
}
