//! Backfills (docs/time.md, "Backfill"): the fenced, idempotent step that counts the slots it
//! finds done already; serial steps under a concurrency policy; cancel; a backfilled slot that
//! waits while its job runs; a workflow's backfill, one run per slot.

use serde_json::json;

use super::*;
use crate::{
    BackfillOf, BackfillRecord, BackfillState, BackfillStep, BackfillStepped, NewBackfill, NewRun,
    WorkflowRecord,
};

/// A backfill of `job`'s 10-second slots in `[t0 − span, t0)`, at `rate` a second.
async fn start(
    store: &dyn Store,
    of: BackfillOf,
    name: &str,
    uid: &str,
    shard: u16,
    span_s: i64,
) -> BackfillRecord {
    store
        .backfill_create(&NewBackfill {
            id: uuid::Uuid::now_v7().to_string(),
            namespace: "ns".into(),
            of,
            name: name.into(),
            uid: uid.into(),
            shard,
            from: t0() - SignedDuration::from_secs(span_s),
            to: t0(),
            max_per_second: 100,
            slots: u64::try_from(span_s / 10).expect("positive"),
        })
        .await
        .expect("create backfill")
}

/// The executions of `job` for `slots`, as a backfill's driver makes them.
fn backfilled(job: &JobRecord, slots: &[Timestamp]) -> Vec<NewExecution> {
    slots
        .iter()
        .map(|slot| NewExecution {
            trigger: Trigger::Backfill,
            fire_at: t0(),
            state: ExecutionState::Queued,
            ..execution(job, *slot)
        })
        .collect()
}

fn step(
    b: &BackfillRecord,
    leases: &[ShardLease],
    cursor: Timestamp,
    executions: Vec<NewExecution>,
    runs: Vec<NewRun>,
    done: bool,
    serial: bool,
) -> BackfillStep {
    BackfillStep {
        node: "n1".into(),
        leases: leases.to_vec(),
        id: b.id.clone(),
        shard: b.shard,
        expected_cursor: b.cursor,
        cursor,
        executions,
        runs,
        existing: 0,
        done,
        serial,
    }
}

fn ago(secs: i64) -> Timestamp {
    t0() - SignedDuration::from_secs(secs)
}

/// A step creates the executions of its slots, skips (and counts) a slot that already has
/// one, moves the cursor, and ends the backfill when done; a replayed step, a step with a
/// stale epoch, and a step after a cancel write nothing; `backfill_taken` tells which slots
/// have executions.
pub async fn a_backfill_step_is_fenced_idempotent_and_counts_existing_slots(h: Harness) {
    let store = h.open(Arc::new(ManualClock::new(t0()))).await;
    let job = create(&*store, "ns", "report").await;
    let slots = [ago(40), ago(30), ago(20), ago(10)];
    // One slot ran already, as the scheduler fired it.
    store
        .execution_insert(&NewExecution {
            state: ExecutionState::Queued,
            ..execution(&job, ago(30))
        })
        .await
        .expect("an earlier execution");
    let b = start(&*store, BackfillOf::Job, "report", &job.uid, job.shard, 40).await;
    assert_eq!(
        (b.state, b.cursor, b.created, b.remaining()),
        (BackfillState::Running, ago(40), 0, 4)
    );
    // Its id is taken: a second creation is refused and changes nothing.
    let again = NewBackfill {
        id: b.id.clone(),
        namespace: "ns".into(),
        of: BackfillOf::Job,
        name: "report".into(),
        uid: job.uid.clone(),
        shard: job.shard,
        from: ago(90),
        to: t0(),
        max_per_second: 1,
        slots: 9,
    };
    assert!(matches!(
        store.backfill_create(&again).await,
        Err(Error::Conflict(_))
    ));
    assert_eq!(
        store.backfill_get("ns", &b.id).await.expect("get").as_ref(),
        Some(&b)
    );
    let leases = renew_leases(&*store, "n1").await.expect("leases");
    let stale: Vec<ShardLease> = leases
        .iter()
        .map(|l| ShardLease {
            epoch: l.epoch + 1,
            ..*l
        })
        .collect();
    let first = step(
        &b,
        &leases,
        ago(30) + SignedDuration::from_millis(1),
        backfilled(&job, &slots[..2]),
        vec![],
        false,
        false,
    );
    assert!(matches!(
        store
            .backfill_step(&BackfillStep {
                leases: stale,
                ..first.clone()
            })
            .await,
        Err(Error::StaleFence(_))
    ));
    assert_eq!(
        store.backfill_step(&first).await.expect("step"),
        BackfillStepped::Applied(1)
    );
    assert_eq!(
        store.backfill_step(&first).await.expect("replay"),
        BackfillStepped::Stale
    );
    assert_eq!(
        store
            .backfill_unfinished(BackfillOf::Job, &job.uid)
            .await
            .expect("unfinished"),
        2,
        "the earlier execution and the backfilled one wait"
    );
    let b = store
        .backfill_get("ns", &b.id)
        .await
        .expect("get")
        .expect("there");
    assert_eq!(
        (b.created, b.existing, b.cursor, b.remaining()),
        (1, 1, ago(30) + SignedDuration::from_millis(1), 2)
    );
    assert_eq!(
        b.last_id.as_deref(),
        Some(sundial_core::ids::slot_execution_id(&job.uid, ago(30)).as_str())
    );

    let ids: Vec<String> = slots
        .iter()
        .map(|s| sundial_core::ids::slot_execution_id(&job.uid, *s))
        .collect();
    let taken = store
        .backfill_taken(BackfillOf::Job, &ids)
        .await
        .expect("taken");
    assert_eq!(taken, ids[..2].iter().cloned().collect());

    let last = step(
        &b,
        &leases,
        t0(),
        backfilled(&job, &slots[2..]),
        vec![],
        true,
        false,
    );
    assert_eq!(
        store.backfill_step(&last).await.expect("step"),
        BackfillStepped::Applied(2)
    );
    let b = store
        .backfill_get("ns", &b.id)
        .await
        .expect("get")
        .expect("there");
    assert_eq!(
        (b.state, b.created, b.existing, b.remaining()),
        (BackfillState::Done, 3, 1, 0)
    );
    assert_eq!(b.finished_at, Some(t0()));
    let all = store
        .execution_list(&ExecutionListQuery {
            namespace: "ns".into(),
            limit: 100,
            ..Default::default()
        })
        .await
        .expect("list");
    assert_eq!(all.len(), 4, "one execution per slot");
    let backfill_made = all
        .iter()
        .filter(|e| e.trigger == Trigger::Backfill)
        .count();
    assert_eq!(backfill_made, 3);
    assert!(matches!(
        store.backfill_cancel("ns", &b.id, None).await,
        Err(Error::Conflict(_))
    ));
}

/// A serial step (a concurrency policy other than `allow`) waits while the backfill's previous
/// execution is unfinished, and goes on once it ended; a cancel stops the backfill (a step
/// after it is stale) and keeps what it created; backfills are listed per job, newest first.
pub async fn a_serial_backfill_waits_its_turn_and_stops_on_cancel(h: Harness) {
    let clock = Arc::new(ManualClock::new(t0()));
    let store = h.open(clock.clone()).await;
    let job = create_with(
        &*store,
        "nightly",
        sundial_core::job::ConcurrencyPolicy::Skip,
    )
    .await;
    let b = start(&*store, BackfillOf::Job, "nightly", &job.uid, job.shard, 30).await;
    let leases = renew_leases(&*store, "n1").await.expect("leases");
    let one = |b: &BackfillRecord, slot: Timestamp| {
        step(
            b,
            &leases,
            slot + SignedDuration::from_millis(1),
            backfilled(&job, &[slot]),
            vec![],
            false,
            true,
        )
    };
    assert_eq!(
        store.backfill_step(&one(&b, ago(30))).await.expect("step"),
        BackfillStepped::Applied(1)
    );
    let b = store
        .backfill_get("ns", &b.id)
        .await
        .expect("get")
        .expect("there");
    assert_eq!(
        store.backfill_step(&one(&b, ago(20))).await.expect("step"),
        BackfillStepped::Waiting,
        "the first backfilled execution has not run"
    );
    let done = claim_and_complete_all(&*store).await;
    assert_eq!(done.len(), 1);
    assert_eq!(
        store.backfill_step(&one(&b, ago(20))).await.expect("step"),
        BackfillStepped::Applied(1)
    );
    let b = store
        .backfill_get("ns", &b.id)
        .await
        .expect("get")
        .expect("there");
    let cancelled = store
        .backfill_cancel("ns", &b.id, None)
        .await
        .expect("cancel");
    assert_eq!(
        (cancelled.state, cancelled.created, cancelled.remaining()),
        (BackfillState::Cancelled, 2, 0)
    );
    assert_eq!(cancelled.finished_at, Some(t0()));
    claim_and_complete_all(&*store).await;
    assert_eq!(
        store.backfill_step(&one(&b, ago(10))).await.expect("step"),
        BackfillStepped::Stale,
        "nothing after the cancel"
    );
    assert!(matches!(
        store.backfill_cancel("ns", &b.id, None).await,
        Err(Error::Conflict(_))
    ));
    assert!(matches!(
        store.backfill_cancel("ns", "nope", None).await,
        Err(Error::NotFound(_))
    ));
    clock.advance(SignedDuration::from_secs(1));
    let later = start(&*store, BackfillOf::Job, "nightly", &job.uid, job.shard, 10).await;
    let listed: Vec<String> = store
        .backfill_list("ns", BackfillOf::Job, "nightly")
        .await
        .expect("list")
        .into_iter()
        .map(|b| b.id)
        .collect();
    assert_eq!(listed, [later.id.clone(), b.id.clone()]);
    let running: Vec<String> = store
        .backfill_running(&[job.shard])
        .await
        .expect("running")
        .into_iter()
        .map(|b| b.id)
        .collect();
    assert_eq!(running, [later.id]);
    assert!(
        store
            .backfill_running(&[job.shard.wrapping_add(1) % sundial_core::SHARD_COUNT])
            .await
            .expect("running")
            .is_empty()
    );
    assert!(
        store
            .backfill_get("other", &b.id)
            .await
            .expect("get")
            .is_none(),
        "per namespace"
    );
}

/// Under `skip` and `replace` a backfilled execution due while its job runs waits (it is not
/// skipped, and cancels nothing), and runs once the job is idle.
pub async fn a_backfilled_slot_waits_while_its_job_runs(h: Harness) {
    for policy in [
        sundial_core::job::ConcurrencyPolicy::Skip,
        sundial_core::job::ConcurrencyPolicy::Replace,
    ] {
        let clock = Arc::new(ManualClock::new(t0()));
        let store = h.open(clock.clone()).await;
        let job = create_with(&*store, "busy", policy).await;
        trigger(&*store, "n1", &job, &[t0()])
            .await
            .expect("trigger");
        let running = store.execution_claim(&claim("w", 10)).await.expect("claim");
        assert_eq!(running.len(), 1);
        store
            .execution_insert(&backfilled(&job, &[ago(60)])[0])
            .await
            .expect("a backfilled slot");
        assert!(
            store
                .execution_claim(&claim("w", 10))
                .await
                .expect("claim")
                .is_empty(),
            "{policy:?}: it waits while the job runs"
        );
        let waiting = in_state(&*store, "ns", ExecutionState::Queued).await;
        assert_eq!(waiting.len(), 1, "{policy:?}: not skipped");
        store
            .attempt_complete(&complete_ok(&running[0].id, 1))
            .await
            .expect("complete the running one");
        clock.advance(SignedDuration::from_secs(2));
        let next = store.execution_claim(&claim("w", 10)).await.expect("claim");
        assert_eq!(next.len(), 1, "{policy:?}: it runs once the job is idle");
        assert_eq!(next[0].id, waiting[0].id);
    }
}

/// A workflow's backfill creates one run per slot (`trigger: backfill`), none for a slot that
/// has a run already, and a serial step waits while another run is unfinished.
pub async fn a_workflow_backfill_creates_one_run_per_slot(h: Harness) {
    let store = h.open(Arc::new(ManualClock::new(t0()))).await;
    let wf: WorkflowRecord = create_workflow(
        &*store,
        "etl",
        json!({"schedule": {"every": "10s"}, "concurrency_policy": "skip",
               "tasks": [{"name": "a", "target": {"type": "http", "url": "https://example.com/a"}}]}),
    )
    .await;
    let run = |slot: Timestamp, trigger: Trigger| NewRun {
        id: sundial_core::ids::slot_run_id(&wf.uid, slot),
        trigger,
        scheduled_at: slot,
        fire_at: t0(),
        ..manual_run(&wf, slot, json!({}))
    };
    store
        .run_create(&run(ago(20), Trigger::Schedule))
        .await
        .expect("a run the scheduler made");
    let b = start(&*store, BackfillOf::Workflow, "etl", &wf.uid, wf.shard, 30).await;
    let leases = renew_leases(&*store, "n1").await.expect("leases");
    let first = step(
        &b,
        &leases,
        ago(20) + SignedDuration::from_millis(1),
        vec![],
        vec![
            run(ago(30), Trigger::Backfill),
            run(ago(20), Trigger::Backfill),
        ],
        false,
        true,
    );
    assert_eq!(
        store.backfill_step(&first).await.expect("step"),
        BackfillStepped::Waiting,
        "the scheduler's run is unfinished"
    );
    store
        .run_cancel("ns", &sundial_core::ids::slot_run_id(&wf.uid, ago(20)))
        .await
        .expect("cancel it");
    assert_eq!(
        store.backfill_step(&first).await.expect("step"),
        BackfillStepped::Applied(1)
    );
    let made = store
        .run_get("ns", &sundial_core::ids::slot_run_id(&wf.uid, ago(30)))
        .await
        .expect("get")
        .expect("the backfilled run");
    assert_eq!(made.trigger, Trigger::Backfill);
    let b = store
        .backfill_get("ns", &b.id)
        .await
        .expect("get")
        .expect("there");
    assert_eq!((b.created, b.existing), (1, 1));
    assert_eq!(
        store
            .backfill_unfinished(BackfillOf::Workflow, &wf.uid)
            .await
            .expect("unfinished"),
        1,
        "the backfilled run; the cancelled one is finished"
    );
    let ids: Vec<String> = [ago(30), ago(20), ago(10)]
        .iter()
        .map(|s| sundial_core::ids::slot_run_id(&wf.uid, *s))
        .collect();
    assert_eq!(
        store
            .backfill_taken(BackfillOf::Workflow, &ids)
            .await
            .expect("taken")
            .len(),
        2
    );
}
