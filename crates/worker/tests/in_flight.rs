//! The worker's delivery bound, against the embedded store and a real HTTP target: at most
//! `max_in_flight` deliveries at once, every due execution delivered and recorded
//! `succeeded`, and the slots refilled as deliveries end.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use jiff::SignedDuration;
use sundial_clock::ManualClock;
use sundial_core::execution::ExecutionState;
use sundial_store::ExecutionListQuery;
use sundial_store::testkit::{execution, t0};
use sundial_worker::WorkerConfig;

use common::{embedded_store, http_job, run_worker};

/// Counts deliveries, the most running at once, and holds each for 100 ms.
#[derive(Default)]
struct Receiver {
    running: AtomicUsize,
    most: AtomicUsize,
    delivered: AtomicUsize,
}

async fn receive(axum::extract::State(r): axum::extract::State<Arc<Receiver>>) -> &'static str {
    let now = r.running.fetch_add(1, Ordering::SeqCst) + 1;
    r.most.fetch_max(now, Ordering::SeqCst);
    tokio::time::sleep(Duration::from_millis(100)).await;
    r.running.fetch_sub(1, Ordering::SeqCst);
    r.delivered.fetch_add(1, Ordering::SeqCst);
    "ok"
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_runs_at_most_max_in_flight_deliveries_and_completes_every_one() {
    held_deliveries(3, WorkerConfig::new("w1").claim_batch).await;
}

/// A round's claims, side by side, ask together for no more than the free slots: with
/// `claim_batch` 2 and 3 free, a round is a claim of 2 and a claim of 1.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claims_side_by_side_never_take_more_than_the_free_slots() {
    held_deliveries(3, 2).await;
}

/// Twelve due executions through a worker of `max_in_flight` slots claiming `claim_batch` at
/// a time, each delivery held 100 ms: every one is delivered and recorded `succeeded`, never
/// more than `max_in_flight` at once, and some side by side.
async fn held_deliveries(max_in_flight: usize, claim_batch: u32) {
    let receiver = Arc::new(Receiver::default());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    let app = axum::Router::new()
        .route("/", axum::routing::post(receive))
        .with_state(receiver.clone());
    tokio::spawn(async move { axum::serve(listener, app).await });

    let dir = tempfile::tempdir().expect("tempdir");
    let clock = Arc::new(ManualClock::new(t0()));
    let store = embedded_store(dir.path(), clock.clone()).await;
    let job = http_job(&*store, "held", format!("http://{addr}/")).await;
    const DUE: usize = 12;
    for k in 0..DUE {
        let slot = t0() + SignedDuration::from_secs(i64::try_from(k).unwrap_or(0));
        store
            .execution_insert(&execution(&job, slot))
            .await
            .expect("insert execution");
    }
    clock.set(t0() + SignedDuration::from_secs(20));

    let (stop, running) = run_worker(
        store.clone(),
        clock.clone(),
        WorkerConfig {
            max_in_flight,
            claim_batch,
            ..WorkerConfig::new("w1")
        },
    );

    let finished = async {
        loop {
            let page = store
                .execution_list(&ExecutionListQuery {
                    namespace: "ns".into(),
                    limit: 100,
                    ..Default::default()
                })
                .await
                .expect("list");
            if page
                .iter()
                .filter(|e| e.state == ExecutionState::Succeeded)
                .count()
                == DUE
            {
                return;
            }
            // The test clock moves on too, so the worker's idle waits end (and a retry after
            // a transient failure comes due) without waiting on the wall clock.
            tokio::time::sleep(Duration::from_millis(20)).await;
            clock.advance(SignedDuration::from_millis(100));
        }
    };
    tokio::time::timeout(Duration::from_secs(30), finished)
        .await
        .expect("every execution succeeded within 30 s");
    let _ = stop.send(true);
    running.await.expect("worker stopped");

    // At least once: a transient failure after the receiver answered would deliver twice.
    let delivered = receiver.delivered.load(Ordering::SeqCst);
    assert!(
        delivered >= DUE,
        "{delivered} deliveries for {DUE} executions"
    );
    let most = receiver.most.load(Ordering::SeqCst);
    assert!(
        most <= max_in_flight,
        "{most} deliveries ran at once, above max_in_flight = {max_in_flight}"
    );
    assert!(
        most >= 2,
        "the worker never ran deliveries side by side (most {most})"
    );
}

/// A target whose first delivery panics (a defect), then succeeds.
#[derive(Default)]
struct PanicsOnce(std::sync::atomic::AtomicBool);

#[async_trait::async_trait]
impl sundial_target::Target for PanicsOnce {
    async fn dispatch(
        &self,
        _: &sundial_target::Delivery<'_>,
    ) -> Result<sundial_target::Outcome, sundial_target::Error> {
        if !self.0.swap(true, Ordering::SeqCst) {
            panic!("a defect in a target");
        }
        Ok(sundial_target::Outcome::default())
    }
}

/// An attempt whose task panics is recorded as a transient failure and retried: under its
/// worker's lease it has no lease of its own before its first heartbeat, so nothing else would
/// end it while the worker lives (docs/guarantees.md, "Workers").
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_attempt_whose_task_panics_is_recorded_failed_and_retried() {
    let clock = Arc::new(ManualClock::new(t0()));
    let dir = tempfile::tempdir().expect("tempdir");
    let store = embedded_store(dir.path(), clock.clone()).await;
    let job = http_job(&*store, "a", "http://127.0.0.1:9/unused".into()).await;
    let e = store
        .execution_insert(&execution(&job, t0()))
        .await
        .expect("insert");
    let worker = sundial_worker::Worker::new(
        store.clone(),
        clock.clone(),
        Arc::new(PanicsOnce::default()),
        WorkerConfig::new("w1"),
        Arc::new(tokio::sync::Notify::new()),
    );
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let running = tokio::spawn(worker.run(stopped));
    common::eventually("attempt 1 recorded failed", async || {
        store
            .execution_get("ns", &e.id)
            .await
            .expect("get")
            .is_some_and(|e| e.state == ExecutionState::RetryWait)
    })
    .await;
    // Once the worker is idle again, past the retry's backoff: attempt 2 succeeds.
    tokio::time::sleep(Duration::from_millis(300)).await;
    clock.advance(SignedDuration::from_secs(5));
    common::eventually("attempt 2 succeeded", async || {
        store
            .execution_get("ns", &e.id)
            .await
            .expect("get")
            .is_some_and(|e| e.state == ExecutionState::Succeeded)
    })
    .await;
    let read = store
        .execution_get("ns", &e.id)
        .await
        .expect("get")
        .expect("present");
    assert_eq!(read.attempt, 2);
    assert_eq!(
        read.attempts[0].outcome,
        Some(sundial_core::execution::AttemptOutcome::TransientFailure)
    );
    assert!(
        read.attempts[0]
            .error
            .as_deref()
            .is_some_and(|m| m.contains("panicked")),
        "{read:?}"
    );
    let _ = stop.send(true);
    running.await.expect("worker stopped");
}
