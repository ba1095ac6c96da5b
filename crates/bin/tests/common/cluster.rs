//! The failure suites' cluster: real `sundial server` processes on one freshly created
//! PostgreSQL database, plus the loopback receiver, and the PostgreSQL restart.
//!
//! The server is `SUNDIAL_TEST_DATABASE_URL` (default `postgres://root@127.0.0.1:5432/postgres`).
//! Scenarios of one suite run one at a time ([`SERIAL`]): one restarts the shared PostgreSQL.

use std::time::Duration;

use jiff::{SignedDuration, Timestamp};
use serde_json::json;
use sqlx::PgPool;
use sundial_store_postgres::testing::TestDatabase;

use super::{Receiver, Server, ServerOpts};

/// Held by each scenario of a suite for its whole run.
pub static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// The shard lease TTL every node is started with, in seconds.
pub const TTL_S: i64 = 10;

/// The cluster's database: created fresh for a scenario, dropped when the scenario ends
/// (a failed one too, as the value is dropped while unwinding).
pub type TestDb = TestDatabase;

pub async fn pool(url: &str) -> PgPool {
    PgPool::connect(url)
        .await
        .expect("connect to the test database")
}

/// G4 bound: lease TTL + one tick, plus the renewal period and slack for a loaded 2-core box.
pub fn failover_bound() -> SignedDuration {
    SignedDuration::from_secs(TTL_S + 1 + 4 + 2)
}

/// A cluster of server processes on one database, plus the receiver. Fields drop in order:
/// the processes are killed before their directory and their database go.
pub struct Cluster {
    pub nodes: Vec<Server>,
    pub receiver: Receiver,
    pub dir: tempfile::TempDir,
    /// The database's URL, as the nodes reach it.
    pub url: String,
    /// The database when this cluster created it on the machine's PostgreSQL.
    pub db: Option<TestDb>,
}

impl Cluster {
    /// Nodes `n0`, `n1`, ... with `roles[i]`; node `k` of `proxy_for` reaches the database at
    /// that URL instead, node `k` of `env_for` gets that environment variable.
    pub async fn start(
        roles: &[&str],
        proxy_for: Option<(usize, String)>,
        env_for: Option<(usize, Vec<(String, String)>)>,
    ) -> Cluster {
        Cluster::start_configured(roles, proxy_for, env_for, None).await
    }

    /// Like [`Cluster::start`], every node also reading `config` (TOML) with `--config`.
    pub async fn start_configured(
        roles: &[&str],
        proxy_for: Option<(usize, String)>,
        env_for: Option<(usize, Vec<(String, String)>)>,
        config: Option<&str>,
    ) -> Cluster {
        let db = TestDatabase::create("sundial_f").await;
        let mut c = Cluster::start_on(db.url(), roles, proxy_for, env_for, config).await;
        c.db = Some(db);
        c
    }

    /// Like [`Cluster::start_configured`], on the database at `url` (which the caller made).
    pub async fn start_on(
        url: &str,
        roles: &[&str],
        proxy_for: Option<(usize, String)>,
        env_for: Option<(usize, Vec<(String, String)>)>,
        config: Option<&str>,
    ) -> Cluster {
        let dir = tempfile::tempdir().unwrap();
        let receiver = Receiver::start().await;
        let mut common_args = vec!["--lease-ttl".to_owned(), format!("{TTL_S}s")];
        if let Some(text) = config {
            let path = dir.path().join("sundial.toml");
            std::fs::write(&path, text).unwrap();
            common_args.extend(["--config".to_owned(), path.display().to_string()]);
        }
        let mut nodes = Vec::new();
        for (i, r) in roles.iter().enumerate() {
            let url = match &proxy_for {
                Some((k, proxied)) if *k == i => proxied.clone(),
                _ => url.to_owned(),
            };
            let env = match &env_for {
                Some((k, kv)) if *k == i => kv.clone(),
                _ => Vec::new(),
            };
            let opts = ServerOpts {
                database_url: Some(url),
                node_id: Some(format!("n{i}")),
                args: [
                    vec!["--roles".to_owned(), (*r).to_owned()],
                    common_args.clone(),
                ]
                .concat(),
                env,
            };
            nodes.push(Server::start_with(dir.path(), opts).await);
        }
        Cluster {
            db: None,
            url: url.to_owned(),
            dir,
            nodes,
            receiver,
        }
    }

    /// The index of node `id` (`n2` → 2).
    pub fn node_index(id: &str) -> usize {
        id.trim_start_matches('n')
            .parse()
            .unwrap_or_else(|_| panic!("not a node id: {id}"))
    }

    /// Creates `n` every-second jobs starting at `start`, through node 0's API.
    pub async fn every_second_jobs(&self, n: usize, start: Timestamp) -> Vec<String> {
        let names: Vec<String> = (0..n).map(|i| format!("j{i:03}")).collect();
        // One request for all of them: created one by one, the last of 200 could come after
        // `start` on a loaded machine, and a job never fires the slots before its creation.
        let jobs: Vec<serde_json::Value> = names
            .iter()
            .map(|name| {
                json!({
                    "name": name,
                    "schedule": {"every": "1s", "start_at": start.to_string()},
                    "target": {"type": "http", "url": self.receiver.url(name)},
                    "heartbeat_timeout": "3s",
                    "retry": {"max_attempts": 5, "initial_interval": "200ms", "max_interval": "1s"}
                })
            })
            .collect();
        self.apply_jobs("f", jobs).await;
        names
    }

    /// Applies `jobs` (job bodies of `jobs:apply`) to `namespace` in one request, through the
    /// first node; panics unless it answers 200.
    pub async fn apply_jobs(&self, namespace: &str, jobs: Vec<serde_json::Value>) {
        let (status, v) = self.nodes[0]
            .request(
                reqwest::Method::POST,
                &format!("/v1/namespaces/{namespace}/jobs:apply"),
                Some(json!({ "jobs": jobs })),
            )
            .await;
        assert_eq!(status, 200, "jobs:apply to {namespace}: {v}");
    }

    pub async fn finish(mut self) {
        for n in &mut self.nodes {
            n.kill9();
        }
    }
}

fn pg_version_dir() -> String {
    std::fs::read_dir("/etc/postgresql")
        .ok()
        .and_then(|mut d| d.next())
        .and_then(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .unwrap_or_else(|| "15".into())
}

/// Runs `pg_ctlcluster <version> main <action>` off the async threads.
async fn pg_ctlcluster(action: &'static str) {
    let status = tokio::task::spawn_blocking(move || {
        std::process::Command::new("pg_ctlcluster")
            .args([
                "--skip-systemctl-redirect",
                &pg_version_dir(),
                "main",
                action,
            ])
            .status()
            .expect("pg_ctlcluster")
    })
    .await
    .expect("the pg_ctlcluster thread");
    assert!(status.success(), "pg_ctlcluster {action} failed");
}

/// Restarts the machine's PostgreSQL (`pg_ctlcluster ... restart`); returns how long it took,
/// from the command until PostgreSQL was back.
pub async fn restart_postgresql() -> Duration {
    let started = std::time::Instant::now();
    pg_ctlcluster("restart").await;
    started.elapsed()
}

/// Stops the machine's PostgreSQL (fast: its connections are ended), keeps it down for
/// `down`, and starts it again; returns how long it was unreachable, from the stop command
/// until it was back.
pub async fn stop_postgresql_for(down: Duration) -> Duration {
    let started = std::time::Instant::now();
    pg_ctlcluster("stop").await;
    tokio::time::sleep(down).await;
    pg_ctlcluster("start").await;
    started.elapsed()
}

/// Writes, straight to the store, the completion that the worker which ran attempt `attempt`
/// of execution `id` would send on success (a worker that lost its lease and comes back);
/// the store's answer, which G3 says is `StaleFence` once that attempt is no longer current.
pub async fn complete_as_a_late_worker(
    url: &str,
    id: &str,
    attempt: u32,
) -> Result<(), sundial_store::Error> {
    use sundial_store::prelude::*;
    let store = sundial_store_postgres::PgStore::open(url, None)
        .await
        .expect("open the store");
    let late = sundial_store::AttemptComplete {
        attempt: sundial_store::AttemptRef {
            id: id.to_owned(),
            attempt,
        },
        outcome: sundial_core::execution::AttemptOutcome::Succeeded,
        status_code: Some(200),
        error: None,
        detail: None,
        next: sundial_store::NextStep::Succeeded,
        only_if_lapsed: false,
        output: None,
    };
    let answer = store.attempt_complete(&late).await;
    store.close().await;
    answer
}
