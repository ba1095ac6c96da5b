//! Claim ahead on a worker (docs/guarantees.md, "Claim ahead"), against the embedded store, a
//! real HTTP target and a manual clock: an execution claimed before its fire time is held on
//! the worker's timer and delivered no earlier than the fire time, and one cancelled while
//! held is never delivered.

mod common;

use std::sync::Arc;
use std::time::Duration;

use jiff::SignedDuration;
use sundial_clock::{Clock, ManualClock};
use sundial_core::execution::ExecutionState;
use sundial_store::testkit::t0;
use sundial_store::{ExecutionListQuery, Store};
use sundial_worker::WorkerConfig;

use common::{embedded_store, eventually, executions, http_job_firing_at, receiver, run_worker};

async fn states(store: &dyn Store) -> Vec<(String, ExecutionState)> {
    let mut page: Vec<(String, ExecutionState)> = executions(store)
        .await
        .into_iter()
        .map(|e| (e.job, e.state))
        .collect();
    page.sort_by(|x, y| x.0.cmp(&y.0));
    page
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_execution_claimed_ahead_is_delivered_at_its_fire_time_and_not_at_all_once_cancelled() {
    let clock = Arc::new(ManualClock::new(t0()));
    let (addr, received) = receiver(clock.clone()).await;

    let dir = tempfile::tempdir().expect("tempdir");
    let store = embedded_store(dir.path(), clock.clone()).await;
    let fire = t0() + SignedDuration::from_millis(500);
    for name in ["a", "c"] {
        http_job_firing_at(&*store, name, format!("http://{addr}/{name}"), fire).await;
    }
    let (stop, running) = run_worker(
        store.clone(),
        clock.clone(),
        WorkerConfig {
            claim_ahead: sundial_core::Dur::from_secs(1),
            ..WorkerConfig::new("w1")
        },
    );

    eventually("both claimed ahead", async || {
        states(&*store).await
            == [
                ("a".to_owned(), ExecutionState::Running),
                ("c".to_owned(), ExecutionState::Running),
            ]
    })
    .await;
    let held_c = store
        .execution_list(&ExecutionListQuery {
            namespace: "ns".into(),
            job: Some("c".into()),
            limit: 1,
            ..Default::default()
        })
        .await
        .expect("list")
        .remove(0);
    store
        .execution_cancel("ns", &held_c.id)
        .await
        .expect("cancel");
    clock.set(fire - SignedDuration::from_millis(1));
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        received.lock().expect("lock").is_empty(),
        "nothing delivered before the fire time"
    );
    clock.set(fire);
    eventually("a delivered", async || {
        states(&*store).await
            == [
                ("a".to_owned(), ExecutionState::Succeeded),
                ("c".to_owned(), ExecutionState::Cancelled),
            ]
    })
    .await;
    clock.set(fire + SignedDuration::from_secs(2));
    tokio::time::sleep(Duration::from_millis(300)).await;
    let _ = stop.send(true);
    running.await.expect("worker stopped");
    let received = received.lock().expect("lock").clone();
    assert_eq!(
        received,
        [("a".to_owned(), fire)],
        "a at its fire time, c never"
    );
}

/// A burst larger than the worker claims within `claim_ahead` at its `burst_claim_rate` is
/// claimed earlier, by the time that rate needs for the rest (docs/guarantees.md, "Claim
/// ahead", "Bursts"): 40 executions due at one instant at 10 a second with a 1 s window are
/// claimed 4 s ahead, so all of them are held 3 s before their fire time, while the store's
/// clock has not moved; none is delivered before it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_is_claimed_as_far_ahead_as_its_size_needs() {
    let clock = Arc::new(ManualClock::new(t0()));
    let (addr, received) = receiver(clock.clone()).await;

    let dir = tempfile::tempdir().expect("tempdir");
    let store = embedded_store(dir.path(), clock.clone()).await;
    let fire = t0() + SignedDuration::from_secs(3);
    for i in 0..40 {
        let name = format!("j{i}");
        http_job_firing_at(&*store, &name, format!("http://{addr}/{name}"), fire).await;
    }
    let (stop, running) = run_worker(
        store.clone(),
        clock.clone(),
        WorkerConfig {
            claim_ahead: sundial_core::Dur::from_secs(1),
            burst_claim_rate: 10,
            ..WorkerConfig::new("w1")
        },
    );
    eventually("all 40 claimed 3 s ahead", async || {
        let held = states(&*store).await;
        held.len() == 40 && held.iter().all(|(_, s)| *s == ExecutionState::Running)
    })
    .await;
    assert_eq!(clock.now(), t0(), "claimed while the clock still read t0");
    assert!(
        received.lock().expect("lock").is_empty(),
        "nothing delivered before the fire time"
    );
    clock.set(fire);
    eventually("all 40 delivered", async || {
        received.lock().expect("lock").len() == 40
    })
    .await;
    let _ = stop.send(true);
    running.await.expect("worker stopped");
    assert!(
        received
            .lock()
            .expect("lock")
            .iter()
            .all(|(_, at)| *at >= fire),
        "none before the fire time"
    );
}

/// A worker that dies holding a burst leaves its leases to lapse; one reaper pass of another
/// worker then retries all of them, a batch of `REAP_BATCH` after another, not one batch a
/// pass (docs/configuration.md, "[maintenance]").
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_held_by_a_dead_worker_is_reaped_in_one_pass() {
    let clock = Arc::new(ManualClock::new(t0()));
    let dir = tempfile::tempdir().expect("tempdir");
    let store = embedded_store(dir.path(), clock.clone()).await;
    let fire = t0() + SignedDuration::from_secs(1);
    let n = 2 * sundial_worker::REAP_BATCH as usize + 100;
    for i in 0..n {
        let name = format!("j{i}");
        http_job_firing_at(&*store, &name, "http://127.0.0.1:9/never".into(), fire).await;
    }
    let claimed = store
        .execution_claim(&sundial_store::ExecutionClaim {
            worker: "dead".into(),
            limit: u32::try_from(2 * n).expect("limit"),
            rate_limits: Default::default(),
            ahead_ms: 1_000,
            epoch: None,
            on_time_first: false,
        })
        .await
        .expect("claim");
    assert_eq!(claimed.len(), n, "the dead worker held the whole burst");
    // Its leases run from the fire time for the job's heartbeat_timeout (30 s).
    clock.set(fire + SignedDuration::from_secs(31));
    let reaper = sundial_worker::Reaper::new(
        store.clone(),
        Arc::new(tokio::sync::Notify::new()),
        WorkerConfig::new("w2").lease_ttl,
        sundial_core::Dur::from_secs(1),
    );
    assert_eq!(reaper.reap_once().await.expect("reap"), n);
    let after = states(&*store).await;
    assert!(
        after.iter().all(|(_, s)| *s == ExecutionState::RetryWait),
        "all retried: {:?}",
        after.iter().find(|(_, s)| *s != ExecutionState::RetryWait)
    );
}

/// docs/guarantees.md, "Workers": a worker whose liveness lease a reaper took over (as after a pause past
/// `lease_ttl`) learns it at its next renewal, drops the execution it held without delivering
/// it, takes a new lease, and delivers the retry (attempt 2) under the new one; attempt 1 is
/// recorded `lease_lapsed`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_whose_lease_was_taken_over_drops_what_it_held_and_claims_afresh() {
    let clock = Arc::new(ManualClock::new(t0()));
    let (addr, received) = receiver(clock.clone()).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let store = embedded_store(dir.path(), clock.clone()).await;
    let fire = t0() + SignedDuration::from_millis(500);
    http_job_firing_at(&*store, "a", format!("http://{addr}/a"), fire).await;
    let (stop, running) = run_worker(
        store.clone(),
        clock.clone(),
        WorkerConfig {
            claim_ahead: sundial_core::Dur::from_secs(1),
            lease_ttl: sundial_core::Dur::from_secs(3),
            ..WorkerConfig::new("w1")
        },
    );
    eventually("held after a claim ahead", async || {
        states(&*store).await == [("a".to_owned(), ExecutionState::Running)]
    })
    .await;
    // A reaper takes the worker's first lease (epoch 1) over and retries what it held.
    store.worker_lease_release(1).await.expect("release");
    assert_eq!(store.worker_lease_reap(10).await.expect("reap"), vec![1]);
    let reaper = sundial_worker::Reaper::new(
        store.clone(),
        Arc::new(tokio::sync::Notify::new()),
        WorkerConfig::new("w2").lease_ttl,
        sundial_core::Dur::from_secs(1),
    );
    assert_eq!(reaper.reap_once().await.expect("reap"), 1);
    // The worker renews within a second, finds its lease gone and takes lease 2.
    eventually("a new lease", async || {
        store
            .worker_lease_renew(2, sundial_core::Dur::from_secs(3))
            .await
            .expect("renew")
            .is_some()
    })
    .await;
    // Past the fire time and the retry's backoff: attempt 2, under the new lease, delivers.
    // Once the worker is idle again (it sleeps until the retry is due by the test clock, read
    // before the clock moves).
    tokio::time::sleep(Duration::from_millis(300)).await;
    clock.set(fire + SignedDuration::from_secs(3));
    eventually("delivered by attempt 2", async || {
        states(&*store).await == [("a".to_owned(), ExecutionState::Succeeded)]
    })
    .await;
    let e = executions(&*store).await.remove(0);
    let e = store
        .execution_get("ns", &e.id)
        .await
        .expect("get")
        .expect("present");
    let outcomes: Vec<_> = e
        .attempts
        .iter()
        .map(|a| (a.attempt, a.worker.clone(), a.outcome))
        .collect();
    assert_eq!(
        outcomes,
        [
            (
                1,
                "w1".to_owned(),
                Some(sundial_core::execution::AttemptOutcome::LeaseLapsed)
            ),
            (
                2,
                "w1".to_owned(),
                Some(sundial_core::execution::AttemptOutcome::Succeeded)
            ),
        ]
    );
    let _ = stop.send(true);
    running.await.expect("worker stopped");
    assert_eq!(
        received.lock().expect("lock").len(),
        1,
        "delivered once, by attempt 2"
    );
}
