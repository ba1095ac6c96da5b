//! Workflow routes (docs/workflows.md, SPEC §9): create, replace, merge-patch, read, list,
//! delete, apply many, pause, resume, trigger; a workflow's runs, one run with its tasks,
//! cancel and retry from failure.
//!
//! A workflow's next slot follows the rules of a job's (the `jobs` routes): a new one starts at
//! its first slot at or after creation, a change of schedule or a resume at the first slot
//! after now; without a schedule it has none and runs only when triggered.

use std::collections::HashMap;

use axum::Json;
use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use jiff::Timestamp;
use serde_json::{Value, json};
use sundial_core::execution::Trigger;
use sundial_core::hash::shard_of;
use sundial_core::job::ScheduleKind;
use sundial_core::schedule::Schedule;
use sundial_core::validate::{self, FieldError};
use sundial_core::workflow::validate::{trigger_params, workflow_from_json};
use sundial_core::workflow::{RunState, WorkflowSpec};
use sundial_store::Error as StoreError;
use sundial_store::workflow::affects_runs;
use sundial_store::{
    NewRun, RunListQuery, RunRecord, WorkflowListQuery, WorkflowRecord, WorkflowWrite,
};

use crate::AppState;
use crate::error::ApiError;
use crate::executions::page_token;
use crate::jobs::{batch, check_path, context, retry_races, with_etag};
use crate::request::{
    Path, Query, if_match, job_page_token, json_body, limit, list_filters, optional_json_body,
};

/// A workflow as the API shows it at `now`: its spec plus `state`, `version`, `created_at`,
/// `updated_at`, `next_fire_at`, `next_fire_times` (the next five, none while paused or
/// without a schedule) and `last_run`.
pub fn workflow_json(w: &WorkflowRecord, now: Timestamp) -> Value {
    let mut v = serde_json::to_value(&w.spec).unwrap_or_else(|_| json!({}));
    v["state"] = json!(w.state());
    v["version"] = json!(w.version);
    v["created_at"] = json!(w.created_at);
    v["updated_at"] = json!(w.updated_at);
    v["next_fire_at"] = json!(w.next_fire_at);
    let upcoming: Vec<Timestamp> = match (&w.spec.schedule, w.next_fire_at) {
        (Some(s), Some(next)) if !w.spec.paused => match Schedule::compile(s) {
            Ok(schedule) => {
                let from = now.min(next - w.spec.jitter.as_signed())
                    - jiff::SignedDuration::from_millis(1);
                schedule
                    .upcoming(from, 10)
                    .into_iter()
                    .map(|slot| sundial_core::hash::fire_time(&w.uid, slot, w.spec.jitter))
                    .filter(|f| *f >= next)
                    .take(5)
                    .collect()
            }
            Err(_) => Vec::new(),
        },
        _ => Vec::new(),
    };
    v["next_fire_times"] = json!(upcoming);
    v["last_run"] = json!(w.last_run);
    v
}

/// A run as the API shows it (SPEC §9, "Run resource").
pub fn run_json(r: &RunRecord) -> Value {
    json!({
        "id": r.id,
        "namespace": r.namespace,
        "workflow": r.workflow,
        "workflow_version": r.workflow_version,
        "trigger": r.trigger,
        "scheduled_at": r.scheduled_at,
        "fire_at": r.fire_at,
        "state": r.state,
        "params": r.params,
        "created_at": r.created_at,
        "started_at": r.started_at,
        "finished_at": r.finished_at,
        "tasks": r.tasks,
    })
}

/// The stored form of `spec` written over `existing` at `now` (module docs).
fn next_record(
    mut spec: WorkflowSpec,
    existing: Option<&WorkflowRecord>,
    now: Timestamp,
) -> WorkflowRecord {
    if let Some(schedule) = spec.schedule.as_mut()
        && let ScheduleKind::Every { every } = schedule.kind
        && schedule.start_at.is_none()
    {
        let kept = existing
            .and_then(|old| old.spec.schedule.as_ref())
            .and_then(|old| match old.kind {
                ScheduleKind::Every { every: e } if e == every => old.start_at,
                _ => None,
            });
        schedule.start_at = Some(kept.unwrap_or(now));
    }
    let compiled = spec
        .schedule
        .as_ref()
        .and_then(|s| Schedule::compile(s).ok());
    let next_slot_at = match existing {
        _ if spec.paused => None,
        None => compiled.as_ref().and_then(|s| s.first_slot(now)),
        Some(old) if old.spec.schedule != spec.schedule || old.spec.paused => {
            compiled.as_ref().and_then(|s| s.next_slot_after(now))
        }
        Some(old) => old.next_slot_at,
    };
    let uid = existing.map_or_else(|| uuid::Uuid::now_v7().to_string(), |o| o.uid.clone());
    WorkflowRecord {
        shard: shard_of(&spec.namespace, &spec.name),
        next_fire_at: next_slot_at.map(|s| sundial_core::hash::fire_time(&uid, s, spec.jitter)),
        spec,
        uid,
        version: existing.map_or(0, |o| o.version),
        created_at: existing.map_or(now, |o| o.created_at),
        updated_at: now,
        next_slot_at,
        last_run: existing.and_then(|o| o.last_run.clone()),
    }
}

/// Writes `spec` over `existing` (or creates it), conditional on `expected` (If-Match) when
/// given, else on the version read; a write of what is stored changes nothing. `Ok(None)`
/// when the client gave no If-Match and a concurrent write got there first: the caller reads
/// again and retries (`jobs::retry_races`).
/// [`write`], answered with `status`, the written workflow and its `ETag`; `Ok(None)` as
/// `write` for a race to run again.
async fn written_response(
    state: &AppState,
    spec: WorkflowSpec,
    existing: Option<WorkflowRecord>,
    expected: Option<i64>,
    status: StatusCode,
) -> Result<Option<Response>, ApiError> {
    let Some(written) = write(state, spec, existing, expected).await? else {
        return Ok(None);
    };
    let now = state.store.now().await?;
    Ok(Some(with_etag(
        status,
        written.version,
        workflow_json(&written, now),
    )))
}

async fn write(
    state: &AppState,
    spec: WorkflowSpec,
    existing: Option<WorkflowRecord>,
    expected: Option<i64>,
) -> Result<Option<WorkflowRecord>, ApiError> {
    if let (Some(v), Some(old)) = (expected, &existing)
        && old.version != v
    {
        return Err(StoreError::StaleVersion {
            expected: v,
            actual: old.version,
        }
        .into());
    }
    if let (Some(v), None) = (expected, &existing) {
        return Err(ApiError::new(
            StatusCode::PRECONDITION_FAILED,
            "precondition failed",
            format!("If-Match names version {v}, but the workflow does not exist"),
        ));
    }
    let now = state.store.now().await?;
    let record = next_record(spec, existing.as_ref(), now);
    if let Some(old) = existing.as_ref().filter(|old| old.spec == record.spec) {
        return Ok(Some(old.clone()));
    }
    let created = existing.is_none();
    let written = match state
        .store
        .workflow_write_batch(&[WorkflowWrite {
            cancel_not_started: existing
                .as_ref()
                .is_some_and(|o| affects_runs(&o.spec, &record.spec)),
            record,
            expected_version: existing.map(|o| o.version),
        }])
        .await
    {
        Ok(mut written) => written
            .pop()
            .ok_or_else(|| StoreError::Corrupt("a one-workflow batch wrote nothing".into()))?,
        Err(StoreError::StaleVersion { .. }) if expected.is_none() => return Ok(None),
        Err(StoreError::Conflict(_)) if expected.is_none() && created => return Ok(None),
        Err(e) => return Err(e.into()),
    };
    state.scheduler_wake.notify_one();
    Ok(Some(written))
}

async fn load(state: &AppState, ns: &str, name: &str) -> Result<WorkflowRecord, ApiError> {
    state
        .store
        .workflow_get(ns, name)
        .await?
        .ok_or_else(|| ApiError::not_found(format!("workflow {ns}/{name}")))
}

/// `PUT /v1/namespaces/{ns}/workflows/{name}`: create (201) or replace (200).
pub(crate) async fn put(
    State(state): State<AppState>,
    Path((ns, name)): Path<(String, String)>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    check_path(&ns, Some(&name))?;
    let expected = if_match(&headers)?;
    let body = json_body(&headers, body).await?;
    let spec =
        workflow_from_json(&body, &context(&state, &ns, Some(&name))).map_err(ApiError::invalid)?;
    retry_races(|| async {
        let existing = state.store.workflow_get(&ns, &name).await?;
        let status = if existing.is_some() {
            StatusCode::OK
        } else {
            StatusCode::CREATED
        };
        written_response(&state, spec.clone(), existing, expected, status).await
    })
    .await
}

/// `POST /v1/namespaces/{ns}/workflows`: create with `name` in the body; 409 if it exists.
pub(crate) async fn create(
    State(state): State<AppState>,
    Path(ns): Path<String>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    check_path(&ns, None)?;
    let body = json_body(&headers, body).await?;
    let spec = workflow_from_json(&body, &context(&state, &ns, None)).map_err(ApiError::invalid)?;
    // A create that finds the name taken, or loses the race for it, is a conflict.
    let taken = || {
        ApiError::new(
            StatusCode::CONFLICT,
            "conflict",
            format!("workflow {ns}/{} already exists", spec.name),
        )
    };
    if state.store.workflow_get(&ns, &spec.name).await?.is_some() {
        return Err(taken());
    }
    let written = write(&state, spec.clone(), None, None)
        .await?
        .ok_or_else(taken)?;
    let now = state.store.now().await?;
    Ok(with_etag(
        StatusCode::CREATED,
        written.version,
        workflow_json(&written, now),
    ))
}

/// Most workflows one bulk request may carry.
pub const MAX_BATCH: usize = 100;

/// `POST /v1/namespaces/{ns}/workflows:apply` with `{"workflows": [workflow, ...]}` (at most
/// [`MAX_BATCH`]): creates or replaces every workflow, all or none — every one is validated
/// first (errors name `workflows.<i>.<field>`), then all are written in one transaction.
/// Answers `{"items": [...], "created": n, "updated": m, "unchanged": k}`.
pub(crate) async fn apply_many(
    State(state): State<AppState>,
    Path(ns): Path<String>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    check_path(&ns, None)?;
    let body = json_body(&headers, body).await?;
    let specs = batch(&body, "workflows", MAX_BATCH, |item| {
        workflow_from_json(item, &context(&state, &ns, None)).map(|spec| (spec.name.clone(), spec))
    })?;
    let now = state.store.now().await?;
    let (mut writes, mut unchanged, mut created) = (Vec::new(), Vec::new(), 0);
    for spec in specs {
        let existing = state.store.workflow_get(&ns, &spec.name).await?;
        created += usize::from(existing.is_none());
        let record = next_record(spec, existing.as_ref(), now);
        if let Some(old) = existing.as_ref().filter(|old| old.spec == record.spec) {
            unchanged.push(old.clone());
            continue;
        }
        writes.push(WorkflowWrite {
            cancel_not_started: existing
                .as_ref()
                .is_some_and(|o| affects_runs(&o.spec, &record.spec)),
            record,
            expected_version: existing.map(|o| o.version),
        });
    }
    let written = if writes.is_empty() {
        Vec::new()
    } else {
        state.store.workflow_write_batch(&writes).await?
    };
    state.scheduler_wake.notify_one();
    let updated = written.len() - created;
    let items: Vec<Value> = written
        .iter()
        .chain(&unchanged)
        .map(|w| workflow_json(w, now))
        .collect();
    Ok(Json(json!({"items": items, "created": created, "updated": updated, "unchanged": unchanged.len()})).into_response())
}

/// `GET /v1/namespaces/{ns}/workflows/{name}`.
pub(crate) async fn get_one(
    State(state): State<AppState>,
    Path((ns, name)): Path<(String, String)>,
) -> Result<Response, ApiError> {
    let w = load(&state, &ns, &name).await?;
    let now = state.store.now().await?;
    Ok(with_etag(StatusCode::OK, w.version, workflow_json(&w, now)))
}

/// `GET /v1/namespaces/{ns}/workflows?paused=&label=k=v&limit=&page_token=`.
pub(crate) async fn list(
    State(state): State<AppState>,
    Path(ns): Path<String>,
    Query(q): Query<HashMap<String, String>>,
) -> Result<Response, ApiError> {
    check_path(&ns, None)?;
    let crate::request::ListFilters { paused, label } = list_filters(&q)?;
    let limit = limit(q.get("limit").map(String::as_str))?;
    let after_name = job_page_token(q.get("page_token").map(String::as_str))?;
    let found = state
        .store
        .workflow_list(&WorkflowListQuery {
            namespace: ns,
            paused,
            label,
            after_name,
            limit,
        })
        .await?;
    let next = (found.len() == limit as usize)
        .then(|| found.last().map(|w| w.spec.name.clone()))
        .flatten();
    let now = state.store.now().await?;
    let items: Vec<Value> = found.iter().map(|w| workflow_json(w, now)).collect();
    Ok(Json(json!({"items": items, "next_page_token": next})).into_response())
}

/// `PATCH /v1/namespaces/{ns}/workflows/{name}`: JSON merge patch (RFC 7396).
pub(crate) async fn patch(
    State(state): State<AppState>,
    Path((ns, name)): Path<(String, String)>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    check_path(&ns, Some(&name))?;
    let expected = if_match(&headers)?;
    let patch = json_body(&headers, body).await?;
    if !patch.is_object() {
        return Err(ApiError::invalid(vec![FieldError::new(
            "",
            "a merge patch must be a JSON object",
        )]));
    }
    retry_races(|| async {
        let existing = load(&state, &ns, &name).await?;
        let mut doc =
            serde_json::to_value(&existing.spec).map_err(|e| StoreError::Corrupt(e.to_string()))?;
        validate::merge_patch(&mut doc, &patch);
        let spec = workflow_from_json(&doc, &context(&state, &ns, Some(&name)))
            .map_err(ApiError::invalid)?;
        written_response(&state, spec, Some(existing), expected, StatusCode::OK).await
    })
    .await
}

/// `DELETE /v1/namespaces/{ns}/workflows/{name}`: 204; unfinished runs are cancelled.
pub(crate) async fn delete(
    State(state): State<AppState>,
    Path((ns, name)): Path<(String, String)>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let expected = if_match(&headers)?;
    state.store.workflow_delete(&ns, &name, expected).await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

async fn set_paused(
    state: &AppState,
    ns: &str,
    name: &str,
    headers: &HeaderMap,
    paused: bool,
) -> Result<Response, ApiError> {
    let expected = if_match(headers)?;
    retry_races(|| async {
        let existing = load(state, ns, name).await?;
        let spec = WorkflowSpec {
            paused,
            ..existing.spec.clone()
        };
        written_response(state, spec, Some(existing), expected, StatusCode::OK).await
    })
    .await
}

/// `POST .../workflows/{name}/pause`: no new runs; started runs finish.
pub(crate) async fn pause(
    State(state): State<AppState>,
    Path((ns, name)): Path<(String, String)>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    set_paused(&state, &ns, &name, &headers, true).await
}

/// `POST .../workflows/{name}/resume`: continues with the first slot after now.
pub(crate) async fn resume(
    State(state): State<AppState>,
    Path((ns, name)): Path<(String, String)>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    set_paused(&state, &ns, &name, &headers, false).await
}

/// `POST .../workflows/{name}/trigger` with an optional `{"params": {...}}` merged over the
/// workflow's: a manual run, its first tasks queued at once (201 with the run).
pub(crate) async fn trigger(
    State(state): State<AppState>,
    Path((ns, name)): Path<(String, String)>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    check_path(&ns, Some(&name))?;
    let body = optional_json_body(&headers, body).await?;
    let given = trigger_params(&body).map_err(ApiError::invalid)?;
    // A write of the workflow between the read and the run's creation makes the version read
    // stale; the run is then created from the version read again.
    retry_races(|| async {
        let w = load(&state, &ns, &name).await?;
        let now = state.store.now().await?;
        let mut params = w.spec.params.clone();
        params.extend(given.clone());
        let created = state
            .store
            .run_create(&NewRun {
                id: uuid::Uuid::now_v7().to_string(),
                namespace: ns.clone(),
                workflow: name.clone(),
                workflow_uid: w.uid.clone(),
                workflow_version: w.version,
                shard: w.shard,
                trigger: Trigger::Manual,
                scheduled_at: now,
                fire_at: now,
                params,
                recorded_as: None,
            })
            .await;
        let run = match created {
            Ok(run) => run,
            Err(StoreError::StaleVersion { .. } | StoreError::NotFound(_)) => return Ok(None),
            Err(e) => return Err(e.into()),
        };
        state.worker_wake.notify_one();
        Ok(Some(
            (StatusCode::CREATED, Json(run_json(&run))).into_response(),
        ))
    })
    .await
}

/// `GET .../workflows/{name}/runs?state=&limit=&page_token=`, newest first (without tasks).
pub(crate) async fn runs(
    State(state): State<AppState>,
    Path((ns, name)): Path<(String, String)>,
    Query(q): Query<HashMap<String, String>>,
) -> Result<Response, ApiError> {
    let wanted = q
        .get("state")
        .map(|s| s.parse::<RunState>())
        .transpose()
        .map_err(|m| ApiError::bad_request("state", m))?;
    let limit = limit(q.get("limit").map(String::as_str))?;
    let before = page_token(q.get("page_token"))?;
    if before.is_none() && state.store.workflow_get(&ns, &name).await?.is_none() {
        let probe = RunListQuery {
            namespace: ns.clone(),
            workflow: Some(name.clone()),
            limit: 1,
            ..Default::default()
        };
        if state.store.run_list(&probe).await?.is_empty() {
            return Err(ApiError::not_found(format!("workflow {ns}/{name}")));
        }
    }
    let items = state
        .store
        .run_list(&RunListQuery {
            namespace: ns,
            workflow: Some(name),
            state: wanted,
            before,
            limit,
        })
        .await?;
    let next = (items.len() == limit as usize)
        .then(|| {
            items
                .last()
                .map(|r| format!("{}_{}", r.scheduled_at.as_millisecond(), r.id))
        })
        .flatten();
    let items: Vec<Value> = items.iter().map(run_json).collect();
    Ok(Json(json!({"items": items, "next_page_token": next})).into_response())
}

async fn load_run(state: &AppState, ns: &str, name: &str, id: &str) -> Result<RunRecord, ApiError> {
    match state.store.run_get(ns, id).await? {
        Some(run) if run.workflow == name => Ok(run),
        _ => Err(ApiError::not_found(format!(
            "run {id} of workflow {ns}/{name}"
        ))),
    }
}

/// `GET .../workflows/{name}/runs/{run_id}`: one run with its tasks.
pub(crate) async fn run_get(
    State(state): State<AppState>,
    Path((ns, name, id)): Path<(String, String, String)>,
) -> Result<Response, ApiError> {
    let run = load_run(&state, &ns, &name, &id).await?;
    Ok(Json(run_json(&run)).into_response())
}

/// `POST .../runs/{run_id}/cancel`: 409 for a terminal run.
pub(crate) async fn run_cancel(
    State(state): State<AppState>,
    Path((ns, name, id)): Path<(String, String, String)>,
) -> Result<Response, ApiError> {
    load_run(&state, &ns, &name, &id).await?;
    let run = state.store.run_cancel(&ns, &id).await?;
    Ok(Json(run_json(&run)).into_response())
}

/// `POST .../runs/{run_id}/retry` with an optional `{"tasks": ["name", ...]}`: 409 unless the
/// run is terminal; 404 naming a task the run's version lacks.
pub(crate) async fn run_retry(
    State(state): State<AppState>,
    Path((ns, name, id)): Path<(String, String, String)>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    let body = optional_json_body(&headers, body).await?;
    let tasks = retry_tasks(&body)?;
    load_run(&state, &ns, &name, &id).await?;
    let run = state.store.run_retry(&ns, &id, &tasks).await?;
    state.worker_wake.notify_one();
    Ok(Json(run_json(&run)).into_response())
}

/// The `tasks` of a retry body: absent, or an array of task names.
fn retry_tasks(body: &Value) -> Result<Vec<String>, ApiError> {
    let obj = match body {
        Value::Null => return Ok(Vec::new()),
        Value::Object(o) => o,
        _ => {
            return Err(ApiError::invalid(vec![FieldError::new(
                "",
                "the body must be a JSON object",
            )]));
        }
    };
    let mut errors = Vec::new();
    for key in obj.keys().filter(|k| *k != "tasks") {
        errors.push(FieldError::new(
            key.clone(),
            "unknown field; expected tasks",
        ));
    }
    let tasks = match obj.get("tasks") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(items)) => items
            .iter()
            .enumerate()
            .filter_map(|(i, v)| match v.as_str() {
                Some(s) => Some(s.to_owned()),
                None => {
                    errors.push(FieldError::new(
                        format!("tasks[{i}]"),
                        "must be a task name",
                    ));
                    None
                }
            })
            .collect(),
        Some(_) => {
            errors.push(FieldError::new("tasks", "must be an array of task names"));
            Vec::new()
        }
    };
    if errors.is_empty() {
        Ok(tasks)
    } else {
        Err(ApiError::invalid(errors))
    }
}
