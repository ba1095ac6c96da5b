//! The scheduler creating workflow runs on the embedded store with an injected clock: one run
//! per slot however often a pass runs, a misfire episode under `run_once`, and `skip` judged
//! at the fire time. No test sleeps: time moves only when a test moves the `ManualClock`.

use std::sync::Arc;

use jiff::{SignedDuration, Timestamp};
use serde_json::json;
use sundial_clock::{Clock, ManualClock};
use sundial_core::execution::Trigger;
use sundial_core::schedule::Schedule;
use sundial_core::workflow::RunState;
use sundial_scheduler::{Scheduler, SchedulerConfig};
use sundial_store::testkit::workflow_record;
use sundial_store::{RunListQuery, RunRecord, Store, WorkflowRecord, WorkflowWrite};
use sundial_store_sqlite::SqliteStore;
use tokio::sync::Notify;

struct Rig {
    clock: Arc<ManualClock>,
    store: Arc<dyn Store>,
    scheduler: Scheduler,
    _dir: tempfile::TempDir,
}

async fn rig(start: &str) -> Rig {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = Arc::new(ManualClock::new(start.parse().expect("instant")));
    let url = format!("sqlite://{}", dir.path().join("w.db").display());
    let dyn_clock: Arc<dyn Clock> = clock.clone();
    let store: Arc<dyn Store> = Arc::new(
        SqliteStore::open(&url, dyn_clock.clone())
            .await
            .expect("open store"),
    );
    let scheduler = Scheduler::new(
        store.clone(),
        dyn_clock,
        SchedulerConfig::new("sim"),
        Arc::new(Notify::new()),
    );
    Rig {
        clock,
        store,
        scheduler,
        _dir: dir,
    }
}

impl Rig {
    /// A workflow on `schedule` whose first slot is the first at or after now.
    async fn add(&self, name: &str, body: serde_json::Value) -> WorkflowRecord {
        let mut record = workflow_record("sim", name, body);
        let schedule = record.spec.schedule.clone().expect("a schedule");
        let first = Schedule::compile(&schedule)
            .expect("compiles")
            .first_slot(self.clock.now());
        record.next_slot_at = first;
        record.next_fire_at = first;
        self.store
            .workflow_write_batch(&[WorkflowWrite {
                record,
                expected_version: None,
                cancel_not_started: true,
            }])
            .await
            .expect("create workflow")
            .remove(0)
    }

    async fn runs(&self, name: &str) -> Vec<RunRecord> {
        let mut runs = self
            .store
            .run_list(&RunListQuery {
                namespace: "sim".into(),
                workflow: Some(name.into()),
                limit: 1000,
                ..Default::default()
            })
            .await
            .expect("list runs");
        runs.reverse();
        runs
    }

    async fn pass_at(&mut self, at: Timestamp) {
        self.clock.set(at);
        self.scheduler.pass().await.expect("pass");
    }
}

fn minutely() -> serde_json::Value {
    json!({"schedule": {"cron": "* * * * *"}, "tasks": [
        {"name": "a", "target": {"type": "http", "url": "http://127.0.0.1:9/a"}},
        {"name": "b", "depends_on": ["a"], "target": {"type": "http", "url": "http://127.0.0.1:9/b"}}
    ]})
}

#[tokio::test]
async fn each_slot_gets_one_run_however_often_the_scheduler_passes() {
    let mut rig = rig("2027-01-01T00:00:30Z").await;
    rig.add("minutely", minutely()).await;
    let start: Timestamp = "2027-01-01T00:00:30Z".parse().expect("instant");
    for s in (0..180).step_by(5) {
        rig.pass_at(start + SignedDuration::from_secs(s)).await;
        rig.pass_at(start + SignedDuration::from_secs(s)).await;
    }
    let runs = rig.runs("minutely").await;
    let slots: Vec<String> = runs.iter().map(|r| r.scheduled_at.to_string()).collect();
    assert_eq!(
        slots,
        vec![
            "2027-01-01T00:01:00Z",
            "2027-01-01T00:02:00Z",
            "2027-01-01T00:03:00Z"
        ]
    );
    assert!(runs.iter().all(|r| r.trigger == Trigger::Schedule));
    let run = rig
        .store
        .run_get("sim", &runs[0].id)
        .await
        .expect("get")
        .expect("run");
    assert_eq!(run.tasks.len(), 2, "one execution per task");
    // Ids derived from what they identify (sundial_core::ids): the run's from its workflow
    // and slot, each task's from the run and the task's name.
    let uid = rig
        .store
        .workflow_get("sim", "minutely")
        .await
        .expect("get")
        .expect("workflow")
        .uid;
    assert_eq!(
        run.id,
        sundial_core::ids::slot_run_id(&uid, run.scheduled_at)
    );
    for t in &run.tasks {
        assert_eq!(
            t.execution_id,
            sundial_core::ids::task_execution_id(&run.id, &t.name, run.scheduled_at)
        );
    }
}

/// A workflow whose schedule names a calendar gets no run on the calendar's days, and none is
/// recorded (docs/time.md, "Calendars").
#[tokio::test]
async fn a_calendar_day_gets_no_run() {
    let mut rig = rig("2027-01-01T00:00:30Z").await;
    rig.store
        .calendar_put(
            "sim",
            "new-year",
            &sundial_core::calendar::calendar_from_json(
                &json!({"timezone": "UTC", "exclude": [{"date": "2027-01-02"}]}),
            )
            .expect("valid"),
        )
        .await
        .expect("put");
    rig.add(
        "hourly",
        json!({"schedule": {"cron": "0 */12 * * *", "exclude_calendars": ["new-year"]}, "tasks": [
            {"name": "a", "target": {"type": "http", "url": "http://127.0.0.1:9/a"}}]}),
    )
    .await;
    let start: Timestamp = "2027-01-01T00:00:30Z".parse().expect("instant");
    for h in 0..=120 {
        rig.pass_at(start + SignedDuration::from_mins(h * 30)).await;
    }
    let slots: Vec<String> = rig
        .runs("hourly")
        .await
        .iter()
        .map(|r| r.scheduled_at.to_string())
        .collect();
    assert_eq!(
        slots,
        [
            "2027-01-01T12:00:00Z",
            "2027-01-03T00:00:00Z",
            "2027-01-03T12:00:00Z"
        ]
    );
}

#[tokio::test]
async fn an_outage_gives_one_run_under_run_once() {
    let mut rig = rig("2027-01-01T00:00:30Z").await;
    rig.add("outage", minutely()).await;
    rig.pass_at("2027-01-01T00:01:00Z".parse().expect("instant"))
        .await;
    // Three hours pass with no scheduler.
    rig.pass_at("2027-01-01T03:00:30Z".parse().expect("instant"))
        .await;
    let runs = rig.runs("outage").await;
    let ran: Vec<&RunRecord> = runs
        .iter()
        .filter(|r| r.state != RunState::Missed)
        .collect();
    assert_eq!(ran.len(), 2, "the slot before, then one run for the outage");
    assert_eq!(ran[1].trigger, Trigger::Misfire);
    assert_eq!(ran[1].scheduled_at.to_string(), "2027-01-01T03:00:00Z");
    assert!(runs.iter().filter(|r| r.state == RunState::Missed).count() >= 100);
}

#[tokio::test]
async fn skip_is_judged_when_the_slot_comes_due() {
    let mut rig = rig("2027-01-01T00:00:30Z").await;
    let mut body = minutely();
    body["concurrency_policy"] = json!("skip");
    rig.add("skipper", body).await;
    // Within the lookahead but before its fire time: no run yet.
    rig.pass_at("2027-01-01T00:00:58Z".parse().expect("instant"))
        .await;
    assert!(rig.runs("skipper").await.is_empty());
    rig.pass_at("2027-01-01T00:01:00Z".parse().expect("instant"))
        .await;
    rig.pass_at("2027-01-01T00:02:00Z".parse().expect("instant"))
        .await;
    let states: Vec<RunState> = rig.runs("skipper").await.iter().map(|r| r.state).collect();
    assert_eq!(states, vec![RunState::Running, RunState::Skipped]);
}
