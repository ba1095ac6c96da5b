//! The audit log through the API and the UI (docs/security.md, "Audit log"), in process: a
//! change is recorded with the token's name and role, the request's id (sent or given) and
//! the peer's address; a UI action with the session's token and the browser request's id;
//! reads record nothing; a viewer reads the log; bad filters are refused naming them; the UI
//! page lists the entries, escaped, and each job's page links to its own.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum::body::Body;
use axum::extract::ConnectInfo;
use axum::http::{Request, StatusCode, header};
use serde_json::{Value, json};
use sundial_api::auth::{ApiToken, Tokens};
use sundial_api::{AppState, router};
use sundial_clock::SystemClock;
use sundial_store::Store;
use sundial_store_sqlite::SqliteStore;
use tokio::sync::Notify;
use tower::ServiceExt;

const HOST: &str = "127.0.0.1:8080";

fn sha256_hex(token: &str) -> String {
    use sha2::Digest;
    sha2::Sha256::digest(token.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

struct App {
    router: Router,
    _store: Arc<dyn Store>,
    _dir: tempfile::TempDir,
}

struct Reply {
    status: StatusCode,
    request_id: Option<String>,
    body: String,
}

impl Reply {
    fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or(Value::Null)
    }
}

impl App {
    /// Tokens: `deploy-secret` (editor of `a`, named `deploy-bot`), `view-secret` (viewer of
    /// `a`, unnamed), `ops-secret` (admin, named `ops`).
    async fn new() -> App {
        let dir = tempfile::tempdir().unwrap();
        let url = format!("sqlite://{}", dir.path().join("audit.db").display());
        let store: Arc<dyn Store> = Arc::new(
            SqliteStore::open(&url, Arc::new(SystemClock))
                .await
                .unwrap(),
        );
        let token = |t: &str, role: &str, ns: &str| {
            ApiToken::parse(&sha256_hex(t), role, &[ns.to_owned()]).unwrap()
        };
        let tokens = Tokens::new(vec![
            token("deploy-secret", "editor", "a")
                .named("deploy-bot")
                .unwrap(),
            token("view-secret", "viewer", "a"),
            token("ops-secret", "admin", "*").named("ops").unwrap(),
        ])
        .unwrap();
        let state = AppState {
            store: store.clone(),
            scheduler_wake: Arc::new(Notify::new()),
            worker_wake: Arc::new(Notify::new()),
            connections: Default::default(),
            http_allow: None,
            tokens: Some(Arc::new(tokens)),
            node: "test".to_owned(),
            roles: vec!["api".into()],
            metrics: None,
            signing_keys: Default::default(),
            secrets_key: None,
        };
        App {
            router: router(state),
            _store: store,
            _dir: dir,
        }
    }

    async fn send(
        &self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: Option<String>,
    ) -> Reply {
        let mut req = Request::builder()
            .method(method)
            .uri(path)
            .header(header::HOST, HOST);
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        let mut req = req.body(body.map_or_else(Body::empty, Body::from)).unwrap();
        let peer: SocketAddr = "192.0.2.10:51000".parse().unwrap();
        req.extensions_mut().insert(ConnectInfo(peer));
        let response = self.router.clone().oneshot(req).await.unwrap();
        let status = response.status();
        let request_id = response
            .headers()
            .get("x-request-id")
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        let bytes = axum::body::to_bytes(response.into_body(), usize::MAX)
            .await
            .unwrap();
        Reply {
            status,
            request_id,
            body: String::from_utf8_lossy(&bytes).into_owned(),
        }
    }

    async fn api(&self, method: &str, path: &str, token: &str, body: Option<Value>) -> Reply {
        let auth = format!("Bearer {token}");
        let mut headers = vec![("authorization", auth.as_str())];
        if body.is_some() {
            headers.push(("content-type", "application/json"));
        }
        self.send(method, path, &headers, body.map(|b| b.to_string()))
            .await
    }

    async fn audit(&self, query: &str) -> Vec<Value> {
        let r = self
            .api(
                "GET",
                &format!("/v1/namespaces/a/audit{query}"),
                "view-secret",
                None,
            )
            .await;
        assert_eq!(r.status, StatusCode::OK, "{}", r.body);
        r.json()["items"].as_array().cloned().unwrap_or_default()
    }
}

fn job() -> Value {
    json!({"schedule": {"every": "1h"}, "target": {"type": "http", "url": "http://127.0.0.1:9/"}, "description": "<b>x</b>"})
}

#[tokio::test]
async fn a_change_is_recorded_with_its_token_request_and_peer_and_a_read_with_nothing() {
    let app = App::new().await;
    let put = app
        .send(
            "PUT",
            "/v1/namespaces/a/jobs/billing",
            &[
                ("authorization", "Bearer deploy-secret"),
                ("content-type", "application/json"),
                ("x-request-id", "deploy-42"),
            ],
            Some(job().to_string()),
        )
        .await;
    assert_eq!(put.status, StatusCode::CREATED, "{}", put.body);
    assert_eq!(put.request_id.as_deref(), Some("deploy-42"));
    let pause = app
        .api(
            "POST",
            "/v1/namespaces/a/jobs/billing/pause",
            "ops-secret",
            None,
        )
        .await;
    assert_eq!(pause.status, StatusCode::OK, "{}", pause.body);
    let given = pause.request_id.expect("an id is given when none is sent");
    // Reads write nothing, and a refused write writes nothing.
    app.api("GET", "/v1/namespaces/a/jobs/billing", "view-secret", None)
        .await;
    let refused = app
        .api(
            "DELETE",
            "/v1/namespaces/a/jobs/billing",
            "view-secret",
            None,
        )
        .await;
    assert_eq!(refused.status, StatusCode::FORBIDDEN);

    let entries = app.audit("").await;
    assert_eq!(entries.len(), 2, "{entries:?}");
    let (pause, create) = (&entries[0], &entries[1]);
    assert_eq!(
        create["actor"],
        json!({"token": "deploy-bot", "role": "editor"})
    );
    assert_eq!(create["action"], "create");
    assert_eq!(create["request_id"], "deploy-42");
    assert_eq!(create["remote_addr"], "192.0.2.10:51000");
    assert_eq!(
        (
            create["version_before"].clone(),
            create["version_after"].clone()
        ),
        (Value::Null, json!(1))
    );
    assert_eq!(pause["actor"], json!({"token": "ops", "role": "admin"}));
    assert_eq!(pause["action"], "pause");
    assert_eq!(pause["request_id"], given.as_str());
    assert_eq!(
        (
            pause["version_before"].clone(),
            pause["version_after"].clone()
        ),
        (json!(1), json!(2))
    );
    assert_eq!(pause["prev_hash"], create["hash"]);

    // Filters and pages.
    assert_eq!(app.audit("?actor=ops").await.len(), 1);
    assert_eq!(app.audit("?resource=job&name=billing").await.len(), 2);
    assert!(app.audit("?name=other").await.is_empty());
    let first = app
        .api("GET", "/v1/namespaces/a/audit?limit=1", "view-secret", None)
        .await
        .json();
    let token = first["next_page_token"]
        .as_str()
        .expect("a next page")
        .to_owned();
    let second = app.audit(&format!("?limit=1&page_token={token}")).await;
    assert_eq!(second[0]["action"], "create");
    let verified = app
        .api("GET", "/v1/namespaces/a/audit:verify", "view-secret", None)
        .await
        .json();
    assert_eq!(
        verified,
        json!({"ok": true, "entries": 2, "first_bad": null})
    );
}

#[tokio::test]
async fn bad_filters_are_refused_naming_them() {
    let app = App::new().await;
    for (query, field) in [
        ("?resource=jobs", "resource"),
        ("?since=yesterday", "since"),
        ("?page_token=x", "page_token"),
        ("?page_token=-4", "page_token"),
        ("?limit=0", "limit"),
        ("?actor=", "actor"),
        ("?who=me", "who"),
    ] {
        let r = app
            .api(
                "GET",
                &format!("/v1/namespaces/a/audit{query}"),
                "view-secret",
                None,
            )
            .await;
        assert_eq!(r.status, StatusCode::BAD_REQUEST, "{query}: {}", r.body);
        assert!(r.body.contains(field), "{query}: {}", r.body);
    }
    let r = app
        .api(
            "GET",
            "/v1/namespaces/a/audit:verify?x=1",
            "view-secret",
            None,
        )
        .await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST, "{}", r.body);
    // Another namespace's log is another namespace's.
    let r = app
        .api("GET", "/v1/namespaces/b/audit", "view-secret", None)
        .await;
    assert_eq!(r.status, StatusCode::FORBIDDEN);
}

#[tokio::test]
async fn a_ui_action_is_recorded_as_the_session_s_token_and_the_page_shows_it_escaped() {
    let app = App::new().await;
    let put = app
        .api(
            "PUT",
            "/v1/namespaces/a/jobs/billing",
            "deploy-secret",
            Some(job()),
        )
        .await;
    assert_eq!(put.status, StatusCode::CREATED);
    let cookie = "sundial_token=deploy-secret";
    let origin = format!("http://{HOST}");
    let action = app
        .send(
            "POST",
            "/ui/namespaces/a/jobs/billing/pause",
            &[
                ("cookie", cookie),
                ("origin", origin.as_str()),
                ("x-request-id", "browser-7"),
            ],
            None,
        )
        .await;
    assert!(
        action.status.is_redirection() || action.status.is_success(),
        "{}",
        action.body
    );
    let entries = app.audit("").await;
    assert_eq!(entries[0]["action"], "pause");
    assert_eq!(entries[0]["actor"]["token"], "deploy-bot");
    assert_eq!(entries[0]["request_id"], "browser-7");
    assert_eq!(entries[0]["remote_addr"], "192.0.2.10:51000");

    let job_page = app
        .send(
            "GET",
            "/ui/namespaces/a/jobs/billing",
            &[("cookie", cookie)],
            None,
        )
        .await;
    assert!(
        job_page
            .body
            .contains("/ui/namespaces/a/audit?resource=job&amp;name=billing"),
        "the job page links to who changed it"
    );
    let page = app
        .send(
            "GET",
            "/ui/namespaces/a/audit?resource=job&name=billing",
            &[("cookie", cookie)],
            None,
        )
        .await;
    assert_eq!(page.status, StatusCode::OK, "{}", page.body);
    assert!(
        page.body.contains("Who changed job billing"),
        "{}",
        page.body
    );
    assert!(page.body.contains("deploy-bot"));
    assert!(page.body.contains("browser-7"));
    assert!(page.body.contains("1 → 2"));
    let bad = app
        .send(
            "GET",
            "/ui/namespaces/a/audit?resource=%3Cscript%3E",
            &[("cookie", cookie)],
            None,
        )
        .await;
    assert_eq!(bad.status, StatusCode::BAD_REQUEST);
    assert!(!bad.body.contains("<script>"), "{}", bad.body);
    // Every filter the page takes is applied; any other parameter is refused.
    let page = |query: &'static str| {
        let app = &app;
        async move {
            app.send(
                "GET",
                &format!("/ui/namespaces/a/audit{query}"),
                &[("cookie", cookie)],
                None,
            )
            .await
        }
    };
    assert!(
        page("?actor=nobody")
            .await
            .body
            .contains("No changes recorded.")
    );
    assert!(page("?actor=deploy-bot").await.body.contains("browser-7"));
    assert!(
        page("?since=2999-01-01T00:00:00Z")
            .await
            .body
            .contains("No changes recorded.")
    );
    for query in ["?since=garbage", "?limit=5", "?page_token=abc"] {
        assert_eq!(page(query).await.status, StatusCode::BAD_REQUEST, "{query}");
    }
}
