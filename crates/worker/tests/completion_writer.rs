//! The completion writer defers to deliveries (`sundial_worker::defer_budget`),
//! against the embedded store, a real HTTP target and a manual clock: while a burst claimed
//! ahead waits for delivery slots, no completion is written, and once every attempt has
//! started, all of them are.

mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use jiff::SignedDuration;
use sundial_clock::ManualClock;
use sundial_core::execution::ExecutionState;
use sundial_store::Store;
use sundial_store::testkit::t0;
use sundial_worker::WorkerConfig;

use common::{embedded_store, eventually, executions, http_job_firing_at, run_worker};

/// Executions of the burst, all of one fire time.
const BURST: usize = 8;
/// The worker's delivery slots: the burst is delivered in `BURST / SLOTS` waves.
const SLOTS: usize = 2;

async fn states(store: &dyn Store) -> Vec<ExecutionState> {
    executions(store)
        .await
        .into_iter()
        .map(|e| e.state)
        .collect()
}

async fn succeeded(store: &dyn Store) -> usize {
    states(store)
        .await
        .into_iter()
        .filter(|s| *s == ExecutionState::Succeeded)
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_waiting_for_delivery_slots_is_delivered_before_its_completions_are_written() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = Arc::new(ManualClock::new(t0()));
    let store = embedded_store(dir.path(), clock.clone()).await;
    // Each delivery records how many executions the store had recorded succeeded when it
    // arrived, then takes 30 ms to answer.
    let seen: Arc<Mutex<Vec<usize>>> = Arc::default();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    let app = {
        let (seen, store) = (seen.clone(), store.clone());
        axum::Router::new().route(
            "/",
            axum::routing::post(move || async move {
                let done = succeeded(&*store).await;
                seen.lock().expect("lock").push(done);
                tokio::time::sleep(Duration::from_millis(30)).await;
                "ok"
            }),
        )
    };
    tokio::spawn(async move { axum::serve(listener, app).await });

    let fire = t0() + SignedDuration::from_millis(500);
    for k in 0..BURST {
        http_job_firing_at(&*store, &format!("j{k}"), format!("http://{addr}/"), fire).await;
    }
    let (stop, running) = run_worker(
        store.clone(),
        clock.clone(),
        WorkerConfig {
            max_in_flight: SLOTS,
            claim_ahead: sundial_core::Dur::from_secs(1),
            ..WorkerConfig::new("w1")
        },
    );

    eventually("the burst claimed ahead", async || {
        states(&*store).await == [ExecutionState::Running; BURST]
    })
    .await;
    // The fire time: every held attempt starts at once, SLOTS of them get a delivery slot
    // and the rest wait for one.
    clock.set(fire);
    eventually("every execution recorded succeeded", async || {
        succeeded(&*store).await == BURST
    })
    .await;
    let _ = stop.send(true);
    running.await.expect("worker stopped");

    let seen = seen.lock().expect("lock").clone();
    assert_eq!(seen.len(), BURST, "one delivery per execution: {seen:?}");
    // Every wave but the last started while attempts still waited for a slot: the writer
    // wrote nothing before them, though the first wave's completions were queued 30 ms after
    // it began (the writer's own gathering wait is 10 ms).
    let before_last_wave = &seen[..BURST - SLOTS];
    assert!(
        before_last_wave.iter().all(|&done| done == 0),
        "completions were written while attempts waited for delivery slots: {seen:?}"
    );
}
