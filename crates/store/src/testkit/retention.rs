//! Checks of history retention (`MaintenanceStore::history_prune`, docs/configuration.md
//! "history_retention"): what finished before the cut-off goes, with its attempts, a run with
//! its tasks; each job's and workflow's newest finished stays, and so does everything
//! unfinished; a dry run counts and writes nothing; the walk goes on from where it stopped.

use serde_json::json;
use sundial_core::workflow::RunState;

use super::workflows::{create_workflow, manual_run};
use super::*;
use crate::{HistoryKey, HistoryKind, HistoryPrune, HistoryPruned};

async fn prune(
    store: &dyn Store,
    kind: HistoryKind,
    before: Timestamp,
    limit: u32,
    after: Option<HistoryKey>,
    dry_run: bool,
) -> HistoryPruned {
    store
        .history_prune(&HistoryPrune {
            kind,
            before,
            limit,
            after,
            dry_run,
        })
        .await
        .expect("prune")
}

async fn exists(store: &dyn Store, id: &str) -> bool {
    store.execution_get("ns", id).await.expect("get").is_some()
}

/// Expired executions go oldest first, a bounded batch a call, with their attempts and dead
/// letters; the newest finished execution of a job stays, unless its job is gone; an
/// unfinished one stays whatever its age.
pub async fn retention_deletes_expired_executions_keeping_each_job_s_newest(h: Harness) {
    let clock = Arc::new(ManualClock::new(t0()));
    let store = h.open(clock.clone()).await;
    let a = create(&*store, "ns", "a").await;
    let b = create(&*store, "ns", "b").await;
    let at = |s: i64| t0() + SignedDuration::from_secs(s);
    trigger(&*store, "n1", &a, &[at(0), at(10), at(20), at(30)])
        .await
        .expect("trigger a");
    trigger(&*store, "n1", &b, &[at(0)])
        .await
        .expect("trigger b");
    clock.set(at(20));
    let mut claimed = store.execution_claim(&claim("w", 10)).await.expect("claim");
    claimed.sort_by_key(|e| (e.scheduled_at, e.job.clone()));
    assert_eq!(claimed.len(), 4, "a at 0, 10, 20 and b at 0");
    for (i, e) in claimed.iter().enumerate() {
        let mut done = complete_ok(&e.id, e.attempt);
        if i == 0 {
            // a's first ends dead: a dead letter.
            done.next = NextStep::Dead;
            done.outcome = AttemptOutcome::TransientFailure;
        }
        store.attempt_complete(&done).await.expect("complete");
    }
    let (a0, b0, a10, a20) = (
        claimed[0].id.clone(),
        claimed[1].id.clone(),
        claimed[2].id.clone(),
        claimed[3].id.clone(),
    );
    assert_eq!(claimed[0].job, "a");
    store.job_delete("ns", "b", None).await.expect("delete b");

    // Nothing finished before a cut-off at the moment they finished.
    let none = prune(&*store, HistoryKind::Executions, at(20), 100, None, true).await;
    assert_eq!(none.deleted, 0);

    // A month on, with 30 days' retention.
    clock.set(at(20) + SignedDuration::from_hours(31 * 24));
    let before = clock.now() - SignedDuration::from_hours(30 * 24);
    let dry = prune(&*store, HistoryKind::Executions, before, 1, None, true).await;
    assert_eq!(
        dry,
        HistoryPruned {
            deleted: 3,
            task_executions: 0,
            next: None
        },
        "a at 0 and 10, and the deleted job's only execution"
    );
    assert!(
        exists(&*store, &a0).await && exists(&*store, &b0).await,
        "a dry run writes nothing"
    );
    let status = store.cluster_status().await.expect("status");
    assert_eq!(status.dead_by_namespace.get("ns"), Some(&1));

    // Two rows looked at a call, in slot order: a@0 and b@0, then a@10 and a@20 (kept),
    // then a@30 (unfinished) and the end.
    let first = prune(&*store, HistoryKind::Executions, before, 2, None, false).await;
    assert_eq!(first.deleted, 2);
    assert!(!exists(&*store, &a0).await && !exists(&*store, &b0).await);
    let status = store.cluster_status().await.expect("status");
    assert!(
        status.dead_by_namespace.is_empty(),
        "the dead letter went with it"
    );
    let second = prune(
        &*store,
        HistoryKind::Executions,
        before,
        2,
        first.next,
        false,
    )
    .await;
    assert_eq!(second.deleted, 1);
    assert!(!exists(&*store, &a10).await);
    assert!(
        exists(&*store, &a20).await,
        "the job's newest finished stays"
    );
    let third = prune(
        &*store,
        HistoryKind::Executions,
        before,
        2,
        second.next,
        false,
    )
    .await;
    assert_eq!(third.deleted, 0);
    assert_eq!(third.next, None, "the walk reached the cut-off");
    let unfinished = store
        .execution_list(&ExecutionListQuery {
            namespace: "ns".into(),
            limit: 10,
            ..Default::default()
        })
        .await
        .expect("list");
    assert_eq!(
        unfinished
            .iter()
            .map(|e| (e.scheduled_at, e.state))
            .collect::<Vec<_>>(),
        vec![
            (at(30), ExecutionState::Scheduled),
            (at(20), ExecutionState::Succeeded)
        ],
        "what is left: the unfinished slot, and the newest finished"
    );
    let again = prune(&*store, HistoryKind::Executions, before, 100, None, false).await;
    assert_eq!(again.deleted, 0, "a second walk finds nothing more");
}

/// A finished run goes with its tasks' executions; the workflow's newest finished run stays,
/// and so does an unfinished one.
pub async fn retention_deletes_a_run_with_its_tasks(h: Harness) {
    let clock = Arc::new(ManualClock::new(t0()));
    let store = h.open(clock.clone()).await;
    let wf = create_workflow(
        &*store,
        "etl",
        json!({"tasks": [
            {"name": "extract", "target": {"type": "http", "url": "http://127.0.0.1:9/e"}},
            {"name": "load", "depends_on": ["extract"], "target": {"type": "http", "url": "http://127.0.0.1:9/l"}}
        ]}),
    )
    .await;
    let mut runs = Vec::new();
    for s in 0..3 {
        let run = store
            .run_create(&manual_run(
                &wf,
                t0() + SignedDuration::from_secs(s),
                json!({}),
            ))
            .await
            .expect("create run");
        runs.push(run);
    }
    for run in &runs[..2] {
        let cancelled = store.run_cancel("ns", &run.id).await.expect("cancel");
        assert_eq!(cancelled.state, RunState::Cancelled);
    }
    clock.set(t0() + SignedDuration::from_hours(31 * 24));
    let before = clock.now() - SignedDuration::from_hours(30 * 24);
    let dry = prune(&*store, HistoryKind::Runs, before, 10, None, true).await;
    assert_eq!((dry.deleted, dry.task_executions), (1, 2));
    let done = prune(&*store, HistoryKind::Runs, before, 10, None, false).await;
    assert_eq!(
        (done.deleted, done.task_executions, done.next),
        (1, 2, None)
    );
    assert!(
        store
            .run_get("ns", &runs[0].id)
            .await
            .expect("get")
            .is_none()
    );
    for task in &runs[0].tasks {
        assert!(!exists(&*store, &task.execution_id).await, "{}", task.name);
    }
    assert!(
        store
            .run_get("ns", &runs[1].id)
            .await
            .expect("get")
            .is_some(),
        "the newest finished stays"
    );
    let open = store
        .run_get("ns", &runs[2].id)
        .await
        .expect("get")
        .expect("an unfinished run stays");
    for task in &open.tasks {
        assert!(exists(&*store, &task.execution_id).await);
    }
    // Executions of jobs are another walk: workflow tasks are never pruned on their own.
    let jobs = prune(&*store, HistoryKind::Executions, before, 10, None, true).await;
    assert_eq!(jobs.deleted, 0);
}

/// The retention service prunes by the store's clock, a bounded walk a pass, going on where
/// the last pass stopped.
pub async fn the_retention_service_goes_on_where_its_last_pass_stopped(h: Harness) {
    use crate::maintenance::{HistoryRetention, Service};
    let clock = Arc::new(ManualClock::new(t0()));
    let store = h.open(clock.clone()).await;
    let a = create(&*store, "ns", "a").await;
    let slots: Vec<Timestamp> = (0..5)
        .map(|i| t0() + SignedDuration::from_secs(10 * i))
        .collect();
    trigger(&*store, "n1", &a, &slots).await.expect("trigger");
    clock.set(slots[4]);
    for e in store.execution_claim(&claim("w", 10)).await.expect("claim") {
        store
            .attempt_complete(&complete_ok(&e.id, e.attempt))
            .await
            .expect("complete");
    }
    let day = SignedDuration::from_hours(24);
    let retention =
        HistoryRetention::new(store.clone(), Dur::from_secs(86_400), Dur::from_secs(60))
            .with_limits(2, 1);
    assert_eq!(
        retention.run_once().await.expect("pass"),
        0,
        "nothing a day old yet"
    );
    clock.set(slots[4] + day + SignedDuration::from_secs(1));
    // Five finished, the newest kept: two a pass, then the last expired one and the end.
    assert_eq!(retention.run_once().await.expect("pass"), 2);
    assert_eq!(retention.run_once().await.expect("pass"), 2);
    assert_eq!(retention.run_once().await.expect("pass"), 0);
    let left = store
        .execution_list(&ExecutionListQuery {
            namespace: "ns".into(),
            limit: 10,
            ..Default::default()
        })
        .await
        .expect("list");
    assert_eq!(
        left.iter().map(|e| e.scheduled_at).collect::<Vec<_>>(),
        vec![slots[4]]
    );
}
