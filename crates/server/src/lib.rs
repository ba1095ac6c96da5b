//! `sundial server` and `sundial migrate`: the server's settings ([`config`]: flags,
//! `SUNDIAL_*` variables, the TOML file), its HTTP listener ([`listener`]: plain or TLS), and
//! the wiring that opens the store named by the URL and starts the roles this process runs
//! (docs/configuration.md is the contract of every setting).
//!
//! Invariants: the listen address is bound before the store is opened or a shard lease taken,
//! so a taken address stops a start early; the store is opened (and migrated) before any role
//! starts; on SIGTERM or Ctrl-C, or when one role fails, every role is told to stop and is
//! waited for.

/// `println!` that ignores a closed standard output (`sundial ... | head`), where `println!`
/// would panic. Shared by the command line's crates.
#[macro_export]
macro_rules! outln {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stdout(), $($arg)*);
    }};
}

pub mod config;
pub mod listener;
pub mod secrets;
pub mod signing;

use std::process::ExitCode;
use std::sync::Arc;

use anyhow::{Context, bail};
use sundial_api::{AppState, health_router, router};
use sundial_clock::{Clock, SystemClock};
use sundial_scheduler::{Scheduler, SchedulerConfig};
use sundial_store::Store;
use sundial_store::maintenance::{
    AuditRetention, HistoryRetention, NodeHeartbeat, Runner, Service,
};
use sundial_store_postgres::PgStore;
use sundial_store_sqlite::SqliteStore;
use sundial_target::{Targets, redact};
use sundial_worker::{AlertDispatcher, Reaper, Worker, WorkerConfig};
use tokio::sync::{Notify, watch};
use tokio::task::JoinSet;

use crate::config::{DEFAULT_DATABASE_URL, MigrateArgs, ServerArgs, ServerConfig};

/// Opens the store for a URL: `sqlite:` → embedded, `postgres:` → shared.
///
/// # Errors
/// An unsupported scheme, a SQLite URL that names no file (empty or `:memory:`), or a store
/// that cannot be opened or migrated.
pub async fn open_store(url: &str, clock: Arc<dyn Clock>) -> anyhow::Result<Arc<dyn Store>> {
    if let Some(rest) = url
        .strip_prefix("sqlite://")
        .or_else(|| url.strip_prefix("sqlite:"))
    {
        // Each of the store's connections would open an in-memory database of its own.
        let path = rest.split('?').next().unwrap_or(rest);
        if path.is_empty() || path == ":memory:" {
            bail!(
                "--database-url: '{url}' names no file; write sqlite://PATH (an in-memory \
                 database is not shared between the store's connections)"
            );
        }
        let store = SqliteStore::open(url, clock)
            .await
            .with_context(|| format!("--database-url: cannot open {url}"))?;
        Ok(Arc::new(store))
    } else if url.starts_with("postgres://") || url.starts_with("postgresql://") {
        let store = PgStore::open(url, None)
            .await
            .with_context(|| format!("--database-url: cannot open {}", redact(url)))?;
        Ok(Arc::new(store))
    } else {
        bail!("--database-url: '{url}' must start with sqlite:// or postgres://")
    }
}

/// A started server: its API address and the switch that stops it.
pub struct Running {
    /// Where the API (or, without the api role, the probes) listens.
    pub addr: std::net::SocketAddr,
    shutdown: watch::Sender<bool>,
    tasks: JoinSet<anyhow::Result<()>>,
}

impl Running {
    /// Stops every role and waits for them.
    pub async fn stop(mut self) -> anyhow::Result<()> {
        self.shutdown.send_replace(true);
        while let Some(r) = self.tasks.join_next().await {
            r.context("a role panicked")??;
        }
        Ok(())
    }

    /// Waits until a role fails or a shutdown signal arrives, then stops the rest.
    pub async fn wait(mut self) -> anyhow::Result<()> {
        let failed = tokio::select! {
            r = self.tasks.join_next() => match r {
                Some(Ok(Ok(()))) | None => None,
                Some(Ok(Err(e))) => Some(e),
                Some(Err(e)) => Some(anyhow::anyhow!("a role panicked: {e}")),
            },
            _ = shutdown_signal() => {
                tracing::info!("shutting down");
                None
            }
        };
        self.stop().await?;
        failed.map_or(Ok(()), Err)
    }
}

async fn shutdown_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut term =
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(s) => s,
                Err(_) => {
                    let _ = ctrl_c.await;
                    return;
                }
            };
        tokio::select! {
            _ = ctrl_c => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    let _ = ctrl_c.await;
}

/// Starts the configured roles.
///
/// # Errors
/// A store that cannot be opened, a scheduler refused the store, a listen address in use.
pub async fn start(config: &ServerConfig) -> anyhow::Result<Running> {
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    // Listening comes first: a taken address stops the start before the store is opened or
    // a shard lease taken. Every process listens: the api role serves the whole API, others
    // the probes alone.
    let listener = tokio::net::TcpListener::bind(config.listen)
        .await
        .with_context(|| format!("--listen: cannot listen on {}", config.listen))?;
    let addr = listener.local_addr()?;
    // The recorder is installed before any role starts: a metric set before it (the
    // scheduler's first `sundial_shards_held`, on acquiring its leases) would be lost.
    let metrics = prometheus();
    // A bad key file stops the server before it touches the database.
    let configured_key = crate::secrets::configured(config.secrets_key_file.as_deref())?;
    let store = open_store(&config.database_url, clock.clone()).await?;
    let secrets_key = match (
        configured_key,
        crate::secrets::default_path(&config.database_url),
    ) {
        (Some(key), _) => Some(key),
        (None, Some(path)) => Some(crate::secrets::beside_database(
            &path,
            store
                .secret_any()
                .await
                .context("cannot read the store's secrets")?,
        )?),
        (None, None) => None,
    };
    let (shutdown, rx) = watch::channel(false);
    let mut tasks = JoinSet::new();
    let worker_wake = Arc::new(Notify::new());
    let mut scheduler_wake = Arc::new(Notify::new());

    // The worker comes first: the scheduler of the same process hands it the executions it
    // writes (docs/guarantees.md, "Slots handed to the worker beside the scheduler").
    let worker = if config.has("worker") {
        // Every named connection is established now; one that cannot be is a startup error
        // naming `connections.NAME` (README, "Targets and connections").
        let targets = Targets::connect(
            &config.endpoints(),
            sundial_target::HttpOptions {
                allow: config.http_allow.clone(),
                max_connections_per_host: config.http_max_connections_per_host,
            },
            sundial_target::DEFAULT_CONNECT_TIMEOUT,
        )
        .await?
        .with_signer(config.signing.clone());
        Some(Worker::new(
            store.clone(),
            clock.clone(),
            Arc::new(targets),
            WorkerConfig {
                rate_limits: config.rate_limits.clone(),
                max_in_flight: config.max_in_flight,
                claim_ahead: config.claim_ahead,
                max_claimed_ahead: config.max_claimed_ahead,
                lease_ttl: config.lease_ttl,
                secrets_key: secrets_key.clone(),
                shutdown_grace: config.shutdown_grace,
                ..WorkerConfig::new(&config.node_id)
            },
            worker_wake.clone(),
        ))
    } else {
        None
    };

    if config.has("scheduler") {
        let mut scheduler = Scheduler::new(
            store.clone(),
            clock.clone(),
            SchedulerConfig {
                lease_ttl: config.lease_ttl,
                lookahead: config.lookahead,
                ..SchedulerConfig::new(&config.node_id)
            },
            worker_wake.clone(),
        );
        if let Some(worker) = &worker {
            scheduler.hand_off_to(Arc::new(worker.clone()));
        }
        scheduler
            .acquire()
            .await
            .context("cannot start the scheduler")?;
        scheduler_wake = scheduler.waker();
        // Backfills (docs/time.md, "Backfill") are driven where their shard is held.
        let backfiller = sundial_scheduler::backfill::Backfiller::new(
            store.clone(),
            clock.clone(),
            &config.node_id,
            scheduler.lease_watch(),
            worker_wake.clone(),
        );
        let backfill_rx = rx.clone();
        tasks.spawn(async move {
            backfiller.run(backfill_rx).await;
            Ok(())
        });
        let rx = rx.clone();
        tasks.spawn(async move { scheduler.run(rx).await.context("scheduler stopped") });
    }
    // The maintenance services of this process (docs/configuration.md, "`[maintenance]`"):
    // the store's own, the node heartbeat every process writes, history retention in a
    // scheduler, and the reaper of a worker.
    let mut maintenance = Runner::new(clock.clone());
    maintenance.add(store.maintenance(&config.maintenance));
    maintenance.add([Arc::new(NodeHeartbeat::new(
        store.clone(),
        config.node_id.clone(),
        config.roles.clone(),
        config.lease_ttl,
        config.maintenance.node_heartbeat_every,
    )) as Arc<dyn Service>]);
    if config.has("scheduler") {
        // History retention (docs/configuration.md, "history_retention"): in the processes that schedule, so a fleet prunes
        // in as many processes as it has schedulers (they skip each other's rows).
        maintenance.add([Arc::new(HistoryRetention::new(
            store.clone(),
            config.history_retention,
            config.maintenance.retention_every,
        )) as Arc<dyn Service>]);
        // Audit retention (docs/configuration.md, "audit_retention"), beside it.
        maintenance.add([Arc::new(AuditRetention::new(
            store.clone(),
            config.audit_retention,
            config.maintenance.retention_every,
        )) as Arc<dyn Service>]);
    }
    if let Some(worker) = worker {
        maintenance.add([Arc::new(Reaper::new(
            store.clone(),
            worker_wake.clone(),
            config.lease_ttl,
            config.maintenance.reaper_every,
        )) as Arc<dyn Service>]);
        let rx = rx.clone();
        tasks.spawn(async move {
            worker.run(rx).await;
            Ok(())
        });
    }
    if !config.alerts.is_empty() {
        // Alerts (docs/configuration.md, "`[[alerts]]`"): the dispatcher connects to the connections its alerts name, in
        // whatever roles this process runs, and registers their states so that endings in
        // them write an alert event from now on.
        let used: std::collections::BTreeSet<&str> = config
            .alerts
            .iter()
            .filter_map(|a| a.target.connection())
            .collect();
        let endpoints = config
            .endpoints()
            .into_iter()
            .filter(|(name, _)| used.contains(name.as_str()))
            .collect();
        let targets = Targets::connect(
            &endpoints,
            sundial_target::HttpOptions::default(),
            sundial_target::DEFAULT_CONNECT_TIMEOUT,
        )
        .await
        .context("alerts")?
        .with_signer(config.signing.clone());
        let dispatcher = AlertDispatcher::new(
            store.clone(),
            Arc::new(targets),
            config.alerts.clone(),
            config.public_url.clone(),
            config.alerts_every,
        );
        store
            .alert_states_add(&dispatcher.states())
            .await
            .context("cannot register the alert states")?;
        maintenance.add([Arc::new(dispatcher) as Arc<dyn Service>]);
    }
    {
        tracing::debug!(services = ?maintenance.names(), "maintenance services");
        let mut rx = rx.clone();
        let running = maintenance.start();
        tasks.spawn(async move {
            let _ = rx.wait_for(|stop| *stop).await;
            running.stop().await;
            Ok(())
        });
    }
    let state = AppState {
        store: store.clone(),
        scheduler_wake,
        worker_wake,
        connections: config
            .connections
            .iter()
            .map(|(n, c)| (n.clone(), c.kind.clone()))
            .collect(),
        http_allow: config.http_allow.clone(),
        tokens: config.tokens.clone(),
        node: config.node_id.clone(),
        roles: config.roles.clone(),
        metrics,
        signing_keys: Arc::new(crate::signing::public_view(&config.signing)),
        secrets_key: secrets_key.clone(),
    };
    let app = if config.has("api") {
        router(state)
    } else {
        health_router(state)
    };
    let (rx, limits, tls) = (rx.clone(), config.http, config.tls.clone());
    tasks.spawn(async move {
        crate::listener::serve(listener, app, limits, tls, rx).await;
        Ok(())
    });
    tracing::info!(node = %config.node_id, roles = ?config.roles, store = %redact(&config.database_url), api = %addr, "sundial started");
    Ok(Running {
        addr,
        shutdown,
        tasks,
    })
}

/// How often the Prometheus recorder's upkeep runs (5 s, the crate's own exporter's
/// default): it folds the histogram samples recorded since into the histograms' buckets.
const METRICS_UPKEEP_EVERY: std::time::Duration = std::time::Duration::from_secs(5);

/// This process's Prometheus recorder, installed on first use (one per process), as a
/// renderer for `/metrics`; `None` if another recorder was installed first.
///
/// The recorder keeps every histogram sample (one `sundial_trigger_lag_seconds` sample per
/// execution) until its upkeep folds them into the buckets, and `install_recorder` leaves the
/// upkeep to its caller: without it, a node nobody scraped grew by about 8 bytes an
/// execution, without end. A thread of its own runs it every [`METRICS_UPKEEP_EVERY`],
/// independent of any runtime (the recorder outlives the runtime that installed it).
fn prometheus() -> Option<sundial_api::MetricsRenderer> {
    static HANDLE: std::sync::OnceLock<Option<metrics_exporter_prometheus::PrometheusHandle>> =
        std::sync::OnceLock::new();
    let handle = HANDLE.get_or_init(|| {
        let buckets = [
            0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
        ];
        metrics_exporter_prometheus::PrometheusBuilder::new()
            .set_buckets(&buckets)
            .ok()?
            .install_recorder()
            .map_err(|e| tracing::warn!(error = %e, "metrics recorder not installed"))
            .ok()
            .inspect(|handle| {
                let handle = handle.clone();
                let upkeep = std::thread::Builder::new()
                    .name("sundial-metrics-upkeep".into())
                    .spawn(move || {
                        loop {
                            std::thread::sleep(METRICS_UPKEEP_EVERY);
                            handle.run_upkeep();
                        }
                    });
                if let Err(e) = upkeep {
                    tracing::warn!(error = %e, "metrics upkeep thread not started; histograms grow until /metrics is scraped");
                }
            })
    });
    let handle = handle.clone()?;
    Some(sundial_api::MetricsRenderer(Arc::new(move || {
        handle.render()
    })))
}

/// `sundial server`.
pub async fn run(args: ServerArgs) -> anyhow::Result<ExitCode> {
    init_tracing()?;
    let config = ServerConfig::resolve(args)?;
    let running = start(&config).await;
    let running = match running {
        Ok(running) => running,
        Err(e) => {
            sundial_trace::shutdown();
            return Err(e);
        }
    };
    eprintln!(
        "sundial: listening on {}://{} (store {})",
        if config.tls.is_some() {
            "https"
        } else {
            "http"
        },
        running.addr,
        redact(&config.database_url)
    );
    let stopped = running.wait().await;
    sundial_trace::shutdown();
    stopped?;
    Ok(ExitCode::SUCCESS)
}

/// `sundial migrate`.
pub async fn migrate(args: MigrateArgs) -> anyhow::Result<ExitCode> {
    let url = args
        .database_url
        .unwrap_or_else(|| DEFAULT_DATABASE_URL.into());
    open_store(&url, Arc::new(SystemClock)).await?;
    outln!("migrations applied to {url}");
    Ok(ExitCode::SUCCESS)
}

/// Logs to stderr; `RUST_LOG` overrides the default `info` filter. With
/// `OTEL_EXPORTER_OTLP_ENDPOINT` set, also exports the trigger and attempt spans over OTLP
/// (docs/operations.md#traces); [`sundial_trace::shutdown`] flushes them.
///
/// # Errors
/// The OTLP exporter cannot be set up (an endpoint that is not a URL).
pub fn init_tracing() -> anyhow::Result<()> {
    use tracing_subscriber::Layer as _;
    use tracing_subscriber::layer::SubscriberExt as _;
    use tracing_subscriber::util::SubscriberInitExt as _;
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info,sqlx=warn,tower_http=warn"));
    let logs = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_filter(filter);
    let spans = sundial_trace::layer()?;
    let _ = tracing_subscriber::registry()
        .with(logs)
        .with(spans)
        .try_init();
    if sundial_trace::enabled()
        && let Some((var, url)) = sundial_trace::endpoint()
    {
        tracing::info!(%url, from = var, "exporting trigger and attempt spans over OTLP/HTTP");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    /// The names of this process's threads (Linux keeps a thread's first 15 bytes).
    fn thread_names() -> Vec<String> {
        std::fs::read_dir("/proc/self/task")
            .expect("the threads of this process")
            .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
            .map(|name| name.trim().to_owned())
            .collect()
    }

    /// The recorder's upkeep runs on a thread of its own from the recorder's installation.
    #[test]
    fn installing_the_metrics_recorder_starts_its_upkeep() {
        assert!(super::prometheus().is_some(), "the recorder is installed");
        // The new thread names itself once it runs: give it up to 5 s.
        for _ in 0..500 {
            if thread_names().iter().any(|name| name == "sundial-metrics") {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        panic!("no upkeep thread among {:?}", thread_names());
    }
}
