//! The pages of the UI (README.md, "The dashboard"), one handler each, and their actions. Reads go to the
//! store as the API's do (one page of a listing at a time, paged by the same tokens); writes
//! go through the API ([`super::act`]).

use std::collections::HashMap;

use axum::Extension;
use axum::extract::{Path, Query, State};
use axum::http::{Method, StatusCode};
use axum::response::{IntoResponse, Response};
use maud::{Markup, html};
use sundial_core::calendar::ExclusionSpec;
use sundial_core::execution::ExecutionState;
use sundial_core::job::ScheduleKind;
use sundial_store::{ExecutionListQuery, ExecutionRecord, JobListQuery};

use super::{Refusal, Session, Ui, act, badge, forbidden, page, when};
use crate::error::ApiError;

/// Rows per page of a listing.
pub(super) const PAGE: u32 = 50;

pub(super) fn problem(e: impl Into<ApiError>) -> Response {
    let e: ApiError = e.into();
    (
        e.status,
        page("Error", None, html! { p.error { (e.detail) } }),
    )
        .into_response()
}

/// Only the names and ids the API would accept reach a store call or a URL.
/// The query parameters of a page: none may hold the NUL character, which no store keeps the
/// same way (`sundial_core::validate::nul_characters`); 400 naming the parameter.
pub(super) fn query_gate(q: &HashMap<String, String>) -> Result<(), Refusal> {
    match q.iter().find(|(k, v)| k.contains('\0') || v.contains('\0')) {
        Some((k, _)) => Err(Refusal(
            StatusCode::BAD_REQUEST,
            format!(
                "The parameter '{}' holds the NUL character.",
                k.replace('\0', "\\0")
            ),
        )),
        None => Ok(()),
    }
}

fn plain(segment: &str) -> Result<(), Refusal> {
    let ok = !segment.is_empty()
        && !segment.chars().all(|c| c == '.')
        && segment.len() <= 128
        && segment
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
    if ok {
        Ok(())
    } else {
        Err(Refusal(StatusCode::NOT_FOUND, "No such page.".into()))
    }
}

/// The gate of a page or action: every path segment plain ([`plain`]) and, with `ns`, the
/// session allowed in that namespace.
pub(super) fn gate(session: &Session, ns: Option<&str>, segments: &[&str]) -> Result<(), Refusal> {
    for segment in ns.iter().chain(segments) {
        plain(segment)?;
    }
    // A namespace that no name rule admits cannot exist (`/v1` answers 400 for it).
    if let Some(ns) = ns
        && let Err(why) = sundial_core::names::check_name(ns)
    {
        return Err(Refusal(
            StatusCode::NOT_FOUND,
            format!("No namespace can be named '{ns}': it {why}."),
        ));
    }
    ns.map_or(Ok(()), |ns| session.check(ns))
}

/// The live part of a page: htmx fetches the page again every 2 s and swaps this element,
/// only while the tab is visible.
pub(super) fn live(id: &str, body: Markup) -> Markup {
    html! {
        div id=(id) hx-get="" hx-select={ "#" (id) } hx-swap="outerHTML"
            hx-trigger="every 2s [document.visibilityState === 'visible']" {
            (body)
        }
    }
}

/// `GET /ui/`: executions by state, dead letters and queue depth per namespace, nodes.
pub(crate) async fn overview(
    State(ui): State<Ui>,
    Extension(session): Extension<Session>,
) -> Response {
    let status = match ui.app.store.cluster_status().await {
        Ok(s) => s,
        Err(e) => return problem(e),
    };
    let namespaces: Vec<String> = match ui.app.store.namespace_list().await {
        Ok(n) => n
            .into_iter()
            .filter(|n| session.namespaces.allows(n))
            .collect(),
        Err(e) => return problem(e),
    };
    let dead_total: u64 = status
        .dead_by_namespace
        .iter()
        .filter(|(ns, _)| session.namespaces.allows(ns))
        .map(|(_, n)| n)
        .sum();
    let body = html! {
        (live("overview", html! {
            div.cards {
                div.card { b { (status.queued) } "queued" }
                div.card { b { (status.running) } "running" }
                div.card { b { (status.scheduled) } "scheduled ahead" }
                div.card { b { (dead_total) } "dead letters" }
                div.card { b { (status.nodes.iter().filter(|n| n.live).count()) } "live nodes" }
            }
            h2 { "Namespaces" }
            table {
                tr { th { "namespace" } th { "queue depth" } th { "dead letters" } th {} }
                @for ns in &namespaces {
                    tr {
                        td { a href={ "/ui/namespaces/" (ns) "/jobs" } { (ns) } }
                        td { (status.queued_by_namespace.get(ns).copied().unwrap_or(0)) }
                        td { (status.dead_by_namespace.get(ns).copied().unwrap_or(0)) }
                        td { a href={ "/ui/namespaces/" (ns) "/dead-letters" } { "dead letters" } }
                    }
                }
            }
            @if namespaces.is_empty() { p.muted { "No jobs or workflows yet." } }
            p.muted { "Store time " (when(Some(status.now))) " (UTC)" }
        }))
    };
    page("Overview", None, body).into_response()
}

/// Each job's next fire time as the API shows it: calendars' days left out.
async fn next_fires_of<'a>(
    ui: &Ui,
    ns: &str,
    jobs: impl Iterator<
        Item = (
            &'a sundial_core::job::ScheduleSpec,
            &'a sundial_store::JobRecord,
        ),
    >,
) -> Result<Vec<Option<jiff::Timestamp>>, Response> {
    let jobs: Vec<_> = jobs.collect();
    if jobs.iter().all(|(s, _)| s.exclude_calendars.is_empty()) {
        return Ok(jobs.iter().map(|(_, j)| j.upcoming_fire_at()).collect());
    }
    let cals = crate::jobs::ns_calendars(&ui.app, ns)
        .await
        .map_err(IntoResponse::into_response)?;
    let now = ui.app.store.now().await.map_err(problem)?;
    Ok(jobs
        .iter()
        .map(|(_, j)| crate::resource::job_resource(j, false, now, &cals).next_fire_at)
        .collect())
}

/// A schedule in words: the cron describer's, with the zone; `every …`; `once at …`.
pub(super) fn schedule_words(kind: &ScheduleKind) -> String {
    match kind {
        ScheduleKind::Cron { cron, timezone, .. } => match sundial_cron::Cron::parse(cron) {
            Ok(c) => format!("{} ({timezone})", c.describe()),
            Err(_) => format!("{cron} ({timezone})"),
        },
        ScheduleKind::Every { every } => format!("every {every}"),
        ScheduleKind::At { at } => format!("once at {}", when(Some(*at))),
    }
}

/// `GET /ui/namespaces/{ns}/jobs?paused=&label=&after=`: the namespace's jobs by name, a
/// page at a time; the filters live in the URL.
pub(crate) async fn jobs(
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
    let paused = match q.get("paused").map(String::as_str) {
        Some("true") => Some(true),
        Some("false") => Some(false),
        _ => None,
    };
    let label = q
        .get("label")
        .and_then(|l| l.split_once('='))
        .map(|(k, v)| (k.to_owned(), v.to_owned()));
    let listed = ui
        .app
        .store
        .job_list(&JobListQuery {
            namespace: ns.clone(),
            paused,
            label: label.clone(),
            after_name: q.get("after").cloned(),
            limit: PAGE,
        })
        .await;
    let jobs = match listed {
        Ok(j) => j,
        Err(e) => return problem(e),
    };
    let next = (jobs.len() == PAGE as usize)
        .then(|| jobs.last().map(|j| j.spec.name.clone()))
        .flatten();
    let keep = |after: &str| -> String {
        let mut query = form_urlencoded::Serializer::new(String::new());
        if let Some(p) = paused {
            query.append_pair("paused", if p { "true" } else { "false" });
        }
        if let Some((k, v)) = &label {
            query.append_pair("label", &format!("{k}={v}"));
        }
        query.append_pair("after", after);
        query.finish()
    };
    // Calendars leave their days out of the next fire time (docs/time.md, "Calendars").
    let next_fires = match next_fires_of(&ui, &ns, jobs.iter().map(|j| (&j.spec.schedule, j))).await
    {
        Ok(n) => n,
        Err(r) => return r,
    };
    let body = html! {
        form method="get" {
            label { "state " select name="paused" {
                option value="" selected[paused.is_none()] { "any" }
                option value="false" selected[paused == Some(false)] { "active" }
                option value="true" selected[paused == Some(true)] { "paused" }
            } }
            " " label { "label " input name="label" placeholder="key=value" value=[q.get("label")]; }
            " " button type="submit" { "Filter" }
        }
        table {
            tr { th { "name" } th { "schedule" } th { "state" } th { "next fire (UTC)" } th { "last result" } }
            @for (j, next) in jobs.iter().zip(&next_fires) {
                tr {
                    td { a href={ "/ui/namespaces/" (ns) "/jobs/" (j.spec.name) } { (j.spec.name) } }
                    td { (schedule_words(&j.spec.schedule.kind)) }
                    td { (badge(j.state())) }
                    td { (when(*next)) }
                    td { @if let Some(last) = &j.last_execution {
                        a href={ "/ui/namespaces/" (ns) "/executions/" (last.id) } { (badge(last.state.as_str())) }
                    } @else { "-" } }
                }
            }
        }
        @if jobs.is_empty() { p.muted { "No jobs match." } }
        @if let Some(after) = next { p { a href={ "?" (keep(&after)) } { "Next page →" } } }
    };
    page("Jobs", Some(&ns), body).into_response()
}

/// `GET /ui/namespaces/{ns}/jobs/{name}?before=`: the definition, the next fire times and the
/// history, a page at a time; actions for a session that writes.
pub(crate) async fn job(
    State(ui): State<Ui>,
    Extension(session): Extension<Session>,
    Path((ns, name)): Path<(String, String)>,
    Query(q): Query<HashMap<String, String>>,
) -> Response {
    if let Err(r) = gate(&session, Some(ns.as_str()), &[name.as_str()]) {
        return r.into_response();
    }
    if let Err(r) = query_gate(&q) {
        return r.into_response();
    }
    let job = match ui.app.store.job_get(&ns, &name).await {
        Ok(Some(j)) => j,
        Ok(None) => return problem(ApiError::not_found(format!("job {ns}/{name}"))),
        Err(e) => return problem(e),
    };
    let now = match ui.app.store.now().await {
        Ok(n) => n,
        Err(e) => return problem(e),
    };
    let calendars = match crate::jobs::ns_calendars(&ui.app, &ns).await {
        Ok(c) => c,
        Err(e) => return e.into_response(),
    };
    let resource = crate::resource::job_resource(&job, true, now, &calendars);
    let before = crate::executions::page_token(q.get("before"))
        .ok()
        .flatten();
    let history = match ui
        .app
        .store
        .execution_list(&ExecutionListQuery {
            namespace: ns.clone(),
            job: Some(name.clone()),
            state: None,
            before,
            limit: PAGE,
        })
        .await
    {
        Ok(h) => h,
        Err(e) => return problem(e),
    };
    let zone = match &job.spec.schedule.kind {
        ScheduleKind::Cron { timezone, .. } => Some(timezone.clone()),
        _ => None,
    };
    let in_zone = |t: jiff::Timestamp| -> String {
        zone.as_deref()
            .and_then(|z| jiff::tz::TimeZone::get(z).ok())
            .map(|tz| t.to_zoned(tz).strftime("%Y-%m-%d %H:%M:%S %Z").to_string())
            .unwrap_or_default()
    };
    let backfills = match ui
        .app
        .store
        .backfill_list(&ns, sundial_store::BackfillOf::Job, &name)
        .await
    {
        Ok(b) => b,
        Err(e) => return problem(e),
    };
    let mut shown = job.spec.clone();
    shown.target = sundial_core::secrets::mask_target(&shown.target);
    let definition = serde_json::to_string_pretty(&shown).unwrap_or_default();
    let base = format!("/ui/namespaces/{ns}/jobs/{name}");
    let body = html! {
        p { (badge(job.state())) " " (schedule_words(&job.spec.schedule.kind)) }
        @if !job.spec.schedule.exclude_calendars.is_empty() {
            p { "Not on the days of calendar" @if job.spec.schedule.exclude_calendars.len() > 1 { "s" } ": "
                @for (i, c) in job.spec.schedule.exclude_calendars.iter().enumerate() {
                    @if i > 0 { ", " } code { (c) }
                }
                @if job.spec.schedule.exclude_calendars.iter().any(|c| !calendars.contains_key(c)) {
                    span.muted { " (one of them does not exist: it excludes nothing)" }
                }
            }
        }
        @if !job.spec.description.is_empty() { p { (job.spec.description) } }
        p { a href={ "/ui/namespaces/" (ns) "/audit?resource=job&name=" (name) } { "Who changed this" } }
        @if !job.spec.labels.is_empty() {
            p { @for (k, v) in &job.spec.labels { span.state { (k) "=" (v) } " " } }
        }
        @if session.writes {
            p {
                @for action in ["pause", "resume", "trigger"] {
                    form.inline method="post" action={ (base) "/" (action) } {
                        button type="submit" { (action) }
                    }
                    " "
                }
            }
        }
        h2 { "Next fire times" }
        ul {
            @for t in resource.next_fire_times.as_deref().unwrap_or(&[]) {
                li { (when(Some(*t))) " UTC" @if zone.is_some() { span.muted { " · " (in_zone(*t)) } } }
            }
        }
        @if let Some(preview) = resource.dst_preview.as_deref().filter(|p| !p.is_empty()) {
            h2 { "Daylight saving time ahead" }
            table {
                tr { th { "change (UTC)" } th { "kind" } th { "wall times" } th { "slots around it" } }
                @for t in preview {
                    tr {
                        td { (when(Some(t.at))) " " span.muted { (t.offset_before) " → " (t.offset_after) } }
                        td { (t.kind) }
                        td { (t.local_from) " – " (t.local_to) " " span.muted { @if t.kind == "gap" { "skipped" } @else { "occur twice" } } }
                        td { @for s in &t.slots { (when(Some(*s))) " UTC" @if zone.is_some() { span.muted { " (" (in_zone(*s)) ")" } } br; } }
                    }
                }
            }
        }
        @if !backfills.is_empty() {
            h2 { "Backfills" }
            (backfills_table(&base, &backfills, session.writes))
        }
        h2 { "History" }
        (live("history", executions_table(&ns, &history, now)))
        @if history.len() == PAGE as usize {
            @if let Some(last) = history.last() {
                p { a href={ "?before=" (last.scheduled_at.as_millisecond()) "_" (last.id) } { "Older →" } }
            }
        }
        h2 { "Definition" }
        pre { (definition) }
    };
    page(&format!("Job {name}"), Some(&ns), body).into_response()
}

/// A job's backfills (docs/time.md, "Backfill"), newest first, with a cancel button for the
/// running ones when the session may write.
pub(super) fn backfills_table(
    base: &str,
    items: &[sundial_store::BackfillRecord],
    writes: bool,
) -> Markup {
    html! {
        table {
            tr { th { "backfill" } th { "slots from (UTC)" } th { "to" } th { "state" } th { "created" } th { "done already" } th { "remaining" } th { "per second" } @if writes { th {} } }
            @for b in items {
                tr {
                    td { (b.id) }
                    td { (when(Some(b.from))) }
                    td { (when(Some(b.to))) }
                    td { (badge(b.state.as_str())) @if let Some(r) = &b.reason { span.muted { " " (r) } } }
                    td { (b.created) }
                    td { (b.existing) }
                    td { (b.remaining()) }
                    td { (b.max_per_second) }
                    @if writes {
                        td {
                            @if b.state == sundial_store::BackfillState::Running {
                                form.inline method="post" action={ (base) "/backfills/" (b.id) "/cancel" } {
                                    button type="submit" { "cancel" }
                                }
                            }
                        }
                    }
                }
            }
        }
    }
}

/// `POST /ui/namespaces/{ns}/{jobs|workflows}/{name}/backfills/{id}/cancel`, through the API,
/// then back to the job's or workflow's page.
pub(crate) async fn backfill_cancel(
    State(ui): State<Ui>,
    Extension(session): Extension<Session>,
    Path((ns, kind, name, id)): Path<(String, String, String, String)>,
) -> Response {
    if let Err(r) = gate(&session, None, &[ns.as_str(), name.as_str(), id.as_str()]) {
        return r.into_response();
    }
    if !matches!(kind.as_str(), "jobs" | "workflows") {
        return forbidden("no such page");
    }
    act(
        &ui,
        &session,
        Method::POST,
        &format!("/v1/namespaces/{ns}/{kind}/{name}/backfills/{id}/cancel"),
        None,
        &format!("/ui/namespaces/{ns}/{kind}/{name}"),
    )
    .await
}

fn executions_table(ns: &str, items: &[ExecutionRecord], now: jiff::Timestamp) -> Markup {
    html! {
        table {
            tr { th { "execution" } th { "slot (UTC)" } th { "trigger" } th { "state" } th { "attempt" } th { "finished (UTC)" } }
            @for e in items {
                tr {
                    td { a href={ "/ui/namespaces/" (ns) "/executions/" (e.id) } { (e.id) } }
                    td { (when(Some(e.scheduled_at))) }
                    td { (e.trigger.as_str()) }
                    td { (badge(e.state.as_of(e.fire_at, now).as_str())) }
                    td { (e.attempt) "/" (e.max_attempts) }
                    td { (when(e.finished_at)) }
                }
            }
        }
        @if items.is_empty() { p.muted { "Nothing yet." } }
    }
}

/// `POST /ui/namespaces/{ns}/jobs/{name}/{pause|resume|trigger}`, through the API.
pub(crate) async fn job_action(
    State(ui): State<Ui>,
    Extension(session): Extension<Session>,
    Path((ns, name, action)): Path<(String, String, String)>,
) -> Response {
    schedule_action(&ui, &session, "jobs", &ns, &name, &action).await
}

/// Pause, resume or trigger the job or workflow (`kind`: `jobs` or `workflows`) `ns/name`
/// through the API, then back to its page.
pub(super) async fn schedule_action(
    ui: &Ui,
    session: &Session,
    kind: &str,
    ns: &str,
    name: &str,
    action: &str,
) -> Response {
    if let Err(r) = gate(session, None, &[ns, name]) {
        return r.into_response();
    }
    if !matches!(action, "pause" | "resume" | "trigger") {
        return forbidden("no such action");
    }
    act(
        ui,
        session,
        Method::POST,
        &format!("/v1/namespaces/{ns}/{kind}/{name}/{action}"),
        None,
        &format!("/ui/namespaces/{ns}/{kind}/{name}"),
    )
    .await
}

/// `GET /ui/namespaces/{ns}/executions/{id}`: the execution's times (scheduled → fired →
/// started → finished) and its attempts as a timeline.
pub(crate) async fn execution(
    State(ui): State<Ui>,
    Extension(session): Extension<Session>,
    Path((ns, id)): Path<(String, String)>,
) -> Response {
    if let Err(r) = gate(&session, Some(ns.as_str()), &[id.as_str()]) {
        return r.into_response();
    }
    let e = match ui.app.store.execution_get(&ns, &id).await {
        Ok(Some(e)) => e,
        Ok(None) => return problem(ApiError::not_found(format!("execution {ns}/{id}"))),
        Err(e) => return problem(e),
    };
    let now = ui.app.store.now().await.unwrap_or(e.fire_at);
    let state = e.state.as_of(e.fire_at, now);
    let base = format!("/ui/namespaces/{ns}/executions/{id}");
    let body = html! {
        (live("execution", html! {
            p { (badge(state.as_str())) " attempt " (e.attempt) " of " (e.max_attempts) " · "
                @if let Some(run) = &e.run_id { "task " (e.task.as_deref().unwrap_or("?")) " of run " (run) }
                @else { "job " a href={ "/ui/namespaces/" (ns) "/jobs/" (e.job) } { (e.job) } } }
            table {
                tr { th { "scheduled" } th { "fired" } th { "queued" } th { "started" } th { "finished" } }
                tr { td { (when(Some(e.scheduled_at))) } td { (when(Some(e.fire_at))) } td { (when(Some(e.queued_at))) }
                     td { (when(e.started_at)) } td { (when(e.finished_at)) } }
            }
            h2 { "Attempts" }
            table {
                tr { th { "#" } th { "worker" } th { "started (UTC)" } th { "finished (UTC)" } th { "duration" } th { "outcome" } th { "status" } th { "error" } }
                @for a in &e.attempts {
                    tr {
                        td { (a.attempt) } td { (a.worker) } td { (when(Some(a.started_at))) } td { (when(a.finished_at)) }
                        td { @if let Some(f) = a.finished_at { ((f.as_millisecond() - a.started_at.as_millisecond())) " ms" } @else { "-" } }
                        td { @if let Some(o) = a.outcome { (badge(o.as_str())) } @else { "running" } }
                        td { @if let Some(c) = a.status_code { (c) } }
                        td { @if let Some(err) = &a.error { code { (err) } } }
                    }
                }
            }
        }))
        @if session.writes {
            p {
                @if !state.is_terminal() {
                    form.inline method="post" action={ (base) "/cancel" } { button type="submit" { "cancel" } }
                }
                @if matches!(state, ExecutionState::Dead | ExecutionState::Failed) && e.run_id.is_none() {
                    form.inline method="post" action={ (base) "/retry" } { button type="submit" { "re-drive" } }
                }
            }
        }
    };
    page(&format!("Execution {id}"), Some(&ns), body).into_response()
}

/// `POST /ui/namespaces/{ns}/executions/{id}/{cancel|retry}`, through the API.
pub(crate) async fn execution_action(
    State(ui): State<Ui>,
    Extension(session): Extension<Session>,
    Path((ns, id, action)): Path<(String, String, String)>,
) -> Response {
    if let Err(r) = gate(&session, None, &[ns.as_str(), id.as_str()]) {
        return r.into_response();
    }
    if !matches!(action.as_str(), "cancel" | "retry") {
        return forbidden("no such action");
    }
    act(
        &ui,
        &session,
        Method::POST,
        &format!("/v1/namespaces/{ns}/executions/{id}/{action}"),
        None,
        &format!("/ui/namespaces/{ns}/executions/{id}"),
    )
    .await
}

/// `GET /ui/namespaces/{ns}/dead-letters?job=&before=`: dead letters newest first, a page at
/// a time, with checkboxes to re-drive the selected, and a form to re-drive every one that
/// matches the filter (after saying how many).
/// `GET /ui/namespaces/{ns}/calendars`: the namespace's holiday calendars, each with its
/// exclusions, the schedules that name it and its next excluded dates (docs/time.md).
pub(crate) async fn calendars(
    State(ui): State<Ui>,
    Extension(session): Extension<Session>,
    Path(ns): Path<String>,
) -> Response {
    if let Err(r) = gate(&session, Some(ns.as_str()), &[]) {
        return r.into_response();
    }
    let listed = match ui.app.store.calendar_list(&ns).await {
        Ok(l) => l,
        Err(e) => return problem(e),
    };
    let now = match ui.app.store.now().await {
        Ok(n) => n,
        Err(e) => return problem(e),
    };
    let mut rows = Vec::with_capacity(listed.len());
    for c in listed {
        let users = match ui.app.store.calendar_users(&ns, &c.name).await {
            Ok(u) => u,
            Err(e) => return problem(e),
        };
        let next = crate::calendars::next_excluded(&c.spec, now);
        rows.push((c, users, next));
    }
    let body = html! {
        @if rows.is_empty() {
            p.muted { "No calendars in namespace " (ns) ". " code { "sundial calendar apply -f FILE -n " (ns) } " makes one." }
        }
        table {
            tr { th { "calendar" } th { "zone" } th { "excludes" } th { "named by" } th { "next excluded dates" } }
            @for (c, users, next) in &rows {
                tr {
                    td { (c.name) @if !c.spec.description.is_empty() { br; span.muted { (c.spec.description) } } }
                    td { (c.spec.timezone) }
                    td { @for e in &c.spec.exclude {
                        @match e {
                            ExclusionSpec::Date { date } => { (date) }
                            ExclusionSpec::Range { from, to } => { (from) " – " (to) }
                            ExclusionSpec::Cron { cron } => { "days of " code { (cron) } }
                        }
                        br;
                    } }
                    td { @if users.is_empty() { span.muted { "nothing" } } @for u in users { (u) br; } }
                    td { @for d in next { (d) " " } }
                }
            }
        }
    };
    page(&format!("Calendars of {ns}"), Some(&ns), body).into_response()
}

pub(crate) async fn dead_letters(
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
    let job = q.get("job").filter(|j| !j.is_empty()).cloned();
    if let Some(j) = &job
        && let Err(why) = sundial_core::names::check_name(j)
    {
        return Refusal(
            StatusCode::BAD_REQUEST,
            format!("The job filter '{j}' is not a job name: it {why}."),
        )
        .into_response();
    }
    let before = crate::executions::page_token(q.get("before"))
        .ok()
        .flatten();
    let listed = ui
        .app
        .store
        .execution_list(&ExecutionListQuery {
            namespace: ns.clone(),
            job: job.clone(),
            state: Some(ExecutionState::Dead),
            before,
            limit: PAGE,
        })
        .await;
    let mut items = match listed {
        Ok(i) => i,
        Err(e) => return problem(e),
    };
    // A listing carries no attempts; the page shows each one's last error, so it reads the
    // page's executions (at most PAGE) one by one.
    for item in &mut items {
        match ui.app.store.execution_get(&ns, &item.id).await {
            Ok(Some(full)) => *item = full,
            Ok(None) => {}
            Err(e) => return problem(e),
        }
    }
    let total = match ui.app.store.cluster_status().await {
        Ok(s) => s.dead_by_namespace.get(&ns).copied().unwrap_or(0),
        Err(e) => return problem(e),
    };
    let body = html! {
        form method="get" {
            label { "job " input name="job" value=[job.as_deref()] placeholder="any"; }
            " " button type="submit" { "Filter" }
        }
        p { (total) " dead letters in namespace " (ns) "." }
        form method="post" action={ "/ui/namespaces/" (ns) "/dead-letters/redrive" } {
            table {
                tr { th {} th { "execution" } th { "job" } th { "slot (UTC)" } th { "attempts" } th { "last error" } }
                @for e in &items {
                    tr {
                        td { @if session.writes { input type="checkbox" name="id" value=(e.id); } }
                        td { a href={ "/ui/namespaces/" (ns) "/executions/" (e.id) } { (e.id) } }
                        td { (e.job) }
                        td { (when(Some(e.scheduled_at))) }
                        td { (e.attempt) }
                        td { @if let Some(err) = e.attempts.last().and_then(|a| a.error.as_deref()) { code { (err) } } }
                    }
                }
            }
            @if items.is_empty() { p.muted { "No dead letters." } }
            @if session.writes && !items.is_empty() {
                p { button type="submit" { "Re-drive selected" } }
            }
        }
        @if session.writes && !items.is_empty() {
            form method="post" action={ "/ui/namespaces/" (ns) "/dead-letters/redrive" } {
                input type="hidden" name="all" value="1";
                @if let Some(j) = &job { input type="hidden" name="job" value=(j); }
                p { button type="submit" {
                    "Re-drive all " @if job.is_some() { "of job " (job.as_deref().unwrap_or("")) } @else { (total) }
                    " matching this filter"
                } }
            }
        }
        @if items.len() == PAGE as usize {
            @if let Some(last) = items.last() {
                p { a href={ "?before=" (last.scheduled_at.as_millisecond()) "_" (last.id)
                    @if let Some(j) = &job { "&job=" (j) } } { "Older →" } }
            }
        }
    };
    page("Dead letters", Some(&ns), body).into_response()
}

/// Most dead letters one "re-drive all" form re-drives (it can be sent again for more).
const REDRIVE_ALL_MAX: u32 = 1000;

/// `POST /ui/namespaces/{ns}/dead-letters/redrive`: re-drives the `id`s sent, or with
/// `all=1` every dead letter matching `job` (up to [`REDRIVE_ALL_MAX`]), each through the
/// API; then shows how many were re-driven and each one refused.
pub(crate) async fn redrive(
    State(ui): State<Ui>,
    Extension(session): Extension<Session>,
    Path(ns): Path<String>,
    body: axum::body::Bytes,
) -> Response {
    if let Err(r) = gate(&session, Some(ns.as_str()), &[]) {
        return r.into_response();
    }
    let fields: Vec<(String, String)> = form_urlencoded::parse(&body).into_owned().collect();
    let all = fields.iter().any(|(k, v)| k == "all" && v == "1");
    let mut ids: Vec<String> = fields
        .iter()
        .filter(|(k, _)| k == "id")
        .map(|(_, v)| v.clone())
        .collect();
    if all {
        let job = fields
            .iter()
            .find(|(k, v)| k == "job" && !v.is_empty())
            .map(|(_, v)| v.clone());
        match ui
            .app
            .store
            .execution_list(&ExecutionListQuery {
                namespace: ns.clone(),
                job,
                state: Some(ExecutionState::Dead),
                before: None,
                limit: REDRIVE_ALL_MAX,
            })
            .await
        {
            Ok(items) => ids.extend(items.into_iter().map(|e| e.id)),
            Err(e) => return problem(e),
        }
    }
    let mut done = 0usize;
    let mut refused = Vec::new();
    for id in &ids {
        if plain(id).is_err() {
            refused.push((id.clone(), "not an execution id".to_owned()));
            continue;
        }
        match super::call_api(
            &ui,
            &session,
            Method::POST,
            &format!("/v1/namespaces/{ns}/executions/{id}/retry"),
            None,
        )
        .await
        {
            Ok(_) => done += 1,
            Err((_, why)) => refused.push((id.clone(), why)),
        }
    }
    let body = html! {
        p { (done) " re-driven." }
        @if !refused.is_empty() {
            table {
                tr { th { "execution" } th { "not re-driven" } }
                @for (id, why) in &refused { tr { td { (id) } td { (why) } } }
            }
        }
        p { a href={ "/ui/namespaces/" (ns) "/dead-letters" } { "Back to the dead letters" } }
    };
    page("Re-drive", Some(&ns), body).into_response()
}

/// `GET /ui/cluster`: the nodes, their roles and heartbeats, and the map of the 1,024 shards
/// (each cell colored by the node holding it).
pub(crate) async fn cluster(State(ui): State<Ui>) -> Response {
    let status = match ui.app.store.cluster_status().await {
        Ok(s) => s,
        Err(e) => return problem(e),
    };
    let palette = [
        "#4c8bf5", "#34a853", "#fbbc05", "#ea4335", "#9c27b0", "#00acc1",
    ];
    let body = html! {
        (live("cluster", html! {
            table {
                tr { th { "node" } th { "roles" } th { "started (UTC)" } th { "heartbeat (UTC)" } th { "live" } th { "shards" } th { "worker lease" } th { "held" } }
                @for (i, n) in status.nodes.iter().enumerate() {
                    tr {
                        td { span style={ "color:" (palette[i % palette.len()]) } { "■ " } (n.id) }
                        td { (n.roles.join(", ")) }
                        td { (when(Some(n.started_at))) }
                        td { (when(Some(n.heartbeat_at))) }
                        td { (if n.live { "yes" } else { "no" }) }
                        td { (n.shards) }
                        @match &n.worker_lease {
                            Some(l) => {
                                td { "epoch " (l.epoch) ", until " (when(Some(l.expires_at))) (if l.live { "" } else { " (lapsed)" }) }
                                td { (l.held) }
                            }
                            None => { td { "—" } td { "—" } }
                        }
                    }
                }
            }
            h2 { "Shards" }
            p.muted { "The 1,024 shards, each colored by the node holding its lease (grey: none)." }
            div.shards {
                @for cell in shard_cells(&status) {
                    @match cell {
                        Some(i) => span style={ "background:" (palette[i % palette.len()]) } {},
                        None => span {},
                    }
                }
            }
        }))
    };
    page("Cluster", None, body).into_response()
}

/// Which node (by its index in `nodes`) holds each of the 1,024 shards, from the store's
/// lease table; `None` for a shard nobody holds, or one held by a node not listed.
fn shard_cells(status: &sundial_store::ClusterStatus) -> Vec<Option<usize>> {
    status
        .shard_owners
        .iter()
        .map(|owner| {
            owner
                .as_ref()
                .and_then(|o| status.nodes.iter().position(|n| n.id == *o))
        })
        .collect()
}
