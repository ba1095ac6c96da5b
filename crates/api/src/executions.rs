//! Execution routes: history per job and per namespace (`?state=dead` is the dead-letter
//! listing), one execution with its attempts, cancel, and re-drive.

use std::collections::HashMap;

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use jiff::Timestamp;
use serde_json::{Value, json};
use sundial_core::execution::ExecutionState;
use sundial_store::ExecutionListQuery;

use crate::AppState;
use crate::error::ApiError;
use crate::request::{Path, Query, known_params, limit};
use crate::resource::execution_json;

/// Page tokens are `<scheduled_at ms>_<id>` of the last item of the previous page.
pub(crate) fn page_token(raw: Option<&String>) -> Result<Option<(Timestamp, String)>, ApiError> {
    let Some(raw) = raw else { return Ok(None) };
    let bad = || {
        ApiError::bad_request(
            "page_token",
            format!("'{raw}' is not a page token from this API"),
        )
    };
    let (ms, id) = raw.split_once('_').ok_or_else(bad)?;
    let at = ms
        .parse::<i64>()
        .ok()
        .and_then(|ms| Timestamp::from_millisecond(ms).ok())
        .ok_or_else(bad)?;
    Ok(Some((at, id.to_owned())))
}

/// Whose executions a listing holds.
enum Filter {
    /// The job's of the path: 404 for a name that has neither a job nor history.
    Job(String),
    /// The namespace's, or with `?job=` one job's (an empty page when it has none).
    Namespace { job: Option<String> },
}

async fn list(
    state: &AppState,
    ns: String,
    filter: Filter,
    q: &HashMap<String, String>,
) -> Result<Response, ApiError> {
    let (job, must_exist) = match filter {
        Filter::Job(name) => (Some(name), true),
        Filter::Namespace { job } => (job, false),
    };
    let wanted = q
        .get("state")
        .map(|s| s.parse::<ExecutionState>())
        .transpose()
        .map_err(|m| ApiError::bad_request("state", m))?;
    let limit = limit(q.get("limit").map(String::as_str))?;
    let before = page_token(q.get("page_token"))?;
    if let Some(name) = job.as_ref().filter(|_| must_exist)
        && state.store.job_get(&ns, name).await?.is_none()
        && before.is_none()
    {
        // History outlives its job; only a name that never ran is unknown.
        let probe = ExecutionListQuery {
            namespace: ns.clone(),
            job: job.clone(),
            limit: 1,
            ..Default::default()
        };
        if state.store.execution_list(&probe).await?.is_empty() {
            return Err(ApiError::not_found(format!("job {ns}/{name}")));
        }
    }
    let query = ExecutionListQuery {
        namespace: ns,
        job,
        state: wanted,
        before,
        limit,
    };
    let items = state.store.execution_list(&query).await?;
    let now = state.store.now().await?;
    let next = (items.len() == limit as usize)
        .then(|| {
            items
                .last()
                .map(|e| format!("{}_{}", e.scheduled_at.as_millisecond(), e.id))
        })
        .flatten();
    let items: Vec<Value> = items.iter().map(|e| execution_json(e, now)).collect();
    Ok(Json(json!({"items": items, "next_page_token": next})).into_response())
}

/// `GET /v1/namespaces/{ns}/jobs/{name}/executions?state=&limit=&page_token=`, newest first.
#[utoipa::path(
    get,
    path = "/v1/namespaces/{ns}/jobs/{name}/executions",
    tag = "executions",
    summary = "A job's executions, newest first",
    params(("ns" = String, Path, description = "Namespace"), ("name" = String, Path, description = "Job name"), ("state" = Option<sundial_core::execution::ExecutionState>, Query, description = "Only executions in this state; dead is the dead-letter listing"), ("limit" = Option<u32>, Query, description = "Page size, 1 to 1000 (default 100)"), ("page_token" = Option<String>, Query, description = "The next_page_token of the previous page")),
    responses((status = 200, description = "A page of executions", body = crate::resource::Page<crate::resource::ExecutionResource>), crate::openapi::Problems)
)]
pub(crate) async fn list_for_job(
    State(state): State<AppState>,
    Path((ns, name)): Path<(String, String)>,
    Query(q): Query<HashMap<String, String>>,
) -> Result<Response, ApiError> {
    known_params(&q, &["state", "limit", "page_token"])?;
    list(&state, ns, Filter::Job(name), &q).await
}

/// `GET /v1/namespaces/{ns}/executions?state=&job=&limit=&page_token=`, newest first.
#[utoipa::path(
    get,
    path = "/v1/namespaces/{ns}/executions",
    tag = "executions",
    summary = "The namespace's executions, newest first; ?state=dead lists dead letters",
    params(("ns" = String, Path, description = "Namespace"), ("state" = Option<sundial_core::execution::ExecutionState>, Query, description = "Only executions in this state; dead is the dead-letter listing"), ("job" = Option<String>, Query, description = "Only this job's executions (a job name; its history outlives it, so one deleted still matches)"), ("limit" = Option<u32>, Query, description = "Page size, 1 to 1000 (default 100)"), ("page_token" = Option<String>, Query, description = "The next_page_token of the previous page")),
    responses((status = 200, description = "A page of executions", body = crate::resource::Page<crate::resource::ExecutionResource>), crate::openapi::Problems)
)]
pub(crate) async fn list_for_namespace(
    State(state): State<AppState>,
    Path(ns): Path<String>,
    Query(q): Query<HashMap<String, String>>,
) -> Result<Response, ApiError> {
    known_params(&q, &["state", "job", "limit", "page_token"])?;
    let job = match q.get("job") {
        Some(name) => {
            sundial_core::names::check_name(name)
                .map_err(|m| ApiError::bad_request("job", format!("'{name}' {m}")))?;
            Some(name.clone())
        }
        None => None,
    };
    list(&state, ns, Filter::Namespace { job }, &q).await
}

/// `GET /v1/namespaces/{ns}/executions/{id}` with its attempts.
#[utoipa::path(
    get,
    path = "/v1/namespaces/{ns}/executions/{id}",
    tag = "executions",
    summary = "One execution with its attempts",
    params(("ns" = String, Path, description = "Namespace"), ("id" = String, Path, description = "Execution id")),
    responses((status = 200, description = "The execution", body = crate::resource::ExecutionResource), crate::openapi::Problems)
)]
pub(crate) async fn get_one(
    State(state): State<AppState>,
    Path((ns, id)): Path<(String, String)>,
) -> Result<Response, ApiError> {
    let e = state
        .store
        .execution_get(&ns, &id)
        .await?
        .ok_or_else(|| ApiError::not_found(format!("execution {id}")))?;
    let now = state.store.now().await?;
    Ok(Json(execution_json(&e, now)).into_response())
}

/// `POST .../executions/{id}/cancel`: 409 when already terminal.
#[utoipa::path(
    post,
    path = "/v1/namespaces/{ns}/executions/{id}/cancel",
    tag = "executions",
    summary = "Cancel an execution that has not ended; a running attempt is stopped",
    params(("ns" = String, Path, description = "Namespace"), ("id" = String, Path, description = "Execution id")),
    responses((status = 200, description = "Cancelled", body = crate::resource::ExecutionResource), crate::openapi::Problems)
)]
pub(crate) async fn cancel(
    State(state): State<AppState>,
    Path((ns, id)): Path<(String, String)>,
) -> Result<Response, ApiError> {
    let e = state.store.execution_cancel(&ns, &id).await?;
    // One INFO line per cancelled execution (README, "Running a server"): a running one's
    // worker logs when it stops the attempt; one that was waiting is logged here.
    let stopped_running = e
        .attempts
        .last()
        .is_some_and(|a| a.outcome == Some(sundial_core::execution::AttemptOutcome::Cancelled));
    if !stopped_running {
        tracing::info!(namespace = %ns, job = %e.job, slot = %e.scheduled_at, execution = %e.id,
            state = "cancelled", attempt = e.attempt, "execution cancelled while waiting");
    }
    let now = state.store.now().await?;
    Ok(Json(execution_json(&e, now)).into_response())
}

/// `POST .../executions/{id}/retry`: re-drives a `dead` or `failed` execution with a fresh
/// allowance of its job's `max_attempts`; 409 for any other state.
#[utoipa::path(
    post,
    path = "/v1/namespaces/{ns}/executions/{id}/retry",
    tag = "executions",
    summary = "Re-drive a dead or failed execution",
    params(("ns" = String, Path, description = "Namespace"), ("id" = String, Path, description = "Execution id")),
    responses((status = 200, description = "Queued again", body = crate::resource::ExecutionResource), crate::openapi::Problems)
)]
pub(crate) async fn retry(
    State(state): State<AppState>,
    Path((ns, id)): Path<(String, String)>,
) -> Result<Response, ApiError> {
    let current = state
        .store
        .execution_get(&ns, &id)
        .await?
        .ok_or_else(|| ApiError::not_found(format!("execution {id}")))?;
    let extra = match state.store.job_get(&ns, &current.job).await? {
        Some(job) => job.spec.retry.max_attempts,
        None => current.max_attempts.max(1),
    };
    let e = state.store.execution_redrive(&ns, &id, extra).await?;
    state.worker_wake.notify_one();
    let now = state.store.now().await?;
    Ok((StatusCode::OK, Json(execution_json(&e, now))).into_response())
}
