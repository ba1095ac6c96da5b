//! The web UI (README.md, "The dashboard"): `/ui/`, HTML rendered by the server with maud, usable without
//! JavaScript; htmx (embedded, `/ui/assets/htmx.min.js`) only refreshes the live parts, and
//! only while the tab is visible.
//!
//! Invariants:
//! - Every value a user wrote (names, labels, descriptions, targets, error texts) reaches the
//!   page through maud's escaping; nothing user-written is ever `PreEscaped`.
//! - Every action (pause, resume, trigger, cancel, retry, re-drive) is a POST form, and is
//!   carried out by sending the same request to the `/v1` API in-process, with the
//!   session's token: the API's validation, roles and namespaces apply exactly, and the UI
//!   has no write path of its own.
//! - A POST whose `Origin` (or, without one, `Referer`) is not this server's own is refused
//!   (403) before anything runs, tokens or not.
//! - With tokens configured, every page needs the session cookie (`sundial_token`: HttpOnly,
//!   SameSite=Strict, Path=/ui) holding a token the server knows, set by the login form;
//!   reads show only the token's namespaces, and a viewer's pages carry no action forms.
//! - Instants are shown in UTC (ISO 8601 with milliseconds), with the job's zone alongside
//!   where it has one.

mod audit_page;
mod pages;
mod workflow_pages;

use axum::Router;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{Html, IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use maud::{DOCTYPE, Markup, html};
use tower::ServiceExt;

use crate::AppState;
use crate::auth::{Namespaces, Role};

/// The embedded htmx (2.0.11, Zero-Clause BSD: `crates/api/assets/htmx-LICENSE`).
const HTMX: &str = include_str!("../../assets/htmx-2.0.11.min.js");

/// The session cookie's name.
pub const COOKIE: &str = "sundial_token";

tokio::task_local! {
    /// Whether the request being answered carries a signed-in session (tokens configured and
    /// a known token in the cookie), set by [`guard`] around the handler: [`page`] shows
    /// "Sign out" only then. Outside the guard's scope (the login page, the guard's own
    /// refusals) it reads as not signed in.
    static SIGNED_IN: bool;
}

/// What the UI needs besides the API's state: the `/v1` router its actions go through.
#[derive(Clone)]
pub(crate) struct Ui {
    pub(crate) app: AppState,
    pub(crate) api: Router,
}

/// What the request's session may do: its token (sent along with actions), whether it may
/// write, and its namespaces. Without tokens configured: everything, no token.
#[derive(Debug, Clone)]
pub(crate) struct Session {
    pub(crate) token: Option<String>,
    pub(crate) writes: bool,
    pub(crate) namespaces: Namespaces,
}

impl Session {
    /// 403 unless the session may touch `ns`.
    pub(crate) fn check(&self, ns: &str) -> Result<(), Refusal> {
        if self.namespaces.allows(ns) {
            Ok(())
        } else {
            Err(Refusal(
                StatusCode::FORBIDDEN,
                format!("this token may not act in namespace '{ns}'"),
            ))
        }
    }
}

/// A page refused before anything was read: its status and why, shown as a page.
#[derive(Debug)]
pub(crate) struct Refusal(pub(crate) StatusCode, pub(crate) String);

impl IntoResponse for Refusal {
    fn into_response(self) -> Response {
        (
            self.0,
            page("Refused", None, html! { p.error { (self.1) } }),
        )
            .into_response()
    }
}

/// The `/ui` routes, over `api` (the `/v1` router, with its token check) for actions.
pub(crate) fn router(app: AppState, api: Router) -> Router {
    let ui = Ui { app, api };
    Router::new()
        .route("/ui", get(|| async { Redirect::permanent("/ui/") }))
        .route("/ui/", get(pages::overview))
        .route("/ui/login", get(login_form).post(login))
        .route("/ui/logout", post(logout))
        .route("/ui/assets/htmx.min.js", get(htmx))
        .route("/ui/namespaces/{ns}/jobs", get(pages::jobs))
        .route("/ui/namespaces/{ns}/jobs/{name}", get(pages::job))
        .route(
            "/ui/namespaces/{ns}/jobs/{name}/{action}",
            post(pages::job_action),
        )
        .route(
            "/ui/namespaces/{ns}/{kind}/{name}/backfills/{id}/cancel",
            post(pages::backfill_cancel),
        )
        .route("/ui/namespaces/{ns}/executions/{id}", get(pages::execution))
        .route(
            "/ui/namespaces/{ns}/executions/{id}/{action}",
            post(pages::execution_action),
        )
        .route("/ui/namespaces/{ns}/dead-letters", get(pages::dead_letters))
        .route("/ui/namespaces/{ns}/calendars", get(pages::calendars))
        .route("/ui/namespaces/{ns}/audit", get(audit_page::audit))
        .route(
            "/ui/namespaces/{ns}/dead-letters/redrive",
            post(pages::redrive),
        )
        .route(
            "/ui/namespaces/{ns}/workflows",
            get(workflow_pages::workflows),
        )
        .route(
            "/ui/namespaces/{ns}/workflows/{name}",
            get(workflow_pages::workflow),
        )
        .route(
            "/ui/namespaces/{ns}/workflows/{name}/{action}",
            post(workflow_pages::workflow_action),
        )
        .route("/ui/namespaces/{ns}/runs/{id}", get(workflow_pages::run))
        .route(
            "/ui/namespaces/{ns}/runs/{id}/{action}",
            post(workflow_pages::run_action),
        )
        .route("/ui/cluster", get(pages::cluster))
        .layer(axum::middleware::from_fn_with_state(ui.clone(), guard))
        .with_state(ui)
}

async fn htmx() -> Response {
    (
        [
            (header::CONTENT_TYPE, "text/javascript; charset=utf-8"),
            (header::CACHE_CONTROL, "public, max-age=86400"),
        ],
        HTMX,
    )
        .into_response()
}

/// The UI's gate (module invariants): the Origin check of every POST, then the session.
async fn guard(State(ui): State<Ui>, mut request: Request, next: Next) -> Response {
    let path = request.uri().path().to_owned();
    if request.method() != Method::GET
        && request.method() != Method::HEAD
        && !same_origin(request.headers())
    {
        return forbidden("a form of this server's own pages must send this request");
    }
    if path == "/ui/login" || path == "/ui/assets/htmx.min.js" || path == "/ui" {
        return next.run(request).await;
    }
    let session = match &ui.app.tokens {
        None => Session {
            token: None,
            writes: true,
            namespaces: Namespaces::All,
        },
        Some(tokens) => {
            let presented = cookie(request.headers(), COOKIE);
            match presented
                .as_deref()
                .and_then(|t| tokens.grant(t).map(|g| (t, g)))
            {
                Some((token, (role, namespaces))) => Session {
                    token: Some(token.to_owned()),
                    writes: role != Role::Viewer,
                    namespaces: namespaces.clone(),
                },
                None => return Redirect::to("/ui/login").into_response(),
            }
        }
    };
    if request.method() == Method::POST && !session.writes && path != "/ui/logout" {
        return forbidden("a viewer token may only read");
    }
    let signed_in = session.token.is_some();
    request.extensions_mut().insert(session);
    SIGNED_IN.scope(signed_in, next.run(request)).await
}

/// True when the request's `Origin` (or, without one, its `Referer`) names the host it was
/// sent to: a form of this server's own pages.
fn same_origin(headers: &HeaderMap) -> bool {
    let Some(host) = headers.get(header::HOST).and_then(|h| h.to_str().ok()) else {
        return false;
    };
    let authority = |url: &str| -> Option<String> {
        let rest = url
            .strip_prefix("https://")
            .or_else(|| url.strip_prefix("http://"))?;
        Some(rest.split('/').next().unwrap_or("").to_owned())
    };
    if let Some(origin) = headers.get(header::ORIGIN) {
        return origin
            .to_str()
            .ok()
            .and_then(authority)
            .is_some_and(|a| a == host);
    }
    headers
        .get(header::REFERER)
        .and_then(|r| r.to_str().ok())
        .and_then(authority)
        .is_some_and(|a| a == host)
}

/// The value of cookie `name`, percent-decoded.
fn cookie(headers: &HeaderMap, name: &str) -> Option<String> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| {
            form_urlencoded::parse(format!("v={v}").as_bytes())
                .next()
                .map(|(_, v)| v.into_owned())
                .unwrap_or_default()
        })
}

/// 403 as a page.
pub(crate) fn forbidden(why: &str) -> Response {
    (
        StatusCode::FORBIDDEN,
        page("Forbidden", None, html! { p.error { (why) } }),
    )
        .into_response()
}

async fn login_form(State(ui): State<Ui>) -> Response {
    if ui.app.tokens.is_none() {
        return Redirect::to("/ui/").into_response();
    }
    page("Sign in", None, login_markup(None)).into_response()
}

fn login_markup(error: Option<&str>) -> Markup {
    html! {
        @if let Some(e) = error { p.error { (e) } }
        form method="post" action="/ui/login" {
            label { "API token " input type="password" name="token" autocomplete="current-password" required; }
            " " button type="submit" { "Sign in" }
        }
        p.muted { "The token is kept in an HttpOnly cookie of this site only." }
    }
}

async fn login(State(ui): State<Ui>, body: axum::body::Bytes) -> Response {
    let Some(tokens) = &ui.app.tokens else {
        return Redirect::to("/ui/").into_response();
    };
    let token = form_urlencoded::parse(&body)
        .find(|(k, _)| k == "token")
        .map(|(_, v)| v.trim().to_owned())
        .unwrap_or_default();
    if tokens.grant(&token).is_none() {
        return (
            StatusCode::UNAUTHORIZED,
            page(
                "Sign in",
                None,
                login_markup(Some("That token is not one this server knows.")),
            ),
        )
            .into_response();
    }
    let value: String = form_urlencoded::byte_serialize(token.as_bytes()).collect();
    let mut response = Redirect::to("/ui/").into_response();
    if let Ok(v) = HeaderValue::from_str(&format!(
        "{COOKIE}={value}; HttpOnly; SameSite=Strict; Path=/ui"
    )) {
        response.headers_mut().insert(header::SET_COOKIE, v);
    }
    response
}

async fn logout() -> Response {
    let mut response = Redirect::to("/ui/login").into_response();
    response.headers_mut().insert(
        header::SET_COOKIE,
        HeaderValue::from_static("sundial_token=; HttpOnly; SameSite=Strict; Path=/ui; Max-Age=0"),
    );
    response
}

/// Sends `method path` (with a JSON `body`) to the `/v1` API in-process, with the session's
/// token, and answers the browser with a redirect to `back` on success, or the API's problem
/// as a page.
pub(crate) async fn act(
    ui: &Ui,
    session: &Session,
    method: Method,
    path: &str,
    body: Option<serde_json::Value>,
    back: &str,
) -> Response {
    match call_api(ui, session, method, path, body).await {
        Ok(_) => Redirect::to(back).into_response(),
        Err((status, detail)) => (
            status,
            page(
                "Not done",
                None,
                html! { p.error { (detail) } p { a href=(back) { "Back" } } },
            ),
        )
            .into_response(),
    }
}

/// The API's answer to `method path`: its JSON on success, else its status and problem
/// detail.
pub(crate) async fn call_api(
    ui: &Ui,
    session: &Session,
    method: Method,
    path: &str,
    body: Option<serde_json::Value>,
) -> Result<serde_json::Value, (StatusCode, String)> {
    let mut request = axum::http::Request::builder().method(method).uri(path);
    if let Some(token) = &session.token {
        request = request.header(header::AUTHORIZATION, format!("Bearer {token}"));
    }
    if body.is_some() {
        request = request.header(header::CONTENT_TYPE, "application/json");
    }
    let request = request
        .body(body.map_or_else(Body::empty, |b| Body::from(b.to_string())))
        .map_err(|e| (StatusCode::BAD_REQUEST, e.to_string()))?;
    let response = ui
        .api
        .clone()
        .oneshot(request)
        .await
        .map_err(|e| (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))?;
    let status = response.status();
    let bytes = axum::body::to_bytes(response.into_body(), 16 << 20)
        .await
        .map_err(|e| (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))?;
    let value: serde_json::Value = serde_json::from_slice(&bytes).unwrap_or_default();
    if status.is_success() {
        Ok(value)
    } else {
        Err((
            status,
            value["detail"]
                .as_str()
                .unwrap_or("the request failed")
                .to_owned(),
        ))
    }
}

const STYLE: &str = "
body{font:14px/1.45 system-ui,sans-serif;margin:0;color:#1d2330;background:#f6f7f9}
header{background:#1d2330;color:#fff;padding:.6em 1.2em;display:flex;gap:1.2em;align-items:center}
header a{color:#cfe0ff;text-decoration:none}header .brand{font-weight:600;color:#fff}
main{padding:1em 1.2em;max-width:1200px}
table{border-collapse:collapse;width:100%;background:#fff}
th,td{text-align:left;padding:.35em .6em;border-bottom:1px solid #e3e6ea;vertical-align:top}
th{background:#eef1f5;font-weight:600}
.state{display:inline-block;padding:0 .5em;border-radius:.6em;background:#e3e6ea;font-size:.9em}
.state-succeeded,.state-active{background:#d8f3dc}.state-failed,.state-dead{background:#ffd6d6}
.state-running,.state-queued{background:#d6e6ff}.state-cancelled,.state-skipped,.state-missed,.state-paused{background:#eee}
.error{color:#a40000}.muted{color:#6b7280}
form.inline{display:inline}button{cursor:pointer}
.cards{display:flex;gap:1em;flex-wrap:wrap}.card{background:#fff;padding:.8em 1em;border:1px solid #e3e6ea;border-radius:6px;min-width:9em}
.card b{display:block;font-size:1.6em}
pre{background:#fff;border:1px solid #e3e6ea;padding:.8em;overflow:auto}
.shards{display:grid;grid-template-columns:repeat(64,1fr);gap:1px;max-width:960px}
.shards span{height:12px;background:#e3e6ea}
";

/// A whole page: the header (with the namespace `ns` when there is one, and "Sign out" when
/// the request has a signed-in session), `title`, `body`.
pub(crate) fn page(title: &str, ns: Option<&str>, body: Markup) -> Html<String> {
    let signed_in = SIGNED_IN.try_with(|s| *s).unwrap_or(false);
    Html(
        html! {
            (DOCTYPE)
            html lang="en" {
                head {
                    meta charset="utf-8";
                    meta name="viewport" content="width=device-width, initial-scale=1";
                    title { (title) " · Sundial" }
                    style { (maud::PreEscaped(STYLE)) }
                    script src="/ui/assets/htmx.min.js" defer {}
                }
                body {
                    header {
                        a.brand href="/ui/" { "Sundial" }
                        @if let Some(ns) = ns {
                            a href={ "/ui/namespaces/" (ns) "/jobs" } { "Jobs" }
                            a href={ "/ui/namespaces/" (ns) "/workflows" } { "Workflows" }
                            a href={ "/ui/namespaces/" (ns) "/dead-letters" } { "Dead letters" }
                            a href={ "/ui/namespaces/" (ns) "/calendars" } { "Calendars" }
                            a href={ "/ui/namespaces/" (ns) "/audit" } { "Audit" }
                            span.muted { "namespace " (ns) }
                        }
                        a href="/ui/cluster" { "Cluster" }
                        @if signed_in {
                            form.inline method="post" action="/ui/logout" { button type="submit" { "Sign out" } }
                        }
                    }
                    main {
                        h1 { (title) }
                        (body)
                    }
                }
            }
        }
        .into_string(),
    )
}

/// An instant as the UI shows it: UTC with milliseconds, `-` for none.
pub(crate) fn when(t: Option<jiff::Timestamp>) -> String {
    t.map_or_else(
        || "-".to_owned(),
        |t| format!("{}", t.strftime("%Y-%m-%dT%H:%M:%S%.3fZ")),
    )
}

/// A state as a badge.
pub(crate) fn badge(state: &str) -> Markup {
    html! { span class={ "state state-" (state) } { (state) } }
}
