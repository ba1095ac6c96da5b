//! The audit log's page (docs/security.md, "Audit log"): who changed what in a namespace,
//! newest first, optionally of one resource ("who changed this", linked from each job's and
//! workflow's page), by one actor or since an instant, a page of [`PAGE`] entries at a time.
//! A parameter it does not take, or one it cannot read, is refused (400) naming it.

use std::collections::HashMap;

use axum::Extension;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use maud::html;
use sundial_store::audit::{Actor, AuditQuery};

use super::pages::{PAGE, gate, problem, query_gate};
use super::{Refusal, Session, Ui, page, when};

/// `GET /ui/namespaces/{ns}/audit?resource=&name=&actor=&since=&before=`: the namespace's
/// audit log,
/// newest first; with `resource` and `name`, one resource's entries.
pub(crate) async fn audit(
    State(ui): State<Ui>,
    Extension(session): Extension<Session>,
    Path(ns): Path<String>,
    Query(q): Query<HashMap<String, String>>,
) -> Response {
    if let Err(r) = gate(&session, Some(ns.as_str()), &[]) {
        return r.into_response();
    }
    if let Err(r) = query_gate(&q) {
        return r.into_response();
    }
    let nonempty = |k: &str| q.get(k).filter(|v| !v.is_empty()).cloned();
    let (resource, name, actor) = (nonempty("resource"), nonempty("name"), nonempty("actor"));
    if let Some(unknown) = q
        .keys()
        .find(|k| !["resource", "name", "actor", "since", "before"].contains(&k.as_str()))
    {
        return Refusal(
            StatusCode::BAD_REQUEST,
            format!("This page takes no parameter '{unknown}'."),
        )
        .into_response();
    }
    for (field, value) in [("name", &name), ("actor", &actor)] {
        if value
            .as_ref()
            .is_some_and(|v| v.len() > 253 || v.chars().any(char::is_control))
        {
            return Refusal(
                StatusCode::BAD_REQUEST,
                format!(
                    "The {field} filter must be up to 253 characters, none a control character."
                ),
            )
            .into_response();
        }
    }
    let since = match nonempty("since").map(|t| t.parse::<jiff::Timestamp>()) {
        None => None,
        Some(Ok(t)) => Some(t),
        Some(Err(_)) => {
            return Refusal(
                StatusCode::BAD_REQUEST,
                "The parameter 'since' is not an RFC 3339 instant (2026-12-07T00:00:00Z).".into(),
            )
            .into_response();
        }
    };
    if let Some(r) = &resource
        && !crate::audit::RESOURCES.contains(&r.as_str())
    {
        return Refusal(
            StatusCode::BAD_REQUEST,
            format!(
                "The resource filter '{r}' is none of {}.",
                crate::audit::RESOURCES.join(", ")
            ),
        )
        .into_response();
    }
    let before = match nonempty("before").map(|b| b.parse::<i64>()) {
        None => None,
        Some(Ok(id)) => Some(id),
        Some(Err(_)) => {
            return Refusal(
                StatusCode::BAD_REQUEST,
                "The parameter 'before' is not an entry id.".into(),
            )
            .into_response();
        }
    };
    let query = AuditQuery {
        namespace: ns.clone(),
        resource: resource.clone(),
        name: name.clone(),
        actor: actor.clone(),
        since,
        cursor: before,
        limit: PAGE,
        ..Default::default()
    };
    let entries = match ui.app.store.audit_list(&query).await {
        Ok(e) => e,
        Err(e) => return problem(e),
    };
    let title = match (&resource, &name) {
        (Some(r), Some(n)) => format!("Who changed {r} {n}"),
        _ => format!("Audit log of {ns}"),
    };
    let mut query = form_urlencoded::Serializer::new(String::new());
    for (key, value) in [("resource", &resource), ("name", &name), ("actor", &actor)] {
        if let Some(v) = value {
            query.append_pair(key, v);
        }
    }
    if let Some(t) = since {
        query.append_pair("since", &t.to_string());
    }
    let filter = query.finish();
    let body = html! {
        p.muted {
            "Every change made through the API, the CLI or this UI, recorded with the change. "
            code { "sundial audit verify -n " (ns) } " checks that no entry was changed or removed."
        }
        @if entries.is_empty() {
            p.muted { "No changes recorded." }
        } @else {
            table {
                tr { th { "#" } th { "at (UTC)" } th { "who" } th { "action" } th { "what" } th { "version" } th { "request" } }
                @for e in &entries {
                    tr {
                        td { (e.id) }
                        td { (when(Some(e.at))) }
                        td {
                            @match &e.actor {
                                Actor::Token { name, role } => { (name) span.muted { " (" (role) ")" } }
                                Actor::Anonymous => { span.muted { "anonymous" } }
                            }
                        }
                        td { (e.action) }
                        td {
                            (e.resource) " "
                            @match e.resource.as_str() {
                                "job" => { a href={ "/ui/namespaces/" (ns) "/jobs/" (e.name) } { (e.name) } }
                                "workflow" => { a href={ "/ui/namespaces/" (ns) "/workflows/" (e.name) } { (e.name) } }
                                "execution" => { a href={ "/ui/namespaces/" (ns) "/executions/" (e.name) } { (e.name) } }
                                "run" => { a href={ "/ui/namespaces/" (ns) "/runs/" (e.name) } { (e.name) } }
                                _ => { (e.name) }
                            }
                        }
                        td {
                            @match (e.version_before, e.version_after) {
                                (Some(b), Some(a)) if a != b => { (b) " → " (a) }
                                (_, Some(a)) => { (a) }
                                (Some(b), None) => { (b) " → deleted" }
                                (None, None) => { "-" }
                            }
                        }
                        td { code { (e.request_id) } @if let Some(addr) = &e.remote_addr { br; span.muted { (addr) } } }
                    }
                }
            }
        }
        @if entries.len() == PAGE as usize {
            @if let Some(last) = entries.last() {
                p { a href={ "?before=" (last.id) "&" (filter) } { "Older →" } }
            }
        }
    };
    page(&title, Some(&ns), body).into_response()
}
