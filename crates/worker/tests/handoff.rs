//! Slots handed to the worker beside the scheduler (docs/guarantees.md, "Slots handed to the
//! worker beside the scheduler"), against the embedded store, a real HTTP target and a manual
//! clock: a running worker offers room once it holds its lease and has seen no backlog; a
//! trigger commit carrying the offer writes the slot claimed under that lease; the worker holds
//! it and delivers it at its fire time, never before, once; with its room reserved it offers
//! none (a limit of 0); while the store has a backlog (here one its claims cannot drain) it
//! still offers its room and asks the scheduler to defer only what is beyond it.

mod common;

use std::sync::Arc;
use std::time::Duration;

use jiff::{SignedDuration, Timestamp};
use sundial_clock::{Clock, ManualClock};
use sundial_core::execution::ExecutionState;
use sundial_store::handoff::Handoff;
use sundial_store::testkit::{execution, first_slots_commit, t0};
use sundial_worker::{Worker, WorkerConfig};

use common::{
    embedded_store, eventually, executions, http_job, http_job_record, receiver, write_firing_at,
};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handed_out_slot_is_delivered_once_at_its_fire_time_and_a_backlog_defers_only_beyond_the_room()
 {
    let clock = Arc::new(ManualClock::new(t0()));
    let (addr, received) = receiver(clock.clone()).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let store = embedded_store(dir.path(), clock.clone()).await;
    let job = http_job(&*store, "a", format!("http://{addr}/a")).await;
    let worker = Worker::new(
        store.clone(),
        clock.clone(),
        Arc::new(sundial_target::Targets::new().expect("targets")),
        WorkerConfig {
            // A namespace whose executions wait for tokens it barely has: its late one stays
            // due, a backlog the claims cannot drain.
            rate_limits: [("slow".to_owned(), 0.001)].into_iter().collect(),
            max_claimed_ahead: 10,
            ..WorkerConfig::new("w1")
        },
        Arc::new(tokio::sync::Notify::new()),
    );
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let running = tokio::spawn(worker.clone().run(stopped));

    // Once the worker holds its lease and has counted no backlog, it offers room.
    eventually("an offer of room", async || {
        worker
            .offer(10)
            .is_some_and(|o| o.request.limit > 0 && !o.defer)
    })
    .await;
    let offer = worker.offer(10).expect("offer");
    assert_eq!((offer.request.limit, offer.defer), (10, false));
    // Its room (`max_claimed_ahead`) is reserved by that offer: another says "no room", so the
    // scheduler leaves the slots the worker would take in their jobs.
    let full = worker.offer(10).expect("an offer of no room");
    assert_eq!(
        (full.request.limit, full.defer),
        (0, false),
        "no room, no backlog: what does not fit is written to wait"
    );
    drop(full);
    let fire = t0() + SignedDuration::from_secs(2);
    let mut commit = first_slots_commit(&*store, "n1", std::slice::from_ref(&job))
        .await
        .expect("leases");
    commit.jobs[0].executions = vec![execution(&job, fire)];
    commit.handoff = Some(offer.request.clone());
    let mut done = store.trigger_commit(&commit).await.expect("commit");
    assert_eq!(done.handed.len(), 1, "the slot is handed out");
    (offer.deliver)(std::mem::take(&mut done.handed), clock.now());
    let states = async || -> Vec<ExecutionState> {
        executions(&*store)
            .await
            .into_iter()
            .map(|e| e.state)
            .collect()
    };
    assert_eq!(states().await, [ExecutionState::Running]);

    clock.set(fire - SignedDuration::from_millis(1));
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        received.lock().expect("lock").is_empty(),
        "nothing before the fire time"
    );
    clock.set(fire);
    eventually("delivered", async || {
        states().await == [ExecutionState::Succeeded]
    })
    .await;

    // A backlog (an execution due more than a second ago): once counted, the offer asks to
    // defer what does not fit. Its namespace's bucket holds one token, which a claim may
    // spend on one of them before the backlog is counted: two are written, so one stays due
    // whatever the order.
    let mut late = http_job_record("late", format!("http://{addr}/late"));
    late.spec.namespace = "slow".into();
    let late = write_firing_at(&*store, late, fire - SignedDuration::from_secs(5)).await;
    store
        .execution_insert(&execution(&late, fire - SignedDuration::from_secs(4)))
        .await
        .expect("insert execution");
    clock.set(fire + SignedDuration::from_secs(1));
    let mut offered = Some((10, false));
    for _ in 0..250 {
        clock.advance(SignedDuration::from_millis(1));
        offered = worker.offer(10).map(|o| (o.request.limit, o.defer));
        if offered.is_some_and(|(_, defer)| defer) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(
        offered,
        Some((10, true)),
        "under a backlog its claims cannot drain the worker still takes what fits, and only \
         what is beyond its room is deferred"
    );

    clock.set(fire + SignedDuration::from_secs(5));
    tokio::time::sleep(Duration::from_millis(300)).await;
    let _ = stop.send(true);
    running.await.expect("worker stopped");
    let received: Vec<(String, Timestamp)> = received
        .lock()
        .expect("lock")
        .iter()
        .filter(|(job, _)| job == "a")
        .cloned()
        .collect();
    assert_eq!(received, [("a".to_owned(), fire)], "once, at its fire time");
}
