//! The in-process harness the API's tests share: the router over a fresh SQLite store (or a
//! fresh PostgreSQL database, [`App::on_postgres`]), and requests answered as status, headers
//! and JSON.

#![allow(dead_code, reason = "each test binary uses part of the harness")]

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::Router;
use axum::body::Body;
use axum::http::{HeaderMap, Request, StatusCode, header};
use serde_json::Value;
use sundial_api::{AppState, router};
use sundial_clock::SystemClock;
use sundial_store::{ExecutionListQuery, JobListQuery, Store};
use sundial_store_sqlite::SqliteStore;
use tokio::sync::Notify;
use tower::ServiceExt;

/// A router over a fresh SQLite store in a temporary directory, or a fresh PostgreSQL
/// database (dropped with the `App`).
pub struct App {
    pub router: Router,
    pub store: Arc<dyn Store>,
    _dir: tempfile::TempDir,
    _database: Option<sundial_store_postgres::testing::TestDatabase>,
}

/// One response: status, headers and the body as JSON (`Value::Null` when empty).
pub struct Reply {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: Value,
}

impl App {
    pub async fn new() -> App {
        let dir = tempfile::tempdir().expect("temp dir");
        let url = format!("sqlite://{}", dir.path().join("sundial.db").display());
        let store: Arc<dyn Store> = Arc::new(
            SqliteStore::open(&url, Arc::new(SystemClock))
                .await
                .expect("open store"),
        );
        App::over(store, dir, None)
    }

    /// The router over a freshly created PostgreSQL database on the machine's server
    /// (`SUNDIAL_TEST_DATABASE_URL`, default the local one).
    pub async fn on_postgres() -> App {
        let db = sundial_store_postgres::testing::TestDatabase::create("sundial_api").await;
        let store: Arc<dyn Store> = Arc::new(
            sundial_store_postgres::PgStore::open(db.url(), None)
                .await
                .expect("open store"),
        );
        App::over(store, tempfile::tempdir().expect("temp dir"), Some(db))
    }

    fn over(
        store: Arc<dyn Store>,
        dir: tempfile::TempDir,
        database: Option<sundial_store_postgres::testing::TestDatabase>,
    ) -> App {
        let state = AppState {
            store: store.clone(),
            scheduler_wake: Arc::new(Notify::new()),
            worker_wake: Arc::new(Notify::new()),
            connections: BTreeMap::from([("events".to_owned(), "nats".to_owned())]),
            http_allow: None,
            tokens: None,
            node: "test".to_owned(),
            roles: vec!["api".into(), "scheduler".into(), "worker".into()],
            metrics: None,
            signing_keys: Default::default(),
            secrets_key: Some(std::sync::Arc::new(
                sundial_core::secrets::SecretsKey::parse(
                    &sundial_core::secrets::SecretsKey::generate(),
                )
                .unwrap(),
            )),
        };
        App {
            router: router(state),
            store,
            _dir: dir,
            _database: database,
        }
    }

    pub async fn send(&self, request: Request<Body>) -> Reply {
        let response = self
            .router
            .clone()
            .oneshot(request)
            .await
            .expect("router is infallible");
        let status = response.status();
        let headers = response.headers().clone();
        let bytes = axum::body::to_bytes(response.into_body(), usize::MAX)
            .await
            .expect("read body");
        let body = if bytes.is_empty() {
            Value::Null
        } else {
            serde_json::from_slice(&bytes).unwrap_or_else(|_| {
                Value::String(format!(
                    "<not JSON> {}",
                    String::from_utf8_lossy(&bytes)
                        .chars()
                        .take(200)
                        .collect::<String>()
                ))
            })
        };
        Reply {
            status,
            headers,
            body,
        }
    }

    /// A request with an optional JSON body (sent as `application/json`) and extra headers.
    pub async fn call(
        &self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: Option<Value>,
    ) -> Reply {
        let mut builder = Request::builder().method(method).uri(path);
        if body.is_some() {
            builder = builder.header(header::CONTENT_TYPE, "application/json");
        }
        for (k, v) in headers {
            builder = builder.header(*k, *v);
        }
        let body = body.map_or_else(Body::empty, |b| Body::from(b.to_string()));
        self.send(builder.body(body).expect("request")).await
    }

    pub async fn jobs_in(&self, ns: &str) -> Vec<sundial_store::JobRecord> {
        self.store
            .job_list(&JobListQuery {
                namespace: ns.to_owned(),
                paused: None,
                label: None,
                after_name: None,
                limit: 1000,
            })
            .await
            .expect("job_list")
    }

    pub async fn executions_in(&self, ns: &str) -> usize {
        self.store
            .execution_list(&ExecutionListQuery {
                namespace: ns.to_owned(),
                limit: 1000,
                ..Default::default()
            })
            .await
            .expect("execution_list")
            .len()
    }
}
