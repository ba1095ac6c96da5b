//! Holiday calendar routes (docs/time.md, "Calendars"): create or replace, read
//! (with who names it and its next excluded dates), list, delete.
//!
//! Invariants: a calendar is written only after [`calendar_from_json`] accepted the whole
//! body; one that a job or workflow names is never deleted (409 naming them).

use axum::Json;
use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use jiff::Timestamp;
use jiff::civil::Date;
use serde::Serialize;
use serde_json::json;
use sundial_core::calendar::{CalendarSpec, calendar_from_json};
use sundial_store::CalendarRecord;
use utoipa::ToSchema;

use crate::AppState;
use crate::error::ApiError;
use crate::jobs::{check_path, with_etag};
use crate::request::{Path, json_body};

/// How many of its next excluded dates `GET` of a calendar lists.
pub const NEXT_EXCLUDED_SHOWN: usize = 10;

/// A calendar as the API shows it.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct CalendarResource {
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
    /// The definition as written (`timezone`, `exclude`, `description`).
    #[serde(flatten)]
    pub spec: CalendarSpec,
    /// 1 on creation, incremented by every change.
    pub version: i64,
    /// When it was created (UTC).
    pub created_at: Timestamp,
    /// When it last changed (UTC).
    pub updated_at: Timestamp,
    /// The jobs and workflows whose schedule names it (`job NAME`, `workflow NAME`); on `GET`
    /// of one calendar only.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub used_by: Option<Vec<String>>,
    /// Its next excluded local dates from today in its zone (at most 10, within a year); on
    /// `GET` of one calendar only.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Vec<String>>)]
    pub next_excluded_dates: Option<Vec<Date>>,
}

fn resource(c: CalendarRecord) -> CalendarResource {
    CalendarResource {
        namespace: c.namespace,
        name: c.name,
        spec: c.spec,
        version: c.version,
        created_at: c.created_at,
        updated_at: c.updated_at,
        used_by: None,
        next_excluded_dates: None,
    }
}

/// The excluded local dates of `spec` from the local date of `now`, at most
/// [`NEXT_EXCLUDED_SHOWN`], looking a year ahead.
pub(crate) fn next_excluded(spec: &CalendarSpec, now: Timestamp) -> Vec<Date> {
    let Ok(calendar) = spec.compile() else {
        return Vec::new();
    };
    let mut day = now.to_zoned(calendar.time_zone().clone()).date();
    let mut out = Vec::new();
    for _ in 0..366 {
        if calendar.excludes(day) {
            out.push(day);
            if out.len() == NEXT_EXCLUDED_SHOWN {
                break;
            }
        }
        match day.tomorrow() {
            Ok(d) => day = d,
            Err(_) => break,
        }
    }
    out
}

/// `PUT /v1/namespaces/{ns}/calendars/{name}` with `{"timezone", "exclude": [...],
/// "description"?}`: 201 created or 200 replaced (a write of the stored spec changes nothing,
/// its version kept). A change takes effect for every slot not yet triggered.
#[utoipa::path(
    put,
    path = "/v1/namespaces/{ns}/calendars/{name}",
    tag = "calendars",
    summary = "Create or replace a holiday calendar",
    params(("ns" = String, Path, description = "Namespace"), ("name" = String, Path, description = "Calendar name")),
    request_body = CalendarSpec,
    responses((status = 200, description = "Replaced", body = CalendarResource), (status = 201, description = "Created", body = CalendarResource), crate::openapi::Problems)
)]
pub(crate) async fn put(
    State(state): State<AppState>,
    Path((ns, name)): Path<(String, String)>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    check_path(&ns, Some(&name))?;
    let body = json_body(&headers, body).await?;
    // The path names the calendar: a body that names another is refused, not ignored.
    let mut mismatched = Vec::new();
    for (key, expected) in [("namespace", &ns), ("name", &name)] {
        if let Some(given) = body.get(key).filter(|v| !v.is_null())
            && given.as_str() != Some(expected.as_str())
        {
            mismatched.push(sundial_core::validate::FieldError::new(
                key,
                format!("{given} differs from the path's '{expected}'"),
            ));
        }
    }
    let spec = match calendar_from_json(&body) {
        Ok(spec) if mismatched.is_empty() => spec,
        Ok(_) => return Err(ApiError::invalid(mismatched)),
        Err(mut errors) => {
            errors.extend(mismatched);
            return Err(ApiError::invalid(errors));
        }
    };
    let (record, created) = state.store.calendar_put(&ns, &name, &spec).await?;
    state.scheduler_wake.notify_one();
    let status = if created {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    let version = record.version;
    Ok(with_etag(
        status,
        version,
        crate::resource::to_value(&resource(record)),
    ))
}

/// `GET /v1/namespaces/{ns}/calendars/{name}`: the calendar, who names it, and its next
/// excluded dates.
#[utoipa::path(
    get,
    path = "/v1/namespaces/{ns}/calendars/{name}",
    tag = "calendars",
    summary = "One calendar, with who names it and its next excluded dates",
    params(("ns" = String, Path, description = "Namespace"), ("name" = String, Path, description = "Calendar name")),
    responses((status = 200, description = "The calendar", body = CalendarResource), crate::openapi::Problems)
)]
pub(crate) async fn get_one(
    State(state): State<AppState>,
    Path((ns, name)): Path<(String, String)>,
) -> Result<Response, ApiError> {
    check_path(&ns, Some(&name))?;
    let Some(record) = state.store.calendar_get(&ns, &name).await? else {
        return Err(ApiError::new(
            StatusCode::NOT_FOUND,
            "not found",
            format!("calendar {ns}/{name} does not exist"),
        ));
    };
    let now = state.store.now().await?;
    let used_by = state.store.calendar_users(&ns, &name).await?;
    let version = record.version;
    let mut shown = resource(record);
    shown.next_excluded_dates = Some(next_excluded(&shown.spec, now));
    shown.used_by = Some(used_by);
    Ok(with_etag(
        StatusCode::OK,
        version,
        crate::resource::to_value(&shown),
    ))
}

/// `GET /v1/namespaces/{ns}/calendars`: every calendar of the namespace, by name.
#[utoipa::path(
    get,
    path = "/v1/namespaces/{ns}/calendars",
    tag = "calendars",
    summary = "The namespace's calendars, by name",
    params(("ns" = String, Path, description = "Namespace")),
    responses((status = 200, description = "The calendars: {\"items\": [...]}", body = crate::resource::Page<CalendarResource>), crate::openapi::Problems)
)]
pub(crate) async fn list(
    State(state): State<AppState>,
    Path(ns): Path<String>,
) -> Result<Response, ApiError> {
    check_path(&ns, None)?;
    let items: Vec<CalendarResource> = state
        .store
        .calendar_list(&ns)
        .await?
        .into_iter()
        .map(resource)
        .collect();
    Ok(Json(json!({"items": items, "next_page_token": null})).into_response())
}

/// `DELETE /v1/namespaces/{ns}/calendars/{name}`: 204; 409 naming the jobs and workflows
/// whose schedule names it, deleting nothing.
#[utoipa::path(
    delete,
    path = "/v1/namespaces/{ns}/calendars/{name}",
    tag = "calendars",
    summary = "Delete a calendar no schedule names",
    params(("ns" = String, Path, description = "Namespace"), ("name" = String, Path, description = "Calendar name")),
    responses((status = 204, description = "Deleted"), crate::openapi::Problems)
)]
pub(crate) async fn delete(
    State(state): State<AppState>,
    Path((ns, name)): Path<(String, String)>,
) -> Result<Response, ApiError> {
    check_path(&ns, Some(&name))?;
    state.store.calendar_delete(&ns, &name).await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}
