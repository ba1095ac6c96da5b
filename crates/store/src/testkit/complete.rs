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

/// A first attempt that waited in its worker past its job's misfire threshold is given back
/// unstarted, fenced as a worker's completion is, and the next claim judges it by the job's
/// misfire policy (docs/policies.md, "misfire_policy"): under `run_once` it runs as the
/// episode's run (`trigger: misfire`) when no later slot of the job is due, and is recorded
/// `missed` when one is (which runs as an ordinary late slot); under `skip` it is `missed`.
pub async fn a_late_attempt_given_back_is_judged_by_its_misfire_policy(h: Harness) {
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
    let held = store
        .execution_claim(&ExecutionClaim {
            ahead_ms: 1000,
            epoch: Some(lease.epoch),
            ..claim("w1", 10)
        })
        .await
        .expect("claim ahead");
    assert_eq!(held.len(), 3, "each job's first slot, claimed ahead");
    assert!(held.iter().all(|e| e.trigger == Trigger::Schedule));
    clock.set(fire + SignedDuration::from_secs(60));
    assert!(
        !held.iter().any(|e| e.judged_late_at(clock.now())),
        "at the threshold, not past it"
    );
    clock.set(fire + SignedDuration::from_secs(61));
    assert!(held.iter().all(|e| e.judged_late_at(clock.now())));
    let refs: Vec<AttemptRef> = held
        .iter()
        .map(|e| AttemptRef {
            id: e.id.clone(),
            attempt: e.attempt,
        })
        .collect();
    let stale = AttemptRef {
        attempt: 2,
        ..refs[0].clone()
    };
    assert_eq!(
        store
            .attempt_give_back(std::slice::from_ref(&stale))
            .await
            .expect("give back"),
        [false],
        "another attempt number is refused"
    );
    let given = store.attempt_give_back(&refs).await.expect("give back");
    assert_eq!(given, [true, true, true]);
    let again = store.attempt_give_back(&refs).await.expect("give back");
    assert_eq!(again, [false, false, false], "given back once");
    let back = store
        .execution_get("ns", &held[0].id)
        .await
        .expect("get")
        .expect("present");
    assert_eq!(back.state, ExecutionState::Scheduled);
    assert_eq!(back.attempt, 0);
    assert_eq!(back.started_at, None);
    assert_eq!(back.worker, None);
    assert!(back.attempts.is_empty(), "no attempt row: it did not run");

    store
        .worker_lease_renew(lease.epoch, Dur::from_secs(30))
        .await
        .expect("renew")
        .expect("not taken over");
    let ran = store
        .execution_claim(&ExecutionClaim {
            epoch: Some(lease.epoch),
            ..claim("w1", 10)
        })
        .await
        .expect("claim");
    let mut ran: Vec<(String, Timestamp, u32)> = ran
        .into_iter()
        .map(|e| (e.job, e.scheduled_at, e.attempt))
        .collect();
    ran.sort();
    assert_eq!(
        ran,
        [
            ("later".to_owned(), fire + SignedDuration::from_secs(10), 1),
            ("once".to_owned(), fire, 1),
        ],
        "the latest due slot of each run_once job runs; skip runs nothing"
    );
    let once = store
        .execution_get("ns", &held[0].id)
        .await
        .expect("get")
        .expect("present");
    assert_eq!(once.trigger, Trigger::Misfire, "the episode's run");
    let mut missed: Vec<String> = in_state(&*store, "ns", ExecutionState::Missed)
        .await
        .into_iter()
        .map(|e| e.job)
        .collect();
    missed.sort();
    assert_eq!(missed, ["later", "skip"]);

    // A worker lease taken over: what was held under it is not this worker's to give back.
    let job = create(&*store, "ns", "taken").await;
    let slot = fire + SignedDuration::from_secs(100);
    trigger(&*store, "n1", &job, &[slot])
        .await
        .expect("trigger");
    clock.set(slot - SignedDuration::from_millis(500));
    let lease = store
        .worker_lease_acquire("w2", Dur::from_secs(30))
        .await
        .expect("lease");
    let taken = store
        .execution_claim(&ExecutionClaim {
            ahead_ms: 1000,
            epoch: Some(lease.epoch),
            ..claim("w2", 10)
        })
        .await
        .expect("claim ahead");
    assert_eq!(taken.len(), 1);
    clock.set(slot + SignedDuration::from_secs(61));
    assert!(!store.worker_lease_reap(10).await.expect("reap").is_empty());
    let refs = [AttemptRef {
        id: taken[0].id.clone(),
        attempt: taken[0].attempt,
    }];
    assert_eq!(
        store.attempt_give_back(&refs).await.expect("give back"),
        [false]
    );
}
