//! Background maintenance services and the one runner that starts and stops them
//! (ARCHITECTURE.md; docs/configuration.md, "`[maintenance]`").
//!
//! A service is one small job done again and again: the reaper (`sundial-worker`), the
//! PostgreSQL queue vacuum and the SQLite log checkpoint (each store's
//! [`crate::MaintenanceStore::maintenance`]), the node heartbeat ([`NodeHeartbeat`]), history retention
//! ([`HistoryRetention`]). Each has a named default period and a `[maintenance]` key
//! ([`MaintenanceConfig`]); its [`Service::run_once`] is one bounded pass that says what it
//! did.
//!
//! Invariants:
//! - The [`Runner`] runs each service in a loop of its own: a pass, then a sleep of the
//!   service's period on the runner's clock (so tests drive it with a `ManualClock`), until
//!   shutdown. A pass that fails is logged and the loop goes on; one service's failure never
//!   stops another.
//! - Shutdown stops every loop between passes; [`RunnerHandle::stop`] returns once all have.
//! - Every pass is announced on [`Runner::passes`] (a test signal: tests wait on it rather
//!   than sleeping).
//! - A service holds no lock that the trigger, claim or completion paths wait on.
//! - History retention ([`HistoryRetention`]) deletes only what finished before the cut-off,
//!   keeping each job's and workflow's newest execution or run.

use std::sync::Arc;

use async_trait::async_trait;
use sundial_clock::Clock;
use sundial_core::Dur;
use tokio::sync::{broadcast, watch};

use crate::{MaintenanceStore, Result};

/// Default period of the reaper, which retries (or dead-letters) attempts whose lease lapsed:
/// 1 s (`maintenance.reaper_every`).
pub const REAPER_EVERY_DEFAULT: Dur = Dur::from_secs(1);
/// Default period of the PostgreSQL queue vacuum: 10 s (`maintenance.queue_vacuum_every`).
pub const QUEUE_VACUUM_EVERY_DEFAULT: Dur = Dur::from_secs(10);
/// Default period of the SQLite log checkpoint: 100 ms (`maintenance.checkpoint_every`).
pub const CHECKPOINT_EVERY_DEFAULT: Dur = Dur::from_millis(100);

/// The periods of the maintenance services, from `[maintenance]` of the server's config.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MaintenanceConfig {
    /// `reaper_every`: how often lapsed attempt leases are looked for. Default
    /// [`REAPER_EVERY_DEFAULT`].
    pub reaper_every: Dur,
    /// `queue_vacuum_every` (PostgreSQL only): how often `execution_queue` is vacuumed.
    /// Default [`QUEUE_VACUUM_EVERY_DEFAULT`].
    pub queue_vacuum_every: Dur,
    /// `checkpoint_every` (SQLite only): how often the write-ahead log is copied back into
    /// the database file. Default [`CHECKPOINT_EVERY_DEFAULT`].
    pub checkpoint_every: Dur,
    /// `node_heartbeat_every`: how often the process records itself alive; `None`: a third
    /// of the node's time to live ([`NodeHeartbeat`]).
    pub node_heartbeat_every: Option<Dur>,
    /// `retention_every`: the period of history retention's passes ([`HistoryRetention`]).
    /// Default [`RETENTION_EVERY_DEFAULT`].
    pub retention_every: Dur,
}

impl Default for MaintenanceConfig {
    fn default() -> Self {
        MaintenanceConfig {
            reaper_every: REAPER_EVERY_DEFAULT,
            queue_vacuum_every: QUEUE_VACUUM_EVERY_DEFAULT,
            checkpoint_every: CHECKPOINT_EVERY_DEFAULT,
            node_heartbeat_every: None,
            retention_every: RETENTION_EVERY_DEFAULT,
        }
    }
}

impl MaintenanceConfig {
    /// Checks every period.
    ///
    /// # Errors
    /// The first key whose period is zero, with the reason (`"reaper_every", "must be more
    /// than 0s"`).
    pub fn validate(&self) -> std::result::Result<(), (&'static str, String)> {
        for (key, every) in [
            ("reaper_every", Some(self.reaper_every)),
            ("queue_vacuum_every", Some(self.queue_vacuum_every)),
            ("checkpoint_every", Some(self.checkpoint_every)),
            ("node_heartbeat_every", self.node_heartbeat_every),
            ("retention_every", Some(self.retention_every)),
        ] {
            if every.is_some_and(Dur::is_zero) {
                return Err((key, "must be more than 0s".into()));
            }
        }
        Ok(())
    }
}

/// One maintenance service.
#[async_trait]
pub trait Service: Send + Sync {
    /// Its name in logs and in [`Pass`] (`reaper`, `queue_vacuum`, `checkpoint`,
    /// `node_heartbeat`).
    fn name(&self) -> &'static str;

    /// The time between the end of one pass and the start of the next.
    fn every(&self) -> Dur;

    /// One bounded pass; returns how many items it handled (attempts reaped, heartbeats
    /// written, …).
    ///
    /// # Errors
    /// The store's error; the runner logs it and runs the next pass at the next period.
    async fn run_once(&self) -> Result<u64>;
}

/// What one pass of a service did: the count it returned, or its error's text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pass {
    /// The service's [`Service::name`].
    pub service: &'static str,
    /// What [`Service::run_once`] returned.
    pub result: std::result::Result<u64, String>,
}

/// Starts and stops a set of services (see the module invariants).
pub struct Runner {
    clock: Arc<dyn Clock>,
    services: Vec<Arc<dyn Service>>,
    passes: broadcast::Sender<Pass>,
}

impl std::fmt::Debug for Runner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names: Vec<&str> = self.services.iter().map(|s| s.name()).collect();
        f.debug_struct("Runner").field("services", &names).finish()
    }
}

/// The running services of a [`Runner::start`].
#[derive(Debug)]
pub struct RunnerHandle {
    shutdown: watch::Sender<bool>,
    tasks: tokio::task::JoinSet<()>,
}

impl RunnerHandle {
    /// Stops every service between passes and waits until all have stopped.
    pub async fn stop(mut self) {
        let _ = self.shutdown.send(true);
        while self.tasks.join_next().await.is_some() {}
    }
}

impl Runner {
    /// A runner with no services, sleeping on `clock`.
    pub fn new(clock: Arc<dyn Clock>) -> Self {
        Runner {
            clock,
            services: Vec::new(),
            passes: broadcast::channel(256).0,
        }
    }

    /// Adds services.
    pub fn add(&mut self, services: impl IntoIterator<Item = Arc<dyn Service>>) {
        self.services.extend(services);
    }

    /// The names of the services added, in order.
    pub fn names(&self) -> Vec<&'static str> {
        self.services.iter().map(|s| s.name()).collect()
    }

    /// Every pass of every service from now on (a test signal; a slow receiver misses the
    /// oldest, never blocks a service).
    pub fn passes(&self) -> broadcast::Receiver<Pass> {
        self.passes.subscribe()
    }

    /// Starts every service's loop; they run until [`RunnerHandle::stop`].
    pub fn start(self) -> RunnerHandle {
        let (shutdown, stopped) = watch::channel(false);
        let mut tasks = tokio::task::JoinSet::new();
        for service in self.services {
            let (clock, passes, mut stopped) =
                (self.clock.clone(), self.passes.clone(), stopped.clone());
            tasks.spawn(async move {
                while !*stopped.borrow() {
                    let result = service.run_once().await.map_err(|e| {
                        tracing::warn!(service = service.name(), error = %e, "maintenance pass failed");
                        e.to_string()
                    });
                    // The next pass is due a period after this one ended, fixed before the
                    // pass is announced, so a test that moves the clock on seeing it moves
                    // it past a deadline already set.
                    let deadline = clock.now() + service.every().as_signed();
                    let _ = passes.send(Pass {
                        service: service.name(),
                        result,
                    });
                    tokio::select! {
                        _ = clock.sleep_until(deadline) => {}
                        _ = stopped.changed() => {}
                    }
                }
            });
        }
        RunnerHandle { shutdown, tasks }
    }
}

/// Records the process alive, with its roles, every third of `ttl` (or the configured
/// period): the `nodes` rows `GET /v1/cluster` shows and the shard share counts.
pub struct NodeHeartbeat {
    store: Arc<dyn MaintenanceStore>,
    node: String,
    roles: Vec<String>,
    ttl: Dur,
    every: Dur,
}

impl NodeHeartbeat {
    /// A heartbeat for `node` with `roles`, alive for `ttl` after each pass, every
    /// `every` (`None`: a third of `ttl`).
    pub fn new(
        store: Arc<dyn MaintenanceStore>,
        node: impl Into<String>,
        roles: Vec<String>,
        ttl: Dur,
        every: Option<Dur>,
    ) -> Self {
        NodeHeartbeat {
            store,
            node: node.into(),
            roles,
            ttl,
            every: every.unwrap_or(Dur::from_millis(ttl.as_millis() / 3)),
        }
    }
}

#[async_trait]
impl Service for NodeHeartbeat {
    fn name(&self) -> &'static str {
        "node_heartbeat"
    }

    fn every(&self) -> Dur {
        self.every
    }

    /// # Errors
    /// [`crate::Error::Conflict`] while another live process holds the node id.
    async fn run_once(&self) -> Result<u64> {
        self.store
            .node_heartbeat(&self.node, &self.roles, self.ttl)
            .await?;
        Ok(1)
    }
}

/// Default `history_retention`: 30 days (docs/configuration.md, "history_retention"; docs/guarantees.md, G6).
pub const HISTORY_RETENTION_DEFAULT: Dur = Dur::from_secs(30 * 86_400);
/// Default period of history retention's passes: 1 min (`maintenance.retention_every`).
pub const RETENTION_EVERY_DEFAULT: Dur = Dur::from_secs(60);
/// Rows one prune call looks at, and so at most deletes, in one transaction: 250. Small, so
/// that the transaction is short: SQLite has one writer, and a trigger commit waits for the
/// prune transaction in progress (BENCHMARKS.md, "Retention under load").
pub const RETENTION_BATCH: u32 = 250;
/// The pause after each prune call, as a multiple of the time the call took: 3, so that
/// pruning takes at most a quarter of the time (BENCHMARKS.md, "Retention under load").
pub const RETENTION_PAUSE_FACTOR: u32 = 3;
/// How long one pass of history retention runs at most, in wall time: 5 s, so that a
/// process stopping (which waits for the pass in progress) is not held up by it.
pub const RETENTION_PASS_TIME: std::time::Duration = std::time::Duration::from_secs(5);
/// The period of history retention's passes while expired history is left over from the last
/// pass: 1 s.
pub const RETENTION_CATCH_UP_EVERY: Dur = Dur::from_secs(1);
/// Prune calls in one pass, at most: 1,000 (250,000 rows looked at); the next pass goes on
/// where this one stopped.
pub const RETENTION_CALLS_PER_PASS: u32 = 1_000;

/// Default `audit_retention`: 400 days (docs/configuration.md, "audit_retention").
pub const AUDIT_RETENTION_DEFAULT: Dur = Dur::from_secs(400 * 86_400);

/// Audit retention (docs/configuration.md, "audit_retention"): every `every`, deletes the
/// audit log's entries written more than `retention` ago by the store's clock, from the
/// oldest end of each namespace's chain only ([`MaintenanceStore::audit_prune`]), so that
/// what is left still verifies. One statement a pass: the log grows by the API's writes, a
/// few a second at most, so a day's worth is small.
pub struct AuditRetention {
    store: Arc<dyn MaintenanceStore>,
    retention: Dur,
    every: Dur,
}

impl AuditRetention {
    /// The service over `store`, keeping `retention`, a pass every `every`.
    pub fn new(store: Arc<dyn MaintenanceStore>, retention: Dur, every: Dur) -> Self {
        AuditRetention {
            store,
            retention,
            every,
        }
    }
}

#[async_trait]
impl Service for AuditRetention {
    fn name(&self) -> &'static str {
        "audit_retention"
    }

    fn every(&self) -> Dur {
        self.every
    }

    async fn run_once(&self) -> Result<u64> {
        let now = self.store.now().await?;
        let cutoff = now.as_millisecond() - self.retention.as_millis_i64();
        let before = jiff::Timestamp::from_millisecond(cutoff)
            .map_err(|e| crate::Error::Corrupt(format!("audit cut-off {cutoff}: {e}")))?;
        self.store.audit_prune(before).await
    }
}

/// History retention (docs/configuration.md, "history_retention"): deletes the
/// executions and runs that finished more than `retention` ago by the store's clock, keeping
/// each job's and workflow's newest ([`MaintenanceStore::history_prune`]), every `every`.
///
/// A pass walks the history of jobs and the runs, taking turns, in slot order,
/// [`RETENTION_BATCH`] rows a call (a transaction of its own, followed by a pause
/// [`RETENTION_PAUSE_FACTOR`] times as long as it took), and stops after
/// [`RETENTION_CALLS_PER_PASS`] calls or [`RETENTION_PASS_TIME`]; the next pass goes on from
/// there, [`RETENTION_CATCH_UP_EVERY`] later while expired history is left, and a walk that
/// reached the cut-off starts again from the oldest. The rows it deletes are finished, and on
/// PostgreSQL those another transaction holds are skipped, so no trigger, claim or completion
/// waits on it there; on SQLite, whose one writer it shares, they wait at most for one
/// transaction of [`RETENTION_BATCH`] rows.
pub struct HistoryRetention {
    store: Arc<dyn MaintenanceStore>,
    retention: Dur,
    every: Dur,
    batch: u32,
    calls: u32,
    /// Where the walks of executions and of runs stopped.
    resume: std::sync::Mutex<[Option<crate::HistoryKey>; 2]>,
    /// The last pass stopped at its bound with expired history left.
    behind: std::sync::atomic::AtomicBool,
}

impl HistoryRetention {
    /// Retention of `retention` on `store`, a pass every `every`.
    pub fn new(store: Arc<dyn MaintenanceStore>, retention: Dur, every: Dur) -> Self {
        HistoryRetention {
            store,
            retention,
            every,
            batch: RETENTION_BATCH,
            calls: RETENTION_CALLS_PER_PASS,
            resume: std::sync::Mutex::new([None, None]),
            behind: std::sync::atomic::AtomicBool::new(false),
        }
    }

    /// The same with `batch` rows a call and at most `calls` calls a pass (tests use small
    /// ones to see a walk go on from pass to pass).
    pub fn with_limits(mut self, batch: u32, calls: u32) -> Self {
        self.batch = batch.max(1);
        self.calls = calls.max(1);
        self
    }
}

#[async_trait]
impl Service for HistoryRetention {
    fn name(&self) -> &'static str {
        "history_retention"
    }

    /// `retention_every`; [`RETENTION_CATCH_UP_EVERY`] after a pass that stopped at its
    /// bound with expired history left.
    fn every(&self) -> Dur {
        if self.behind.load(std::sync::atomic::Ordering::Relaxed) {
            RETENTION_CATCH_UP_EVERY
        } else {
            self.every
        }
    }

    /// One pass; returns the executions and runs deleted (a run's tasks not counted).
    ///
    /// # Errors
    /// The store's; the walk goes on from the last call that succeeded.
    async fn run_once(&self) -> Result<u64> {
        let now = self.store.now().await?;
        let before = now
            .checked_sub(self.retention.as_signed())
            .unwrap_or(jiff::Timestamp::MIN);
        let kinds = [crate::HistoryKind::Executions, crate::HistoryKind::Runs];
        let started = std::time::Instant::now();
        let mut last = started;
        let (mut deleted, mut calls, mut done) = (0, 0u32, [false, false]);
        let mut behind = false;
        // The two walks take turns, so that neither waits for the other to reach the
        // cut-off.
        while !(done[0] && done[1]) {
            if calls == self.calls || started.elapsed() >= RETENTION_PASS_TIME {
                behind = true;
                break;
            }
            let turn = (calls % 2) as usize;
            let slot = if done[turn] { 1 - turn } else { turn };
            if calls > 0 {
                // A quarter of the time at most: after each call, a pause three times as
                // long as the call took, so that the execution path gets the store (SQLite's
                // one writer, PostgreSQL's two cores here) between two prune transactions.
                // Wall time: it paces store calls, it does not decide what is due.
                tokio::time::sleep(last.elapsed() * RETENTION_PAUSE_FACTOR).await;
            }
            calls += 1;
            last = std::time::Instant::now();
            let after = self.resume.lock().unwrap_or_else(|p| p.into_inner())[slot].clone();
            let pruned = self
                .store
                .history_prune(&crate::HistoryPrune {
                    kind: kinds[slot],
                    before,
                    limit: self.batch,
                    after,
                    dry_run: false,
                })
                .await?;
            deleted += pruned.deleted;
            done[slot] = pruned.next.is_none();
            self.resume.lock().unwrap_or_else(|p| p.into_inner())[slot] = pruned.next;
        }
        self.behind
            .store(behind, std::sync::atomic::Ordering::Relaxed);
        if deleted > 0 {
            tracing::info!(deleted, before = %before, behind, "history retention pass");
        }
        Ok(deleted)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU64, Ordering};
    use sundial_clock::ManualClock;

    struct Counting {
        every: Dur,
        passes: AtomicU64,
        fail: bool,
    }

    #[async_trait]
    impl Service for Counting {
        fn name(&self) -> &'static str {
            if self.fail { "failing" } else { "counting" }
        }
        fn every(&self) -> Dur {
            self.every
        }
        async fn run_once(&self) -> Result<u64> {
            let n = self.passes.fetch_add(1, Ordering::SeqCst) + 1;
            if self.fail {
                Err(crate::Error::Unavailable("down".into()))
            } else {
                Ok(n)
            }
        }
    }

    async fn next(passes: &mut broadcast::Receiver<Pass>, service: &str) -> Pass {
        loop {
            let pass = passes.recv().await.expect("a pass");
            if pass.service == service {
                return pass;
            }
        }
    }

    #[tokio::test]
    async fn services_run_on_their_period_of_the_clock_and_a_failing_one_stops_no_other() {
        let clock = Arc::new(ManualClock::new("2026-01-01T00:00:00Z".parse().unwrap()));
        let mut runner = Runner::new(clock.clone());
        runner.add([
            Arc::new(Counting {
                every: Dur::from_secs(10),
                passes: AtomicU64::new(0),
                fail: false,
            }) as Arc<dyn Service>,
            Arc::new(Counting {
                every: Dur::from_secs(1),
                passes: AtomicU64::new(0),
                fail: true,
            }),
        ]);
        assert_eq!(runner.names(), ["counting", "failing"]);
        let mut passes = runner.passes();
        let handle = runner.start();
        assert_eq!(
            next(&mut passes, "counting").await.result,
            Ok(1),
            "a pass at start"
        );
        assert!(next(&mut passes, "failing").await.result.is_err());
        // A second pass only once its period has passed on the clock.
        clock.advance(jiff::SignedDuration::from_secs(9));
        assert!(
            next(&mut passes, "failing").await.result.is_err(),
            "the other goes on"
        );
        clock.advance(jiff::SignedDuration::from_secs(1));
        assert_eq!(next(&mut passes, "counting").await.result, Ok(2));
        tokio::time::timeout(std::time::Duration::from_secs(5), handle.stop())
            .await
            .expect("stop returns once every loop has stopped");
    }

    #[test]
    fn a_zero_period_is_refused_naming_its_key() {
        let config = MaintenanceConfig {
            checkpoint_every: Dur::ZERO,
            ..MaintenanceConfig::default()
        };
        assert_eq!(
            config.validate(),
            Err(("checkpoint_every", "must be more than 0s".into()))
        );
        assert_eq!(MaintenanceConfig::default().validate(), Ok(()));
    }
}
