//! `sundial bench ceiling` and `sundial bench capacity` (README.md, "Sizing with sundial bench"): a
//! measure of steady capacity that survives a change of machine. The ceiling is what this
//! machine's two sides of an HTTP delivery give alone: attempts per second through Sundial's
//! HTTP target into a loopback sink in a process of its own, with no store, scheduler or worker
//! around them. The capacity is the highest rate of every-second jobs a steady run holds,
//! found by bisection; the ratio of the two is what compares machines.
//!
//! A probe holds when its lag p99 is under [`HOLD_P99_MS`] and the lag did not grow over its
//! last 20 s by more than [`HOLD_TREND_MS_PER_S`] a second ([`crate::bench_report::lag_trend`]), with
//! nothing lost or delivered twice. On PostgreSQL each probe runs on a database of its own,
//! created beside the one the URL names and dropped after it.

use std::collections::HashMap;
use std::process::ExitCode;
use std::sync::{Arc, Mutex};

use anyhow::{Context, bail};
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use jiff::Timestamp;
use serde_json::{Value, json};
use sundial_core::job::{HttpTarget as HttpSpec, TargetSpec};
use sundial_store_postgres::scratch::ScratchDatabase;
use sundial_target::{DEFAULT_MAX_CONNECTIONS_PER_HOST, Delivery, HttpOptions, HttpTarget, Target};
use tokio::io::AsyncBufReadExt;

use crate::bench_load::{Common, measure, steady};

/// A probe holds only with a lag p99 under this (1,000 ms).
pub const HOLD_P99_MS: f64 = 1000.0;

/// A probe holds only if its lag grew by less than this over its last 20 s, in ms of lag per
/// second of fire time (5: 100 ms over the 20 s).
pub const HOLD_TREND_MS_PER_S: f64 = 5.0;

/// The bisection stops once the rates that held and failed are this close, relative to the
/// one that held (5 %), or 250/s apart, whichever is wider.
const PRECISION: f64 = 0.05;

/// Receipts by (job, slot in ms), as the bench's sink keeps them.
type Seen = Arc<Mutex<HashMap<(String, i64), u32>>>;

async fn receive(
    State(seen): State<Seen>,
    Path(job): Path<String>,
    headers: HeaderMap,
) -> StatusCode {
    let slot = headers
        .get("sundial-scheduled-at")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<Timestamp>().ok());
    if let Some(slot) = slot {
        *seen
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry((job, slot.as_millisecond()))
            .or_default() += 1;
    }
    StatusCode::OK
}

async fn count(State(seen): State<Seen>) -> String {
    seen.lock()
        .unwrap_or_else(|e| e.into_inner())
        .len()
        .to_string()
}

/// `sundial bench ceiling-sink`: serves the ceiling's sink, prints its address on stdout, and
/// serves until killed.
///
/// # Errors
/// No loopback port to listen on.
pub async fn serve_ceiling_sink() -> anyhow::Result<ExitCode> {
    let seen = Seen::default();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    println!("{}", listener.local_addr()?);
    let app = axum::Router::new()
        .route("/sink/{job}", axum::routing::any(receive))
        .route("/count", axum::routing::get(count))
        .with_state(seen);
    axum::serve(listener, app).await?;
    Ok(ExitCode::SUCCESS)
}

/// Measures the delivery ceiling: `attempts` HTTP attempts, `in_flight` at once, each a task
/// of its own as the worker spawns them, through an [`HttpTarget`] with the default
/// connections per host, into the sink of [`serve_ceiling_sink`] in a child process. Returns
/// `{"attempts", "in_flight", "failed", "seconds", "attempts_per_s", "sink_received"}`
/// (seconds from the first attempt's start to the last one's answer).
///
/// # Errors
/// `attempts` or `in_flight` of 0; the sink process cannot start.
pub async fn ceiling(attempts: u32, in_flight: u32) -> anyhow::Result<Value> {
    if attempts == 0 {
        bail!("--attempts: give at least 1");
    }
    if in_flight == 0 {
        bail!("--in-flight: give at least 1");
    }
    let exe = std::env::current_exe().context("locating the sundial binary")?;
    let mut child = tokio::process::Command::new(exe)
        .args(["bench", "ceiling-sink"])
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .context("starting the sink process")?;
    let stdout = child.stdout.take().context("the sink's stdout")?;
    let mut line = String::new();
    tokio::io::BufReader::new(stdout)
        .read_line(&mut line)
        .await?;
    let addr = line.trim().to_owned();
    if addr.is_empty() {
        bail!("the sink process printed no address");
    }
    let target = Arc::new(HttpTarget::with_options(HttpOptions {
        allow: None,
        max_connections_per_host: DEFAULT_MAX_CONNECTIONS_PER_HOST,
    })?);
    let n = attempts as usize;
    let specs: Arc<Vec<TargetSpec>> = Arc::new(
        (0..n)
            .map(|i| {
                TargetSpec::Http(HttpSpec {
                    method: "POST".into(),
                    url: format!("http://{addr}/sink/job-{i}"),
                    headers: Default::default(),
                    body: None,
                    success_codes: vec![],
                })
            })
            .collect(),
    );
    let ids: Arc<Vec<String>> =
        Arc::new((0..n).map(|_| uuid::Uuid::now_v7().to_string()).collect());
    let slot = Timestamp::now();
    let permits = Arc::new(tokio::sync::Semaphore::new(in_flight as usize));
    let started = std::time::Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..n {
        let permit = permits.clone().acquire_owned().await?;
        let (target, specs, ids) = (target.clone(), specs.clone(), ids.clone());
        tasks.spawn(async move {
            let delivery = Delivery {
                execution_id: &ids[i],
                namespace: "bench",
                attempt: 1,
                lease_until: None,
                signature: None,
                scheduled_at: slot,
                now: Timestamp::now(),
                target: &specs[i],
                keep_output: false,
            };
            let outcome = target.dispatch(&delivery).await;
            drop(permit);
            outcome.is_ok()
        });
    }
    let mut failed = 0usize;
    while let Some(ok) = tasks.join_next().await {
        if !ok.unwrap_or(false) {
            failed += 1;
        }
    }
    let seconds = started.elapsed().as_secs_f64();
    let received = reqwest::get(format!("http://{addr}/count"))
        .await?
        .text()
        .await?;
    child.kill().await.ok();
    Ok(json!({
        "attempts": attempts,
        "in_flight": in_flight,
        "failed": failed,
        "seconds": (seconds * 1000.0).round() / 1000.0,
        "attempts_per_s": (n as f64 / seconds).round(),
        "sink_received": received.trim().parse::<u64>().unwrap_or(0),
    }))
}

/// Whether a steady run's report holds its rate: nothing lost or twice, lag p99 under
/// [`HOLD_P99_MS`], the lag's trend over the last 20 s under [`HOLD_TREND_MS_PER_S`].
pub fn holds(report: &Value) -> bool {
    let p99 = report["lag_ms"]["p99"].as_f64().unwrap_or(f64::INFINITY);
    let trend = report["lag_trend_ms_per_s"]
        .as_f64()
        .unwrap_or(f64::INFINITY);
    report["lost"].as_u64() == Some(0)
        && report["duplicates"].as_u64() == Some(0)
        && p99 < HOLD_P99_MS
        && trend < HOLD_TREND_MS_PER_S
}

/// The next rate to try after the rates that held (`held`, the highest) and failed (`failed`,
/// the lowest), or `None` once they are within [`PRECISION`] (or 250/s) of each other: double
/// while nothing failed, halve while nothing held, else bisect. Rates are whole hundreds.
pub fn next_rate(held: Option<u32>, failed: Option<u32>) -> Option<u32> {
    let round = |r: f64| ((r / 100.0).round() as u32).max(1) * 100;
    match (held, failed) {
        (None, None) => None,
        (Some(h), None) => Some(round(f64::from(h) * 2.0)),
        (None, Some(f)) if f <= 100 => None,
        (None, Some(f)) => Some(round(f64::from(f) / 2.0)),
        (Some(h), Some(f)) => {
            let gap = f64::from(f.saturating_sub(h));
            if gap <= (f64::from(h) * PRECISION).max(250.0) {
                None
            } else {
                let mid = round((f64::from(h) + f64::from(f)) / 2.0);
                (mid > h && mid < f).then_some(mid)
            }
        }
    }
}

/// `sundial bench capacity`: the ceiling, then up to `probes` steady runs of `duration` each,
/// starting at `start_rate` (default a quarter of the ceiling); prints each probe's line and
/// then the capacity, the ceiling and their ratio, as a table and one JSON line.
///
/// # Errors
/// Bad options (naming the flag); a probe that cannot run (its server did not start, a
/// PostgreSQL database could not be made).
pub async fn run(
    duration: &str,
    probes: u32,
    start_rate: Option<u32>,
    common: &Common,
) -> anyhow::Result<ExitCode> {
    if probes == 0 {
        bail!("--probes: give at least 1");
    }
    let d: sundial_core::Dur = duration.parse().context("--duration")?;
    if d.as_millis() < 20_000 || !d.as_millis().is_multiple_of(1000) {
        bail!("--duration: {duration} is not a whole number of seconds of at least 20s");
    }
    if start_rate == Some(0) {
        bail!("--start-rate: give at least 1");
    }
    let ceiling = ceiling(100_000, 1024).await?;
    let ceiling_rate = ceiling["attempts_per_s"].as_f64().unwrap_or(0.0);
    eprintln!("delivery ceiling {ceiling_rate:.0}/s");
    let mut rate =
        start_rate.unwrap_or_else(|| (((ceiling_rate / 4.0) / 100.0).round() as u32).max(1) * 100);
    let (mut held, mut failed): (Option<u32>, Option<u32>) = (None, None);
    let mut tried = Vec::new();
    for _ in 0..probes {
        let mut probe = common.clone();
        // Creating the jobs takes longer at higher rates: 5 s, plus 1 s per 4,000 jobs.
        probe.lead_s = probe.lead_s.max(5 + u64::from(rate) / 4000);
        let scratch = match &common.database_url {
            Some(url) if !url.starts_with("sqlite:") => Some(
                ScratchDatabase::create(url, "sundial_capacity")
                    .await
                    .context("making a probe's database (the user needs CREATEDB)")?,
            ),
            _ => None,
        };
        if let Some(db) = &scratch {
            probe.database_url = Some(db.url().to_owned());
        }
        let report = measure(&steady(rate, duration, probe)).await;
        if let Some(db) = scratch {
            let name = db.name().to_owned();
            if let Err(e) = db.drop_it().await {
                eprintln!("could not drop the probe's database {name}: {e}");
            }
        }
        let report = report?;
        let ok = holds(&report);
        eprintln!(
            "probe {rate}/s: {} (served {}/s, lag p99 {} ms, trend {} ms/s, missed {}, lost {}, duplicates {}, lease lapsed {})",
            if ok { "holds" } else { "falls behind" },
            report["triggers_per_s"],
            report["lag_ms"]["p99"],
            report["lag_trend_ms_per_s"],
            report["missed"],
            report["lost"],
            report["duplicates"],
            report["lease_lapsed"]
        );
        tried.push(json!({"rate": rate, "holds": ok, "report": report}));
        if ok {
            held = Some(held.map_or(rate, |h| h.max(rate)));
        } else {
            failed = Some(failed.map_or(rate, |f| f.min(rate)));
        }
        match next_rate(held, failed) {
            Some(next) => rate = next,
            None => break,
        }
    }
    let capacity = held.unwrap_or(0);
    let ratio = if ceiling_rate > 0.0 {
        f64::from(capacity) / ceiling_rate
    } else {
        0.0
    };
    let store = match &common.database_url {
        Some(url) if !url.starts_with("sqlite:") => "postgres",
        _ => "sqlite",
    };
    outln!("store            {store}, {} node(s)", common.nodes);
    outln!("delivery ceiling {ceiling_rate:.0}/s   (HTTP alone, `sundial bench ceiling`)");
    for t in &tried {
        outln!(
            "probe            {}/s {}: lag p99 {} ms, trend {} ms/s",
            t["rate"],
            if t["holds"].as_bool() == Some(true) {
                "holds"
            } else {
                "falls behind"
            },
            t["report"]["lag_ms"]["p99"],
            t["report"]["lag_trend_ms_per_s"]
        );
    }
    outln!(
        "capacity         {capacity}/s{}   ({:.0} % of the ceiling)",
        failed
            .map(|f| format!(" (fails at {f}/s)"))
            .unwrap_or_default(),
        ratio * 100.0
    );
    outln!(
        "{}",
        json!({
            "store": store, "nodes": common.nodes, "ceiling_per_s": ceiling_rate, "capacity_per_s": capacity,
            "fails_at_per_s": failed, "ratio": (ratio * 1000.0).round() / 1000.0,
            "probes": tried.iter().map(|t| json!({"rate": t["rate"], "holds": t["holds"], "triggers_per_s": t["report"]["triggers_per_s"], "lag_ms": t["report"]["lag_ms"], "lag_trend_ms_per_s": t["report"]["lag_trend_ms_per_s"], "missed": t["report"]["missed"], "lost": t["report"]["lost"], "duplicates": t["report"]["duplicates"], "lease_lapsed": t["report"]["lease_lapsed"], "executions": t["report"]["executions"]})).collect::<Vec<_>>(),
        })
    );
    Ok(if held.is_some() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_search_doubles_halves_then_bisects_to_within_five_percent() {
        assert_eq!(next_rate(Some(10_000), None), Some(20_000));
        assert_eq!(next_rate(None, Some(10_000)), Some(5_000));
        assert_eq!(next_rate(Some(10_000), Some(20_000)), Some(15_000));
        assert_eq!(next_rate(Some(15_000), Some(16_000)), Some(15_500));
        // Within 5 % (or 250/s): done.
        assert_eq!(next_rate(Some(15_000), Some(15_700)), None);
        assert_eq!(next_rate(Some(1_000), Some(1_200)), None);
        assert_eq!(next_rate(None, Some(100)), None);
    }

    #[test]
    fn a_probe_holds_only_on_time_flat_and_whole() {
        let report = |p99: f64, trend: f64, lost: u64| json!({"lag_ms": {"p99": p99}, "lag_trend_ms_per_s": trend, "lost": lost, "duplicates": 0});
        assert!(holds(&report(40.0, 0.3, 0)));
        assert!(!holds(&report(1200.0, 0.0, 0)));
        assert!(!holds(&report(400.0, 12.0, 0)));
        assert!(!holds(&report(40.0, 0.0, 3)));
        assert!(!holds(&json!({})));
    }
}
