//! Backfill through the API (docs/time.md, "Backfill"), with an injected clock and
//! the scheduler's backfill driver run pass by pass: validation that names every bad field and
//! writes nothing, an exact dry run, a backfill that creates each past slot once, a second one
//! over the same range that creates nothing, cancel, and a calendar's days left out.

use std::sync::Arc;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use jiff::{SignedDuration, Timestamp};
use serde_json::{Value, json};
use sundial_api::{AppState, router};
use sundial_clock::{Clock, ManualClock};
use sundial_scheduler::backfill::Backfiller;
use sundial_scheduler::{Scheduler, SchedulerConfig};
use sundial_store::Store;
use sundial_store_sqlite::SqliteStore;
use tokio::sync::Notify;
use tower::ServiceExt;

struct Rig {
    clock: Arc<ManualClock>,
    store: Arc<dyn Store>,
    app: axum::Router,
    scheduler: Scheduler,
    backfiller: Backfiller,
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
        dyn_clock.clone(),
        SchedulerConfig::new("t"),
        Arc::new(Notify::new()),
    );
    let backfiller = Backfiller::new(
        store.clone(),
        dyn_clock,
        "t",
        scheduler.lease_watch(),
        Arc::new(Notify::new()),
    );
    let app = router(AppState {
        store: store.clone(),
        scheduler_wake: Arc::new(Notify::new()),
        worker_wake: Arc::new(Notify::new()),
        connections: Default::default(),
        http_allow: None,
        tokens: None,
        node: "t".into(),
        roles: vec!["api".into()],
        metrics: None,
        signing_keys: Default::default(),
        secrets_key: None,
    });
    Rig {
        clock,
        store,
        app,
        scheduler,
        backfiller,
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

    /// Runs scheduler and backfill passes, 100 ms apart by the clock, until the backfill `id`
    /// of job `j` ends; returns it.
    async fn drive(&mut self, id: &str) -> Value {
        self.drive_at(&format!("/v1/namespaces/t/jobs/j/backfills/{id}"))
            .await
    }

    /// As [`Rig::drive`], for the backfill at `path`.
    async fn drive_at(&mut self, path: &str) -> Value {
        for _ in 0..200 {
            self.scheduler.pass().await.unwrap();
            self.backfiller.pass().await.unwrap();
            // A worker: the backfill creates no more than its back-pressure lets wait.
            sundial_store::testkit::claim_and_complete_all(&*self.store).await;
            let (status, b) = self.call("GET", path, None).await;
            assert_eq!(status, StatusCode::OK, "{b}");
            if b["state"] != "running" {
                return b;
            }
            self.clock.advance(SignedDuration::from_millis(100));
        }
        panic!("backfill {path} did not end");
    }

    /// The backfilled executions' slots, oldest first.
    async fn backfilled(&self) -> Vec<Timestamp> {
        let (_, v) = self
            .call("GET", "/v1/namespaces/t/jobs/j/executions?limit=1000", None)
            .await;
        let mut slots: Vec<Timestamp> = v["items"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|e| e["trigger"] == "backfill")
            .map(|e| e["scheduled_at"].as_str().unwrap().parse().unwrap())
            .collect();
        slots.sort();
        slots
    }
}

fn at(s: &str) -> Timestamp {
    s.parse().unwrap()
}

async fn hourly_job(rig: &Rig, extra: Value) {
    let mut body = json!({"schedule": {"cron": "0 * * * *", "timezone": "Europe/Berlin"},
        "target": {"type": "http", "url": "http://127.0.0.1:9/"}});
    if let (Some(b), Some(e)) = (body.as_object_mut(), extra.as_object()) {
        b.extend(e.clone());
    }
    let (status, job) = rig.call("PUT", "/v1/namespaces/t/jobs/j", Some(body)).await;
    assert_eq!(status, StatusCode::CREATED, "{job}");
}

#[tokio::test]
async fn a_backfill_creates_each_past_slot_once_and_a_second_one_creates_nothing() {
    let mut rig = rig().await;
    hourly_job(&rig, json!({})).await;
    let path = "/v1/namespaces/t/jobs/j/backfill";

    // Bad input: every field named, nothing written.
    let (status, problem) = rig
        .call(
            "POST",
            path,
            Some(json!({"to": "2026-01-02T00:00:00Z", "max_per_second": 0, "speed": 1})),
        )
        .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{problem}");
    let fields: Vec<&str> = problem["errors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["field"].as_str().unwrap())
        .collect();
    for field in ["from", "max_per_second", "speed"] {
        assert!(fields.contains(&field), "{field} is named: {problem}");
    }
    let (status, problem) = rig
        .call(
            "POST",
            path,
            Some(json!({"from": "2025-12-31T00:00:00Z", "to": "2026-01-02T00:00:00Z"})),
        )
        .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    assert!(
        problem["detail"]
            .as_str()
            .unwrap()
            .contains("in the future"),
        "{problem}"
    );
    let (status, problem) = rig
        .call(
            "POST",
            path,
            Some(json!({"from": "2000-01-01T00:00:00Z", "to": "2026-01-01T00:00:00Z"})),
        )
        .await;
    assert_eq!(
        status,
        StatusCode::UNPROCESSABLE_ENTITY,
        "more than 100000 slots"
    );
    assert!(
        problem["detail"].as_str().unwrap().contains("100000"),
        "{problem}"
    );
    let (status, _) = rig
        .call(
            "POST",
            "/v1/namespaces/t/jobs/nope/backfill",
            Some(json!({"from": "2025-12-31T00:00:00Z", "to": "2026-01-01T00:00:00Z"})),
        )
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (_, list) = rig
        .call("GET", "/v1/namespaces/t/jobs/j/backfills", None)
        .await;
    assert_eq!(list["items"], json!([]), "nothing written");
    let (status, _) = rig
        .call("GET", "/v1/namespaces/t/jobs/nope/backfills", None)
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND, "no such job");

    // The dry run counts the slots of [from, to): 24 hours, written nothing.
    let range = json!({"from": "2025-12-31T00:00:00Z", "to": "2026-01-01T00:00:00Z"});
    let mut dry = range.clone();
    dry["dry_run"] = json!(true);
    dry["max_per_second"] = json!(5.0);
    let (status, answer) = rig.call("POST", path, Some(dry.clone())).await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    assert_eq!(
        (
            answer["count"].clone(),
            answer["first"].clone(),
            answer["last"].clone()
        ),
        (
            json!(24),
            json!("2025-12-31T00:00:00Z"),
            json!("2025-12-31T23:00:00Z")
        )
    );
    assert!(rig.backfilled().await.is_empty());

    let mut start = range.clone();
    start["max_per_second"] = json!(50);
    let (status, b) = rig.call("POST", path, Some(start.clone())).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{b}");
    assert_eq!(
        (
            b["state"].clone(),
            b["slots"].clone(),
            b["remaining"].clone()
        ),
        (json!("running"), json!(24), json!(24))
    );
    let id = b["id"].as_str().unwrap().to_owned();
    let done = rig.drive(&id).await;
    assert_eq!(
        (
            done["state"].clone(),
            done["created"].clone(),
            done["existing"].clone(),
            done["remaining"].clone()
        ),
        (json!("done"), json!(24), json!(0), json!(0)),
        "{done}"
    );
    let slots = rig.backfilled().await;
    assert_eq!(slots.len(), 24);
    assert_eq!(slots[0], at("2025-12-31T00:00:00Z"));
    assert!(
        slots
            .windows(2)
            .all(|w| w[1].duration_since(w[0]) == SignedDuration::from_hours(1)),
        "each slot once"
    );

    // Again over the same range: nothing to create, exactly.
    let (_, answer) = rig.call("POST", path, Some(dry)).await;
    assert_eq!(
        (answer["count"].clone(), answer["existing"].clone()),
        (json!(0), json!(24)),
        "{answer}"
    );
    let (status, again) = rig.call("POST", path, Some(start)).await;
    assert_eq!(status, StatusCode::ACCEPTED);
    let again = rig.drive(again["id"].as_str().unwrap()).await;
    assert_eq!(
        (again["created"].clone(), again["existing"].clone()),
        (json!(0), json!(24))
    );
    assert_eq!(rig.backfilled().await.len(), 24, "G1: no slot twice");

    let (status, _) = rig
        .call(
            "POST",
            &format!("/v1/namespaces/t/jobs/j/backfills/{id}/cancel"),
            None,
        )
        .await;
    assert_eq!(
        status,
        StatusCode::CONFLICT,
        "a finished backfill is not cancelled"
    );
    let (status, _) = rig
        .call("GET", "/v1/namespaces/t/workflows/j/backfills/nope", None)
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (_, list) = rig
        .call("GET", "/v1/namespaces/t/jobs/j/backfills", None)
        .await;
    assert_eq!(list["items"].as_array().unwrap().len(), 2);
}

#[tokio::test]
async fn a_dry_run_over_a_range_without_slots_says_why() {
    let rig = rig().await;
    // An `every` job's slots start when it was created (the rig's clock, 2026-01-01).
    let body = json!({"schedule": {"every": "1m"}, "target": {"type": "http", "url": "http://127.0.0.1:9/"}});
    let (status, job) = rig.call("PUT", "/v1/namespaces/t/jobs/e", Some(body)).await;
    assert_eq!(status, StatusCode::CREATED, "{job}");
    let (status, dry) = rig
        .call(
            "POST",
            "/v1/namespaces/t/jobs/e/backfill",
            Some(json!({"from": "2025-12-31T00:00:00Z", "to": "2026-01-01T00:00:00Z", "dry_run": true})),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{dry}");
    assert_eq!(
        (dry["count"].clone(), dry["slots"].clone()),
        (json!(0), json!(0)),
        "{dry}"
    );
    let reason = dry["reason"].as_str().unwrap_or_default();
    assert!(
        reason.contains("start_at, 2026-01-01T00:00:00Z") && reason.contains("`every`"),
        "{dry}"
    );

    // A range with slots has no reason.
    hourly_job(&rig, json!({})).await;
    let (_, dry) = rig
        .call(
            "POST",
            "/v1/namespaces/t/jobs/j/backfill",
            Some(json!({"from": "2025-12-31T00:00:00Z", "to": "2026-01-01T00:00:00Z", "dry_run": true})),
        )
        .await;
    assert_eq!(dry["count"], json!(24), "{dry}");
    assert!(dry.get("reason").is_none(), "{dry}");
}

#[tokio::test]
async fn a_cancelled_backfill_creates_nothing_more_and_calendar_days_are_left_out() {
    let mut rig = rig().await;
    let (status, _) = rig
        .call(
            "PUT",
            "/v1/namespaces/t/calendars/closed",
            Some(json!({"timezone": "Europe/Berlin", "exclude": [{"date": "2025-12-31"}]})),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED);
    hourly_job(&rig, json!({})).await;
    let (status, _) = rig
        .call(
            "PATCH",
            "/v1/namespaces/t/jobs/j",
            Some(json!({"schedule": {"exclude_calendars": ["closed"]}})),
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    // Two local days, Berlin (UTC+1): 30 and 31 December; the 31st is excluded.
    let (_, dry) = rig
        .call("POST", "/v1/namespaces/t/jobs/j/backfill", Some(json!({"from": "2025-12-29T23:00:00Z", "to": "2025-12-31T23:00:00Z", "dry_run": true})))
        .await;
    assert_eq!(
        (dry["count"].clone(), dry["last"].clone()),
        (json!(24), json!("2025-12-30T22:00:00Z")),
        "{dry}"
    );

    let (_, b) = rig
        .call("POST", "/v1/namespaces/t/jobs/j/backfill", Some(json!({"from": "2025-12-29T23:00:00Z", "to": "2025-12-31T23:00:00Z", "max_per_second": 20})))
        .await;
    let id = b["id"].as_str().unwrap().to_owned();
    rig.scheduler.pass().await.unwrap();
    rig.backfiller.pass().await.unwrap();
    rig.clock.advance(SignedDuration::from_millis(200));
    rig.backfiller.pass().await.unwrap();
    let made = rig.backfilled().await.len();
    assert!((1..24).contains(&made), "some but not all at 20/s: {made}");
    let (status, cancelled) = rig
        .call(
            "POST",
            &format!("/v1/namespaces/t/jobs/j/backfills/{id}/cancel"),
            None,
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{cancelled}");
    assert_eq!(cancelled["state"], "cancelled");
    for _ in 0..10 {
        rig.clock.advance(SignedDuration::from_millis(500));
        rig.backfiller.pass().await.unwrap();
    }
    assert_eq!(
        rig.backfilled().await.len(),
        made,
        "nothing after the cancel"
    );
}

#[tokio::test]
async fn a_workflow_backfill_creates_one_run_per_past_slot() {
    let mut rig = rig().await;
    let (status, wf) = rig
        .call(
            "PUT",
            "/v1/namespaces/t/workflows/w",
            Some(json!({"schedule": {"cron": "0 * * * *"},
                "tasks": [{"name": "a", "target": {"type": "http", "url": "http://127.0.0.1:9/a"}}]})),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{wf}");
    let path = "/v1/namespaces/t/workflows/w/backfill";
    let range = json!({"from": "2025-12-31T12:00:00Z", "to": "2026-01-01T00:00:00Z", "max_per_second": 100});
    let (status, b) = rig.call("POST", path, Some(range.clone())).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{b}");
    assert_eq!(b["workflow"], "w");
    let done = rig
        .drive_at(&format!(
            "/v1/namespaces/t/workflows/w/backfills/{}",
            b["id"].as_str().unwrap()
        ))
        .await;
    assert_eq!(
        (done["state"].clone(), done["created"].clone()),
        (json!("done"), json!(12)),
        "{done}"
    );
    let (_, runs) = rig
        .call("GET", "/v1/namespaces/t/workflows/w/runs?limit=100", None)
        .await;
    let backfilled: Vec<&Value> = runs["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["trigger"] == "backfill")
        .collect();
    assert_eq!(backfilled.len(), 12, "{runs}");
    let mut dry = range;
    dry["dry_run"] = json!(true);
    let (_, answer) = rig.call("POST", path, Some(dry)).await;
    assert_eq!(
        (answer["count"].clone(), answer["existing"].clone()),
        (json!(0), json!(12)),
        "{answer}"
    );
    let (status, _) = rig
        .call("POST", "/v1/namespaces/t/workflows/w/pause", None)
        .await;
    assert_eq!(status, StatusCode::OK);
    let (status, problem) = rig
        .call(
            "POST",
            path,
            Some(json!({"from": "2025-12-30T00:00:00Z", "to": "2025-12-31T00:00:00Z"})),
        )
        .await;
    assert_eq!(
        status,
        StatusCode::CONFLICT,
        "a paused workflow is not backfilled: {problem}"
    );
}

#[tokio::test]
async fn a_backfill_whose_executions_pile_up_waits_for_them() {
    let mut rig = rig().await;
    hourly_job(&rig, json!({})).await;
    let (status, b) = rig
        .call("POST", "/v1/namespaces/t/jobs/j/backfill", Some(json!({"from": "2025-12-31T00:00:00Z", "to": "2026-01-01T00:00:00Z", "max_per_second": 20})))
        .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{b}");
    rig.scheduler.pass().await.unwrap();
    // No worker: 3 s at 20 a second would create 24, but at most 10 of the job's executions
    // (0.2 s worth, at least 10) may wait at once, and its own 00:00 slot is one of them.
    for _ in 0..30 {
        rig.clock.advance(SignedDuration::from_millis(100));
        rig.backfiller.pass().await.unwrap();
    }
    assert_eq!(rig.backfilled().await.len(), 9, "back-pressure");
    sundial_store::testkit::claim_and_complete_all(&*rig.store).await;
    for _ in 0..30 {
        rig.clock.advance(SignedDuration::from_millis(100));
        rig.backfiller.pass().await.unwrap();
    }
    assert_eq!(
        rig.backfilled().await.len(),
        19,
        "ten more once those ended"
    );
}
