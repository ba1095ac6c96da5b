//! Checks of jobs: conditional writes, listing, what a write does to not-started executions,
//! `last_execution`.

use super::*;

/// Create, conflict on re-create, replace only with the current version.
pub async fn job_writes_are_conditional_on_version(h: Harness) {
    let store = h.open(Arc::new(ManualClock::new(t0()))).await;
    let job = create(&*store, "ns", "a").await;
    assert_eq!(job.version, 1);
    let again = JobWrite {
        record: job_record("ns", "a"),
        expected_version: None,
        pending: PendingExecutions::Keep,
    };
    assert!(matches!(
        store.job_write(&again).await,
        Err(Error::Conflict(_))
    ));
    // A batch of creations with one existing job names it and writes none of the others.
    let fresh = JobWrite {
        record: job_record("ns", "fresh"),
        ..again.clone()
    };
    match store.job_write_batch(&[fresh.clone(), again.clone()]).await {
        Err(Error::Conflict(m)) => assert!(m.contains("ns/a"), "{m}"),
        other => panic!("expected a conflict, got {other:?}"),
    }
    assert!(store.job_get("ns", "fresh").await.expect("get").is_none());
    let stale = JobWrite {
        record: job.clone(),
        expected_version: Some(7),
        pending: PendingExecutions::Keep,
    };
    assert!(matches!(
        store.job_write(&stale).await,
        Err(Error::StaleVersion {
            expected: 7,
            actual: 1
        })
    ));
    let ok = JobWrite {
        record: job.clone(),
        expected_version: Some(1),
        pending: PendingExecutions::Keep,
    };
    assert_eq!(store.job_write(&ok).await.expect("replace").version, 2);
    let read = store
        .job_get("ns", "a")
        .await
        .expect("get")
        .expect("present");
    assert_eq!((read.version, read.uid), (2, job.uid));
    assert!(matches!(
        store.job_delete("ns", "a", Some(1)).await,
        Err(Error::StaleVersion { .. })
    ));
    store.job_delete("ns", "a", Some(2)).await.expect("delete");
    assert!(store.job_get("ns", "a").await.expect("get").is_none());
    assert!(matches!(
        store.job_delete("ns", "a", None).await,
        Err(Error::NotFound(_))
    ));
}

/// Listing pages by name, filters by paused and label; `job_get_many` finds a namespace's named jobs.
pub async fn job_list_pages_and_filters(h: Harness) {
    let store = h.open(Arc::new(ManualClock::new(t0()))).await;
    for name in ["e", "d", "c", "b", "a"] {
        let mut record = job_record("ns", name);
        record.spec.paused = name == "c";
        record
            .spec
            .labels
            .insert("team".into(), if name < "c" { "x" } else { "y" }.into());
        let write = JobWrite {
            record,
            expected_version: None,
            pending: PendingExecutions::Keep,
        };
        store.job_write(&write).await.expect("create");
    }
    create(&*store, "other", "z").await;
    let mut seen = Vec::new();
    let mut after = None;
    loop {
        let page = store
            .job_list(&JobListQuery {
                namespace: "ns".into(),
                after_name: after.clone(),
                limit: 2,
                ..Default::default()
            })
            .await
            .expect("list");
        seen.extend(page.iter().map(|j| j.spec.name.clone()));
        if page.len() < 2 {
            break;
        }
        after = page.last().map(|j| j.spec.name.clone());
    }
    assert_eq!(seen, ["a", "b", "c", "d", "e"]);
    let names = ["e", "a", "missing", "z"].map(String::from);
    let mut many: Vec<String> = store
        .job_get_many("ns", &names)
        .await
        .expect("get many")
        .into_iter()
        .map(|j| j.spec.name)
        .collect();
    many.sort();
    assert_eq!(
        many,
        ["a", "e"],
        "only this namespace's jobs with these names"
    );
    let paused = store
        .job_list(&JobListQuery {
            namespace: "ns".into(),
            paused: Some(true),
            limit: 10,
            ..Default::default()
        })
        .await
        .expect("list");
    assert_eq!(paused.len(), 1);
    let labelled = store
        .job_list(&JobListQuery {
            namespace: "ns".into(),
            label: Some(("team".into(), "x".into())),
            limit: 10,
            ..Default::default()
        })
        .await
        .expect("list");
    assert_eq!(
        labelled
            .iter()
            .map(|j| j.spec.name.as_str())
            .collect::<Vec<_>>(),
        ["a", "b"]
    );
}

/// A job's `last_execution` is its latest slot whose fire time has passed: slots written
/// ahead of their fire time (the scheduler's lookahead) do not count until then, and a
/// recreated job (a new incarnation of the name) does not show the old one's.
pub async fn the_last_execution_is_the_latest_slot_fired(h: Harness) {
    let clock = Arc::new(ManualClock::new(t0()));
    let store = h.open(clock.clone()).await;
    let job = create(&*store, "ns", "a").await;
    let slots = [
        t0(),
        t0() + SignedDuration::from_secs(10),
        t0() + SignedDuration::from_secs(20),
    ];
    assert_eq!(
        trigger(&*store, "n1", &job, &slots).await.expect("trigger"),
        3
    );
    let last = |at: Timestamp| {
        let store = store.clone();
        let clock = clock.clone();
        async move {
            clock.set(at);
            store
                .job_get("ns", "a")
                .await
                .expect("get")
                .expect("present")
                .last_execution
                .map(|e| e.scheduled_at)
        }
    };
    assert_eq!(last(t0() - SignedDuration::from_secs(1)).await, None);
    assert_eq!(last(t0()).await, Some(slots[0]));
    assert_eq!(
        last(t0() + SignedDuration::from_secs(15)).await,
        Some(slots[1])
    );
    assert_eq!(
        last(t0() + SignedDuration::from_secs(60)).await,
        Some(slots[2])
    );
    store.job_delete("ns", "a", None).await.expect("delete");
    create(&*store, "ns", "a").await;
    assert_eq!(last(t0() + SignedDuration::from_secs(60)).await, None);
}

/// A schedule change cancels not-started executions; other changes rewrite them; delete
/// cancels them and keeps history.
pub async fn job_writes_steer_pending_executions(h: Harness) {
    let clock = Arc::new(ManualClock::new(t0()));
    let store = h.open(clock.clone()).await;
    let job = create(&*store, "ns", "a").await;
    trigger(&*store, "n1", &job, &[t0() + SignedDuration::from_secs(5)])
        .await
        .expect("trigger");
    let mut changed = job.clone();
    changed.spec.timeout = Dur::from_secs(99);
    let written = store
        .job_write(&JobWrite {
            record: changed.clone(),
            expected_version: Some(1),
            pending: PendingExecutions::Update,
        })
        .await
        .expect("update");
    clock.advance(SignedDuration::from_secs(5));
    let claimed = store
        .execution_claim(&claim("w", 1))
        .await
        .expect("claim")
        .remove(0);
    assert_eq!(
        claimed.run.timeout,
        Dur::from_secs(99),
        "the pending execution runs the new definition"
    );

    let inserted = trigger(
        &*store,
        "n1",
        &written,
        &[t0() + SignedDuration::from_secs(10)],
    )
    .await
    .expect("trigger");
    assert_eq!(inserted, 1);
    store.job_delete("ns", "a", None).await.expect("delete");
    let history = store
        .execution_list(&ExecutionListQuery {
            namespace: "ns".into(),
            job: Some("a".into()),
            limit: 10,
            ..Default::default()
        })
        .await
        .expect("history");
    let states: Vec<_> = history.iter().map(|e| e.state).collect();
    assert_eq!(states, [ExecutionState::Cancelled, ExecutionState::Running]);
}

/// A write that ends the not-started executions (a pause, a change of schedule): those
/// already due are recorded `cancelled`, those written ahead of a slot still to come are
/// removed — so that the job, resumed before that slot, fires it (docs/policies.md, "Pause
/// and resume").
pub async fn a_pause_removes_what_was_written_ahead_and_cancels_what_is_due(h: Harness) {
    let clock = Arc::new(ManualClock::new(t0()));
    let store = h.open(clock.clone()).await;
    let job = create(&*store, "ns", "a").await;
    let slots = [
        t0(),
        t0() + SignedDuration::from_secs(2),
        t0() + SignedDuration::from_secs(4),
    ];
    trigger(&*store, "n1", &job, &slots).await.expect("trigger");
    let mut written = store
        .execution_list(&ExecutionListQuery {
            namespace: "ns".into(),
            job: Some("a".into()),
            limit: 10,
            ..Default::default()
        })
        .await
        .expect("history");
    written.sort_by_key(|e| e.scheduled_at);
    let ids: Vec<String> = written.into_iter().map(|e| e.id).collect();
    assert_eq!(ids.len(), 3);
    let mut paused = job.clone();
    paused.spec.paused = true;
    paused.next_slot_at = None;
    paused.next_fire_at = None;
    let paused = store
        .job_write(&JobWrite {
            record: paused,
            expected_version: Some(job.version),
            pending: PendingExecutions::Cancel,
        })
        .await
        .expect("pause");
    let due = store.execution_get("ns", &ids[0]).await.expect("get");
    assert_eq!(
        due.map(|e| e.state),
        Some(ExecutionState::Cancelled),
        "the due execution is cancelled"
    );
    for id in &ids[1..] {
        assert!(
            store.execution_get("ns", id).await.expect("get").is_none(),
            "the execution written ahead of its slot is removed"
        );
    }

    clock.advance(SignedDuration::from_secs(1));
    let mut resumed = paused.clone();
    resumed.spec.paused = false;
    resumed.next_slot_at = Some(slots[1]);
    resumed.next_fire_at = Some(slots[1]);
    let resumed = store
        .job_write(&JobWrite {
            record: resumed,
            expected_version: Some(paused.version),
            pending: PendingExecutions::Cancel,
        })
        .await
        .expect("resume");
    let inserted = trigger(&*store, "n1", &resumed, &slots[1..])
        .await
        .expect("trigger");
    assert_eq!(inserted, 2, "the slots after the resume fire");
}

/// The namespaces listed are those holding a job or a workflow, each once, sorted.
pub async fn namespaces_are_listed_from_jobs_and_workflows(h: Harness) {
    let clock = Arc::new(ManualClock::new(t0()));
    let store = h.open(clock.clone()).await;
    assert!(store.namespace_list().await.expect("list").is_empty());
    for (ns, name) in [("zeta", "a"), ("alpha", "a"), ("alpha", "b"), ("mid", "x")] {
        create(&*store, ns, name).await;
    }
    store
        .workflow_write_batch(&[crate::WorkflowWrite {
            record: super::workflows::workflow_record(
                "wf-only",
                "etl",
                serde_json::json!({"tasks": [
                    {"name": "t", "target": {"type": "http", "url": "http://127.0.0.1:9/t"}}
                ]}),
            ),
            expected_version: None,
            cancel_not_started: true,
        }])
        .await
        .expect("workflow");
    assert_eq!(
        store.namespace_list().await.expect("list"),
        vec!["alpha", "mid", "wf-only", "zeta"]
    );
}
