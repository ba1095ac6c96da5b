//! The store conformance suite: every backend runs each of these from its own `tests/`, each on
//! a fresh database, with a [`ManualClock`] as the time source where the backend accepts one.
//!
//! A backend's test file calls [`run_all`] (or each check) with a [`Harness`] that opens a new,
//! empty store on a given clock.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use jiff::{SignedDuration, Timestamp};
use sundial_clock::{Clock, ManualClock};
use sundial_core::Dur;
use sundial_core::execution::{AttemptOutcome, ExecutionState, Trigger};
use sundial_core::hash::shard_of;
use sundial_core::job::{HttpTarget, JobSpec, ScheduleKind, ScheduleSpec, TargetSpec};
use sundial_core::retry::RetryPolicy;

use crate::{
    AttemptComplete, AttemptRef, Error, ExecutionClaim, ExecutionListQuery, ExecutionRecord,
    JobListQuery, JobRecord, JobTrigger, JobWrite, NewExecution, NextStep, PendingExecutions,
    RunSpec, ShardLease, ShardLeaseRequest, Store, TriggerCommit, TriggerListDue,
};

/// Opens a fresh, empty store whose time authority is `clock`.
pub type Harness = Arc<
    dyn Fn(Arc<ManualClock>) -> Pin<Box<dyn Future<Output = Arc<dyn Store>> + Send>> + Send + Sync,
>;

/// The instant every check starts at.
pub fn t0() -> Timestamp {
    Timestamp::from_second(1_798_761_600).unwrap_or(Timestamp::UNIX_EPOCH) // 2027-01-01T00:00:00Z
}

/// A valid every-`secs` HTTP job.
pub fn job_spec(namespace: &str, name: &str, secs: u64) -> JobSpec {
    JobSpec {
        namespace: namespace.into(),
        name: name.into(),
        description: String::new(),
        labels: Default::default(),
        schedule: ScheduleSpec {
            kind: ScheduleKind::Every {
                every: Dur::from_secs(secs),
            },
            start_at: Some(t0()),
            end_at: None,
        },
        target: TargetSpec::Http(HttpTarget {
            method: "POST".into(),
            url: "http://127.0.0.1:9/".into(),
            headers: Default::default(),
            body: None,
            success_codes: Vec::new(),
        }),
        retry: RetryPolicy {
            max_attempts: 2,
            ..RetryPolicy::default()
        },
        timeout: Dur::from_secs(10),
        heartbeat_timeout: Dur::from_secs(30),
        concurrency_policy: Default::default(),
        misfire_policy: Default::default(),
        misfire_threshold: Dur::from_secs(60),
        jitter: Dur::ZERO,
        paused: false,
    }
}

/// A new job record at `t0()` whose first slot is `t0()`.
pub fn job_record(namespace: &str, name: &str) -> JobRecord {
    JobRecord {
        spec: job_spec(namespace, name, 10),
        uid: uuid::Uuid::now_v7().to_string(),
        shard: shard_of(namespace, name),
        version: 0,
        created_at: t0(),
        updated_at: t0(),
        next_slot_at: Some(t0()),
        next_fire_at: Some(t0()),
        pending_fire_at: None,
        last_execution: None,
    }
}

/// A `scheduled` execution of `job` for `slot` (fire time = slot), as the scheduler makes one.
pub fn execution(job: &JobRecord, slot: Timestamp) -> NewExecution {
    NewExecution {
        id: uuid::Uuid::now_v7().to_string(),
        namespace: job.spec.namespace.clone(),
        job: job.spec.name.clone(),
        job_uid: job.uid.clone(),
        job_version: job.version,
        shard: job.shard,
        trigger: Trigger::Schedule,
        scheduled_at: slot,
        fire_at: slot,
        state: ExecutionState::Scheduled,
        run: RunSpec::of(&job.spec),
    }
}

/// Creations of `n` new jobs named `job-0000`, `job-0001`, … in `namespace`, each as
/// [`job_record`] makes it (first slot `t0()`), for [`Store::job_write_batch`].
pub fn new_job_writes(namespace: &str, n: usize) -> Vec<JobWrite> {
    (0..n)
        .map(|i| JobWrite {
            record: job_record(namespace, &format!("job-{i:04}")),
            expected_version: None,
            pending: PendingExecutions::Keep,
        })
        .collect()
}

/// The part of a trigger commit that advances `job` from the slot it read, `expected`, to
/// `next` (its next slot and fire time; `None` when the schedule has ended) and writes
/// `executions`.
pub fn job_trigger(
    job: &JobRecord,
    expected: Timestamp,
    next: Option<Timestamp>,
    executions: Vec<NewExecution>,
) -> JobTrigger {
    JobTrigger {
        namespace: job.spec.namespace.clone(),
        name: job.spec.name.clone(),
        uid: job.uid.clone(),
        shard: job.shard,
        version: job.version,
        expected_next_slot: expected,
        next_slot_at: next,
        next_fire_at: next,
        executions,
    }
}

async fn create(store: &dyn Store, ns: &str, name: &str) -> JobRecord {
    let write = JobWrite {
        record: job_record(ns, name),
        expected_version: None,
        pending: PendingExecutions::Keep,
    };
    store.job_write(&write).await.expect("create job")
}

/// Renews every shard lease for `node` with a 10 s TTL, as its scheduler does before a commit.
async fn renew_leases(store: &dyn Store, node: &str) -> Result<Vec<ShardLease>, Error> {
    store
        .shard_lease_renew(&ShardLeaseRequest {
            node: node.into(),
            ttl: Dur::from_secs(10),
        })
        .await
}

/// Triggers `slots` of `job` as one commit by `node` holding the leases it renews first.
async fn trigger(
    store: &dyn Store,
    node: &str,
    job: &JobRecord,
    slots: &[Timestamp],
) -> Result<u32, Error> {
    let leases = renew_leases(store, node).await?;
    let next = slots.last().map(|s| *s + SignedDuration::from_secs(10));
    let commit = TriggerCommit {
        node: node.into(),
        leases,
        jobs: vec![job_trigger(
            job,
            job.next_slot_at.unwrap_or(t0()),
            next,
            slots.iter().map(|s| execution(job, *s)).collect(),
        )],
    };
    Ok(store.trigger_commit(&commit).await?.executions_inserted)
}

/// The executions of namespace `ns` in `state`, newest first (up to 10).
async fn in_state(store: &dyn Store, ns: &str, state: ExecutionState) -> Vec<ExecutionRecord> {
    store
        .execution_list(&ExecutionListQuery {
            namespace: ns.into(),
            state: Some(state),
            limit: 10,
            ..Default::default()
        })
        .await
        .expect("list executions by state")
}

fn claim(worker: &str, limit: u32) -> ExecutionClaim {
    ExecutionClaim {
        worker: worker.into(),
        limit,
        rate_limits: Default::default(),
    }
}

/// Create, conflict on re-create, replace only with the current version.
pub async fn job_writes_are_conditional_on_version(h: Harness) {
    let store = h(Arc::new(ManualClock::new(t0()))).await;
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
    let store = h(Arc::new(ManualClock::new(t0()))).await;
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

/// Triggering a slot twice yields one execution (SPEC G1).
pub async fn a_slot_gets_one_execution_however_often_it_is_triggered(h: Harness) {
    let store = h(Arc::new(ManualClock::new(t0()))).await;
    let job = create(&*store, "ns", "a").await;
    assert_eq!(
        trigger(&*store, "n1", &job, &[t0()]).await.expect("first"),
        1
    );
    // The same slot again, as after a crash between commit and acknowledgement: the advance
    // is conditional on the slot read, and the insert on the slot's uniqueness.
    let mut replay = job.clone();
    replay.next_slot_at = Some(t0() + SignedDuration::from_secs(10));
    assert_eq!(
        trigger(&*store, "n1", &replay, &[t0()])
            .await
            .expect("replay"),
        0
    );
    let all = store
        .execution_list(&ExecutionListQuery {
            namespace: "ns".into(),
            limit: 100,
            ..Default::default()
        })
        .await
        .expect("list");
    assert_eq!(all.len(), 1);
}

/// A job's `last_execution` is its latest slot whose fire time has passed: slots written
/// ahead of their fire time (the scheduler's lookahead) do not count until then, and a
/// recreated job (a new incarnation of the name) does not show the old one's.
pub async fn the_last_execution_is_the_latest_slot_fired(h: Harness) {
    let clock = Arc::new(ManualClock::new(t0()));
    let store = h(clock.clone()).await;
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

/// Trigger commits and completion batches of hundreds of rows write every row once, and a
/// completion batch answers for each of its completions (stores may split large batches
/// into several statements; 301 rows cross the sizes such splits use).
pub async fn large_batches_write_every_row_once(h: Harness) {
    const N: usize = 301;
    let clock = Arc::new(ManualClock::new(t0()));
    let store = h(clock.clone()).await;
    let jobs = store
        .job_write_batch(&new_job_writes("ns", N))
        .await
        .expect("create");
    let leases = renew_leases(&*store, "n1").await.expect("leases");
    let next = t0() + SignedDuration::from_secs(10);
    let commit = TriggerCommit {
        node: "n1".into(),
        leases,
        jobs: jobs
            .iter()
            .map(|job| job_trigger(job, t0(), Some(next), vec![execution(job, t0())]))
            .collect(),
    };
    let done = store.trigger_commit(&commit).await.expect("trigger");
    assert_eq!(
        (done.jobs_advanced, done.executions_inserted),
        (N as u32, N as u32)
    );
    let again = store.trigger_commit(&commit).await.expect("replay");
    assert_eq!((again.jobs_advanced, again.executions_inserted), (0, 0));
    let due = store
        .trigger_list_due(&TriggerListDue {
            shards: (0..sundial_core::SHARD_COUNT).collect(),
            horizon: next,
            limit: 1000,
        })
        .await
        .expect("due");
    assert_eq!(due.len(), N, "every job advanced to its next slot");
    assert!(due.iter().all(|d| d.next_slot_at == next));

    let claimed = store
        .execution_claim(&claim("w1", 1000))
        .await
        .expect("claim");
    assert_eq!(claimed.len(), N);
    let stale = N / 2;
    let completions: Vec<AttemptComplete> = claimed
        .iter()
        .enumerate()
        .map(|(i, c)| AttemptComplete {
            attempt: AttemptRef {
                id: c.id.clone(),
                // One completion names an attempt that is not running: refused alone.
                attempt: if i == stale { 2 } else { 1 },
            },
            outcome: AttemptOutcome::Succeeded,
            status_code: Some(200),
            error: None,
            detail: Some(format!("row {i}")),
            next: NextStep::Succeeded,
            only_if_lapsed: false,
        })
        .collect();
    let applied = store
        .attempt_complete_batch(&completions)
        .await
        .expect("complete");
    assert_eq!(applied.len(), N);
    for (i, ok) in applied.iter().enumerate() {
        assert_eq!(*ok, i != stale, "completion {i}");
    }
    for (i, c) in claimed.iter().enumerate() {
        let read = store
            .execution_get("ns", &c.id)
            .await
            .expect("get")
            .expect("present");
        if i == stale {
            assert_eq!(read.state, ExecutionState::Running);
            continue;
        }
        assert_eq!(read.state, ExecutionState::Succeeded, "execution {i}");
        assert_eq!(read.attempts.len(), 1);
        assert_eq!(read.attempts[0].outcome, Some(AttemptOutcome::Succeeded));
        assert_eq!(read.attempts[0].status_code, Some(200));
        assert_eq!(
            read.attempts[0].detail.as_deref(),
            completions[i].detail.as_deref()
        );
    }
}

/// A trigger commit carrying a stale shard epoch writes nothing (SPEC G3).
pub async fn a_trigger_with_a_stale_epoch_writes_nothing(h: Harness) {
    let store = h(Arc::new(ManualClock::new(t0()))).await;
    let job = create(&*store, "ns", "a").await;
    let mut leases = renew_leases(&*store, "n1").await.expect("leases");
    for l in &mut leases {
        l.epoch -= 1;
    }
    let commit = TriggerCommit {
        node: "n1".into(),
        leases,
        jobs: vec![job_trigger(
            &job,
            t0(),
            Some(t0() + SignedDuration::from_secs(10)),
            vec![execution(&job, t0())],
        )],
    };
    assert!(matches!(
        store.trigger_commit(&commit).await,
        Err(Error::StaleFence(_))
    ));
    let read = store
        .job_get("ns", "a")
        .await
        .expect("get")
        .expect("present");
    assert_eq!(read.next_slot_at, Some(t0()), "the job did not advance");
    assert!(
        store.execution_next_due().await.expect("due").is_none(),
        "no execution was written"
    );
}

/// Due jobs are those whose next fire time is within the horizon, earliest first.
pub async fn due_jobs_are_listed_by_fire_time(h: Harness) {
    let store = h(Arc::new(ManualClock::new(t0()))).await;
    for (name, offset) in [("late", 30), ("soon", 3), ("now", 0)] {
        let mut record = job_record("ns", name);
        let at = t0() + SignedDuration::from_secs(offset);
        record.next_slot_at = Some(at);
        record.next_fire_at = Some(at);
        store
            .job_write(&JobWrite {
                record,
                expected_version: None,
                pending: PendingExecutions::Keep,
            })
            .await
            .expect("create");
    }
    let due = store
        .trigger_list_due(&TriggerListDue {
            shards: (0..sundial_core::SHARD_COUNT).collect(),
            horizon: t0() + SignedDuration::from_secs(5),
            limit: 10,
        })
        .await
        .expect("due");
    assert_eq!(
        due.iter().map(|d| d.spec.name.as_str()).collect::<Vec<_>>(),
        ["now", "soon"]
    );
}

/// An execution is claimable only once due, by one claimer, and its attempt number grows.
pub async fn executions_are_claimed_once_and_never_early(h: Harness) {
    let clock = Arc::new(ManualClock::new(t0()));
    let store = h(clock.clone()).await;
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
        slot + SignedDuration::from_secs(30)
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

/// A completion carrying a stale attempt number is refused and changes nothing (SPEC G3).
pub async fn a_stale_completion_is_rejected(h: Harness) {
    let clock = Arc::new(ManualClock::new(t0()));
    let store = h(clock.clone()).await;
    let job = create(&*store, "ns", "a").await;
    trigger(&*store, "n1", &job, &[t0()])
        .await
        .expect("trigger");
    let first = store
        .execution_claim(&claim("w1", 1))
        .await
        .expect("claim")
        .remove(0);
    // Worker 1 goes silent; its lease lapses; the reaper requeues the execution.
    clock.advance(SignedDuration::from_secs(31));
    let lapsed = store.attempt_list_lapsed(10).await.expect("lapsed");
    assert_eq!(lapsed.len(), 1);
    let reap = AttemptComplete {
        attempt: AttemptRef {
            id: first.id.clone(),
            attempt: 1,
        },
        outcome: AttemptOutcome::LeaseLapsed,
        status_code: None,
        error: Some("lease lapsed".into()),
        detail: None,
        next: NextStep::RetryAt(clock.now()),
        only_if_lapsed: true,
    };
    store.attempt_complete(&reap).await.expect("reap");
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

/// A heartbeat extends the lease; the reaper cannot complete an attempt whose lease is live.
pub async fn heartbeats_keep_the_lease(h: Harness) {
    let clock = Arc::new(ManualClock::new(t0()));
    let store = h(clock.clone()).await;
    let job = create(&*store, "ns", "a").await;
    trigger(&*store, "n1", &job, &[t0()])
        .await
        .expect("trigger");
    let e = store
        .execution_claim(&claim("w1", 1))
        .await
        .expect("claim")
        .remove(0);
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
    };
    assert!(matches!(
        store.attempt_complete(&reap).await,
        Err(Error::StaleFence(_))
    ));
}

/// Cancel, then re-drive: terminal states are final except dead/failed by re-drive.
pub async fn cancel_and_redrive_follow_the_state_machine(h: Harness) {
    let clock = Arc::new(ManualClock::new(t0()));
    let store = h(clock.clone()).await;
    let job = create(&*store, "ns", "a").await;
    trigger(&*store, "n1", &job, &[t0()])
        .await
        .expect("trigger");
    let e = store
        .execution_claim(&claim("w1", 1))
        .await
        .expect("claim")
        .remove(0);
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

/// A schedule change cancels not-started executions; other changes rewrite them; delete
/// cancels them and keeps history.
pub async fn job_writes_steer_pending_executions(h: Harness) {
    let clock = Arc::new(ManualClock::new(t0()));
    let store = h(clock.clone()).await;
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

/// Execution history pages newest first without gaps or repeats.
pub async fn execution_history_pages_newest_first(h: Harness) {
    let store = h(Arc::new(ManualClock::new(t0()))).await;
    let job = create(&*store, "ns", "a").await;
    let slots: Vec<Timestamp> = (0..7)
        .map(|i| t0() + SignedDuration::from_secs(10 * i))
        .collect();
    trigger(&*store, "n1", &job, &slots).await.expect("trigger");
    let seen: Vec<Timestamp> = history_in_pages(&*store, Some("a"), 3)
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
    let store = h(Arc::new(ManualClock::new(t0()))).await;
    let job = create(&*store, "ns", "a").await;
    let runs: Vec<NewExecution> = (0..5)
        .map(|_| NewExecution {
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
        let seen: Vec<String> = history_in_pages(&*store, job_filter, 2)
            .await
            .into_iter()
            .map(|e| e.id)
            .collect();
        assert_eq!(seen, ids, "listing with job filter {job_filter:?}");
    }
}

/// Every execution of namespace `ns` (of `job` only, when given), read page after page of
/// `limit` with the page token each page ends with, until a short page.
async fn history_in_pages(
    store: &dyn Store,
    job: Option<&str>,
    limit: u32,
) -> Vec<ExecutionRecord> {
    let mut seen = Vec::new();
    let mut before = None;
    loop {
        let page = store
            .execution_list(&ExecutionListQuery {
                namespace: "ns".into(),
                job: job.map(str::to_owned),
                before: before.clone(),
                limit,
                ..Default::default()
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

async fn create_with(
    store: &dyn Store,
    name: &str,
    policy: sundial_core::job::ConcurrencyPolicy,
) -> JobRecord {
    let mut record = job_record("ns", name);
    record.spec.concurrency_policy = policy;
    store
        .job_write(&JobWrite {
            record,
            expected_version: None,
            pending: PendingExecutions::Keep,
        })
        .await
        .expect("create job")
}

fn complete_ok(id: &str, attempt: u32) -> AttemptComplete {
    AttemptComplete {
        attempt: AttemptRef {
            id: id.into(),
            attempt,
        },
        outcome: AttemptOutcome::Succeeded,
        status_code: Some(200),
        error: None,
        detail: None,
        next: NextStep::Succeeded,
        only_if_lapsed: false,
    }
}

/// `skip`: a slot that comes due while the job runs is recorded `skipped`; the next one after
/// it finished runs.
pub async fn skip_records_a_slot_due_while_the_job_runs(h: Harness) {
    let clock = Arc::new(ManualClock::new(t0()));
    let store = h(clock.clone()).await;
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
    let store = h(clock.clone()).await;
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
    let store = h(clock.clone()).await;
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
            next: NextStep::RetryAt(t0() + SignedDuration::from_secs(5)),
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
    let store = h(clock.clone()).await;
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

/// A namespace limited to N per second gets a full bucket (a tenth of a second's worth) at
/// once, then N per second, whichever claimer asks; other namespaces are not held back.
pub async fn rate_limited_namespaces_dispatch_at_their_rate(h: Harness) {
    let clock = Arc::new(ManualClock::new(t0()));
    let store = h(clock.clone()).await;
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
        let store = h(clock.clone()).await;
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
    let store = h(clock.clone()).await;
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

/// Expands one `#[tokio::test]` per conformance check, the one list of checks every backend
/// runs. `$run` is an async fn taking a closure `Harness -> future` and running it on a fresh
/// store of the backend (creating and dropping whatever the backend needs around it).
///
/// ```ignore
/// async fn run<F: std::future::Future<Output = ()>>(check: impl FnOnce(Harness) -> F) {
///     check(harness()).await;
/// }
/// sundial_store::conformance_tests!(run);
/// ```
#[macro_export]
macro_rules! conformance_tests {
    ($run:path) => {
        $crate::conformance_tests!(@each $run,
            job_writes_are_conditional_on_version,
            job_list_pages_and_filters,
            a_slot_gets_one_execution_however_often_it_is_triggered,
            the_last_execution_is_the_latest_slot_fired,
            large_batches_write_every_row_once,
            a_trigger_with_a_stale_epoch_writes_nothing,
            due_jobs_are_listed_by_fire_time,
            executions_are_claimed_once_and_never_early,
            a_stale_completion_is_rejected,
            heartbeats_keep_the_lease,
            cancel_and_redrive_follow_the_state_machine,
            job_writes_steer_pending_executions,
            execution_history_pages_newest_first,
            history_pages_through_executions_sharing_a_slot_time,
            skip_records_a_slot_due_while_the_job_runs,
            replace_cancels_the_running_execution,
            replace_never_runs_what_the_same_claim_cancelled,
            catch_up_under_skip_runs_one_after_another,
            rate_limited_namespaces_dispatch_at_their_rate,
            late_precreated_slots_follow_the_misfire_policy,
            run_once_leaves_late_slots_to_a_later_slot_come_due
        );
    };
    (@each $run:path, $($name:ident),*) => {$(
        #[tokio::test]
        async fn $name() {
            $run($crate::testkit::$name).await;
        }
    )*};
}
