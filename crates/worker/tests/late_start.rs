//! A held attempt that waits past its job's misfire threshold for a delivery slot
//! (docs/policies.md, "misfire_policy"), against the embedded store, real HTTP targets and a
//! manual clock: a slot handed out by a trigger commit is held while a delivery that never
//! gets an answer takes the worker's one delivery slot; when it gets the slot more than its
//! threshold after its fire time the store judges it before it starts and records it `missed`
//! (its policy is `skip`): it is never delivered.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use jiff::SignedDuration;
use sundial_clock::{Clock, ManualClock};
use sundial_core::Dur;
use sundial_core::execution::ExecutionState;
use sundial_core::job::MisfirePolicy;
use sundial_store::handoff::Handoff;
use sundial_store::testkit::{execution, first_slots_commit, t0};
use sundial_worker::{Worker, WorkerConfig};

use common::{
    embedded_store, eventually, executions, http_job_record, receiver, write_firing_at, write_job,
};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_slot_that_waits_past_its_misfire_threshold_is_judged_not_delivered() {
    let clock = Arc::new(ManualClock::new(t0()));
    let (addr, received) = receiver(clock.clone()).await;
    // A target that accepts connections and never answers.
    let silent = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let silent_addr = silent.local_addr().expect("address");
    let connections = Arc::new(AtomicUsize::new(0));
    let accepted = connections.clone();
    let listening = tokio::spawn(async move {
        let mut open = Vec::new();
        while let Ok((socket, _)) = silent.accept().await {
            accepted.fetch_add(1, Ordering::SeqCst);
            open.push(socket);
        }
    });

    let dir = tempfile::tempdir().expect("tempdir");
    let store = embedded_store(dir.path(), clock.clone()).await;
    // Its attempt times out on the test clock (20 s), once, far sooner than on the wall's.
    let mut hanging = http_job_record("hang", format!("http://{silent_addr}/hang"));
    hanging.spec.timeout = Dur::from_secs(20);
    hanging.spec.retry.max_attempts = 1;
    write_firing_at(&*store, hanging, t0()).await;
    let mut late = http_job_record("late", format!("http://{addr}/late"));
    late.spec.misfire_policy = MisfirePolicy::Skip;
    let late = write_job(&*store, late).await;

    let worker = Worker::new(
        store.clone(),
        clock.clone(),
        Arc::new(sundial_target::Targets::new().expect("targets")),
        WorkerConfig {
            max_in_flight: 1,
            max_claimed_ahead: 10,
            ..WorkerConfig::new("w1")
        },
        Arc::new(tokio::sync::Notify::new()),
    );
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let running = tokio::spawn(worker.clone().run(stopped));
    eventually(
        "the unanswered delivery holds the one delivery slot",
        async || connections.load(Ordering::SeqCst) > 0,
    )
    .await;

    eventually("an offer of room", async || {
        worker
            .offer(10)
            .is_some_and(|o| o.request.limit > 0 && !o.defer)
    })
    .await;
    let offer = worker.offer(10).expect("offer");
    let fire = t0() + SignedDuration::from_secs(2);
    let mut commit = first_slots_commit(&*store, "n1", std::slice::from_ref(&late))
        .await
        .expect("leases");
    commit.jobs[0].executions = vec![execution(&late, fire)];
    commit.handoff = Some(offer.request.clone());
    let mut done = store.trigger_commit(&commit).await.expect("commit");
    assert_eq!(done.handed.len(), 1, "the slot is handed out");
    (offer.deliver)(std::mem::take(&mut done.handed), clock.now());

    // The unanswered attempt times out 20 s in; the held slot gets the delivery slot then,
    // 61 s past its fire time: past its 60 s threshold.
    clock.set(fire + SignedDuration::from_secs(61));
    let state_of_late = async || {
        executions(&*store)
            .await
            .into_iter()
            .find(|e| e.job == "late")
            .map(|e| (e.state, e.trigger, e.attempts.len()))
    };
    eventually("the late slot judged by its policy", async || {
        state_of_late()
            .await
            .is_some_and(|s| s.0 == ExecutionState::Missed)
    })
    .await;
    assert_eq!(
        state_of_late().await,
        Some((
            ExecutionState::Missed,
            sundial_core::execution::Trigger::Misfire,
            0
        )),
        "recorded missed, with no attempt"
    );
    let _ = stop.send(true);
    running.await.expect("worker stopped");
    listening.abort();
    assert!(received.lock().expect("lock").is_empty(), "never delivered");
}
