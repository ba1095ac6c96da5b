//! Checks of dead letters and the alert outbox (`crate::alerts`): the per-namespace counts and
//! the shard map of the cluster status,
//! events written only for registered states and by every path that ends an execution or a
//! run, claimed once under a lease, settled by their round.

use std::time::Duration;

use serde_json::json;

use super::workflows::{manual_run, workflow_record};
use super::*;
use crate::{AlertSettle, AlertSubject, WorkflowWrite};

/// Claims `e`'s execution and ends it `dead` with an HTTP 503.
async fn die(store: &dyn Store, worker: &str) -> String {
    let e = store
        .execution_claim(&claim(worker, 1))
        .await
        .expect("claim")
        .remove(0);
    store
        .attempt_complete(&AttemptComplete {
            attempt: AttemptRef {
                id: e.id.clone(),
                attempt: e.attempt,
            },
            outcome: AttemptOutcome::TransientFailure,
            status_code: Some(503),
            error: Some("HTTP 503 <b>down</b>".into()),
            detail: None,
            next: NextStep::Dead,
            only_if_lapsed: false,
            output: None,
        })
        .await
        .expect("complete dead");
    e.id
}

/// Dead letters are counted per namespace, leave the count on re-drive, and the queue depth
/// per namespace counts what is due and waiting.
pub async fn dead_letters_and_queue_depth_are_counted_per_namespace(h: Harness) {
    let clock = Arc::new(ManualClock::new(t0()));
    let store = h.open(clock.clone()).await;
    let a = create(&*store, "ns", "a").await;
    let b = create(&*store, "other", "b").await;
    trigger(&*store, "n1", &a, &[t0()])
        .await
        .expect("trigger a");
    trigger(&*store, "n1", &b, &[t0()])
        .await
        .expect("trigger b");
    let status = store.cluster_status().await.expect("status");
    assert_eq!(
        status.queued_by_namespace,
        [("ns".to_string(), 1), ("other".to_string(), 1)].into()
    );
    assert!(status.dead_by_namespace.is_empty());
    // The shard map: node n1 renewed every lease before its trigger commits.
    assert_eq!(
        status.shard_owners.len(),
        sundial_core::SHARD_COUNT as usize
    );
    assert!(
        status
            .shard_owners
            .iter()
            .all(|o| o.as_deref() == Some("n1")),
        "{:?}",
        &status.shard_owners[..4]
    );
    let first = die(&*store, "w1").await;
    let status = store.cluster_status().await.expect("status");
    assert_eq!(status.queued_by_namespace.values().sum::<u64>(), 1);
    let dead_ns = first_namespace(&*store, &first).await;
    assert_eq!(status.dead_by_namespace, [(dead_ns.clone(), 1)].into());
    store
        .execution_redrive(&dead_ns, &first, 1)
        .await
        .expect("redrive");
    let status = store.cluster_status().await.expect("status");
    assert!(status.dead_by_namespace.is_empty(), "{status:?}");
    assert_eq!(status.queued_by_namespace.values().sum::<u64>(), 2);
}

async fn first_namespace(store: &dyn Store, id: &str) -> String {
    for ns in ["ns", "other"] {
        if store.execution_get(ns, id).await.expect("get").is_some() {
            return ns.into();
        }
    }
    panic!("execution {id} in neither namespace");
}

/// Without a registered state nothing is written; with one, the ending writes one event
/// with what the message says, claimed once while leased, again after the lease lapses,
/// settled only by the current round, back after a retry's due time, gone when done.
pub async fn alert_events_follow_registered_states_and_leases(h: Harness) {
    let clock = Arc::new(ManualClock::new(t0()));
    let store = h.open(clock.clone()).await;
    let job = create(&*store, "ns", "a").await;
    let lease = Duration::from_secs(5);
    let slots: Vec<Timestamp> = (0..4)
        .map(|i| t0() + SignedDuration::from_secs(10 * i))
        .collect();
    trigger(&*store, "n1", &job, &slots).await.expect("trigger");
    die(&*store, "w1").await;
    assert!(
        store
            .alert_claim(10, lease)
            .await
            .expect("claim")
            .is_empty()
    );

    store
        .alert_states_add(&["dead".into(), "cancelled".into()])
        .await
        .expect("register");
    store
        .alert_states_add(&["dead".into()])
        .await
        .expect("register twice");
    assert!(matches!(
        store.alert_states_add(&["succeeded".into()]).await,
        Err(Error::Defect(_))
    ));
    clock.advance(SignedDuration::from_secs(10));
    let id = die(&*store, "w1").await;
    let events = store.alert_claim(10, lease).await.expect("claim");
    assert_eq!(events.len(), 1, "{events:?}");
    let e = &events[0];
    assert_eq!(
        (
            e.subject,
            e.id.as_str(),
            e.state.as_str(),
            e.namespace.as_str()
        ),
        (AlertSubject::Execution, id.as_str(), "dead", "ns")
    );
    assert_eq!((e.name.as_str(), e.attempt, e.round), ("a", 1, 1));
    assert_eq!(e.error.as_deref(), Some("HTTP 503 <b>down</b>"));
    assert_eq!(e.finished_at, Some(clock.now()));
    assert!(e.delivered.is_empty());
    assert!(
        store
            .alert_claim(10, lease)
            .await
            .expect("claim")
            .is_empty()
    );

    clock.advance(SignedDuration::from_secs(6));
    let again = store.alert_claim(10, lease).await.expect("claim");
    assert_eq!((again.len(), again[0].round), (1, 2));
    let stale = store
        .alert_settle(e.seq, 1, &AlertSettle::Done)
        .await
        .expect("settle");
    assert!(!stale, "a settle of a lapsed round changes nothing");
    let retry = AlertSettle::Retry {
        delivered: vec!["oncall".into()],
        due_at: clock.now() + SignedDuration::from_secs(3),
    };
    assert!(store.alert_settle(e.seq, 2, &retry).await.expect("retry"));
    assert!(
        store
            .alert_claim(10, lease)
            .await
            .expect("claim")
            .is_empty()
    );
    clock.advance(SignedDuration::from_secs(3));
    let third = store.alert_claim(10, lease).await.expect("claim");
    assert_eq!(
        (third[0].round, third[0].delivered.clone()),
        (3, vec!["oncall".to_string()])
    );
    assert!(
        store
            .alert_settle(e.seq, 3, &AlertSettle::Done)
            .await
            .expect("done")
    );
    clock.advance(SignedDuration::from_secs(6));
    assert!(
        store
            .alert_claim(10, lease)
            .await
            .expect("claim")
            .is_empty()
    );

    // A cancel is an ending too; a state nobody registered (`succeeded`) writes nothing.
    let running = store
        .execution_claim(&claim("w1", 1))
        .await
        .expect("claim")
        .remove(0);
    store
        .execution_cancel("ns", &running.id)
        .await
        .expect("cancel");
    clock.advance(SignedDuration::from_secs(5));
    let ok = store
        .execution_claim(&claim("w1", 1))
        .await
        .expect("claim")
        .remove(0);
    store
        .attempt_complete(&complete_ok(&ok.id, ok.attempt))
        .await
        .expect("succeed");
    let events = store.alert_claim(10, lease).await.expect("claim");
    assert_eq!(
        events
            .iter()
            .map(|e| (e.id.as_str(), e.state.as_str()))
            .collect::<Vec<_>>(),
        vec![(running.id.as_str(), "cancelled")]
    );
}

/// A workflow run that fails writes a `run_failed` event naming the workflow and the failed
/// task's error; its task's `failed` ending writes its own when registered.
pub async fn a_failed_run_writes_a_run_alert_event(h: Harness) {
    let clock = Arc::new(ManualClock::new(t0()));
    let store = h.open(clock.clone()).await;
    store
        .alert_states_add(&["run_failed".into()])
        .await
        .expect("register");
    let wf = store
        .workflow_write_batch(&[WorkflowWrite {
            record: workflow_record(
                "ns",
                "etl",
                json!({"tasks": [
                    {"name": "only", "target": {"type": "http", "url": "http://127.0.0.1:9/x"}}
                ]}),
            ),
            expected_version: None,
            cancel_not_started: true,
        }])
        .await
        .expect("create workflow")
        .remove(0);
    let run = store
        .run_create(&manual_run(&wf, t0(), json!({})))
        .await
        .expect("run");
    let task = store
        .execution_claim(&claim("w1", 1))
        .await
        .expect("claim")
        .remove(0);
    store
        .attempt_complete(&AttemptComplete {
            attempt: AttemptRef {
                id: task.id.clone(),
                attempt: task.attempt,
            },
            outcome: AttemptOutcome::PermanentFailure,
            status_code: Some(404),
            error: Some("HTTP 404".into()),
            detail: None,
            next: NextStep::Failed,
            only_if_lapsed: false,
            output: None,
        })
        .await
        .expect("fail the task");
    let events = store
        .alert_claim(10, Duration::from_secs(30))
        .await
        .expect("claim");
    assert_eq!(events.len(), 1, "{events:?}");
    let e = &events[0];
    assert_eq!(
        (e.subject, e.id.as_str(), e.state.as_str(), e.name.as_str()),
        (AlertSubject::Run, run.id.as_str(), "run_failed", "etl")
    );
    assert_eq!(e.error.as_deref(), Some("HTTP 404"));
}
