//! The store conformance suite (`sundial_store::testkit`) on the embedded SQLite store, one
//! fresh database file per store a check opens, in a temporary directory removed when the
//! check ends (a failed one too).

use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use sundial_clock::{Clock, ManualClock};
use sundial_store::prelude::*;
use sundial_store::testkit::{self, Harness};
use sundial_store_sqlite::SqliteStore;

/// The temporary directories of one check and the database file it opened last.
#[derive(Default)]
struct Files {
    dirs: Vec<tempfile::TempDir>,
    last: Option<PathBuf>,
}

async fn open(path: &std::path::Path, clock: Arc<ManualClock>) -> Arc<dyn Store> {
    let url = format!("sqlite://{}", path.display());
    let clock: Arc<dyn Clock> = clock;
    Arc::new(SqliteStore::open(&url, clock).await.expect("open store"))
}

fn harness(files: Arc<Mutex<Files>>) -> Harness {
    let fresh = files.clone();
    Harness::new(
        Arc::new(move |clock: Arc<ManualClock>| {
            let files = fresh.clone();
            Box::pin(async move {
                let dir = tempfile::tempdir().expect("temp dir");
                let path = dir.path().join("sundial.db");
                {
                    let mut files = files.lock().expect("files");
                    files.dirs.push(dir);
                    files.last = Some(path.clone());
                }
                open(&path, clock).await
            })
        }),
        Arc::new(move |clock: Arc<ManualClock>| {
            let files = files.clone();
            Box::pin(async move {
                let path = files.lock().expect("files").last.clone();
                open(&path.expect("a store opened first"), clock).await
            })
        }),
    )
}

/// Runs one conformance check on fresh database files, removed afterwards.
async fn run<F: std::future::Future<Output = ()>>(check: impl FnOnce(Harness) -> F) {
    let files = Arc::new(Mutex::new(Files::default()));
    check(harness(files.clone())).await;
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

/// The load generators' [`sundial_store::bench::BenchStore`] on SQLite.
#[tokio::test]
async fn bench_store_loads_expired_history_that_retention_counts() {
    let dir = tempfile::tempdir().expect("temp dir");
    let url = format!("sqlite://{}", dir.path().join("sundial.db").display());
    let clock: Arc<dyn Clock> = Arc::new(ManualClock::new(testkit::t0()));
    let store = SqliteStore::open(&url, clock).await.expect("open");
    testkit::bench_store_loads_expired_history_that_retention_counts(&store).await;
}
