//! A change of schedule or time zone, through the API with an injected clock: `next_fire_at`
//! is recomputed from the time of the change, and the executions already created for the old
//! schedule that have not started are cancelled (docs/policies.md). Pause and resume, and a
//! change that leaves the schedule alone, are checked alongside.

use std::sync::Arc;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use jiff::{SignedDuration, Timestamp};
use serde_json::{Value, json};
use sundial_api::{AppState, router};
use sundial_clock::{Clock, ManualClock};
use sundial_scheduler::{Scheduler, SchedulerConfig};
use sundial_store::Store;
use sundial_store_sqlite::SqliteStore;
use tokio::sync::Notify;
use tower::ServiceExt;

struct Rig {
    clock: Arc<ManualClock>,
    app: axum::Router,
    scheduler: Scheduler,
    _dir: tempfile::TempDir,
}

async fn rig() -> Rig {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new("2026-01-01T00:00:00Z".parse().unwrap()));
    let dyn_clock: Arc<dyn Clock> = clock.clone();
    let url = format!("sqlite://{}", dir.path().join("s.db").display());
    let store: Arc<dyn Store> = Arc::new(SqliteStore::open(&url, dyn_clock.clone()).await.unwrap());
    let scheduler = Scheduler::new(
        store.clone(),
        dyn_clock,
        SchedulerConfig::new("t"),
        Arc::new(Notify::new()),
    );
    let app = router(AppState {
        store,
        scheduler_wake: Arc::new(Notify::new()),
        worker_wake: Arc::new(Notify::new()),
        connections: Default::default(),
        http_allow: None,
        tokens: None,
        node: "t".into(),
        roles: vec!["api".into()],
        metrics: None,
    });
    Rig {
        clock,
        app,
        scheduler,
        _dir: dir,
    }
}

impl Rig {
    async fn call(&self, method: &str, path: &str, body: Option<Value>) -> (StatusCode, Value) {
        let req = Request::builder()
            .method(method)
            .uri(path)
            .header("content-type", "application/json")
            .body(body.map_or(Body::empty(), |b| Body::from(b.to_string())))
            .unwrap();
        let resp = self.app.clone().oneshot(req).await.unwrap();
        let status = resp.status();
        let bytes = axum::body::to_bytes(resp.into_body(), 1 << 20)
            .await
            .unwrap();
        (
            status,
            serde_json::from_slice(&bytes).unwrap_or(Value::Null),
        )
    }

    async fn states(&self) -> Vec<(String, String)> {
        let (_, v) = self
            .call("GET", "/v1/namespaces/t/jobs/j/executions?limit=1000", None)
            .await;
        v["items"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| {
                (
                    e["scheduled_at"].as_str().unwrap().to_owned(),
                    e["state"].as_str().unwrap().to_owned(),
                )
            })
            .collect()
    }
}

fn ts(v: &Value) -> Timestamp {
    v.as_str().unwrap().parse().unwrap()
}

#[tokio::test]
async fn a_schedule_change_recomputes_the_next_fire_time_and_cancels_the_old_schedules_executions()
{
    let mut rig = rig().await;
    let (status, job) = rig
        .call("PUT", "/v1/namespaces/t/jobs/j", Some(json!({"schedule": {"every": "1s"}, "target": {"type": "http", "url": "http://127.0.0.1:9/"}})))
        .await;
    assert_eq!(status, StatusCode::CREATED);
    assert_eq!(
        ts(&job["next_fire_at"]),
        rig.clock.now(),
        "an every job starts at its creation"
    );
    rig.scheduler.pass().await.unwrap();
    assert_eq!(rig.states().await.len(), 6, "slots 0..5 s triggered ahead");

    rig.clock.advance(SignedDuration::from_secs(2));
    let (status, job) = rig
        .call("PATCH", "/v1/namespaces/t/jobs/j", Some(json!({"schedule": {"every": null, "start_at": null, "cron": "*/10 * * * * *", "timezone": "Europe/Berlin"}})))
        .await;
    assert_eq!(status, StatusCode::OK, "{job}");
    assert_eq!(
        ts(&job["next_fire_at"]),
        "2026-01-01T00:00:10Z".parse().unwrap(),
        "first slot after the change"
    );
    let states = rig.states().await;
    assert_eq!(
        states.iter().map(|(_, s)| s.as_str()).collect::<Vec<_>>(),
        ["cancelled"; 3],
        "the old schedule's executions already due (slots 0, 1, 2 s) are cancelled, those \
         written ahead of their slot (3, 4, 5 s) are removed: {states:?}"
    );

    rig.clock.advance(SignedDuration::from_secs(4));
    rig.scheduler.pass().await.unwrap();
    let live: Vec<_> = rig
        .states()
        .await
        .into_iter()
        .filter(|(_, s)| s != "cancelled")
        .collect();
    assert_eq!(
        live,
        [("2026-01-01T00:00:10Z".to_owned(), "scheduled".to_owned())]
    );

    // A change of time zone alone is a change of schedule too.
    let (_, job) = rig
        .call(
            "PATCH",
            "/v1/namespaces/t/jobs/j",
            Some(json!({"schedule": {"timezone": "America/New_York"}})),
        )
        .await;
    assert_eq!(
        ts(&job["next_fire_at"]),
        "2026-01-01T00:00:10Z".parse().unwrap()
    );
    assert!(rig.states().await.iter().all(|(_, s)| s == "cancelled"));
    rig.scheduler.pass().await.unwrap();
    let live: Vec<_> = rig
        .states()
        .await
        .into_iter()
        .filter(|(_, s)| s != "cancelled")
        .collect();
    assert_eq!(
        live,
        [("2026-01-01T00:00:10Z".to_owned(), "scheduled".to_owned())],
        "the slot the new zone yields at the same instant fires: the old one, written ahead, \
         was removed rather than left to hold the slot"
    );
}

#[tokio::test]
async fn resume_fires_the_first_slot_after_now_even_when_it_was_written_ahead_before_the_pause() {
    let mut rig = rig().await;
    rig.call("PUT", "/v1/namespaces/t/jobs/j", Some(json!({"schedule": {"every": "1s"}, "target": {"type": "http", "url": "http://127.0.0.1:9/"}})))
        .await;
    rig.scheduler.pass().await.unwrap();
    assert_eq!(rig.states().await.len(), 6, "slots 0..5 s triggered ahead");
    rig.clock.advance(SignedDuration::from_millis(1200));
    rig.call("POST", "/v1/namespaces/t/jobs/j/pause", None)
        .await;
    rig.clock.advance(SignedDuration::from_secs(1));
    let (_, job) = rig
        .call("POST", "/v1/namespaces/t/jobs/j/resume", None)
        .await;
    assert_eq!(
        ts(&job["next_fire_at"]),
        "2026-01-01T00:00:03Z".parse().unwrap(),
        "resume continues with the first slot after now (00:00:02.2)"
    );
    rig.scheduler.pass().await.unwrap();
    let mut live: Vec<_> = rig
        .states()
        .await
        .into_iter()
        .filter(|(_, s)| s == "scheduled")
        .map(|(at, _)| at)
        .collect();
    live.sort();
    assert_eq!(
        live.first().map(String::as_str),
        Some("2026-01-01T00:00:03Z"),
        "the first slot after the resume is triggered: {live:?}"
    );
}

#[tokio::test]
async fn other_changes_keep_the_schedule_position_and_pause_resume_skips_what_passed() {
    let mut rig = rig().await;
    rig.clock.set("2026-01-01T00:00:30Z".parse().unwrap());
    rig.call("PUT", "/v1/namespaces/t/jobs/j", Some(json!({"schedule": {"cron": "* * * * *"}, "target": {"type": "http", "url": "http://127.0.0.1:9/"}})))
        .await;
    rig.clock.set("2026-01-01T00:00:56Z".parse().unwrap());
    rig.scheduler.pass().await.unwrap();
    let (_, job) = rig
        .call(
            "PATCH",
            "/v1/namespaces/t/jobs/j",
            Some(json!({"timeout": "9s"})),
        )
        .await;
    assert_eq!(
        ts(&job["next_fire_at"]),
        "2026-01-01T00:01:00Z".parse().unwrap(),
        "position kept: the slot created ahead still fires"
    );
    assert_eq!(
        rig.states().await,
        [("2026-01-01T00:01:00Z".to_owned(), "scheduled".to_owned())],
        "not cancelled"
    );

    let (_, job) = rig
        .call("POST", "/v1/namespaces/t/jobs/j/pause", None)
        .await;
    assert_eq!(
        (job["state"].clone(), job["next_fire_at"].clone()),
        (json!("paused"), Value::Null)
    );
    assert!(
        rig.states().await.is_empty(),
        "pause removes what was written ahead of its slot and has not started"
    );
    rig.clock.set("2026-01-01T00:10:30Z".parse().unwrap());
    rig.scheduler.pass().await.unwrap();
    let (_, job) = rig
        .call("POST", "/v1/namespaces/t/jobs/j/resume", None)
        .await;
    assert_eq!(
        ts(&job["next_fire_at"]),
        "2026-01-01T00:11:00Z".parse().unwrap(),
        "resume continues after now"
    );
    rig.scheduler.pass().await.unwrap();
    let (_, all) = rig
        .call("GET", "/v1/namespaces/t/executions?state=missed", None)
        .await;
    assert!(
        all["items"].as_array().unwrap().is_empty(),
        "slots passed while paused belong to no misfire episode"
    );
}
