//! Checks of attempts and completion: attempt-number fencing, heartbeats and lapsed leases.

use super::*;

/// A completion carrying a stale attempt number is refused and changes nothing (docs/guarantees.md#g3-fencing).
pub async fn a_stale_completion_is_rejected(h: Harness) {
    let (clock, store, first) = one_claimed(h).await;
    // Worker 1 goes silent; its lease lapses; the reaper requeues the execution.
    clock.advance(SignedDuration::from_secs(31));
    let lapsed = store.attempt_list_lapsed(10).await.expect("lapsed");
    assert_eq!(lapsed.len(), 1);
    store
        .attempt_complete(&reap_lapsed(&first.id, 1))
        .await
        .expect("reap");
    let second = store
        .execution_claim(&claim("w2", 1))
        .await
        .expect("claim")
        .remove(0);
    assert_eq!(second.attempt, 2);
    // Worker 1 wakes up and reports success for attempt 1: refused.
    let stale = AttemptComplete {
        attempt: AttemptRef {
            id: first.id.clone(),
            attempt: 1,
        },
        outcome: AttemptOutcome::Succeeded,
        status_code: Some(200),
        error: None,
        detail: None,
        next: NextStep::Succeeded,
        only_if_lapsed: false,
        output: None,
    };
    assert!(matches!(
        store.attempt_complete(&stale).await,
        Err(Error::StaleFence(_))
    ));
    assert!(matches!(
        store
            .attempt_heartbeat(&AttemptRef {
                id: first.id.clone(),
                attempt: 1
            })
            .await,
        Err(Error::StaleFence(_))
    ));
    let read = store
        .execution_get("ns", &first.id)
        .await
        .expect("get")
        .expect("present");
    assert_eq!((read.state, read.attempt), (ExecutionState::Running, 2));
    assert_eq!(read.attempts[0].outcome, Some(AttemptOutcome::LeaseLapsed));
    // Attempt 2 completes.
    let current = AttemptComplete {
        attempt: AttemptRef {
            id: first.id.clone(),
            attempt: 2,
        },
        ..stale
    };
    store.attempt_complete(&current).await.expect("complete");
    let read = store
        .execution_get("ns", &first.id)
        .await
        .expect("get")
        .expect("present");
    assert_eq!(read.state, ExecutionState::Succeeded);
    assert_eq!(read.attempts.len(), 2);
    assert_eq!(read.attempts[1].status_code, Some(200));
}

/// A worker's completion that arrives after its lease lapsed, before the reaper ran, is refused
/// and changes nothing; the reaper's then settles the attempt (docs/guarantees.md#g3-fencing).
pub async fn a_completion_after_its_lease_lapsed_is_refused(h: Harness) {
    let (clock, store, e) = one_claimed(h).await;
    let attempt = AttemptRef {
        id: e.id.clone(),
        attempt: 1,
    };
    let late = complete_ok(&e.id, 1);
    // At the lease's last millisecond the completion would still apply; one past it, not.
    clock.advance(SignedDuration::from_millis(30_001));
    assert!(matches!(
        store.attempt_complete(&late).await,
        Err(Error::StaleFence(_))
    ));
    assert_eq!(
        store
            .attempt_complete_batch(std::slice::from_ref(&late))
            .await
            .expect("batch"),
        vec![false]
    );
    let read = store
        .execution_get("ns", &e.id)
        .await
        .expect("get")
        .expect("present");
    assert_eq!((read.state, read.attempt), (ExecutionState::Running, 1));
    assert!(read.attempts.iter().all(|a| a.outcome.is_none()));
    // The reaper's completion applies: the attempt is settled as lapsed, due again now.
    store
        .attempt_complete(&reap_lapsed(&attempt.id, attempt.attempt))
        .await
        .expect("reap");
    let read = store
        .execution_get("ns", &e.id)
        .await
        .expect("get")
        .expect("present");
    assert_eq!(read.state, ExecutionState::RetryWait);
    assert_eq!(read.attempts[0].outcome, Some(AttemptOutcome::LeaseLapsed));
}

/// A completion at the last millisecond of its lease applies (the lease lapses after
/// `lease_expires_at`, not at it, as for the heartbeat).
pub async fn a_completion_at_its_lease_expiry_applies(h: Harness) {
    let (clock, store, e) = one_claimed(h).await;
    clock.advance(SignedDuration::from_secs(30));
    assert_eq!(e.lease_expires_at, Some(clock.now()));
    store
        .attempt_complete(&complete_ok(&e.id, 1))
        .await
        .expect("complete");
    let read = store
        .execution_get("ns", &e.id)
        .await
        .expect("get")
        .expect("present");
    assert_eq!(read.state, ExecutionState::Succeeded);
}

/// A retry is due its delay after the store's now when the completion is written, not after
/// any time the worker read (docs/guarantees.md, G5: due times are the store's): and never
/// sooner than that delay after the attempt's recorded end.
pub async fn a_retry_is_due_its_delay_after_the_completion_is_written(h: Harness) {
    let (clock, store, e) = one_claimed(h).await;
    // The attempt took 3 s; its completion reaches the store then.
    clock.advance(SignedDuration::from_secs(3));
    store
        .attempt_complete(&AttemptComplete {
            outcome: AttemptOutcome::TransientFailure,
            status_code: Some(503),
            next: NextStep::RetryAfter(Dur::from_secs(5)),
            ..complete_ok(&e.id, 1)
        })
        .await
        .expect("complete with a retry");
    let ended = store
        .execution_get("ns", &e.id)
        .await
        .expect("get")
        .expect("present");
    assert_eq!(ended.state, ExecutionState::RetryWait);
    let first_end = ended.attempts[0].finished_at.expect("attempt 1 ended");
    assert_eq!(first_end, clock.now());
    clock.advance(SignedDuration::from_millis(4_999));
    let early = store.execution_claim(&claim("w2", 1)).await.expect("claim");
    assert!(early.is_empty(), "claimed 1 ms before its retry was due");
    clock.advance(SignedDuration::from_millis(1));
    let retried = store.execution_claim(&claim("w2", 1)).await.expect("claim");
    assert_eq!(retried.len(), 1, "due 5 s after the completion was written");
    assert_eq!(retried[0].attempt, 2);
    assert_eq!(
        retried[0].started_at,
        first_end + SignedDuration::from_secs(5)
    );
}

/// A batch of heartbeats extends each live lease and refuses, each on its own, an attempt
/// that is not the running one, one that ended, and one whose lease lapsed (docs/guarantees.md#g3-fencing).
pub async fn heartbeats_in_a_batch_are_judged_each_on_its_own(h: Harness) {
    let clock = Arc::new(ManualClock::new(t0()));
    let store = h.open(clock.clone()).await;
    for name in ["a", "b", "c"] {
        let job = create(&*store, "ns", name).await;
        trigger(&*store, "n1", &job, &[t0()])
            .await
            .expect("trigger");
    }
    let mut claimed = store.execution_claim(&claim("w1", 3)).await.expect("claim");
    claimed.sort_by(|x, y| x.job.cmp(&y.job));
    let [a, b, c] = [0, 1, 2].map(|i| AttemptRef {
        id: claimed[i].id.clone(),
        attempt: claimed[i].attempt,
    });
    store
        .attempt_complete(&complete_ok(&c.id, c.attempt))
        .await
        .expect("complete c");
    assert!(
        store
            .attempt_heartbeat_batch(&[])
            .await
            .expect("empty")
            .is_empty()
    );
    clock.advance(SignedDuration::from_secs(20));
    let not_running = AttemptRef {
        id: b.id.clone(),
        attempt: b.attempt + 1,
    };
    let renewed = store
        .attempt_heartbeat_batch(&[a.clone(), not_running, c.clone()])
        .await
        .expect("heartbeats");
    assert_eq!(
        renewed,
        [
            Some(clock.now() + SignedDuration::from_secs(30)),
            None,
            None
        ]
    );
    // b's lease (from the claim) lapses at 30 s; a's, renewed at 20 s, runs to 50 s.
    clock.advance(SignedDuration::from_secs(20));
    let renewed = store
        .attempt_heartbeat_batch(&[b.clone(), a.clone()])
        .await
        .expect("heartbeats");
    assert_eq!(
        renewed,
        [None, Some(clock.now() + SignedDuration::from_secs(30))]
    );
    let lapsed: Vec<String> = store
        .attempt_list_lapsed(10)
        .await
        .expect("lapsed")
        .into_iter()
        .map(|e| e.id)
        .collect();
    assert_eq!(lapsed, [b.id]);
}

/// A heartbeat extends the lease; the reaper cannot complete an attempt whose lease is live.
pub async fn heartbeats_keep_the_lease(h: Harness) {
    let (clock, store, e) = one_claimed(h).await;
    let attempt = AttemptRef {
        id: e.id.clone(),
        attempt: 1,
    };
    clock.advance(SignedDuration::from_secs(20));
    let expiry = store.attempt_heartbeat(&attempt).await.expect("heartbeat");
    assert_eq!(expiry, clock.now() + SignedDuration::from_secs(30));
    clock.advance(SignedDuration::from_secs(20));
    assert!(
        store
            .attempt_list_lapsed(10)
            .await
            .expect("lapsed")
            .is_empty()
    );
    let reap = AttemptComplete {
        attempt,
        outcome: AttemptOutcome::LeaseLapsed,
        status_code: None,
        error: None,
        detail: None,
        next: NextStep::Dead,
        only_if_lapsed: true,
        output: None,
    };
    assert!(matches!(
        store.attempt_complete(&reap).await,
        Err(Error::StaleFence(_))
    ));
}

/// A held first attempt that got its delivery slot past its job's misfire threshold is
/// judged by the store's clock before it starts (docs/policies.md, "misfire_policy", "Late in
/// the worker"), fenced as a worker's completion: under `run_once` it runs as the episode's run
/// (`trigger: misfire`) when no later slot of its job has come, and is recorded `missed`,
/// never started, when one has; under `skip` it is `missed`; one on time by the store's clock
/// starts as it is. Its attempt number never changes, and a second judgement agrees.
pub async fn a_held_attempt_that_starts_late_is_judged_by_its_misfire_policy(h: Harness) {
    use crate::LateVerdict::{Missed, Stale, Start};
    use sundial_core::job::MisfirePolicy;
    let clock = Arc::new(ManualClock::new(t0()));
    let store = h.open(clock.clone()).await;
    let lease = store
        .worker_lease_acquire("w1", Dur::from_secs(30))
        .await
        .expect("lease");
    let fire = t0() + SignedDuration::from_millis(500);
    let mut triggers = Vec::new();
    for (name, policy) in [
        ("once", MisfirePolicy::RunOnce),
        ("later", MisfirePolicy::RunOnce),
        ("skip", MisfirePolicy::Skip),
        ("on-time", MisfirePolicy::Skip),
    ] {
        let mut record = job_record("ns", name);
        record.spec.misfire_policy = policy;
        let write = JobWrite {
            record,
            expected_version: None,
            pending: PendingExecutions::Keep,
        };
        let job = store.job_write(&write).await.expect("create");
        // `later` has a second slot 10 s on, left to wait for a claim; every job's next slot
        // is an hour away.
        let mut slots = vec![execution(&job, fire)];
        if name == "later" {
            slots.push(execution(&job, fire + SignedDuration::from_secs(10)));
        }
        let next = Some(t0() + SignedDuration::from_secs(3600));
        triggers.push(job_trigger(&job, t0(), next, slots));
    }
    let commit = TriggerCommit {
        node: "n1".into(),
        leases: renew_leases(&*store, "n1").await.expect("leases"),
        jobs: triggers,
        handoff: None,
    };
    store.trigger_commit(&commit).await.expect("trigger");
    let mut held = store
        .execution_claim(&ExecutionClaim {
            ahead_ms: 1000,
            epoch: Some(lease.epoch),
            ..claim("w1", 10)
        })
        .await
        .expect("claim ahead");
    held.sort_by(|a, b| a.job.cmp(&b.job));
    let names: Vec<&str> = held.iter().map(|e| e.job.as_str()).collect();
    assert_eq!(
        names,
        ["later", "on-time", "once", "skip"],
        "each first slot, claimed ahead"
    );
    assert!(held.iter().all(|e| e.trigger == Trigger::Schedule));
    let refs: Vec<AttemptRef> = held
        .iter()
        .map(|e| AttemptRef {
            id: e.id.clone(),
            attempt: e.attempt,
        })
        .collect();

    // By the store's clock 30 s late: on time, whatever the worker thought.
    clock.set(fire + SignedDuration::from_secs(30));
    assert_eq!(
        store.attempt_judge_late(&refs[1..2]).await.expect("judge"),
        [Start]
    );
    clock.set(fire + SignedDuration::from_secs(61));
    let stale = AttemptRef {
        attempt: 2,
        ..refs[0].clone()
    };
    assert_eq!(
        store
            .attempt_judge_late(std::slice::from_ref(&stale))
            .await
            .expect("judge"),
        [Stale],
        "another attempt number is stale"
    );
    let judged = store
        .attempt_judge_late(&[refs[0].clone(), refs[2].clone(), refs[3].clone()])
        .await
        .expect("judge");
    assert_eq!(judged, [Missed, Start, Missed], "later, once, skip");
    let again = store
        .attempt_judge_late(&[refs[0].clone(), refs[2].clone(), refs[3].clone()])
        .await
        .expect("judge");
    assert_eq!(again, [Stale, Start, Stale], "the same judgement");

    let get = async |id: &str| {
        store
            .execution_get("ns", id)
            .await
            .expect("get")
            .expect("present")
    };
    let once = get(&held[2].id).await;
    assert_eq!(
        (once.state, once.trigger, once.attempt),
        (ExecutionState::Running, Trigger::Misfire, 1),
        "the episode's run, its attempt number unchanged"
    );
    for missed in [&held[0], &held[3]] {
        let record = get(&missed.id).await;
        assert_eq!(
            (record.state, record.trigger, record.attempt),
            (ExecutionState::Missed, Trigger::Misfire, 0)
        );
        assert_eq!((record.started_at, record.worker), (None, None));
        assert!(record.finished_at.is_some());
        assert!(record.attempts.is_empty(), "no attempt: it never started");
    }
    let on_time = get(&held[1].id).await;
    assert_eq!(on_time.trigger, Trigger::Schedule);
    // What was recorded is out of the queue: a claim takes `later`'s second slot only.
    store
        .worker_lease_renew(lease.epoch, Dur::from_secs(30))
        .await
        .expect("renew")
        .expect("not taken over");
    let claimed = store
        .execution_claim(&ExecutionClaim {
            epoch: Some(lease.epoch),
            ..claim("w1", 10)
        })
        .await
        .expect("claim");
    let claimed: Vec<(String, Timestamp)> = claimed
        .into_iter()
        .map(|e| (e.job, e.scheduled_at))
        .collect();
    assert_eq!(
        claimed,
        [("later".to_owned(), fire + SignedDuration::from_secs(10))]
    );

    // A worker lease taken over: what was held under it is not this worker's to judge.
    clock.advance(SignedDuration::from_secs(31));
    assert!(!store.worker_lease_reap(10).await.expect("reap").is_empty());
    assert_eq!(
        store.attempt_judge_late(&refs[2..3]).await.expect("judge"),
        [Stale]
    );
}
