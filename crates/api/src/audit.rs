//! The audit log's routes and the request context its entries record (docs/security.md,
//! "Audit log").
//!
//! Invariants:
//! - Every request gets an id ([`identify`], outermost): its `x-request-id` when it sends a
//!   usable one (1 to 128 visible ASCII characters), else a new UUID v7; the answer carries it
//!   in `x-request-id`. The UI's actions, sent to the `/v1` router in-process, keep the id and
//!   peer address of the browser's request.
//! - Every `/v1` request that may change something runs inside [`sundial_store::audit::scope`]
//!   ([`record_changes`], after the token check): the store steps it reaches record each change
//!   with its actor (the token's name and role, or `anonymous` without tokens), request id,
//!   peer address and, for `PATCH`, `pause` and `resume`, the request's action.
//! - Reads never write an entry; the log itself is read-only through the API.

use std::collections::HashMap;
use std::net::SocketAddr;

use axum::Json;
use axum::extract::{ConnectInfo, Request, State};
use axum::http::{HeaderValue, Method};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use serde_json::json;
use sundial_store::audit::{Actor, AuditContext, AuditQuery, ChainBreak, Verifier};

use crate::AppState;
use crate::error::ApiError;
use crate::request::{Path, Query, known_params, limit};

/// The header that carries a request's id, both ways.
pub const REQUEST_ID: &str = "x-request-id";

/// The resource kinds an entry names (docs/security.md, "Audit log"), for the `resource` filter.
pub const RESOURCES: [&str; 8] = [
    "job",
    "workflow",
    "calendar",
    "secret",
    "execution",
    "run",
    "backfill",
    "namespace",
];

/// Entries read per page while a chain is verified.
const VERIFY_PAGE: u32 = 1000;

/// The id and peer of the request being answered, set by [`identify`].
#[derive(Debug, Clone)]
struct Identity {
    request_id: String,
    remote_addr: Option<String>,
}

tokio::task_local! {
    static IDENTITY: Identity;
}

/// A usable `x-request-id` sent by the client: 1 to 128 visible ASCII characters.
fn sent_id(request: &Request) -> Option<String> {
    let v = request.headers().get(REQUEST_ID)?.to_str().ok()?;
    let ok = !v.is_empty() && v.len() <= 128 && v.bytes().all(|b| b.is_ascii_graphic());
    ok.then(|| v.to_owned())
}

/// The outermost middleware: gives the request its id and peer address ([module
/// invariants](self)) and echoes the id in the answer. A request made in-process while
/// another is answered (the UI's actions) keeps that request's.
pub async fn identify(request: Request, next: Next) -> Response {
    let outer = IDENTITY.try_with(Clone::clone).ok();
    let identity = match outer {
        Some(outer) => outer,
        None => Identity {
            request_id: sent_id(&request)
                .unwrap_or_else(|| uuid::Uuid::now_v7().hyphenated().to_string()),
            remote_addr: request
                .extensions()
                .get::<ConnectInfo<SocketAddr>>()
                .map(|c| c.0.to_string()),
        },
    };
    let id = HeaderValue::from_str(&identity.request_id).ok();
    let mut response = IDENTITY.scope(identity, next.run(request)).await;
    if let Some(id) = id {
        response.headers_mut().insert(REQUEST_ID, id);
    }
    response
}

/// The action a request names that the store's own cannot tell: `PATCH` is `patch`, a `POST`
/// to a path ending in `/pause` or `:pause` (`/resume`, `:resume`) is `pause` (`resume`).
fn request_action(method: &Method, path: &str) -> Option<&'static str> {
    if *method == Method::PATCH {
        return Some("patch");
    }
    if *method != Method::POST {
        return None;
    }
    let last = path.rsplit(['/', ':']).next().unwrap_or_default();
    match last {
        "pause" => Some("pause"),
        "resume" => Some("resume"),
        _ => None,
    }
}

/// The middleware, inside the token check, that runs a request that may change something
/// inside the store's audit scope ([module invariants](self)); reads pass as they are. The
/// actor is the [`Actor`] the token check left in the request's extensions, `anonymous` when
/// there is none (a server without tokens).
pub async fn record_changes(request: Request, next: Next) -> Response {
    if matches!(
        *request.method(),
        Method::GET | Method::HEAD | Method::OPTIONS
    ) {
        return next.run(request).await;
    }
    let identity = IDENTITY.try_with(Clone::clone).ok();
    let context = AuditContext {
        actor: request
            .extensions()
            .get::<Actor>()
            .cloned()
            .unwrap_or(Actor::Anonymous),
        request_id: identity.as_ref().map_or_else(
            || uuid::Uuid::now_v7().hyphenated().to_string(),
            |i| i.request_id.clone(),
        ),
        remote_addr: identity.and_then(|i| i.remote_addr),
        action: request_action(request.method(), request.uri().path()),
    };
    sundial_store::audit::scope(context, next.run(request)).await
}

/// The filters of a listing from its query.
///
/// # Errors
/// 400 naming `resource` (not a kind of [`RESOURCES`]), `name` or `actor` (not a name),
/// `since` (not an RFC 3339 instant), `limit` or `page_token`.
fn query(ns: String, q: &HashMap<String, String>) -> Result<AuditQuery, ApiError> {
    if let Some(r) = q.get("resource")
        && !RESOURCES.contains(&r.as_str())
    {
        return Err(ApiError::bad_request(
            "resource",
            format!("'{r}' is none of {}", RESOURCES.join(", ")),
        ));
    }
    for field in ["name", "actor"] {
        if let Some(v) = q.get(field)
            && (v.is_empty() || v.len() > 253 || v.chars().any(char::is_control))
        {
            return Err(ApiError::bad_request(
                field,
                "must be 1 to 253 characters, none a control character",
            ));
        }
    }
    let since = q
        .get("since")
        .map(|s| {
            s.parse::<jiff::Timestamp>().map_err(|e| {
                ApiError::bad_request("since", format!("'{s}' is not an RFC 3339 instant: {e}"))
            })
        })
        .transpose()?;
    // The store keeps instants as milliseconds; jiff's range is wider at its ends.
    if let Some(t) = since
        && jiff::Timestamp::from_millisecond(t.as_millisecond()).is_err()
    {
        return Err(ApiError::bad_request("since", "is out of range"));
    }
    let cursor = q
        .get("page_token")
        .map(|t| {
            t.parse::<i64>().ok().filter(|id| *id > 0).ok_or_else(|| {
                ApiError::bad_request("page_token", "is not a page token from this API")
            })
        })
        .transpose()?;
    Ok(AuditQuery {
        namespace: ns,
        resource: q.get("resource").cloned(),
        name: q.get("name").cloned(),
        actor: q.get("actor").cloned(),
        since,
        cursor,
        ascending: false,
        limit: limit(q.get("limit").map(String::as_str))?,
    })
}

/// `GET /v1/namespaces/{ns}/audit?resource=&name=&actor=&since=&limit=&page_token=`: the
/// namespace's audit log, newest first.
#[utoipa::path(
    get,
    path = "/v1/namespaces/{ns}/audit",
    tag = "audit",
    summary = "The namespace's audit log, newest first",
    params(("ns" = String, Path, description = "Namespace"), ("resource" = Option<String>, Query, description = "Only entries of this kind: job, workflow, calendar, secret, execution, run, backfill, namespace"), ("name" = Option<String>, Query, description = "Only entries of resources of this name (an execution's, run's or backfill's id)"), ("actor" = Option<String>, Query, description = "Only entries by this token name, or anonymous"), ("since" = Option<String>, Query, description = "Only entries at or after this RFC 3339 instant"), ("limit" = Option<u32>, Query, description = "Page size, 1 to 1000 (default 100)"), ("page_token" = Option<String>, Query, description = "The next_page_token of the previous page")),
    responses((status = 200, description = "A page of entries", body = crate::resource::Page<sundial_store::audit::AuditEntry>), crate::openapi::Problems)
)]
pub(crate) async fn list(
    State(state): State<AppState>,
    Path(ns): Path<String>,
    Query(q): Query<HashMap<String, String>>,
) -> Result<Response, ApiError> {
    known_params(
        &q,
        &["resource", "name", "actor", "since", "limit", "page_token"],
    )?;
    crate::jobs::check_path(&ns, None)?;
    let query = query(ns, &q)?;
    let items = state.store.audit_list(&query).await?;
    let next = (items.len() == query.limit as usize)
        .then(|| items.last().map(|e| e.id.to_string()))
        .flatten();
    Ok(Json(json!({"items": items, "next_page_token": next})).into_response())
}

/// What a verification found.
#[derive(Debug, serde::Serialize, utoipa::ToSchema)]
pub struct Verified {
    /// True when every entry kept verifies.
    pub ok: bool,
    /// How many entries were checked (up to the first bad one).
    pub entries: u64,
    /// The first entry that breaks the chain, if any.
    pub first_bad: Option<ChainBreak>,
}

/// `GET /v1/namespaces/{ns}/audit:verify`: recomputes the namespace's chain from the store,
/// oldest entry first ([`Verifier`]), and names the first entry that breaks it.
#[utoipa::path(
    get,
    path = "/v1/namespaces/{ns}/audit:verify",
    tag = "audit",
    summary = "Recompute the namespace's audit chain",
    params(("ns" = String, Path, description = "Namespace")),
    responses((status = 200, description = "Whether the chain is whole, and its first bad entry", body = Verified), crate::openapi::Problems)
)]
pub(crate) async fn verify(
    State(state): State<AppState>,
    Path(ns): Path<String>,
    Query(q): Query<HashMap<String, String>>,
) -> Result<Json<Verified>, ApiError> {
    known_params(&q, &[])?;
    crate::jobs::check_path(&ns, None)?;
    let mut verifier = Verifier::default();
    let mut query = AuditQuery {
        namespace: ns,
        ascending: true,
        limit: VERIFY_PAGE,
        ..Default::default()
    };
    loop {
        let page = state.store.audit_list(&query).await?;
        if let Err(bad) = verifier.check(&page) {
            return Ok(Json(Verified {
                ok: false,
                entries: verifier.checked,
                first_bad: Some(bad),
            }));
        }
        match page.last() {
            Some(last) if page.len() == VERIFY_PAGE as usize => query.cursor = Some(last.id),
            _ => break,
        }
    }
    Ok(Json(Verified {
        ok: true,
        entries: verifier.checked,
        first_bad: None,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_request_names_the_actions_the_store_cannot_tell() {
        let p = "/v1/namespaces/a/jobs/b";
        assert_eq!(request_action(&Method::PATCH, p), Some("patch"));
        assert_eq!(
            request_action(&Method::POST, &format!("{p}/pause")),
            Some("pause")
        );
        assert_eq!(
            request_action(&Method::POST, &format!("{p}/resume")),
            Some("resume")
        );
        assert_eq!(
            request_action(&Method::POST, "/v1/namespaces/a:pause"),
            Some("pause")
        );
        assert_eq!(request_action(&Method::POST, &format!("{p}/trigger")), None);
        assert_eq!(request_action(&Method::PUT, p), None);
        // A job named `pause` is written, not paused.
        assert_eq!(
            request_action(&Method::PUT, "/v1/namespaces/a/jobs/pause"),
            None
        );
    }
}
