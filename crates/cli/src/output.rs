//! Tables for people: jobs, executions, attempts, workflows, runs and their tasks; and problem
//! documents as one line. Instants are shown in UTC with milliseconds, durations with their
//! unit.

use serde_json::Value;

fn cell(v: &Value) -> String {
    match v {
        Value::Null => "-".into(),
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// An instant in a table: UTC, always with milliseconds (`2026-12-02T05:00:00.120Z`), so
/// the column lines up; anything that is not an instant as a plain cell shows it.
pub fn when(v: &Value) -> String {
    match v.as_str().and_then(|t| t.parse::<jiff::Timestamp>().ok()) {
        Some(t) => t.strftime("%Y-%m-%dT%H:%M:%S%.3fZ").to_string(),
        None => cell(v),
    }
}

/// A duration in milliseconds, with its unit.
fn millis(v: &Value) -> String {
    match v.as_u64() {
        Some(ms) if ms >= 10_000 => format!("{:.1} s", ms as f64 / 1000.0),
        Some(ms) => format!("{ms} ms"),
        None => cell(v),
    }
}

fn table(headers: &[&str], rows: Vec<Vec<String>>) {
    let mut widths: Vec<usize> = headers.iter().map(|h| h.len()).collect();
    for row in &rows {
        for (w, c) in widths.iter_mut().zip(row) {
            *w = (*w).max(c.chars().count());
        }
    }
    let line = |cells: Vec<String>| {
        let padded: Vec<String> = cells
            .iter()
            .zip(&widths)
            .map(|(c, w)| format!("{c:<w$}"))
            .collect();
        outln!("{}", padded.join("  ").trim_end());
    };
    line(headers.iter().map(|h| h.to_string()).collect());
    for row in rows {
        line(row);
    }
}

/// A schedule in words: `cron EXPR (ZONE)`, `every DURATION`, `at INSTANT`; `-` for none (a
/// workflow that runs only when triggered).
fn schedule(s: &Value) -> String {
    if s.is_null() {
        "-".into()
    } else if let Some(c) = s["cron"].as_str() {
        format!("cron {c} ({})", s["timezone"].as_str().unwrap_or("UTC"))
    } else if let Some(e) = s["every"].as_str() {
        format!("every {e}")
    } else {
        format!("at {}", cell(&s["at"]))
    }
}

/// Prints jobs as NAME, SCHEDULE, STATE, NEXT FIRE, LAST; with `namespaces`, a NAMESPACE
/// column first (a listing across namespaces).
pub fn print_jobs(items: &[Value], namespaces: bool) {
    let rows = items
        .iter()
        .map(|j| {
            vec![
                cell(&j["name"]),
                schedule(&j["schedule"]),
                cell(&j["state"]),
                when(&j["next_fire_at"]),
                cell(&j["last_execution"]["state"]),
            ]
        })
        .collect();
    table_in(
        namespaces.then_some(items),
        &["NAME", "SCHEDULE", "STATE", "NEXT FIRE", "LAST"],
        rows,
    );
}

/// A table, with a NAMESPACE column first taken from each item's `namespace` when `items`
/// is given.
fn table_in(items: Option<&[Value]>, headers: &[&str], rows: Vec<Vec<String>>) {
    match items {
        None => table(headers, rows),
        Some(items) => {
            let headers: Vec<&str> = std::iter::once("NAMESPACE")
                .chain(headers.iter().copied())
                .collect();
            let rows = items
                .iter()
                .zip(rows)
                .map(|(item, row)| {
                    std::iter::once(cell(&item["namespace"]))
                        .chain(row)
                        .collect()
                })
                .collect();
            table(&headers, rows);
        }
    }
}

/// Prints executions as ID, JOB, TRIGGER, SCHEDULED, STATE, ATTEMPT.
pub fn print_executions(items: &[Value]) {
    let rows = items
        .iter()
        .map(|e| {
            vec![
                cell(&e["id"]),
                cell(&e["job"]),
                cell(&e["trigger"]),
                when(&e["scheduled_at"]),
                cell(&e["state"]),
                format!("{}/{}", cell(&e["attempt"]), cell(&e["max_attempts"])),
            ]
        })
        .collect();
    table(
        &["ID", "JOB", "TRIGGER", "SCHEDULED", "STATE", "ATTEMPT"],
        rows,
    );
}

/// Prints attempts as ATTEMPT, WORKER, STARTED, OUTCOME, STATUS, DURATION, ERROR.
pub fn print_attempts(items: &[Value]) {
    let rows = items
        .iter()
        .map(|a| {
            vec![
                cell(&a["attempt"]),
                cell(&a["worker"]),
                when(&a["started_at"]),
                cell(&a["outcome"]),
                cell(&a["status_code"]),
                millis(&a["duration_ms"]),
                cell(&a["error"]),
            ]
        })
        .collect();
    table(
        &[
            "ATTEMPT", "WORKER", "STARTED", "OUTCOME", "STATUS", "DURATION", "ERROR",
        ],
        rows,
    );
}

/// Prints workflows as NAME, STATE, TASKS (how many), SCHEDULE, NEXT FIRE, LAST RUN (its state).
pub fn print_workflows(items: &[Value], namespaces: bool) {
    let rows = items
        .iter()
        .map(|w| {
            vec![
                cell(&w["name"]),
                cell(&w["state"]),
                w["tasks"]
                    .as_array()
                    .map_or_else(|| "-".to_owned(), |t| t.len().to_string()),
                schedule(&w["schedule"]),
                when(&w["next_fire_at"]),
                cell(&w["last_run"]["state"]),
            ]
        })
        .collect();
    table_in(
        namespaces.then_some(items),
        &[
            "NAME",
            "STATE",
            "TASKS",
            "SCHEDULE",
            "NEXT FIRE",
            "LAST RUN",
        ],
        rows,
    );
}

/// Prints workflow runs as ID, STATE, TRIGGER, SCHEDULED AT, STARTED, FINISHED.
pub fn print_runs(items: &[Value]) {
    let rows = items
        .iter()
        .map(|r| {
            vec![
                cell(&r["id"]),
                cell(&r["state"]),
                cell(&r["trigger"]),
                when(&r["scheduled_at"]),
                when(&r["started_at"]),
                when(&r["finished_at"]),
            ]
        })
        .collect();
    table(
        &[
            "ID",
            "STATE",
            "TRIGGER",
            "SCHEDULED AT",
            "STARTED",
            "FINISHED",
        ],
        rows,
    );
}

/// Prints a run's tasks as TASK, STATE, ATTEMPT, STARTED, FINISHED, EXECUTION (its id).
pub fn print_run_tasks(items: &[Value]) {
    let rows = items
        .iter()
        .map(|t| {
            vec![
                cell(&t["name"]),
                cell(&t["state"]),
                cell(&t["attempt"]),
                when(&t["started_at"]),
                when(&t["finished_at"]),
                cell(&t["execution_id"]),
            ]
        })
        .collect();
    table(
        &[
            "TASK",
            "STATE",
            "ATTEMPT",
            "STARTED",
            "FINISHED",
            "EXECUTION",
        ],
        rows,
    );
}

/// A problem document as one line: the detail, then each field error.
pub fn problem_text(v: &Value) -> String {
    let Some(detail) = v["detail"].as_str() else {
        return cell(v);
    };
    let fields: Vec<String> = v["errors"]
        .as_array()
        .map(|errs| {
            errs.iter()
                .map(|e| format!("{}: {}", cell(&e["field"]), cell(&e["message"])))
                .collect()
        })
        .unwrap_or_default();
    if fields.len() > 1 {
        format!("{detail}\n  {}", fields.join("\n  "))
    } else {
        detail.to_owned()
    }
}
