//! Checks of executions and history: cancel and re-drive, paging.

use super::*;

/// Cancel, then re-drive: terminal states are final except dead/failed by re-drive.
pub async fn cancel_and_redrive_follow_the_state_machine(h: Harness) {
    let (_clock, store, e) = one_claimed(h).await;
    let done = AttemptComplete {
        attempt: AttemptRef {
            id: e.id.clone(),
            attempt: 1,
        },
        outcome: AttemptOutcome::TransientFailure,
        status_code: Some(503),
        error: Some("HTTP 503".into()),
        detail: None,
        next: NextStep::Dead,
        only_if_lapsed: false,
        output: None,
    };
    store.attempt_complete(&done).await.expect("dead");
    let dead = in_state(&*store, "ns", ExecutionState::Dead).await;
    assert_eq!(dead.len(), 1);
    assert!(matches!(
        store.execution_cancel("ns", &e.id).await,
        Err(Error::Conflict(_))
    ));
    let redriven = store
        .execution_redrive("ns", &e.id, 2)
        .await
        .expect("redrive");
    assert_eq!(
        (redriven.state, redriven.max_attempts),
        (ExecutionState::Queued, 3)
    );
    let again = store
        .execution_claim(&claim("w1", 1))
        .await
        .expect("claim")
        .remove(0);
    assert_eq!((again.id.as_str(), again.attempt), (e.id.as_str(), 2));
    let cancelled = store
        .execution_cancel("ns", &e.id)
        .await
        .expect("cancel running");
    assert_eq!(cancelled.state, ExecutionState::Cancelled);
    assert_eq!(
        cancelled.attempts[1].outcome,
        Some(AttemptOutcome::Cancelled)
    );
    assert!(matches!(
        store
            .attempt_heartbeat(&AttemptRef {
                id: e.id.clone(),
                attempt: 2
            })
            .await,
        Err(Error::StaleFence(_))
    ));
    assert!(matches!(
        store.execution_redrive("ns", &e.id, 1).await,
        Err(Error::Conflict(_))
    ));
    assert!(matches!(
        store.execution_redrive("ns", "nope", 1).await,
        Err(Error::NotFound(_))
    ));
}

/// Execution history pages newest first without gaps or repeats.
pub async fn execution_history_pages_newest_first(h: Harness) {
    let store = h.open(Arc::new(ManualClock::new(t0()))).await;
    let job = create(&*store, "ns", "a").await;
    let slots: Vec<Timestamp> = (0..7)
        .map(|i| t0() + SignedDuration::from_secs(10 * i))
        .collect();
    trigger(&*store, "n1", &job, &slots).await.expect("trigger");
    let seen: Vec<Timestamp> = history_in_pages(&*store, Some("a"), None, 3)
        .await
        .iter()
        .map(|e| e.scheduled_at)
        .collect();
    let mut expected = slots.clone();
    expected.reverse();
    assert_eq!(seen, expected);
}

/// Executions that share a slot time (manual runs started in the same millisecond) page in
/// `id` order, newest first, without gaps or repeats, in the job's history and in the
/// namespace's: the page token's `(scheduled_at, id)` bound holds inside one slot time.
pub async fn history_pages_through_executions_sharing_a_slot_time(h: Harness) {
    let store = h.open(Arc::new(ManualClock::new(t0()))).await;
    let job = create(&*store, "ns", "a").await;
    let runs: Vec<NewExecution> = (0..5)
        .map(|_| NewExecution {
            id: uuid::Uuid::now_v7().to_string(),
            trigger: Trigger::Manual,
            ..execution(&job, t0())
        })
        .collect();
    // Written in the reverse of their ids' order, so that no order of writing stands in for
    // the order of ids.
    for run in runs.iter().rev() {
        store.execution_insert(run).await.expect("manual run");
    }
    let mut ids: Vec<String> = runs.into_iter().map(|r| r.id).collect();
    ids.sort();
    ids.reverse();
    for job_filter in [Some("a"), None] {
        let seen: Vec<String> = history_in_pages(&*store, job_filter, None, 2)
            .await
            .into_iter()
            .map(|e| e.id)
            .collect();
        assert_eq!(seen, ids, "listing with job filter {job_filter:?}");
    }
}

/// The dead letters of a namespace page newest slot first through the dead-letter index,
/// without gaps or repeats, and only dead executions are in them.
pub async fn dead_letters_page_newest_first(h: Harness) {
    let clock = Arc::new(ManualClock::new(t0()));
    let store = h.open(clock.clone()).await;
    let job = create(&*store, "ns", "a").await;
    let slots: Vec<Timestamp> = (0..5)
        .map(|i| t0() - SignedDuration::from_secs(10 * i))
        .collect();
    trigger(&*store, "n1", &job, &slots).await.expect("trigger");
    let claimed = store
        .execution_claim(&claim("w1", 10))
        .await
        .expect("claim");
    assert_eq!(claimed.len(), 5);
    // Four dead, one succeeded: the succeeded one is in no page.
    let completions: Vec<AttemptComplete> = claimed
        .iter()
        .enumerate()
        .map(|(i, e)| AttemptComplete {
            next: if i == 2 {
                NextStep::Succeeded
            } else {
                NextStep::Dead
            },
            ..complete_ok(&e.id, e.attempt)
        })
        .collect();
    let applied = store
        .attempt_complete_batch(&completions)
        .await
        .expect("complete");
    assert!(applied.iter().all(|a| *a));
    let mut expected: Vec<(Timestamp, String)> = claimed
        .iter()
        .enumerate()
        .filter(|(i, _)| *i != 2)
        .map(|(_, e)| (e.scheduled_at, e.id.clone()))
        .collect();
    expected.sort();
    expected.reverse();
    let pages = history_in_pages(&*store, None, Some(ExecutionState::Dead), 3).await;
    assert!(pages.iter().all(|e| e.state == ExecutionState::Dead));
    let seen: Vec<(Timestamp, String)> =
        pages.into_iter().map(|e| (e.scheduled_at, e.id)).collect();
    assert_eq!(seen, expected);
}

/// Every execution of namespace `ns` (of `job` only, in `state` only, when given), read page
/// after page of `limit` with the page token each page ends with, until a short page.
async fn history_in_pages(
    store: &dyn Store,
    job: Option<&str>,
    state: Option<ExecutionState>,
    limit: u32,
) -> Vec<ExecutionRecord> {
    let mut seen = Vec::new();
    let mut before = None;
    loop {
        let page = store
            .execution_list(&ExecutionListQuery {
                namespace: "ns".into(),
                job: job.map(str::to_owned),
                state,
                before: before.clone(),
                limit,
            })
            .await
            .expect("page");
        let short = page.len() < limit as usize;
        before = page.last().map(|e| (e.scheduled_at, e.id.clone()));
        seen.extend(page);
        if short {
            return seen;
        }
    }
}
