//! Checks of workflows (docs/workflows.md): release in the completing transaction, each
//! trigger rule, transitive `upstream_failed`, templates rendered once, cancel racing a
//! completion, retry from failure, version pinning, concurrency policies on runs, and one
//! run per slot from two processes (W1–W5).

use std::collections::BTreeMap;

use serde_json::{Value, json};
use sundial_core::validate::Context;
use sundial_core::workflow::RunState;
use sundial_core::workflow::validate::workflow_from_json;

use super::*;
use crate::{ClaimedExecution, NewRun, RunRecord, WorkflowRecord, WorkflowWrite};

/// A workflow record of namespace `ns` from a JSON body (validated as the API would).
pub fn workflow_record(ns: &str, name: &str, body: Value) -> WorkflowRecord {
    let ctx = Context {
        namespace: ns.into(),
        name: Some(name.into()),
        connections: BTreeMap::from([("events".into(), "nats".into())]),
        http_allow: None,
    };
    let spec = workflow_from_json(&body, &ctx).expect("a valid workflow");
    WorkflowRecord {
        spec,
        uid: uuid::Uuid::now_v7().to_string(),
        shard: shard_of(ns, name),
        version: 0,
        created_at: t0(),
        updated_at: t0(),
        next_slot_at: None,
        next_fire_at: None,
        last_run: None,
    }
}

/// Creates workflow `name` of namespace `ns` with `body` (the JSON of its spec).
///
/// # Panics
/// When the store refuses it.
pub async fn create_workflow(store: &dyn Store, name: &str, body: Value) -> WorkflowRecord {
    store
        .workflow_write_batch(&[WorkflowWrite {
            record: workflow_record("ns", name, body),
            expected_version: None,
            cancel_not_started: true,
        }])
        .await
        .expect("create workflow")
        .remove(0)
}

/// A manual run of `wf` at `at` with `params`.
pub fn manual_run(wf: &WorkflowRecord, at: Timestamp, params: Value) -> NewRun {
    NewRun {
        id: uuid::Uuid::now_v7().to_string(),
        namespace: wf.spec.namespace.clone(),
        workflow: wf.spec.name.clone(),
        workflow_uid: wf.uid.clone(),
        workflow_version: wf.version,
        shard: wf.shard,
        trigger: Trigger::Manual,
        scheduled_at: at,
        fire_at: at,
        params: params.as_object().cloned().unwrap_or_default(),
        recorded_as: None,
    }
}

fn http(path: &str) -> Value {
    json!({"type": "http", "url": format!("http://127.0.0.1:9/{path}")})
}

/// Claims every due task (up to 100), by task name.
async fn claim_tasks(store: &dyn Store) -> BTreeMap<String, ClaimedExecution> {
    let claimed = store
        .execution_claim(&claim("w", 100))
        .await
        .expect("claim");
    let mut by_name = BTreeMap::new();
    for c in claimed {
        let read = store
            .execution_get(&c.namespace, &c.id)
            .await
            .expect("get")
            .expect("claimed execution exists");
        by_name.insert(read.task.clone().expect("a workflow task"), c);
    }
    by_name
}

fn ended(c: &ClaimedExecution, next: NextStep, output: Option<Value>) -> AttemptComplete {
    AttemptComplete {
        attempt: AttemptRef {
            id: c.id.clone(),
            attempt: c.attempt,
        },
        outcome: if next == NextStep::Succeeded {
            AttemptOutcome::Succeeded
        } else {
            AttemptOutcome::PermanentFailure
        },
        status_code: Some(200),
        error: None,
        detail: None,
        next,
        only_if_lapsed: false,
        output: output.map(|o| o.to_string()),
    }
}

async fn run_of(store: &dyn Store, id: &str) -> RunRecord {
    store
        .run_get("ns", id)
        .await
        .expect("get run")
        .expect("run exists")
}

fn task_states(run: &RunRecord) -> Vec<(&str, ExecutionState)> {
    run.tasks
        .iter()
        .map(|t| (t.name.as_str(), t.state))
        .collect()
}

fn url_of(c: &ClaimedExecution) -> String {
    match &c.run.target {
        TargetSpec::Http(h) => h.url.clone(),
        other => panic!("an http target, not {other:?}"),
    }
}

/// A chain runs one task at a time, each released by its upstream's completion in that
/// completion's transaction, with the upstream's output rendered into its target once.
pub async fn a_chain_releases_each_task_when_its_upstream_succeeds(h: Harness) {
    let clock = Arc::new(ManualClock::new(t0()));
    let store = h.open(clock.clone()).await;
    let wf = create_workflow(
        &*store,
        "etl",
        json!({"params": {"region": "eu"}, "tasks": [
            {"name": "extract", "output": "json", "target": http("extract/{{ run.params.region }}")},
            {"name": "transform", "depends_on": ["extract"],
             "target": http("t/{{ tasks.extract.output.batch }}")},
            {"name": "load", "depends_on": ["transform"], "target": http("load")}
        ]}),
    )
    .await;
    let run = store
        .run_create(&manual_run(&wf, t0(), json!({"region": "us west"})))
        .await
        .expect("create run");
    assert_eq!(run.state, RunState::Running);
    assert_eq!(
        task_states(&run),
        vec![
            ("extract", ExecutionState::Queued),
            ("transform", ExecutionState::Pending),
            ("load", ExecutionState::Pending)
        ]
    );
    let first = claim_tasks(&*store).await;
    assert_eq!(first.keys().collect::<Vec<_>>(), vec!["extract"]);
    assert_eq!(
        url_of(&first["extract"]),
        "http://127.0.0.1:9/extract/us%20west"
    );
    // Nothing else is due while extract runs.
    assert!(claim_tasks(&*store).await.is_empty());
    store
        .attempt_complete(&ended(
            &first["extract"],
            NextStep::Succeeded,
            Some(json!({"batch": 7})),
        ))
        .await
        .expect("complete extract");
    let second = claim_tasks(&*store).await;
    assert_eq!(second.keys().collect::<Vec<_>>(), vec!["transform"]);
    assert_eq!(url_of(&second["transform"]), "http://127.0.0.1:9/t/7");
    assert_eq!(second["transform"].attempt, 1);
    store
        .attempt_complete(&ended(&second["transform"], NextStep::Succeeded, None))
        .await
        .expect("complete transform");
    let third = claim_tasks(&*store).await;
    store
        .attempt_complete(&ended(&third["load"], NextStep::Succeeded, None))
        .await
        .expect("complete load");
    let done = run_of(&*store, &run.id).await;
    assert_eq!(done.state, RunState::Succeeded);
    assert!(done.finished_at.is_some());
    assert_eq!(done.tasks[0].output, Some(json!({"batch": 7})));
    let read = store
        .execution_get("ns", &done.tasks[1].execution_id)
        .await
        .expect("get")
        .expect("task execution");
    assert_eq!(read.trigger, Trigger::Workflow);
    assert_eq!(read.run_id.as_deref(), Some(run.id.as_str()));
    let wf = store
        .workflow_get("ns", "etl")
        .await
        .expect("get")
        .expect("workflow");
    assert_eq!(wf.last_run.map(|r| r.state), Some(RunState::Succeeded));
}

/// A failure ends what can no longer run, transitively, in the same transaction, and releases
/// the tasks that wait for a failure; `all_done` waits for every upstream whatever its end.
pub async fn trigger_rules_decide_every_task_from_its_upstream(h: Harness) {
    let clock = Arc::new(ManualClock::new(t0()));
    let store = h.open(clock.clone()).await;
    let wf = create_workflow(
        &*store,
        "rules",
        json!({"tasks": [
            {"name": "a", "target": http("a")},
            {"name": "b", "target": http("b")},
            {"name": "c", "depends_on": ["a"], "target": http("c")},
            {"name": "d", "depends_on": ["c"], "target": http("d")},
            {"name": "alert", "depends_on": ["a", "b"], "trigger_rule": "one_failed", "target": http("alert")},
            {"name": "cleanup", "depends_on": ["a", "b"], "trigger_rule": "all_done", "target": http("cleanup")},
            {"name": "any", "depends_on": ["a", "b"], "trigger_rule": "one_success", "target": http("any")},
            {"name": "quiet", "depends_on": ["b"], "trigger_rule": "one_failed", "target": http("quiet")}
        ]}),
    )
    .await;
    let run = store
        .run_create(&manual_run(&wf, t0(), json!({})))
        .await
        .expect("create run");
    let roots = claim_tasks(&*store).await;
    assert_eq!(roots.keys().collect::<Vec<_>>(), vec!["a", "b"]);
    store
        .attempt_complete(&ended(&roots["a"], NextStep::Dead, None))
        .await
        .expect("a dies");
    let after_a = run_of(&*store, &run.id).await;
    let states: BTreeMap<&str, ExecutionState> = task_states(&after_a).into_iter().collect();
    assert_eq!(states["c"], ExecutionState::UpstreamFailed);
    assert_eq!(states["d"], ExecutionState::UpstreamFailed, "transitively");
    assert_eq!(
        states["alert"],
        ExecutionState::Queued,
        "one_failed runs at once"
    );
    assert_eq!(
        states["cleanup"],
        ExecutionState::Pending,
        "all_done waits for b"
    );
    assert_eq!(
        states["any"],
        ExecutionState::Pending,
        "one_success waits for b"
    );
    store
        .attempt_complete(&ended(&roots["b"], NextStep::Succeeded, None))
        .await
        .expect("b succeeds");
    let after_b = run_of(&*store, &run.id).await;
    let states: BTreeMap<&str, ExecutionState> = task_states(&after_b).into_iter().collect();
    assert_eq!(states["quiet"], ExecutionState::Skipped);
    assert_eq!(states["cleanup"], ExecutionState::Queued);
    assert_eq!(states["any"], ExecutionState::Queued);
    let rest = claim_tasks(&*store).await;
    assert_eq!(
        rest.keys().collect::<Vec<_>>(),
        vec!["alert", "any", "cleanup"]
    );
    for c in rest.values() {
        assert_eq!(run_of(&*store, &run.id).await.state, RunState::Running);
        store
            .attempt_complete(&ended(c, NextStep::Succeeded, None))
            .await
            .expect("complete");
    }
    let done = run_of(&*store, &run.id).await;
    assert_eq!(
        done.state,
        RunState::Failed,
        "a died: {:?}",
        task_states(&done)
    );
}

/// A completion refused as stale releases nothing (W3); the current attempt's does.
pub async fn a_stale_completion_releases_nothing(h: Harness) {
    let clock = Arc::new(ManualClock::new(t0()));
    let store = h.open(clock.clone()).await;
    let wf = create_workflow(
        &*store,
        "fenced",
        json!({"tasks": [
            {"name": "a", "target": http("a")},
            {"name": "b", "depends_on": ["a"], "target": http("b")}
        ]}),
    )
    .await;
    let run = store
        .run_create(&manual_run(&wf, t0(), json!({})))
        .await
        .expect("create run");
    let first = claim_tasks(&*store).await.remove("a").expect("a");
    // Its worker goes silent; the lease lapses; the reaper puts attempt 2 in its place.
    clock.advance(SignedDuration::from_secs(31));
    let mut reap = ended(&first, NextStep::RetryAfter(Dur::ZERO), None);
    reap.outcome = AttemptOutcome::LeaseLapsed;
    reap.only_if_lapsed = true;
    store.attempt_complete(&reap).await.expect("reap");
    let second = claim_tasks(&*store).await.remove("a").expect("a again");
    assert_eq!(second.attempt, 2);
    assert!(matches!(
        store
            .attempt_complete(&ended(&first, NextStep::Succeeded, None))
            .await,
        Err(Error::StaleFence(_))
    ));
    assert_eq!(
        task_states(&run_of(&*store, &run.id).await)[1],
        ("b", ExecutionState::Pending),
        "a stale completion released b"
    );
    store
        .attempt_complete(&ended(&second, NextStep::Succeeded, None))
        .await
        .expect("current attempt");
    assert_eq!(
        task_states(&run_of(&*store, &run.id).await)[1],
        ("b", ExecutionState::Queued)
    );
}

/// A run's cancel ends every unfinished task, records the running attempt `cancelled`, and
/// nothing of the run starts or is released afterwards, not even by the late completion of
/// the attempt that was running (W5); a second cancel is a conflict.
pub async fn a_cancelled_run_starts_nothing_more(h: Harness) {
    let clock = Arc::new(ManualClock::new(t0()));
    let store = h.open(clock.clone()).await;
    let wf = create_workflow(
        &*store,
        "cancelled",
        json!({"tasks": [
            {"name": "a", "target": http("a")},
            {"name": "side", "target": http("side")},
            {"name": "b", "depends_on": ["a"], "target": http("b")},
            {"name": "alert", "depends_on": ["a"], "trigger_rule": "one_failed", "target": http("alert")}
        ]}),
    )
    .await;
    let run = store
        .run_create(&manual_run(&wf, t0(), json!({})))
        .await
        .expect("create run");
    let a = store
        .execution_claim(&claim("w", 1))
        .await
        .expect("claim")
        .remove(0);
    let cancelled = store.run_cancel("ns", &run.id).await.expect("cancel");
    assert_eq!(cancelled.state, RunState::Cancelled);
    assert!(
        cancelled
            .tasks
            .iter()
            .all(|t| t.state == ExecutionState::Cancelled),
        "{:?}",
        task_states(&cancelled)
    );
    assert!(matches!(
        store
            .attempt_complete(&ended(&a, NextStep::Succeeded, None))
            .await,
        Err(Error::StaleFence(_))
    ));
    assert!(
        store
            .execution_claim(&claim("w", 10))
            .await
            .expect("claim")
            .is_empty()
    );
    let read = store
        .execution_get("ns", &a.id)
        .await
        .expect("get")
        .expect("a");
    assert_eq!(read.attempts[0].outcome, Some(AttemptOutcome::Cancelled));
    assert!(matches!(
        store.run_cancel("ns", &run.id).await,
        Err(Error::Conflict(_))
    ));
    assert!(matches!(
        store.run_cancel("ns", "no-such-run").await,
        Err(Error::NotFound(_))
    ));
}

/// Cancelling one task is an ending like any other: its downstream is decided at once.
pub async fn cancelling_a_task_releases_its_downstream(h: Harness) {
    let clock = Arc::new(ManualClock::new(t0()));
    let store = h.open(clock.clone()).await;
    let wf = create_workflow(
        &*store,
        "one-task",
        json!({"tasks": [
            {"name": "a", "target": http("a")},
            {"name": "b", "depends_on": ["a"], "target": http("b")},
            {"name": "alert", "depends_on": ["a"], "trigger_rule": "one_failed", "target": http("alert")}
        ]}),
    )
    .await;
    let run = store
        .run_create(&manual_run(&wf, t0(), json!({})))
        .await
        .expect("create run");
    store
        .execution_cancel("ns", &run.tasks[0].execution_id)
        .await
        .expect("cancel a");
    let read = run_of(&*store, &run.id).await;
    assert_eq!(
        task_states(&read),
        vec![
            ("a", ExecutionState::Cancelled),
            ("b", ExecutionState::UpstreamFailed),
            ("alert", ExecutionState::Queued)
        ]
    );
    // A task is re-run with its run, not re-driven alone.
    let b = &read.tasks[1].execution_id;
    assert!(matches!(
        store.execution_redrive("ns", b, 1).await,
        Err(Error::Conflict(_))
    ));
}

/// Retry from failure resets the failed tasks and their downstream, keeping their execution
/// ids and numbering attempts on; succeeded tasks keep their state and output.
pub async fn retry_from_failure_keeps_ids_and_numbers_attempts_on(h: Harness) {
    let clock = Arc::new(ManualClock::new(t0()));
    let store = h.open(clock.clone()).await;
    let wf = create_workflow(
        &*store,
        "retry",
        json!({"tasks": [
            {"name": "a", "output": "json", "target": http("a")},
            {"name": "b", "depends_on": ["a"], "retry": {"max_attempts": 1},
             "target": http("b/{{ tasks.a.output.n }}")},
            {"name": "c", "depends_on": ["b"], "target": http("c")}
        ]}),
    )
    .await;
    let run = store
        .run_create(&manual_run(&wf, t0(), json!({})))
        .await
        .expect("create run");
    assert!(matches!(
        store.run_retry("ns", &run.id, &[]).await,
        Err(Error::Conflict(_))
    ));
    let a = claim_tasks(&*store).await.remove("a").expect("a");
    store
        .attempt_complete(&ended(&a, NextStep::Succeeded, Some(json!({"n": 1}))))
        .await
        .expect("a");
    let b = claim_tasks(&*store).await.remove("b").expect("b");
    store
        .attempt_complete(&ended(&b, NextStep::Dead, None))
        .await
        .expect("b dies");
    let failed = run_of(&*store, &run.id).await;
    assert_eq!(failed.state, RunState::Failed);
    assert_eq!(failed.tasks[2].state, ExecutionState::UpstreamFailed);
    let retried = store.run_retry("ns", &run.id, &[]).await.expect("retry");
    assert_eq!(retried.state, RunState::Running);
    assert_eq!(
        task_states(&retried),
        vec![
            ("a", ExecutionState::Succeeded),
            ("b", ExecutionState::Queued),
            ("c", ExecutionState::Pending)
        ]
    );
    assert_eq!(retried.tasks[0].output, Some(json!({"n": 1})));
    let b2 = claim_tasks(&*store).await.remove("b").expect("b again");
    assert_eq!(b2.id, b.id, "the same execution");
    assert_eq!(b2.attempt, 2, "attempts numbered on");
    assert_eq!(url_of(&b2), "http://127.0.0.1:9/b/1");
    store
        .attempt_complete(&ended(&b2, NextStep::Succeeded, None))
        .await
        .expect("b");
    let c = claim_tasks(&*store).await.remove("c").expect("c");
    store
        .attempt_complete(&ended(&c, NextStep::Succeeded, None))
        .await
        .expect("c");
    assert_eq!(run_of(&*store, &run.id).await.state, RunState::Succeeded);
    // Named tasks are re-run with their downstream whatever their state.
    let again = store
        .run_retry("ns", &run.id, &["b".to_string()])
        .await
        .expect("retry b");
    assert_eq!(
        task_states(&again),
        vec![
            ("a", ExecutionState::Succeeded),
            ("b", ExecutionState::Queued),
            ("c", ExecutionState::Pending)
        ]
    );
    assert!(matches!(
        store.run_retry("ns", &run.id, &["zz".to_string()]).await,
        Err(Error::Conflict(_) | Error::NotFound(_))
    ));
}

/// A run executes the version it was created with, after the workflow changes (W4); a change
/// cancels only runs that have not started.
pub async fn a_run_keeps_the_version_it_was_created_with(h: Harness) {
    let clock = Arc::new(ManualClock::new(t0()));
    let store = h.open(clock.clone()).await;
    let body = |path: &str| {
        json!({"tasks": [
            {"name": "a", "target": http("a")},
            {"name": "b", "depends_on": ["a"], "target": http(path)}
        ]})
    };
    let v1 = create_workflow(&*store, "pinned", body("v1")).await;
    let run = store
        .run_create(&manual_run(&v1, t0(), json!({})))
        .await
        .expect("create run");
    let ahead = store
        .run_create(&manual_run(
            &v1,
            t0() + SignedDuration::from_secs(3600),
            json!({}),
        ))
        .await
        .expect("a run not started");
    assert_eq!(ahead.state, RunState::Scheduled);
    let v2 = store
        .workflow_write_batch(&[WorkflowWrite {
            record: WorkflowRecord {
                version: v1.version,
                ..workflow_record("ns", "pinned", body("v2"))
            },
            expected_version: Some(v1.version),
            cancel_not_started: true,
        }])
        .await
        .expect("replace")
        .remove(0);
    assert_eq!(v2.version, 2);
    assert_eq!(run_of(&*store, &ahead.id).await.state, RunState::Cancelled);
    let a = claim_tasks(&*store).await.remove("a").expect("a");
    store
        .attempt_complete(&ended(&a, NextStep::Succeeded, None))
        .await
        .expect("a");
    let b = claim_tasks(&*store).await.remove("b").expect("b");
    assert_eq!(url_of(&b), "http://127.0.0.1:9/v1");
    assert_eq!(run_of(&*store, &run.id).await.workflow_version, 1);
    // A run of a version that is no longer current is refused.
    assert!(matches!(
        store.run_create(&manual_run(&v1, t0(), json!({}))).await,
        Err(Error::StaleVersion { .. })
    ));
}

/// `skip` records a run due while another is unfinished as `skipped`, with no tasks;
/// `replace` cancels the unfinished run and starts the new one.
pub async fn concurrency_policies_act_on_runs(h: Harness) {
    let clock = Arc::new(ManualClock::new(t0()));
    let store = h.open(clock.clone()).await;
    let skip = create_workflow(
        &*store,
        "skipper",
        json!({"concurrency_policy": "skip", "tasks": [{"name": "a", "target": http("a")}]}),
    )
    .await;
    let first = store
        .run_create(&manual_run(&skip, t0(), json!({})))
        .await
        .expect("first");
    let second = store
        .run_create(&manual_run(&skip, t0(), json!({})))
        .await
        .expect("second");
    assert_eq!(first.state, RunState::Running);
    assert_eq!(second.state, RunState::Skipped);
    assert!(second.tasks.is_empty());
    // A retry is judged by the policy too: not while another run is unfinished.
    let done = store
        .run_create(&manual_run(&skip, t0(), json!({})))
        .await
        .expect("third");
    assert_eq!(done.state, RunState::Skipped);
    store
        .run_cancel("ns", &first.id)
        .await
        .expect("cancel first");
    let again = store
        .run_create(&manual_run(&skip, t0(), json!({})))
        .await
        .expect("a run now that none is unfinished");
    assert_eq!(again.state, RunState::Running);
    assert!(matches!(
        store.run_retry("ns", &first.id, &[]).await,
        Err(Error::Conflict(_))
    ));
    let replace = create_workflow(
        &*store,
        "replacer",
        json!({"concurrency_policy": "replace", "tasks": [{"name": "a", "target": http("a")}]}),
    )
    .await;
    let old = store
        .run_create(&manual_run(&replace, t0(), json!({})))
        .await
        .expect("old");
    let new = store
        .run_create(&manual_run(&replace, t0(), json!({})))
        .await
        .expect("new");
    assert_eq!(run_of(&*store, &old.id).await.state, RunState::Cancelled);
    assert_eq!(new.state, RunState::Running);
    // Retrying the replaced run replaces the unfinished one in turn.
    let back = store
        .run_retry("ns", &old.id, &[])
        .await
        .expect("retry old");
    assert_eq!(back.state, RunState::Running);
    assert_eq!(run_of(&*store, &new.id).await.state, RunState::Cancelled);
    let new = back;
    // Deleting a workflow cancels its unfinished runs; history is kept.
    store
        .workflow_delete("ns", "replacer", None)
        .await
        .expect("delete");
    assert_eq!(run_of(&*store, &new.id).await.state, RunState::Cancelled);
    // A run of a deleted workflow stays as it ended.
    assert!(matches!(
        store.run_retry("ns", &new.id, &[]).await,
        Err(Error::Conflict(_))
    ));
}

/// A task whose template path is missing when it is released fails for good naming the
/// path, and its downstream is decided as for any failure.
pub async fn a_missing_template_path_fails_the_task_naming_it(h: Harness) {
    let clock = Arc::new(ManualClock::new(t0()));
    let store = h.open(clock.clone()).await;
    let wf = create_workflow(
        &*store,
        "render",
        json!({"tasks": [
            {"name": "a", "output": "json", "target": http("a")},
            {"name": "b", "depends_on": ["a"], "target": http("b/{{ tasks.a.output.id }}")},
            {"name": "alert", "depends_on": ["b"], "trigger_rule": "one_failed", "target": http("alert")}
        ]}),
    )
    .await;
    let run = store
        .run_create(&manual_run(&wf, t0(), json!({})))
        .await
        .expect("create run");
    let a = claim_tasks(&*store).await.remove("a").expect("a");
    store
        .attempt_complete(&ended(&a, NextStep::Succeeded, Some(json!({"other": 1}))))
        .await
        .expect("a");
    let read = run_of(&*store, &run.id).await;
    assert_eq!(
        task_states(&read),
        vec![
            ("a", ExecutionState::Succeeded),
            ("b", ExecutionState::Failed),
            ("alert", ExecutionState::Queued)
        ]
    );
    let b = store
        .execution_get("ns", &read.tasks[1].execution_id)
        .await
        .expect("get")
        .expect("b");
    let error = b.attempts[0].error.clone().unwrap_or_default();
    assert!(error.contains("tasks.a.output.id is missing"), "{error}");
}

/// Two processes creating the run of one slot at once make one run with one execution per
/// task (W1).
pub async fn one_run_per_slot_from_two_processes(h: Harness) {
    let clock = Arc::new(ManualClock::new(t0()));
    let one = h.open(clock.clone()).await;
    let two = h.another_process(clock.clone()).await;
    let wf = create_workflow(
        &*one,
        "slotted",
        json!({"tasks": [
            {"name": "a", "target": http("a")},
            {"name": "b", "depends_on": ["a"], "target": http("b")}
        ]}),
    )
    .await;
    let slot = t0();
    let scheduled = |n: &WorkflowRecord| NewRun {
        id: sundial_core::ids::slot_run_id(&n.uid, slot),
        trigger: Trigger::Schedule,
        ..manual_run(n, slot, json!({}))
    };
    let (first, second) = (scheduled(&wf), scheduled(&wf));
    let (r1, r2) = tokio::join!(one.run_create(&first), two.run_create(&second));
    let ids: Vec<String> = [r1, r2]
        .into_iter()
        .filter_map(|r| match r {
            Ok(run) => Some(run.id),
            // The loser of a race may be told to try again; it must not create a second run.
            Err(e) if e.is_retryable() => None,
            Err(e) => panic!("run_create: {e}"),
        })
        .collect();
    assert!(!ids.is_empty());
    assert!(
        ids.windows(2).all(|w| w[0] == w[1]),
        "two runs for one slot: {ids:?}"
    );
    let again = one.run_create(&scheduled(&wf)).await.expect("again");
    assert_eq!(again.id, ids[0]);
    let runs = one
        .run_list(&crate::RunListQuery {
            namespace: "ns".into(),
            workflow: Some("slotted".into()),
            limit: 10,
            ..Default::default()
        })
        .await
        .expect("list runs");
    assert_eq!(runs.len(), 1);
    let all = one
        .execution_list(&ExecutionListQuery {
            namespace: "ns".into(),
            limit: 100,
            ..Default::default()
        })
        .await
        .expect("executions");
    assert_eq!(all.len(), 2, "one execution per task");
}

/// A workflow's trigger with a stale shard epoch writes nothing; with the current one it
/// advances the workflow and creates the slot's run once, however often it is repeated.
pub async fn a_workflow_trigger_is_fenced_and_idempotent(h: Harness) {
    let store = h.open(Arc::new(ManualClock::new(t0()))).await;
    let mut record = workflow_record(
        "ns",
        "timed",
        json!({"schedule": {"every": "10s"}, "tasks": [{"name": "a", "target": http("a")}]}),
    );
    record.next_slot_at = Some(t0());
    record.next_fire_at = Some(t0());
    let wf = store
        .workflow_write_batch(&[WorkflowWrite {
            record,
            expected_version: None,
            cancel_not_started: true,
        }])
        .await
        .expect("create")
        .remove(0);
    let due = store
        .workflow_list_due(&crate::TriggerListDue {
            shards: vec![wf.shard],
            horizon: t0(),
            limit: 10,
        })
        .await
        .expect("due");
    assert_eq!(due.len(), 1);
    let leases = renew_leases(&*store, "n1").await.expect("leases");
    let trigger = |leases: Vec<ShardLease>| crate::WorkflowTrigger {
        node: "n1".into(),
        leases,
        uid: wf.uid.clone(),
        shard: wf.shard,
        version: wf.version,
        expected_next_slot: t0(),
        next_slot_at: Some(t0() + SignedDuration::from_secs(10)),
        next_fire_at: Some(t0() + SignedDuration::from_secs(10)),
        runs: vec![NewRun {
            id: sundial_core::ids::slot_run_id(&wf.uid, t0()),
            trigger: Trigger::Schedule,
            ..manual_run(&wf, t0(), json!({}))
        }],
    };
    let stale: Vec<ShardLease> = leases
        .iter()
        .map(|l| ShardLease {
            epoch: l.epoch - 1,
            ..*l
        })
        .collect();
    assert!(matches!(
        store.workflow_trigger(&trigger(stale)).await,
        Err(Error::StaleFence(_))
    ));
    let read = store
        .workflow_get("ns", "timed")
        .await
        .expect("get")
        .expect("wf");
    assert_eq!(
        read.next_slot_at,
        Some(t0()),
        "the workflow did not advance"
    );
    assert_eq!(
        store
            .workflow_trigger(&trigger(leases.clone()))
            .await
            .expect("trigger"),
        1
    );
    // The same commit again (a retry after a lost acknowledgement) writes nothing.
    assert_eq!(
        store
            .workflow_trigger(&trigger(leases))
            .await
            .expect("again"),
        0
    );
    let runs = store
        .run_list(&crate::RunListQuery {
            namespace: "ns".into(),
            workflow: Some("timed".into()),
            limit: 10,
            ..Default::default()
        })
        .await
        .expect("runs");
    assert_eq!(runs.len(), 1);
    assert_eq!(runs[0].trigger, Trigger::Schedule);
}

/// A run past its `run_timeout` by the store's clock fails: its running task is stopped
/// (recorded `cancelled`, its late completion refused) and its pending tasks cancelled.
pub async fn a_run_past_its_timeout_fails_and_stops_its_tasks(h: Harness) {
    let clock = Arc::new(ManualClock::new(t0()));
    let store = h.open(clock.clone()).await;
    let wf = create_workflow(
        &*store,
        "slow",
        json!({"run_timeout": "10s", "tasks": [
            {"name": "a", "target": http("a")},
            {"name": "b", "depends_on": ["a"], "target": http("b")}
        ]}),
    )
    .await;
    let run = store
        .run_create(&manual_run(&wf, t0(), json!({})))
        .await
        .expect("create run");
    let a = claim_tasks(&*store).await.remove("a").expect("a");
    clock.advance(SignedDuration::from_secs(9));
    assert_eq!(store.run_expire(10).await.expect("expire"), 0);
    clock.advance(SignedDuration::from_secs(2));
    assert_eq!(store.run_expire(10).await.expect("expire"), 1);
    let read = run_of(&*store, &run.id).await;
    assert_eq!(read.state, RunState::Failed);
    assert_eq!(
        task_states(&read),
        vec![
            ("a", ExecutionState::Cancelled),
            ("b", ExecutionState::Cancelled)
        ]
    );
    assert!(matches!(
        store
            .attempt_complete(&ended(&a, NextStep::Succeeded, None))
            .await,
        Err(Error::StaleFence(_))
    ));
    assert_eq!(store.run_expire(10).await.expect("again"), 0);
}
