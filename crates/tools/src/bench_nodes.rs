//! The server processes of a `sundial bench` run: started from the bench's own binary on the
//! run's store, read for their memory and `/metrics`, killed when dropped; and the run's
//! temporary SQLite files, removed when dropped.

use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use jiff::SignedDuration;

/// The server processes of a run, killed when dropped.
pub(crate) struct Nodes {
    children: Vec<Child>,
    /// The first one's API address.
    pub(crate) api: String,
    /// Every process's address (`http://host:port`).
    addrs: Vec<String>,
}

impl Drop for Nodes {
    fn drop(&mut self) {
        for c in &mut self.children {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Nodes {
    /// The attempts whose lease lapsed, summed over the processes' reapers
    /// (`sundial_attempts_total{outcome="lease_lapsed"}` of each `/metrics`), and the worker
    /// leases the processes found taken over (`sundial_worker_leases_lost_total`). A process
    /// that does not answer counts none.
    pub(crate) async fn lapsed(&self) -> (u64, u64) {
        let http = reqwest::Client::new();
        let (mut attempts, mut leases) = (0u64, 0u64);
        for addr in &self.addrs {
            let Ok(r) = http.get(format!("{addr}/metrics")).send().await else {
                continue;
            };
            let Ok(text) = r.text().await else { continue };
            for line in text.lines() {
                let value = || {
                    line.rsplit(' ')
                        .next()
                        .and_then(|v| v.parse::<f64>().ok())
                        .map_or(0, |v| v as u64)
                };
                if line.starts_with("sundial_attempts_total{")
                    && line.contains("outcome=\"lease_lapsed\"")
                {
                    attempts += value();
                } else if line.starts_with("sundial_worker_leases_lost_total") {
                    leases += value();
                }
            }
        }
        (attempts, leases)
    }

    /// The largest peak RSS among the processes, in MB (`VmHWM` of `/proc/PID/status`).
    pub(crate) fn peak_rss_mb(&self) -> f64 {
        self.status_mb("VmHWM:")
    }

    /// The largest current RSS among the processes, in MB (`VmRSS`).
    pub(crate) fn rss_mb(&self) -> f64 {
        self.status_mb("VmRSS:")
    }

    /// The largest value of the kB field `key` of the processes' `/proc/PID/status`, in MB.
    fn status_mb(&self, key: &str) -> f64 {
        self.children
            .iter()
            .filter_map(|c| std::fs::read_to_string(format!("/proc/{}/status", c.id())).ok())
            .filter_map(|s| {
                s.lines()
                    .find(|l| l.starts_with(key))
                    .and_then(|l| l.split_whitespace().nth(1))
                    .and_then(|kb| kb.parse::<f64>().ok())
            })
            .fold(0.0, f64::max)
            / 1024.0
    }
}

/// The nodes' RSS over a run, read once a second (MB): at one minute past the first slot, the
/// most in the 30 s before that, the most after it, and at the end. A server whose memory is
/// bounded reads no more after its first minute than in its last 30 s. RSS rises and falls
/// by several MB within seconds as the allocator takes and returns memory, so one reading
/// (`at_1min`) may fall on a trough; the most over 30 s is the level to compare with.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct RssTrace {
    pub(crate) at_1min: Option<f64>,
    pub(crate) peak_30s_to_1min: f64,
    pub(crate) peak_after_1min: f64,
    pub(crate) end: f64,
}

impl RssTrace {
    pub(crate) fn sample(&mut self, since_first_slot: SignedDuration, mb: f64) {
        self.end = mb;
        if since_first_slot >= SignedDuration::from_secs(60) {
            self.at_1min.get_or_insert(mb);
            self.peak_after_1min = self.peak_after_1min.max(mb);
        } else if since_first_slot >= SignedDuration::from_secs(30) {
            self.peak_30s_to_1min = self.peak_30s_to_1min.max(mb);
        }
    }
}

/// The bench's own SQLite file (with its WAL, shared-memory and lock files), removed when the
/// run ends, however it ends.
pub(crate) struct TempDb(pub(crate) Option<String>);

impl Drop for TempDb {
    fn drop(&mut self) {
        if let Some(path) = &self.0 {
            for suffix in ["", "-wal", "-shm", ".scheduler.lock"] {
                let _ = std::fs::remove_file(format!("{path}{suffix}"));
            }
        }
    }
}

fn free_addr() -> anyhow::Result<SocketAddr> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?)
}

/// Starts `count` server processes of `exe` (default: this binary) on `url` and waits until
/// the first is ready.
pub(crate) async fn start_nodes(
    url: &str,
    count: u32,
    exe: Option<&std::path::Path>,
) -> anyhow::Result<Nodes> {
    let exe = match exe {
        Some(exe) => exe.to_owned(),
        None => std::env::current_exe().context("locating the sundial binary")?,
    };
    let mut children = Vec::new();
    let mut api = String::new();
    let mut addrs = Vec::new();
    for k in 0..count {
        let addr = free_addr()?;
        let child = Command::new(&exe)
            .args([
                "server",
                "--node-id",
                &format!("bench-{}-{k}", std::process::id()),
                "--listen",
                &addr.to_string(),
                "--database-url",
                url,
            ])
            // The bench's own RUST_LOG, if set, reaches the nodes (to read, say, when the
            // history's maintenance ran against the late seconds below); else warnings only.
            .env(
                "RUST_LOG",
                std::env::var("RUST_LOG").unwrap_or_else(|_| "warn".into()),
            )
            .stdout(Stdio::null())
            .spawn()
            .context("starting a server process")?;
        children.push(child);
        addrs.push(format!("http://{addr}"));
        if k == 0 {
            api = format!("http://{addr}");
        }
    }
    let mut nodes = Nodes {
        children,
        api,
        addrs,
    };
    let http = reqwest::Client::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        for (k, c) in nodes.children.iter_mut().enumerate() {
            if let Ok(Some(status)) = c.try_wait() {
                bail!("server process {k} exited at start ({status}); its error is above");
            }
        }
        if let Ok(r) = http.get(format!("{}/readyz", nodes.api)).send().await
            && r.status().is_success()
        {
            return Ok(nodes);
        }
        if Instant::now() > deadline {
            bail!("the server did not become ready within 30 s");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
