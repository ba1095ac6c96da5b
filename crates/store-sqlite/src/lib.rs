//! Sundial's embedded store: SQLite in one file, for one process.
//!
//! Invariants (beyond those of [`sundial_store`]):
//! - One process at most runs the scheduler on a file: the first [`SchedulerStore::shard_lease_renew`]
//!   takes an exclusive OS lock on `<file>.scheduler.lock`, which the OS drops when the process
//!   dies, so a crashed scheduler's successor starts at once and a second live one is refused
//!   with [`Error::InUse`].
//! - Writes go through one connection (SQLite has one writer anyway), each domain step in one
//!   `BEGIN IMMEDIATE` transaction; reads use a small pool of their own (WAL mode).
//! - Time is the injected [`Clock`]'s: in one process it is the only clock there is.
//! - Instants are stored as INTEGER milliseconds since the Unix epoch, UTC.
//! - The write-ahead log is copied back into the database file by a connection of its own
//!   ([`Checkpoint`], a maintenance service, `PRAGMA wal_checkpoint(PASSIVE)`), beside the writer rather than
//!   inside one of its commits; the writer checkpoints itself only when the log passes
//!   [`WRITER_CHECKPOINT_PAGES`], so the log stays bounded if the background pass falls behind.

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
mod release;
mod retention;
mod rows;
mod runs;
mod trigger;
mod values;
mod workflows;

use std::path::PathBuf;
use std::str::FromStr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use jiff::Timestamp;
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous};
use sqlx::{Row, SqlitePool};
use sundial_clock::Clock;
use sundial_core::SHARD_COUNT;
use sundial_core::execution::ExecutionState;
use sundial_store::claim::{ActiveExecution, ClaimPlan, DueExecution, JobFacts};
use sundial_store::concurrency::refill;
use sundial_store::{
    ApiStore, MaintenanceStore, SchedulerStore, StoreBase, StoreShared, WorkerStore,
};
use sundial_store::{
    AttemptComplete, AttemptRef, ClaimedExecution, ClusterStatus, DueJob, Error, ExecutionClaim,
    ExecutionListQuery, ExecutionRecord, FutureSlots, JobListQuery, JobRecord, JobWrite,
    NewExecution, NextDue, PendingExecutions, Result, RunSpec, ShardLease, ShardLeaseRequest,
    Signals, TriggerCommit, TriggerCommitted, TriggerDueSeconds, TriggerListDue, TriggerNextDue,
    WorkerLease, is_plain_insert,
};
use sundial_store::{
    NewRun, RunListQuery, RunRecord, WorkflowListQuery, WorkflowRecord, WorkflowWrite,
};

use executions::cancel_all_in_tx;
use rows::{commit, db_err, ms, ts};

pub use maintenance::Checkpoint;

/// Classifies a driver error as the store does (see [`Error`]'s table: SQLite's codes by
/// kind, the driver's own errors, never the database's text in the message): for tools and
/// tests that send statements of their own.
pub fn classify(e: sqlx::Error) -> Error {
    rows::db_err(e)
}

/// Log size, in pages, at which the writer checkpoints inside its own commit (SQLite's
/// `wal_autocheckpoint`, <https://sqlite.org/pragma.html#pragma_wal_autocheckpoint>; its
/// default is 1,000): 16,384 pages, 64 MiB at the 4 KiB page size.
pub const WRITER_CHECKPOINT_PAGES: u32 = 16_384;

/// Rows (and statement results) a connection's SQLite thread may hand back before the task
/// that asked for them has read them: 4,096, above a claim batch and its `RETURNING` rows.
/// sqlx runs each connection's statements on a thread of its own and passes results back
/// through a channel of this size (`SqliteConnectOptions::row_buffer_size`, default 50); at
/// 50, a claim of 512 executions stopped that thread about ten times mid-statement until a
/// busy tokio worker polled the claiming task again, holding the one writer idle meanwhile.
pub const ROW_BUFFER: usize = 4_096;

/// The SQLite-backed [`Store`](sundial_store::Store).
#[derive(Debug)]
pub struct SqliteStore {
    writer: SqlitePool,
    /// The connection of the log checkpoint ([`Checkpoint`]). None when the URL names no file
    /// (sqlx also names its in-memory databases, which have no log to checkpoint).
    checkpointer: Option<SqlitePool>,
    reader: SqlitePool,
    clock: Arc<dyn Clock>,
    lock_path: Option<PathBuf>,
    scheduler_lock: Mutex<Option<std::fs::File>>,
    instance: String,
    signals: Signals,
    /// Workflow versions parsed once (they never change once written).
    workflow_specs: sundial_store::workflow::SpecCache,
}

impl SqliteStore {
    /// Opens (creating if missing) the database at `url` (`sqlite://PATH` or `sqlite:PATH`)
    /// and applies pending migrations.
    ///
    /// # Errors
    /// [`Error::Unavailable`] when the file cannot be opened or migrated.
    pub async fn open(url: &str, clock: Arc<dyn Clock>) -> Result<Self> {
        let options = SqliteConnectOptions::from_str(url)
            .map_err(db_err)?
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            .synchronous(SqliteSynchronous::Normal)
            .busy_timeout(Duration::from_secs(10))
            .pragma("temp_store", "memory")
            .row_buffer_size(ROW_BUFFER);
        let lock_path = {
            let file = options.get_filename();
            let name = file.to_string_lossy();
            (!name.is_empty() && name != ":memory:")
                .then(|| PathBuf::from(format!("{name}.scheduler.lock")))
        };
        let writer = SqlitePoolOptions::new()
            .max_connections(1)
            .connect_with(
                options
                    .clone()
                    .pragma("wal_autocheckpoint", WRITER_CHECKPOINT_PAGES.to_string()),
            )
            .await
            .map_err(db_err)?;
        sqlx::migrate!("./migrations")
            .run(&writer)
            .await
            .map_err(|e| Error::Unavailable(Box::new(e)))?;
        let reader = SqlitePoolOptions::new()
            .max_connections(4)
            .connect_with(options.clone().read_only(true))
            .await
            .map_err(db_err)?;
        let checkpointer = if lock_path.is_some() {
            let pool = SqlitePoolOptions::new()
                .max_connections(1)
                .connect_with(options)
                .await
                .map_err(db_err)?;
            Some(pool)
        } else {
            None
        };
        Ok(SqliteStore {
            writer,
            checkpointer,
            reader,
            clock,
            lock_path,
            scheduler_lock: Mutex::new(None),
            instance: uuid::Uuid::now_v7().to_string(),
            signals: Signals::new(),
            workflow_specs: Default::default(),
        })
    }

    async fn begin(&self) -> Result<sqlx::Transaction<'_, sqlx::Sqlite>> {
        self.writer
            .begin_with("BEGIN IMMEDIATE")
            .await
            .map_err(db_err)
    }

    fn take_scheduler_lock(&self) -> Result<()> {
        let mut held = self
            .scheduler_lock
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        if held.is_some() {
            return Ok(());
        }
        let Some(path) = &self.lock_path else {
            return Ok(());
        };
        let file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(path)
            .map_err(|e| Error::Unavailable(Box::new(e)))?;
        match file.try_lock() {
            Ok(()) => {
                *held = Some(file);
                Ok(())
            }
            Err(std::fs::TryLockError::WouldBlock) => Err(Error::InUse(format!(
                "another process runs the scheduler on this SQLite database ({} is locked); \
                 an embedded store serves one scheduler — use PostgreSQL to run several",
                path.display()
            ))),
            Err(std::fs::TryLockError::Error(e)) => Err(Error::Unavailable(Box::new(e))),
        }
    }
}

#[async_trait]
impl StoreBase for SqliteStore {
    async fn now(&self) -> Result<Timestamp> {
        Ok(self.clock.now())
    }

    fn signals(&self) -> Signals {
        self.signals.clone()
    }
}

#[async_trait]
impl StoreShared for SqliteStore {
    async fn cluster_status(&self) -> Result<ClusterStatus> {
        nodes::cluster_status(self).await
    }

    async fn job_get(&self, namespace: &str, name: &str) -> Result<Option<JobRecord>> {
        jobs::job_get(self, namespace, name).await
    }

    async fn job_get_many(&self, namespace: &str, names: &[String]) -> Result<Vec<JobRecord>> {
        jobs::job_get_many(self, namespace, names).await
    }

    async fn job_list(&self, q: &JobListQuery) -> Result<Vec<JobRecord>> {
        jobs::job_list(self, q).await
    }

    async fn execution_get(&self, namespace: &str, id: &str) -> Result<Option<ExecutionRecord>> {
        executions::execution_get(self, namespace, id).await
    }

    async fn execution_list(&self, q: &ExecutionListQuery) -> Result<Vec<ExecutionRecord>> {
        executions::execution_list(self, q).await
    }

    async fn workflow_get(&self, namespace: &str, name: &str) -> Result<Option<WorkflowRecord>> {
        workflows::workflow_get(self, namespace, name).await
    }

    async fn workflow_list(&self, q: &WorkflowListQuery) -> Result<Vec<WorkflowRecord>> {
        workflows::workflow_list(self, q).await
    }

    async fn run_get(&self, namespace: &str, id: &str) -> Result<Option<RunRecord>> {
        runs::run_get(self, namespace, id).await
    }

    async fn run_list(&self, q: &RunListQuery) -> Result<Vec<RunRecord>> {
        runs::run_list(self, q).await
    }

    async fn calendar_get(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<Option<sundial_store::CalendarRecord>> {
        calendars::calendar_get(self, namespace, name).await
    }

    async fn calendar_list(&self, namespace: &str) -> Result<Vec<sundial_store::CalendarRecord>> {
        calendars::calendar_list(self, namespace).await
    }

    async fn calendar_users(&self, namespace: &str, name: &str) -> Result<Vec<String>> {
        calendars::calendar_users(self, namespace, name).await
    }

    async fn backfill_get(
        &self,
        namespace: &str,
        id: &str,
    ) -> Result<Option<sundial_store::BackfillRecord>> {
        backfills::backfill_get(self, namespace, id).await
    }

    async fn backfill_list(
        &self,
        namespace: &str,
        of: sundial_store::BackfillOf,
        name: &str,
    ) -> Result<Vec<sundial_store::BackfillRecord>> {
        backfills::backfill_list(self, namespace, of, name).await
    }

    async fn backfill_taken(
        &self,
        of: sundial_store::BackfillOf,
        ids: &[String],
    ) -> Result<std::collections::HashSet<String>> {
        backfills::backfill_taken(self, of, ids).await
    }

    async fn backfill_unfinished(&self, of: sundial_store::BackfillOf, uid: &str) -> Result<u64> {
        backfills::backfill_unfinished(self, of, uid).await
    }

    async fn namespace_list(&self) -> Result<Vec<String>> {
        // A skip scan: one index lookup per namespace, on each table's primary key.
        sqlx::query_scalar(
            "WITH RECURSIVE j AS ( \
           SELECT min(namespace) AS ns FROM jobs \
           UNION ALL SELECT (SELECT min(namespace) FROM jobs WHERE namespace > j.ns) FROM j WHERE j.ns IS NOT NULL), \
         w AS ( \
           SELECT min(namespace) AS ns FROM workflows \
           UNION ALL SELECT (SELECT min(namespace) FROM workflows WHERE namespace > w.ns) FROM w WHERE w.ns IS NOT NULL) \
         SELECT ns FROM j WHERE ns IS NOT NULL UNION SELECT ns FROM w WHERE ns IS NOT NULL ORDER BY 1",
        )
        .fetch_all(&self.reader)
        .await
        .map_err(db_err)
    }

    async fn backfill_cancel(
        &self,
        namespace: &str,
        id: &str,
        reason: Option<&str>,
    ) -> Result<sundial_store::BackfillRecord> {
        backfills::backfill_cancel(self, namespace, id, reason).await
    }
}

#[async_trait]
impl SchedulerStore for SqliteStore {
    async fn shard_lease_renew(&self, request: &ShardLeaseRequest) -> Result<Vec<ShardLease>> {
        leases::shard_lease_renew(self, request).await
    }

    async fn shard_lease_release(&self, node: &str) -> Result<()> {
        leases::shard_lease_release(self, node).await
    }

    async fn trigger_list_due(&self, q: &TriggerListDue) -> Result<Vec<DueJob>> {
        trigger::trigger_list_due(self, q).await
    }

    async fn trigger_due_seconds(&self, query: &TriggerDueSeconds) -> Result<Vec<(i64, u64)>> {
        trigger::trigger_due_seconds(self, query).await
    }

    async fn trigger_next_due(&self, query: &TriggerNextDue) -> Result<Option<NextDue>> {
        trigger::trigger_next_due(self, query).await
    }

    async fn trigger_commit(&self, c: &TriggerCommit) -> Result<TriggerCommitted> {
        trigger::trigger_commit(self, c).await
    }

    async fn workflow_list_due(&self, q: &TriggerListDue) -> Result<Vec<WorkflowRecord>> {
        workflows::workflow_list_due(self, q).await
    }

    async fn workflow_trigger(&self, t: &sundial_store::WorkflowTrigger) -> Result<u32> {
        workflows::workflow_trigger(self, t).await
    }

    async fn backfill_running(&self, shards: &[u16]) -> Result<Vec<sundial_store::BackfillRecord>> {
        backfills::backfill_running(self, shards).await
    }

    async fn backfill_step(
        &self,
        step: &sundial_store::BackfillStep,
    ) -> Result<sundial_store::BackfillStepped> {
        backfills::backfill_step(self, step).await
    }
}

#[async_trait]
impl WorkerStore for SqliteStore {
    async fn worker_lease_acquire(
        &self,
        worker: &str,
        ttl: sundial_core::Dur,
    ) -> Result<WorkerLease> {
        liveness::worker_lease_acquire(self, worker, ttl).await
    }

    async fn worker_lease_renew(
        &self,
        epoch: i64,
        ttl: sundial_core::Dur,
    ) -> Result<Option<Timestamp>> {
        liveness::worker_lease_renew(self, epoch, ttl).await
    }

    async fn worker_lease_release(&self, epoch: i64) -> Result<()> {
        liveness::worker_lease_release(self, epoch).await
    }

    async fn worker_lease_reap(&self, limit: u32) -> Result<Vec<i64>> {
        liveness::worker_lease_reap(self, limit).await
    }

    async fn execution_claim(&self, claim: &ExecutionClaim) -> Result<Vec<ClaimedExecution>> {
        claim::execution_claim(self, claim).await
    }

    async fn execution_next_due(&self) -> Result<Option<Timestamp>> {
        claim::execution_next_due(self).await
    }

    async fn execution_due_count(
        &self,
        from: Timestamp,
        until: Timestamp,
        cap: u32,
    ) -> Result<u64> {
        claim::execution_due_count(self, from, until, cap).await
    }

    async fn attempt_heartbeat_batch(
        &self,
        attempts: &[AttemptRef],
    ) -> Result<Vec<Option<Timestamp>>> {
        complete::attempt_heartbeat_batch(self, attempts).await
    }

    async fn attempt_complete_batch(&self, completions: &[AttemptComplete]) -> Result<Vec<bool>> {
        complete::attempt_complete_batch(self, completions).await
    }

    async fn attempt_list_lapsed(&self, limit: u32) -> Result<Vec<ClaimedExecution>> {
        complete::attempt_list_lapsed(self, limit).await
    }

    async fn run_expire(&self, limit: u32) -> Result<u32> {
        runs::run_expire(self, limit).await
    }
}

#[async_trait]
impl ApiStore for SqliteStore {
    async fn job_write_batch(&self, writes: &[JobWrite]) -> Result<Vec<JobRecord>> {
        jobs::job_write_batch(self, writes).await
    }

    async fn job_delete(
        &self,
        namespace: &str,
        name: &str,
        expected_version: Option<i64>,
    ) -> Result<()> {
        jobs::job_delete(self, namespace, name, expected_version).await
    }

    async fn execution_insert(&self, e: &NewExecution) -> Result<ExecutionRecord> {
        trigger::execution_insert(self, e).await
    }

    async fn execution_cancel(&self, namespace: &str, id: &str) -> Result<ExecutionRecord> {
        executions::execution_cancel(self, namespace, id).await
    }

    async fn workflow_write_batch(&self, writes: &[WorkflowWrite]) -> Result<Vec<WorkflowRecord>> {
        workflows::workflow_write_batch(self, writes).await
    }

    async fn workflow_delete(
        &self,
        namespace: &str,
        name: &str,
        expected_version: Option<i64>,
    ) -> Result<()> {
        workflows::workflow_delete(self, namespace, name, expected_version).await
    }

    async fn run_create(&self, run: &NewRun) -> Result<RunRecord> {
        runs::run_create(self, run).await
    }

    async fn run_cancel(&self, namespace: &str, id: &str) -> Result<RunRecord> {
        runs::run_cancel(self, namespace, id).await
    }

    async fn run_retry(&self, namespace: &str, id: &str, tasks: &[String]) -> Result<RunRecord> {
        runs::run_retry(self, namespace, id, tasks).await
    }

    async fn execution_redrive(
        &self,
        namespace: &str,
        id: &str,
        extra_attempts: u32,
    ) -> Result<ExecutionRecord> {
        executions::execution_redrive(self, namespace, id, extra_attempts).await
    }

    async fn calendar_put(
        &self,
        namespace: &str,
        name: &str,
        spec: &sundial_core::calendar::CalendarSpec,
    ) -> Result<(sundial_store::CalendarRecord, bool)> {
        calendars::calendar_put(self, namespace, name, spec).await
    }

    async fn calendar_delete(&self, namespace: &str, name: &str) -> Result<()> {
        calendars::calendar_delete(self, namespace, name).await
    }

    async fn backfill_create(
        &self,
        backfill: &sundial_store::NewBackfill,
    ) -> Result<sundial_store::BackfillRecord> {
        backfills::backfill_create(self, backfill).await
    }
}

#[async_trait]
impl MaintenanceStore for SqliteStore {
    fn maintenance(
        &self,
        config: &sundial_store::maintenance::MaintenanceConfig,
    ) -> Vec<Arc<dyn sundial_store::maintenance::Service>> {
        self.checkpointer
            .iter()
            .map(|pool| {
                Arc::new(Checkpoint::new(pool.clone(), config.checkpoint_every))
                    as Arc<dyn sundial_store::maintenance::Service>
            })
            .collect()
    }

    async fn node_heartbeat(
        &self,
        node: &str,
        roles: &[String],
        ttl: sundial_core::Dur,
    ) -> Result<()> {
        nodes::node_heartbeat(self, node, roles, ttl).await
    }

    async fn history_prune(
        &self,
        prune: &sundial_store::HistoryPrune,
    ) -> Result<sundial_store::HistoryPruned> {
        retention::history_prune(self, prune).await
    }

    async fn alert_states_add(&self, states: &[String]) -> Result<()> {
        alerts::alert_states_add(self, states).await
    }

    async fn alert_claim(
        &self,
        limit: u32,
        lease: Duration,
    ) -> Result<Vec<sundial_store::AlertEvent>> {
        alerts::alert_claim(self, limit, lease).await
    }

    async fn alert_settle(
        &self,
        seq: i64,
        round: u32,
        settle: &sundial_store::AlertSettle,
    ) -> Result<bool> {
        alerts::alert_settle(self, seq, round, settle).await
    }
}

type Tx<'a> = sqlx::Transaction<'a, sqlx::Sqlite>;
