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
        signing_keys: Default::default(),
        secrets_key: None,
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

/// The plan of a batch (docs/time.md, "Plan before apply") against what applying the same batch at the same
/// instant then does: for every kind of change (schedule, zone, policy, target, pause,
/// created, unchanged), the action and fields, the next fire times after, the not-started
/// executions ended and the slots skipped or fired late. Nothing is written by the plan.
#[tokio::test]
async fn the_plan_says_what_the_apply_then_does() {
    let mut rig = rig().await;
    let target = json!({"type": "http", "url": "http://127.0.0.1:9/"});
    let job =
        |name: &str, schedule: Value| json!({"name": name, "schedule": schedule, "target": target});
    let (status, _) = rig
        .call(
            "POST",
            "/v1/namespaces/t/jobs:apply",
            Some(json!({"jobs": [
                job("sched", json!({"every": "1s"})),
                job("zone", json!({"cron": "0 * * * *", "timezone": "UTC"})),
                job("policy", json!({"cron": "0 * * * *"})),
                job("target", json!({"every": "1s"})),
                job("pause", json!({"every": "1s"})),
                job("same", json!({"cron": "0 * * * *"})),
            ]})),
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    rig.scheduler.pass().await.unwrap();
    rig.clock.advance(SignedDuration::from_secs(2));

    let mut other_target = job("target", json!({"every": "1s"}));
    other_target["target"]["url"] = json!("http://127.0.0.1:9/other");
    let mut paused = job("pause", json!({"every": "1s"}));
    paused["paused"] = json!(true);
    let mut policy = job("policy", json!({"cron": "0 * * * *"}));
    policy["concurrency_policy"] = json!("skip");
    let batch = json!({"jobs": [
        job("sched", json!({"cron": "*/10 * * * * *", "timezone": "Europe/Berlin"})),
        job("zone", json!({"cron": "0 * * * *", "timezone": "Asia/Kolkata"})),
        policy,
        other_target,
        paused,
        job("same", json!({"cron": "0 * * * *"})),
        job("new-once", json!({"at": "2025-12-31T23:00:00Z"})),
    ]});
    let executions_before = executions_of(&rig, &["sched", "target", "pause"]).await;
    let (status, plan) = rig
        .call("POST", "/v1/namespaces/t/jobs:plan", Some(batch.clone()))
        .await;
    assert_eq!(status, StatusCode::OK, "{plan}");
    // Nothing written by the plan.
    assert_eq!(
        executions_of(&rig, &["sched", "target", "pause"]).await,
        executions_before
    );
    let (_, none) = rig
        .call("GET", "/v1/namespaces/t/jobs/new-once", None)
        .await;
    assert_eq!(none["status"], 404, "{none}");

    let item = |name: &str| {
        plan["items"]
            .as_array()
            .unwrap()
            .iter()
            .find(|i| i["name"] == name)
            .unwrap_or_else(|| panic!("{name} in {plan}"))
            .clone()
    };
    let fields = |name: &str| -> Vec<String> {
        item(name)["changes"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["field"].as_str().unwrap().to_owned())
            .collect()
    };
    assert_eq!(item("sched")["action"], "changed");
    assert_eq!(
        fields("sched"),
        [
            "schedule.cron",
            "schedule.every",
            "schedule.start_at",
            "schedule.timezone"
        ]
    );
    assert_eq!(fields("zone"), ["schedule.timezone"]);
    assert_eq!(fields("policy"), ["concurrency_policy"]);
    assert_eq!(fields("target"), ["target.url"]);
    assert_eq!(fields("pause"), ["paused"]);
    assert_eq!(item("same")["action"], "unchanged");
    assert_eq!(item("new-once")["action"], "created");
    // A one-off instant an hour past fires at once: late by an hour and two seconds.
    assert_eq!(item("new-once")["late_slots"][0]["late_by_ms"], 3_602_000);
    // The every-second jobs had slots 0..5 s written; at 2 s, 0-2 are due and 3-5 ahead.
    let ends = |name: &str| -> Vec<(String, String)> {
        item(name)["cancels"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| {
                (
                    c["id"].as_str().unwrap().to_owned(),
                    c["ends"].as_str().unwrap().to_owned(),
                )
            })
            .collect()
    };
    let sched_ends = ends("sched");
    assert_eq!(
        sched_ends
            .iter()
            .map(|(_, e)| e.as_str())
            .collect::<Vec<_>>(),
        [
            "cancelled",
            "cancelled",
            "cancelled",
            "removed",
            "removed",
            "removed"
        ]
    );
    assert_eq!(item("target")["rewrites"], 6);
    assert!(item("target")["cancels"].as_array().unwrap().is_empty());
    assert_eq!(ends("pause").len(), 6);
    assert!(
        item("pause")["skipped_slots"].as_array().unwrap().len() >= 6,
        "{}",
        item("pause")
    );
    assert!(
        item("pause")["next_fire_times_after"]
            .as_array()
            .unwrap()
            .is_empty()
    );

    // Apply the same batch at the same instant.
    let (status, applied) = rig
        .call("POST", "/v1/namespaces/t/jobs:apply", Some(batch))
        .await;
    assert_eq!(status, StatusCode::OK, "{applied}");
    assert_eq!(applied["created"], 1);
    assert_eq!(applied["unchanged"], 1);
    for name in [
        "sched", "zone", "policy", "target", "pause", "same", "new-once",
    ] {
        let (_, got) = rig
            .call("GET", &format!("/v1/namespaces/t/jobs/{name}"), None)
            .await;
        assert_eq!(
            got["next_fire_times"],
            item(name)["next_fire_times_after"],
            "{name}: {got}"
        );
    }
    let (_, same) = rig.call("GET", "/v1/namespaces/t/jobs/same", None).await;
    assert_eq!(same["version"], 1, "unchanged keeps its version");
    // What the plan said would end did: cancelled ones are cancelled, removed ones are gone.
    let after = executions_of(&rig, &["sched", "pause"]).await;
    for name in ["sched", "pause"] {
        for (id, end) in ends(name) {
            let found = after.iter().find(|(i, _)| *i == id);
            match end.as_str() {
                "cancelled" => assert_eq!(
                    found.map(|(_, s)| s.as_str()),
                    Some("cancelled"),
                    "{name} {id}"
                ),
                _ => assert!(found.is_none(), "{name} {id} should be removed"),
            }
        }
    }
    // The rewritten ones run the new target and are still waiting.
    let target_states = executions_of(&rig, &["target"]).await;
    assert_eq!(target_states.len(), 6);
    assert!(
        target_states
            .iter()
            .all(|(_, s)| s == "queued" || s == "scheduled"),
        "{target_states:?}"
    );
}

/// (id, state) of every execution of the named jobs in namespace `t`, by id.
async fn executions_of(rig: &Rig, jobs: &[&str]) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for job in jobs {
        let (_, v) = rig
            .call(
                "GET",
                &format!("/v1/namespaces/t/jobs/{job}/executions?limit=1000"),
                None,
            )
            .await;
        for e in v["items"].as_array().unwrap() {
            out.push((
                e["id"].as_str().unwrap().to_owned(),
                e["state"].as_str().unwrap().to_owned(),
            ));
        }
    }
    out.sort();
    out
}
