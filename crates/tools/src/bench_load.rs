//! The burst and steady loads of `sundial bench` (README.md "Sizing with sundial bench"): it
//! creates jobs, starts server processes and a loopback HTTP sink, waits for the slots, and
//! reports drain time,
//! triggers/s, lag (sink receive time − fire time) percentiles, lost and duplicate deliveries,
//! and the servers' peak RSS — as a table, then as one JSON line on stdout.

use std::collections::HashMap;
use std::net::SocketAddr;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use clap::Args;
use jiff::{SignedDuration, Timestamp};
use serde_json::{Value, json};

use crate::bench_nodes::RssTrace;
pub(crate) use crate::bench_nodes::{TempDb, start_nodes};
pub(crate) use crate::bench_report::lag_trend;
use crate::bench_report::{LATE_MS, percentile};
use crate::bench_report::{lag_p99_by_second, recovery};

/// A burst or steady load that [`measure`] runs and reports.
#[derive(Debug, Clone)]
pub(crate) enum Load {
    /// `jobs` one-off jobs all due at the same instant.
    Burst { jobs: u32, common: Common },
    /// `rate` every-second jobs for `duration` (`60s`); `aligned` puts every slot on the
    /// second; `half_after` ends every other job that long into the run.
    Steady {
        rate: u32,
        duration: String,
        aligned: bool,
        half_after: Option<String>,
        common: Common,
    },
}

/// Options every workload takes.
#[derive(Debug, Clone, Args)]
pub(crate) struct Common {
    /// Store URL [default: a fresh SQLite file in the temp directory]
    #[arg(long)]
    pub(crate) database_url: Option<String>,
    /// Server processes to start
    #[arg(long, default_value_t = 1)]
    pub(crate) nodes: u32,
    /// Seconds between job creation and the first slot
    #[arg(long, default_value_t = 5)]
    pub(crate) lead_s: u64,
    /// Far-future jobs to store besides (they must not slow the due lookup)
    #[arg(long, default_value_t = 0)]
    pub(crate) stored: u64,
    /// Finished executions, 60 days old, to load before the run, for history retention to
    /// prune while it runs
    #[arg(long, default_value_t = 0)]
    pub(crate) expired: u64,
    /// Slots of a backfill (docs/time.md, "Backfill") started 5 s into a steady run over the
    /// past of an every-second job of its own; its deliveries are counted apart, so the
    /// figures stay the ordinary slots'
    #[arg(long, default_value_t = 0)]
    pub(crate) backfill: u64,
    /// The backfill's `max_per_second`
    #[arg(long, default_value_t = 5000)]
    pub(crate) backfill_rate: u32,
    /// Every job's `heartbeat_timeout` (e.g. 3s) [default: the job default, 30s]
    #[arg(long)]
    pub(crate) heartbeat_timeout: Option<String>,
    /// The `sundial` binary to start as the server processes [default: this one], so that
    /// two builds are compared by one bench in one sitting
    #[arg(long)]
    pub(crate) server_exe: Option<std::path::PathBuf>,
}

#[derive(Default)]
struct Sink {
    /// (job, slot ms) → receive instants.
    seen: Mutex<HashMap<(String, i64), Vec<Timestamp>>>,
    /// Deliveries of the backfilled job ([`BACKFILLED`]), counted apart.
    backfilled: std::sync::atomic::AtomicU64,
}

/// The job a `--backfill` run backfills, in a namespace of its own (`bench-backfill`) so that
/// the start lags read from the `bench` namespace stay the ordinary slots'.
const BACKFILLED: &str = "backfilled";

/// How many of the seconds with the most late slots the report lists (10).
const LATE_SECONDS_SHOWN: usize = 10;

/// How long the wait for deliveries goes on, past the last slot's fire time, without a new
/// one arriving (10 s): slots still missing then are reported `lost`.
const STALL: SignedDuration = SignedDuration::from_secs(10);

/// The longest wait for deliveries past the last slot's fire time (10 minutes), however
/// slowly they still arrive.
const WAIT_CAP: SignedDuration = SignedDuration::from_secs(600);

/// Whether the wait for deliveries ends at `now`: every expected one arrived (`received` of
/// `expected`); or, past the last slot's fire time `last_slot`, none arrived for [`STALL`]
/// (the last one at `last_arrival`), or [`WAIT_CAP`] has passed since that fire time.
pub(crate) fn wait_is_over(
    received: u64,
    expected: u64,
    last_arrival: Timestamp,
    last_slot: Timestamp,
    now: Timestamp,
) -> bool {
    let stalled = now > last_slot && now.duration_since(last_arrival.max(last_slot)) > STALL;
    received >= expected || stalled || now > last_slot + WAIT_CAP
}

async fn sink(
    State(s): State<Arc<Sink>>,
    Path(job): Path<String>,
    headers: HeaderMap,
) -> StatusCode {
    let now = Timestamp::now();
    if job == BACKFILLED {
        s.backfilled
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        return StatusCode::OK;
    }
    let slot = headers
        .get("sundial-scheduled-at")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<Timestamp>().ok());
    if let Some(slot) = slot {
        s.seen
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry((job, slot.as_millisecond()))
            .or_default()
            .push(now);
    }
    StatusCode::OK
}

/// Creates jobs through the bulk endpoint, 1,000 per request, 4 requests in flight.
async fn create_jobs(api: &str, what: &str, jobs: Vec<(String, Value)>) -> anyhow::Result<()> {
    let total = jobs.len();
    let mut jobs = jobs.into_iter();
    let batches = std::iter::from_fn(move || {
        let batch: Vec<(String, Value)> = jobs.by_ref().take(1000).collect();
        (!batch.is_empty()).then_some(batch)
    });
    create_job_batches(api, what, total, batches).await
}

/// Creates jobs through the bulk endpoint from batches made as they are needed (so ten
/// million stored jobs never sit in memory at once), 4 requests in flight.
async fn create_job_batches(
    api: &str,
    what: &str,
    total: usize,
    mut batches: impl Iterator<Item = Vec<(String, Value)>>,
) -> anyhow::Result<()> {
    let http = reqwest::Client::new();
    let mut set = tokio::task::JoinSet::new();
    let mut done = 0;
    loop {
        while set.len() < 4 {
            let Some(batch) = batches.next() else { break };
            let (http, url) = (
                http.clone(),
                format!("{api}/v1/namespaces/bench/jobs:apply"),
            );
            let n = batch.len();
            let body = json!({"jobs": batch.into_iter().map(|(name, mut body)| { body["name"] = json!(name); body }).collect::<Vec<_>>()});
            set.spawn(async move {
                let r = http
                    .post(url)
                    .header("content-type", "application/json")
                    .body(body.to_string())
                    .send()
                    .await?;
                let status = r.status();
                anyhow::ensure!(
                    status.is_success(),
                    "creating jobs: HTTP {status}: {}",
                    r.text().await.unwrap_or_default()
                );
                Ok(n)
            });
        }
        match set.join_next().await {
            Some(r) => {
                done += r??;
                if std::io::IsTerminal::is_terminal(&std::io::stderr()) {
                    eprint!("\rcreating {what} jobs {done}/{total}");
                } else if done % 500_000 == 0 {
                    eprintln!("creating {what} jobs {done}/{total}");
                }
            }
            None => break,
        }
    }
    eprintln!();
    Ok(())
}

/// Creates the every-second job [`BACKFILLED`] and, in the background, starts a backfill of
/// `common.backfill` of its past slots at `common.backfill_rate` 5 s after `first_slot`;
/// resolves to the backfill's id once started.
async fn start_backfill(
    api: &str,
    sink_addr: SocketAddr,
    common: &Common,
    first_slot: Timestamp,
) -> anyhow::Result<tokio::task::JoinHandle<anyhow::Result<String>>> {
    let http = reqwest::Client::new();
    let job = json!({"schedule": {"cron": "* * * * * *"},
        "target": {"type": "http", "url": format!("http://{sink_addr}/sink/{BACKFILLED}")},
        "retry": {"max_attempts": 3, "initial_interval": "1s"}});
    let resp = http
        .put(format!(
            "{api}/v1/namespaces/bench-backfill/jobs/{BACKFILLED}"
        ))
        .header("content-type", "application/json")
        .body(job.to_string())
        .send()
        .await?;
    if !resp.status().is_success() {
        bail!("creating the backfilled job: {}", resp.text().await?);
    }
    let (slots, rate) = (common.backfill, common.backfill_rate);
    let api = api.to_owned();
    Ok(tokio::spawn(async move {
        let at = first_slot + SignedDuration::from_secs(5);
        let wait = at.duration_since(Timestamp::now());
        if wait.is_positive() {
            tokio::time::sleep(Duration::try_from(wait).unwrap_or_default()).await;
        }
        let to = Timestamp::from_second(Timestamp::now().as_second() - 1)?;
        let from = to - SignedDuration::from_secs(i64::try_from(slots).unwrap_or(i64::MAX));
        let resp = http
            .post(format!(
                "{api}/v1/namespaces/bench-backfill/jobs/{BACKFILLED}/backfill"
            ))
            .header("content-type", "application/json")
            .body(json!({"from": from, "to": to, "max_per_second": rate}).to_string())
            .send()
            .await?;
        let body: Value = serde_json::from_str(&resp.text().await?)?;
        body["id"]
            .as_str()
            .map(str::to_owned)
            .with_context(|| format!("starting the backfill: {body}"))
    }))
}

/// The backfill as it stands after the run: its progress, how long it ran (first to last
/// step, by the store's clock), and its deliveries.
async fn backfill_report(
    api: &str,
    started: tokio::task::JoinHandle<anyhow::Result<String>>,
    sink: &Sink,
) -> anyhow::Result<Value> {
    let id = started.await??;
    let b: Value = serde_json::from_str(
        &reqwest::get(format!(
            "{api}/v1/namespaces/bench-backfill/jobs/{BACKFILLED}/backfills/{id}"
        ))
        .await?
        .text()
        .await?,
    )?;
    let at = |k: &str| b[k].as_str().and_then(|s| s.parse::<Timestamp>().ok());
    let seconds = match (at("created_at"), at("updated_at")) {
        (Some(a), Some(b)) => (b.duration_since(a).as_secs_f64() * 10.0).round() / 10.0,
        _ => 0.0,
    };
    Ok(json!({
        "slots": b["slots"], "max_per_second": b["max_per_second"], "created": b["created"],
        "state": b["state"], "seconds": seconds,
        "delivered": sink.backfilled.load(std::sync::atomic::Ordering::Relaxed),
        "from": b["created_at"], "until": b["updated_at"],
    }))
}

/// `started_at − fire_at` of every started execution of the bench namespace, in ms, read
/// through the API.
async fn start_lags(api: &str) -> anyhow::Result<Vec<f64>> {
    let http = reqwest::Client::new();
    let mut lags = Vec::new();
    let mut token: Option<String> = None;
    loop {
        let mut url = format!("{api}/v1/namespaces/bench/executions?limit=1000");
        if let Some(t) = &token {
            url.push_str(&format!("&page_token={t}"));
        }
        let page: Value = serde_json::from_str(&http.get(&url).send().await?.text().await?)?;
        for e in page["items"].as_array().map_or(&[][..], Vec::as_slice) {
            let at = |k: &str| e[k].as_str().and_then(|s| s.parse::<Timestamp>().ok());
            if let (Some(started), Some(fire)) = (at("started_at"), at("fire_at")) {
                lags.push((started.as_millisecond() - fire.as_millisecond()) as f64);
            }
        }
        match page["next_page_token"].as_str() {
            Some(t) => token = Some(t.to_owned()),
            None => return Ok(lags),
        }
    }
}

/// Moves every instant of a schedule (`at`, `start_at`, `end_at`) later by `by`.
fn shift_schedule(schedule: &mut Value, by: SignedDuration) {
    for key in ["at", "start_at", "end_at"] {
        if let Some(t) = schedule[key]
            .as_str()
            .and_then(|s| s.parse::<Timestamp>().ok())
        {
            schedule[key] = json!((t + by).to_string());
        }
    }
}

/// `[#####.....]`: `done` of `total` as a bar `width` characters wide.
pub(crate) fn progress_bar(done: u64, total: u64, width: usize) -> String {
    let filled = (done.min(total) * width as u64)
        .checked_div(total)
        .map_or(width, |f| usize::try_from(f).unwrap_or(width));
    format!("[{}{}]", "#".repeat(filled), ".".repeat(width - filled))
}

/// A steady run of `rate` every-second jobs for `duration` (`60s`), slots spread over each
/// second: what [`measure`] reports.
pub(crate) fn steady(rate: u32, duration: &str, common: Common) -> Load {
    Load::Steady {
        rate,
        duration: duration.to_owned(),
        aligned: false,
        half_after: None,
        common,
    }
}

/// Runs a burst or steady workload and returns its report (the JSON line `sundial bench`
/// prints): drain, triggers/s, lag percentiles (ms), lost and duplicate deliveries, leases
/// lapsed, the executions left in each state, peak RSS, and for a steady run the lag p99 of
/// each second of fire times with its trend over the last 20 s ([`lag_trend`]).
///
/// # Errors
/// Bad options (naming the flag), a server that does not start, jobs not created in time.
pub(crate) async fn measure(workload: &Load) -> anyhow::Result<Value> {
    // Steady runs only: how the slots fall within each second, and the run's length in s.
    let (mut arrivals, mut offered_s) = (None, 0.0);
    // Steady runs with --half-after only: the second (since the first slot) the load halves.
    let mut halved_at: Option<usize> = None;
    let (workload, common, expected, first_slot, last_slot, jobs) = match workload {
        Load::Burst { jobs, common } => {
            let at =
                Timestamp::from_second(Timestamp::now().as_second() + common.lead_s as i64 + 1)?;
            (
                "burst",
                common,
                u64::from(*jobs),
                at,
                at,
                (0..*jobs)
                    .map(|i| (format!("b{i}"), json!({"schedule": {"at": at.to_string()}})))
                    .collect::<Vec<_>>(),
            )
        }
        Load::Steady {
            rate,
            duration,
            aligned,
            half_after,
            common,
        } => {
            let d: sundial_core::Dur = duration.parse().context("--duration")?;
            let start =
                Timestamp::from_second(Timestamp::now().as_second() + common.lead_s as i64 + 1)?;
            if d.as_millis() < 1000 || !d.as_millis().is_multiple_of(1000) {
                bail!("--duration: {duration} is not a whole number of seconds of at least 1s");
            }
            let secs = d.as_millis() / 1000;
            let span = SignedDuration::from_secs(i64::try_from(secs).unwrap_or(i64::MAX) - 1);
            // With --half-after H: the odd jobs' last slot is in second H - 1, so the rest stay
            // spread evenly over each second.
            let half = match half_after {
                Some(h) => {
                    let h: sundial_core::Dur = h.parse().context("--half-after")?;
                    if h.as_millis() < 1000
                        || !h.as_millis().is_multiple_of(1000)
                        || h.as_millis() >= d.as_millis()
                    {
                        bail!(
                            "--half-after: {h} is not a whole number of seconds of at least 1s and shorter than --duration"
                        );
                    }
                    Some(h.as_millis() / 1000)
                }
                None => None,
            };
            halved_at = half.and_then(|h| usize::try_from(h).ok());
            let ended = u64::from(*rate / 2);
            // Job i's first slot: i/R of a second past `start` (whole milliseconds), or `start`.
            let offset = |i: u32| {
                let ms = if *aligned {
                    0
                } else {
                    i64::from(i) * 1000 / i64::from((*rate).max(1))
                };
                SignedDuration::from_millis(ms)
            };
            arrivals = Some(if *aligned { "aligned" } else { "spread" });
            offered_s = secs as f64;
            let last = start + span + offset(rate.saturating_sub(1));
            (
                "steady",
                common,
                u64::from(*rate) * secs - half.map_or(0, |h| ended * (secs - h)),
                start,
                last,
                (0..*rate)
                    .map(|i| {
                        let first = start + offset(i);
                        let span = match half {
                            Some(h) if i % 2 == 1 => {
                                SignedDuration::from_secs(i64::try_from(h).unwrap_or(1) - 1)
                            }
                            _ => span,
                        };
                        // Half a second past its last slot, so a one-second run has an end
                        // after its start.
                        let end = first + span + SignedDuration::from_millis(500);
                        let body = json!({"schedule": {"every": "1s", "start_at": first.to_string(), "end_at": end.to_string()}});
                        (format!("s{i}"), body)
                    })
                    .collect(),
            )
        }
    };
    let job_count = jobs.len();
    if let Some(timeout) = &common.heartbeat_timeout {
        let parsed: sundial_core::Dur = timeout
            .parse()
            .map_err(|e| anyhow::anyhow!("--heartbeat-timeout: {e}"))?;
        if parsed.as_millis() < 1000 {
            bail!("--heartbeat-timeout: {timeout} is shorter than 1s");
        }
    }
    if expected == 0 {
        bail!("--jobs / --rate: give at least 1");
    }
    if common.nodes == 0 {
        bail!("--nodes: give at least 1 server process");
    }
    let temp_db = std::env::temp_dir().join(format!("sundial-bench-{}.db", std::process::id()));
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
            "--nodes {}: the embedded SQLite store runs one scheduler process; use --database-url postgres://... for several",
            common.nodes
        );
    }

    let sink_state = Arc::new(Sink::default());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let sink_addr = listener.local_addr()?;
    let app = axum::Router::new()
        .route("/sink/{job}", axum::routing::any(sink))
        .with_state(sink_state.clone());
    tokio::spawn(async move { axum::serve(listener, app).await });

    let history_before = if common.expired > 0 {
        crate::bench_history::load_expired(&url, common.expired).await?;
        // The load's pages reach the disk before the measured phase, as history written over
        // weeks would have: the kernel's write-back of gigabytes would stall every commit.
        let synced = tokio::process::Command::new("sync").status().await;
        if !synced.is_ok_and(|s| s.success()) {
            eprintln!(
                "could not run sync after the load; the measured phase may pay for its write-back"
            );
        }
        Some(crate::bench_history::left(&url).await?)
    } else {
        None
    };
    let nodes = start_nodes(&url, common.nodes, common.server_exe.as_deref()).await?;
    let jobs: Vec<(String, Value)> = jobs
        .into_iter()
        .map(|(name, mut body)| {
            body["target"] =
                json!({"type": "http", "url": format!("http://{sink_addr}/sink/{name}")});
            body["retry"] = json!({"max_attempts": 3, "initial_interval": "1s"});
            (name, body)
        })
        .collect();
    if common.stored > 0 {
        let far = json!({"schedule": {"at": "2199-01-01T00:00:00Z"}, "target": {"type": "http", "url": format!("http://{sink_addr}/sink/stored")}});
        let mut next = 0u64;
        let stored = std::iter::from_fn(|| {
            let end = (next + 1000).min(common.stored);
            let batch: Vec<(String, Value)> = (next..end)
                .map(|i| (format!("f{i}"), far.clone()))
                .collect();
            next = end;
            (!batch.is_empty()).then_some(batch)
        });
        let loading = Instant::now();
        let total = usize::try_from(common.stored).unwrap_or(usize::MAX);
        create_job_batches(&nodes.api, "stored", total, stored).await?;
        eprintln!(
            "stored {} far-future jobs in {:.1} s",
            common.stored,
            loading.elapsed().as_secs_f64()
        );
        // Only PostgreSQL's: its next checkpoint and the full-page writes after it would
        // fall in the measured phase, as the jobs of a running system were written long
        // before the slot (`pgbench` vacuums before it measures, for the same reason).
        if store == "postgres" {
            crate::bench_history::checkpoint(&url).await;
        }
    }
    // The slot is placed only now, after the stored jobs are in.
    let lead = SignedDuration::from_secs(i64::try_from(common.lead_s).unwrap_or(5));
    let shift = (Timestamp::now() + lead)
        .duration_since(first_slot)
        .max(SignedDuration::ZERO);
    let shift = SignedDuration::from_secs(shift.as_secs() + i64::from(shift.subsec_nanos() > 0));
    let (first_slot, last_slot) = (first_slot + shift, last_slot + shift);
    let jobs: Vec<(String, Value)> = jobs
        .into_iter()
        .map(|(name, mut body)| {
            shift_schedule(&mut body["schedule"], shift);
            if let Some(timeout) = &common.heartbeat_timeout {
                body["heartbeat_timeout"] = json!(timeout);
            }
            (name, body)
        })
        .collect();
    let created = Instant::now();
    create_jobs(&nodes.api, workload, jobs).await?;
    if Timestamp::now() >= first_slot {
        bail!(
            "creating the jobs took {:?}, past the first slot; raise --lead-s",
            created.elapsed()
        );
    }

    let backfill = if common.backfill > 0 {
        if workload != "steady" {
            bail!("--backfill: only a steady run starts a backfill");
        }
        Some(start_backfill(&nodes.api, sink_addr, common, first_slot).await?)
    } else {
        None
    };

    // Wait until every expected delivery arrived. A run that fell behind is waited for as long
    // as deliveries keep arriving, so a late slot counts as late, not as lost; past the last
    // slot, STALL without a new delivery (or WAIT_CAP in all) ends the wait.
    let mut progress = (0u64, Timestamp::now());
    let interactive = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let mut polls = 0u64;
    let mut rss = RssTrace::default();
    loop {
        if polls.is_multiple_of(10) {
            rss.sample(Timestamp::now().duration_since(first_slot), nodes.rss_mb());
        }
        let received = sink_state
            .seen
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .len() as u64;
        let now = Timestamp::now();
        // On a terminal the bar is redrawn in place; elsewhere (a log) a line every 5 s.
        if interactive || polls.is_multiple_of(50) {
            eprint!(
                "{}{workload} {} {received}/{expected} slots delivered{}",
                if interactive { "\r" } else { "" },
                progress_bar(received, expected, 30),
                if interactive { "" } else { "\n" }
            );
        }
        polls += 1;
        if received > progress.0 {
            progress = (received, now);
        }
        if wait_is_over(received, expected, progress.1, last_slot, now) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // A short grace period to catch duplicates.
    tokio::time::sleep(Duration::from_millis(500)).await;
    eprintln!();
    let peak_rss_mb = nodes.peak_rss_mb();
    let (lease_lapsed, worker_leases_lost) = nodes.lapsed().await;
    let backfill = match backfill {
        Some(started) => Some(backfill_report(&nodes.api, started, &sink_state).await?),
        None => None,
    };
    let mut start_lags = start_lags(&nodes.api).await.unwrap_or_default();
    start_lags.sort_by(f64::total_cmp);
    let history_after = match history_before {
        Some(_) => Some(crate::bench_history::left(&url).await?),
        None => None,
    };
    drop(nodes);
    let states = crate::bench_history::executions_by_state(&url)
        .await
        .unwrap_or_else(|e| {
            eprintln!("could not count the executions by state: {e}");
            Default::default()
        });

    let seen = sink_state.seen.lock().unwrap_or_else(|e| e.into_inner());
    let mut lags: Vec<f64> = Vec::with_capacity(seen.len());
    let mut duplicates = 0u64;
    let mut last_receive = first_slot;
    for ((_, slot_ms), receipts) in seen.iter() {
        duplicates += receipts.len() as u64 - 1;
        let first = receipts.iter().min().copied().unwrap_or(first_slot);
        last_receive = last_receive.max(first);
        lags.push((first.as_millisecond() - slot_ms) as f64);
    }
    lags.sort_by(f64::total_cmp);
    let by_second = if workload == "steady" {
        lag_p99_by_second(&seen, first_slot, offered_s as usize)
    } else {
        Vec::new()
    };
    // When the run was late: the seconds (since the first slot) holding the most slots that
    // lagged past LATE_MS, to set beside the nodes' logs.
    let mut late: HashMap<i64, u64> = HashMap::new();
    for ((_, slot_ms), receipts) in seen.iter() {
        if let Some(first) = receipts.iter().min()
            && first.as_millisecond() - slot_ms > LATE_MS
        {
            *late
                .entry((slot_ms - first_slot.as_millisecond()).div_euclid(1000))
                .or_default() += 1;
        }
    }
    let mut late: Vec<(i64, u64)> = late.into_iter().collect();
    late.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    late.truncate(LATE_SECONDS_SHOWN);
    // The ordinary slots fired while the backfill was creating executions, apart: the
    // whole run's figures would dilute its effect with the seconds before and after it.
    let mut backfill = backfill;
    if let Some(b) = backfill.as_mut() {
        let at = |k: &str| b[k].as_str().and_then(|s| s.parse::<Timestamp>().ok());
        if let (Some(from), Some(until)) = (at("from"), at("until")) {
            let (from, until) = (from.as_millisecond(), until.as_millisecond());
            let mut during: Vec<f64> = seen
                .iter()
                .filter(|((_, slot), _)| (from..=until).contains(slot))
                .filter_map(|((_, slot), receipts)| {
                    receipts
                        .iter()
                        .min()
                        .map(|r| (r.as_millisecond() - slot) as f64)
                })
                .collect();
            during.sort_by(f64::total_cmp);
            b["slots_during"] = json!(during.len());
            b["lag_ms_during"] = json!({"p50": percentile(&during, 50.0), "p99": percentile(&during, 99.0), "max": during.last().copied().unwrap_or(0.0)});
        }
    }
    // A slot its misfire policy recorded `missed` (it waited past the job's misfire threshold)
    // is accounted for: lost are the slots neither delivered nor recorded.
    let missed = states.get("missed").copied().unwrap_or(0);
    let lost = expected
        .saturating_sub(seen.len() as u64)
        .saturating_sub(missed);
    let drain_s = last_receive
        .duration_since(first_slot)
        .as_secs_f64()
        .max(0.001);
    // Delivered slots per second (a burst: from its fire time to the last delivery): for a steady
    // run that keeps up this is the offered rate; for one that falls behind, what it achieved.
    let triggers_per_s = if workload == "burst" {
        seen.len() as f64 / drain_s
    } else {
        // The run's length, plus whatever the last slot's delivery lagged beyond a second
        // (the same allowance in both arrival patterns).
        let tail_lag_s = last_receive.duration_since(last_slot).as_secs_f64();
        seen.len() as f64 / offered_s.max(offered_s - 1.0 + tail_lag_s)
    };
    let mut report = json!({
        "workload": workload, "store": store, "jobs": job_count, "slots": expected, "stored": common.stored, "nodes": common.nodes,
        "delivered": seen.len(), "drain_s": (drain_s * 1000.0).round() / 1000.0,
        "triggers_per_s": triggers_per_s.round(),
        "lag_ms": {"p50": percentile(&lags, 50.0), "p90": percentile(&lags, 90.0), "p99": percentile(&lags, 99.0), "max": lags.last().copied().unwrap_or(0.0)},
        "start_lag_ms": {"p50": percentile(&start_lags, 50.0), "p99": percentile(&start_lags, 99.0), "max": start_lags.last().copied().unwrap_or(0.0)},
        "late_seconds": late.iter().map(|(at, n)| json!({"second": at, "slots": n})).collect::<Vec<_>>(),
        "missed": missed, "lost": lost, "duplicates": duplicates, "lease_lapsed": lease_lapsed,
        "worker_leases_lost": worker_leases_lost, "peak_rss_mb": (peak_rss_mb * 10.0).round() / 10.0,
        "rss_mb": {"at_1min": rss.at_1min.map(|mb| (mb * 10.0).round() / 10.0), "peak_30s_to_1min": (rss.peak_30s_to_1min * 10.0).round() / 10.0, "peak_after_1min": (rss.peak_after_1min * 10.0).round() / 10.0, "end": (rss.end * 10.0).round() / 10.0},
    });
    report["executions"] = json!(states);
    if let Some(a) = arrivals {
        report["arrivals"] = json!(a);
        report["lag_p99_ms_by_second"] = json!(by_second);
        report["lag_trend_ms_per_s"] = json!((lag_trend(&by_second) * 10.0).round() / 10.0);
        if let Some(h) = halved_at {
            report["halved_after_s"] = json!(h);
            report["recovery_s"] = json!(recovery(&by_second, h, LATE_MS as f64));
        }
    }
    if let Some(b) = &backfill {
        report["backfill"] = b.clone();
    }
    if let (Some(before), Some(after)) = (history_before, history_after) {
        report["expired"] = json!({"loaded": common.expired, "left": after.0, "db_bytes_before": before.1, "db_bytes_after": after.1});
    }
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_wait_goes_on_while_deliveries_arrive() {
        let slot: Timestamp = "2026-12-01T00:00:00Z".parse().unwrap();
        let at = |s: i64| slot + SignedDuration::from_secs(s);
        // All arrived: over, even before the slot.
        assert!(wait_is_over(10, 10, at(-1), slot, at(-1)));
        // Before the last slot nothing stalls, however long since the last arrival.
        assert!(!wait_is_over(5, 10, at(-60), slot, at(-1)));
        // Past it, a run that is late but still delivering is waited for...
        assert!(!wait_is_over(5, 10, at(100), slot, at(105)));
        // ...until nothing has arrived for STALL, counted from the slot at the earliest...
        assert!(!wait_is_over(5, 10, at(-30), slot, at(9)));
        assert!(wait_is_over(5, 10, at(-30), slot, at(11)));
        assert!(wait_is_over(5, 10, at(100), slot, at(111)));
        // ...or WAIT_CAP past the slot in all.
        assert!(wait_is_over(5, 10, at(600), slot, at(601)));
    }

    #[test]
    fn percentiles_are_nearest_rank() {
        let v: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(percentile(&v, 50.0), 50.0);
        assert_eq!(percentile(&v, 99.0), 99.0);
        assert_eq!(percentile(&v, 100.0), 100.0);
        assert_eq!(percentile(&[], 99.0), 0.0);
    }

    #[test]
    fn the_progress_bar_fills_with_the_work_done() {
        assert_eq!(progress_bar(0, 10, 4), "[....]");
        assert_eq!(progress_bar(5, 10, 4), "[##..]");
        assert_eq!(progress_bar(12, 10, 4), "[####]");
        assert_eq!(progress_bar(0, 0, 2), "[##]");
    }
}
