//! Backfill routes (docs/time.md, "Backfill"): start one over a job's or a
//! workflow's past slots (or count it with `dry_run`), list, read progress, cancel.
//!
//! Invariants: a backfill is written only after the whole body was accepted, its range is
//! wholly in the past by the store's clock and holds at most
//! [`sundial_core::backfill::MAX_SLOTS`] slots of the schedule; a dry run writes nothing and
//! counts exactly the slots a backfill started then would create.

use axum::Json;
use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use jiff::Timestamp;
use serde::Serialize;
use serde_json::{Value, json};
use sundial_core::backfill::{DEFAULT_PER_SECOND, MAX_PER_SECOND, MAX_SLOTS, slots};
use sundial_core::ids::{slot_execution_id, slot_run_id};
use sundial_core::job::ScheduleSpec;
use sundial_core::schedule::Schedule;
use sundial_core::validate::FieldError;
use sundial_store::{BackfillOf, BackfillRecord, BackfillState, NewBackfill};
use utoipa::ToSchema;

use crate::AppState;
use crate::error::ApiError;
use crate::jobs::check_path;
use crate::request::{Path, json_body};

/// How many derived ids one existence read asks about (dry runs).
const TAKEN_CHUNK: usize = 5000;

/// A backfill as the API shows it. Instants are RFC 3339, UTC.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct BackfillResource {
    /// Its id (UUIDv7).
    pub id: String,
    /// Namespace.
    pub namespace: String,
    /// The job it fills (for a job's backfill).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub job: Option<String>,
    /// The workflow it fills (for a workflow's backfill).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub workflow: Option<String>,
    /// First instant of the range (inclusive).
    pub from: Timestamp,
    /// End of the range (exclusive).
    pub to: Timestamp,
    /// Slots created per second at most.
    pub max_per_second: u32,
    /// `running`, `done` or `cancelled`.
    pub state: BackfillState,
    /// The schedule's slots in the range when it started.
    pub slots: u64,
    /// Executions (or runs) it created, `trigger: backfill`.
    pub created: u64,
    /// Slots it found with an execution (or run) already and left alone.
    pub existing: u64,
    /// Slots not reached yet.
    pub remaining: u64,
    /// Every slot before this instant is dealt with.
    pub cursor: Timestamp,
    /// Why it was cancelled without a request (its job or workflow was deleted).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// When it was started.
    pub created_at: Timestamp,
    /// When it last moved.
    pub updated_at: Timestamp,
    /// When it ended.
    pub finished_at: Option<Timestamp>,
}

/// What `dry_run: true` answers (200), writing nothing.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct BackfillDryRun {
    /// Always true.
    pub dry_run: bool,
    /// The slots a backfill started now would create.
    pub count: u64,
    /// The first of them.
    pub first: Option<Timestamp>,
    /// The last of them.
    pub last: Option<Timestamp>,
    /// The schedule's slots in the range.
    pub slots: u64,
    /// Of those, the ones that have an execution (or run) already.
    pub existing: u64,
    /// When the schedule has no slot in the range (`slots` is 0), why: the `start_at` or
    /// `end_at` that keeps them out (an `every` job's `start_at` is its creation time unless
    /// given), an `at` job's instant outside the range, or calendars. Absent otherwise.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// The body of `POST .../backfill`.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct BackfillRequest {
    /// First instant of the range (inclusive), RFC 3339.
    pub from: String,
    /// End of the range (exclusive), RFC 3339, not later than now.
    pub to: String,
    /// Slots created per second at most, 1-10000; default 10.
    pub max_per_second: Option<u32>,
    /// Count and name the first and last slots only, writing nothing.
    pub dry_run: Option<bool>,
}

fn resource(b: BackfillRecord) -> BackfillResource {
    let remaining = b.remaining();
    let (job, workflow) = match b.of {
        BackfillOf::Job => (Some(b.name), None),
        BackfillOf::Workflow => (None, Some(b.name)),
    };
    BackfillResource {
        id: b.id,
        namespace: b.namespace,
        job,
        workflow,
        from: b.from,
        to: b.to,
        max_per_second: b.max_per_second,
        state: b.state,
        slots: b.slots,
        created: b.created,
        existing: b.existing,
        remaining,
        cursor: b.cursor,
        reason: b.reason,
        created_at: b.created_at,
        updated_at: b.updated_at,
        finished_at: b.finished_at,
    }
}

/// The request, validated: every bad field named at once.
struct Request {
    from: Timestamp,
    to: Timestamp,
    max_per_second: u32,
    dry_run: bool,
}

fn parse(body: &Value, now: Timestamp) -> Result<Request, ApiError> {
    let Some(obj) = body.as_object() else {
        return Err(ApiError::invalid(vec![FieldError::new(
            "",
            "the body must be a JSON object",
        )]));
    };
    let mut errors = Vec::new();
    for key in obj.keys() {
        if !["from", "to", "max_per_second", "dry_run"].contains(&key.as_str()) {
            errors.push(FieldError::new(
                key.clone(),
                "unknown field; expected from, to, max_per_second, dry_run",
            ));
        }
    }
    let mut instant = |field: &str| match obj.get(field) {
        None | Some(Value::Null) => {
            errors.push(FieldError::new(
                field,
                "is required: an RFC 3339 instant such as 2026-11-01T00:00:00Z",
            ));
            None
        }
        Some(v) => v
            .as_str()
            .and_then(|s| s.parse::<Timestamp>().ok())
            .or_else(|| {
                errors.push(FieldError::new(
                    field,
                    format!("{v} is not an RFC 3339 instant such as 2026-11-01T00:00:00Z"),
                ));
                None
            }),
    };
    let (from, to) = (instant("from"), instant("to"));
    if let (Some(from), Some(to)) = (from, to) {
        if from >= to {
            errors.push(FieldError::new(
                "to",
                format!("{to} is not later than from ({from}); the range is [from, to)"),
            ));
        } else if to > now {
            errors.push(FieldError::new(
                "to",
                format!(
                    "{to} is in the future (now is {now}); a backfill fills past slots, the \
                     scheduler fires the rest"
                ),
            ));
        }
    }
    let max_per_second = match obj.get("max_per_second") {
        None | Some(Value::Null) => DEFAULT_PER_SECOND,
        // A whole number, written as 10 or 10.0.
        Some(v) => match v
            .as_f64()
            .filter(|f| f.fract() == 0.0 && *f >= 1.0 && *f <= f64::from(MAX_PER_SECOND))
        {
            Some(n) => n as u32,
            _ => {
                errors.push(FieldError::new(
                    "max_per_second",
                    format!("{v} is not a whole number in 1-{MAX_PER_SECOND}"),
                ));
                0
            }
        },
    };
    let dry_run = match obj.get("dry_run") {
        None | Some(Value::Null) => false,
        Some(Value::Bool(b)) => *b,
        Some(v) => {
            errors.push(FieldError::new(
                "dry_run",
                format!("{v} is not true or false"),
            ));
            false
        }
    };
    match (from, to, errors.is_empty()) {
        (Some(from), Some(to), true) => Ok(Request {
            from,
            to,
            max_per_second,
            dry_run,
        }),
        _ => Err(ApiError::invalid(errors)),
    }
}

/// What a backfill fills, as read now.
struct Target {
    uid: String,
    shard: u16,
    schedule: ScheduleSpec,
}

async fn target(
    state: &AppState,
    of: BackfillOf,
    ns: &str,
    name: &str,
) -> Result<Target, ApiError> {
    let (uid, shard, schedule, paused) = match of {
        BackfillOf::Job => {
            let job = state
                .store
                .job_get(ns, name)
                .await?
                .ok_or_else(|| ApiError::not_found(format!("job {ns}/{name}")))?;
            (job.uid, job.shard, Some(job.spec.schedule), job.spec.paused)
        }
        BackfillOf::Workflow => {
            let wf = state
                .store
                .workflow_get(ns, name)
                .await?
                .ok_or_else(|| ApiError::not_found(format!("workflow {ns}/{name}")))?;
            (wf.uid, wf.shard, wf.spec.schedule, wf.spec.paused)
        }
    };
    if paused {
        return Err(ApiError::new(
            StatusCode::CONFLICT,
            "conflict",
            format!("{} {ns}/{name} is paused; resume it first", of.as_str()),
        ));
    }
    let Some(schedule) = schedule else {
        return Err(ApiError::new(
            StatusCode::CONFLICT,
            "conflict",
            format!("workflow {ns}/{name} has no schedule, so no slots to backfill"),
        ));
    };
    Ok(Target {
        uid,
        shard,
        schedule,
    })
}

/// The schedule with the calendars it names, compiled ([`crate::jobs::ns_calendars`]).
async fn compiled(state: &AppState, ns: &str, spec: &ScheduleSpec) -> Result<Schedule, ApiError> {
    let schedule = Schedule::compile(spec).map_err(|e| {
        ApiError::new(
            StatusCode::CONFLICT,
            "conflict",
            format!("the stored schedule does not compile: {e}"),
        )
    })?;
    if spec.exclude_calendars.is_empty() {
        return Ok(schedule);
    }
    let calendars = crate::jobs::ns_calendars(state, ns).await?;
    Ok(schedule.with_calendars(crate::resource::named_calendars(spec, &calendars)))
}

async fn start(
    state: &AppState,
    of: BackfillOf,
    ns: &str,
    name: &str,
    headers: &HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    check_path(ns, Some(name))?;
    let body = json_body(headers, body).await?;
    let now = state.store.now().await?;
    let request = parse(&body, now)?;
    let target = target(state, of, ns, name).await?;
    let schedule = compiled(state, ns, &target.schedule).await?;
    let all = slots(&schedule, request.from, request.to, MAX_SLOTS + 1);
    if all.len() > MAX_SLOTS {
        return Err(ApiError::invalid(vec![FieldError::new(
            "to",
            format!(
                "the range holds more than {MAX_SLOTS} slots of the schedule (the most one \
                 backfill spans); split it into several backfills"
            ),
        )]));
    }
    if request.dry_run {
        let mut taken = std::collections::HashSet::new();
        for part in all.chunks(TAKEN_CHUNK) {
            let ids: Vec<String> = part
                .iter()
                .map(|slot| match of {
                    BackfillOf::Job => slot_execution_id(&target.uid, *slot),
                    BackfillOf::Workflow => slot_run_id(&target.uid, *slot),
                })
                .collect();
            let found = state.store.backfill_taken(of, &ids).await?;
            taken.extend(
                part.iter()
                    .zip(&ids)
                    .filter(|(_, id)| found.contains(*id))
                    .map(|(slot, _)| *slot),
            );
        }
        let free: Vec<Timestamp> = all.iter().copied().filter(|s| !taken.contains(s)).collect();
        let answer = BackfillDryRun {
            dry_run: true,
            count: free.len() as u64,
            first: free.first().copied(),
            last: free.last().copied(),
            slots: all.len() as u64,
            existing: taken.len() as u64,
            reason: all
                .is_empty()
                .then(|| schedule.why_no_slot_in(request.from, request.to)),
        };
        return Ok(Json(answer).into_response());
    }
    let created = state
        .store
        .backfill_create(&NewBackfill {
            id: uuid::Uuid::now_v7().to_string(),
            namespace: ns.to_owned(),
            of,
            name: name.to_owned(),
            uid: target.uid,
            shard: target.shard,
            from: request.from,
            to: request.to,
            max_per_second: request.max_per_second,
            slots: all.len() as u64,
        })
        .await?;
    let location = format!(
        "/v1/namespaces/{ns}/{}s/{name}/backfills/{}",
        of.as_str(),
        created.id
    );
    Ok((
        StatusCode::ACCEPTED,
        [(header::LOCATION, location)],
        Json(resource(created)),
    )
        .into_response())
}

async fn get(
    state: &AppState,
    of: BackfillOf,
    ns: &str,
    name: &str,
    id: &str,
) -> Result<Response, ApiError> {
    check_path(ns, Some(name))?;
    let found = state
        .store
        .backfill_get(ns, id)
        .await?
        .filter(|b| b.of == of && b.name == name)
        .ok_or_else(|| {
            ApiError::not_found(format!("backfill {id} of {} {ns}/{name}", of.as_str()))
        })?;
    Ok(Json(resource(found)).into_response())
}

async fn list(
    state: &AppState,
    of: BackfillOf,
    ns: &str,
    name: &str,
) -> Result<Response, ApiError> {
    check_path(ns, Some(name))?;
    let items: Vec<BackfillResource> = state
        .store
        .backfill_list(ns, of, name)
        .await?
        .into_iter()
        .map(resource)
        .collect();
    // No backfills and no such job (or workflow): 404, as for its executions. The backfills of
    // a deleted one stay listed while they exist.
    if items.is_empty() {
        let exists = match of {
            BackfillOf::Job => state.store.job_get(ns, name).await?.is_some(),
            BackfillOf::Workflow => state.store.workflow_get(ns, name).await?.is_some(),
        };
        if !exists {
            return Err(ApiError::not_found(format!("{} {ns}/{name}", of.as_str())));
        }
    }
    Ok(Json(json!({"items": items, "next_page_token": null})).into_response())
}

async fn cancel(
    state: &AppState,
    of: BackfillOf,
    ns: &str,
    name: &str,
    id: &str,
) -> Result<Response, ApiError> {
    check_path(ns, Some(name))?;
    let found = state.store.backfill_get(ns, id).await?;
    if !found.is_some_and(|b| b.of == of && b.name == name) {
        return Err(ApiError::not_found(format!(
            "backfill {id} of {} {ns}/{name}",
            of.as_str()
        )));
    }
    let cancelled = state.store.backfill_cancel(ns, id, None).await?;
    Ok(Json(resource(cancelled)).into_response())
}

/// `POST /v1/namespaces/{ns}/jobs/{name}/backfill` with `{"from", "to", "max_per_second"?,
/// "dry_run"?}`: 202 with the backfill (and `Location`), or 200 with the dry run's count.
#[utoipa::path(
    post,
    path = "/v1/namespaces/{ns}/jobs/{name}/backfill",
    tag = "jobs",
    summary = "Backfill a job's past slots that have no execution (trigger: backfill)",
    params(("ns" = String, Path, description = "Namespace"), ("name" = String, Path, description = "Job name")),
    request_body = BackfillRequest,
    responses((status = 202, description = "Started", body = BackfillResource), (status = 200, description = "The dry run", body = BackfillDryRun), crate::openapi::Problems)
)]
pub(crate) async fn job_start(
    State(state): State<AppState>,
    Path((ns, name)): Path<(String, String)>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    start(&state, BackfillOf::Job, &ns, &name, &headers, body).await
}

/// `GET /v1/namespaces/{ns}/jobs/{name}/backfills`: the job's backfills, newest first (100).
#[utoipa::path(
    get,
    path = "/v1/namespaces/{ns}/jobs/{name}/backfills",
    tag = "jobs",
    summary = "A job's backfills, newest first",
    params(("ns" = String, Path, description = "Namespace"), ("name" = String, Path, description = "Job name")),
    responses((status = 200, description = "{\"items\": [...]}", body = crate::resource::Page<BackfillResource>), crate::openapi::Problems)
)]
pub(crate) async fn job_list(
    State(state): State<AppState>,
    Path((ns, name)): Path<(String, String)>,
) -> Result<Response, ApiError> {
    list(&state, BackfillOf::Job, &ns, &name).await
}

/// `GET /v1/namespaces/{ns}/jobs/{name}/backfills/{id}`: progress.
#[utoipa::path(
    get,
    path = "/v1/namespaces/{ns}/jobs/{name}/backfills/{id}",
    tag = "jobs",
    summary = "One backfill of a job: its progress",
    params(("ns" = String, Path, description = "Namespace"), ("name" = String, Path, description = "Job name"), ("id" = String, Path, description = "Backfill id")),
    responses((status = 200, description = "The backfill", body = BackfillResource), crate::openapi::Problems)
)]
pub(crate) async fn job_get(
    State(state): State<AppState>,
    Path((ns, name, id)): Path<(String, String, String)>,
) -> Result<Response, ApiError> {
    get(&state, BackfillOf::Job, &ns, &name, &id).await
}

/// `POST /v1/namespaces/{ns}/jobs/{name}/backfills/{id}/cancel`: stops it (409 once ended).
#[utoipa::path(
    post,
    path = "/v1/namespaces/{ns}/jobs/{name}/backfills/{id}/cancel",
    tag = "jobs",
    summary = "Cancel a job's backfill; what it created stays",
    params(("ns" = String, Path, description = "Namespace"), ("name" = String, Path, description = "Job name"), ("id" = String, Path, description = "Backfill id")),
    responses((status = 200, description = "Cancelled", body = BackfillResource), crate::openapi::Problems)
)]
pub(crate) async fn job_cancel(
    State(state): State<AppState>,
    Path((ns, name, id)): Path<(String, String, String)>,
) -> Result<Response, ApiError> {
    cancel(&state, BackfillOf::Job, &ns, &name, &id).await
}

/// `POST /v1/namespaces/{ns}/workflows/{name}/backfill`: as for a job, one run per slot.
#[utoipa::path(
    post,
    path = "/v1/namespaces/{ns}/workflows/{name}/backfill",
    tag = "workflows",
    summary = "Backfill a workflow's past slots that have no run (trigger: backfill)",
    params(("ns" = String, Path, description = "Namespace"), ("name" = String, Path, description = "Workflow name")),
    request_body = BackfillRequest,
    responses((status = 202, description = "Started", body = BackfillResource), (status = 200, description = "The dry run", body = BackfillDryRun), crate::openapi::Problems)
)]
pub(crate) async fn workflow_start(
    State(state): State<AppState>,
    Path((ns, name)): Path<(String, String)>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    start(&state, BackfillOf::Workflow, &ns, &name, &headers, body).await
}

/// `GET /v1/namespaces/{ns}/workflows/{name}/backfills`: newest first (100).
#[utoipa::path(
    get,
    path = "/v1/namespaces/{ns}/workflows/{name}/backfills",
    tag = "workflows",
    summary = "A workflow's backfills, newest first",
    params(("ns" = String, Path, description = "Namespace"), ("name" = String, Path, description = "Workflow name")),
    responses((status = 200, description = "{\"items\": [...]}", body = crate::resource::Page<BackfillResource>), crate::openapi::Problems)
)]
pub(crate) async fn workflow_list(
    State(state): State<AppState>,
    Path((ns, name)): Path<(String, String)>,
) -> Result<Response, ApiError> {
    list(&state, BackfillOf::Workflow, &ns, &name).await
}

/// `GET /v1/namespaces/{ns}/workflows/{name}/backfills/{id}`: progress.
#[utoipa::path(
    get,
    path = "/v1/namespaces/{ns}/workflows/{name}/backfills/{id}",
    tag = "workflows",
    summary = "One backfill of a workflow: its progress",
    params(("ns" = String, Path, description = "Namespace"), ("name" = String, Path, description = "Workflow name"), ("id" = String, Path, description = "Backfill id")),
    responses((status = 200, description = "The backfill", body = BackfillResource), crate::openapi::Problems)
)]
pub(crate) async fn workflow_get(
    State(state): State<AppState>,
    Path((ns, name, id)): Path<(String, String, String)>,
) -> Result<Response, ApiError> {
    get(&state, BackfillOf::Workflow, &ns, &name, &id).await
}

/// `POST /v1/namespaces/{ns}/workflows/{name}/backfills/{id}/cancel`: stops it.
#[utoipa::path(
    post,
    path = "/v1/namespaces/{ns}/workflows/{name}/backfills/{id}/cancel",
    tag = "workflows",
    summary = "Cancel a workflow's backfill; what it created stays",
    params(("ns" = String, Path, description = "Namespace"), ("name" = String, Path, description = "Workflow name"), ("id" = String, Path, description = "Backfill id")),
    responses((status = 200, description = "Cancelled", body = BackfillResource), crate::openapi::Problems)
)]
pub(crate) async fn workflow_cancel(
    State(state): State<AppState>,
    Path((ns, name, id)): Path<(String, String, String)>,
) -> Result<Response, ApiError> {
    cancel(&state, BackfillOf::Workflow, &ns, &name, &id).await
}
