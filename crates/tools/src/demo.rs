//! `sundial demo`: a server on an embedded store, a local HTTP receiver, the example jobs and
//! workflows (examples/jobs.yaml, examples/workflows.yaml), and each execution printed as it
//! ends: a job's with its lag behind its fire time, a workflow task's with its workflow and
//! run; each run is printed when it ends. The workflows without a schedule are triggered once.
//!
//! The receiver listens on [`RECEIVER`] (the examples' targets), or on any free port when that
//! one is taken, the examples' URLs then rewritten to it. It answers every path with 200 but
//! `/flaky` (503 to the first attempt of each execution), `/reject` (400, a permanent
//! failure), `/extract` (a JSON body with a `batch_id`, a task's output) and `/split` (a JSON
//! body with a list of `shards`). `sundial demo --receiver-only` runs it alone and prints each
//! delivery, so the examples applied to any server have somewhere to go.
//!
//! The server runs one `[[alerts]]` entry on the demo namespace's failed and dead executions
//! and failed runs, delivered to the receiver's `/sundial-alerts`. An alert is printed with its
//! time after the line of the execution or run it is about (or, if that line does not come,
//! [`ALERT_WAIT`] after it arrived), so the output reads in order.

use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Context;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use clap::Args;
use jiff::Timestamp;
use serde_json::Value;

use sundial_cli::client::{Bulk, parse_items, parse_jobs};
use sundial_cli::remote::{Api, ClientOpts, Format};
use sundial_server::config::{ROLES, ServerConfig};

/// `sundial demo` flags.
#[derive(Debug, Args)]
pub struct DemoArgs {
    /// How long to run, e.g. 30s or 2m
    #[arg(long, default_value = "30s")]
    duration: String,
    /// Jobs file; a one-off job's `at` becomes five seconds after the start [default:
    /// examples/jobs.yaml, or the built-in copy when there is none]
    #[arg(short = 'f', long)]
    file: Option<PathBuf>,
    /// Workflows file; the workflows without a schedule are triggered once [default:
    /// examples/workflows.yaml, or the built-in copy when there is none]
    #[arg(long)]
    workflows: Option<PathBuf>,
    /// Store URL [default: a fresh SQLite file in the temp directory]
    #[arg(long)]
    database_url: Option<String>,
    /// Where the HTTP receiver listens [default: 127.0.0.1:8181, or any free port when it is
    /// taken]
    #[arg(long)]
    receiver: Option<SocketAddr>,
    /// Run the HTTP receiver alone, printing each delivery, until Ctrl-C
    #[arg(long)]
    receiver_only: bool,
}

/// The receiver's address in the examples' target URLs (`http://127.0.0.1:8181/...`).
pub const RECEIVER: &str = "127.0.0.1:8181";

/// How long an alert waits for the line of the execution or run it is about before it is
/// printed anyway.
pub const ALERT_WAIT: Duration = Duration::from_secs(3);

const BUILTIN_JOBS: &str = include_str!("../../../examples/jobs.yaml");
const BUILTIN_WORKFLOWS: &str = include_str!("../../../examples/workflows.yaml");

/// How the demo reads its workflows file (one workflow, a list, or several YAML documents).
const WORKFLOWS: Bulk = Bulk {
    noun: "workflow",
    plural: "workflows",
    batch: sundial_api::workflows::MAX_BATCH,
};

#[derive(Default)]
struct Receiver {
    /// Deliveries per path.
    count: Mutex<HashMap<String, u64>>,
    /// Execution ids seen by /flaky (the first attempt of each fails).
    flaky_seen: Mutex<HashSet<String>>,
    /// Alert messages not printed yet, each with when it arrived.
    alerts: Mutex<Vec<(tokio::time::Instant, Value)>>,
    /// Print each delivery as it arrives (`--receiver-only`).
    echo: bool,
}

async fn receive(
    State(r): State<Arc<Receiver>>,
    method: axum::http::Method,
    Path(path): Path<String>,
    headers: HeaderMap,
    body: String,
) -> Response {
    if path == "sundial-alerts" {
        let alert: Value = serde_json::from_str(&body).unwrap_or_default();
        r.alerts
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push((tokio::time::Instant::now(), alert));
        return StatusCode::OK.into_response();
    }
    let seen = {
        let mut count = r.count.lock().unwrap_or_else(|e| e.into_inner());
        let n = count.entry(path.clone()).or_default();
        *n += 1;
        *n
    };
    let id = headers
        .get("idempotency-key")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_owned();
    if r.echo {
        let header = |name: &str| {
            headers
                .get(name)
                .and_then(|v| v.to_str().ok())
                .unwrap_or("-")
                .to_owned()
        };
        outln!(
            "{}  {method} /{path}  execution {} attempt {} scheduled at {}",
            Timestamp::now().strftime("%Y-%m-%dT%H:%M:%S%.3fZ"),
            header("sundial-execution-id"),
            header("sundial-attempt"),
            header("sundial-scheduled-at"),
        );
    }
    let json = |body: Value| {
        (
            StatusCode::OK,
            [(header::CONTENT_TYPE, "application/json")],
            body.to_string(),
        )
            .into_response()
    };
    match path.as_str() {
        "flaky"
            if r.flaky_seen
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .insert(id) =>
        {
            StatusCode::SERVICE_UNAVAILABLE.into_response()
        }
        "reject" => StatusCode::BAD_REQUEST.into_response(),
        "extract" => json(serde_json::json!({"batch_id": format!("b-{seen}"), "rows": 1200})),
        "split" => json(serde_json::json!({"shards": ["eu-1", "eu-2", "us-1"]})),
        _ => StatusCode::OK.into_response(),
    }
}

/// Runs the demo, or with `--receiver-only` its receiver alone until Ctrl-C.
///
/// # Errors
/// A `--duration` that does not parse, a receiver address that cannot be bound (other than
/// the default one taken, which falls back to any free port), a server that does not start,
/// or an example the server refuses.
pub async fn run(args: DemoArgs) -> anyhow::Result<ExitCode> {
    let duration: sundial_core::Dur = args.duration.parse().context("--duration")?;
    let receiver = Arc::new(Receiver {
        echo: args.receiver_only,
        ..Receiver::default()
    });
    let default_receiver: SocketAddr = RECEIVER.parse().context("the default receiver")?;
    let address = args.receiver.unwrap_or(default_receiver);
    let listener = match tokio::net::TcpListener::bind(address).await {
        Ok(listener) => listener,
        // Only the default gives way to a free port; an address given is kept or refused.
        Err(e)
            if e.kind() == std::io::ErrorKind::AddrInUse
                && args.receiver.is_none()
                && !args.receiver_only =>
        {
            tokio::net::TcpListener::bind("127.0.0.1:0")
                .await
                .context("binding the receiver")?
        }
        Err(e) => {
            return Err(e).with_context(|| format!("--receiver: cannot listen on {address}"));
        }
    };
    let receiver_addr = listener.local_addr()?;
    let app = axum::Router::new()
        .route("/{*path}", axum::routing::any(receive))
        .with_state(receiver.clone());
    if args.receiver_only {
        outln!(
            "HTTP receiver on http://{receiver_addr}; each delivery as it arrives (Ctrl-C stops)"
        );
        axum::serve(listener, app)
            .with_graceful_shutdown(async {
                let _ = tokio::signal::ctrl_c().await;
            })
            .await
            .context("serving the receiver")?;
        return Ok(ExitCode::SUCCESS);
    }
    tokio::spawn(async move { axum::serve(listener, app).await });

    // The examples are read and parsed before anything starts, so a bad file stops the demo
    // with nothing printed; their targets name the receiver's default address and go where it
    // listens.
    let receiver_url = format!("http://{receiver_addr}");
    let at_receiver = |text: String| text.replace(&format!("http://{RECEIVER}"), &receiver_url);
    let jobs_file = args.file.as_deref();
    let jobs = parse_jobs(&at_receiver(example(
        "-f",
        jobs_file,
        "examples/jobs.yaml",
        BUILTIN_JOBS,
    )?))
    .with_context(|| {
        format!(
            "-f {}",
            jobs_file.map_or("examples/jobs.yaml".into(), |p| p.display().to_string())
        )
    })?;
    let workflows_file = args.workflows.as_deref();
    let workflow_items = parse_items(
        &at_receiver(example(
            "--workflows",
            workflows_file,
            "examples/workflows.yaml",
            BUILTIN_WORKFLOWS,
        )?),
        &WORKFLOWS,
    )
    .with_context(|| {
        format!(
            "--workflows {}",
            workflows_file.map_or("examples/workflows.yaml".into(), |p| p
                .display()
                .to_string())
        )
    })?;

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
        claim_ahead: sundial_worker::DEFAULT_CLAIM_AHEAD,
        max_claimed_ahead: sundial_worker::DEFAULT_MAX_CLAIMED_AHEAD,
        lookahead: sundial_scheduler::DEFAULT_LOOKAHEAD,
        http_allow: None,
        http_max_connections_per_host: sundial_target::DEFAULT_MAX_CONNECTIONS_PER_HOST,
        tokens: None,
        maintenance: Default::default(),
        http: Default::default(),
        tls: None,
        alerts: vec![sundial_worker::AlertRule {
            name: "demo-oncall".into(),
            on: vec!["failed".into(), "dead".into(), "run_failed".into()],
            namespaces: vec!["demo".into()],
            target: sundial_core::job::TargetSpec::Http(sundial_core::job::HttpTarget {
                method: "POST".into(),
                url: format!("http://{receiver_addr}/sundial-alerts"),
                headers: Default::default(),
                body: None,
                success_codes: Vec::new(),
            }),
        }],
        alerts_every: sundial_core::Dur::from_millis(250),
        public_url: String::new(),
        history_retention: sundial_store::maintenance::HISTORY_RETENTION_DEFAULT,
        audit_retention: sundial_store::maintenance::AUDIT_RETENTION_DEFAULT,
        shutdown_grace: sundial_worker::DEFAULT_SHUTDOWN_GRACE,
        signing: Default::default(),
        secrets_key_file: None,
    };
    let running = sundial_server::start(&config).await?;
    let api_addr = running.addr;
    outln!(
        "Sundial {} — API on http://{api_addr}, store {database_url}",
        env!("CARGO_PKG_VERSION")
    );
    outln!("HTTP receiver on http://{receiver_addr}; running for {duration}\n");

    let in_5s = Timestamp::now() + jiff::SignedDuration::from_secs(5);
    let in_5s = in_5s.round(jiff::Unit::Second).unwrap_or(in_5s).to_string();
    let api = Api::new(ClientOpts {
        server: format!("http://{api_addr}"),
        token: None,
        ca_cert: None,
        namespace_given: false,
        namespace: "demo".into(),
        output: Format::Table,
    });
    for mut job in jobs {
        if job["schedule"].get("at").is_some() {
            job["schedule"]["at"] = Value::from(in_5s.as_str());
        }
        let name = job["name"].as_str().unwrap_or_default().to_owned();
        let v = api
            .call(reqwest::Method::PUT, &format!("/jobs/{name}"), Some(&job))
            .await?;
        outln!(
            "applied job {name:<16} next fire at {}",
            v["next_fire_at"].as_str().unwrap_or("-")
        );
    }
    let mut workflows = Vec::new();
    for workflow in workflow_items {
        let name = workflow["name"].as_str().unwrap_or_default().to_owned();
        let v = api
            .call(
                reqwest::Method::PUT,
                &format!("/workflows/{name}"),
                Some(&workflow),
            )
            .await?;
        let tasks = v["tasks"].as_array().map_or(0, Vec::len);
        match v["next_fire_at"].as_str() {
            Some(next) => outln!("applied workflow {name:<11} {tasks} tasks, next fire at {next}"),
            None => outln!("applied workflow {name:<11} {tasks} tasks, runs when triggered"),
        }
        workflows.push((name, v["schedule"].is_null()));
    }
    for (name, _) in workflows.iter().filter(|(_, unscheduled)| *unscheduled) {
        let run = api
            .call(
                reqwest::Method::POST,
                &format!("/workflows/{name}/trigger"),
                None,
            )
            .await?;
        outln!(
            "triggered workflow {name:<9} run {}",
            run["id"].as_str().unwrap_or("-")
        );
    }
    outln!(
        "\nEach execution as it ends, a job's or a workflow task's (with the end of its run's id),\n\
         and each workflow run. LAG MS: its start after its fire time; a task's, after it was queued.\n\
         A run's line and an alert's carry the time it ended; an alert follows what it is about.\n"
    );
    outln!(
        "{:<24}  {:<20}  {:<8}  {:<15}  {:>7}  {:>6}  {}",
        "SCHEDULED",
        "JOB or WORKFLOW/TASK",
        "TRIGGER",
        "STATE",
        "ATTEMPT",
        "LAG MS",
        "RUN"
    );

    let deadline = tokio::time::Instant::now() + duration.as_std();
    let mut printed = HashSet::new();
    let mut runs_ended = HashSet::new();
    let (mut finished, mut tasks_finished, mut alerts) = (0, 0, 0);
    // Attempts of the finished executions, and how many of them were retries.
    let (mut attempts, mut retries) = (0u64, 0u64);
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
        // Runs first: a run read as ended has every task ended in the executions read next,
        // so each run's line comes after its tasks'.
        let mut ended_runs = Vec::new();
        for (name, _) in &workflows {
            let list = api
                .call(
                    reqwest::Method::GET,
                    &format!("/workflows/{name}/runs?limit=50"),
                    None,
                )
                .await?;
            for run in list["items"].as_array().into_iter().flatten().rev() {
                let id = run["id"].as_str().unwrap_or("").to_owned();
                if !matches!(run["state"].as_str(), Some("scheduled" | "running"))
                    && runs_ended.insert(id.clone())
                {
                    ended_runs.push((name.clone(), id));
                }
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
        // In the order they ended (a run's tasks share a slot, and an upstream ends first);
        // at one instant, a task that ran before those its ending released without running.
        items.sort_by_key(|e| {
            (
                e["finished_at"]
                    .as_str()
                    .and_then(|t| t.parse::<Timestamp>().ok()),
                e["attempt"].as_u64() == Some(0),
            )
        });
        for e in items {
            let state = e["state"].as_str().unwrap_or("");
            let terminal = !matches!(
                state,
                "pending" | "scheduled" | "queued" | "running" | "retry_wait"
            );
            let id = e["id"].as_str().unwrap_or("").to_owned();
            if !terminal || !printed.insert(id.clone()) {
                continue;
            }
            finished += 1;
            let attempt = e["attempt"].as_u64().unwrap_or(0);
            attempts += attempt;
            retries += attempt.saturating_sub(1);
            let lag = match (e["started_at"].as_str(), e["fire_at"].as_str()) {
                (Some(s), Some(f)) => match (s.parse::<Timestamp>(), f.parse::<Timestamp>()) {
                    (Ok(s), Ok(f)) => (s.as_millisecond() - f.as_millisecond()).to_string(),
                    _ => "-".into(),
                },
                _ => "-".into(),
            };
            let job = e["job"].as_str().unwrap_or("-");
            let (what, run) = match (e["task"].as_str(), e["run_id"].as_str()) {
                (Some(task), Some(run)) => {
                    tasks_finished += 1;
                    // A run id's last 12 digits are random or hashed: enough to tell runs apart.
                    (
                        format!("{job}/{task}"),
                        &run[run.len().saturating_sub(12)..],
                    )
                }
                _ => (job.to_owned(), ""),
            };
            let line = format!(
                "{:<24}  {:<20}  {:<8}  {:<15}  {:>7}  {:>6}  {}",
                sundial_cli::output::when(&e["scheduled_at"]),
                what,
                e["trigger"].as_str().unwrap_or("-"),
                state,
                format!("{}/{}", e["attempt"], e["max_attempts"]),
                lag,
                run
            );
            outln!("{}", line.trim_end());
        }
        for (name, id) in ended_runs {
            let run = api
                .call(
                    reqwest::Method::GET,
                    &format!("/workflows/{name}/runs/{id}"),
                    None,
                )
                .await?;
            let mut by_state: Vec<(String, usize)> = Vec::new();
            for task in run["tasks"].as_array().into_iter().flatten() {
                let state = task["state"].as_str().unwrap_or("?");
                match by_state.iter_mut().find(|(s, _)| s == state) {
                    Some((_, n)) => *n += 1,
                    None => by_state.push((state.to_owned(), 1)),
                }
            }
            let tasks: Vec<String> = by_state.iter().map(|(s, n)| format!("{n} {s}")).collect();
            outln!(
                "{:<24}  run {id} of {name} {}{}",
                sundial_cli::output::when(&run["finished_at"]),
                run["state"].as_str().unwrap_or("?"),
                if tasks.is_empty() {
                    String::new()
                } else {
                    format!(": {}", tasks.join(", "))
                }
            );
        }
        alerts += print_alerts(&receiver, |alert| {
            let about = |key: &str| alert[key].as_str().unwrap_or_default();
            match alert["kind"].as_str() {
                Some("run") => runs_ended.contains(about("run_id")),
                _ => printed.contains(about("execution_id")),
            }
        });
    }
    running.stop().await?;
    alerts += print_alerts(&receiver, |_| true);
    let deliveries: u64 = receiver
        .count
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .values()
        .sum();
    outln!(
        "\n{finished} executions finished, {tasks_finished} of them workflow tasks; {} workflow \
         runs ended; {alerts} alerts sent.",
        runs_ended.len()
    );
    outln!("{}", delivery_summary(deliveries, attempts, retries));
    Ok(ExitCode::SUCCESS)
}

/// The text of an examples file: the file given with `flag`, which must be readable; else
/// `default` when there is one, else the `builtin` copy compiled in.
///
/// # Errors
/// A file given that cannot be read, naming the flag and the file.
fn example(
    flag: &str,
    given: Option<&std::path::Path>,
    default: &str,
    builtin: &str,
) -> anyhow::Result<String> {
    match given {
        Some(path) => std::fs::read_to_string(path)
            .with_context(|| format!("{flag}: cannot read {}", path.display())),
        None => Ok(std::fs::read_to_string(default).unwrap_or_else(|_| builtin.to_owned())),
    }
}

/// Prints, each on a line with its time, the alerts received that `ready` accepts (the line
/// of what they are about is printed) or that waited [`ALERT_WAIT`]; keeps the others.
/// Returns how many it printed.
fn print_alerts(receiver: &Receiver, ready: impl Fn(&Value) -> bool) -> usize {
    let now = tokio::time::Instant::now();
    let mut due: Vec<Value> = Vec::new();
    receiver
        .alerts
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .retain(|(arrived, alert)| {
            let keep = !ready(alert) && now.duration_since(*arrived) < ALERT_WAIT;
            if !keep {
                due.push(alert.clone());
            }
            keep
        });
    due.sort_by_key(|a| {
        a["finished_at"]
            .as_str()
            .and_then(|t| t.parse::<Timestamp>().ok())
    });
    for alert in &due {
        let what = match (alert["job"].as_str(), alert["workflow"].as_str()) {
            (Some(job), _) => format!("job {job}"),
            (None, Some(wf)) => match alert["task"].as_str() {
                Some(task) => format!("workflow {wf} task {task}"),
                None => format!("workflow {wf} run"),
            },
            _ => "?".to_owned(),
        };
        let line = format!(
            "{:<24}  ALERT {} {:<10} {:<34} {}",
            sundial_cli::output::when(&alert["finished_at"]),
            alert["alert"].as_str().unwrap_or("?"),
            alert["state"].as_str().unwrap_or("?"),
            what,
            alert["error"].as_str().unwrap_or("")
        );
        outln!("{}", line.trim_end());
    }
    due.len()
}

/// The closing sentence on the receiver's count: one delivery per attempt, so it differs from
/// the executions finished by the retries and by the attempts of executions still under way at
/// the stop (or, when lower, by attempts that never reached it).
fn delivery_summary(deliveries: u64, attempts: u64, retries: u64) -> String {
    let mut text = format!(
        "The receiver saw {deliveries} deliveries, one per attempt: {attempts} for the finished \
         executions"
    );
    if retries > 0 {
        text += &format!(" ({retries} of them retries after a failed attempt)");
    }
    match deliveries.cmp(&attempts) {
        std::cmp::Ordering::Greater => {
            text += &format!(
                " and {} for executions still under way when the demo stopped.",
                deliveries - attempts
            )
        }
        std::cmp::Ordering::Less => {
            text += &format!(
                "; {} attempts did not reach it (each execution's error says why).",
                attempts - deliveries
            )
        }
        std::cmp::Ordering::Equal => text += ".",
    }
    text
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

#[cfg(test)]
mod tests {
    use super::*;
    use sundial_core::validate::Context;
    use sundial_core::workflow::TriggerRule;
    use sundial_core::workflow::validate::workflow_from_json;

    /// The closing sentence accounts for the receiver's count: retries, executions under way,
    /// attempts that did not reach it.
    #[test]
    fn the_delivery_summary_says_why_the_counts_differ() {
        assert_eq!(
            delivery_summary(10, 10, 0),
            "The receiver saw 10 deliveries, one per attempt: 10 for the finished executions."
        );
        let more = delivery_summary(12, 10, 2);
        assert!(
            more.contains("(2 of them retries after a failed attempt)"),
            "{more}"
        );
        assert!(more.ends_with("and 2 for executions still under way when the demo stopped."));
        let fewer = delivery_summary(8, 10, 0);
        assert!(
            fewer.ends_with("; 2 attempts did not reach it (each execution's error says why).")
        );
    }

    /// The workflows the demo applies are valid, and one of them ends in a failure that fires
    /// a `one_failed` alert (its upload goes to the receiver's `/reject`).
    #[test]
    fn the_example_workflows_are_valid_and_one_fails_into_an_alert() {
        let items = parse_items(BUILTIN_WORKFLOWS, &WORKFLOWS).expect("the file parses");
        let ctx = Context {
            namespace: "demo".into(),
            ..Default::default()
        };
        let specs: Vec<_> = items
            .iter()
            .map(|item| workflow_from_json(item, &ctx).unwrap_or_else(|e| panic!("{item}: {e:?}")))
            .collect();
        let export = specs.iter().find(|s| s.name == "export").expect("export");
        assert!(export.schedule.is_none(), "the demo triggers it");
        assert!(
            serde_json::to_string(&export.tasks)
                .unwrap()
                .contains("/reject"),
            "a task answered 400"
        );
        assert!(
            export
                .tasks
                .iter()
                .any(|t| t.trigger_rule == TriggerRule::OneFailed)
        );
    }
}
