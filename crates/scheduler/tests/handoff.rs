//! A scheduler handing the slots it writes to the worker beside it, against the embedded store
//! with an injected clock (docs/guarantees.md, "Slots handed to the worker beside the
//! scheduler"): while the store has a backlog, a slot the worker would take but has no room
//! for is not written; its job stays due until a pass finds room, and is then handed out,
//! started at the commit's time. Without a backlog it is written to wait for a claim. The worker is stood in for by its room alone ([`Room`]); the store, its
//! worker lease and the trigger commit are the real ones. No test sleeps.

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};

use jiff::{SignedDuration, Timestamp};
use sundial_clock::{Clock, ManualClock};
use sundial_core::Dur;
use sundial_core::execution::ExecutionState;
use sundial_core::hash::shard_of;
use sundial_core::job::{ConcurrencyPolicy, ScheduleKind, ScheduleSpec};
use sundial_scheduler::{Scheduler, SchedulerConfig};
use sundial_store::handoff::{Handoff, HandoffOffer, TriggerHandoff};
use sundial_store::testkit::job_spec;
use sundial_store::{
    ClaimedExecution, ExecutionListQuery, ExecutionRecord, JobRecord, JobWrite, PendingExecutions,
    Store,
};
use sundial_store_sqlite::SqliteStore;
use tokio::sync::Notify;

/// The worker's side of a handoff as the scheduler sees it: the room it offers (`None` when it
/// takes nothing at all) under a real worker lease, whether the store has a backlog (the slots
/// beyond the room are then deferred), and what it was handed.
struct Room {
    room: AtomicU32,
    backlog: AtomicBool,
    declines: AtomicBool,
    epoch: i64,
    handed: Arc<Mutex<Vec<ClaimedExecution>>>,
}

impl Handoff for Room {
    fn offer(&self, wanted: usize) -> Option<HandoffOffer> {
        if wanted == 0 || self.declines.load(Ordering::SeqCst) {
            return None;
        }
        let limit = self
            .room
            .load(Ordering::SeqCst)
            .min(u32::try_from(wanted).unwrap());
        let handed = self.handed.clone();
        Some(HandoffOffer {
            request: TriggerHandoff {
                worker: "w".into(),
                epoch: self.epoch,
                limit,
                within: Dur::from_secs(10),
                rate_limited: Vec::new(),
            },
            defer: self.backlog.load(Ordering::SeqCst),
            deliver: Box::new(move |claims, _| handed.lock().unwrap().extend(claims)),
        })
    }
}

struct Rig {
    clock: Arc<ManualClock>,
    store: Arc<dyn Store>,
    scheduler: Scheduler,
    room: Arc<Room>,
    _dir: tempfile::TempDir,
}

async fn rig(start: &str) -> Rig {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(start.parse().unwrap()));
    let url = format!("sqlite://{}", dir.path().join("s.db").display());
    let dyn_clock: Arc<dyn Clock> = clock.clone();
    let store: Arc<dyn Store> = Arc::new(SqliteStore::open(&url, dyn_clock.clone()).await.unwrap());
    let lease = store
        .worker_lease_acquire("w", Dur::from_secs(3600))
        .await
        .unwrap();
    let room = Arc::new(Room {
        room: AtomicU32::new(0),
        backlog: AtomicBool::new(true),
        declines: AtomicBool::new(false),
        epoch: lease.epoch,
        handed: Arc::default(),
    });
    let mut scheduler = Scheduler::new(
        store.clone(),
        dyn_clock,
        SchedulerConfig::new("sim"),
        Arc::new(Notify::new()),
    );
    scheduler.hand_off_to(room.clone());
    Rig {
        clock,
        store,
        scheduler,
        room,
        _dir: dir,
    }
}

impl Rig {
    /// A one-off job named `name` at `at`, with `policy`.
    async fn once(&self, name: &str, at: &str, policy: ConcurrencyPolicy) {
        let mut spec = job_spec("sim", name, 60);
        spec.schedule = ScheduleSpec {
            kind: ScheduleKind::At {
                at: at.parse().unwrap(),
            },
            start_at: None,
            end_at: None,
            exclude_calendars: Vec::new(),
        };
        spec.concurrency_policy = policy;
        spec.jitter = Dur::ZERO;
        let at: Timestamp = at.parse().unwrap();
        let record = JobRecord {
            shard: shard_of(&spec.namespace, &spec.name),
            spec,
            uid: uuid::Uuid::now_v7().to_string(),
            version: 0,
            created_at: self.clock.now(),
            updated_at: self.clock.now(),
            next_slot_at: Some(at),
            next_fire_at: Some(at),
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

    async fn executions(&self) -> Vec<ExecutionRecord> {
        self.store
            .execution_list(&ExecutionListQuery {
                namespace: "sim".into(),
                limit: 1000,
                ..Default::default()
            })
            .await
            .unwrap()
    }

    async fn next_fire_at(&self, job: &str) -> Option<Timestamp> {
        self.store
            .job_get("sim", job)
            .await
            .unwrap()
            .unwrap()
            .next_fire_at
    }

    fn handed(&self) -> Vec<ClaimedExecution> {
        self.room.handed.lock().unwrap().clone()
    }
}

#[tokio::test]
async fn under_a_backlog_a_slot_the_worker_has_no_room_for_stays_in_its_job_until_it_has() {
    let mut rig = rig("2026-01-01T00:00:00Z").await;
    for name in ["a", "b", "c"] {
        rig.once(name, "2026-01-01T00:00:10Z", ConcurrencyPolicy::Allow)
            .await;
    }
    // The scheduler reaches the slots 20 s late, the store has a backlog, the worker no room.
    rig.clock.set("2026-01-01T00:00:30Z".parse().unwrap());
    let report = rig.scheduler.pass().await.unwrap();
    assert_eq!((report.jobs, report.deferred), (3, 3));
    assert!(rig.executions().await.is_empty(), "nothing written to wait");
    assert_eq!(
        rig.next_fire_at("a").await,
        Some("2026-01-01T00:00:10Z".parse().unwrap()),
        "the job stays due"
    );
    // Room for two: two slots handed out, started when written, the third still deferred.
    rig.room.room.store(2, Ordering::SeqCst);
    rig.clock.advance(SignedDuration::from_millis(250));
    let report = rig.scheduler.pass().await.unwrap();
    assert_eq!(report.deferred, 1);
    let written = rig.executions().await;
    assert_eq!(written.len(), 2);
    assert!(written.iter().all(|e| e.state == ExecutionState::Running));
    let handed = rig.handed();
    assert_eq!(handed.len(), 2);
    let at: Timestamp = "2026-01-01T00:00:30.250Z".parse().unwrap();
    assert!(
        handed.iter().all(|c| c.started_at == at && c.attempt == 1),
        "a slot written late starts when it is written: {handed:?}"
    );
    assert!(written.iter().all(|e| e.started_at == Some(at)));
    // Room again: the last one is handed out; nothing was ever written to wait for a claim.
    rig.room.room.store(10, Ordering::SeqCst);
    let report = rig.scheduler.pass().await.unwrap();
    assert_eq!((report.jobs, report.deferred), (1, 0));
    assert_eq!(rig.handed().len(), 3);
    let written = rig.executions().await;
    assert_eq!(written.len(), 3);
    assert!(written.iter().all(|e| e.state == ExecutionState::Running));
    assert_eq!(rig.next_fire_at("a").await, None, "a one-off job is done");
    // Without a backlog, a slot beyond the room is written to wait, for any worker to claim.
    rig.room.backlog.store(false, Ordering::SeqCst);
    rig.room.room.store(0, Ordering::SeqCst);
    rig.once("d", "2026-01-01T00:00:20Z", ConcurrencyPolicy::Allow)
        .await;
    let report = rig.scheduler.pass().await.unwrap();
    assert_eq!((report.jobs, report.deferred), (1, 0));
    let d = rig.executions().await.into_iter().find(|e| e.job == "d");
    assert_eq!(d.map(|e| e.state), Some(ExecutionState::Scheduled));
    assert_eq!(rig.handed().len(), 3);
}

#[tokio::test]
async fn what_the_worker_would_not_take_is_written_to_wait_whatever_its_room() {
    let mut rig = rig("2026-01-01T00:00:00Z").await;
    // A concurrency policy other than `allow` needs a claim's decision: written to wait even
    // with no room.
    rig.once("skip", "2026-01-01T00:00:01Z", ConcurrencyPolicy::Skip)
        .await;
    rig.clock.set("2026-01-01T00:00:02Z".parse().unwrap());
    let report = rig.scheduler.pass().await.unwrap();
    assert_eq!(report.deferred, 0);
    // Ahead of its fire time, with room: handed out, to start at its fire time.
    rig.room.room.store(10, Ordering::SeqCst);
    rig.once("ahead", "2026-01-01T00:00:04Z", ConcurrencyPolicy::Allow)
        .await;
    let report = rig.scheduler.pass().await.unwrap();
    assert_eq!(report.deferred, 0);
    let state =
        |es: &[ExecutionRecord], job: &str| es.iter().find(|e| e.job == job).map(|e| e.state);
    let written = rig.executions().await;
    assert_eq!(state(&written, "skip"), Some(ExecutionState::Scheduled));
    assert_eq!(state(&written, "ahead"), Some(ExecutionState::Running));
    let handed = rig.handed();
    assert_eq!(handed.len(), 1);
    assert_eq!(
        handed[0].started_at,
        "2026-01-01T00:00:04Z".parse::<Timestamp>().unwrap()
    );
    // A worker that takes nothing now (no lease, claim ahead off) defers nothing.
    rig.room.declines.store(true, Ordering::SeqCst);
    rig.once("due", "2026-01-01T00:00:01Z", ConcurrencyPolicy::Allow)
        .await;
    let report = rig.scheduler.pass().await.unwrap();
    assert_eq!(report.deferred, 0);
    assert_eq!(
        state(&rig.executions().await, "due"),
        Some(ExecutionState::Scheduled)
    );
    assert_eq!(rig.handed().len(), 1);
}
