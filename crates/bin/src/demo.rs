//! `sundial demo`: a server on an embedded store, a local HTTP receiver, the example jobs, and
//! each execution printed as it completes.

use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Context;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use clap::Args;
use jiff::Timestamp;
use serde_json::Value;

use crate::client::{Api, ClientOpts, Format, parse_jobs};
use crate::config::{ROLES, ServerConfig};

/// `sundial demo` flags.
#[derive(Debug, Args)]
pub struct DemoArgs {
    /// How long to run, e.g. 30s or 2m
    #[arg(long, default_value = "30s")]
    duration: String,
    /// Jobs file; `${RECEIVER}` and `${IN_5S}` are filled in
    #[arg(short = 'f', long, default_value = "examples/jobs.yaml")]
    file: PathBuf,
    /// Store URL [default: a fresh SQLite file in the temp directory]
    #[arg(long)]
    database_url: Option<String>,
}

const BUILTIN_JOBS: &str = include_str!("../../../examples/jobs.yaml");

#[derive(Default)]
struct Receiver {
    /// Deliveries per path.
    count: Mutex<HashMap<String, u64>>,
    /// Execution ids seen by /flaky (the first attempt of each fails).
    flaky_seen: Mutex<HashSet<String>>,
}

async fn receive(
    State(r): State<Arc<Receiver>>,
    Path(path): Path<String>,
    headers: HeaderMap,
) -> StatusCode {
    *r.count
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .entry(path.clone())
        .or_default() += 1;
    let id = headers
        .get("idempotency-key")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_owned();
    if path == "flaky"
        && r.flaky_seen
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(id)
    {
        return StatusCode::SERVICE_UNAVAILABLE;
    }
    StatusCode::OK
}

/// Runs the demo.
pub async fn run(args: DemoArgs) -> anyhow::Result<ExitCode> {
    let duration: sundial_core::Dur = args.duration.parse().context("--duration")?;
    let receiver = Arc::new(Receiver::default());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .context("binding the receiver")?;
    let receiver_addr = listener.local_addr()?;
    let app = axum::Router::new()
        .route("/{path}", axum::routing::any(receive))
        .with_state(receiver.clone());
    tokio::spawn(async move { axum::serve(listener, app).await });

    // The demo's own database files go when the demo does, on an error or Ctrl-C too.
    let temp_db =
        TempDb(std::env::temp_dir().join(format!("sundial-demo-{}.db", std::process::id())));
    let database_url = args
        .database_url
        .clone()
        .unwrap_or_else(|| format!("sqlite://{}", temp_db.0.display()));
    let _temp_db = args.database_url.is_none().then_some(temp_db);
    let config = ServerConfig {
        roles: ROLES.map(String::from).to_vec(),
        database_url: database_url.clone(),
        listen: SocketAddr::from(([127, 0, 0, 1], 0)),
        node_id: "demo".into(),
        connections: Default::default(),
        lease_ttl: sundial_core::Dur::from_secs(10),
        rate_limits: Default::default(),
        max_in_flight: 1024,
        clock_offset_ms: 0,
        http_allow: None,
        tokens: None,
        maintenance: Default::default(),
    };
    let running = crate::server::start(&config).await?;
    let api_addr = running.addr;
    outln!(
        "Sundial {} — API on http://{api_addr}, store {database_url}",
        env!("CARGO_PKG_VERSION")
    );
    outln!("HTTP receiver on http://{receiver_addr}; running for {duration}\n");

    let text = std::fs::read_to_string(&args.file).unwrap_or_else(|_| BUILTIN_JOBS.to_owned());
    let in_5s = Timestamp::now() + jiff::SignedDuration::from_secs(5);
    let text = text
        .replace("${RECEIVER}", &format!("http://{receiver_addr}"))
        .replace(
            "${IN_5S}",
            &in_5s.round(jiff::Unit::Second).unwrap_or(in_5s).to_string(),
        );
    let api = Api::new(ClientOpts {
        server: format!("http://{api_addr}"),
        token: None,
        namespace: "demo".into(),
        output: Format::Table,
    });
    for job in parse_jobs(&text)? {
        let name = job["name"].as_str().unwrap_or_default().to_owned();
        let v = api
            .call(reqwest::Method::PUT, &format!("/jobs/{name}"), Some(&job))
            .await?;
        outln!(
            "applied job {name:<16} next fire at {}",
            v["next_fire_at"].as_str().unwrap_or("-")
        );
    }
    outln!(
        "\n{:<24}  {:<16}  {:<8}  {:<10}  {:>7}  {:>8}",
        "SCHEDULED",
        "JOB",
        "TRIGGER",
        "STATE",
        "ATTEMPT",
        "LAG MS"
    );

    let deadline = tokio::time::Instant::now() + duration.as_std();
    let mut printed = HashSet::new();
    let mut finished = 0;
    let interrupted = tokio::signal::ctrl_c();
    tokio::pin!(interrupted);
    while tokio::time::Instant::now() < deadline {
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_millis(250)) => {}
            _ = &mut interrupted => {
                outln!("\ninterrupted; stopping");
                break;
            }
        }
        let list = api
            .call(reqwest::Method::GET, "/executions?limit=200", None)
            .await?;
        let mut items: Vec<&Value> = list["items"]
            .as_array()
            .map(|a| a.iter().collect())
            .unwrap_or_default();
        items.reverse();
        for e in items {
            let state = e["state"].as_str().unwrap_or("");
            let terminal = !matches!(state, "scheduled" | "queued" | "running" | "retry_wait");
            let id = e["id"].as_str().unwrap_or("").to_owned();
            if !terminal || !printed.insert(id.clone()) {
                continue;
            }
            finished += 1;
            let lag = match (e["started_at"].as_str(), e["fire_at"].as_str()) {
                (Some(s), Some(f)) => match (s.parse::<Timestamp>(), f.parse::<Timestamp>()) {
                    (Ok(s), Ok(f)) => (s.as_millisecond() - f.as_millisecond()).to_string(),
                    _ => "-".into(),
                },
                _ => "-".into(),
            };
            outln!(
                "{:<24}  {:<16}  {:<8}  {:<10}  {:>7}  {:>8}",
                e["scheduled_at"].as_str().unwrap_or("-"),
                e["job"].as_str().unwrap_or("-"),
                e["trigger"].as_str().unwrap_or("-"),
                state,
                format!("{}/{}", e["attempt"], e["max_attempts"]),
                lag
            );
        }
    }
    running.stop().await?;
    let deliveries: u64 = receiver
        .count
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .values()
        .sum();
    outln!("\n{finished} executions finished; the receiver saw {deliveries} deliveries.");
    Ok(ExitCode::SUCCESS)
}

/// The demo's SQLite database in the temp directory: its files (the database, its log and
/// shared memory, the scheduler lock) are removed when this is dropped.
struct TempDb(PathBuf);

impl Drop for TempDb {
    fn drop(&mut self) {
        for suffix in ["", "-wal", "-shm", ".scheduler.lock"] {
            let _ = std::fs::remove_file(format!("{}{suffix}", self.0.display()));
        }
    }
}
