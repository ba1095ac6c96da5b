//! The web UI over HTTP, in process (README.md, "The dashboard"; `crates/api/src/ui`'s invariants): every value
//! a user wrote is escaped, a POST from another origin is refused, actions go through the API
//! (its roles and namespaces), and with tokens configured the UI asks for one and keeps it in
//! an HttpOnly, SameSite=Strict cookie.

use std::sync::Arc;

use axum::Router;
use axum::body::Body;
use axum::http::{HeaderMap, Request, StatusCode, header};
use serde_json::json;
use sundial_api::auth::{ApiToken, Tokens};
use sundial_api::{AppState, router};
use sundial_clock::SystemClock;
use sundial_core::execution::{AttemptOutcome, ExecutionState};
use sundial_store::{AttemptComplete, AttemptRef, ExecutionClaim, NextStep, Store};
use sundial_store_sqlite::SqliteStore;
use tokio::sync::Notify;
use tower::ServiceExt;

const XSS: &str = "<script>alert(1)</script>";
const HOST: &str = "127.0.0.1:8080";

fn sha256_hex(token: &str) -> String {
    use sha2::Digest;
    sha2::Sha256::digest(token.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

struct Ui {
    router: Router,
    store: Arc<dyn Store>,
    _dir: tempfile::TempDir,
}

struct Page {
    status: StatusCode,
    headers: HeaderMap,
    body: String,
}

impl Ui {
    /// With `tokens`: `view-a` (viewer of `a`), `edit-a` (editor of `a`), `admin` (all).
    async fn new(tokens: bool) -> Ui {
        let dir = tempfile::tempdir().unwrap();
        let url = format!("sqlite://{}", dir.path().join("ui.db").display());
        let store: Arc<dyn Store> = Arc::new(
            SqliteStore::open(&url, Arc::new(SystemClock))
                .await
                .unwrap(),
        );
        let token = |t: &str, role: &str, ns: &str| {
            ApiToken::parse(&sha256_hex(t), role, &[ns.to_owned()]).unwrap()
        };
        let tokens = tokens.then(|| {
            Arc::new(
                Tokens::new(vec![
                    token("view-a", "viewer", "a"),
                    token("edit-a", "editor", "a"),
                    token("admin", "admin", "*"),
                ])
                .unwrap(),
            )
        });
        let state = AppState {
            store: store.clone(),
            scheduler_wake: Arc::new(Notify::new()),
            worker_wake: Arc::new(Notify::new()),
            connections: Default::default(),
            http_allow: None,
            tokens,
            node: "test".to_owned(),
            roles: vec!["api".into()],
            metrics: None,
            signing_keys: Default::default(),
            secrets_key: None,
        };
        Ui {
            router: router(state),
            store,
            _dir: dir,
        }
    }

    async fn send(&self, method: &str, path: &str, headers: &[(&str, &str)], body: &str) -> Page {
        let mut req = Request::builder()
            .method(method)
            .uri(path)
            .header(header::HOST, HOST);
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        if method != "GET"
            && !body.is_empty()
            && !headers
                .iter()
                .any(|(k, _)| k.eq_ignore_ascii_case("content-type"))
        {
            req = req.header(header::CONTENT_TYPE, "application/x-www-form-urlencoded");
        }
        let response = self
            .router
            .clone()
            .oneshot(req.body(Body::from(body.to_owned())).unwrap())
            .await
            .unwrap();
        let status = response.status();
        let headers = response.headers().clone();
        let bytes = axum::body::to_bytes(response.into_body(), usize::MAX)
            .await
            .unwrap();
        Page {
            status,
            headers,
            body: String::from_utf8_lossy(&bytes).into_owned(),
        }
    }

    async fn get(&self, path: &str, cookie: Option<&str>) -> Page {
        let c = cookie.map(|t| format!("sundial_token={t}"));
        let headers: Vec<(&str, &str)> = c.iter().map(|c| ("cookie", c.as_str())).collect();
        self.send("GET", path, &headers, "").await
    }

    /// A form POST from this server's own page.
    async fn post(&self, path: &str, cookie: Option<&str>, form: &str) -> Page {
        let c = cookie.map(|t| format!("sundial_token={t}"));
        let origin = format!("http://{HOST}");
        let mut headers: Vec<(&str, &str)> = vec![("origin", origin.as_str())];
        if let Some(c) = &c {
            headers.push(("cookie", c.as_str()));
        }
        self.send("POST", path, &headers, form).await
    }

    /// A job in `ns` whose user-written fields all hold markup.
    async fn put_job(&self, ns: &str, name: &str, token: Option<&str>) {
        let auth = token.map(|t| format!("Bearer {t}"));
        let mut headers = vec![("content-type", "application/json")];
        if let Some(a) = &auth {
            headers.push(("authorization", a.as_str()));
        }
        let body = json!({
            "description": XSS,
            "labels": {"team": XSS},
            "schedule": {"cron": "0 2 * * *", "timezone": "Europe/Berlin"},
            "target": {"type": "http", "url": "http://127.0.0.1:9/x", "headers": {"x-note": XSS}}
        });
        let reply = self
            .send(
                "PUT",
                &format!("/v1/namespaces/{ns}/jobs/{name}"),
                &headers,
                &body.to_string(),
            )
            .await;
        assert_eq!(reply.status, StatusCode::CREATED, "{}", reply.body);
    }

    /// Makes a dead letter of job `name` whose error text holds markup; returns its id.
    async fn dead_letter(&self, ns: &str, name: &str) -> String {
        let job = self.store.job_get(ns, name).await.unwrap().unwrap();
        let mut new = sundial_store::testkit::execution(&job, jiff::Timestamp::now());
        new.state = ExecutionState::Queued;
        let e = self.store.execution_insert(&new).await.unwrap();
        let claimed = self
            .store
            .execution_claim(&ExecutionClaim {
                worker: "w".into(),
                limit: 10,
                rate_limits: Default::default(),
                ahead_ms: 0,
                epoch: None,
                on_time_first: false,
            })
            .await
            .unwrap();
        let c = claimed.into_iter().find(|c| c.id == e.id).expect("claimed");
        self.store
            .attempt_complete(&AttemptComplete {
                attempt: AttemptRef {
                    id: c.id.clone(),
                    attempt: c.attempt,
                },
                outcome: AttemptOutcome::TransientFailure,
                status_code: Some(503),
                error: Some(format!("HTTP 503: {XSS}")),
                detail: None,
                next: NextStep::Dead,
                only_if_lapsed: false,
                output: None,
            })
            .await
            .unwrap();
        c.id
    }
}

fn assert_escaped(page: &Page) {
    assert_eq!(page.status, StatusCode::OK, "{}", page.body);
    assert!(
        !page.body.contains(XSS),
        "raw markup on the page: {}",
        page.body
    );
    assert!(page.body.contains("&lt;script&gt;"), "{}", page.body);
}

#[tokio::test]
async fn every_page_escapes_what_a_user_wrote_and_shows_the_schedule_in_words() {
    let ui = Ui::new(false).await;
    ui.put_job("a", "nightly", None).await;
    let id = ui.dead_letter("a", "nightly").await;

    let jobs = ui.get("/ui/namespaces/a/jobs", None).await;
    assert_eq!(jobs.status, StatusCode::OK);
    // No tokens, no session: nothing to sign out of.
    assert!(!jobs.body.contains("Sign out"), "{}", jobs.body);
    assert!(
        jobs.body.contains("at 02:00, every day (Europe/Berlin)"),
        "{}",
        jobs.body
    );
    for path in [
        "/ui/namespaces/a/jobs/nightly".to_owned(),
        format!("/ui/namespaces/a/executions/{id}"),
        "/ui/namespaces/a/dead-letters".to_owned(),
    ] {
        assert_escaped(&ui.get(&path, None).await);
    }
    let overview = ui.get("/ui/", None).await;
    assert_eq!(overview.status, StatusCode::OK);
    assert!(
        overview.body.contains("/ui/namespaces/a/jobs"),
        "{}",
        overview.body
    );
    assert!(
        overview.body.contains("visibilityState"),
        "live updates pause when hidden"
    );
    let cluster = ui.get("/ui/cluster", None).await;
    assert!(
        cluster.body.matches("<span").count() >= 1024,
        "a cell per shard"
    );
    for odd in [
        "/ui/namespaces/%2e%2e/jobs",
        "/ui/namespaces/../jobs",
        "/ui/namespaces/a/jobs/..",
    ] {
        let page = ui.get(odd, None).await;
        assert!(
            page.status == StatusCode::NOT_FOUND || page.status == StatusCode::SEE_OTHER,
            "{odd}: {}",
            page.status
        );
    }
    let js = ui.get("/ui/assets/htmx.min.js", None).await;
    assert!(js.body.starts_with("var htmx"), "htmx is embedded");
}

/// A filter or a namespace no name rule admits gets a page saying what is wrong with it, and
/// a NUL character in a filter a 400 naming the parameter; what they held is escaped.
#[tokio::test]
async fn bad_filters_and_namespaces_get_a_page_naming_what_is_wrong() {
    let ui = Ui::new(false).await;
    ui.put_job("a", "nightly", None).await;
    let page = ui
        .get("/ui/namespaces/a/dead-letters?job=%3Cimg%3E", None)
        .await;
    assert_eq!(page.status, StatusCode::BAD_REQUEST, "{}", page.body);
    assert!(
        page.body
            .contains("The job filter &#x27;&lt;img&gt;&#x27; is not a job name")
            || page
                .body
                .contains("The job filter '&lt;img&gt;' is not a job name"),
        "{}",
        page.body
    );
    let page = ui.get("/ui/namespaces/BAD/jobs", None).await;
    assert_eq!(page.status, StatusCode::NOT_FOUND, "{}", page.body);
    assert!(
        page.body.contains("No namespace can be named"),
        "{}",
        page.body
    );
    for path in [
        "/ui/namespaces/a/jobs?label=k%3Da%00b",
        "/ui/namespaces/a/jobs/nightly?after=%00",
        "/ui/namespaces/a/dead-letters?before=%00",
        "/ui/namespaces/a/workflows?label=%00",
    ] {
        let page = ui.get(path, None).await;
        assert_eq!(
            page.status,
            StatusCode::BAD_REQUEST,
            "{path}: {}",
            page.body
        );
        assert!(
            page.body.contains("holds the NUL character"),
            "{path}: {}",
            page.body
        );
    }
}

/// The calendars page lists each calendar's exclusions, who names it and its next excluded
/// dates, with what a user wrote escaped; a job naming calendars says so on its page.
#[tokio::test]
async fn the_calendars_page_shows_exclusions_users_and_next_dates_escaped() {
    let ui = Ui::new(false).await;
    let json = [("content-type", "application/json")];
    let cal = json!({"timezone": "Europe/Berlin", "description": XSS,
                     "exclude": [{"date": "2099-12-25"}, {"from": "2099-12-30", "to": "2099-12-31"},
                                 {"cron": "* * * * SAT,SUN"}]});
    let reply = ui
        .send(
            "PUT",
            "/v1/namespaces/a/calendars/weekends",
            &json,
            &cal.to_string(),
        )
        .await;
    assert_eq!(reply.status, StatusCode::CREATED, "{}", reply.body);
    let job = json!({"schedule": {"cron": "0 9 * * *", "timezone": "Europe/Berlin",
                                  "exclude_calendars": ["weekends"]},
                     "target": {"type": "http", "url": "http://127.0.0.1:9/x"}});
    let reply = ui
        .send(
            "PUT",
            "/v1/namespaces/a/jobs/workdays",
            &json,
            &job.to_string(),
        )
        .await;
    assert_eq!(reply.status, StatusCode::CREATED, "{}", reply.body);
    let page = ui.get("/ui/namespaces/a/calendars", None).await;
    assert_escaped(&page);
    for text in [
        "weekends",
        "2099-12-25",
        "2099-12-30 – 2099-12-31",
        "SAT,SUN",
        "job workdays",
    ] {
        assert!(page.body.contains(text), "{text}: {}", page.body);
    }
    let job_page = ui.get("/ui/namespaces/a/jobs/workdays", None).await;
    assert!(
        job_page.body.contains("Not on the days of calendar")
            && job_page.body.contains("<code>weekends</code>"),
        "{}",
        job_page.body
    );
}

#[tokio::test]
async fn a_post_from_another_origin_is_refused_and_one_from_the_page_acts_through_the_api() {
    let ui = Ui::new(false).await;
    ui.put_job("a", "nightly", None).await;
    let path = "/ui/namespaces/a/jobs/nightly/pause";
    let none = ui.send("POST", path, &[], "").await;
    assert_eq!(none.status, StatusCode::FORBIDDEN);
    let evil = ui
        .send("POST", path, &[("origin", "http://evil.example")], "")
        .await;
    assert_eq!(evil.status, StatusCode::FORBIDDEN);
    let referer_evil = ui
        .send("POST", path, &[("referer", "http://evil.example/ui/")], "")
        .await;
    assert_eq!(referer_evil.status, StatusCode::FORBIDDEN);
    assert!(
        !ui.store
            .job_get("a", "nightly")
            .await
            .unwrap()
            .unwrap()
            .spec
            .paused
    );

    // The API refuses the same from a browser on another site, form-encoded or bodiless,
    // and a tokenless server answers no host but loopback (DNS rebinding).
    let api_path = "/v1/namespaces/a/jobs/nightly/pause";
    for headers in [
        vec![("origin", "http://evil.example")],
        vec![
            ("origin", "http://evil.example"),
            ("content-type", "application/x-www-form-urlencoded"),
        ],
        vec![("sec-fetch-site", "cross-site")],
    ] {
        let refused = ui.send("POST", api_path, &headers, "a=b").await;
        assert_eq!(
            refused.status,
            StatusCode::FORBIDDEN,
            "{headers:?}: {}",
            refused.body
        );
    }
    let mut rebound = Request::builder()
        .method("POST")
        .uri(path)
        .header(header::HOST, "evil.example")
        .header(header::ORIGIN, "http://evil.example");
    rebound = rebound.header(header::CONTENT_LENGTH, "0");
    let response = ui
        .router
        .clone()
        .oneshot(rebound.body(Body::empty()).unwrap())
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::FORBIDDEN);
    assert!(
        !ui.store
            .job_get("a", "nightly")
            .await
            .unwrap()
            .unwrap()
            .spec
            .paused
    );

    let ok = ui.post(path, None, "").await;
    assert_eq!(ok.status, StatusCode::SEE_OTHER, "{}", ok.body);
    assert!(
        ui.store
            .job_get("a", "nightly")
            .await
            .unwrap()
            .unwrap()
            .spec
            .paused
    );

    // Re-drive the selected dead letters, then see them gone from the listing.
    let id = ui.dead_letter("a", "nightly").await;
    let done = ui
        .post(
            "/ui/namespaces/a/dead-letters/redrive",
            None,
            &format!("id={id}"),
        )
        .await;
    assert_eq!(done.status, StatusCode::OK);
    assert!(done.body.contains("1 re-driven"), "{}", done.body);
    let e = ui.store.execution_get("a", &id).await.unwrap().unwrap();
    assert_eq!(e.state, ExecutionState::Queued);
}

#[tokio::test]
async fn with_tokens_the_ui_asks_for_one_and_applies_its_role_and_namespaces() {
    let ui = Ui::new(true).await;
    ui.put_job("a", "nightly", Some("admin")).await;
    ui.put_job("b", "other", Some("admin")).await;

    let anonymous = ui.get("/ui/", None).await;
    assert_eq!(anonymous.status, StatusCode::SEE_OTHER);
    assert_eq!(anonymous.headers[header::LOCATION], "/ui/login");
    let wrong = ui.post("/ui/login", None, "token=nope").await;
    assert_eq!(wrong.status, StatusCode::UNAUTHORIZED);
    assert!(wrong.headers.get(header::SET_COOKIE).is_none());
    let signed_in = ui.post("/ui/login", None, "token=view-a").await;
    assert_eq!(signed_in.status, StatusCode::SEE_OTHER);
    let cookie = signed_in.headers[header::SET_COOKIE].to_str().unwrap();
    assert!(
        cookie.starts_with("sundial_token=view-a;")
            && cookie.contains("HttpOnly")
            && cookie.contains("SameSite=Strict"),
        "{cookie}"
    );

    // A viewer sees namespace a without actions, not namespace b, and cannot act anyway.
    let overview = ui.get("/ui/", Some("view-a")).await;
    assert!(overview.body.contains("Sign out"), "{}", overview.body);
    let login = ui.get("/ui/login", None).await;
    assert!(!login.body.contains("Sign out"), "{}", login.body);
    assert!(overview.body.contains("/ui/namespaces/a/jobs"));
    assert!(
        !overview.body.contains("/ui/namespaces/b/jobs"),
        "{}",
        overview.body
    );
    let job = ui
        .get("/ui/namespaces/a/jobs/nightly", Some("view-a"))
        .await;
    assert_eq!(job.status, StatusCode::OK);
    assert!(
        !job.body.contains("/pause\""),
        "no action for a viewer: {}",
        job.body
    );
    let other = ui.get("/ui/namespaces/b/jobs", Some("view-a")).await;
    assert_eq!(other.status, StatusCode::FORBIDDEN);
    let refused = ui
        .post("/ui/namespaces/a/jobs/nightly/pause", Some("view-a"), "")
        .await;
    assert_eq!(refused.status, StatusCode::FORBIDDEN);
    assert!(
        !ui.store
            .job_get("a", "nightly")
            .await
            .unwrap()
            .unwrap()
            .spec
            .paused
    );

    // An editor of a acts in a, and the API refuses it in b (its namespaces, as the API's).
    let job = ui
        .get("/ui/namespaces/a/jobs/nightly", Some("edit-a"))
        .await;
    assert!(
        job.body.contains("/ui/namespaces/a/jobs/nightly/pause"),
        "{}",
        job.body
    );
    let paused = ui
        .post("/ui/namespaces/a/jobs/nightly/pause", Some("edit-a"), "")
        .await;
    assert_eq!(paused.status, StatusCode::SEE_OTHER);
    assert!(
        ui.store
            .job_get("a", "nightly")
            .await
            .unwrap()
            .unwrap()
            .spec
            .paused
    );
    let elsewhere = ui
        .post("/ui/namespaces/b/jobs/other/pause", Some("edit-a"), "")
        .await;
    assert_eq!(
        elsewhere.status,
        StatusCode::FORBIDDEN,
        "{}",
        elsewhere.body
    );
    assert!(
        !ui.store
            .job_get("b", "other")
            .await
            .unwrap()
            .unwrap()
            .spec
            .paused
    );
}

#[tokio::test]
async fn workflow_pages_show_the_runs_grid_and_the_run_s_dag() {
    let ui = Ui::new(false).await;
    let body = json!({
        "description": XSS,
        "tasks": [
            {"name": "extract", "target": {"type": "http", "url": "http://127.0.0.1:9/e"}},
            {"name": "load", "depends_on": ["extract"], "target": {"type": "http", "url": "http://127.0.0.1:9/l"}},
            {"name": "alert", "depends_on": ["load"], "trigger_rule": "one_failed", "target": {"type": "http", "url": "http://127.0.0.1:9/a"}}
        ]
    });
    let put = ui
        .send(
            "PUT",
            "/v1/namespaces/a/workflows/etl",
            &[("content-type", "application/json")],
            &body.to_string(),
        )
        .await;
    assert_eq!(put.status, StatusCode::CREATED, "{}", put.body);
    let triggered = ui
        .post("/ui/namespaces/a/workflows/etl/trigger", None, "")
        .await;
    assert_eq!(
        triggered.status,
        StatusCode::SEE_OTHER,
        "{}",
        triggered.body
    );

    let list = ui.get("/ui/namespaces/a/workflows", None).await;
    assert!(
        list.body.contains("/ui/namespaces/a/workflows/etl"),
        "{}",
        list.body
    );
    let grid = ui.get("/ui/namespaces/a/workflows/etl", None).await;
    assert_escaped(&grid);
    for task in ["extract", "load", "alert"] {
        assert!(
            grid.body.contains(&format!("<th>{task}</th>")),
            "{task}: {}",
            grid.body
        );
    }
    let run_id = grid
        .body
        .split("/ui/namespaces/a/runs/")
        .nth(1)
        .and_then(|rest| rest.split('"').next())
        .expect("a run in the grid")
        .to_owned();
    let run = ui
        .get(&format!("/ui/namespaces/a/runs/{run_id}"), None)
        .await;
    assert_eq!(run.status, StatusCode::OK);
    assert!(run.body.contains("<svg"), "{}", run.body);
    assert_eq!(run.body.matches("<rect").count(), 3, "a box per task");
    assert_eq!(run.body.matches("<line").count(), 2, "an edge per upstream");
    let cancelled = ui
        .post(&format!("/ui/namespaces/a/runs/{run_id}/cancel"), None, "")
        .await;
    assert_eq!(
        cancelled.status,
        StatusCode::SEE_OTHER,
        "{}",
        cancelled.body
    );
    let run = ui
        .get(&format!("/ui/namespaces/a/runs/{run_id}"), None)
        .await;
    assert!(run.body.contains("state-cancelled"), "{}", run.body);
}

#[tokio::test]
async fn the_job_page_lists_its_backfills_and_cancels_a_running_one_through_the_api() {
    let ui = Ui::new(false).await;
    ui.put_job("a", "nightly", None).await;
    let started = ui
        .send(
            "POST",
            "/v1/namespaces/a/jobs/nightly/backfill",
            &[("content-type", "application/json")],
            &json!({"from": "2026-10-01T00:00:00Z", "to": "2026-11-01T00:00:00Z"}).to_string(),
        )
        .await;
    assert_eq!(started.status, StatusCode::ACCEPTED, "{}", started.body);
    let id = serde_json::from_str::<serde_json::Value>(&started.body).unwrap()["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let page = ui.get("/ui/namespaces/a/jobs/nightly", None).await;
    assert_escaped(&page);
    assert!(
        page.body.contains("Backfills") && page.body.contains(&id),
        "{}",
        page.body
    );
    let cancel = format!("/ui/namespaces/a/jobs/nightly/backfills/{id}/cancel");
    assert!(
        page.body.contains(&cancel),
        "a cancel button: {}",
        page.body
    );
    let refused = ui
        .send("POST", &cancel, &[("origin", "http://evil.example")], "")
        .await;
    assert_eq!(refused.status, StatusCode::FORBIDDEN);
    let done = ui.post(&cancel, None, "").await;
    assert_eq!(done.status, StatusCode::SEE_OTHER, "{}", done.body);
    let b = ui.store.backfill_get("a", &id).await.unwrap().unwrap();
    assert_eq!(b.state, sundial_store::BackfillState::Cancelled);
    let page = ui.get("/ui/namespaces/a/jobs/nightly", None).await;
    assert!(
        !page.body.contains(&cancel),
        "no cancel button once cancelled"
    );
}
