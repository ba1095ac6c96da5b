//! Checks of the trigger: one execution per slot, large batches, shard-epoch fencing, the due
//! lookup.

use super::*;

/// Triggering a slot twice yields one execution (docs/guarantees.md#g1-one-trigger-per-slot).
pub async fn a_slot_gets_one_execution_however_often_it_is_triggered(h: Harness) {
    let store = h.open(Arc::new(ManualClock::new(t0()))).await;
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

/// Trigger commits and completion batches of hundreds of rows write every row once, and a
/// completion batch answers for each of its completions (stores may split large batches
/// into several statements; 301 rows cross the sizes such splits use).
pub async fn large_batches_write_every_row_once(h: Harness) {
    const N: usize = 301;
    let clock = Arc::new(ManualClock::new(t0()));
    let store = h.open(clock.clone()).await;
    let jobs = store
        .job_write_batch(&new_job_writes("ns", N))
        .await
        .expect("create");
    let commit = first_slots_commit(&*store, "n1", &jobs)
        .await
        .expect("leases");
    let next = t0() + SignedDuration::from_secs(10);
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
            output: None,
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

/// A trigger commit carrying a stale shard epoch writes nothing (docs/guarantees.md#g3-fencing).
pub async fn a_trigger_with_a_stale_epoch_writes_nothing(h: Harness) {
    let store = h.open(Arc::new(ManualClock::new(t0()))).await;
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
        handoff: None,
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
    let store = h.open(Arc::new(ManualClock::new(t0()))).await;
    for (name, offset) in [("late", 30), ("soon", 3), ("now", 0)] {
        create_due(
            &*store,
            "ns",
            name,
            t0() + SignedDuration::from_secs(offset),
        )
        .await;
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

/// The look beyond the horizon: the earliest next fire time after it, and the jobs due within
/// the span from it (half open, no more than the cap); shards not named, jobs at or before the
/// horizon and a first job beyond `until` are not seen; nothing in range gives `None`.
pub async fn the_first_jobs_due_beyond_the_horizon_are_found_and_counted(h: Harness) {
    let store = h.open(Arc::new(ManualClock::new(t0()))).await;
    let at = |ms: i64| t0() + SignedDuration::from_millis(ms);
    let mut shard_of = std::collections::HashMap::new();
    for (name, offset_ms) in [
        ("now", 0),
        ("burst-a", 20_000),
        ("burst-b", 20_000),
        ("burst-c", 20_500),
        ("burst-d", 20_999),
        ("after", 21_000),
        ("far", 90_000),
    ] {
        let job = create_due(&*store, "ns", name, at(offset_ms)).await;
        shard_of.insert(name, job.shard);
    }
    let look_until = |after: i64, until: i64, cap: u32, shards: Vec<u16>| {
        let store = store.clone();
        async move {
            store
                .trigger_next_due(&TriggerNextDue {
                    shards,
                    after: at(after),
                    until: at(until),
                    span: Dur::from_secs(1),
                    cap,
                })
                .await
                .expect("look")
        }
    };
    let look = |after: i64, cap: u32, shards: Vec<u16>| look_until(after, 60_000, cap, shards);
    let every = || (0..sundial_core::SHARD_COUNT).collect::<Vec<u16>>();
    assert_eq!(
        look(5_000, 100, every()).await,
        Some(NextDue {
            fire_at: at(20_000),
            jobs: 4
        }),
        "the four due from 20 s until 21 s, the one at 21 s not"
    );
    assert_eq!(
        look(5_000, 3, every()).await.map(|n| n.jobs),
        Some(3),
        "no more than the cap"
    );
    assert_eq!(
        look(20_000, 100, every()).await,
        Some(NextDue {
            fire_at: at(20_500),
            jobs: 3
        }),
        "jobs at the horizon itself are not beyond it"
    );
    assert_eq!(
        look(21_000, 100, every()).await,
        None,
        "the first job beyond 21 s is due after until"
    );
    assert_eq!(
        look_until(21_000, 90_000, 100, every()).await,
        Some(NextDue {
            fire_at: at(90_000),
            jobs: 1
        }),
        "until is included"
    );
    assert_eq!(look_until(90_000, 200_000, 100, every()).await, None);
    // Only the named shards: those of the jobs at 20.5 s and 21 s (and of any other job that
    // hashes to the same shards).
    let mut shards = vec![shard_of["burst-c"], shard_of["after"]];
    shards.sort_unstable();
    shards.dedup();
    let seen = look(5_000, 100, shards.clone()).await.expect("seen");
    let first_named = [
        ("burst-a", 20_000),
        ("burst-b", 20_000),
        ("burst-c", 20_500),
    ]
    .iter()
    .find(|(name, _)| shards.contains(&shard_of[name]))
    .map(|(_, ms)| at(*ms));
    assert_eq!(Some(seen.fire_at), first_named);
    assert_eq!(
        look(5_000, 100, Vec::new()).await,
        None,
        "no shards, nothing seen"
    );
}

/// The sweep's counts: jobs due per whole second of a half-open range, seconds with none left
/// out, ascending; a capped read covers the earliest jobs; no shards, nothing.
pub async fn jobs_due_are_counted_per_second(h: Harness) {
    let store = h.open(Arc::new(ManualClock::new(t0()))).await;
    let at = |ms: i64| t0() + SignedDuration::from_millis(ms);
    for (name, offset_ms) in [
        ("a", 10_000),
        ("b", 10_000),
        ("c", 10_999),
        ("d", 12_500),
        ("e", 13_000),
        ("f", 14_000),
    ] {
        create_due(&*store, "ns", name, at(offset_ms)).await;
    }
    let second = |ms: i64| at(ms).as_second();
    let seconds = |from: i64, until: i64, cap: u32, shards: Vec<u16>| {
        let store = store.clone();
        async move {
            store
                .trigger_due_seconds(&TriggerDueSeconds {
                    shards,
                    from: at(from),
                    until: at(until),
                    cap,
                })
                .await
                .expect("seconds")
        }
    };
    let every = || (0..sundial_core::SHARD_COUNT).collect::<Vec<u16>>();
    assert_eq!(
        seconds(10_000, 14_000, 100, every()).await,
        [
            (second(10_000), 3),
            (second(12_000), 1),
            (second(13_000), 1)
        ],
        "from included, until not, the empty second left out"
    );
    assert_eq!(
        seconds(10_500, 20_000, 100, every()).await,
        [
            (second(10_000), 1),
            (second(12_000), 1),
            (second(13_000), 1),
            (second(14_000), 1)
        ]
    );
    assert_eq!(
        seconds(0, 20_000, 2, every()).await,
        [(second(10_000), 2)],
        "no more than the cap, earliest first"
    );
    assert!(seconds(0, 20_000, 100, Vec::new()).await.is_empty());
}
