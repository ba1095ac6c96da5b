//! Workflow routes (docs/workflows.md): create, replace, merge-patch, read, list,
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
use serde::Serialize;
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
    NewRun, RunListQuery, RunRecord, RunSummary, TaskRecord, WorkflowListQuery, WorkflowRecord,
    WorkflowWrite,
};
use utoipa::ToSchema;

use crate::AppState;
use crate::error::ApiError;
use crate::executions::page_token;
use crate::jobs::{batch, check_path, context, retry_races, with_etag};
use crate::request::{
    Path, Query, if_match, job_page_token, json_body, known_params, limit, list_filters,
    optional_json_body,
};
use crate::resource::{NsCalendars, named_calendars};

/// A workflow as the API shows it at `now`: its spec plus `state`, `version`, `created_at`,
/// `updated_at`, `next_fire_at`, `next_fire_times` (the next five, none while paused or
/// without a schedule) and `last_run`.
pub fn workflow_json(w: &WorkflowRecord, now: Timestamp, calendars: &NsCalendars) -> Value {
    crate::resource::to_value(&workflow_resource(w, now, calendars))
}

/// The typed form of [`workflow_json`]; `calendars` are the namespace's (a schedule's
/// `exclude_calendars` remove their days from `next_fire_times` and `next_fire_at`).
pub fn workflow_resource(
    w: &WorkflowRecord,
    now: Timestamp,
    calendars: &NsCalendars,
) -> WorkflowResource {
    let upcoming: Vec<Timestamp> = match (&w.spec.schedule, w.next_fire_at) {
        (Some(s), Some(next)) if !w.spec.paused => match Schedule::compile(s) {
            Ok(schedule) => {
                let schedule = schedule.with_calendars(named_calendars(s, calendars));
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
    let mut spec = w.spec.clone();
    let mut warnings = Vec::new();
    for (i, task) in spec.tasks.iter_mut().enumerate() {
        warnings.extend(crate::resource::credential_warnings(
            &task.target,
            &format!("tasks.{i}."),
        ));
        task.target = sundial_core::secrets::mask_target(&task.target);
    }
    WorkflowResource {
        warnings,
        spec,
        state: w.state(),
        version: w.version,
        created_at: w.created_at,
        updated_at: w.updated_at,
        next_fire_at: match &w.spec.schedule {
            Some(s) if !s.exclude_calendars.is_empty() => upcoming.first().copied(),
            _ => w.next_fire_at,
        },
        next_fire_times: upcoming,
        dst_preview: w
            .spec
            .schedule
            .as_ref()
            .map(|s| crate::resource::dst_preview(s, now, calendars))
            .unwrap_or_default(),
        last_run: w.last_run.clone(),
    }
}

/// A run as the API shows it (docs/workflows.md, "Runs").
pub fn run_json(r: &RunRecord) -> Value {
    crate::resource::to_value(&run_resource(r))
}

/// The typed form of [`run_json`].
pub fn run_resource(r: &RunRecord) -> RunResource {
    RunResource {
        id: r.id.clone(),
        namespace: r.namespace.clone(),
        workflow: r.workflow.clone(),
        workflow_version: r.workflow_version,
        trigger: r.trigger,
        scheduled_at: r.scheduled_at,
        fire_at: r.fire_at,
        state: r.state,
        params: r.params.clone(),
        created_at: r.created_at,
        started_at: r.started_at,
        finished_at: r.finished_at,
        tasks: r.tasks.clone(),
    }
}

/// A workflow as the API shows it (docs/workflows.md): the spec's fields and the read-only ones.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct WorkflowResource {
    /// The definition, as written (with its defaults filled in).
    #[serde(flatten)]
    pub spec: WorkflowSpec,
    /// `active`, `paused` or `completed`.
    pub state: &'static str,
    /// Incremented by every change; `If-Match` takes it; a run keeps the version it was
    /// created with.
    pub version: i64,
    /// When the workflow was created (UTC).
    pub created_at: Timestamp,
    /// When it was last changed (UTC).
    pub updated_at: Timestamp,
    /// When its next run is due (UTC).
    pub next_fire_at: Option<Timestamp>,
    /// The next five fire times (UTC); none while paused or without a schedule.
    pub next_fire_times: Vec<Timestamp>,
    /// The next two DST changes of its schedule's zone that touch its slots (docs/time.md, "DST policy"); empty
    /// when none does or it has no cron schedule.
    pub dst_preview: Vec<crate::resource::DstTransitionResource>,
    /// Its latest run.
    pub last_run: Option<RunSummary>,
    /// The credentials its tasks' targets hold in plain text (docs/security.md, "Plain-text
    /// credentials"), each `{field, message}`: they show as `***` above. Absent when none.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<sundial_core::validate::FieldError>,
}

/// A workflow run with its tasks (docs/workflows.md, "Runs").
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct RunResource {
    /// Run id (UUID; derived from the workflow and the slot for a scheduled run, UUIDv7 for
    /// a manual one).
    pub id: String,
    /// Namespace.
    pub namespace: String,
    /// The workflow's name.
    pub workflow: String,
    /// The workflow version the run keeps.
    pub workflow_version: i64,
    /// What created it.
    pub trigger: Trigger,
    /// The slot (UTC).
    pub scheduled_at: Timestamp,
    /// The slot plus jitter (UTC).
    pub fire_at: Timestamp,
    /// The run's state.
    pub state: RunState,
    /// The parameters its templates read.
    pub params: serde_json::Map<String, Value>,
    /// When the run was created (UTC).
    pub created_at: Timestamp,
    /// When its first task started (UTC).
    pub started_at: Option<Timestamp>,
    /// When it ended (UTC).
    pub finished_at: Option<Timestamp>,
    /// Its tasks, in the order the workflow lists them.
    pub tasks: Vec<TaskRecord>,
}

/// The stored form of `spec` written over `existing` at `now` (module docs).
fn next_record(
    mut spec: WorkflowSpec,
    existing: Option<&WorkflowRecord>,
    now: Timestamp,
) -> WorkflowRecord {
    // A credential written back as shown (`***`) keeps its stored value, task by task name
    // (docs/security.md, "Plain-text credentials").
    if let Some(old) = existing {
        for task in &mut spec.tasks {
            if let Some(before) = old.spec.tasks.iter().find(|t| t.name == task.name) {
                task.target = sundial_core::secrets::unmask_target(&task.target, &before.target);
            }
        }
    }
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
        workflow_json(
            &written,
            now,
            &crate::jobs::ns_calendars(state, &written.spec.namespace).await?,
        ),
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
    let masked = masked_task_errors(&record.spec, "");
    if !masked.is_empty() {
        return Err(ApiError::invalid(masked));
    }
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
#[utoipa::path(
    put,
    path = "/v1/namespaces/{ns}/workflows/{name}",
    tag = "workflows",
    summary = "Create (201) or replace (200) a workflow",
    params(("ns" = String, Path, description = "Namespace"), ("name" = String, Path, description = "Workflow name"), ("If-Match" = Option<String>, Header, description = "The version the change applies to; 412 when it is not the current one")),
    request_body = sundial_core::workflow::WorkflowSpec,
    responses((status = 200, description = "Replaced", body = crate::workflows::WorkflowResource), (status = 201, description = "Created", body = crate::workflows::WorkflowResource), crate::openapi::Problems)
)]
pub(crate) async fn put(
    State(state): State<AppState>,
    Path((ns, name)): Path<(String, String)>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    check_path(&ns, Some(&name))?;
    let expected = if_match(&headers)?;
    let body = json_body(&headers, body).await?;
    let spec = match workflow_from_json(&body, &context(&state, &ns, Some(&name))) {
        Ok(spec) => spec,
        Err(e) => {
            let refused = ApiError::invalid(e);
            return Err(
                crate::jobs::and_unknown_calendars(&state, &ns, &body, None, refused).await,
            );
        }
    };
    crate::jobs::refuse_unknown_calendars(&state, &ns, &[spec.schedule.as_ref()], "").await?;
    crate::secrets::refuse_unknown_secrets(&state, &ns, task_targets(&spec, "")).await?;
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
#[utoipa::path(
    post,
    path = "/v1/namespaces/{ns}/workflows",
    tag = "workflows",
    summary = "Create a workflow named in the body; 409 if it exists",
    params(("ns" = String, Path, description = "Namespace")),
    request_body = sundial_core::workflow::WorkflowSpec,
    responses((status = 201, description = "Created", body = crate::workflows::WorkflowResource), crate::openapi::Problems)
)]
pub(crate) async fn create(
    State(state): State<AppState>,
    Path(ns): Path<String>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    check_path(&ns, None)?;
    let body = json_body(&headers, body).await?;
    let spec = match workflow_from_json(&body, &context(&state, &ns, None)) {
        Ok(spec) => spec,
        Err(e) => {
            let refused = ApiError::invalid(e);
            return Err(
                crate::jobs::and_unknown_calendars(&state, &ns, &body, None, refused).await,
            );
        }
    };
    crate::jobs::refuse_unknown_calendars(&state, &ns, &[spec.schedule.as_ref()], "").await?;
    crate::secrets::refuse_unknown_secrets(&state, &ns, task_targets(&spec, "")).await?;
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
        workflow_json(
            &written,
            now,
            &crate::jobs::ns_calendars(&state, &ns).await?,
        ),
    ))
}

/// Most workflows one bulk request may carry.
pub const MAX_BATCH: usize = 100;

/// `POST /v1/namespaces/{ns}/workflows:apply` with `{"workflows": [workflow, ...]}` (at most
/// [`MAX_BATCH`]): creates or replaces every workflow, all or none — every one is validated
/// first (errors name `workflows.<i>.<field>`), then all are written in one transaction.
/// Answers `{"items": [...], "created": n, "updated": m, "unchanged": k}`.
#[utoipa::path(
    post,
    path = "/v1/namespaces/{ns}/workflows:apply",
    tag = "workflows",
    summary = "Create or replace up to 100 workflows, all or none",
    params(("ns" = String, Path, description = "Namespace")),
    request_body = crate::openapi::WorkflowsApply,
    responses((status = 200, description = "Written", body = crate::resource::Applied<crate::workflows::WorkflowResource>), crate::openapi::Problems)
)]
pub(crate) async fn apply_many(
    State(state): State<AppState>,
    Path(ns): Path<String>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    check_path(&ns, None)?;
    let body = json_body(&headers, body).await?;
    let specs = match batch(&body, "workflows", MAX_BATCH, |item| {
        workflow_from_json(item, &context(&state, &ns, None)).map(|spec| (spec.name.clone(), spec))
    }) {
        Ok(specs) => specs,
        Err(e) => {
            let body = &body;
            return Err(crate::jobs::and_unknown_calendars(
                &state,
                &ns,
                body,
                Some("workflows"),
                e,
            )
            .await);
        }
    };
    let schedules: Vec<_> = specs.iter().map(|s| s.schedule.as_ref()).collect();
    crate::jobs::refuse_unknown_calendars(&state, &ns, &schedules, "workflows.").await?;
    crate::secrets::refuse_unknown_secrets(
        &state,
        &ns,
        specs
            .iter()
            .enumerate()
            .flat_map(|(w, spec)| task_targets(spec, &format!("workflows.{w}."))),
    )
    .await?;
    let now = state.store.now().await?;
    let (mut writes, mut unchanged, mut created) = (Vec::new(), Vec::new(), 0);
    let mut masked = Vec::new();
    for (w, spec) in specs.into_iter().enumerate() {
        let existing = state.store.workflow_get(&ns, &spec.name).await?;
        created += usize::from(existing.is_none());
        let record = next_record(spec, existing.as_ref(), now);
        masked.extend(masked_task_errors(&record.spec, &format!("workflows.{w}.")));
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
    if !masked.is_empty() {
        return Err(ApiError::invalid(masked));
    }
    let written = if writes.is_empty() {
        Vec::new()
    } else {
        state.store.workflow_write_batch(&writes).await?
    };
    state.scheduler_wake.notify_one();
    let updated = written.len() - created;
    let cals = crate::jobs::ns_calendars(&state, &ns).await?;
    let items: Vec<Value> = written
        .iter()
        .chain(&unchanged)
        .map(|w| workflow_json(w, now, &cals))
        .collect();
    Ok(Json(json!({"items": items, "created": created, "updated": updated, "unchanged": unchanged.len()})).into_response())
}

/// `GET /v1/namespaces/{ns}/workflows/{name}`.
#[utoipa::path(
    get,
    path = "/v1/namespaces/{ns}/workflows/{name}",
    tag = "workflows",
    summary = "One workflow, with its next five fire times",
    params(("ns" = String, Path, description = "Namespace"), ("name" = String, Path, description = "Workflow name")),
    responses((status = 200, description = "The workflow", body = crate::workflows::WorkflowResource), crate::openapi::Problems)
)]
pub(crate) async fn get_one(
    State(state): State<AppState>,
    Path((ns, name)): Path<(String, String)>,
) -> Result<Response, ApiError> {
    let w = load(&state, &ns, &name).await?;
    let now = state.store.now().await?;
    Ok(with_etag(
        StatusCode::OK,
        w.version,
        workflow_json(&w, now, &crate::jobs::ns_calendars(&state, &ns).await?),
    ))
}

/// `GET /v1/namespaces/{ns}/workflows?paused=&label=k=v&limit=&page_token=`.
#[utoipa::path(
    get,
    path = "/v1/namespaces/{ns}/workflows",
    tag = "workflows",
    summary = "The namespace's workflows, by name",
    params(("ns" = String, Path, description = "Namespace"), ("limit" = Option<u32>, Query, description = "Page size, 1 to 1000 (default 100)"), ("page_token" = Option<String>, Query, description = "The next_page_token of the previous page"), ("paused" = Option<bool>, Query, description = "Only paused (true) or unpaused (false)"), ("label" = Option<String>, Query, description = "Only those with this label, as key=value")),
    responses((status = 200, description = "A page of workflows", body = crate::resource::Page<crate::workflows::WorkflowResource>), crate::openapi::Problems)
)]
pub(crate) async fn list(
    State(state): State<AppState>,
    Path(ns): Path<String>,
    Query(q): Query<HashMap<String, String>>,
) -> Result<Response, ApiError> {
    check_path(&ns, None)?;
    known_params(&q, &["paused", "label", "limit", "page_token"])?;
    let crate::request::ListFilters { paused, label } = list_filters(&q)?;
    let limit = limit(q.get("limit").map(String::as_str))?;
    let after_name = job_page_token(q.get("page_token").map(String::as_str))?;
    let found = state
        .store
        .workflow_list(&WorkflowListQuery {
            namespace: ns.clone(),
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
    let cals = crate::jobs::ns_calendars(&state, &ns).await?;
    let items: Vec<Value> = found.iter().map(|w| workflow_json(w, now, &cals)).collect();
    Ok(Json(json!({"items": items, "next_page_token": next})).into_response())
}

/// `PATCH /v1/namespaces/{ns}/workflows/{name}`: JSON merge patch (RFC 7396).
#[utoipa::path(
    patch,
    path = "/v1/namespaces/{ns}/workflows/{name}",
    tag = "workflows",
    summary = "Change a workflow by a JSON merge patch (RFC 7396)",
    params(("ns" = String, Path, description = "Namespace"), ("name" = String, Path, description = "Workflow name"), ("If-Match" = Option<String>, Header, description = "The version the change applies to; 412 when it is not the current one")),
    request_body = crate::openapi::MergePatch,
    responses((status = 200, description = "Changed", body = crate::workflows::WorkflowResource), crate::openapi::Problems)
)]
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
        let spec = match workflow_from_json(&doc, &context(&state, &ns, Some(&name))) {
            Ok(spec) => spec,
            Err(e) => {
                let refused = ApiError::invalid(e);
                return Err(
                    crate::jobs::and_unknown_calendars(&state, &ns, &doc, None, refused).await,
                );
            }
        };
        crate::jobs::refuse_unknown_calendars(&state, &ns, &[spec.schedule.as_ref()], "").await?;
        crate::secrets::refuse_unknown_secrets(&state, &ns, task_targets(&spec, "")).await?;
        written_response(&state, spec, Some(existing), expected, StatusCode::OK).await
    })
    .await
}

/// `DELETE /v1/namespaces/{ns}/workflows/{name}`: 204; unfinished runs are cancelled.
#[utoipa::path(
    delete,
    path = "/v1/namespaces/{ns}/workflows/{name}",
    tag = "workflows",
    summary = "Delete a workflow; its runs not started are cancelled",
    params(("ns" = String, Path, description = "Namespace"), ("name" = String, Path, description = "Workflow name"), ("If-Match" = Option<String>, Header, description = "The version the change applies to; 412 when it is not the current one")),
    responses((status = 204, description = "Deleted"), crate::openapi::Problems)
)]
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
#[utoipa::path(
    post,
    path = "/v1/namespaces/{ns}/workflows/{name}/pause",
    tag = "workflows",
    summary = "Pause a workflow: no new runs",
    params(("ns" = String, Path, description = "Namespace"), ("name" = String, Path, description = "Workflow name")),
    responses((status = 200, description = "Paused", body = crate::workflows::WorkflowResource), crate::openapi::Problems)
)]
pub(crate) async fn pause(
    State(state): State<AppState>,
    Path((ns, name)): Path<(String, String)>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    set_paused(&state, &ns, &name, &headers, true).await
}

/// `POST .../workflows/{name}/resume`: continues with the first slot after now.
#[utoipa::path(
    post,
    path = "/v1/namespaces/{ns}/workflows/{name}/resume",
    tag = "workflows",
    summary = "Resume a workflow from the first slot after now",
    params(("ns" = String, Path, description = "Namespace"), ("name" = String, Path, description = "Workflow name")),
    responses((status = 200, description = "Resumed", body = crate::workflows::WorkflowResource), crate::openapi::Problems)
)]
pub(crate) async fn resume(
    State(state): State<AppState>,
    Path((ns, name)): Path<(String, String)>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    set_paused(&state, &ns, &name, &headers, false).await
}

/// `POST .../workflows/{name}/trigger` with an optional `{"params": {...}}` merged over the
/// workflow's: a manual run, its first tasks queued at once (201 with the run).
#[utoipa::path(
    post,
    path = "/v1/namespaces/{ns}/workflows/{name}/trigger",
    tag = "workflows",
    summary = "Create a run now (trigger: manual)",
    params(("ns" = String, Path, description = "Namespace"), ("name" = String, Path, description = "Workflow name")),
    request_body(content = Option<crate::openapi::TriggerBody>, description = "Optional: params merged over the workflow's"),
    responses((status = 201, description = "The run", body = crate::workflows::RunResource), crate::openapi::Problems)
)]
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
#[utoipa::path(
    get,
    path = "/v1/namespaces/{ns}/workflows/{name}/runs",
    tag = "workflows",
    summary = "A workflow's runs, newest first",
    params(("ns" = String, Path, description = "Namespace"), ("name" = String, Path, description = "Workflow name"), ("state" = Option<sundial_core::workflow::RunState>, Query, description = "Only runs in this state"), ("limit" = Option<u32>, Query, description = "Page size, 1 to 1000 (default 100)"), ("page_token" = Option<String>, Query, description = "The next_page_token of the previous page")),
    responses((status = 200, description = "A page of runs", body = crate::resource::Page<crate::workflows::RunResource>), crate::openapi::Problems)
)]
pub(crate) async fn runs(
    State(state): State<AppState>,
    Path((ns, name)): Path<(String, String)>,
    Query(q): Query<HashMap<String, String>>,
) -> Result<Response, ApiError> {
    known_params(&q, &["state", "limit", "page_token"])?;
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
#[utoipa::path(
    get,
    path = "/v1/namespaces/{ns}/workflows/{name}/runs/{run_id}",
    tag = "workflows",
    summary = "One run with its tasks",
    params(("ns" = String, Path, description = "Namespace"), ("name" = String, Path, description = "Workflow name"), ("run_id" = String, Path, description = "Run id")),
    responses((status = 200, description = "The run", body = crate::workflows::RunResource), crate::openapi::Problems)
)]
pub(crate) async fn run_get(
    State(state): State<AppState>,
    Path((ns, name, id)): Path<(String, String, String)>,
) -> Result<Response, ApiError> {
    let run = load_run(&state, &ns, &name, &id).await?;
    Ok(Json(run_json(&run)).into_response())
}

/// `POST .../runs/{run_id}/cancel`: 409 for a terminal run.
#[utoipa::path(
    post,
    path = "/v1/namespaces/{ns}/workflows/{name}/runs/{run_id}/cancel",
    tag = "workflows",
    summary = "Cancel a run: its unfinished tasks are cancelled, running attempts stopped",
    params(("ns" = String, Path, description = "Namespace"), ("name" = String, Path, description = "Workflow name"), ("run_id" = String, Path, description = "Run id")),
    responses((status = 200, description = "Cancelled", body = crate::workflows::RunResource), crate::openapi::Problems)
)]
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
#[utoipa::path(
    post,
    path = "/v1/namespaces/{ns}/workflows/{name}/runs/{run_id}/retry",
    tag = "workflows",
    summary = "Run a finished run's failed tasks (or those named) and their downstream again",
    params(("ns" = String, Path, description = "Namespace"), ("name" = String, Path, description = "Workflow name"), ("run_id" = String, Path, description = "Run id")),
    request_body(content = Option<crate::openapi::RunRetryBody>, description = "Optional: the tasks to run again"),
    responses((status = 200, description = "Running again", body = crate::workflows::RunResource), crate::openapi::Problems)
)]
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

/// The tasks' credential fields that read `***` with nothing stored to keep
/// ([`sundial_core::secrets::masked_errors`]), each field after `{prefix}tasks.{i}.`.
fn masked_task_errors(
    spec: &sundial_core::workflow::spec::WorkflowSpec,
    prefix: &str,
) -> Vec<FieldError> {
    spec.tasks
        .iter()
        .enumerate()
        .flat_map(|(i, t)| {
            sundial_core::secrets::masked_errors(&t.target, &format!("{prefix}tasks.{i}."))
        })
        .collect()
}

/// Each task's target with its field prefix (`{prefix}tasks.{i}.`), for
/// [`crate::secrets::refuse_unknown_secrets`].
fn task_targets<'a>(
    spec: &'a sundial_core::workflow::spec::WorkflowSpec,
    prefix: &str,
) -> Vec<(String, &'a sundial_core::job::TargetSpec)> {
    spec.tasks
        .iter()
        .enumerate()
        .map(|(i, t)| (format!("{prefix}tasks.{i}."), &t.target))
        .collect()
}
