//! The scheduler against the embedded store with an injected clock: misfire policies across a
//! three-hour stop, daily jobs across daylight-saving changes, lookahead and completion.
//! No test sleeps: time moves only when a test moves the `ManualClock`.

use std::sync::Arc;

use jiff::{SignedDuration, Timestamp};
use sundial_clock::{Clock, ManualClock};
use sundial_core::Dur;
use sundial_core::execution::{ExecutionState, Trigger};
use sundial_core::hash::shard_of;
use sundial_core::job::{DstFold, DstGap, DstSpec, MisfirePolicy, ScheduleKind, ScheduleSpec};
use sundial_core::schedule::Schedule;
use sundial_scheduler::{Scheduler, SchedulerConfig};
use sundial_store::testkit::job_spec;
use sundial_store::{
    ExecutionListQuery, ExecutionRecord, JobRecord, JobWrite, PendingExecutions, Store,
};
use sundial_store_sqlite::SqliteStore;
use tokio::sync::Notify;

struct Rig {
    clock: Arc<ManualClock>,
    store: Arc<dyn Store>,
    scheduler: Scheduler,
    _dir: tempfile::TempDir,
}

async fn rig(start: &str) -> Rig {
    rig_with(start, SchedulerConfig::new("sim")).await
}

async fn rig_with(start: &str, config: SchedulerConfig) -> Rig {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(start.parse().unwrap()));
    let url = format!("sqlite://{}", dir.path().join("s.db").display());
    let dyn_clock: Arc<dyn Clock> = clock.clone();
    let store: Arc<dyn Store> = Arc::new(SqliteStore::open(&url, dyn_clock.clone()).await.unwrap());
    let scheduler = Scheduler::new(store.clone(), dyn_clock, config, Arc::new(Notify::new()));
    Rig {
        clock,
        store,
        scheduler,
        _dir: dir,
    }
}

impl Rig {
    async fn add_cron(&self, name: &str, cron: &str, tz: &str, policy: MisfirePolicy) {
        self.add_cron_dst(name, cron, tz, policy, None).await;
    }

    /// A cron job that excludes the days of the named calendars.
    async fn add_cron_excluding(&self, name: &str, cron: &str, tz: &str, calendars: &[&str]) {
        self.add_cron_full(name, cron, tz, MisfirePolicy::RunOnce, None, calendars)
            .await;
    }

    async fn add_cron_dst(
        &self,
        name: &str,
        cron: &str,
        tz: &str,
        policy: MisfirePolicy,
        dst: Option<DstSpec>,
    ) {
        self.add_cron_full(name, cron, tz, policy, dst, &[]).await;
    }

    async fn add_cron_full(
        &self,
        name: &str,
        cron: &str,
        tz: &str,
        policy: MisfirePolicy,
        dst: Option<DstSpec>,
        calendars: &[&str],
    ) {
        let mut spec = job_spec("sim", name, 60);
        spec.schedule = ScheduleSpec {
            kind: ScheduleKind::Cron {
                cron: cron.into(),
                timezone: tz.into(),
                dst,
            },
            start_at: None,
            end_at: None,
            exclude_calendars: calendars.iter().map(|c| (*c).to_owned()).collect(),
        };
        spec.misfire_policy = policy;
        self.put(spec, &uuid::Uuid::now_v7().to_string()).await;
    }

    /// Writes a job as the API would create it now: its next slot the schedule's first.
    async fn put(&self, spec: sundial_core::job::JobSpec, uid: &str) {
        let first = Schedule::compile(&spec.schedule)
            .unwrap()
            .first_slot(self.clock.now());
        let record = JobRecord {
            shard: shard_of(&spec.namespace, &spec.name),
            spec,
            uid: uid.into(),
            version: 0,
            created_at: self.clock.now(),
            updated_at: self.clock.now(),
            next_slot_at: first,
            next_fire_at: first,
            pending_fire_at: None,
            last_execution: None,
        };
        self.store
            .job_write(&JobWrite {
                record,
                expected_version: None,
                pending: PendingExecutions::Keep,
            })
            .await
            .unwrap();
    }

    /// Runs a pass every `step` until `until`, as a live scheduler would.
    async fn run_until(&mut self, until: &str, step: SignedDuration) {
        let until: Timestamp = until.parse().unwrap();
        while self.clock.now() < until {
            self.scheduler.pass().await.unwrap();
            self.clock.advance(step);
        }
        self.scheduler.pass().await.unwrap();
    }

    /// Runs passes until `until`, moving the clock from each pass to 3 s before the job's next
    /// fire time (inside the lookahead), as a live scheduler with nothing else to do would.
    async fn follow_job_until(&mut self, job: &str, until: &str) {
        let until: Timestamp = until.parse().unwrap();
        loop {
            self.scheduler.pass().await.unwrap();
            let next = self
                .store
                .job_get("sim", job)
                .await
                .unwrap()
                .unwrap()
                .next_fire_at;
            match next {
                Some(next) if next <= until => {
                    let wake = next - SignedDuration::from_secs(3);
                    if wake > self.clock.now() {
                        self.clock.set(wake);
                    }
                }
                _ => return,
            }
        }
    }

    async fn executions(&self, job: &str) -> Vec<ExecutionRecord> {
        let mut all = self
            .store
            .execution_list(&ExecutionListQuery {
                namespace: "sim".into(),
                job: Some(job.into()),
                limit: 1000,
                ..Default::default()
            })
            .await
            .unwrap();
        all.reverse();
        all
    }
}

fn count(es: &[ExecutionRecord], state: ExecutionState, trigger: Trigger) -> usize {
    es.iter()
        .filter(|e| e.state == state && e.trigger == trigger)
        .count()
}

/// An every-minute job; the scheduler runs until 10:00:30, is stopped for three hours, and
/// resumes at 13:00:30. Returns the executions of the outage and after.
async fn three_hour_stop(policy: MisfirePolicy) -> Vec<ExecutionRecord> {
    let mut rig = rig("2026-01-01T09:55:00Z").await;
    rig.add_cron("m", "* * * * *", "UTC", policy).await;
    rig.run_until("2026-01-01T10:00:30Z", SignedDuration::from_secs(1))
        .await;
    let before = rig.executions("m").await.len();
    assert_eq!(before, 6, "09:55..10:00 triggered while running");
    rig.clock.set("2026-01-01T13:00:30Z".parse().unwrap());
    rig.scheduler.pass().await.unwrap();
    let all = rig.executions("m").await;
    let slots: Vec<_> = all.iter().map(|e| e.scheduled_at).collect();
    let mut expected = Vec::new();
    let mut t: Timestamp = "2026-01-01T09:55:00Z".parse().unwrap();
    while t <= "2026-01-01T13:00:00Z".parse().unwrap() {
        expected.push(t);
        t += SignedDuration::from_secs(60);
    }
    assert_eq!(
        slots, expected,
        "every slot of the outage has exactly one record (G1)"
    );
    all[before..].to_vec()
}

#[tokio::test]
async fn run_once_runs_one_execution_for_a_three_hour_outage_and_records_the_rest_missed() {
    let outage = three_hour_stop(MisfirePolicy::RunOnce).await;
    assert_eq!(
        count(&outage, ExecutionState::Missed, Trigger::Misfire),
        179
    );
    let runs: Vec<_> = outage
        .iter()
        .filter(|e| e.state == ExecutionState::Scheduled)
        .collect();
    assert_eq!(runs.len(), 1);
    assert_eq!(
        (runs[0].trigger, runs[0].scheduled_at),
        (Trigger::Misfire, "2026-01-01T13:00:00Z".parse().unwrap())
    );
}

#[tokio::test]
async fn run_all_runs_every_slot_of_a_three_hour_outage_oldest_first() {
    let outage = three_hour_stop(MisfirePolicy::RunAll).await;
    assert_eq!(
        count(&outage, ExecutionState::Scheduled, Trigger::Misfire),
        180
    );
    assert!(outage.windows(2).all(|w| w[0].fire_at < w[1].fire_at));
}

#[tokio::test]
async fn skip_records_old_slots_missed_and_runs_the_young_one_late() {
    let outage = three_hour_stop(MisfirePolicy::Skip).await;
    assert_eq!(
        count(&outage, ExecutionState::Missed, Trigger::Misfire),
        179
    );
    let last = outage.last().unwrap();
    assert_eq!(
        (last.state, last.trigger),
        (ExecutionState::Scheduled, Trigger::Schedule)
    );
}

/// A daily fixed-time job across a DST change fires exactly once each local day, at the
/// instant the dialect documents (cronie: a skipped time fires at the transition, a repeated
/// time at its first instant).
async fn daily_across(cron: &str, tz: &str, from: &str, until: &str, expected: &[&str]) {
    daily_across_under(cron, tz, None, from, until, expected).await;
}

/// [`daily_across`] under a schedule's own DST policy (docs/cron.md, "DST policy").
async fn daily_across_under(
    cron: &str,
    tz: &str,
    dst: Option<DstSpec>,
    from: &str,
    until: &str,
    expected: &[&str],
) {
    let mut rig = rig(from).await;
    rig.add_cron_dst("daily", cron, tz, MisfirePolicy::RunOnce, dst)
        .await;
    rig.follow_job_until("daily", until).await;
    let got: Vec<Timestamp> = rig
        .executions("daily")
        .await
        .iter()
        .map(|e| e.scheduled_at)
        .collect();
    let expected: Vec<Timestamp> = expected
        .iter()
        .map(|s| s.parse::<jiff::Zoned>().unwrap().timestamp())
        .collect();
    assert_eq!(got, expected);
    assert!(
        rig.executions("daily")
            .await
            .iter()
            .all(|e| e.trigger == Trigger::Schedule),
        "no misfires while running"
    );
}

#[tokio::test]
async fn new_york_daily_job_fires_once_a_day_across_spring_forward() {
    daily_across(
        "30 2 * * *",
        "America/New_York",
        "2026-03-07T00:00:00Z",
        "2026-03-10T00:00:00Z",
        &[
            "2026-03-07T02:30:00-05:00[America/New_York]",
            "2026-03-08T03:00:00-04:00[America/New_York]",
            "2026-03-09T02:30:00-04:00[America/New_York]",
        ],
    )
    .await;
}

#[tokio::test]
async fn new_york_daily_job_fires_once_a_day_across_fall_back() {
    daily_across(
        "30 1 * * *",
        "America/New_York",
        "2026-10-31T00:00:00Z",
        "2026-11-03T00:00:00Z",
        &[
            "2026-10-31T01:30:00-04:00[America/New_York]",
            "2026-11-01T01:30:00-04:00[America/New_York]",
            "2026-11-02T01:30:00-05:00[America/New_York]",
        ],
    )
    .await;
}

#[tokio::test]
async fn a_dst_policy_skips_the_missing_slot_and_fires_the_repeated_one_twice() {
    let policy = Some(DstSpec {
        gap: DstGap::Skip,
        fold: DstFold::Both,
    });
    daily_across_under(
        "30 2 * * *",
        "Europe/Berlin",
        policy,
        "2026-03-28T00:00:00Z",
        "2026-03-31T00:00:00Z",
        &[
            "2026-03-28T02:30:00+01:00[Europe/Berlin]",
            "2026-03-30T02:30:00+02:00[Europe/Berlin]",
        ],
    )
    .await;
    daily_across_under(
        "30 2 * * *",
        "Europe/Berlin",
        policy,
        "2026-10-24T00:00:00Z",
        "2026-10-27T00:00:00Z",
        &[
            "2026-10-24T02:30:00+02:00[Europe/Berlin]",
            "2026-10-25T02:30:00+02:00[Europe/Berlin]",
            "2026-10-25T02:30:00+01:00[Europe/Berlin]",
            "2026-10-26T02:30:00+01:00[Europe/Berlin]",
        ],
    )
    .await;
    daily_across_under(
        "30 1 * * *",
        "America/New_York",
        Some(DstSpec {
            gap: DstGap::Shift,
            fold: DstFold::Last,
        }),
        "2026-10-31T00:00:00Z",
        "2026-11-03T00:00:00Z",
        &[
            "2026-10-31T01:30:00-04:00[America/New_York]",
            "2026-11-01T01:30:00-05:00[America/New_York]",
            "2026-11-02T01:30:00-05:00[America/New_York]",
        ],
    )
    .await;
}

/// Slots on a calendar's excluded days are neither fired nor recorded, and a calendar changed
/// later takes effect for every slot not yet triggered, both ways (docs/time.md, "Calendars").
#[tokio::test]
async fn calendar_days_are_not_fired_and_a_changed_calendar_applies_to_later_slots() {
    let mut rig = rig("2027-01-01T00:00:00Z").await; // a Friday
    let calendar = |exclude: serde_json::Value| {
        sundial_core::calendar::calendar_from_json(
            &serde_json::json!({"timezone": "Europe/Berlin", "exclude": exclude}),
        )
        .unwrap()
    };
    rig.store
        .calendar_put(
            "sim",
            "weekends",
            &calendar(serde_json::json!([{"cron": "* * * * SAT,SUN"}])),
        )
        .await
        .unwrap();
    rig.add_cron_excluding("daily", "0 9 * * *", "Europe/Berlin", &["weekends", "gone"])
        .await;
    rig.follow_job_until("daily", "2027-01-06T00:00:00Z").await;
    let slots = |es: Vec<ExecutionRecord>| -> Vec<String> {
        es.iter().map(|e| e.scheduled_at.to_string()).collect()
    };
    assert_eq!(
        slots(rig.executions("daily").await),
        [
            "2027-01-01T08:00:00Z",
            "2027-01-04T08:00:00Z",
            "2027-01-05T08:00:00Z"
        ],
        "the weekend of the 2nd and 3rd is left out, and not recorded"
    );
    // Now weekends run, but the 6th and 7th are holidays.
    rig.store
        .calendar_put(
            "sim",
            "weekends",
            &calendar(serde_json::json!([{"from": "2027-01-06", "to": "2027-01-07"}])),
        )
        .await
        .unwrap();
    rig.follow_job_until("daily", "2027-01-10T00:00:00Z").await;
    assert_eq!(
        slots(rig.executions("daily").await)[3..],
        ["2027-01-08T08:00:00Z", "2027-01-09T08:00:00Z"]
    );
}

#[tokio::test]
async fn berlin_daily_job_fires_once_a_day_across_both_changes() {
    daily_across(
        "30 2 * * *",
        "Europe/Berlin",
        "2026-03-28T00:00:00Z",
        "2026-03-31T00:00:00Z",
        &[
            "2026-03-28T02:30:00+01:00[Europe/Berlin]",
            "2026-03-29T03:00:00+02:00[Europe/Berlin]",
            "2026-03-30T02:30:00+02:00[Europe/Berlin]",
        ],
    )
    .await;
    daily_across(
        "30 2 * * *",
        "Europe/Berlin",
        "2026-10-24T00:00:00Z",
        "2026-10-27T00:00:00Z",
        &[
            "2026-10-24T02:30:00+02:00[Europe/Berlin]",
            "2026-10-25T02:30:00+02:00[Europe/Berlin]",
            "2026-10-26T02:30:00+01:00[Europe/Berlin]",
        ],
    )
    .await;
}

#[tokio::test]
async fn slots_are_triggered_within_the_lookahead_and_never_twice() {
    let mut rig = rig("2026-01-01T00:00:01Z").await;
    rig.add_cron("s", "*/10 * * * * *", "UTC", MisfirePolicy::RunOnce)
        .await;
    rig.scheduler.pass().await.unwrap();
    assert!(
        rig.executions("s").await.is_empty(),
        "00:00:10 is beyond the 5 s lookahead"
    );
    rig.clock.advance(SignedDuration::from_secs(5));
    for _ in 0..3 {
        rig.scheduler.pass().await.unwrap();
    }
    let es = rig.executions("s").await;
    assert_eq!(es.len(), 1);
    assert_eq!(es[0].fire_at, "2026-01-01T00:00:10Z".parse().unwrap());
    assert_eq!(
        es[0].state,
        ExecutionState::Scheduled,
        "triggered ahead, not yet due"
    );
    let uid = rig.store.job_get("sim", "s").await.unwrap().unwrap().uid;
    assert_eq!(
        es[0].id,
        sundial_core::ids::slot_execution_id(&uid, es[0].scheduled_at),
        "a slot's execution has the id derived from its job and slot"
    );
}

/// Creates `n` one-off jobs, each with its one slot at `at`.
async fn add_once(rig: &Rig, prefix: &str, n: usize, at: &str) {
    for i in 0..n {
        let mut spec = job_spec("sim", &format!("{prefix}-{i}"), 60);
        spec.schedule = ScheduleSpec {
            kind: ScheduleKind::At {
                at: at.parse().unwrap(),
            },
            start_at: None,
            end_at: None,
            exclude_calendars: Vec::new(),
        };
        rig.put(spec, &uuid::Uuid::now_v7().to_string()).await;
    }
}

/// Executions written for jobs whose name starts with `prefix`.
async fn written(rig: &Rig, prefix: &str) -> usize {
    rig.store
        .execution_list(&ExecutionListQuery {
            namespace: "sim".into(),
            limit: 1000,
            ..Default::default()
        })
        .await
        .unwrap()
        .iter()
        .filter(|e| e.job.starts_with(prefix))
        .count()
}

#[tokio::test]
async fn a_burst_is_triggered_as_far_ahead_as_its_size_needs() {
    // A rate of 10 jobs a second: a burst of 40 at one instant needs 3 s more than the
    // 5 s lookahead (the first second's 10 are written within it), so 8 s.
    let config = SchedulerConfig {
        burst_trigger_rate: 10,
        ..SchedulerConfig::new("sim")
    };
    let mut rig = rig_with("2026-01-01T00:00:00Z", config).await;
    add_once(&rig, "burst", 40, "2026-01-01T00:00:30Z").await;
    add_once(&rig, "lone", 1, "2026-01-01T00:01:30Z").await;
    // 30 s ahead: beyond the widened lookahead too; the pass only looks.
    let report = rig.scheduler.pass().await.unwrap();
    assert_eq!((report.jobs, report.burst_in_reach), (0, false));
    assert_eq!(written(&rig, "burst").await, 0);
    // 7.5 s ahead: beyond the 5 s setting, within the burst's 8 s. The pass's look widens
    // the lookahead and asks for the next pass at once, which writes the burst.
    rig.clock.set("2026-01-01T00:00:22.500Z".parse().unwrap());
    let report = rig.scheduler.pass().await.unwrap();
    assert!(report.burst_in_reach);
    rig.scheduler.pass().await.unwrap();
    assert_eq!(
        written(&rig, "burst").await,
        40,
        "the whole burst written 7.5 s before its fire time"
    );
    // With the burst written, the lookahead is the setting's again: the lone job is not
    // written 7.5 s before its slot, and it is at 5 s.
    rig.clock.set("2026-01-01T00:01:22.500Z".parse().unwrap());
    rig.scheduler.pass().await.unwrap();
    rig.scheduler.pass().await.unwrap();
    assert_eq!(written(&rig, "lone").await, 0);
    rig.clock.set("2026-01-01T00:01:25Z".parse().unwrap());
    rig.scheduler.pass().await.unwrap();
    assert_eq!(written(&rig, "lone").await, 1);
}

#[tokio::test]
async fn a_burst_behind_a_steady_stream_of_slots_is_triggered_as_far_ahead_as_it_needs() {
    // An every-second job is always the first due beyond the horizon; the burst 40 s ahead
    // is found by the sweep of the seconds coming into reach, remembered, and written 8 s
    // ahead (at most a pass later), not at the 5 s lookahead.
    let config = SchedulerConfig {
        burst_trigger_rate: 10,
        ..SchedulerConfig::new("sim")
    };
    let mut rig = rig_with("2026-01-01T00:00:00Z", config).await;
    let mut tick = job_spec("sim", "tick", 1);
    tick.jitter = Dur::ZERO;
    tick.schedule.start_at = Some("2026-01-01T00:00:00Z".parse().unwrap());
    rig.put(tick, "u-tick").await;
    add_once(&rig, "burst", 40, "2026-01-01T00:00:40Z").await;
    rig.run_until("2026-01-01T00:00:33Z", SignedDuration::from_secs(1))
        .await;
    assert_eq!(
        written(&rig, "burst").await,
        40,
        "the whole burst written 7 s before its fire time"
    );
    let ticks = written(&rig, "tick").await;
    assert!(
        (30..=42).contains(&ticks),
        "the steady job's slots are written as before, up to the lookahead: {ticks}"
    );
}

#[tokio::test]
async fn a_burst_found_within_its_reach_asks_for_the_next_pass_at_once() {
    let config = SchedulerConfig {
        burst_trigger_rate: 10,
        ..SchedulerConfig::new("sim")
    };
    let mut rig = rig_with("2026-01-01T00:00:00Z", config).await;
    add_once(&rig, "burst", 40, "2026-01-01T00:00:07Z").await;
    // The first pass reads nothing within 5 s and finds the burst 7 s ahead, within its 8 s:
    // the next pass is due at once, and writes it.
    let report = rig.scheduler.pass().await.unwrap();
    assert_eq!((report.jobs, report.burst_in_reach), (0, true));
    assert_eq!(written(&rig, "burst").await, 0);
    let report = rig.scheduler.pass().await.unwrap();
    assert_eq!(report.executions, 40);
    assert_eq!(written(&rig, "burst").await, 40);
}

#[tokio::test]
async fn a_job_past_its_end_is_completed() {
    let mut rig = rig("2026-01-01T00:00:00Z").await;
    let mut spec = job_spec("sim", "bounded", 1);
    spec.schedule.start_at = Some("2026-01-01T00:00:00Z".parse().unwrap());
    spec.schedule.end_at = Some("2026-01-01T00:00:03Z".parse().unwrap());
    spec.jitter = Dur::ZERO;
    rig.put(spec, "u-bounded").await;
    rig.run_until("2026-01-01T00:00:10Z", SignedDuration::from_secs(1))
        .await;
    assert_eq!(
        rig.executions("bounded").await.len(),
        4,
        "slots 0, 1, 2, 3 s"
    );
    let job = rig.store.job_get("sim", "bounded").await.unwrap().unwrap();
    assert_eq!(job.state(), "completed");
}

#[tokio::test]
async fn jitter_offsets_each_slot_deterministically_within_its_bound() {
    let mut rig = rig("2026-01-01T00:00:00Z").await;
    let mut spec = job_spec("sim", "jittery", 10);
    spec.jitter = Dur::from_secs(5);
    spec.schedule.start_at = Some("2026-01-01T00:00:00Z".parse().unwrap());
    let record = JobRecord {
        shard: shard_of("sim", "jittery"),
        next_slot_at: spec.schedule.start_at,
        next_fire_at: spec.schedule.start_at,
        spec,
        uid: "u-jittery".into(),
        version: 0,
        created_at: rig.clock.now(),
        updated_at: rig.clock.now(),
        pending_fire_at: None,
        last_execution: None,
    };
    rig.store
        .job_write(&JobWrite {
            record,
            expected_version: None,
            pending: PendingExecutions::Keep,
        })
        .await
        .unwrap();
    rig.run_until("2026-01-01T00:02:00Z", SignedDuration::from_secs(1))
        .await;
    let es = rig.executions("jittery").await;
    assert!(es.len() >= 12);
    let offsets: Vec<i64> = es
        .iter()
        .map(|e| e.fire_at.as_millisecond() - e.scheduled_at.as_millisecond())
        .collect();
    assert!(offsets.iter().all(|o| (0..5000).contains(o)), "{offsets:?}");
    assert!(
        offsets.iter().any(|o| *o != offsets[0]),
        "offsets vary by slot: {offsets:?}"
    );
    for e in &es {
        let expected =
            sundial_core::hash::jitter_offset("u-jittery", e.scheduled_at, Dur::from_secs(5));
        assert_eq!(
            e.fire_at,
            e.scheduled_at + expected.as_signed(),
            "every scheduler computes the same fire time"
        );
    }
}
