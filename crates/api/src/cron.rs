//! The cron preview, `POST /v1/cron/next` (README.md, "The API"): the next fire times of a
//! cron expression in a zone under a DST policy, with the days of a namespace's calendars left
//! out. It writes nothing; a bad field is a 400 naming it.

use axum::Json;
use axum::body::Body;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use jiff::Timestamp;
use serde_json::{Value, json};
use sundial_core::validate::FieldError;

use crate::AppState;
use crate::error::ApiError;
use crate::jobs::ns_calendars;
use crate::request::json_body;

/// The calendars `POST /v1/cron/next` names: `exclude_calendars` (names) of `namespace`,
/// which the request's token must be allowed to act in. Bad or unknown names, a missing
/// `namespace` and a namespace the token may not read are pushed onto `errors`.
///
/// # Errors
/// The store's, when the read fails.
async fn cron_next_calendars(
    state: &AppState,
    body: &serde_json::Map<String, Value>,
    grant: Option<&crate::auth::Namespaces>,
    errors: &mut Vec<FieldError>,
) -> Result<Vec<sundial_cron::Calendar>, ApiError> {
    let names: Vec<&str> = match body.get("exclude_calendars") {
        None | Some(Value::Null) => return Ok(Vec::new()),
        Some(Value::Array(items)) if items.iter().all(Value::is_string) => {
            items.iter().filter_map(Value::as_str).collect()
        }
        Some(_) => {
            errors.push(FieldError::new(
                "exclude_calendars",
                "must be an array of calendar names",
            ));
            return Ok(Vec::new());
        }
    };
    let Some(ns) = body.get("namespace").and_then(Value::as_str) else {
        errors.push(FieldError::new(
            "namespace",
            "is required with exclude_calendars: the namespace that holds them",
        ));
        return Ok(Vec::new());
    };
    if sundial_core::names::check_name(ns).is_err() || grant.is_some_and(|g| !g.allows(ns)) {
        errors.push(FieldError::new(
            "namespace",
            format!("'{ns}' is not a namespace this token may read"),
        ));
        return Ok(Vec::new());
    }
    let stored = ns_calendars(state, ns).await?;
    let mut out = Vec::with_capacity(names.len());
    for (i, name) in names.iter().enumerate() {
        if names[..i].contains(name) {
            errors.push(FieldError::new(
                format!("exclude_calendars.{i}"),
                format!("'{name}' is named twice"),
            ));
            continue;
        }
        match stored.get(*name) {
            Some(c) => out.push(c.clone()),
            None => errors.push(FieldError::new(
                format!("exclude_calendars.{i}"),
                format!("calendar '{name}' does not exist in namespace {ns}"),
            )),
        }
    }
    Ok(out)
}

/// `POST /v1/cron/next` with `{"cron", "timezone"?, "from"?, "count"?, "dst"?,
/// "namespace"?, "exclude_calendars"?}` → `{"fire_times": [RFC 3339 with the zone's offset]}`;
/// `count` 1-1000, default 5; `dst` a schedule's DST policy (docs/cron.md, "DST policy");
/// `exclude_calendars` names calendars of `namespace` whose days are left out (docs/time.md,
/// "Calendars"; a token may name only its namespaces' calendars).
#[utoipa::path(
    post,
    path = "/v1/cron/next",
    tag = "cluster",
    summary = "The next fire times of a cron expression in a zone",
    request_body = crate::openapi::CronNextRequest,
    responses((status = 200, description = "Fire times", body = crate::openapi::CronNextResponse), crate::openapi::Problems)
)]
pub(crate) async fn cron_next(
    State(state): State<AppState>,
    grant: Option<axum::Extension<crate::auth::Namespaces>>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    let body = json_body(&headers, body).await?;
    let Some(obj) = body.as_object() else {
        return Err(ApiError::invalid(vec![FieldError::new(
            "",
            "the body must be a JSON object",
        )]));
    };
    let mut errors = Vec::new();
    for key in obj.keys() {
        if ![
            "cron",
            "timezone",
            "from",
            "count",
            "dst",
            "namespace",
            "exclude_calendars",
        ]
        .contains(&key.as_str())
        {
            errors.push(FieldError::new(
                key.clone(),
                "unknown field; expected cron, timezone, from, count, dst, namespace, \
                 exclude_calendars",
            ));
        }
    }
    let calendars = cron_next_calendars(&state, obj, grant.as_deref(), &mut errors).await?;
    let dst = match obj.get("dst") {
        None | Some(Value::Null) => sundial_core::job::DstSpec::default(),
        Some(v) => sundial_core::validate::dst_from_json(v, "dst").unwrap_or_else(|e| {
            errors.extend(e);
            sundial_core::job::DstSpec::default()
        }),
    };
    let cron = match obj.get("cron").and_then(Value::as_str) {
        Some(text) => sundial_cron::Cron::parse(text)
            .map_err(|e| errors.push(FieldError::new("cron", e.to_string())))
            .ok(),
        None => {
            errors.push(FieldError::new("cron", "is required and must be a string"));
            None
        }
    };
    let tz_name = obj.get("timezone").map_or(Some("UTC"), Value::as_str);
    let tz = match tz_name {
        Some(name) => jiff::tz::TimeZone::get(name)
            .map_err(|_| {
                errors.push(FieldError::new(
                    "timezone",
                    format!("'{name}' is not a known IANA time zone"),
                ))
            })
            .ok(),
        None => {
            errors.push(FieldError::new("timezone", "must be a string"));
            None
        }
    };
    let from = match obj.get("from") {
        None | Some(Value::Null) => Some(state.store.now().await?),
        Some(v) => v
            .as_str()
            .and_then(|s| s.parse::<Timestamp>().ok())
            .or_else(|| {
                errors.push(FieldError::new(
                    "from",
                    format!("{v} is not an RFC 3339 instant"),
                ));
                None
            }),
    };
    let count = match obj.get("count") {
        None | Some(Value::Null) => 5,
        Some(v) => match v.as_u64() {
            Some(n) if (1..=1000).contains(&n) => n as usize,
            _ => {
                errors.push(FieldError::new(
                    "count",
                    format!("{v} is not a whole number in 1-1000"),
                ));
                0
            }
        },
    };
    let (Some(cron), Some(tz), Some(from), true) = (cron, tz, from, errors.is_empty()) else {
        return Err(ApiError::invalid(errors));
    };
    let policy = dst.into();
    let mut times = Vec::with_capacity(count);
    let mut cursor = from;
    while times.len() < count {
        let Some(z) = cron.next_after_excluding(cursor, &tz, policy, &calendars) else {
            break;
        };
        cursor = z.timestamp();
        times.push(z.strftime("%Y-%m-%dT%H:%M:%S%:z").to_string());
    }
    Ok(Json(json!({"fire_times": times})).into_response())
}
