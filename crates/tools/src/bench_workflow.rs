//! `sundial bench workflow`: workflow runs due at one instant, their tasks delivered to the
//! bench's loopback sink, measured from the store's records (docs/workflows.md,
//! "Performance").
//!
//! Shapes: `chain` (`--runs` workflows of `--tasks` tasks, each depending on the one before)
//! and `fanout` (`--runs` workflows of one root and `--tasks` tasks behind it). Each workflow
//! has an `at` schedule on the same instant, so every run is created by the scheduler and
//! its roots come due together.
//!
//! Reported: the *release lag* — a task's attempt start minus its upstream's completion
//! commit (its `finished_at`), both by the store's clock — p50/p90/p99/max; the fan-out
//! spread (last leaf start − root completion, the worst run); the *delivery lag* — the
//! sink's first receipt of a task minus its upstream's completion commit, which also counts
//! the claim and the HTTP delivery (one machine, one clock); tasks/s (deliveries from the
//! fire time to the last one); lost and duplicated task deliveries; peak RSS.

use std::collections::HashMap;
use std::process::ExitCode;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use axum::extract::{Path, State};
use axum::http::StatusCode;
use jiff::{SignedDuration, Timestamp};
use serde_json::{Value, json};

use crate::bench_load::{Common, TempDb, progress_bar, start_nodes, wait_is_over};
use crate::bench_report::percentile;

/// The two shapes of `bench workflow`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Shape {
    /// Each task depends on the one before.
    Chain,
    /// One root, every other task behind it.
    Fanout,
}

#[derive(Default)]
struct Sink {
    /// (workflow, task) → receive instants.
    seen: Mutex<HashMap<(String, String), Vec<Timestamp>>>,
}

async fn sink(
    State(s): State<Arc<Sink>>,
    Path((workflow, task)): Path<(String, String)>,
) -> StatusCode {
    let now = Timestamp::now();
    s.seen
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .entry((workflow, task))
        .or_default()
        .push(now);
    StatusCode::OK
}

/// The body of workflow `name` of `shape` with `tasks` tasks (a fan-out: a root and `tasks`
/// behind it), due `at`, its tasks delivered to `sink`.
fn workflow_body(name: &str, shape: Shape, tasks: u32, at: Timestamp, sink: &str) -> Value {
    let target = |task: &str| json!({"type": "http", "url": format!("{sink}/wf/{name}/{task}")});
    let list: Vec<Value> = match shape {
        Shape::Chain => (0..tasks)
            .map(|i| {
                let mut t = json!({"name": format!("t{i}"), "target": target(&format!("t{i}"))});
                if i > 0 {
                    t["depends_on"] = json!([format!("t{}", i - 1)]);
                }
                t
            })
            .collect(),
        Shape::Fanout => std::iter::once(json!({"name": "root", "target": target("root")}))
            .chain((0..tasks).map(|i| {
                json!({"name": format!("l{i}"), "depends_on": ["root"], "target": target(&format!("l{i}"))})
            }))
            .collect(),
    };
    json!({
        "name": name,
        "schedule": {"at": at.to_string()},
        "defaults": {"retry": {"max_attempts": 3, "initial_interval": "1s"}},
        "tasks": list,
    })
}

/// Runs `bench workflow`.
pub async fn run(shape: Shape, runs: u32, tasks: u32, common: &Common) -> anyhow::Result<ExitCode> {
    if runs == 0 || tasks == 0 {
        bail!("--runs and --tasks: give at least 1");
    }
    let per_run = match shape {
        Shape::Chain => tasks,
        Shape::Fanout => tasks + 1,
    };
    if per_run as usize > sundial_core::workflow::MAX_TASKS {
        bail!(
            "--tasks {tasks}: a workflow has at most {} tasks",
            sundial_core::workflow::MAX_TASKS
        );
    }
    let expected = u64::from(runs) * u64::from(per_run);
    let temp_db = std::env::temp_dir().join(format!("sundial-bench-wf-{}.db", std::process::id()));
    let _cleanup = TempDb(
        common
            .database_url
            .is_none()
            .then(|| temp_db.display().to_string()),
    );
    let url = common
        .database_url
        .clone()
        .unwrap_or_else(|| format!("sqlite://{}", temp_db.display()));
    let store = if url.starts_with("sqlite:") {
        "sqlite"
    } else {
        "postgres"
    };
    if store == "sqlite" && common.nodes > 1 {
        bail!(
            "--nodes {}: the embedded SQLite store runs one scheduler process",
            common.nodes
        );
    }
    let sink_state = Arc::new(Sink::default());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let sink_url = format!("http://{}", listener.local_addr()?);
    let app = axum::Router::new()
        .route("/wf/{workflow}/{task}", axum::routing::any(sink))
        .with_state(sink_state.clone());
    tokio::spawn(async move { axum::serve(listener, app).await });
    let nodes = start_nodes(&url, common.nodes, common.server_exe.as_deref()).await?;

    let lead = SignedDuration::from_secs(i64::try_from(common.lead_s).unwrap_or(5));
    let at = Timestamp::from_second((Timestamp::now() + lead).as_second() + 1)?;
    let http = reqwest::Client::new();
    let names: Vec<String> = (0..runs).map(|i| format!("w{i}")).collect();
    let created = Instant::now();
    for chunk in names.chunks(100) {
        let body = json!({"workflows": chunk.iter().map(|n| workflow_body(n, shape, tasks, at, &sink_url)).collect::<Vec<_>>()});
        let r = http
            .post(format!("{}/v1/namespaces/bench/workflows:apply", nodes.api))
            .header("content-type", "application/json")
            .body(body.to_string())
            .send()
            .await?;
        let status = r.status();
        if !status.is_success() {
            bail!(
                "creating workflows: HTTP {status}: {}",
                r.text().await.unwrap_or_default()
            );
        }
    }
    if Timestamp::now() >= at {
        bail!(
            "creating the workflows took {:?}, past their fire time; raise --lead-s",
            created.elapsed()
        );
    }

    let mut progress = (0u64, Timestamp::now());
    loop {
        let received: u64 = sink_state
            .seen
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .len() as u64;
        let now = Timestamp::now();
        if received > progress.0 {
            progress = (received, now);
        }
        if wait_is_over(received, expected, progress.1, at, now) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    eprintln!(
        "workflow {} {}/{expected} task deliveries",
        progress_bar(progress.0, expected, 30),
        progress.0
    );
    let peak_rss_mb = nodes.peak_rss_mb();
    let received: HashMap<(String, String), Timestamp> = sink_state
        .seen
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .iter()
        .filter_map(|(k, r)| Some((k.clone(), r.iter().min().copied()?)))
        .collect();
    let lags = release_lags(&nodes.api, &names, shape, &received).await?;
    drop(nodes);

    let seen = sink_state.seen.lock().unwrap_or_else(|e| e.into_inner());
    let duplicates: u64 = seen.values().map(|r| r.len() as u64 - 1).sum();
    let lost = expected.saturating_sub(seen.len() as u64);
    let last = seen
        .values()
        .filter_map(|r| r.iter().min().copied())
        .max()
        .unwrap_or(at);
    let span_s = last.duration_since(at).as_secs_f64().max(0.001);
    let tasks_per_s = seen.len() as f64 / span_s;
    let Lags {
        release: mut lags,
        mut delivery,
        spreads: fanout_spreads,
    } = lags;
    lags.sort_by(f64::total_cmp);
    delivery.sort_by(f64::total_cmp);
    let spread_max = fanout_spreads.iter().copied().fold(0.0, f64::max);
    let shape_name = match shape {
        Shape::Chain => "chain",
        Shape::Fanout => "fanout",
    };
    let report = json!({
        "workload": "workflow", "shape": shape_name, "store": store, "nodes": common.nodes,
        "runs": runs, "tasks_per_run": per_run, "tasks": expected,
        "drain_s": (span_s * 1000.0).round() / 1000.0,
        "tasks_per_s": tasks_per_s.round(),
        "release_lag_ms": {"p50": percentile(&lags, 50.0), "p90": percentile(&lags, 90.0), "p99": percentile(&lags, 99.0), "max": lags.last().copied().unwrap_or(0.0), "n": lags.len()},
        "delivery_lag_ms": {"p50": percentile(&delivery, 50.0), "p90": percentile(&delivery, 90.0), "p99": percentile(&delivery, 99.0), "max": delivery.last().copied().unwrap_or(0.0), "n": delivery.len()},
        "fanout_spread_ms_max": spread_max,
        "lost": lost, "duplicates": duplicates, "peak_rss_mb": (peak_rss_mb * 10.0).round() / 10.0,
    });
    outln!(
        "workload         workflow {shape_name} ({store}, {} node(s)): {runs} run(s) × {per_run} tasks",
        common.nodes
    );
    outln!(
        "delivered        {} of {expected} (lost {lost}, duplicates {duplicates})",
        seen.len()
    );
    outln!("drain            {span_s:.3} s   tasks/s {tasks_per_s:.0}");
    outln!(
        "release lag ms   p50 {}  p90 {}  p99 {}  max {}   (attempt start - upstream completion, from the records)",
        report["release_lag_ms"]["p50"],
        report["release_lag_ms"]["p90"],
        report["release_lag_ms"]["p99"],
        report["release_lag_ms"]["max"]
    );
    outln!(
        "delivery lag ms  p50 {}  p90 {}  p99 {}  max {}   (sink receipt - upstream completion)",
        report["delivery_lag_ms"]["p50"],
        report["delivery_lag_ms"]["p90"],
        report["delivery_lag_ms"]["p99"],
        report["delivery_lag_ms"]["max"]
    );
    if shape == Shape::Fanout {
        outln!("fan-out spread   {spread_max} ms   (last leaf start - root completion, worst run)");
    }
    outln!("peak RSS         {peak_rss_mb:.1} MB");
    outln!("{report}");
    Ok(if lost == 0 && duplicates == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// The lags of a run of the bench, in milliseconds.
struct Lags {
    /// Per task with an upstream: its `started_at` minus its upstream's `finished_at`.
    release: Vec<f64>,
    /// Per task with an upstream: the sink's first receipt minus its upstream's `finished_at`.
    delivery: Vec<f64>,
    /// Per fan-out run: its last leaf's start minus its root's end.
    spreads: Vec<f64>,
}

/// The lags of the runs of `names`, from the runs' records (for several upstream, the
/// latest `finished_at` counts) and from `received`, the sink's first receipt per
/// (workflow, task).
async fn release_lags(
    api: &str,
    names: &[String],
    shape: Shape,
    received: &HashMap<(String, String), Timestamp>,
) -> anyhow::Result<Lags> {
    let http = reqwest::Client::new();
    let mut out = Lags {
        release: Vec::new(),
        delivery: Vec::new(),
        spreads: Vec::new(),
    };
    for name in names {
        let runs: Value = serde_json::from_str(
            &http
                .get(format!(
                    "{api}/v1/namespaces/bench/workflows/{name}/runs?limit=10"
                ))
                .send()
                .await?
                .text()
                .await?,
        )
        .context("listing runs")?;
        for r in runs["items"].as_array().map_or(&[][..], Vec::as_slice) {
            let Some(id) = r["id"].as_str() else { continue };
            let run: Value = serde_json::from_str(
                &http
                    .get(format!(
                        "{api}/v1/namespaces/bench/workflows/{name}/runs/{id}"
                    ))
                    .send()
                    .await?
                    .text()
                    .await?,
            )
            .context("reading a run")?;
            let tasks = run["tasks"].as_array().map_or(&[][..], Vec::as_slice);
            let at = |t: &Value, k: &str| t[k].as_str().and_then(|s| s.parse::<Timestamp>().ok());
            let ended: HashMap<&str, Timestamp> = tasks
                .iter()
                .filter_map(|t| Some((t["name"].as_str()?, at(t, "finished_at")?)))
                .collect();
            let mut last_leaf: Option<f64> = None;
            for t in tasks {
                let ups = t["depends_on"].as_array().map_or(&[][..], Vec::as_slice);
                let upstream_end = ups
                    .iter()
                    .filter_map(|u| ended.get(u.as_str()?).copied())
                    .max();
                if let (Some(start), Some(end)) = (at(t, "started_at"), upstream_end) {
                    let lag = (start.as_millisecond() - end.as_millisecond()) as f64;
                    out.release.push(lag);
                    last_leaf = Some(last_leaf.map_or(lag, |l: f64| l.max(lag)));
                }
                let task = t["name"].as_str().unwrap_or_default();
                if let (Some(got), Some(end)) =
                    (received.get(&(name.clone(), task.to_owned())), upstream_end)
                {
                    out.delivery
                        .push((got.as_millisecond() - end.as_millisecond()) as f64);
                }
            }
            if shape == Shape::Fanout
                && let Some(spread) = last_leaf
            {
                out.spreads.push(spread);
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_chain_depends_on_the_task_before_and_a_fanout_on_its_root() {
        let at: Timestamp = "2027-01-01T00:00:00Z".parse().unwrap();
        let chain = workflow_body("w0", Shape::Chain, 3, at, "http://s");
        assert_eq!(chain["tasks"][2]["depends_on"], json!(["t1"]));
        assert_eq!(chain["tasks"][0].get("depends_on"), None);
        let fan = workflow_body("w0", Shape::Fanout, 4, at, "http://s");
        assert_eq!(fan["tasks"].as_array().unwrap().len(), 5);
        assert_eq!(fan["tasks"][4]["depends_on"], json!(["root"]));
        assert_eq!(fan["tasks"][4]["target"]["url"], json!("http://s/wf/w0/l3"));
    }
}
