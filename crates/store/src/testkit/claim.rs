//! Checks of the claim: due and never early, one claimer, concurrency policies, catch-up
//! order, rate limits, late slots created ahead.

use super::*;

/// An execution is claimable only once due, by one claimer, and its attempt number grows.
pub async fn executions_are_claimed_once_and_never_early(h: Harness) {
    let clock = Arc::new(ManualClock::new(t0()));
    let store = h.open(clock.clone()).await;
    let job = create(&*store, "ns", "a").await;
    let slot = t0() + SignedDuration::from_secs(5);
    let mut j = job.clone();
    j.next_slot_at = Some(t0());
    trigger(&*store, "n1", &j, &[slot]).await.expect("trigger");
    assert!(
        store
            .execution_claim(&claim("w1", 10))
            .await
            .expect("claim")
            .is_empty(),
        "not due yet"
    );
    assert_eq!(store.execution_next_due().await.expect("next"), Some(slot));
    clock.advance(SignedDuration::from_secs(5));
    let first = store
        .execution_claim(&claim("w1", 10))
        .await
        .expect("claim");
    let second = store
        .execution_claim(&claim("w2", 10))
        .await
        .expect("claim");
    assert_eq!((first.len(), second.len()), (1, 0));
    assert_eq!(first[0].attempt, 1);
    assert_eq!(
        first[0].lease_expires_at,
        Some(slot + SignedDuration::from_secs(30))
    );
    let read = store
        .execution_get("ns", &first[0].id)
        .await
        .expect("get")
        .expect("present");
    assert_eq!(read.state, ExecutionState::Running);
    assert_eq!(read.attempts.len(), 1);
    let running = &read.attempts[0];
    assert_eq!((running.attempt, running.outcome), (1, None));
    assert_eq!(running.started_at, slot);
    assert!(
        !running.worker.is_empty(),
        "the running attempt names its worker"
    );
}

/// `skip`: a slot that comes due while the job runs is recorded `skipped`; the next one after
/// it finished runs.
pub async fn skip_records_a_slot_due_while_the_job_runs(h: Harness) {
    let clock = Arc::new(ManualClock::new(t0()));
    let store = h.open(clock.clone()).await;
    let job = create_with(&*store, "a", sundial_core::job::ConcurrencyPolicy::Skip).await;
    let slots: Vec<Timestamp> = (0..3)
        .map(|i| t0() + SignedDuration::from_secs(10 * i))
        .collect();
    trigger(&*store, "n1", &job, &slots).await.expect("trigger");
    let first = store
        .execution_claim(&claim("w", 10))
        .await
        .expect("claim")
        .remove(0);
    clock.advance(SignedDuration::from_secs(10));
    assert!(
        store
            .execution_claim(&claim("w", 10))
            .await
            .expect("claim")
            .is_empty(),
        "the second slot is skipped"
    );
    store
        .attempt_complete(&complete_ok(&first.id, 1))
        .await
        .expect("complete");
    clock.advance(SignedDuration::from_secs(10));
    let third = store.execution_claim(&claim("w", 10)).await.expect("claim");
    assert_eq!(third.len(), 1, "the job is idle again");
    let all = store
        .execution_list(&ExecutionListQuery {
            namespace: "ns".into(),
            limit: 10,
            ..Default::default()
        })
        .await
        .expect("list");
    let states: Vec<_> = all.iter().rev().map(|e| e.state).collect();
    assert_eq!(
        states,
        [
            ExecutionState::Succeeded,
            ExecutionState::Skipped,
            ExecutionState::Running
        ]
    );
}

/// `replace`: the running execution is cancelled — its worker is signalled — and the new one
/// is handed out.
pub async fn replace_cancels_the_running_execution(h: Harness) {
    let clock = Arc::new(ManualClock::new(t0()));
    let store = h.open(clock.clone()).await;
    let mut cancelled = store.signals().cancelled.subscribe();
    let job = create_with(&*store, "a", sundial_core::job::ConcurrencyPolicy::Replace).await;
    let slots = [t0(), t0() + SignedDuration::from_secs(10)];
    trigger(&*store, "n1", &job, &slots).await.expect("trigger");
    let first = store
        .execution_claim(&claim("w", 10))
        .await
        .expect("claim")
        .remove(0);
    clock.advance(SignedDuration::from_secs(10));
    let second = store.execution_claim(&claim("w", 10)).await.expect("claim");
    assert_eq!(second.len(), 1);
    let old = store
        .execution_get("ns", &first.id)
        .await
        .expect("get")
        .expect("present");
    assert_eq!(old.state, ExecutionState::Cancelled);
    assert_eq!(old.attempts[0].outcome, Some(AttemptOutcome::Cancelled));
    let signalled = tokio::time::timeout(std::time::Duration::from_secs(5), cancelled.recv()).await;
    assert_eq!(signalled.expect("a cancel signal").expect("open"), first.id);
    assert!(matches!(
        store.attempt_complete(&complete_ok(&first.id, 1)).await,
        Err(Error::StaleFence(_))
    ));
}

/// `replace` within one claim: a pending slot that comes due before the job's waiting retry
/// cancels the retry, and the claim hands out the slot, never the retry it cancelled (which
/// would then be running with nothing to reap it).
pub async fn replace_never_runs_what_the_same_claim_cancelled(h: Harness) {
    let clock = Arc::new(ManualClock::new(t0()));
    let store = h.open(clock.clone()).await;
    let job = create_with(&*store, "a", sundial_core::job::ConcurrencyPolicy::Replace).await;
    let slots = [t0(), t0() + SignedDuration::from_secs(2)];
    trigger(&*store, "n1", &job, &slots).await.expect("trigger");
    let retried = store
        .execution_claim(&claim("w", 10))
        .await
        .expect("claim")
        .remove(0);
    store
        .attempt_complete(&AttemptComplete {
            outcome: AttemptOutcome::TransientFailure,
            status_code: Some(503),
            next: NextStep::RetryAfter(Dur::from_secs(5)),
            ..complete_ok(&retried.id, 1)
        })
        .await
        .expect("complete with a retry");
    // Both are due now: the slot (due at t0 + 2 s) comes first, then the retry (t0 + 5 s).
    clock.advance(SignedDuration::from_secs(10));
    let claimed = store.execution_claim(&claim("w", 10)).await.expect("claim");
    assert_eq!(claimed.len(), 1, "one execution of a replace job at a time");
    assert_ne!(
        claimed[0].id, retried.id,
        "the slot replaces the retry, not the reverse"
    );
    let old = store
        .execution_get("ns", &retried.id)
        .await
        .expect("get")
        .expect("present");
    assert_eq!(old.state, ExecutionState::Cancelled);
    let running = store
        .execution_get("ns", &claimed[0].id)
        .await
        .expect("get")
        .expect("present");
    assert_eq!(running.state, ExecutionState::Running);
}

/// `skip` with a catch-up (`misfire`) episode: the catch-up executions run one after another.
pub async fn catch_up_under_skip_runs_one_after_another(h: Harness) {
    let clock = Arc::new(ManualClock::new(t0()));
    let store = h.open(clock.clone()).await;
    let job = create_with(&*store, "a", sundial_core::job::ConcurrencyPolicy::Skip).await;
    let leases = renew_leases(&*store, "n1").await.expect("leases");
    let mut catch_up: Vec<NewExecution> = (0..2)
        .map(|i| execution(&job, t0() - SignedDuration::from_secs(600 - i)))
        .collect();
    for e in &mut catch_up {
        e.trigger = Trigger::Misfire;
    }
    let commit = TriggerCommit {
        node: "n1".into(),
        leases,
        jobs: vec![job_trigger(
            &job,
            t0(),
            Some(t0() + SignedDuration::from_secs(60)),
            catch_up,
        )],
        handoff: None,
    };
    store.trigger_commit(&commit).await.expect("commit");
    let first = store.execution_claim(&claim("w", 10)).await.expect("claim");
    assert_eq!(first.len(), 1, "one catch-up at a time");
    store
        .attempt_complete(&complete_ok(&first[0].id, 1))
        .await
        .expect("complete");
    clock.advance(SignedDuration::from_millis(crate::concurrency::DEFER_MS));
    let second = store.execution_claim(&claim("w", 10)).await.expect("claim");
    assert_eq!(
        second.len(),
        1,
        "the next catch-up runs after the first, not skipped"
    );
    assert_ne!(second[0].id, first[0].id);
}

/// `skip` with a catch-up (`misfire`) episode (docs/policies.md, "misfire_policy"): the
/// catch-up executions run one after another, oldest slot first, and a slot that comes due
/// while older catch-ups still wait is `skipped` — even in the moment between two catch-ups
/// when none of them runs.
pub async fn catch_up_under_skip_skips_slots_that_come_due_meanwhile(h: Harness) {
    let clock = Arc::new(ManualClock::new(t0()));
    let store = h.open(clock.clone()).await;
    let job = create_with(&*store, "a", sundial_core::job::ConcurrencyPolicy::Skip).await;
    let leases = renew_leases(&*store, "n1").await.expect("leases");
    let mut executions: Vec<NewExecution> = (0..3)
        .map(|i| {
            let mut e = execution(&job, t0() - SignedDuration::from_secs(600 - i));
            e.trigger = Trigger::Misfire;
            e
        })
        .collect();
    let catch_up: Vec<String> = executions.iter().map(|e| e.id.clone()).collect();
    let on_time = execution(&job, t0() + SignedDuration::from_millis(700));
    executions.push(on_time.clone());
    let commit = TriggerCommit {
        node: "n1".into(),
        leases,
        jobs: vec![job_trigger(
            &job,
            t0(),
            Some(t0() + SignedDuration::from_secs(60)),
            executions,
        )],
        handoff: None,
    };
    store.trigger_commit(&commit).await.expect("commit");
    let first = store.execution_claim(&claim("w", 10)).await.expect("claim");
    let ids: Vec<&str> = first.iter().map(|c| c.id.as_str()).collect();
    assert_eq!(ids, [catch_up[0].as_str()], "the oldest catch-up first");
    store
        .attempt_complete(&complete_ok(&first[0].id, 1))
        .await
        .expect("complete");
    // The on-time slot comes due while the two younger catch-ups wait (deferred).
    clock.advance(SignedDuration::from_millis(700));
    let meanwhile = store.execution_claim(&claim("w", 10)).await.expect("claim");
    assert!(
        meanwhile.is_empty(),
        "nothing runs ahead of the waiting catch-ups: {meanwhile:?}"
    );
    let skipped = store
        .execution_get("ns", &on_time.id)
        .await
        .expect("get")
        .expect("on-time slot");
    assert_eq!(skipped.state, ExecutionState::Skipped);
    for (n, expected) in catch_up.iter().enumerate().skip(1) {
        clock.advance(SignedDuration::from_millis(crate::concurrency::DEFER_MS));
        let next = store.execution_claim(&claim("w", 10)).await.expect("claim");
        let ids: Vec<&str> = next.iter().map(|c| c.id.as_str()).collect();
        assert_eq!(ids, [expected.as_str()], "catch-up {n} runs next, alone");
        store
            .attempt_complete(&complete_ok(&next[0].id, 1))
            .await
            .expect("complete");
    }
}

/// A namespace limited to N per second gets a full bucket (a tenth of a second's worth) at
/// once, then N per second, whichever claimer asks; other namespaces are not held back.
pub async fn rate_limited_namespaces_dispatch_at_their_rate(h: Harness) {
    let clock = Arc::new(ManualClock::new(t0()));
    let store = h.open(clock.clone()).await;
    let slow = {
        let record = job_record("limited", "a");
        store
            .job_write(&JobWrite {
                record,
                expected_version: None,
                pending: PendingExecutions::Keep,
            })
            .await
            .expect("create")
    };
    let fast = create(&*store, "ns", "b").await;
    let slots: Vec<Timestamp> = (0..50)
        .map(|i| t0() - SignedDuration::from_secs(i))
        .collect();
    trigger(&*store, "n1", &slow, &slots)
        .await
        .expect("trigger");
    trigger(&*store, "n1", &fast, &[t0()])
        .await
        .expect("trigger");
    let limited = |worker: &str| ExecutionClaim {
        worker: worker.into(),
        limit: 100,
        rate_limits: [("limited".to_owned(), 100.0)].into_iter().collect(),
        ahead_ms: 0,
        epoch: None,
        on_time_first: false,
    };
    let first = store.execution_claim(&limited("w1")).await.expect("claim");
    let per_ns =
        |v: &[crate::ClaimedExecution], ns: &str| v.iter().filter(|c| c.namespace == ns).count();
    assert_eq!(
        (per_ns(&first, "limited"), per_ns(&first, "ns")),
        (10, 1),
        "a full bucket, and the other namespace unhindered"
    );
    assert!(
        store
            .execution_claim(&limited("w2"))
            .await
            .expect("claim")
            .is_empty(),
        "the bucket is shared by claimers"
    );
    clock.advance(SignedDuration::from_millis(50));
    assert_eq!(
        store
            .execution_claim(&limited("w2"))
            .await
            .expect("claim")
            .len(),
        5,
        "refilled at 100/s"
    );
    clock.advance(SignedDuration::from_secs(2));
    assert_eq!(
        store
            .execution_claim(&limited("w1"))
            .await
            .expect("claim")
            .len(),
        10,
        "never more than the bucket's depth"
    );

    // A namespace limited to less than one a second starts with a full bucket too: its
    // depth, one token, not its rate.
    let sparse = create(&*store, "sparse", "c").await;
    trigger(
        &*store,
        "n1",
        &sparse,
        &[t0() - SignedDuration::from_secs(1), t0()],
    )
    .await
    .expect("trigger");
    let sparse_claim = ExecutionClaim {
        rate_limits: [("sparse".to_owned(), 0.5)].into_iter().collect(),
        ..limited("w3")
    };
    let got = store.execution_claim(&sparse_claim).await.expect("claim");
    assert_eq!(
        per_ns(&got, "sparse"),
        1,
        "a new bucket of 0.5/s holds one token"
    );
}

/// Two claimers read the clock, and the later reading commits first (a claim's time is taken
/// before it locks the bucket): the earlier one's refill must not move the bucket's time back,
/// or the next claim is refilled for the same milliseconds twice.
pub async fn a_claim_that_read_the_clock_earlier_refills_no_time_twice(h: Harness) {
    let clock = Arc::new(ManualClock::new(t0()));
    let store = h.open(clock.clone()).await;
    let job = create(&*store, "limited", "a").await;
    let slots: Vec<Timestamp> = (0..50)
        .map(|i| t0() - SignedDuration::from_secs(i))
        .collect();
    trigger(&*store, "n1", &job, &slots).await.expect("trigger");
    let limited = ExecutionClaim {
        worker: "w".into(),
        limit: 100,
        rate_limits: [("limited".to_owned(), 100.0)].into_iter().collect(),
        ahead_ms: 0,
        epoch: None,
        on_time_first: false,
    };
    let claim_at = async |offset_ms: i64| {
        clock.set(t0() + SignedDuration::from_millis(offset_ms));
        store.execution_claim(&limited).await.expect("claim").len()
    };
    assert_eq!(claim_at(0).await, 10, "a full bucket");
    assert_eq!(claim_at(50).await, 5, "refilled for 50 ms");
    assert_eq!(
        claim_at(20).await,
        0,
        "nothing for a reading before the last refill"
    );
    assert_eq!(
        claim_at(60).await,
        1,
        "refilled for the 10 ms since the latest reading, not since the earlier one"
    );
}

/// Executions created ahead whose slots then passed while nothing could run them (a crash
/// after triggering): beyond the misfire threshold, the job's misfire policy applies.
pub async fn late_precreated_slots_follow_the_misfire_policy(h: Harness) {
    use sundial_core::job::MisfirePolicy;
    for (policy, expect_run, expect_missed) in [
        (MisfirePolicy::RunOnce, 1, 2),
        (MisfirePolicy::Skip, 0, 3),
        (MisfirePolicy::RunAll, 3, 0),
    ] {
        let clock = Arc::new(ManualClock::new(t0()));
        let store = h.open(clock.clone()).await;
        let mut record = job_record("ns", "a");
        record.spec.misfire_policy = policy;
        let job = store
            .job_write(&JobWrite {
                record,
                expected_version: None,
                pending: PendingExecutions::Keep,
            })
            .await
            .expect("create");
        let slots: Vec<Timestamp> = (0..3)
            .map(|i| t0() + SignedDuration::from_secs(10 * i))
            .collect();
        // The job's next slot is still ahead after the outage: these are its only late slots.
        let commit = TriggerCommit {
            node: "n1".into(),
            leases: renew_leases(&*store, "n1").await.expect("leases"),
            jobs: vec![job_trigger(
                &job,
                t0(),
                Some(t0() + SignedDuration::from_secs(3600)),
                slots.iter().map(|s| execution(&job, *s)).collect(),
            )],
            handoff: None,
        };
        store.trigger_commit(&commit).await.expect("trigger");
        clock.advance(SignedDuration::from_secs(600)); // every slot is far beyond the 60 s threshold
        let ran = store.execution_claim(&claim("w", 10)).await.expect("claim");
        assert_eq!(ran.len(), expect_run, "{policy:?}");
        let missed = in_state(&*store, "ns", ExecutionState::Missed).await;
        assert_eq!(missed.len(), expect_missed, "{policy:?}");
        if policy == MisfirePolicy::RunOnce {
            assert_eq!(ran[0].scheduled_at, slots[2], "the latest slot runs");
        }
    }
}

/// `run_once` after an outage that also passed the job's next slot, not yet triggered: the
/// late executions created ahead are all recorded `missed`, because the scheduler triggers
/// that next slot as the one run of the episode; running the latest of them too would run the
/// job twice for one outage.
pub async fn run_once_leaves_late_slots_to_a_later_slot_come_due(h: Harness) {
    let clock = Arc::new(ManualClock::new(t0()));
    let store = h.open(clock.clone()).await;
    let job = create(&*store, "ns", "a").await; // run_once is the default policy
    let slots: Vec<Timestamp> = (0..3)
        .map(|i| t0() + SignedDuration::from_secs(10 * i))
        .collect();
    trigger(&*store, "n1", &job, &slots).await.expect("trigger"); // next slot: t0 + 30 s
    clock.advance(SignedDuration::from_secs(600));
    let ran = store.execution_claim(&claim("w", 10)).await.expect("claim");
    assert!(ran.is_empty(), "{ran:?}");
    let missed = in_state(&*store, "ns", ExecutionState::Missed).await;
    assert_eq!(missed.len(), 3);
}

/// A claim with a window of `ahead_ms` (docs/guarantees.md, "Claim ahead").
fn claim_ahead(worker: &str, limit: u32, ahead_ms: u32) -> ExecutionClaim {
    ExecutionClaim {
        ahead_ms,
        ..claim(worker, limit)
    }
}

/// A claim ahead hands out only the executions for which nothing it decides could change
/// before their fire time (an `allow` job, no rate limit), each starting at its fire time
/// (G5 in the records); a `skip` job's and a rate-limited namespace's wait until due, and
/// nothing beyond the window is read.
pub async fn a_claim_ahead_takes_only_what_nothing_can_change_before_the_fire_time(h: Harness) {
    let clock = Arc::new(ManualClock::new(t0()));
    let store = h.open(clock.clone()).await;
    let fire = t0() + SignedDuration::from_millis(500);
    let allow = create(&*store, "ns", "a").await;
    let skip = create_with(&*store, "s", sundial_core::job::ConcurrencyPolicy::Skip).await;
    let limited = create(&*store, "limited", "l").await;
    let far = create(&*store, "ns", "far").await;
    for job in [&allow, &skip, &limited] {
        trigger(&*store, "n1", job, &[fire]).await.expect("trigger");
    }
    let far_slot = t0() + SignedDuration::from_secs(3);
    trigger(&*store, "n1", &far, &[far_slot])
        .await
        .expect("trigger");
    let with_limit = |ahead_ms| ExecutionClaim {
        rate_limits: [("limited".to_owned(), 100.0)].into_iter().collect(),
        ..claim_ahead("w", 10, ahead_ms)
    };
    assert!(
        store
            .execution_claim(&with_limit(0))
            .await
            .expect("claim")
            .is_empty(),
        "nothing is due and the claim has no window"
    );
    let held = store
        .execution_claim(&with_limit(1000))
        .await
        .expect("claim");
    let jobs: Vec<&str> = held.iter().map(|c| c.job.as_str()).collect();
    assert_eq!(
        jobs,
        ["a"],
        "only the allow job's, in a namespace without a limit"
    );
    let a = &held[0];
    assert_eq!((a.claimed_at, a.started_at), (t0(), fire));
    assert_eq!(a.attempt, 1);
    assert_eq!(
        a.lease_expires_at,
        Some(fire + SignedDuration::from_secs(30))
    );
    let record = store
        .execution_get("ns", &a.id)
        .await
        .expect("get")
        .expect("present");
    assert_eq!(record.state, ExecutionState::Running);
    assert_eq!(
        record.attempts[0].started_at, fire,
        "the records never show a start before the fire time"
    );
    assert_eq!(record.trigger, sundial_core::execution::Trigger::Schedule);
    assert!(
        store
            .execution_claim(&with_limit(1000))
            .await
            .expect("claim")
            .is_empty(),
        "the others wait until due; the far one is beyond the window"
    );
    clock.set(fire);
    let due = store
        .execution_claim(&with_limit(1000))
        .await
        .expect("claim");
    let mut jobs: Vec<&str> = due.iter().map(|c| c.job.as_str()).collect();
    jobs.sort_unstable();
    assert_eq!(
        jobs,
        ["l", "s"],
        "once due, the skip job's and the limited namespace's"
    );
    assert!(
        due.iter()
            .all(|c| c.started_at == fire && c.claimed_at == fire)
    );
}

/// A claim on time first (docs/guarantees.md, "Claim order under a backlog") takes the
/// executions due within the last second, then those within its claim-ahead window, before
/// older ones, keeping the backlog's share of the claim; oldest first takes the backlog.
pub async fn a_claim_on_time_first_serves_new_slots_beside_the_backlog(h: Harness) {
    let clock = Arc::new(ManualClock::new(t0()));
    let store = h.open(clock.clone()).await;
    let job = create(&*store, "ns", "a").await;
    // 20 slots 20 to 1.5 s late (the backlog), 20 due within the last second, 5 ahead.
    let backlog: Vec<Timestamp> = (0..20)
        .map(|i| t0() - SignedDuration::from_millis(20_000 - i * 900))
        .collect();
    let on_time: Vec<Timestamp> = (0..20)
        .map(|i| t0() - SignedDuration::from_millis(950 - i * 40))
        .collect();
    let ahead: Vec<Timestamp> = (1..=5)
        .map(|i| t0() + SignedDuration::from_millis(i * 100))
        .collect();
    let all: Vec<Timestamp> = backlog
        .iter()
        .chain(&on_time)
        .chain(&ahead)
        .copied()
        .collect();
    trigger(&*store, "n1", &job, &all).await.expect("trigger");
    let first_time = |claimed: &[crate::ClaimedExecution]| {
        let mut slots: Vec<Timestamp> = claimed.iter().map(|e| e.scheduled_at).collect();
        slots.sort_unstable();
        slots
    };
    let on_time_claim = ExecutionClaim {
        on_time_first: true,
        ..claim_ahead("w1", 16, 1_000)
    };
    let got = first_time(&store.execution_claim(&on_time_claim).await.expect("claim"));
    let mut want: Vec<Timestamp> = backlog[..2].to_vec();
    want.extend_from_slice(&on_time[..14]);
    assert_eq!(
        got, want,
        "2 of 16 from the backlog (its share), then the on-time slots"
    );
    // With 6 on-time slots left: the backlog's share, the on-time slots, those ahead (held
    // for their fire time), and the backlog fills the rest.
    let got = first_time(&store.execution_claim(&on_time_claim).await.expect("claim"));
    let mut want: Vec<Timestamp> = backlog[2..7].to_vec();
    want.extend_from_slice(&on_time[14..]);
    want.extend_from_slice(&ahead);
    assert_eq!(got, want);
    // Oldest first: the rest of the backlog.
    let got = first_time(
        &store
            .execution_claim(&claim_ahead("w1", 16, 1_000))
            .await
            .expect("claim"),
    );
    let want: Vec<Timestamp> = backlog[7..].to_vec();
    assert_eq!(got, want);
}

/// The concurrency policy is judged as of the fire time: a `skip` job's slot is not taken
/// ahead while an earlier run is still going, and once that run ends before the fire time,
/// the slot runs instead of being skipped.
pub async fn under_skip_a_slot_near_its_fire_time_is_judged_as_of_it(h: Harness) {
    let clock = Arc::new(ManualClock::new(t0()));
    let store = h.open(clock.clone()).await;
    let job = create_with(&*store, "a", sundial_core::job::ConcurrencyPolicy::Skip).await;
    let next = t0() + SignedDuration::from_secs(1);
    trigger(&*store, "n1", &job, &[t0(), next])
        .await
        .expect("trigger");
    let first = store
        .execution_claim(&claim_ahead("w", 10, 1000))
        .await
        .expect("claim");
    assert_eq!(
        first.len(),
        1,
        "the due slot; the next one is not taken ahead"
    );
    clock.set(t0() + SignedDuration::from_millis(500));
    assert!(
        store
            .execution_claim(&claim_ahead("w", 10, 1000))
            .await
            .expect("claim")
            .is_empty(),
        "not judged while the job runs, half a second before the slot"
    );
    clock.set(t0() + SignedDuration::from_millis(900));
    store
        .attempt_complete(&complete_ok(&first[0].id, 1))
        .await
        .expect("complete");
    clock.set(next);
    let second = store
        .execution_claim(&claim_ahead("w", 10, 1000))
        .await
        .expect("claim");
    assert_eq!(
        second.len(),
        1,
        "the run ended before the fire time: not skipped"
    );
    assert!(
        in_state(&*store, "ns", ExecutionState::Skipped)
            .await
            .is_empty()
    );
}

/// An execution claimed ahead is leased from its fire time: a worker that dies holding it
/// leaves it to the reaper once that lease lapses, and its retry is not judged a misfire
/// (its slot was handed out on time).
pub async fn an_execution_claimed_ahead_is_leased_from_its_fire_time(h: Harness) {
    let clock = Arc::new(ManualClock::new(t0()));
    let store = h.open(clock.clone()).await;
    let job = create(&*store, "ns", "a").await;
    let fire = t0() + SignedDuration::from_millis(800);
    trigger(&*store, "n1", &job, &[fire])
        .await
        .expect("trigger");
    let held = store
        .execution_claim(&claim_ahead("w", 10, 1000))
        .await
        .expect("claim");
    assert_eq!(held.len(), 1);
    clock.set(fire + SignedDuration::from_secs(29));
    assert!(
        store
            .attempt_list_lapsed(10)
            .await
            .expect("lapsed")
            .is_empty(),
        "leased from the fire time, not from the claim"
    );
    clock.set(fire + SignedDuration::from_secs(31));
    let lapsed = store.attempt_list_lapsed(10).await.expect("lapsed");
    assert_eq!(lapsed.len(), 1);
    let mut reaped = complete_ok(&held[0].id, 1);
    reaped.outcome = AttemptOutcome::LeaseLapsed;
    reaped.status_code = None;
    reaped.only_if_lapsed = true;
    reaped.next = NextStep::RetryAfter(Dur::ZERO);
    store.attempt_complete(&reaped).await.expect("reap");
    let retry = store
        .execution_claim(&claim("w2", 10))
        .await
        .expect("claim");
    assert_eq!(retry.len(), 1, "retried, not judged a misfire");
    assert_eq!(retry[0].attempt, 2);
    let record = store
        .execution_get("ns", &retry[0].id)
        .await
        .expect("get")
        .expect("present");
    assert_eq!(record.trigger, sundial_core::execution::Trigger::Schedule);
}

/// An execution claimed ahead and not yet started ends like one not yet due when its job is
/// paused (removed, so a resume before the slot fires it), deleted or the execution cancelled
/// (recorded `cancelled`), and each time its worker is signalled to drop it.
pub async fn a_pause_delete_or_cancel_drops_what_was_claimed_ahead(h: Harness) {
    let clock = Arc::new(ManualClock::new(t0()));
    let store = h.open(clock.clone()).await;
    let mut signals = store.signals().cancelled.subscribe();
    let fire = t0() + SignedDuration::from_millis(500);
    let [paused, deleted, cancelled] = [
        create(&*store, "ns", "p").await,
        create(&*store, "ns", "d").await,
        create(&*store, "ns", "c").await,
    ];
    for job in [&paused, &deleted, &cancelled] {
        trigger(&*store, "n1", job, &[fire]).await.expect("trigger");
    }
    let held = store
        .execution_claim(&claim_ahead("w", 10, 1000))
        .await
        .expect("claim");
    assert_eq!(held.len(), 3);
    let id_of = |job: &str| {
        held.iter()
            .find(|c| c.job == job)
            .map(|c| c.id.clone())
            .expect("held")
    };
    let mut signal = async || {
        tokio::time::timeout(std::time::Duration::from_secs(5), signals.recv())
            .await
            .expect("a cancel signal")
            .expect("open")
    };

    let mut pause = paused.clone();
    pause.spec.paused = true;
    pause.next_slot_at = None;
    pause.next_fire_at = None;
    store
        .job_write(&JobWrite {
            record: pause,
            expected_version: Some(paused.version),
            pending: PendingExecutions::Cancel,
        })
        .await
        .expect("pause");
    assert_eq!(signal().await, id_of("p"));
    assert!(
        store
            .execution_get("ns", &id_of("p"))
            .await
            .expect("get")
            .is_none(),
        "removed, like a slot written ahead"
    );

    store
        .job_delete("ns", "d", Some(deleted.version))
        .await
        .expect("delete");
    assert_eq!(signal().await, id_of("d"));
    let d = store
        .execution_get("ns", &id_of("d"))
        .await
        .expect("get")
        .expect("kept");
    assert_eq!(d.state, ExecutionState::Cancelled);

    let c = store
        .execution_cancel("ns", &id_of("c"))
        .await
        .expect("cancel");
    assert_eq!(c.state, ExecutionState::Cancelled);
    assert_eq!(signal().await, id_of("c"));
    clock.set(fire);
    assert!(
        store
            .execution_claim(&claim_ahead("w", 10, 1000))
            .await
            .expect("claim")
            .is_empty(),
        "nothing of the three is handed out again"
    );
}

/// The count of executions waiting for a worker by due time: the range is half open, already
/// claimed ones are not counted, and no more than the cap are.
pub async fn waiting_executions_are_counted_by_due_time_up_to_a_cap(h: Harness) {
    let clock = Arc::new(ManualClock::new(t0()));
    let store = h.open(clock.clone()).await;
    let at = |s: i64| t0() + SignedDuration::from_secs(s);
    for name in ["a", "b", "c", "d"] {
        let mut job = create(&*store, "ns", name).await;
        job.next_slot_at = Some(t0());
        let slots: &[Timestamp] = if name == "d" { &[at(7)] } else { &[at(5)] };
        trigger(&*store, "n1", &job, slots).await.expect("trigger");
    }
    let count = |from: i64, until: i64, cap: u32| {
        let store = store.clone();
        async move {
            store
                .execution_due_count(at(from), at(until), cap)
                .await
                .expect("count")
        }
    };
    assert_eq!(count(5, 6, 100).await, 3);
    assert_eq!(count(5, 7, 100).await, 3, "until is excluded");
    assert_eq!(count(5, 8, 100).await, 4);
    assert_eq!(
        count(6, 8, 100).await,
        1,
        "from is included, earlier ones are not"
    );
    assert_eq!(count(5, 8, 2).await, 2, "no more than the cap");
    assert_eq!(count(0, 5, 100).await, 0);
    // A claim ahead takes the three due at 5 s: they wait no more.
    let mut ahead = claim("w1", 10);
    ahead.ahead_ms = 5_000;
    assert_eq!(store.execution_claim(&ahead).await.expect("claim").len(), 3);
    assert_eq!(count(0, 10, 100).await, 1);
}
