//! The workflow pages of the dashboard: workflows, a workflow's runs, a run (its DAG drawn
//! with each task's state), and their actions; one handler a page, as `pages.rs`.

use super::pages::{
    PAGE, backfills_table, gate, live, problem, query_gate, schedule_action, schedule_words,
};
use super::{Session, Ui, act, badge, forbidden, page, when};
use crate::error::ApiError;
use axum::Extension;
use axum::extract::{Path, Query, State};
use axum::http::Method;
use axum::response::{IntoResponse, Response};
use maud::{Markup, html};
use std::collections::HashMap;
use sundial_core::execution::ExecutionState;

/// `GET /ui/namespaces/{ns}/workflows`: the namespace's workflows by name.
pub(crate) async fn workflows(
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
    let listed = ui
        .app
        .store
        .workflow_list(&sundial_store::WorkflowListQuery {
            namespace: ns.clone(),
            paused: None,
            label: None,
            after_name: q.get("after").cloned(),
            limit: PAGE,
        })
        .await;
    let items = match listed {
        Ok(w) => w,
        Err(e) => return problem(e),
    };
    let next_fires: HashMap<String, Option<jiff::Timestamp>> =
        match crate::jobs::ns_calendars(&ui.app, &ns).await {
            Ok(cals) => {
                let now = match ui.app.store.now().await {
                    Ok(n) => n,
                    Err(e) => return problem(e),
                };
                items
                    .iter()
                    .map(|w| {
                        (
                            w.spec.name.clone(),
                            crate::workflows::workflow_resource(w, now, &cals).next_fire_at,
                        )
                    })
                    .collect()
            }
            Err(e) => return e.into_response(),
        };
    let body = html! {
        table {
            tr { th { "name" } th { "schedule" } th { "state" } th { "tasks" } th { "next fire (UTC)" } th { "last run" } }
            @for w in &items {
                tr {
                    td { a href={ "/ui/namespaces/" (ns) "/workflows/" (w.spec.name) } { (w.spec.name) } }
                    td { @if let Some(s) = &w.spec.schedule { (schedule_words(&s.kind)) } @else { "when triggered" } }
                    td { (badge(w.state())) }
                    td { (w.spec.tasks.len()) }
                    td { (when(next_fires.get(&w.spec.name).copied().flatten())) }
                    td { @if let Some(r) = &w.last_run {
                        a href={ "/ui/namespaces/" (ns) "/runs/" (r.id) } { (badge(r.state.as_str())) }
                    } @else { "-" } }
                }
            }
        }
        @if items.is_empty() { p.muted { "No workflows." } }
        @if items.len() == PAGE as usize {
            @if let Some(last) = items.last() { p { a href={ "?after=" (last.spec.name) } { "Next page →" } } }
        }
    };
    page("Workflows", Some(&ns), body).into_response()
}

/// Runs shown in a workflow's grid per page.
const GRID_RUNS: u32 = 25;

/// `GET /ui/namespaces/{ns}/workflows/{name}?before=`: the runs × tasks grid, newest run
/// first, a page of [`GRID_RUNS`] at a time: each cell a task's state, linking to its
/// execution.
pub(crate) async fn workflow(
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
    let w = match ui.app.store.workflow_get(&ns, &name).await {
        Ok(Some(w)) => w,
        Ok(None) => return problem(ApiError::not_found(format!("workflow {ns}/{name}"))),
        Err(e) => return problem(e),
    };
    let before = crate::executions::page_token(q.get("before"))
        .ok()
        .flatten();
    let runs = match ui
        .app
        .store
        .run_list(&sundial_store::RunListQuery {
            namespace: ns.clone(),
            workflow: Some(name.clone()),
            state: None,
            before,
            limit: GRID_RUNS,
        })
        .await
    {
        Ok(r) => r,
        Err(e) => return problem(e),
    };
    // A run's tasks are read one run at a time: a page holds at most GRID_RUNS of them.
    let mut grid = Vec::with_capacity(runs.len());
    for r in &runs {
        match ui.app.store.run_get(&ns, &r.id).await {
            Ok(Some(full)) => grid.push(full),
            Ok(None) => {}
            Err(e) => return problem(e),
        }
    }
    let backfills = match ui
        .app
        .store
        .backfill_list(&ns, sundial_store::BackfillOf::Workflow, &name)
        .await
    {
        Ok(b) => b,
        Err(e) => return problem(e),
    };
    let tasks: Vec<&str> = w.spec.tasks.iter().map(|t| t.name.as_str()).collect();
    let base = format!("/ui/namespaces/{ns}/workflows/{name}");
    let body = html! {
        p { (badge(w.state())) " "
            @if let Some(s) = &w.spec.schedule { (schedule_words(&s.kind)) } @else { "runs when triggered" } }
        @if !w.spec.description.is_empty() { p { (w.spec.description) } }
        p { a href={ "/ui/namespaces/" (ns) "/audit?resource=workflow&name=" (name) } { "Who changed this" } }
        @if session.writes {
            p { @for action in ["pause", "resume", "trigger"] {
                form.inline method="post" action={ (base) "/" (action) } { button type="submit" { (action) } } " "
            } }
        }
        (live("grid", html! {
            table {
                tr { th { "run (slot, UTC)" } th { "trigger" } th { "state" } @for t in &tasks { th { (t) } } }
                @for r in &grid {
                    tr {
                        td { a href={ "/ui/namespaces/" (ns) "/runs/" (r.id) } { (when(Some(r.scheduled_at))) } }
                        td { (r.trigger.as_str()) }
                        td { (badge(r.state.as_str())) }
                        @for t in &tasks {
                            td { @if let Some(task) = r.tasks.iter().find(|x| x.name == *t) {
                                a href={ "/ui/namespaces/" (ns) "/executions/" (task.execution_id) } { (badge(task.state.as_str())) }
                            } @else { "-" } }
                        }
                    }
                }
            }
            @if grid.is_empty() { p.muted { "No runs yet." } }
        }))
        @if runs.len() == GRID_RUNS as usize {
            @if let Some(last) = runs.last() {
                p { a href={ "?before=" (last.scheduled_at.as_millisecond()) "_" (last.id) } { "Older runs →" } }
            }
        }
        @if !backfills.is_empty() {
            h2 { "Backfills" }
            (backfills_table(&base, &backfills, session.writes))
        }
    };
    page(&format!("Workflow {name}"), Some(&ns), body).into_response()
}

/// `POST /ui/namespaces/{ns}/workflows/{name}/{pause|resume|trigger}`, through the API.
pub(crate) async fn workflow_action(
    State(ui): State<Ui>,
    Extension(session): Extension<Session>,
    Path((ns, name, action)): Path<(String, String, String)>,
) -> Response {
    schedule_action(&ui, &session, "workflows", &ns, &name, &action).await
}

/// `GET /ui/namespaces/{ns}/runs/{id}`: the run's DAG drawn as SVG, each task in its state's
/// color, and its tasks' table; cancel and retry for a session that writes.
pub(crate) async fn run(
    State(ui): State<Ui>,
    Extension(session): Extension<Session>,
    Path((ns, id)): Path<(String, String)>,
) -> Response {
    if let Err(r) = gate(&session, Some(ns.as_str()), &[id.as_str()]) {
        return r.into_response();
    }
    let r = match ui.app.store.run_get(&ns, &id).await {
        Ok(Some(r)) => r,
        Ok(None) => return problem(ApiError::not_found(format!("run {ns}/{id}"))),
        Err(e) => return problem(e),
    };
    let base = format!("/ui/namespaces/{ns}/runs/{id}");
    let body = html! {
        p { (badge(r.state.as_str())) " run of "
            a href={ "/ui/namespaces/" (ns) "/workflows/" (r.workflow) } { (r.workflow) }
            " (version " (r.workflow_version) "), slot " (when(Some(r.scheduled_at))) " UTC" }
        @if session.writes {
            p {
                @if !r.state.is_terminal() {
                    form.inline method="post" action={ (base) "/cancel" } { button type="submit" { "cancel run" } }
                } @else {
                    form.inline method="post" action={ (base) "/retry" } { button type="submit" { "retry failed tasks" } }
                }
            }
        }
        (live("run", html! {
            (dag_svg(&ns, &r.tasks))
            table {
                tr { th { "task" } th { "upstream" } th { "rule" } th { "state" } th { "attempt" } th { "started (UTC)" } th { "finished (UTC)" } }
                @for t in &r.tasks {
                    tr {
                        td { a href={ "/ui/namespaces/" (ns) "/executions/" (t.execution_id) } { (t.name) } }
                        td { (t.depends_on.join(", ")) }
                        td { (t.trigger_rule.as_str()) }
                        td { (badge(t.state.as_str())) }
                        td { (t.attempt) }
                        td { (when(t.started_at)) }
                        td { (when(t.finished_at)) }
                    }
                }
            }
        }))
    };
    page(&format!("Run {id}"), Some(&ns), body).into_response()
}

/// The fill of a task's box in the DAG, by state.
fn state_color(state: ExecutionState) -> &'static str {
    match state {
        ExecutionState::Succeeded => "#b7e4c7",
        ExecutionState::Failed | ExecutionState::Dead | ExecutionState::UpstreamFailed => "#ffb3b3",
        ExecutionState::Running => "#9ec5ff",
        ExecutionState::Queued | ExecutionState::Scheduled | ExecutionState::RetryWait => "#d6e6ff",
        _ => "#e5e7eb",
    }
}

/// The run's tasks as an SVG graph: a column per depth (longest path from a root), a box per
/// task with its name and state, an edge from each upstream.
fn dag_svg(ns: &str, tasks: &[sundial_store::TaskRecord]) -> Markup {
    let index = |name: &str| tasks.iter().position(|t| t.name == name);
    // Depths by relaxation: a workflow is acyclic (validated when written) and holds at most
    // 500 tasks, so this ends within as many rounds.
    let mut depth = vec![0usize; tasks.len()];
    for _ in 0..tasks.len() {
        let mut changed = false;
        for (i, t) in tasks.iter().enumerate() {
            for up in t.depends_on.iter().filter_map(|u| index(u)) {
                if depth[i] < depth[up] + 1 {
                    depth[i] = depth[up] + 1;
                    changed = true;
                }
            }
        }
        if !changed {
            break;
        }
    }
    let mut row = vec![0usize; tasks.len()];
    let mut per_depth: HashMap<usize, usize> = HashMap::new();
    for (i, d) in depth.iter().enumerate() {
        let n = per_depth.entry(*d).or_default();
        row[i] = *n;
        *n += 1;
    }
    let (w, h, gx, gy) = (150usize, 36usize, 60usize, 14usize);
    let x = |i: usize| 10 + depth[i] * (w + gx);
    let y = |i: usize| 10 + row[i] * (h + gy);
    let width = 20 + (depth.iter().max().copied().unwrap_or(0) + 1) * (w + gx);
    let height = 20 + per_depth.values().max().copied().unwrap_or(1) * (h + gy);
    html! {
        svg xmlns="http://www.w3.org/2000/svg" width=(width) height=(height) role="img" aria-label="the run's tasks and their upstream" {
            @for (i, t) in tasks.iter().enumerate() {
                @for up in t.depends_on.iter().filter_map(|u| index(u)) {
                    line x1=(x(up) + w) y1=(y(up) + h / 2) x2=(x(i)) y2=(y(i) + h / 2) stroke="#8a94a6" stroke-width="1.5" {}
                }
            }
            @for (i, t) in tasks.iter().enumerate() {
                a href={ "/ui/namespaces/" (ns) "/executions/" (t.execution_id) } {
                    rect x=(x(i)) y=(y(i)) width=(w) height=(h) rx="6" fill=(state_color(t.state)) stroke="#5b6472" {}
                    text x=(x(i) + 8) y=(y(i) + 15) font-size="12" font-family="system-ui,sans-serif" { (t.name) }
                    text x=(x(i) + 8) y=(y(i) + 29) font-size="10" fill="#374151" font-family="system-ui,sans-serif" { (t.state.as_str()) }
                }
            }
        }
    }
}

/// `POST /ui/namespaces/{ns}/runs/{id}/{cancel|retry}`, through the API (under the run's
/// workflow).
pub(crate) async fn run_action(
    State(ui): State<Ui>,
    Extension(session): Extension<Session>,
    Path((ns, id, action)): Path<(String, String, String)>,
) -> Response {
    if let Err(r) = gate(&session, Some(ns.as_str()), &[id.as_str()]) {
        return r.into_response();
    }
    if !matches!(action.as_str(), "cancel" | "retry") {
        return forbidden("no such action");
    }
    let workflow = match ui.app.store.run_get(&ns, &id).await {
        Ok(Some(r)) => r.workflow,
        Ok(None) => return problem(ApiError::not_found(format!("run {ns}/{id}"))),
        Err(e) => return problem(e),
    };
    act(
        &ui,
        &session,
        Method::POST,
        &format!("/v1/namespaces/{ns}/workflows/{workflow}/runs/{id}/{action}"),
        None,
        &format!("/ui/namespaces/{ns}/runs/{id}"),
    )
    .await
}
