use super::*;

#[test]
fn a_burst_window_widens_only_for_what_the_rate_cannot_claim_within_claim_ahead() {
    let s = Dur::from_secs;
    // A steady 10,000/s, and a burst the rate claims within the window: unchanged.
    assert_eq!(burst_window(s(1), 10_000, 20_000), s(1));
    assert_eq!(burst_window(s(1), 20_000, 20_000), s(1));
    // 100,000 at one instant: 80,000 more than a second's claims, 4 s more.
    assert_eq!(burst_window(s(1), 100_000, 20_000), s(5));
    assert_eq!(burst_window(s(2), 30_000, 10_000), s(3));
    // Never wider than BURST_WINDOW_MAX, unless claim_ahead itself is.
    assert_eq!(burst_window(s(1), 1_000_000, 20_000), BURST_WINDOW_MAX);
    assert_eq!(burst_window(s(10), 1_000_000, 1), s(10));
    // Claiming ahead turned off stays off; a zero rate counts as one a second.
    assert_eq!(burst_window(s(0), 100_000, 20_000), s(0));
    assert_eq!(burst_window(s(1), 3, 0), s(3));
}

fn ms(n: i64) -> jiff::SignedDuration {
    jiff::SignedDuration::from_millis(n)
}

#[test]
fn only_a_round_handed_all_it_asked_for_claims_again_at_once() {
    let round = |asked, handed| Round {
        asked,
        handed,
        started: handed,
    };
    assert!(round(1024, 1024).full());
    assert!(!round(1024, 1023).full());
    assert!(!round(1024, 0).full());
    // Nothing asked (no capacity free): nothing to claim again at once.
    assert!(!round(0, 0).full());
}

#[test]
fn a_steady_rate_is_claimed_an_eighth_of_the_window_at_a_time() {
    let (ahead, poll) = (ms(1000), ms(1000));
    // The round took the window; the next execution is just past its edge: wait an
    // eighth of the window, not the 1 ms until it enters it.
    assert_eq!(next_look(300, ms(1001), ahead, poll), ms(125));
    assert_eq!(next_look(0, ms(1001), ahead, poll), ms(125));
    // Further out: until it comes within the window, at most a poll interval.
    assert_eq!(next_look(300, ms(1400), ahead, poll), ms(400));
    assert_eq!(next_look(300, ms(5000), ahead, poll), poll);
    // One came into the window while the round ran: within an eighth of the window,
    // or at its fire time if that is sooner.
    assert_eq!(next_look(300, ms(900), ahead, poll), ms(125));
    assert_eq!(next_look(300, ms(40), ahead, poll), ms(40));
    // One in the window that a round starting nothing left (not one to claim ahead):
    // when it comes due.
    assert_eq!(next_look(0, ms(900), ahead, poll), ms(900));
}

#[test]
fn a_due_execution_is_claimed_at_once_after_progress_and_after_min_idle_otherwise() {
    let (ahead, poll) = (ms(1000), ms(1000));
    assert_eq!(next_look(1, ms(0), ahead, poll), ms(0));
    assert_eq!(next_look(1, ms(-30), ahead, poll), ms(0));
    assert_eq!(next_look(0, ms(-30), ahead, poll), MIN_IDLE);
    // Without claim ahead, the wait is the time until the next one is due.
    assert_eq!(next_look(5, ms(70), ms(0), poll), ms(70));
    assert_eq!(next_look(0, ms(70), ms(0), poll), ms(70));
    assert_eq!(next_look(0, ms(-1), ms(0), poll), MIN_IDLE);
}

#[test]
fn the_writer_defers_only_for_waiting_attempts_with_room_left_and_time_in_budget() {
    let (reserve, early) = (1024, Duration::from_millis(100));
    let budget = COMPLETION_DEFER_MIN;
    // A burst's attempts wait for delivery slots, most of the room is free: defer.
    assert!(defers_writing(3000, 10_000, reserve, early, budget));
    // No attempt waits (a steady rate, or the burst delivered): write at once.
    assert!(!defers_writing(0, 10_000, reserve, early, budget));
    // The room for unwritten completions is down to the reserve: write, so that the
    // attempts still to start do not wait for room.
    assert!(!defers_writing(3000, reserve, reserve, early, budget));
    assert!(defers_writing(3000, reserve + 1, reserve, early, budget));
    // The budget since the writer last caught up is spent: write until it catches up.
    let just_in = budget - Duration::from_millis(1);
    assert!(defers_writing(3000, 10_000, reserve, just_in, budget));
    assert!(!defers_writing(3000, 10_000, reserve, budget, budget));
}

#[test]
fn the_deferral_budget_is_the_time_the_waiting_take_to_deliver_within_its_bounds() {
    // A few waiting, or a 10,000 burst: the floor.
    assert_eq!(defer_budget(0), COMPLETION_DEFER_MIN);
    assert_eq!(defer_budget(3000), COMPLETION_DEFER_MIN);
    assert_eq!(defer_budget(10_000), COMPLETION_DEFER_MIN);
    // 20,000 a second: 50,000 waiting take 2.5 s.
    assert_eq!(defer_budget(50_000), Duration::from_millis(2500));
    // A burst of 100,000 or more: the ceiling.
    assert_eq!(defer_budget(100_000), COMPLETION_DEFER_MAX);
    assert_eq!(defer_budget(1_000_000), COMPLETION_DEFER_MAX);
    assert_eq!(defer_budget(usize::MAX), COMPLETION_DEFER_MAX);
}

#[tokio::test(start_paused = true)]
async fn completions_that_arrive_within_the_wait_are_written_together() {
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    tx.send(1).expect("send");
    let late = tx.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(4)).await;
        late.send(2).expect("send");
        late.send(3).expect("send");
        tokio::time::sleep(Duration::from_millis(20)).await;
        late.send(4).expect("send");
    });
    let mut batch = Vec::new();
    assert_eq!(
        gather(&mut rx, &mut batch, 10, Duration::from_millis(10)).await,
        3
    );
    assert_eq!(batch, [1, 2, 3]);
    batch.clear();
    assert_eq!(
        gather(&mut rx, &mut batch, 10, Duration::from_millis(10)).await,
        1
    );
    assert_eq!(batch, [4]);
}

#[tokio::test(start_paused = true)]
async fn a_full_batch_is_written_without_waiting() {
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    for k in 0..5 {
        tx.send(k).expect("send");
    }
    let started = tokio::time::Instant::now();
    let mut batch = Vec::new();
    assert_eq!(
        gather(&mut rx, &mut batch, 3, Duration::from_millis(10)).await,
        3
    );
    assert_eq!(started.elapsed(), Duration::ZERO);
    drop(tx);
    batch.clear();
    assert_eq!(
        gather(&mut rx, &mut batch, 3, Duration::from_millis(10)).await,
        2
    );
    batch.clear();
    assert_eq!(
        gather(&mut rx, &mut batch, 3, Duration::from_millis(10)).await,
        0
    );
}

/// A worker on an embedded store in `dir`, never started: its completion writer's
/// deferral is driven by hand.
async fn idle_worker(dir: &std::path::Path) -> Worker {
    let clock = Arc::new(sundial_clock::ManualClock::new(sundial_store::testkit::t0()));
    let url = format!("sqlite://{}", dir.join("w.db").display());
    let store = sundial_store_sqlite::SqliteStore::open(&url, clock.clone())
        .await
        .expect("open");
    Worker::new(
        Arc::new(store),
        clock,
        Arc::new(sundial_target::Targets::new().expect("targets")),
        WorkerConfig::new("w"),
        Arc::new(Notify::new()),
    )
}

/// How long the writer defers while `waiting` attempts wait, the count falling to
/// `later` one second in (tokio's time paused).
async fn deferral(worker: &Worker, waiting: usize, later: usize) -> Duration {
    worker.waiting.store(waiting, Ordering::SeqCst);
    let started = tokio::time::Instant::now();
    let mut behind = Behind::now();
    let deferring = worker.clone();
    let writer = tokio::spawn(async move {
        deferring
            .defer_writing(&mut behind, Duration::from_secs(30))
            .await;
        started.elapsed()
    });
    tokio::time::sleep(Duration::from_secs(1)).await;
    worker.waiting.store(later, Ordering::SeqCst);
    if later == 0 {
        worker.none_waiting.notify_waiters();
    }
    writer.await.expect("writer")
}

#[tokio::test]
async fn the_writer_defers_as_long_as_the_most_attempts_seen_waiting_take_to_deliver() {
    let dir = tempfile::tempdir().expect("dir");
    let worker = idle_worker(dir.path()).await;
    tokio::time::pause();
    let within_a_look = |d: Duration, expected: Duration| {
        assert!(
            d >= expected && d <= expected + DEFER_LOOK,
            "deferred {d:?}, expected {expected:?}"
        );
    };
    // 60,000 waiting take 3 s at 20,000/s; the budget stays 3 s once most have started.
    within_a_look(deferral(&worker, 60_000, 10).await, Duration::from_secs(3));
    // A few waiting: the floor.
    within_a_look(deferral(&worker, 3000, 3000).await, COMPLETION_DEFER_MIN);
    // None left waiting: the writer writes at once.
    within_a_look(deferral(&worker, 60_000, 0).await, Duration::from_secs(1));
    // A short heartbeat_timeout caps the deferral at a sixth of it.
    assert_eq!(lease_cap(Duration::from_secs(3)), COMPLETION_DEFER_MIN);
    assert_eq!(lease_cap(Duration::from_secs(30)), COMPLETION_DEFER_MAX);
}
