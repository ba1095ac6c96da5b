//! The store conformance suite (`sundial_store::testkit`) on PostgreSQL: each store a check
//! opens in its own freshly created database ([`TestDatabase`]), dropped when the check ends
//! (a failed one too). The server is `SUNDIAL_TEST_DATABASE_URL` (default
//! `postgres://root@127.0.0.1:5432/postgres`, the machine's local PostgreSQL).

use std::sync::{Arc, Mutex};

use sqlx::Connection;
use sundial_clock::{Clock, ManualClock};
use sundial_store::Store;
use sundial_store::testkit::{self, Harness};
use sundial_store_postgres::PgStore;
use sundial_store_postgres::testing::TestDatabase;

async fn open(url: &str, clock: Arc<ManualClock>) -> Arc<dyn Store> {
    let clock: Arc<dyn Clock> = clock;
    Arc::new(PgStore::open(url, Some(clock)).await.expect("open store"))
}

/// A harness creating one database per store it opens; `created` holds them, to be checked
/// and dropped.
fn harness(created: Arc<Mutex<Vec<TestDatabase>>>) -> Harness {
    let fresh = created.clone();
    Harness::new(
        Arc::new(move |clock: Arc<ManualClock>| {
            let created = fresh.clone();
            Box::pin(async move {
                let db = TestDatabase::create("sundial_t").await;
                let url = db.url().to_owned();
                created.lock().expect("databases").push(db);
                open(&url, clock).await
            })
        }),
        Arc::new(move |clock: Arc<ManualClock>| {
            let created = created.clone();
            Box::pin(async move {
                let url = created
                    .lock()
                    .expect("databases")
                    .last()
                    .map(|db| db.url().to_owned());
                open(&url.expect("a store opened first"), clock).await
            })
        }),
    )
}

/// Runs one conformance check on freshly created databases, checks the queue invariant of
/// migration 0004 on each, and drops them (when `created` is dropped, after a failure too).
async fn run<F: std::future::Future<Output = ()>>(check: impl FnOnce(Harness) -> F) {
    let created = Arc::new(Mutex::new(Vec::new()));
    check(harness(created.clone())).await;
    let urls: Vec<String> = created
        .lock()
        .expect("databases")
        .iter()
        .map(|db| db.url().to_owned())
        .collect();
    for url in urls {
        assert_queue_mirrors_executions(&url).await;
    }
}

/// `execution_queue` holds a row exactly for each unfinished execution, with the execution's
/// due time, and its lease while an attempt runs (migration 0004).
async fn assert_queue_mirrors_executions(db: &str) {
    let mut conn = sqlx::PgConnection::connect(db)
        .await
        .expect("connect to the test database");
    let wrong: Vec<(Option<String>, Option<String>, Option<String>)> = sqlx::query_as(
        "WITH open AS (SELECT id, due_at, CASE WHEN state = 'running' THEN lease_expires_at END AS lease \
           FROM executions WHERE state IN ('scheduled', 'queued', 'running', 'retry_wait')) \
         SELECT o.id, q.id, e.state FROM open o FULL JOIN execution_queue q ON q.id = o.id \
           LEFT JOIN executions e ON e.id = coalesce(o.id, q.id) \
         WHERE o.id IS NULL OR q.id IS NULL OR o.due_at IS DISTINCT FROM q.due_at \
           OR o.lease IS DISTINCT FROM q.lease_expires_at",
    )
    .fetch_all(&mut conn)
    .await
    .expect("compare execution_queue with executions");
    assert!(
        wrong.is_empty(),
        "execution_queue differs from executions in {db}: (open execution, queue row, state) {wrong:?}"
    );
}

sundial_store::conformance_tests!(run);

#[tokio::test]
async fn live_scheduler_nodes_share_the_shards_and_a_takeover_bumps_the_epoch() {
    use jiff::SignedDuration;
    use sundial_core::Dur;
    use sundial_store::ShardLeaseRequest;
    let created = Arc::new(Mutex::new(Vec::new()));
    let clock = Arc::new(ManualClock::new(testkit::t0()));
    let h = harness(created.clone());
    let store = h.open(clock.clone()).await;
    let req = |node: &str| ShardLeaseRequest {
        node: node.into(),
        ttl: Dur::from_secs(10),
    };
    let a = store.shard_lease_renew(&req("a")).await.unwrap();
    assert_eq!(a.len(), 1024, "a lone node takes every shard");
    let b = store.shard_lease_renew(&req("b")).await.unwrap();
    assert!(b.is_empty(), "nothing is free yet");
    let a = store.shard_lease_renew(&req("a")).await.unwrap();
    assert_eq!(a.len(), 512, "a gives back the excess once b is live");
    let b = store.shard_lease_renew(&req("b")).await.unwrap();
    assert_eq!(b.len(), 512);
    assert!(
        b.iter().all(|l| !a.iter().any(|x| x.shard == l.shard)),
        "no shard has two owners"
    );
    // a stops renewing; after the TTL b takes a's shards with larger epochs.
    clock.advance(SignedDuration::from_secs(11));
    let b2 = store.shard_lease_renew(&req("b")).await.unwrap();
    assert_eq!(b2.len(), 1024);
    for l in &a {
        let now = b2.iter().find(|x| x.shard == l.shard).unwrap();
        assert!(
            now.epoch > l.epoch,
            "shard {} taken over without a new epoch",
            l.shard
        );
    }
}

/// The load generators' [`sundial_store::bench::BenchStore`] on PostgreSQL.
#[tokio::test]
async fn bench_store_loads_expired_history_that_retention_counts() {
    let db = TestDatabase::create("sundial_t").await;
    let clock = Arc::new(ManualClock::new(testkit::t0()));
    let store = PgStore::open(db.url(), Some(clock)).await.expect("open");
    testkit::bench_store_loads_expired_history_that_retention_counts(&store).await;
}
