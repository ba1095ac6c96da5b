//! Sundial's shared store: PostgreSQL, for any number of processes.
//!
//! Invariants (beyond those of [`sundial_store`]):
//! - The database clock is the time authority: every due check, lease and timestamp is
//!   computed from `clock_timestamp()` in the statement's transaction — unless the store was
//!   opened with a test clock, which replaces it (`coalesce($now, now())`).
//! - Shard leases are rows of `shard_leases`; a change of owner bumps the shard's epoch. The
//!   live scheduler nodes (rows of `nodes` with an unexpired heartbeat) share the 1,024 shards
//!   evenly: each renewal gives back shards beyond a node's share and takes free ones up to it.
//! - A trigger commit locks the lease rows of its shards (`FOR SHARE`) and checks owner,
//!   epoch and expiry before writing, so a takeover waits for an in-flight commit and a
//!   commit after a takeover writes nothing.
//! - Workers claim with `FOR UPDATE SKIP LOCKED`: no execution is handed to two claimers,
//!   and claimers never wait on each other. A commit that makes executions due sends
//!   `NOTIFY sundial_due`, which wakes idle workers ([`StoreBase::signals`]).
//! - `execution_queue` (migration 0004) has a row exactly for each unfinished execution, and
//!   its `due_at` / `lease_expires_at` equal the execution row's: every statement that
//!   changes one changes the other in the same transaction. Lookups of waiting or running
//!   executions read the queue; the execution row is the history and is never indexed on
//!   those columns, so its claim and completion updates are HOT. Writers lock the execution
//!   row before its queue row; the claim locks both, in that order, with `SKIP LOCKED`.
//!   Every process that opens the store vacuums the queue ([`QueueVacuum`], a maintenance
//!   service).
//! - `executions`, `attempts` and `workflow_runs` are partitioned by range of their id, a UTC
//!   day a partition (migration 0010): every id's first 48 bits are a time in milliseconds
//!   (`sundial_core::ids`), and one execution per slot, one run per slot and one execution
//!   per run task (G1, W1) are kept by primary keys over ids derived from what makes each one.
//!   [`HistoryPartitions`] creates the days ahead; a default partition takes any id no day
//!   covers, so no insert fails for want of a partition. Retention drops an expired day whole
//!   after moving its survivors to the default partition; while a day is being dropped
//!   (`history_drops`), none of its finished rows is re-opened.

#![warn(missing_docs)]

mod alerts;
mod backfills;
mod bench;
mod calendars;
mod claim;
mod complete;
mod executions;
mod jobs;
mod leases;
mod liveness;
mod maintenance;
mod nodes;
mod notify;
mod reads;
mod release;
mod retention;
mod rows;
mod runs;
pub mod scratch;
mod secrets;
#[cfg(feature = "testing")]
pub mod testing;
mod trigger;
mod workflows;

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use async_trait::async_trait;
use jiff::Timestamp;
use sqlx::postgres::{PgConnectOptions, PgListener, PgPoolOptions};
use sqlx::{ConnectOptions, PgPool, Postgres, Row};
use sundial_clock::Clock;
use sundial_core::SHARD_COUNT;
use sundial_core::execution::ExecutionState;
use sundial_core::job::ConcurrencyPolicy;
use sundial_store::NewRun;
use sundial_store::claim::{ActiveExecution, DueExecution, JobFacts};
use sundial_store::{
    AttemptComplete, AttemptRef, ClaimedExecution, Error, ExecutionClaim, ExecutionRecord,
    JobRecord, JobWrite, NewExecution, Result, RunSpec, ShardLease, ShardLeaseRequest, Signals,
    TriggerCommit, TriggerCommitted,
};
use sundial_store::{StoreBase, StoreShared};

use notify::{notify_cancelled, notify_due};
use rows::{commit, db_err, ms, ts};

pub use maintenance::{
    HistoryPartitions, PARTITION_DAYS_AHEAD, PARTITION_LOCK_TIMEOUT_MS, PARTITIONED,
    PARTITIONS_EVERY, PARTITIONS_LOCK_KEY, QueueVacuum,
};

/// Classifies a driver error as the store does (see [`Error`]'s table: PostgreSQL's codes by
/// kind, the driver's own errors, never the database's text in the message): for tools and
/// tests that send statements of their own.
pub fn classify(e: sqlx::Error) -> Error {
    rows::db_err(e)
}

/// The channel a commit that makes executions due notifies.
pub const DUE_CHANNEL: &str = "sundial_due";

/// The channel a commit that cancels a running execution notifies, with the execution id.
pub const CANCEL_CHANNEL: &str = "sundial_cancel";
/// The channel on which a scheduler that gives its shard leases up tells the others to renew
/// theirs at once (payload: its node id).
pub const SHARDS_CHANNEL: &str = "sundial_shards";

const DB_NOW: &str = "(extract(epoch from clock_timestamp()) * 1000)::bigint";

/// The current instant by the time authority, in milliseconds since the epoch (UTC): `clock`
/// when the store was opened with one (tests), else the database's `clock_timestamp()` read
/// through `executor`.
///
/// # Errors
/// The store's, classified, when the database cannot be read.
pub(crate) async fn now_ms<'e, E: sqlx::PgExecutor<'e>>(
    clock: Option<&Arc<dyn Clock>>,
    executor: E,
) -> Result<i64> {
    if let Some(clock) = clock {
        return Ok(ms(clock.now()));
    }
    sqlx::query_scalar(&format!("SELECT {DB_NOW}"))
        .fetch_one(executor)
        .await
        .map_err(db_err)
}

/// How long the server lets one of the store's sessions sit idle inside a transaction before
/// it ends the session (`idle_in_transaction_session_timeout`, 5 s): shorter than the default
/// 10 s `lease_ttl`, so a frozen process's locks are gone before its worker lease can be
/// taken over; the store's transactions never wait on their client for that long.
pub const IDLE_IN_TRANSACTION: &str = "5s";

/// The PostgreSQL-backed [`Store`](sundial_store::Store).
#[derive(Debug)]
pub struct PgStore {
    pool: PgPool,
    url: String,
    clock: Option<Arc<dyn Clock>>,
    instance: String,
    signals: OnceLock<Signals>,
    /// Workflow versions parsed once (they never change once written).
    workflow_specs: sundial_store::workflow::SpecCache,
    /// The notification listener, started with the first [`StoreBase::signals`] call and
    /// stopped when the store is dropped.
    background: std::sync::Mutex<Vec<tokio::task::AbortHandle>>,
}

impl Drop for PgStore {
    fn drop(&mut self) {
        let tasks = self.background.get_mut().unwrap_or_else(|p| p.into_inner());
        for task in tasks.drain(..) {
            task.abort();
        }
    }
}

type Tx<'a> = sqlx::Transaction<'a, Postgres>;

impl PgStore {
    /// Connects to `url` (`postgres://...`) and applies pending migrations (concurrent
    /// starters serialise on the migrator's advisory lock). With `clock`, that clock replaces
    /// the database's as the time authority — for tests only.
    ///
    /// # Errors
    /// [`Error::Unavailable`] when the database cannot be reached or migrated.
    pub async fn open(url: &str, clock: Option<Arc<dyn Clock>>) -> Result<Self> {
        let options: PgConnectOptions = url.parse().map_err(db_err)?;
        // Every statement of the store touches a few rows through an index. On statistics
        // gone stale after a bulk load the planner may cost one high enough for a parallel
        // plan or JIT compilation, which then spends tens of milliseconds starting workers or
        // compiling for a query that runs in one: both are off for the store's sessions.
        // Sequential scans are costed out too: execution_queue swings from empty to a whole
        // burst between two ANALYZEs, and on its stale statistics the planner put a scan of
        // it inside a nested loop (256 scans in one completion batch, 250 ms instead of 3).
        //
        // A session idle inside a transaction for IDLE_IN_TRANSACTION is ended by the server:
        // a process frozen mid-transaction (SIGSTOP, a stalled VM) would otherwise keep its
        // row locks, and a claim holds its worker lease's row `FOR KEY SHARE`, so every
        // reaper's takeover of that lease would wait for the frozen process to wake
        // (docs/guarantees.md, "Workers").
        let options = options
            .log_statements(tracing::log::LevelFilter::Trace)
            .options([
                ("max_parallel_workers_per_gather", "0"),
                ("jit", "off"),
                ("enable_seqscan", "off"),
                ("idle_in_transaction_session_timeout", IDLE_IN_TRANSACTION),
            ]);
        let pool = PgPoolOptions::new()
            .max_connections(8)
            .acquire_timeout(Duration::from_secs(5))
            .connect_with(options)
            .await
            .map_err(db_err)?;
        sqlx::migrate!("./migrations")
            .run(&pool)
            .await
            .map_err(|e| Error::Unavailable(Box::new(e)))?;
        Ok(PgStore {
            pool,
            url: url.to_owned(),
            clock,
            instance: uuid::Uuid::now_v7().to_string(),
            signals: OnceLock::new(),
            workflow_specs: Default::default(),
            background: Default::default(),
        })
    }

    /// Closes the connection pool.
    pub async fn close(&self) {
        self.pool.close().await;
    }

    /// The current instant by the time authority, read inside `tx` when there is one.
    async fn now_ms<'e, E: sqlx::PgExecutor<'e>>(&self, executor: E) -> Result<i64> {
        now_ms(self.clock.as_ref(), executor).await
    }

    async fn begin(&self) -> Result<Tx<'_>> {
        self.pool.begin().await.map_err(db_err)
    }
}

#[async_trait]
impl StoreBase for PgStore {
    async fn now(&self) -> Result<Timestamp> {
        ts(self.now_ms(&self.pool).await?)
    }

    fn signals(&self) -> Signals {
        self.signals
            .get_or_init(|| {
                let signals = Signals::new();
                let (url, s) = (self.url.clone(), signals.clone());
                let listener = tokio::spawn(async move { notify::listen(url, s).await });
                self.background
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .push(listener.abort_handle());
                signals
            })
            .clone()
    }
}

sundial_store::forward_store_traits!(PgStore);
