//! Bearer tokens (README.md "The API"), in process: no token or an unknown one is 401, a token outside
//! its namespaces or a viewer's write is 403, and none of them writes anything.

use std::sync::Arc;

use axum::Router;
use axum::body::Body;
use axum::http::{Request, StatusCode, header};
use serde_json::json;
use sundial_api::auth::{ApiToken, Tokens};
use sundial_api::{AppState, router};
use sundial_clock::SystemClock;
use sundial_store::{JobListQuery, Store};
use sundial_store_sqlite::SqliteStore;
use tokio::sync::Notify;
use tower::ServiceExt;

/// The SHA-256 of `token`, as configured.
fn sha256_hex(token: &str) -> String {
    use sha2::Digest;
    sha2::Sha256::digest(token.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

struct App {
    router: Router,
    store: Arc<dyn Store>,
    _dir: tempfile::TempDir,
}

impl App {
    /// Tokens `view-a` (viewer of `a`), `edit-a` (editor of `a`), `admin` (admin of all).
    async fn new() -> App {
        let dir = tempfile::tempdir().unwrap();
        let url = format!("sqlite://{}", dir.path().join("sundial.db").display());
        let store: Arc<dyn Store> = Arc::new(
            SqliteStore::open(&url, Arc::new(SystemClock))
                .await
                .unwrap(),
        );
        let token = |t: &str, role: &str, ns: &str| {
            ApiToken::parse(&sha256_hex(t), role, &[ns.to_owned()]).unwrap()
        };
        let tokens = Tokens::new(vec![
            token("view-a", "viewer", "a"),
            token("edit-a", "editor", "a"),
            token("admin", "admin", "*"),
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
            store,
            _dir: dir,
        }
    }

    /// Status, and the `WWW-Authenticate` header, of a request with `token` (if any).
    async fn send(&self, method: &str, path: &str, token: Option<&str>) -> (StatusCode, bool) {
        let mut req = Request::builder().method(method).uri(path);
        if let Some(t) = token {
            req = req.header(header::AUTHORIZATION, format!("Bearer {t}"));
        }
        let body = if method == "PUT" {
            req = req.header(header::CONTENT_TYPE, "application/json");
            Body::from(
                json!({"schedule": {"every": "1h"}, "target": {"type": "http", "url": "http://127.0.0.1:9/"}})
                    .to_string(),
            )
        } else {
            Body::empty()
        };
        let response = self
            .router
            .clone()
            .oneshot(req.body(body).unwrap())
            .await
            .unwrap();
        let challenge = response.headers().get(header::WWW_AUTHENTICATE).is_some();
        (response.status(), challenge)
    }

    async fn jobs(&self, ns: &str) -> usize {
        self.store
            .job_list(&JobListQuery {
                namespace: ns.to_owned(),
                paused: None,
                label: None,
                limit: 100,
                after_name: None,
            })
            .await
            .unwrap()
            .len()
    }
}

#[tokio::test]
async fn without_a_known_token_nothing_runs_and_the_answer_is_401() {
    let app = App::new().await;
    for token in [None, Some("wrong"), Some("")] {
        let (status, challenge) = app.send("PUT", "/v1/namespaces/a/jobs/j", token).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "{token:?}");
        assert!(challenge, "401 without WWW-Authenticate: Bearer");
        let (status, _) = app.send("GET", "/v1/cluster", token).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED);
    }
    assert_eq!(app.jobs("a").await, 0);
    // The scheme is case-insensitive; two Authorization headers are refused, whatever they hold.
    let with_headers = |values: &[&str]| {
        let mut req = Request::get("/v1/namespaces/a/jobs");
        for v in values {
            req = req.header(header::AUTHORIZATION, *v);
        }
        app.router.clone().oneshot(req.body(Body::empty()).unwrap())
    };
    let status = |r: Result<axum::response::Response, _>| -> StatusCode { r.unwrap().status() };
    assert_eq!(
        status(with_headers(&["BEARER view-a"]).await),
        StatusCode::OK
    );
    assert_eq!(
        status(with_headers(&["Bearer view-a", "Bearer admin"]).await),
        StatusCode::BAD_REQUEST
    );
    assert_eq!(
        status(with_headers(&["Basic view-a"]).await),
        StatusCode::UNAUTHORIZED
    );
    // Probes answer without a token.
    assert_eq!(app.send("GET", "/healthz", None).await.0, StatusCode::OK);
}

#[tokio::test]
async fn roles_and_namespaces_bound_what_a_token_does() {
    let app = App::new().await;
    let put = |ns: &'static str, token: &'static str| {
        let app = &app;
        async move {
            app.send("PUT", &format!("/v1/namespaces/{ns}/jobs/j"), Some(token))
                .await
                .0
        }
    };
    assert_eq!(put("a", "view-a").await, StatusCode::FORBIDDEN);
    assert_eq!(put("b", "edit-a").await, StatusCode::FORBIDDEN);
    assert_eq!((app.jobs("a").await, app.jobs("b").await), (0, 0));
    assert_eq!(put("a", "edit-a").await, StatusCode::CREATED);
    assert_eq!(put("b", "admin").await, StatusCode::CREATED);
    assert_eq!((app.jobs("a").await, app.jobs("b").await), (1, 1));

    let get = |path: &'static str, token: &'static str| {
        let app = &app;
        async move { app.send("GET", path, Some(token)).await.0 }
    };
    assert_eq!(
        get("/v1/namespaces/a/jobs/j", "view-a").await,
        StatusCode::OK
    );
    assert_eq!(
        get("/v1/namespaces/b/jobs/j", "view-a").await,
        StatusCode::FORBIDDEN
    );
    assert_eq!(
        get("/v1/namespaces/b/jobs", "edit-a").await,
        StatusCode::FORBIDDEN
    );
    assert_eq!(
        get("/v1/namespaces/b/jobs/j", "admin").await,
        StatusCode::OK
    );
    assert_eq!(get("/v1/cluster", "view-a").await, StatusCode::OK);
    let (status, _) = app
        .send("DELETE", "/v1/namespaces/a/jobs/j", Some("view-a"))
        .await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    assert_eq!(app.jobs("a").await, 1);
    // Secrets: a viewer neither reads nor writes them; an editor lists them.
    assert_eq!(
        get("/v1/namespaces/a/secrets", "view-a").await,
        StatusCode::FORBIDDEN
    );
    assert_eq!(
        get("/v1/namespaces/a/secrets", "edit-a").await,
        StatusCode::OK
    );
    let (status, _) = app
        .send("DELETE", "/v1/namespaces/a/secrets/s", Some("view-a"))
        .await;
    assert_eq!(status, StatusCode::FORBIDDEN);
}

#[tokio::test]
async fn the_namespace_listing_shows_only_the_token_s_namespaces() {
    let app = App::new().await;
    for ns in ["a", "b"] {
        let (status, _) = app
            .send("PUT", &format!("/v1/namespaces/{ns}/jobs/j"), Some("admin"))
            .await;
        assert_eq!(status, StatusCode::CREATED);
    }
    let names = |token: &'static str| {
        let router = app.router.clone();
        async move {
            let response = router
                .oneshot(
                    Request::builder()
                        .uri("/v1/namespaces")
                        .header(header::AUTHORIZATION, format!("Bearer {token}"))
                        .body(Body::empty())
                        .unwrap(),
                )
                .await
                .unwrap();
            assert_eq!(response.status(), StatusCode::OK);
            let body = axum::body::to_bytes(response.into_body(), 1 << 20)
                .await
                .unwrap();
            let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
            v["items"]
                .as_array()
                .unwrap()
                .iter()
                .map(|i| i["name"].as_str().unwrap().to_owned())
                .collect::<Vec<_>>()
        }
    };
    assert_eq!(names("admin").await, vec!["a", "b"]);
    assert_eq!(names("view-a").await, vec!["a"]);
    let (status, _) = app.send("GET", "/v1/namespaces", None).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
}
