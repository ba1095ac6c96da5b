//! The delivery ceiling: how many HTTP attempts a second this machine can make through
//! Sundial's HTTP target into a loopback sink shaped like `sundial bench`'s, with no store,
//! no scheduler and no worker around them (BENCHMARKS.md, "The delivery ceiling").
//!
//! ```sh
//! cargo run --release -p sundial --example delivery_ceiling -- 100000 1024
//! ```
//!
//! Arguments: the attempts to make (default 100,000), how many run at once (default 1,024,
//! the worker's default `max_in_flight`), and the target's `max_connections_per_host`
//! (default [`DEFAULT_MAX_CONNECTIONS_PER_HOST`]). The sink runs in a child process of its own with a
//! two-thread runtime, as the bench's sink runs in the bench process beside a separate server
//! process; each attempt is a task of its own, as the worker spawns them. Prints one JSON line:
//! attempts, seconds from the first attempt's start to the last one's answer, attempts per
//! second, and the sink's count of distinct (job, slot) pairs received.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use anyhow::{Context, bail};
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use jiff::Timestamp;
use sundial_core::job::{HttpTarget as HttpSpec, TargetSpec};
use sundial_target::{DEFAULT_MAX_CONNECTIONS_PER_HOST, Delivery, HttpOptions, HttpTarget, Target};
use tokio::io::AsyncBufReadExt;

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Receipts by (job, slot in ms), as the bench's sink keeps them.
type Seen = Arc<Mutex<HashMap<(String, i64), Vec<Timestamp>>>>;

async fn receive(
    State(seen): State<Seen>,
    Path(job): Path<String>,
    headers: HeaderMap,
) -> StatusCode {
    let now = Timestamp::now();
    let slot = headers
        .get("sundial-scheduled-at")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<Timestamp>().ok());
    if let Some(slot) = slot {
        seen.lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry((job, slot.as_millisecond()))
            .or_default()
            .push(now);
    }
    StatusCode::OK
}

async fn count(State(seen): State<Seen>) -> String {
    seen.lock()
        .unwrap_or_else(|e| e.into_inner())
        .len()
        .to_string()
}

/// The child: serve the sink, print its address on stdout, serve until killed.
async fn sink() -> anyhow::Result<()> {
    let seen = Seen::default();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    println!("{}", listener.local_addr()?);
    let app = axum::Router::new()
        .route("/sink/{job}", axum::routing::any(receive))
        .route("/count", axum::routing::get(count))
        .with_state(seen);
    axum::serve(listener, app).await?;
    Ok(())
}

fn arg(args: &[String], at: usize, default: usize, what: &str) -> anyhow::Result<usize> {
    match args.get(at) {
        None => Ok(default),
        Some(v) => match v.parse::<usize>() {
            Ok(n) if n > 0 => Ok(n),
            _ => bail!("{what}: '{v}' is not a positive whole number"),
        },
    }
}

async fn measure(attempts: usize, in_flight: usize, per_host: usize) -> anyhow::Result<()> {
    let exe = std::env::current_exe()?;
    let mut child = tokio::process::Command::new(exe)
        .arg("sink")
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
        max_connections_per_host: per_host,
    })?);
    let specs: Arc<Vec<TargetSpec>> = Arc::new(
        (0..attempts)
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
    let ids: Arc<Vec<String>> = Arc::new(
        (0..attempts)
            .map(|_| uuid::Uuid::now_v7().to_string())
            .collect(),
    );
    let slot = Timestamp::now();
    let permits = Arc::new(tokio::sync::Semaphore::new(in_flight));
    let started = std::time::Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..attempts {
        let permit = permits.clone().acquire_owned().await?;
        let (target, specs, ids) = (target.clone(), specs.clone(), ids.clone());
        tasks.spawn(async move {
            let delivery = Delivery {
                execution_id: &ids[i],
                attempt: 1,
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
    println!(
        "{}",
        serde_json::json!({
            "attempts": attempts,
            "in_flight": in_flight,
            "max_connections_per_host": per_host,
            "failed": failed,
            "seconds": (seconds * 1000.0).round() / 1000.0,
            "attempts_per_s": (attempts as f64 / seconds).round(),
            "sink_received": received.trim().parse::<u64>().unwrap_or(0),
        })
    );
    child.kill().await.ok();
    Ok(())
}

#[tokio::main(worker_threads = 2)]
async fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some("sink") {
        return sink().await;
    }
    let attempts = arg(&args, 0, 100_000, "attempts")?;
    let in_flight = arg(&args, 1, 1024, "in flight")?;
    let per_host = arg(
        &args,
        2,
        DEFAULT_MAX_CONNECTIONS_PER_HOST,
        "max connections per host",
    )?;
    measure(attempts, in_flight, per_host).await
}
