//! The store conformance suite (`sundial_store::testkit`) on the embedded SQLite store, one
//! fresh database file per check.

use std::sync::Arc;

use sundial_clock::{Clock, ManualClock};
use sundial_store::Store;
use sundial_store::testkit::{self, Harness};
use sundial_store_sqlite::SqliteStore;

fn harness() -> Harness {
    Arc::new(|clock: Arc<ManualClock>| {
        Box::pin(async move {
            let dir = tempfile::tempdir().expect("temp dir").keep();
            let url = format!("sqlite://{}", dir.join("sundial.db").display());
            let clock: Arc<dyn Clock> = clock;
            let store: Arc<dyn Store> =
                Arc::new(SqliteStore::open(&url, clock).await.expect("open store"));
            store
        })
    })
}

macro_rules! conformance {
    ($($name:ident),* $(,)?) => {$(
        #[tokio::test]
        async fn $name() {
            testkit::$name(harness()).await;
        }
    )*};
}

conformance!(
    job_writes_are_conditional_on_version,
    job_list_pages_and_filters,
    a_slot_gets_one_execution_however_often_it_is_triggered,
    a_trigger_with_a_stale_epoch_writes_nothing,
    due_jobs_are_listed_by_fire_time,
    executions_are_claimed_once_and_never_early,
    a_stale_completion_is_rejected,
    heartbeats_keep_the_lease,
    cancel_and_redrive_follow_the_state_machine,
    job_writes_steer_pending_executions,
    execution_history_pages_newest_first,
    skip_records_a_slot_due_while_the_job_runs,
    replace_cancels_the_running_execution,
    catch_up_under_skip_runs_one_after_another,
    rate_limited_namespaces_dispatch_at_their_rate,
    late_precreated_slots_follow_the_misfire_policy,
);

#[tokio::test]
async fn a_second_scheduler_on_the_same_file_is_refused() {
    use sundial_core::Dur;
    use sundial_store::{Error, ShardLeaseRequest};
    let dir = tempfile::tempdir().expect("temp dir");
    let url = format!("sqlite://{}", dir.path().join("sundial.db").display());
    let clock: Arc<dyn Clock> = Arc::new(ManualClock::new(testkit::t0()));
    let first = SqliteStore::open(&url, clock.clone()).await.expect("open");
    let second = SqliteStore::open(&url, clock).await.expect("open");
    let request = ShardLeaseRequest {
        node: "a".into(),
        ttl: Dur::from_secs(10),
    };
    let leases = first
        .shard_lease_renew(&request)
        .await
        .expect("first scheduler");
    assert_eq!(leases.len(), 1024);
    match second
        .shard_lease_renew(&ShardLeaseRequest {
            node: "b".into(),
            ..request.clone()
        })
        .await
    {
        Err(Error::InUse(message)) => assert!(message.contains("one scheduler"), "{message}"),
        other => panic!("expected InUse, got {other:?}"),
    }
    // Once the first lets go, the second takes over with a larger epoch.
    first.shard_lease_release("a").await.expect("release");
    let taken = second
        .shard_lease_renew(&ShardLeaseRequest {
            node: "b".into(),
            ..request
        })
        .await
        .expect("takeover");
    assert!(taken[0].epoch > leases[0].epoch);
}
