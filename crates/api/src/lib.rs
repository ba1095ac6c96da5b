//! Sundial's HTTP API (README.md "The API"): jobs, executions, workflows and their runs
//! (docs/workflows.md), cron previews and the ops endpoints.
//!
//! Invariants:
//! - A rejected request writes nothing: every body is validated in full before the store is
//!   touched, and each write is one store call (docs/guarantees.md#g7-bad-input).
//! - Every error is an RFC 9457 problem document naming every offending field ([`error`]).
//! - Writes are conditional on the version read (`If-Match` when given, the version just read
//!   otherwise), so concurrent writers never lose each other's updates silently.
//! - With tokens configured, no `/v1/` request runs without a token allowed to make it
//!   ([`auth`]).

#![warn(missing_docs)]

pub mod audit;
pub mod auth;
pub mod backfills;
pub mod calendars;
mod cron;
pub mod error;
mod executions;
mod jobs;
pub mod openapi;
mod plan;
mod request;
pub mod resource;
pub mod secrets;
pub mod signing_keys;
mod ui;
pub mod workflows;

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use serde_json::json;
use sundial_store::ApiStore;
use tokio::sync::Notify;

/// Largest request body accepted, in bytes (1 MiB); larger bodies get 413.
pub const MAX_BODY_BYTES: usize = 1024 * 1024;

/// What the handlers share.
#[derive(Debug, Clone)]
pub struct AppState {
    /// The store, through the API's steps and reads.
    pub store: Arc<dyn ApiStore>,
    /// Notified after a job write, so an in-process scheduler triggers at once.
    pub scheduler_wake: Arc<Notify>,
    /// Notified after a manual trigger or re-drive, so an in-process worker claims at once.
    pub worker_wake: Arc<Notify>,
    /// Named connections from server config: name → type.
    pub connections: BTreeMap<String, String>,
    /// The `[http_targets] allow` list from server config; `None`: any host.
    pub http_allow: Option<Arc<sundial_core::allow::HostAllowList>>,
    /// The `[[tokens]]` from server config; `None`: requests need no token ([`auth`]).
    pub tokens: Option<Arc<auth::Tokens>>,
    /// This node's id and roles, for `/v1/cluster`.
    pub node: String,
    /// Roles this process runs.
    pub roles: Vec<String>,
    /// Renders this process's metrics in the Prometheus text format; `None`: no `/metrics`.
    pub metrics: Option<MetricsRenderer>,
    /// `[[signing_keys]]` from server config, without their secrets; empty: nothing is
    /// signed.
    pub signing_keys: Arc<Vec<signing_keys::SigningKeyInfo>>,
    /// The key that seals secret values (`secrets_key_file`, docs/security.md, "Secrets");
    /// `None`: the secret routes answer 409 naming the setting.
    pub secrets_key: Option<Arc<sundial_core::secrets::SecretsKey>>,
}

/// Renders a process's metrics in the Prometheus text format.
#[derive(Clone)]
pub struct MetricsRenderer(pub Arc<dyn Fn() -> String + Send + Sync>);

impl std::fmt::Debug for MetricsRenderer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("MetricsRenderer")
    }
}

/// The ops endpoints alone (`/healthz`, `/readyz`), for a process that does not run the api
/// role but should still answer probes.
pub fn health_router(state: AppState) -> Router {
    Router::new()
        .route(
            "/healthz",
            get(|| async { axum::Json(json!({"status": "ok"})) }),
        )
        .route("/readyz", get(readyz))
        .with_state(state)
}

/// The API router with every route of README.md "The API" that this server implements, behind
/// [`auth::authorize`] when the state has tokens.
pub fn router(state: AppState) -> Router {
    let tokens = state.tokens.clone();
    // The token check runs first, then the audit scope of what may change (`audit`).
    let routes = routes(state.clone()).layer(axum::middleware::from_fn(audit::record_changes));
    let api = match tokens {
        Some(tokens) => routes.layer(axum::middleware::from_fn_with_state(
            tokens,
            auth::authorize,
        )),
        None => routes,
    };
    // The UI's actions go through `api`, token check included (`ui`'s invariants).
    let loopback_only = state.tokens.is_none();
    api.clone()
        .merge(ui::router(state, api))
        .layer(axum::middleware::from_fn(move |request, next| {
            browser_guard(loopback_only, request, next)
        }))
        .layer(axum::middleware::from_fn(audit::identify))
}

/// Refuses what a hostile web page could make a browser send (403, nothing runs): a write
/// (any method but GET, HEAD, OPTIONS) whose `Origin` names another host than the request's
/// `Host`, or that the browser marks `Sec-Fetch-Site: cross-site`; and, on a server without
/// tokens (which listens on loopback only), any `/v1` or `/ui` request whose `Host` is not a
/// loopback name, so that a hostile domain re-pointed at 127.0.0.1 (DNS rebinding) reaches
/// neither (the probes and `/metrics` answer any host).
/// Clients that are not browsers (the CLI, curl) send neither header and pass.
async fn browser_guard(
    loopback_only: bool,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    use axum::http::{Method, header};
    let headers = request.headers();
    let host = headers
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .unwrap_or("");
    let path = request.uri().path();
    let surface = path.starts_with("/v1/") || path == "/ui" || path.starts_with("/ui/");
    if loopback_only && surface && !host.is_empty() && !is_loopback_host(host) {
        return error::ApiError::new(
            StatusCode::FORBIDDEN,
            "forbidden",
            "this server has no API tokens and answers only requests addressed to a loopback host",
        )
        .into_response();
    }
    let writes = !matches!(
        *request.method(),
        Method::GET | Method::HEAD | Method::OPTIONS
    );
    if writes {
        let cross_site = headers
            .get("sec-fetch-site")
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.eq_ignore_ascii_case("cross-site"));
        let foreign_origin = headers
            .get(header::ORIGIN)
            .and_then(|o| o.to_str().ok())
            .is_some_and(|o| {
                o.strip_prefix("https://")
                    .or_else(|| o.strip_prefix("http://"))
                    .is_none_or(|authority| authority != host)
            });
        if cross_site || foreign_origin {
            return error::ApiError::new(
                StatusCode::FORBIDDEN,
                "forbidden",
                "a request from another site's page is refused",
            )
            .into_response();
        }
    }
    next.run(request).await
}

/// True for `localhost`, `127.x.x.x` and `[::1]`, with or without a port.
fn is_loopback_host(host: &str) -> bool {
    let name = if let Some(rest) = host.strip_prefix('[') {
        rest.split(']').next().unwrap_or("")
    } else {
        host.rsplit_once(':').map_or(host, |(h, _)| h)
    };
    name.eq_ignore_ascii_case("localhost")
        || name
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

fn routes(state: AppState) -> Router {
    use utoipa_axum::routes;
    // Every `/v1` route goes through `routes!`, which reads its path from the handler's
    // `#[utoipa::path]`: the router and the document are built from this one list.
    let (v1, doc) = utoipa_axum::router::OpenApiRouter::<AppState>::with_openapi(
        <openapi::ApiDoc as utoipa::OpenApi>::openapi(),
    )
    .routes(routes!(openapi_json))
    .routes(routes!(cluster))
    .routes(routes!(namespaces))
    .routes(routes!(signing_keys::list))
    .routes(routes!(signing_keys::get_one))
    .routes(routes!(audit::list))
    .routes(routes!(audit::verify))
    .routes(routes!(secrets::list))
    .routes(routes!(secrets::put, secrets::delete))
    .routes(routes!(cron::cron_next))
    .routes(routes!(jobs::list, jobs::create))
    .routes(routes!(jobs::apply_many))
    .routes(routes!(plan::plan_many))
    .routes(routes!(calendars::list))
    .routes(routes!(
        calendars::get_one,
        calendars::put,
        calendars::delete
    ))
    .routes(routes!(jobs::get_one, jobs::put, jobs::patch, jobs::delete))
    .routes(routes!(jobs::pause))
    .routes(routes!(jobs::resume))
    .routes(routes!(jobs::trigger))
    .routes(routes!(backfills::job_start))
    .routes(routes!(backfills::job_list))
    .routes(routes!(backfills::job_get))
    .routes(routes!(backfills::job_cancel))
    .routes(routes!(executions::list_for_job))
    .routes(routes!(executions::list_for_namespace))
    .routes(routes!(executions::get_one))
    .routes(routes!(executions::cancel))
    .routes(routes!(executions::retry))
    .routes(routes!(workflows::list, workflows::create))
    .routes(routes!(workflows::apply_many))
    .routes(routes!(
        workflows::get_one,
        workflows::put,
        workflows::patch,
        workflows::delete
    ))
    .routes(routes!(workflows::pause))
    .routes(routes!(workflows::resume))
    .routes(routes!(workflows::trigger))
    .routes(routes!(backfills::workflow_start))
    .routes(routes!(backfills::workflow_list))
    .routes(routes!(backfills::workflow_get))
    .routes(routes!(backfills::workflow_cancel))
    .routes(routes!(workflows::runs))
    .routes(routes!(workflows::run_get))
    .routes(routes!(workflows::run_cancel))
    .routes(routes!(workflows::run_retry))
    .split_for_parts();
    OPENAPI_JSON.get_or_init(|| doc.to_pretty_json().unwrap_or_default());
    Router::new()
        .route(
            "/healthz",
            get(|| async { axum::Json(json!({"status": "ok"})) }),
        )
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .merge(v1)
        .fallback(|| async {
            error::ApiError::new(StatusCode::NOT_FOUND, "not found", "no such route")
        })
        .method_not_allowed_fallback(|| async {
            error::ApiError::new(
                StatusCode::METHOD_NOT_ALLOWED,
                "method not allowed",
                "this route does not take that method",
            )
        })
        .layer(tower_http::trace::TraceLayer::new_for_http())
        .with_state(state)
}

/// The OpenAPI document as served, built once per process with the first router.
static OPENAPI_JSON: std::sync::OnceLock<String> = std::sync::OnceLock::new();

/// `GET /v1/openapi.json`: the OpenAPI 3.1 document of the `/v1` API ([`openapi`]), served
/// without a token.
#[utoipa::path(
    get,
    path = "/v1/openapi.json",
    tag = "cluster",
    summary = "This document",
    responses((status = 200, description = "The OpenAPI 3.1 document", content_type = "application/json", body = Object))
)]
async fn openapi_json() -> Response {
    (
        [(axum::http::header::CONTENT_TYPE, "application/json")],
        OPENAPI_JSON.get().cloned().unwrap_or_default(),
    )
        .into_response()
}

/// `GET /metrics`: this process's counters and histograms (Prometheus text format 0.0.4), and
/// the store's gauges: `sundial_executions{state="queued"|"scheduled"|"running"|"dead"}`,
/// `sundial_queue_depth{namespace}` (due and waiting) and `sundial_dead_letters{namespace}`.
async fn metrics(State(state): State<AppState>) -> Response {
    let Some(render) = &state.metrics else {
        return error::ApiError::new(
            StatusCode::NOT_FOUND,
            "not found",
            "metrics are not enabled",
        )
        .into_response();
    };
    let mut text = (render.0)();
    if let Ok(status) = state.store.cluster_status().await {
        text.push_str("# HELP sundial_executions Executions waiting or running, by state.\n# TYPE sundial_executions gauge\n");
        for (st, n) in [
            ("queued", status.queued),
            ("scheduled", status.scheduled),
            ("running", status.running),
            ("dead", status.dead_by_namespace.values().sum()),
        ] {
            text.push_str(&format!("sundial_executions{{state=\"{st}\"}} {n}\n"));
        }
        text.push_str("# HELP sundial_queue_depth Executions due and waiting for a worker, by namespace (what autoscaling reads).\n# TYPE sundial_queue_depth gauge\n");
        for (ns, n) in &status.queued_by_namespace {
            text.push_str(&format!(
                "sundial_queue_depth{{namespace=\"{}\"}} {n}\n",
                label_value(ns)
            ));
        }
        text.push_str("# HELP sundial_dead_letters Executions in state dead, awaiting re-drive, by namespace.\n# TYPE sundial_dead_letters gauge\n");
        for (ns, n) in &status.dead_by_namespace {
            text.push_str(&format!(
                "sundial_dead_letters{{namespace=\"{}\"}} {n}\n",
                label_value(ns)
            ));
        }
    }
    (
        [(
            axum::http::header::CONTENT_TYPE,
            "text/plain; version=0.0.4",
        )],
        text,
    )
        .into_response()
}

/// A Prometheus label value, escaped (text format 0.0.4: backslash, quote, newline).
fn label_value(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// `GET /v1/namespaces`: `{"items": [{"name": ...}], "next_page_token": null}`, the
/// namespaces that hold a job or a workflow, sorted, and of those only the ones the request's
/// token may touch ([`auth::authorize`] leaves its grant in the request).
#[utoipa::path(
    get,
    path = "/v1/namespaces",
    tag = "cluster",
    summary = "The namespaces that hold a job or a workflow (those the token may see)",
    responses((status = 200, description = "Namespaces", body = crate::resource::Page<crate::openapi::Namespace>), crate::openapi::Problems)
)]
async fn namespaces(
    State(state): State<AppState>,
    grant: Option<axum::Extension<auth::Namespaces>>,
) -> Response {
    match state.store.namespace_list().await {
        Ok(names) => {
            let items: Vec<serde_json::Value> = names
                .into_iter()
                .filter(|n| grant.as_ref().is_none_or(|g| g.allows(n)))
                .map(|n| json!({ "name": n }))
                .collect();
            axum::Json(json!({"items": items, "next_page_token": null})).into_response()
        }
        Err(e) => error::ApiError::from(e).into_response(),
    }
}

async fn readyz(State(state): State<AppState>) -> Response {
    match state.store.now().await {
        Ok(_) => axum::Json(json!({"status": "ready"})).into_response(),
        Err(e) => error::ApiError::from(e).into_response(),
    }
}

#[utoipa::path(
    get,
    path = "/v1/cluster",
    tag = "cluster",
    summary = "Nodes, roles, shard ownership and queue depth",
    responses((status = 200, description = "The cluster", body = crate::openapi::Cluster), crate::openapi::Problems)
)]
async fn cluster(State(state): State<AppState>) -> Response {
    match state.store.cluster_status().await {
        Ok(status) => axum::Json(json!({
            "now": status.now,
            "this_node": {"id": state.node, "roles": state.roles},
            "nodes": status.nodes,
            "queue": {"queued": status.queued, "scheduled": status.scheduled, "running": status.running},
        }))
        .into_response(),
        Err(e) => error::ApiError::from(e).into_response(),
    }
}
