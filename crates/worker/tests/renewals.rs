//! Lease renewals written in batches (`sundial_worker::RENEWAL_BATCH`), against the embedded
//! store, a real HTTP target and a manual clock: a burst held whole whose attempts wait for a
//! delivery slot past a third of their `heartbeat_timeout` keeps every lease, in more than one
//! batch, and is then delivered once each.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use jiff::SignedDuration;
use sundial_clock::ManualClock;
use sundial_core::Dur;
use sundial_core::execution::ExecutionState;
use sundial_store::Store;
use sundial_store::testkit::t0;
use sundial_worker::WorkerConfig;

use common::{
    embedded_store, eventually, executions, http_job_record, run_worker, write_firing_at,
};

/// Executions of the burst: more than one batch of renewals.
const BURST: usize = sundial_worker::RENEWAL_BATCH + 88;

async fn count_in(store: &dyn Store, state: ExecutionState) -> usize {
    executions(store)
        .await
        .into_iter()
        .filter(|e| e.state == state)
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_waiting_for_a_delivery_slot_keeps_its_leases_and_is_delivered_once_each() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = Arc::new(ManualClock::new(t0()));
    let store = embedded_store(dir.path(), clock.clone()).await;
    // The target answers nothing until released, so one delivery holds the only slot.
    let delivered = Arc::new(AtomicUsize::new(0));
    let (release, released) = tokio::sync::watch::channel(false);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    let app = {
        let delivered = delivered.clone();
        axum::Router::new().route(
            "/",
            axum::routing::post(move || async move {
                delivered.fetch_add(1, Ordering::SeqCst);
                let mut released = released.clone();
                let _ = released.wait_for(|r| *r).await;
                "ok"
            }),
        )
    };
    tokio::spawn(async move { axum::serve(listener, app).await });

    let fire = t0() + SignedDuration::from_millis(500);
    for k in 0..BURST {
        // The test's clock moves 31 s while one delivery is held: a 60 s attempt timeout.
        let mut job = http_job_record(&format!("j{k}"), format!("http://{addr}/"));
        job.spec.timeout = Dur::from_secs(60);
        write_firing_at(&*store, job, fire).await;
    }
    let (stop, running) = run_worker(
        store.clone(),
        clock.clone(),
        WorkerConfig {
            max_in_flight: 1,
            claim_ahead: Dur::from_secs(1),
            ..WorkerConfig::new("w1")
        },
    );
    eventually("the burst claimed ahead", async || {
        count_in(&*store, ExecutionState::Running).await == BURST
    })
    .await;
    // The fire time: one attempt takes the slot, the others wait for it, their leases
    // running from the fire time for the job's heartbeat_timeout (30 s).
    clock.set(fire);
    eventually("the first delivery", async || {
        delivered.load(Ordering::SeqCst) == 1
    })
    .await;
    // A third of the heartbeat_timeout later every attempt renews its lease, to fire + 40 s.
    // A second handle on the store, its clock at fire + 35 s, sees a lease as lapsed until
    // it was renewed.
    clock.set(fire + SignedDuration::from_secs(10));
    let later = Arc::new(ManualClock::new(fire + SignedDuration::from_secs(35)));
    let beyond = embedded_store(dir.path(), later).await;
    eventually("every lease renewed", async || {
        beyond
            .attempt_list_lapsed(10)
            .await
            .expect("lapsed")
            .is_empty()
    })
    .await;
    // Past the leases the claim gave them, none has lapsed.
    clock.set(fire + SignedDuration::from_secs(31));
    assert!(
        store
            .attempt_list_lapsed(10)
            .await
            .expect("lapsed")
            .is_empty(),
        "a lease lapsed while its attempt waited for the slot"
    );
    assert_eq!(delivered.load(Ordering::SeqCst), 1, "one slot");

    let _ = release.send(true);
    eventually("every execution recorded succeeded", async || {
        count_in(&*store, ExecutionState::Succeeded).await == BURST
    })
    .await;
    let _ = stop.send(true);
    running.await.expect("worker stopped");
    assert_eq!(
        delivered.load(Ordering::SeqCst),
        BURST,
        "one delivery per execution"
    );
}
