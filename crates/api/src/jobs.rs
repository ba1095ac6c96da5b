//! Job routes: create, replace, merge-patch, read, list, delete, pause, resume, trigger (the
//! cron preview, `POST /v1/cron/next`, is in `cron.rs`).
//!
//! The rules for a job's next slot on write live in [`next_record`]: a new job starts at its
//! first slot at or after creation; a change of schedule, time zone or a resume starts at the
//! first slot after now and cancels the executions that had not started; other changes keep
//! the schedule's position and rewrite the not-started executions with the new definition.

use std::collections::HashMap;

use axum::Json;
use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use jiff::Timestamp;
use serde_json::{Value, json};
use sundial_core::hash::shard_of;
use sundial_core::job::{JobSpec, ScheduleKind};
use sundial_core::schedule::Schedule;
use sundial_core::validate::{self, Context, FieldError};
use sundial_store::Error as StoreError;
use sundial_store::{JobListQuery, JobRecord, JobWrite, PendingExecutions, RunSpec};

use crate::AppState;
use crate::error::ApiError;
use crate::request::{
    Path, Query, if_match, job_page_token, json_body, known_params, limit, list_filters,
};
use crate::resource::{NsCalendars, execution_json, job_json};

/// What validation needs to know of this server, for a write in namespace `ns` of the job or
/// workflow `name` (from the path, if any).
pub(crate) fn context(state: &AppState, ns: &str, name: Option<&str>) -> Context {
    Context {
        connections: state.connections.clone(),
        http_allow: state.http_allow.clone(),
        namespace: ns.to_owned(),
        name: name.map(str::to_owned),
    }
}

/// The namespace's calendars, compiled, by name (docs/time.md, "Calendars"); a stored one
/// that does not compile is left out (it excludes nothing).
///
/// # Errors
/// The store's, when the read fails.
pub(crate) async fn ns_calendars(state: &AppState, ns: &str) -> Result<NsCalendars, ApiError> {
    Ok(state
        .store
        .calendar_list(ns)
        .await?
        .into_iter()
        .filter_map(|c| Some((c.name, c.spec.compile().ok()?)))
        .collect())
}

/// `refused` (a 422 from validation) with one more error for each calendar name in the raw
/// body's `schedule.exclude_calendars` that `ns` does not hold, so one answer names every bad
/// field. `items` is the key of a batch (`jobs`, `workflows`), `None` for one body. Any other
/// error, or a failed read of the calendars, leaves `refused` as it is.
pub(crate) async fn and_unknown_calendars(
    state: &AppState,
    ns: &str,
    body: &Value,
    items: Option<&str>,
    mut refused: ApiError,
) -> ApiError {
    if refused.status != StatusCode::UNPROCESSABLE_ENTITY {
        return refused;
    }
    let bodies: Vec<(String, &Value)> = match items {
        None => vec![(String::new(), body)],
        Some(key) => body
            .get(key)
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .enumerate()
                    .map(|(i, v)| (format!("{key}.{i}."), v))
                    .collect()
            })
            .unwrap_or_default(),
    };
    let named: Vec<(String, &str)> = bodies
        .iter()
        .flat_map(|(prefix, v)| {
            v.pointer("/schedule/exclude_calendars")
                .and_then(Value::as_array)
                .map(|names| {
                    names
                        .iter()
                        .enumerate()
                        .filter_map(|(k, n)| {
                            let n = n.as_str()?;
                            sundial_core::names::check_name(n).ok()?;
                            Some((format!("{prefix}schedule.exclude_calendars.{k}"), n))
                        })
                        .collect::<Vec<_>>()
                })
                .unwrap_or_default()
        })
        .collect();
    if named.is_empty() {
        return refused;
    }
    let Ok(stored) = state.store.calendar_list(ns).await else {
        return refused;
    };
    for (field, name) in named {
        if !stored.iter().any(|c| c.name == name)
            && !refused.errors.iter().any(|e| e.field == field)
        {
            refused.errors.push(FieldError::new(
                field,
                format!("calendar '{name}' does not exist in namespace {ns}; create it first"),
            ));
        }
    }
    ApiError::invalid(refused.errors)
}

/// Refuses a write whose schedules name calendars `ns` does not hold (a write may only name
/// calendars that exist): one error per such name, `schedule.exclude_calendars.<i>`, behind
/// `<prefix><k>.` for the `k`-th of several schedules (a batch) or `prefix` alone for one.
///
/// # Errors
/// 422 naming each unknown calendar; the store's, when the read fails.
pub(crate) async fn refuse_unknown_calendars(
    state: &AppState,
    ns: &str,
    schedules: &[Option<&sundial_core::job::ScheduleSpec>],
    prefix: &str,
) -> Result<(), ApiError> {
    if schedules
        .iter()
        .flatten()
        .all(|s| s.exclude_calendars.is_empty())
    {
        return Ok(());
    }
    let stored = state.store.calendar_list(ns).await?;
    let mut errors = Vec::new();
    for (k, schedule) in schedules.iter().enumerate() {
        let Some(schedule) = schedule else { continue };
        let item = if schedules.len() > 1 || !prefix.is_empty() {
            format!("{prefix}{k}.")
        } else {
            String::new()
        };
        for (i, name) in schedule.exclude_calendars.iter().enumerate() {
            if !stored.iter().any(|c| &c.name == name) {
                errors.push(FieldError::new(
                    format!("{item}schedule.exclude_calendars.{i}"),
                    format!("calendar '{name}' does not exist in namespace {ns}; create it first"),
                ));
            }
        }
    }
    if errors.is_empty() {
        Ok(())
    } else {
        Err(ApiError::invalid(errors))
    }
}

/// Checks the namespace and name of a path against the name pattern.
///
/// # Errors
/// 400 naming `namespace` and `name` when they are not names.
pub(crate) fn check_path(ns: &str, name: Option<&str>) -> Result<(), ApiError> {
    let mut errors = Vec::new();
    if let Err(m) = sundial_core::names::check_name(ns) {
        errors.push(FieldError::new("namespace", m));
    }
    if let Some(name) = name
        && let Err(m) = sundial_core::names::check_name(name)
    {
        errors.push(FieldError::new("name", m));
    }
    if errors.is_empty() {
        Ok(())
    } else {
        Err(ApiError {
            status: StatusCode::BAD_REQUEST,
            ..ApiError::invalid(errors)
        })
    }
}

/// `body` as the answer with `status` and `ETag: "<version>"` (a job's or a workflow's
/// version, which `If-Match` names).
pub(crate) fn with_etag(status: StatusCode, version: i64, body: Value) -> Response {
    let mut response = (status, Json(body)).into_response();
    if let Ok(v) = HeaderValue::from_str(&format!("\"{version}\"")) {
        response.headers_mut().insert(header::ETAG, v);
    }
    response
}

/// Computes the stored form of `spec` written over `existing` at `now`: identity, next slot
/// and what happens to executions that have not started. See the module doc for the rules.
pub(crate) fn next_record(
    mut spec: JobSpec,
    existing: Option<&JobRecord>,
    now: Timestamp,
) -> (JobRecord, PendingExecutions) {
    // A credential written back as shown (`***`) keeps its stored value (docs/security.md,
    // "Plain-text credentials").
    if let Some(old) = existing {
        spec.target = sundial_core::secrets::unmask_target(&spec.target, &old.spec.target);
    }
    // `every` slots sit on a grid anchored at start_at, which defaults to the creation time
    // (docs/policies.md); keep the anchor across writes that leave the interval alone.
    if let ScheduleKind::Every { every } = spec.schedule.kind
        && spec.schedule.start_at.is_none()
    {
        let kept = existing.and_then(|old| match old.spec.schedule.kind {
            ScheduleKind::Every { every: old_every } if old_every == every => {
                old.spec.schedule.start_at
            }
            _ => None,
        });
        spec.schedule.start_at = Some(kept.unwrap_or(now));
    }
    // Validation compiled this schedule already; a failure here means nothing will fire.
    let schedule = Schedule::compile(&spec.schedule).ok();
    let after_now = |s: &Schedule| s.next_slot_after(now);
    let (uid, created_at, next_slot_at, pending) = match existing {
        None => {
            let first = if spec.paused {
                None
            } else {
                schedule.as_ref().and_then(|s| s.first_slot(now))
            };
            (
                uuid::Uuid::now_v7().to_string(),
                now,
                first,
                PendingExecutions::Keep,
            )
        }
        Some(old) => {
            let (next, pending) = if spec.paused {
                (None, PendingExecutions::Cancel)
            } else if old.spec.schedule != spec.schedule || old.spec.paused {
                (
                    schedule.as_ref().and_then(after_now),
                    PendingExecutions::Cancel,
                )
            } else if RunSpec::of(&old.spec) != RunSpec::of(&spec) {
                (old.next_slot_at, PendingExecutions::Update)
            } else {
                (old.next_slot_at, PendingExecutions::Keep)
            };
            (old.uid.clone(), old.created_at, next, pending)
        }
    };
    let next_fire_at = next_slot_at.map(|s| sundial_core::hash::fire_time(&uid, s, spec.jitter));
    let record = JobRecord {
        shard: shard_of(&spec.namespace, &spec.name),
        spec,
        uid,
        version: existing.map_or(0, |o| o.version),
        created_at,
        updated_at: now,
        next_slot_at,
        next_fire_at,
        // Executions created ahead survive the write unless it cancels them.
        pending_fire_at: match pending {
            PendingExecutions::Cancel => None,
            _ => existing.and_then(|o| o.pending_fire_at),
        },
        last_execution: existing.and_then(|o| o.last_execution.clone()),
    };
    (record, pending)
}

/// Why the job `record` (as [`next_record`] made it over `existing`) would never fire, naming
/// the field, as Quartz refuses a trigger that will never fire: an `end_at` already past `now`,
/// or a cron expression no date matches through local year 2199 (`0 0 31 2 *`). Only a write
/// that sets the schedule (a new job, or a changed schedule) is judged, so a job whose
/// `end_at` has passed can still be edited; a one-off `at` in the past fires at once and
/// passes.
pub(crate) fn never_fires(
    record: &JobRecord,
    existing: Option<&JobRecord>,
    now: Timestamp,
) -> Option<FieldError> {
    let schedule = &record.spec.schedule;
    if existing.is_some_and(|old| old.spec.schedule == *schedule) {
        return None;
    }
    let compiled = Schedule::compile(schedule).ok()?;
    if compiled.first_slot(now).is_some() {
        return None;
    }
    Some(match (schedule.end_at, &schedule.kind) {
        (Some(end), _) if end < now => FieldError::new(
            "schedule.end_at",
            format!("{end} is already past; the job would never fire"),
        ),
        (_, ScheduleKind::Cron { .. }) => FieldError::new(
            "schedule.cron",
            "no date matches it through local year 2199; the job would never fire",
        ),
        _ => FieldError::new(
            "schedule",
            "yields no slot from now on; the job would never fire",
        ),
    })
}

/// Writes `spec` over `existing` as read (or creates it), conditional on `expected`
/// (If-Match) when given, else on the version read. `Ok(None)` when the client gave no
/// If-Match and a concurrent write of the job got there first: the caller reads again and
/// retries ([`retry_races`]).
async fn write(
    state: &AppState,
    spec: JobSpec,
    existing: Option<JobRecord>,
    expected: Option<i64>,
) -> Result<Option<JobRecord>, ApiError> {
    if let Some(v) = expected {
        match &existing {
            None => {
                return Err(ApiError::new(
                    StatusCode::PRECONDITION_FAILED,
                    "precondition failed",
                    format!("If-Match names version {v}, but the job does not exist"),
                ));
            }
            Some(old) if old.version != v => {
                return Err(sundial_store::Error::StaleVersion {
                    expected: v,
                    actual: old.version,
                }
                .into());
            }
            Some(_) => {}
        }
    }
    let now = state.store.now().await?;
    let (record, pending) = next_record(spec, existing.as_ref(), now);
    if let Some(e) = never_fires(&record, existing.as_ref(), now) {
        return Err(ApiError::invalid(vec![e]));
    }
    let masked = sundial_core::secrets::masked_errors(&record.spec.target, "");
    if !masked.is_empty() {
        return Err(ApiError::invalid(masked));
    }
    // Writing back what is stored changes nothing: no new version, no rescheduling.
    if let Some(old) = existing.as_ref().filter(|old| old.spec == record.spec) {
        return Ok(Some(old.clone()));
    }
    let created = existing.is_none();
    let written = match state
        .store
        .job_write(&JobWrite {
            record,
            expected_version: existing.map(|o| o.version),
            pending,
        })
        .await
    {
        Ok(written) => written,
        // Without If-Match the client asked for no version: a concurrent write that got
        // there between our read and our write is a race to run again, not its error.
        Err(StoreError::StaleVersion { .. }) if expected.is_none() => return Ok(None),
        Err(StoreError::Conflict(_)) if expected.is_none() && created => return Ok(None),
        Err(e) => return Err(e.into()),
    };
    state.scheduler_wake.notify_one();
    Ok(Some(written))
}

/// How often a read-modify-write without If-Match is run again after losing a race to a
/// concurrent write of the same job, before it answers 503 (`store busy`): each round one of
/// the racing writers wins, so this bounds how many may race at once.
pub const WRITE_RACE_RETRIES: u32 = 64;

/// Runs `attempt` (a read, then a write) until it is not raced, at most
/// [`WRITE_RACE_RETRIES`] times, waiting a random 0–`n` ms (at most 20 ms) before the `n`-th
/// retry so that racing writers spread out; `Ok(None)` from `attempt` means a concurrent write
/// got there first.
///
/// # Errors
/// `attempt`'s own; 503 `store busy` when every run was raced.
pub(crate) async fn retry_races<F, Fut>(mut attempt: F) -> Result<Response, ApiError>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<Option<Response>, ApiError>>,
{
    for n in 0..WRITE_RACE_RETRIES {
        if n > 0 {
            // A UUIDv7's low bits are random: jitter without a generator of our own.
            let random = (uuid::Uuid::now_v7().as_u128() & 0xffff) as u32;
            let wait_ms = random % n.min(20);
            tokio::time::sleep(std::time::Duration::from_millis(u64::from(wait_ms))).await;
        }
        if let Some(response) = attempt().await? {
            return Ok(response);
        }
    }
    Err(ApiError::new(
        StatusCode::SERVICE_UNAVAILABLE,
        "store busy",
        "concurrent writes kept getting there first; nothing was written; retry",
    ))
}

async fn load(state: &AppState, ns: &str, name: &str) -> Result<JobRecord, ApiError> {
    state
        .store
        .job_get(ns, name)
        .await?
        .ok_or_else(|| ApiError::not_found(format!("job {ns}/{name}")))
}

/// `PUT /v1/namespaces/{ns}/jobs/{name}`: create (201) or replace (200).
#[utoipa::path(
    put,
    path = "/v1/namespaces/{ns}/jobs/{name}",
    tag = "jobs",
    summary = "Create (201) or replace (200) a job",
    params(("ns" = String, Path, description = "Namespace"), ("name" = String, Path, description = "Job name"), ("If-Match" = Option<String>, Header, description = "The version the change applies to; 412 when it is not the current one")),
    request_body = crate::openapi::JobInput,
    responses((status = 200, description = "Replaced", body = crate::resource::JobResource), (status = 201, description = "Created", body = crate::resource::JobResource), crate::openapi::Problems)
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
    let spec = match validate::job_from_json(&body, &context(&state, &ns, Some(&name))) {
        Ok(spec) => spec,
        Err(e) => {
            let refused = ApiError::invalid(e);
            return Err(and_unknown_calendars(&state, &ns, &body, None, refused).await);
        }
    };
    refuse_unknown_calendars(&state, &ns, &[Some(&spec.schedule)], "").await?;
    crate::secrets::refuse_unknown_secrets(&state, &ns, [(String::new(), &spec.target)]).await?;
    retry_races(|| async {
        let existing = state.store.job_get(&ns, &name).await?;
        if existing.is_none() && crate::request::if_match_any(&headers) {
            return Err(ApiError::new(
                StatusCode::PRECONDITION_FAILED,
                "precondition failed",
                format!("If-Match: * needs an existing job, and {ns}/{name} does not exist"),
            ));
        }
        let status = if existing.is_some() {
            StatusCode::OK
        } else {
            StatusCode::CREATED
        };
        let Some(job) = write(&state, spec.clone(), existing, expected).await? else {
            return Ok(None);
        };
        let now = state.store.now().await?;
        Ok(Some(with_etag(
            status,
            job.version,
            job_json(&job, true, now, &ns_calendars(&state, &ns).await?),
        )))
    })
    .await
}

/// Most jobs one bulk request may carry.
pub const MAX_BATCH: usize = 1000;

/// `POST /v1/namespaces/{ns}/jobs:apply` with `{"jobs": [job, ...]}` (at most [`MAX_BATCH`]):
/// creates or replaces every job, all or none — every job is validated first (errors name
/// `jobs.<i>.<field>`), then all are written in one transaction. Answers
/// `{"items": [job, ...], "created": n, "updated": m, "unchanged": k}` (a job written back as
/// stored is left alone).
#[utoipa::path(
    post,
    path = "/v1/namespaces/{ns}/jobs:apply",
    tag = "jobs",
    summary = "Create or replace up to 1,000 jobs, all or none",
    params(("ns" = String, Path, description = "Namespace")),
    request_body = crate::openapi::JobsApply,
    responses((status = 200, description = "Written", body = crate::resource::Applied<crate::resource::JobResource>), crate::openapi::Problems)
)]
pub(crate) async fn apply_many(
    State(state): State<AppState>,
    Path(ns): Path<String>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    check_path(&ns, None)?;
    let body = json_body(&headers, body).await?;
    let specs = match batch(&body, "jobs", MAX_BATCH, |item| {
        validate::job_from_json(item, &context(&state, &ns, None))
            .map(|spec| (spec.name.clone(), spec))
    }) {
        Ok(specs) => specs,
        Err(e) => return Err(and_unknown_calendars(&state, &ns, &body, Some("jobs"), e).await),
    };
    let schedules: Vec<_> = specs.iter().map(|s| Some(&s.schedule)).collect();
    refuse_unknown_calendars(&state, &ns, &schedules, "jobs.").await?;
    crate::secrets::refuse_unknown_secrets(
        &state,
        &ns,
        specs
            .iter()
            .enumerate()
            .map(|(i, s)| (format!("jobs.{i}."), &s.target)),
    )
    .await?;
    let now = state.store.now().await?;
    let mut writes = Vec::with_capacity(specs.len());
    let mut created = 0;
    let mut unchanged = Vec::new();
    let names: Vec<String> = specs.iter().map(|s| s.name.clone()).collect();
    let mut existing_jobs: HashMap<String, JobRecord> = state
        .store
        .job_get_many(&ns, &names)
        .await?
        .into_iter()
        .map(|j| (j.spec.name.clone(), j))
        .collect();
    let mut never = Vec::new();
    for (i, spec) in specs.into_iter().enumerate() {
        let existing = existing_jobs.remove(&spec.name);
        created += usize::from(existing.is_none());
        let (record, pending) = next_record(spec, existing.as_ref(), now);
        if let Some(e) = never_fires(&record, existing.as_ref(), now) {
            never.push(FieldError::new(format!("jobs.{i}.{}", e.field), e.message));
            continue;
        }
        let masked =
            sundial_core::secrets::masked_errors(&record.spec.target, &format!("jobs.{i}."));
        if !masked.is_empty() {
            never.extend(masked);
            continue;
        }
        if let Some(old) = existing.as_ref().filter(|old| old.spec == record.spec) {
            unchanged.push(old.clone());
            continue;
        }
        writes.push(JobWrite {
            record,
            expected_version: existing.map(|o| o.version),
            pending,
        });
    }
    if !never.is_empty() {
        return Err(ApiError::invalid(never));
    }
    let written = if writes.is_empty() {
        Vec::new()
    } else {
        state.store.job_write_batch(&writes).await?
    };
    state.scheduler_wake.notify_one();
    let updated = written.len() - created;
    let cals = ns_calendars(&state, &ns).await?;
    let items: Vec<Value> = written
        .iter()
        .chain(&unchanged)
        .map(|j| job_json(j, false, now, &cals))
        .collect();
    Ok(Json(json!({"items": items, "created": created, "updated": updated, "unchanged": unchanged.len()})).into_response())
}

/// The items of a bulk request `{"<key>": [item, ...]}` (at most `max`), each validated by
/// `validate` into its name and value, all or none: errors name `<key>.<i>.<field>`, and a
/// name given twice is refused at its second place.
///
/// # Errors
/// 422 naming every bad item field, a missing or oversized `<key>`, or another field.
pub(crate) fn batch<T>(
    body: &Value,
    key: &str,
    max: usize,
    validate: impl Fn(&Value) -> Result<(String, T), Vec<FieldError>>,
) -> Result<Vec<T>, ApiError> {
    let Some(items) = body.get(key).and_then(Value::as_array) else {
        return Err(ApiError::invalid(vec![FieldError::new(
            key,
            format!("is required: an array of {key}"),
        )]));
    };
    if items.len() > max {
        return Err(ApiError::invalid(vec![FieldError::new(
            key,
            format!("holds {} {key}; at most {max} per request", items.len()),
        )]));
    }
    if let Some(extra) = body.as_object().and_then(|o| o.keys().find(|k| *k != key)) {
        return Err(ApiError::invalid(vec![FieldError::new(
            extra.clone(),
            format!("unknown field; expected {key}"),
        )]));
    }
    let mut values = Vec::with_capacity(items.len());
    let mut errors = Vec::new();
    let mut seen = std::collections::HashSet::new();
    for (i, item) in items.iter().enumerate() {
        match validate(item) {
            Ok((name, value)) => {
                if !seen.insert(name.clone()) {
                    errors.push(FieldError::new(
                        format!("{key}.{i}.name"),
                        format!("'{name}' appears twice in the batch"),
                    ));
                }
                values.push(value);
            }
            Err(errs) => errors.extend(errs.into_iter().map(|e| {
                let field = if e.field.is_empty() {
                    format!("{key}.{i}")
                } else {
                    format!("{key}.{i}.{}", e.field)
                };
                FieldError::new(field, e.message)
            })),
        }
    }
    if errors.is_empty() {
        Ok(values)
    } else {
        Err(ApiError::invalid(errors))
    }
}

/// `POST /v1/namespaces/{ns}/jobs`: create with `name` in the body; 409 if it exists.
#[utoipa::path(
    post,
    path = "/v1/namespaces/{ns}/jobs",
    tag = "jobs",
    summary = "Create a job named in the body; 409 if it exists",
    params(("ns" = String, Path, description = "Namespace")),
    request_body = crate::openapi::JobInput,
    responses((status = 201, description = "Created", body = crate::resource::JobResource), crate::openapi::Problems)
)]
pub(crate) async fn create(
    State(state): State<AppState>,
    Path(ns): Path<String>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    check_path(&ns, None)?;
    let body = json_body(&headers, body).await?;
    let spec = match validate::job_from_json(&body, &context(&state, &ns, None)) {
        Ok(spec) => spec,
        Err(e) => {
            let refused = ApiError::invalid(e);
            return Err(and_unknown_calendars(&state, &ns, &body, None, refused).await);
        }
    };
    refuse_unknown_calendars(&state, &ns, &[Some(&spec.schedule)], "").await?;
    crate::secrets::refuse_unknown_secrets(&state, &ns, [(String::new(), &spec.target)]).await?;
    if state.store.job_get(&ns, &spec.name).await?.is_some() {
        return Err(ApiError::new(
            StatusCode::CONFLICT,
            "conflict",
            format!("job {ns}/{} already exists", spec.name),
        ));
    }
    let name = spec.name.clone();
    // A concurrent create of the same name is the conflict this answers anyway.
    let Some(job) = write(&state, spec, None, None).await? else {
        return Err(ApiError::new(
            StatusCode::CONFLICT,
            "conflict",
            format!("job {ns}/{name} already exists"),
        ));
    };
    let now = state.store.now().await?;
    Ok(with_etag(
        StatusCode::CREATED,
        job.version,
        job_json(&job, true, now, &ns_calendars(&state, &ns).await?),
    ))
}

/// `GET /v1/namespaces/{ns}/jobs/{name}`, with `next_fire_times`.
#[utoipa::path(
    get,
    path = "/v1/namespaces/{ns}/jobs/{name}",
    tag = "jobs",
    summary = "One job, with its next five fire times",
    params(("ns" = String, Path, description = "Namespace"), ("name" = String, Path, description = "Job name")),
    responses((status = 200, description = "The job", body = crate::resource::JobResource), crate::openapi::Problems)
)]
pub(crate) async fn get_one(
    State(state): State<AppState>,
    Path((ns, name)): Path<(String, String)>,
) -> Result<Response, ApiError> {
    let job = load(&state, &ns, &name).await?;
    let now = state.store.now().await?;
    Ok(with_etag(
        StatusCode::OK,
        job.version,
        job_json(&job, true, now, &ns_calendars(&state, &ns).await?),
    ))
}

/// `GET /v1/namespaces/{ns}/jobs?paused=&label=k=v&limit=&page_token=`.
#[utoipa::path(
    get,
    path = "/v1/namespaces/{ns}/jobs",
    tag = "jobs",
    summary = "The namespace's jobs, by name",
    params(("ns" = String, Path, description = "Namespace"), ("limit" = Option<u32>, Query, description = "Page size, 1 to 1000 (default 100)"), ("page_token" = Option<String>, Query, description = "The next_page_token of the previous page"), ("paused" = Option<bool>, Query, description = "Only paused (true) or unpaused (false)"), ("label" = Option<String>, Query, description = "Only those with this label, as key=value")),
    responses((status = 200, description = "A page of jobs", body = crate::resource::Page<crate::resource::JobResource>), crate::openapi::Problems)
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
    let jobs = state
        .store
        .job_list(&JobListQuery {
            namespace: ns.clone(),
            paused,
            label,
            after_name,
            limit,
        })
        .await?;
    let next = (jobs.len() == limit as usize)
        .then(|| jobs.last().map(|j| j.spec.name.clone()))
        .flatten();
    let now = state.store.now().await?;
    let cals = ns_calendars(&state, &ns).await?;
    let items: Vec<Value> = jobs
        .iter()
        .map(|j| job_json(j, false, now, &cals))
        .collect();
    Ok(Json(json!({"items": items, "next_page_token": next})).into_response())
}

/// `PATCH /v1/namespaces/{ns}/jobs/{name}`: JSON merge patch (RFC 7396) of the writable fields.
#[utoipa::path(
    patch,
    path = "/v1/namespaces/{ns}/jobs/{name}",
    tag = "jobs",
    summary = "Change a job by a JSON merge patch (RFC 7396)",
    params(("ns" = String, Path, description = "Namespace"), ("name" = String, Path, description = "Job name"), ("If-Match" = Option<String>, Header, description = "The version the change applies to; 412 when it is not the current one")),
    request_body = crate::openapi::MergePatch,
    responses((status = 200, description = "Changed", body = crate::resource::JobResource), crate::openapi::Problems)
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
        let mut doc = serde_json::to_value(&existing.spec)
            .map_err(|e| sundial_store::Error::Corrupt(e.to_string()))?;
        validate::merge_patch(&mut doc, &patch);
        let spec = match validate::job_from_json(&doc, &context(&state, &ns, Some(&name))) {
            Ok(spec) => spec,
            Err(e) => {
                let refused = ApiError::invalid(e);
                return Err(and_unknown_calendars(&state, &ns, &doc, None, refused).await);
            }
        };
        refuse_unknown_calendars(&state, &ns, &[Some(&spec.schedule)], "").await?;
        crate::secrets::refuse_unknown_secrets(&state, &ns, [(String::new(), &spec.target)])
            .await?;
        let Some(job) = write(&state, spec, Some(existing), expected).await? else {
            return Ok(None);
        };
        let now = state.store.now().await?;
        Ok(Some(with_etag(
            StatusCode::OK,
            job.version,
            job_json(&job, true, now, &ns_calendars(&state, &ns).await?),
        )))
    })
    .await
}

/// `DELETE /v1/namespaces/{ns}/jobs/{name}`: 204; not-started executions are cancelled.
#[utoipa::path(
    delete,
    path = "/v1/namespaces/{ns}/jobs/{name}",
    tag = "jobs",
    summary = "Delete a job; its executions not started are cancelled, history kept",
    params(("ns" = String, Path, description = "Namespace"), ("name" = String, Path, description = "Job name"), ("If-Match" = Option<String>, Header, description = "The version the change applies to; 412 when it is not the current one")),
    responses((status = 204, description = "Deleted"), crate::openapi::Problems)
)]
pub(crate) async fn delete(
    State(state): State<AppState>,
    Path((ns, name)): Path<(String, String)>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let expected = if_match(&headers)?;
    state.store.job_delete(&ns, &name, expected).await?;
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
        let now = state.store.now().await?;
        if existing.spec.paused == paused {
            return Ok(Some(with_etag(
                StatusCode::OK,
                existing.version,
                job_json(&existing, true, now, &ns_calendars(state, ns).await?),
            )));
        }
        let spec = JobSpec {
            paused,
            ..existing.spec.clone()
        };
        let Some(job) = write(state, spec, Some(existing), expected).await? else {
            return Ok(None);
        };
        Ok(Some(with_etag(
            StatusCode::OK,
            job.version,
            job_json(&job, true, now, &ns_calendars(state, ns).await?),
        )))
    })
    .await
}

/// `POST .../pause`: slots that pass while paused are not fired; not-started executions are
/// cancelled.
#[utoipa::path(
    post,
    path = "/v1/namespaces/{ns}/jobs/{name}/pause",
    tag = "jobs",
    summary = "Pause a job",
    params(("ns" = String, Path, description = "Namespace"), ("name" = String, Path, description = "Job name")),
    responses((status = 200, description = "Paused", body = crate::resource::JobResource), crate::openapi::Problems)
)]
pub(crate) async fn pause(
    State(state): State<AppState>,
    Path((ns, name)): Path<(String, String)>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    set_paused(&state, &ns, &name, &headers, true).await
}

/// `POST .../resume`: continues with the first slot after now.
#[utoipa::path(
    post,
    path = "/v1/namespaces/{ns}/jobs/{name}/resume",
    tag = "jobs",
    summary = "Resume a job from the first slot after now",
    params(("ns" = String, Path, description = "Namespace"), ("name" = String, Path, description = "Job name")),
    responses((status = 200, description = "Resumed", body = crate::resource::JobResource), crate::openapi::Problems)
)]
pub(crate) async fn resume(
    State(state): State<AppState>,
    Path((ns, name)): Path<(String, String)>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    set_paused(&state, &ns, &name, &headers, false).await
}

/// `POST .../trigger`: a manual execution, queued at once (201).
#[utoipa::path(
    post,
    path = "/v1/namespaces/{ns}/jobs/{name}/trigger",
    tag = "jobs",
    summary = "Run a job now (trigger: manual)",
    params(("ns" = String, Path, description = "Namespace"), ("name" = String, Path, description = "Job name")),
    responses((status = 201, description = "The execution", body = crate::resource::ExecutionResource), crate::openapi::Problems)
)]
pub(crate) async fn trigger(
    State(state): State<AppState>,
    Path((ns, name)): Path<(String, String)>,
) -> Result<Response, ApiError> {
    let job = load(&state, &ns, &name).await?;
    let now = state.store.now().await?;
    let execution = state
        .store
        .execution_insert(&sundial_store::NewExecution::manual(&job, now))
        .await?;
    sundial_trace::trigger(&sundial_trace::Triggered {
        execution_id: &execution.id,
        namespace: &execution.namespace,
        job: &execution.job,
        scheduled_at: execution.scheduled_at,
        fire_at: execution.fire_at,
        origin: sundial_trace::Origin::Manual,
        node: &state.node,
    });
    state.worker_wake.notify_one();
    Ok((StatusCode::CREATED, Json(execution_json(&execution, now))).into_response())
}
