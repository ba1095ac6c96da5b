//! Checks of worker liveness leases (docs/guarantees.md, "Workers"): attempts
//! claimed under a worker's lease, renewals, and the take-over that lapses them all.

use super::*;

const TTL: Dur = Dur::from_secs(10);

/// A store with job `ns/a` whose slots at t0 (due) and t0 + 3 s (ahead) are claimed by
/// worker `w1` under a lease of its own; returns the lease's epoch and the two attempts.
async fn two_claimed_under_a_lease(
    h: Harness,
) -> (
    Arc<ManualClock>,
    Arc<dyn Store>,
    i64,
    Vec<crate::ClaimedExecution>,
) {
    let clock = Arc::new(ManualClock::new(t0()));
    let store = h.open(clock.clone()).await;
    let job = create(&*store, "ns", "a").await;
    let ahead = t0() + SignedDuration::from_secs(3);
    trigger(&*store, "n1", &job, &[t0(), ahead])
        .await
        .expect("trigger");
    let lease = store.worker_lease_acquire("w1", TTL).await.expect("lease");
    assert_eq!(lease.expires_at, t0() + SignedDuration::from_secs(10));
    let claimed = store
        .execution_claim(&ExecutionClaim {
            ahead_ms: 5000,
            epoch: Some(lease.epoch),
            on_time_first: false,
            ..claim("w1", 10)
        })
        .await
        .expect("claim");
    assert_eq!(claimed.len(), 2, "{claimed:?}");
    (clock, store, lease.epoch, claimed)
}

/// An attempt claimed under a worker lease records its epoch and has no lease of its own:
/// the worker's lease is its lease until its first heartbeat gives it one.
pub async fn attempts_under_a_worker_lease_record_its_epoch_and_live_by_it(h: Harness) {
    let (clock, store, epoch, claimed) = two_claimed_under_a_lease(h).await;
    for e in &claimed {
        assert_eq!((e.worker_epoch, e.lease_expires_at), (Some(epoch), None));
    }
    // Past any heartbeat_timeout (30 s here) with the worker's lease renewed: nothing lapsed.
    for _ in 0..8 {
        clock.advance(SignedDuration::from_secs(5));
        let renewed = store.worker_lease_renew(epoch, TTL).await.expect("renew");
        assert_eq!(renewed, Some(clock.now() + SignedDuration::from_secs(10)));
    }
    assert!(store.worker_lease_reap(10).await.expect("reap").is_empty());
    assert!(
        store
            .attempt_list_lapsed(10)
            .await
            .expect("lapsed")
            .is_empty()
    );
    // A heartbeat gives the attempt a lease of its own; a completion applies.
    let first = AttemptRef {
        id: claimed[0].id.clone(),
        attempt: 1,
    };
    let expiry = store.attempt_heartbeat(&first).await.expect("heartbeat");
    assert_eq!(expiry, clock.now() + SignedDuration::from_secs(30));
    store
        .attempt_complete(&complete_ok(&claimed[1].id, 1))
        .await
        .expect("complete");
}

/// A lapsed worker lease stands until a reaper takes it over; the take-over lapses every
/// attempt under it, running or held for its fire time, refuses the worker's renewals,
/// heartbeats, completions and claims under that epoch, and the reaper's completion retries
/// each, never due before its fire time (G3, G5; docs/guarantees.md, "Workers").
pub async fn a_worker_lease_taken_over_lapses_every_attempt_under_it(h: Harness) {
    let (clock, store, epoch, claimed) = two_claimed_under_a_lease(h).await;
    clock.advance(SignedDuration::from_millis(10_001));
    // Lapsed by the clock, not yet taken over: a renewal still keeps it.
    assert!(
        store
            .worker_lease_renew(epoch, TTL)
            .await
            .expect("renew")
            .is_some()
    );
    assert!(store.worker_lease_reap(10).await.expect("reap").is_empty());
    // Given up (a stopping worker), it is taken over at the next pass.
    store.worker_lease_release(epoch).await.expect("release");
    assert_eq!(
        store.worker_lease_reap(10).await.expect("reap"),
        vec![epoch]
    );
    assert!(store.worker_lease_reap(10).await.expect("reap").is_empty());
    assert_eq!(
        store.worker_lease_renew(epoch, TTL).await.expect("renew"),
        None
    );
    let mut lapsed: Vec<String> = store
        .attempt_list_lapsed(10)
        .await
        .expect("lapsed")
        .into_iter()
        .map(|e| e.id)
        .collect();
    lapsed.sort();
    let mut ids: Vec<String> = claimed.iter().map(|e| e.id.clone()).collect();
    ids.sort();
    assert_eq!(lapsed, ids);
    // The worker's writes under the epoch are refused and change nothing.
    for e in &claimed {
        let attempt = AttemptRef {
            id: e.id.clone(),
            attempt: 1,
        };
        assert!(matches!(
            store.attempt_heartbeat(&attempt).await,
            Err(Error::StaleFence(_))
        ));
        assert!(matches!(
            store.attempt_complete(&complete_ok(&e.id, 1)).await,
            Err(Error::StaleFence(_))
        ));
    }
    let refused = store
        .execution_claim(&ExecutionClaim {
            epoch: Some(epoch),
            on_time_first: false,
            ..claim("w1", 10)
        })
        .await;
    assert!(matches!(refused, Err(Error::StaleFence(_))), "{refused:?}");
    // The reaper's completions apply: each retried, the held one not before its fire time.
    for e in &claimed {
        store
            .attempt_complete(&reap_lapsed(&e.id, 1))
            .await
            .expect("reap");
        let read = store
            .execution_get("ns", &e.id)
            .await
            .expect("get")
            .expect("present");
        assert_eq!(read.state, ExecutionState::RetryWait);
        assert_eq!(read.attempts[0].outcome, Some(AttemptOutcome::LeaseLapsed));
        assert!(
            read.next_attempt_at.is_some_and(|due| due >= e.fire_at),
            "{read:?}"
        );
    }
    // A new lease claims them afresh, as attempt 2.
    let lease = store.worker_lease_acquire("w1", TTL).await.expect("lease");
    assert!(lease.epoch > epoch);
    clock.advance(SignedDuration::from_secs(3));
    let again = store
        .execution_claim(&ExecutionClaim {
            epoch: Some(lease.epoch),
            on_time_first: false,
            ..claim("w2", 10)
        })
        .await
        .expect("claim");
    assert_eq!(again.len(), 2);
    assert!(
        again
            .iter()
            .all(|e| e.attempt == 2 && e.worker_epoch == Some(lease.epoch))
    );
}

/// `GET /v1/cluster`'s view: each node's worker lease, whether it is live, and how many
/// executions are held under it.
pub async fn the_cluster_view_shows_each_workers_lease_and_what_it_holds(h: Harness) {
    let (clock, store, epoch, _claimed) = two_claimed_under_a_lease(h).await;
    store
        .node_heartbeat("w1", &["worker".to_owned()], TTL)
        .await
        .expect("heartbeat");
    let status = store.cluster_status().await.expect("status");
    let node = status.nodes.iter().find(|n| n.id == "w1").expect("w1");
    let lease = node.worker_lease.as_ref().expect("a worker lease");
    assert_eq!((lease.epoch, lease.live, lease.held), (epoch, true, 2));
    assert_eq!(status.running, 2);
    clock.advance(SignedDuration::from_secs(11));
    let status = store.cluster_status().await.expect("status");
    let node = status.nodes.iter().find(|n| n.id == "w1").expect("w1");
    assert!(!node.worker_lease.as_ref().expect("lease").live);
}

/// A slot the scheduler reaches late is handed out as one ahead of its fire time is, started
/// at the commit's time (the store's clock), not at its past fire time: in the row as in the
/// claim the worker receives (docs/guarantees.md, "Slots handed to the worker beside the
/// scheduler").
pub async fn a_slot_written_late_is_handed_out_started_at_the_commit(h: Harness) {
    let clock = Arc::new(ManualClock::new(t0()));
    let store = h.open(clock.clone()).await;
    let late = create(&*store, "ns", "late").await;
    let lease = store.worker_lease_acquire("w1", TTL).await.expect("lease");
    let leases = renew_leases(&*store, "n1").await.expect("leases");
    let fire = t0() - SignedDuration::from_secs(20);
    let commit = TriggerCommit {
        node: "n1".into(),
        leases,
        jobs: vec![job_trigger(
            &late,
            t0(),
            Some(t0() + SignedDuration::from_secs(10)),
            vec![execution(&late, fire)],
        )],
        handoff: Some(crate::handoff::TriggerHandoff {
            worker: "w1".into(),
            epoch: lease.epoch,
            limit: 5,
            rate_limited: Vec::new(),
            within: Dur::from_secs(10),
        }),
    };
    let done = store.trigger_commit(&commit).await.expect("commit");
    assert_eq!(done.handed.len(), 1, "{:?}", done.handed);
    let handed = &done.handed[0];
    assert_eq!((handed.fire_at, handed.started_at), (fire, t0()));
    let read = store
        .execution_get("ns", &handed.id)
        .await
        .expect("get")
        .expect("present");
    assert_eq!(read.state, ExecutionState::Running);
    assert_eq!(read.started_at, Some(t0()), "started when written");
}

/// A trigger commit with a handoff writes the executions a claim ahead could take as their
/// first attempt under the worker's lease and returns them, at most its limit; the rest wait
/// for a claim (so do slots beyond its window), which never hands a handed-out one out again; a handed-out attempt completes
/// under the lease, and a take-over of the lease lapses it like any attempt under it
/// (`crate::handoff`; docs/guarantees.md, "Slots handed to the worker beside the scheduler").
pub async fn a_trigger_commit_hands_out_what_a_claim_ahead_could_take(h: Harness) {
    let clock = Arc::new(ManualClock::new(t0()));
    let store = h.open(clock.clone()).await;
    let allow = create(&*store, "ns", "a").await;
    let mut record = job_record("ns", "skip");
    record.spec.concurrency_policy = sundial_core::job::ConcurrencyPolicy::Skip;
    let skip = store
        .job_write(&JobWrite {
            record,
            expected_version: None,
            pending: PendingExecutions::Keep,
        })
        .await
        .expect("create job");
    let limited = create(&*store, "limited", "a").await;
    let due = create(&*store, "ns", "due").await;
    let far = create(&*store, "ns", "far").await;
    let lease = store.worker_lease_acquire("w1", TTL).await.expect("lease");
    let leases = renew_leases(&*store, "n1").await.expect("leases");
    let (ahead, later) = (
        t0() + SignedDuration::from_secs(3),
        t0() + SignedDuration::from_secs(4),
    );
    let next = Some(t0() + SignedDuration::from_secs(10));
    let mut commit = TriggerCommit {
        node: "n1".into(),
        leases,
        jobs: vec![
            // Beyond the window (`within`): written to wait, even though it comes first.
            job_trigger(
                &far,
                t0(),
                next,
                vec![execution(&far, t0() + SignedDuration::from_secs(11))],
            ),
            job_trigger(
                &allow,
                t0(),
                next,
                vec![execution(&allow, ahead), execution(&allow, later)],
            ),
            job_trigger(&skip, t0(), next, vec![execution(&skip, ahead)]),
            job_trigger(&limited, t0(), next, vec![execution(&limited, ahead)]),
            job_trigger(&due, t0(), next, vec![execution(&due, t0())]),
        ],
        handoff: Some(crate::handoff::TriggerHandoff {
            worker: "w1".into(),
            epoch: lease.epoch,
            limit: 1,
            rate_limited: vec!["limited".into()],
            within: Dur::from_secs(10),
        }),
    };
    let done = store.trigger_commit(&commit).await.expect("commit");
    assert_eq!(done.executions_inserted, 6);
    assert_eq!(done.handed.len(), 1, "{:?}", done.handed);
    let handed = &done.handed[0];
    assert_eq!(handed.id, execution(&allow, ahead).id);
    assert_eq!(
        (handed.attempt, handed.worker_epoch),
        (1, Some(lease.epoch))
    );
    assert_eq!((handed.started_at, handed.claimed_at), (ahead, t0()));
    assert_eq!(handed.lease_expires_at, None);
    let read = store
        .execution_get("ns", &handed.id)
        .await
        .expect("get")
        .expect("present");
    assert_eq!(read.state, ExecutionState::Running);
    // A claim ahead under the same lease (rate-limiting the same namespace) takes what waits
    // and may be taken ahead, and the due one; never the handed-out one again.
    let mut claimed: Vec<String> = store
        .execution_claim(&ExecutionClaim {
            ahead_ms: 5000,
            epoch: Some(lease.epoch),
            on_time_first: false,
            rate_limits: [("limited".to_owned(), 100.0)].into_iter().collect(),
            ..claim("w1", 10)
        })
        .await
        .expect("claim")
        .into_iter()
        .map(|e| e.id)
        .collect();
    claimed.sort();
    let mut expected = vec![execution(&allow, later).id, execution(&due, t0()).id];
    expected.sort();
    assert_eq!(claimed, expected);
    // The handed-out attempt completes under the worker's lease.
    clock.advance(SignedDuration::from_secs(3));
    store
        .attempt_complete(&complete_ok(&handed.id, 1))
        .await
        .expect("complete");
    // Under a lease taken over, a commit hands nothing out: its executions wait for a claim.
    let other = create(&*store, "ns", "other").await;
    let second = store.worker_lease_acquire("w2", TTL).await.expect("lease");
    store
        .worker_lease_release(second.epoch)
        .await
        .expect("release");
    assert_eq!(
        store.worker_lease_reap(10).await.expect("reap"),
        vec![second.epoch]
    );
    let slot = t0() + SignedDuration::from_secs(6);
    commit.leases = renew_leases(&*store, "n1").await.expect("leases");
    commit.jobs = vec![job_trigger(
        &other,
        t0(),
        next,
        vec![execution(&other, slot)],
    )];
    commit.handoff = Some(crate::handoff::TriggerHandoff {
        worker: "w2".into(),
        epoch: second.epoch,
        limit: 10,
        rate_limited: Vec::new(),
        within: Dur::from_secs(10),
    });
    let done = store.trigger_commit(&commit).await.expect("commit");
    assert_eq!((done.executions_inserted, done.handed.len()), (1, 0));
    let read = store
        .execution_get("ns", &execution(&other, slot).id)
        .await
        .expect("get")
        .expect("present");
    assert_eq!(read.state, ExecutionState::Scheduled);
    // A handed-out attempt held under a lease that is then taken over lapses with it.
    let third = store.worker_lease_acquire("w3", TTL).await.expect("lease");
    let last = create(&*store, "ns", "last").await;
    let slot = clock.now() + SignedDuration::from_secs(2);
    commit.leases = renew_leases(&*store, "n1").await.expect("leases");
    commit.jobs = vec![job_trigger(&last, t0(), next, vec![execution(&last, slot)])];
    commit.handoff = Some(crate::handoff::TriggerHandoff {
        worker: "w3".into(),
        epoch: third.epoch,
        limit: 10,
        rate_limited: Vec::new(),
        within: Dur::from_secs(10),
    });
    let done = store.trigger_commit(&commit).await.expect("commit");
    assert_eq!(done.handed.len(), 1);
    store
        .worker_lease_release(third.epoch)
        .await
        .expect("release");
    assert_eq!(
        store.worker_lease_reap(10).await.expect("reap"),
        vec![third.epoch]
    );
    let lapsed: Vec<String> = store
        .attempt_list_lapsed(10)
        .await
        .expect("lapsed")
        .into_iter()
        .map(|e| e.id)
        .collect();
    assert!(lapsed.contains(&done.handed[0].id), "{lapsed:?}");
}
