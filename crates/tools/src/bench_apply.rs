//! `sundial bench apply`: how long `POST /v1/namespaces/{ns}/jobs:apply` takes for a batch of
//! `--jobs` jobs, the write path of a deploy (README.md, "Sizing with sundial bench"). Each
//! round applies the batch to a namespace of its own twice: first creating every job, then
//! replacing every one (a changed description). Every write records one audit entry per job
//! (docs/security.md, "Audit log"), so this is also the audit log's cost on the write path.
//!
//! The jobs are paused (nothing fires while it measures). Reported: the p50, p90 and max of
//! the creations' and the replacements' times (ms, the client's wall clock from the request's
//! start to the answer's end) and jobs written per second at the p50. `--server-exe` starts
//! another build's server, so that two builds are compared in one sitting.

use std::process::ExitCode;
use std::time::Instant;

use anyhow::bail;
use serde_json::{Value, json};

use crate::bench_load::{Common, TempDb, start_nodes};
use crate::bench_report::percentile;

/// The batch of `jobs` jobs, paused, each described as `description`.
fn batch(jobs: u32, description: &str) -> Value {
    let jobs: Vec<Value> = (0..jobs)
        .map(|i| {
            json!({
                "name": format!("j{i}"),
                "schedule": {"every": "1h"},
                "target": {"type": "http", "url": "http://127.0.0.1:9/apply"},
                "paused": true,
                "description": description,
            })
        })
        .collect();
    json!({ "jobs": jobs })
}

/// Runs the workload: `rounds` rounds of a creation and a replacement of `jobs` jobs.
///
/// # Errors
/// A server that does not start, or an apply that is not answered 200.
pub(crate) async fn run(jobs: u32, rounds: u32, common: &Common) -> anyhow::Result<ExitCode> {
    if !(1..=1000).contains(&jobs) {
        bail!("--jobs {jobs}: jobs:apply takes 1 to 1,000 jobs");
    }
    let temp_db =
        std::env::temp_dir().join(format!("sundial-bench-apply-{}.db", std::process::id()));
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
    let nodes = start_nodes(&url, 1, common.server_exe.as_deref()).await?;
    let http = reqwest::Client::new();
    let run_id = std::process::id();
    let (mut created, mut replaced) = (Vec::new(), Vec::new());
    for round in 0..rounds {
        let apply = format!(
            "{}/v1/namespaces/apply-{run_id}-{round}/jobs:apply",
            nodes.api
        );
        for (description, times) in [("first", &mut created), ("second", &mut replaced)] {
            let body = batch(jobs, description).to_string();
            let started = Instant::now();
            let r = http
                .post(&apply)
                .header("content-type", "application/json")
                .body(body)
                .send()
                .await?;
            let status = r.status();
            let text = r.text().await.unwrap_or_default();
            let took = started.elapsed().as_secs_f64() * 1000.0;
            if !status.is_success() {
                bail!("jobs:apply: HTTP {status}: {text}");
            }
            times.push(took);
        }
    }
    let store = if url.starts_with("sqlite:") {
        "sqlite"
    } else {
        "postgres"
    };
    outln!("jobs:apply of {jobs} jobs, {rounds} rounds, {store}");
    for (what, times) in [("create", &mut created), ("replace", &mut replaced)] {
        times.sort_by(f64::total_cmp);
        let p50 = percentile(times, 50.0);
        outln!(
            "  {what:<8} p50 {p50:>8.1} ms  p90 {:>8.1} ms  max {:>8.1} ms  ({:.0} jobs/s at the p50)",
            percentile(times, 90.0),
            times.last().copied().unwrap_or_default(),
            f64::from(jobs) / (p50 / 1000.0)
        );
    }
    Ok(ExitCode::SUCCESS)
}
