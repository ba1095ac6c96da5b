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

/// Runs one conformance check on a fresh database file.
async fn run<F: std::future::Future<Output = ()>>(check: impl FnOnce(Harness) -> F) {
    check(harness()).await;
}

sundial_store::conformance_tests!(run);

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
