//! Sundial's embedded store: SQLite in one file, for one process.
//!
//! Invariants (beyond those of [`sundial_store`]):
//! - One process at most runs the scheduler on a file: the first [`Store::shard_lease_renew`]
//!   takes an exclusive OS lock on `<file>.scheduler.lock`, which the OS drops when the process
//!   dies, so a crashed scheduler's successor starts at once and a second live one is refused
//!   with [`Error::InUse`].
//! - Writes go through one connection (SQLite has one writer anyway), each domain step in one
//!   `BEGIN IMMEDIATE` transaction; reads use a small pool of their own (WAL mode).
//! - Time is the injected [`Clock`]'s: in one process it is the only clock there is.
//! - Instants are stored as INTEGER milliseconds since the Unix epoch, UTC.
//! - The write-ahead log is copied back into the database file by a connection of its own
//!   ([`CHECKPOINT_EVERY`], `PRAGMA wal_checkpoint(PASSIVE)`), beside the writer rather than
//!   inside one of its commits; the writer checkpoints itself only when the log passes
//!   [`WRITER_CHECKPOINT_PAGES`], so the log stays bounded if the background pass falls behind.

#![warn(missing_docs)]

mod rows;
mod values;

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
use sundial_core::execution::{ExecutionState, Trigger};
use sundial_core::job::ConcurrencyPolicy;
use sundial_store::concurrency::{
    ClaimBatch, DEFER_MS, Decision, decide, misfire_runs, refill, whole_tokens,
};
use sundial_store::{
    AttemptComplete, AttemptRef, ClaimedExecution, ClusterStatus, DueJob, Error, ExecutionClaim,
    ExecutionListQuery, ExecutionRecord, JobListQuery, JobRecord, JobWrite, NewExecution,
    PendingExecutions, Result, RunSpec, ShardLease, ShardLeaseRequest, Signals, Store,
    TriggerCommit, TriggerCommitted, TriggerListDue, is_plain_insert,
};

use rows::{db_err, ms, ts};

/// How often the background connection copies the write-ahead log back into the database
/// file (100 ms), with `PRAGMA wal_checkpoint(PASSIVE)`: it copies what no reader still needs
/// and never waits for the writer or the readers (<https://sqlite.org/wal.html#ckpt>).
pub const CHECKPOINT_EVERY: Duration = Duration::from_millis(100);

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

/// The SQLite-backed [`Store`].
#[derive(Debug)]
pub struct SqliteStore {
    writer: SqlitePool,
    /// The background checkpoint task, stopped on drop. None when the URL names no file
    /// (sqlx also names its in-memory databases, which get one that has nothing to do).
    checkpointer: Option<tokio::task::AbortHandle>,
    reader: SqlitePool,
    clock: Arc<dyn Clock>,
    lock_path: Option<PathBuf>,
    scheduler_lock: Mutex<Option<std::fs::File>>,
    instance: String,
    signals: Signals,
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
            Some(tokio::spawn(checkpoint_loop(pool)).abort_handle())
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

impl Drop for SqliteStore {
    fn drop(&mut self) {
        if let Some(task) = &self.checkpointer {
            task.abort();
        }
    }
}

/// Copies committed log frames into the database file every [`CHECKPOINT_EVERY`], without
/// waiting for (or blocking) the writer or the readers (`PASSIVE`), so that the writer's
/// commits seldom do it themselves. A failed pass is logged and the next one tries again.
async fn checkpoint_loop(pool: SqlitePool) {
    loop {
        tokio::time::sleep(CHECKPOINT_EVERY).await;
        if let Err(e) = sqlx::query("PRAGMA wal_checkpoint(PASSIVE)")
            .execute(&pool)
            .await
        {
            tracing::warn!(error = %e, "checkpointing the SQLite log failed");
        }
    }
}

const JOB_COLUMNS: &str = "j.namespace, j.name, j.uid, j.shard, j.version, j.spec, j.created_at, \
    j.updated_at, j.next_slot_at, j.next_fire_at";

/// The job's last execution (the latest slot whose fire time `?1` has reached), read through
/// `executions_job` in slot order; and the fire time of its first execution still waiting.
const LAST_EXECUTION: &str = "(SELECT e.id || '|' || e.state || '|' || e.scheduled_at \
    FROM executions e WHERE e.namespace = j.namespace AND e.job = j.name AND e.job_uid = j.uid \
    AND e.fire_at <= ?1 ORDER BY e.scheduled_at DESC, e.id DESC LIMIT 1) AS last_execution, \
    (SELECT min(e.fire_at) FROM executions e WHERE e.job_uid = j.uid AND e.due_at IS NOT NULL \
    AND e.attempt = 0) AS pending_fire_at";

/// The attempts of execution `?1`: the ended ones from `attempts`, the running one from the
/// execution row (its `attempts` row is written when it ends).
const ATTEMPTS_OF_EXECUTION: &str = "SELECT attempt, worker, started_at, finished_at, outcome, \
    status_code, error, detail FROM attempts WHERE execution_id = ?1 \
    UNION ALL \
    SELECT e.attempt, coalesce(e.worker, ''), coalesce(e.attempt_started_at, e.started_at), \
      NULL, NULL, NULL, NULL, NULL \
    FROM executions e WHERE e.id = ?1 AND e.state = 'running' \
      AND NOT EXISTS (SELECT 1 FROM attempts a WHERE a.execution_id = e.id AND a.attempt = e.attempt) \
    ORDER BY attempt";

/// Records the running attempt of execution `?1` (if any) as ended `cancelled` at `?2`.
const CLOSE_RUNNING_ATTEMPT_CANCELLED: &str = "INSERT INTO attempts (execution_id, attempt, worker, \
    started_at, finished_at, outcome) \
    SELECT id, attempt, coalesce(worker, ''), coalesce(attempt_started_at, started_at, ?2), ?2, 'cancelled' \
    FROM executions WHERE id = ?1 AND state = 'running' \
    ON CONFLICT (execution_id, attempt) DO UPDATE SET finished_at = excluded.finished_at, \
      outcome = excluded.outcome WHERE attempts.finished_at IS NULL";

const EXECUTION_COLUMNS: &str = "id, namespace, job, job_version, trigger, scheduled_at, fire_at, \
    queued_at, started_at, finished_at, state, attempt, max_attempts, due_at, worker";

const CLAIMED_COLUMNS: &str = "id, namespace, job, attempt, max_attempts, scheduled_at, fire_at, \
    started_at, lease_expires_at, run";

/// [`CLAIMED_COLUMNS`] but the run definition, which the claim already read.
const CLAIM_RETURNING: &str = "id, namespace, job, attempt, max_attempts, scheduled_at, fire_at, \
    started_at, lease_expires_at";

#[async_trait]
impl Store for SqliteStore {
    async fn now(&self) -> Result<Timestamp> {
        Ok(self.clock.now())
    }

    fn signals(&self) -> Signals {
        self.signals.clone()
    }

    async fn node_heartbeat(
        &self,
        node: &str,
        roles: &[String],
        ttl: sundial_core::Dur,
    ) -> Result<()> {
        let now = ms(self.clock.now());
        let done = sqlx::query(
            "INSERT INTO nodes (id, instance, roles, started_at, heartbeat_at, expires_at) VALUES (?1, ?2, ?3, ?4, ?4, ?4 + ?5) \
             ON CONFLICT (id) DO UPDATE SET instance = excluded.instance, roles = excluded.roles, \
               heartbeat_at = excluded.heartbeat_at, expires_at = excluded.expires_at, \
               started_at = CASE WHEN nodes.instance = excluded.instance THEN nodes.started_at ELSE excluded.started_at END \
             WHERE nodes.instance = excluded.instance OR nodes.expires_at <= ?4",
        )
        .bind(node)
        .bind(&self.instance)
        .bind(roles.join(","))
        .bind(now)
        .bind(ttl.as_millis_i64())
        .execute(&self.writer)
        .await
        .map_err(db_err)?;
        if done.rows_affected() == 0 {
            return Err(Error::Conflict(format!(
                "node id '{node}' is held by another live process; give each process its own --node-id"
            )));
        }
        Ok(())
    }

    async fn cluster_status(&self) -> Result<ClusterStatus> {
        let now = ms(self.clock.now());
        let nodes = sqlx::query(
            "SELECT n.id, n.roles, n.started_at, n.heartbeat_at, n.expires_at, \
               (SELECT count(*) FROM shard_leases s WHERE s.owner = n.id || '/' || n.instance AND s.expires_at > ?1) AS shards \
             FROM nodes n WHERE n.expires_at > ?1 - 60000 ORDER BY n.id",
        )
        .bind(now)
        .fetch_all(&self.reader)
        .await
        .map_err(db_err)?;
        let nodes = nodes
            .iter()
            .map(|r| rows::node(r, now))
            .collect::<Result<Vec<_>>>()?;
        let row = sqlx::query(
            "SELECT coalesce(sum(due_at <= ?1), 0) AS queued, coalesce(sum(due_at > ?1), 0) AS scheduled, \
             (SELECT count(*) FROM executions WHERE state = 'running') AS running \
             FROM executions WHERE due_at IS NOT NULL",
        )
        .bind(now)
        .fetch_one(&self.reader)
        .await
        .map_err(db_err)?;
        let n = |col: &str| -> Result<u64> {
            Ok(u64::try_from(row.try_get::<i64, _>(col).map_err(db_err)?).unwrap_or(0))
        };
        Ok(ClusterStatus {
            now: ts(now)?,
            nodes,
            queued: n("queued")?,
            scheduled: n("scheduled")?,
            running: n("running")?,
        })
    }

    async fn job_get(&self, namespace: &str, name: &str) -> Result<Option<JobRecord>> {
        let sql = format!(
            "SELECT {JOB_COLUMNS}, {LAST_EXECUTION} FROM jobs j WHERE j.namespace = ?2 AND j.name = ?3"
        );
        let row = sqlx::query(&sql)
            .bind(ms(self.clock.now()))
            .bind(namespace)
            .bind(name)
            .fetch_optional(&self.reader)
            .await
            .map_err(db_err)?;
        row.map(|r| rows::job(&r)).transpose()
    }

    async fn job_get_many(&self, namespace: &str, names: &[String]) -> Result<Vec<JobRecord>> {
        let sql = format!(
            "SELECT {JOB_COLUMNS}, {LAST_EXECUTION} FROM jobs j WHERE j.namespace = ?2 \
             AND j.name IN (SELECT value FROM json_each(?3))"
        );
        let names = serde_json::to_string(names).map_err(|e| Error::Corrupt(e.to_string()))?;
        let rows = sqlx::query(&sql)
            .bind(ms(self.clock.now()))
            .bind(namespace)
            .bind(names)
            .fetch_all(&self.reader)
            .await
            .map_err(db_err)?;
        rows.iter().map(rows::job).collect()
    }

    async fn job_list(&self, q: &JobListQuery) -> Result<Vec<JobRecord>> {
        let mut sql = format!(
            "SELECT {JOB_COLUMNS}, {LAST_EXECUTION} FROM jobs j WHERE j.namespace = ?2 AND j.name > ?3"
        );
        if let Some(p) = q.paused {
            sql.push_str(if p {
                " AND j.paused = 1"
            } else {
                " AND j.paused = 0"
            });
        }
        if q.label.is_some() {
            sql.push_str(" AND json_extract(j.spec, '$.labels.' || json_quote(?5)) = ?6");
        }
        sql.push_str(" ORDER BY j.name LIMIT ?4");
        let (key, value) = q.label.clone().unwrap_or_default();
        let rows = sqlx::query(&sql)
            .bind(ms(self.clock.now()))
            .bind(&q.namespace)
            .bind(q.after_name.as_deref().unwrap_or(""))
            .bind(i64::from(q.limit))
            .bind(key)
            .bind(value)
            .fetch_all(&self.reader)
            .await
            .map_err(db_err)?;
        rows.iter().map(rows::job).collect()
    }

    async fn job_write_batch(&self, writes: &[JobWrite]) -> Result<Vec<JobRecord>> {
        let now = self.clock.now();
        let mut tx = self.begin().await?;
        let written = if writes.iter().all(is_plain_insert) {
            insert_jobs(&mut tx, writes, now).await?
        } else {
            let mut written = Vec::with_capacity(writes.len());
            for w in writes {
                written.push(write_job(&mut tx, w, now).await?);
            }
            written
        };
        tx.commit().await.map_err(db_err)?;
        Ok(written)
    }

    async fn job_delete(
        &self,
        namespace: &str,
        name: &str,
        expected_version: Option<i64>,
    ) -> Result<()> {
        let now = self.clock.now();
        let mut tx = self.begin().await?;
        let row = sqlx::query(
            "DELETE FROM jobs WHERE namespace = ?1 AND name = ?2 AND (?3 IS NULL OR version = ?3) \
             RETURNING uid",
        )
        .bind(namespace)
        .bind(name)
        .bind(expected_version)
        .fetch_optional(&mut *tx)
        .await
        .map_err(db_err)?;
        let Some(row) = row else {
            return Err(
                version_mismatch(&mut tx, namespace, name, expected_version.unwrap_or(0)).await,
            );
        };
        let uid: String = row.try_get("uid").map_err(db_err)?;
        cancel_pending(&mut tx, &uid, now).await?;
        tx.commit().await.map_err(db_err)
    }

    async fn shard_lease_renew(&self, request: &ShardLeaseRequest) -> Result<Vec<ShardLease>> {
        self.take_scheduler_lock()?;
        let now = self.clock.now();
        let expires = now + request.ttl.as_signed();
        // The OS lock proves any other owner dead: take every shard, bumping the epoch when the
        // owner (this process instance) changes.
        let owner = format!("{}/{}", request.node, self.instance);
        let mut tx = self.begin().await?;
        let rows = sqlx::query(
            "WITH RECURSIVE s(n) AS (SELECT 0 UNION ALL SELECT n + 1 FROM s WHERE n + 1 < ?1) \
             INSERT INTO shard_leases (shard, owner, epoch, expires_at) SELECT n, ?2, 1, ?3 FROM s WHERE true \
             ON CONFLICT (shard) DO UPDATE SET \
               epoch = CASE WHEN owner = excluded.owner THEN epoch ELSE epoch + 1 END, \
               owner = excluded.owner, expires_at = excluded.expires_at \
             RETURNING shard, epoch, expires_at",
        )
        .bind(i64::from(SHARD_COUNT))
        .bind(&owner)
        .bind(ms(expires))
        .fetch_all(&mut *tx)
        .await
        .map_err(db_err)?;
        tx.commit().await.map_err(db_err)?;
        rows.iter().map(rows::shard_lease).collect()
    }

    async fn shard_lease_release(&self, node: &str) -> Result<()> {
        let owner = format!("{node}/{}", self.instance);
        sqlx::query("UPDATE shard_leases SET expires_at = 0 WHERE owner = ?1")
            .bind(owner)
            .execute(&self.writer)
            .await
            .map_err(db_err)?;
        *self
            .scheduler_lock
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = None;
        Ok(())
    }

    async fn trigger_list_due(&self, q: &TriggerListDue) -> Result<Vec<DueJob>> {
        let shard_filter = if q.shards.len() >= usize::from(SHARD_COUNT) {
            String::new()
        } else if q.shards.is_empty() {
            return Ok(Vec::new());
        } else {
            let list: Vec<String> = q.shards.iter().map(u16::to_string).collect();
            format!(" AND shard IN ({})", list.join(","))
        };
        let sql = format!(
            "SELECT uid, shard, version, spec, next_slot_at FROM jobs \
             WHERE next_fire_at <= ?1{shard_filter} ORDER BY next_fire_at LIMIT ?2"
        );
        let rows = sqlx::query(&sql)
            .bind(ms(q.horizon))
            .bind(i64::from(q.limit))
            .fetch_all(&self.reader)
            .await
            .map_err(db_err)?;
        rows.iter().map(rows::due_job).collect()
    }

    async fn trigger_commit(&self, c: &TriggerCommit) -> Result<TriggerCommitted> {
        let now = self.clock.now();
        let owner_prefix = format!("{}/{}", c.node, self.instance);
        let mut tx = self.begin().await?;
        // Fencing: every shard the batch touches must still be ours with the epoch we read.
        let held =
            sqlx::query("SELECT shard, epoch, expires_at FROM shard_leases WHERE owner = ?1")
                .bind(&owner_prefix)
                .fetch_all(&mut *tx)
                .await
                .map_err(db_err)?;
        let held: Vec<ShardLease> = held.iter().map(rows::shard_lease).collect::<Result<_>>()?;
        for job in &c.jobs {
            let read = c.leases.iter().find(|l| l.shard == job.shard);
            let current = held.iter().find(|l| l.shard == job.shard);
            let valid = matches!((read, current), (Some(r), Some(h)) if r.epoch == h.epoch && h.expires_at > now);
            if !valid {
                return Err(Error::StaleFence(format!(
                    "shard {} is no longer leased to {} with the epoch read",
                    job.shard, c.node
                )));
            }
        }
        // Every job of the batch advances conditionally on the version and slot it read, a
        // few statements whatever the batch's size; the jobs that advanced get their
        // executions.
        let mut advanced = Vec::with_capacity(c.jobs.len());
        for part in values::chunks(&c.jobs) {
            let sql = format!(
                "UPDATE jobs SET next_slot_at = j.column4, next_fire_at = j.column5 \
                 FROM (VALUES {}) AS j \
                 WHERE jobs.uid = j.column1 AND jobs.version = j.column2 \
                   AND jobs.next_slot_at = j.column3 \
                 RETURNING jobs.uid",
                values::values_list(part.len(), 5)
            );
            let mut q = sqlx::query_scalar::<_, String>(&sql);
            for job in part {
                q = q
                    .bind(&job.uid)
                    .bind(job.version)
                    .bind(ms(job.expected_next_slot))
                    .bind(job.next_slot_at.map(ms))
                    .bind(job.next_fire_at.map(ms));
            }
            advanced.extend(q.fetch_all(&mut *tx).await.map_err(db_err)?);
        }
        let advanced: std::collections::HashSet<String> = advanced.into_iter().collect();
        let mut done = TriggerCommitted {
            jobs_advanced: u32::try_from(advanced.len()).unwrap_or(u32::MAX),
            jobs_changed: u32::try_from(c.jobs.len() - advanced.len()).unwrap_or(u32::MAX),
            ..TriggerCommitted::default()
        };
        let executions: Vec<&NewExecution> = c
            .jobs
            .iter()
            .filter(|job| advanced.contains(&job.uid))
            .flat_map(|job| &job.executions)
            .collect();
        done.executions_inserted =
            insert_executions(&mut tx, &executions, now, Some(&c.node)).await?;
        tx.commit().await.map_err(db_err)?;
        Ok(done)
    }

    async fn execution_insert(&self, e: &NewExecution) -> Result<ExecutionRecord> {
        let now = self.clock.now();
        let mut tx = self.begin().await?;
        insert_executions(&mut tx, &[e], now, None).await?;
        tx.commit().await.map_err(db_err)?;
        self.execution_get(&e.namespace, &e.id)
            .await?
            .ok_or_else(|| Error::NotFound(format!("execution {}", e.id)))
    }

    async fn execution_claim(&self, claim: &ExecutionClaim) -> Result<Vec<ClaimedExecution>> {
        let now = ms(self.clock.now());
        let mut tx = self.begin().await?;
        // Token buckets of the rate-limited namespaces, refilled to now.
        let mut buckets = Vec::with_capacity(claim.rate_limits.len());
        for (ns, rate) in &claim.rate_limits {
            let row: Option<(f64, i64)> = sqlx::query_as(
                "SELECT tokens, updated_at FROM namespace_rates WHERE namespace = ?1",
            )
            .bind(ns)
            .fetch_optional(&mut *tx)
            .await
            .map_err(db_err)?;
            buckets.push((ns.clone(), refill(row, *rate, now)));
        }
        let limited: Vec<&str> = claim.rate_limits.keys().map(String::as_str).collect();
        let limited = serde_json::to_string(&limited).map_err(|e| Error::Corrupt(e.to_string()))?;
        let mut due = sqlx::query(
            "SELECT id, job_uid, trigger, run, due_at, fire_at, attempt FROM executions WHERE due_at <= ?1 \
             AND namespace NOT IN (SELECT value FROM json_each(?3)) ORDER BY due_at LIMIT ?2",
        )
        .bind(now)
        .bind(i64::from(claim.limit))
        .bind(limited)
        .fetch_all(&mut *tx)
        .await
        .map_err(db_err)?;
        for (ns, tokens) in &buckets {
            let allowance = whole_tokens(*tokens).min(i64::from(claim.limit));
            if allowance > 0 {
                due.extend(
                    sqlx::query(
                        "SELECT id, job_uid, trigger, run, due_at, fire_at, attempt FROM executions \
                         WHERE namespace = ?1 AND due_at <= ?2 ORDER BY due_at LIMIT ?3",
                    )
                    .bind(ns)
                    .bind(now)
                    .bind(allowance)
                    .fetch_all(&mut *tx)
                    .await
                    .map_err(db_err)?,
                );
            }
        }
        if !buckets.is_empty() {
            due.sort_by_key(|r| r.try_get::<i64, _>("due_at").unwrap_or(i64::MAX));
            due.truncate(usize::try_from(claim.limit).unwrap_or(usize::MAX));
        }
        // The executions to hand out, in due order, and those this claim cancelled.
        let mut batch = ClaimBatch::default();
        let mut stopped = Vec::new();
        for row in &due {
            let (id, uid, trigger, run) = rows::due_execution(row)?;
            if batch.cancelled_here(&id) {
                continue;
            }
            if !late_slot_runs(&mut tx, row, &id, &uid, trigger, &run, now).await? {
                continue;
            }
            if run.concurrency_policy == ConcurrencyPolicy::Allow {
                batch.choose(id, uid, run);
                continue;
            }
            let active: Vec<(String, String)> = sqlx::query_as(
                "SELECT id, state FROM executions WHERE job_uid = ?1 AND state = 'running' AND id != ?2 \
                 UNION ALL \
                 SELECT id, state FROM executions WHERE job_uid = ?1 AND due_at IS NOT NULL \
                   AND state = 'retry_wait' AND id != ?2",
            )
            .bind(&uid)
            .bind(&id)
            .fetch_all(&mut *tx)
            .await
            .map_err(db_err)?;
            let batch_mate = batch.has_mate(&uid);
            match decide(
                run.concurrency_policy,
                trigger,
                batch_mate || !active.is_empty(),
            ) {
                Decision::Run => {}
                Decision::Skip => {
                    sqlx::query("UPDATE executions SET state = 'skipped', due_at = NULL, finished_at = ?2 WHERE id = ?1")
                        .bind(&id)
                        .bind(now)
                        .execute(&mut *tx)
                        .await
                        .map_err(db_err)?;
                    continue;
                }
                Decision::Defer => {
                    sqlx::query("UPDATE executions SET due_at = ?2 WHERE id = ?1")
                        .bind(&id)
                        .bind(now + DEFER_MS)
                        .execute(&mut *tx)
                        .await
                        .map_err(db_err)?;
                    continue;
                }
                Decision::Replace => {
                    for (other, state) in &active {
                        cancel_in_tx(&mut tx, other, now).await?;
                        batch.record_cancel(other);
                        if state == "running" {
                            stopped.push(other.clone());
                        }
                    }
                    for mate in batch.take_mates(&uid) {
                        cancel_in_tx(&mut tx, &mate, now).await?;
                    }
                }
            }
            batch.choose(id, uid, run);
        }
        let ids = batch.ids();
        let ids = serde_json::to_string(&ids).map_err(|e| Error::Corrupt(e.to_string()))?;
        let sql = format!(
            "UPDATE executions SET state = 'running', attempt = attempt + 1, worker = ?1, \
               started_at = coalesce(started_at, ?2), attempt_started_at = ?2, \
               lease_expires_at = ?2 + lease_ms, due_at = NULL \
             WHERE id IN (SELECT value FROM json_each(?3)) \
               AND state IN ('scheduled', 'queued', 'retry_wait') \
             RETURNING {CLAIM_RETURNING}"
        );
        let rows = sqlx::query(&sql)
            .bind(&claim.worker)
            .bind(now)
            .bind(ids)
            .fetch_all(&mut *tx)
            .await
            .map_err(db_err)?;
        let mut runs = batch.into_runs();
        let mut claimed: Vec<ClaimedExecution> = rows
            .iter()
            .map(|r| {
                let id: String = r.try_get("id").map_err(db_err)?;
                let run = runs.remove(&id).ok_or_else(|| {
                    Error::Corrupt(format!("claimed execution {id} was not among those read"))
                })?;
                rows::claimed_with(r, run)
            })
            .collect::<Result<_>>()?;
        let started_at = ts(now)?;
        for c in &mut claimed {
            c.started_at = started_at;
        }
        for (ns, tokens) in &buckets {
            let spent = claimed.iter().filter(|c| c.namespace == *ns).count() as f64;
            sqlx::query(
                "INSERT INTO namespace_rates (namespace, tokens, updated_at) VALUES (?1, ?2, ?3) \
                 ON CONFLICT (namespace) DO UPDATE SET tokens = excluded.tokens, updated_at = excluded.updated_at",
            )
            .bind(ns)
            .bind(tokens - spent)
            .bind(now)
            .execute(&mut *tx)
            .await
            .map_err(db_err)?;
        }
        tx.commit().await.map_err(db_err)?;
        for id in stopped {
            let _ = self.signals.cancelled.send(id);
        }
        claimed.sort_by_key(|c| c.fire_at);
        Ok(claimed)
    }

    async fn execution_next_due(&self) -> Result<Option<Timestamp>> {
        let row = sqlx::query("SELECT min(due_at) AS due FROM executions WHERE due_at IS NOT NULL")
            .fetch_one(&self.reader)
            .await
            .map_err(db_err)?;
        let due: Option<i64> = row.try_get("due").map_err(db_err)?;
        due.map(ts).transpose()
    }

    async fn attempt_heartbeat(&self, a: &AttemptRef) -> Result<Timestamp> {
        let now = ms(self.clock.now());
        let row = sqlx::query(
            "UPDATE executions SET lease_expires_at = ?3 + lease_ms \
             WHERE id = ?1 AND attempt = ?2 AND state = 'running' AND lease_expires_at >= ?3 \
             RETURNING lease_expires_at",
        )
        .bind(&a.id)
        .bind(i64::from(a.attempt))
        .bind(now)
        .fetch_optional(&self.writer)
        .await
        .map_err(db_err)?;
        match row {
            Some(r) => ts(r.try_get("lease_expires_at").map_err(db_err)?),
            None => Err(stale_attempt(a)),
        }
    }

    async fn attempt_complete_batch(&self, completions: &[AttemptComplete]) -> Result<Vec<bool>> {
        let now = ms(self.clock.now());
        let mut tx = self.begin().await?;
        let applied = complete_all_in_tx(&mut tx, completions, now).await?;
        tx.commit().await.map_err(db_err)?;
        Ok(applied)
    }

    async fn attempt_list_lapsed(&self, limit: u32) -> Result<Vec<ClaimedExecution>> {
        let sql = format!(
            "SELECT {CLAIMED_COLUMNS} FROM executions WHERE state = 'running' AND lease_expires_at < ?1 \
             ORDER BY lease_expires_at LIMIT ?2"
        );
        let rows = sqlx::query(&sql)
            .bind(ms(self.clock.now()))
            .bind(i64::from(limit))
            .fetch_all(&self.reader)
            .await
            .map_err(db_err)?;
        rows.iter().map(rows::claimed).collect()
    }

    async fn execution_get(&self, namespace: &str, id: &str) -> Result<Option<ExecutionRecord>> {
        let sql =
            format!("SELECT {EXECUTION_COLUMNS} FROM executions WHERE id = ?1 AND namespace = ?2");
        let Some(row) = sqlx::query(&sql)
            .bind(id)
            .bind(namespace)
            .fetch_optional(&self.reader)
            .await
            .map_err(db_err)?
        else {
            return Ok(None);
        };
        let mut record = rows::execution(&row)?;
        let attempts = sqlx::query(ATTEMPTS_OF_EXECUTION)
            .bind(id)
            .fetch_all(&self.reader)
            .await
            .map_err(db_err)?;
        record.attempts = attempts.iter().map(rows::attempt).collect::<Result<_>>()?;
        Ok(Some(record))
    }

    async fn execution_list(&self, q: &ExecutionListQuery) -> Result<Vec<ExecutionRecord>> {
        let mut sql = format!("SELECT {EXECUTION_COLUMNS} FROM executions WHERE namespace = ?1");
        if q.job.is_some() {
            sql.push_str(" AND job = ?2");
        }
        match q.state {
            Some(ExecutionState::Queued) => {
                sql.push_str(" AND state IN ('scheduled', 'queued') AND fire_at <= ?3")
            }
            Some(ExecutionState::Scheduled) => {
                sql.push_str(" AND state = 'scheduled' AND fire_at > ?3")
            }
            Some(_) => sql.push_str(" AND state = ?4"),
            None => {}
        }
        if q.before.is_some() {
            sql.push_str(" AND (scheduled_at < ?5 OR (scheduled_at = ?5 AND id < ?6))");
        }
        sql.push_str(" ORDER BY scheduled_at DESC, id DESC LIMIT ?7");
        let (before_at, before_id) = q
            .before
            .clone()
            .map_or((0, String::new()), |(t, id)| (ms(t), id));
        let rows = sqlx::query(&sql)
            .bind(&q.namespace)
            .bind(q.job.as_deref())
            .bind(ms(self.clock.now()))
            .bind(q.state.map(ExecutionState::as_str))
            .bind(before_at)
            .bind(before_id)
            .bind(i64::from(q.limit))
            .fetch_all(&self.reader)
            .await
            .map_err(db_err)?;
        rows.iter().map(rows::execution).collect()
    }

    async fn execution_cancel(&self, namespace: &str, id: &str) -> Result<ExecutionRecord> {
        let now = ms(self.clock.now());
        let mut tx = self.begin().await?;
        let row =
            sqlx::query("SELECT state, attempt FROM executions WHERE id = ?1 AND namespace = ?2")
                .bind(id)
                .bind(namespace)
                .fetch_optional(&mut *tx)
                .await
                .map_err(db_err)?
                .ok_or_else(|| Error::NotFound(format!("execution {id}")))?;
        let state: ExecutionState =
            rows::parse(row.try_get::<String, _>("state").map_err(db_err)?)?;
        if state.is_terminal() {
            return Err(Error::Conflict(format!(
                "execution {id} is already {state}"
            )));
        }
        cancel_in_tx(&mut tx, id, now).await?;
        tx.commit().await.map_err(db_err)?;
        if state == ExecutionState::Running {
            let _ = self.signals.cancelled.send(id.to_owned());
        }
        self.execution_get(namespace, id)
            .await?
            .ok_or_else(|| Error::NotFound(format!("execution {id}")))
    }

    async fn execution_redrive(
        &self,
        namespace: &str,
        id: &str,
        extra_attempts: u32,
    ) -> Result<ExecutionRecord> {
        let now = ms(self.clock.now());
        let mut tx = self.begin().await?;
        let updated = sqlx::query(
            "UPDATE executions SET state = 'queued', due_at = ?3, queued_at = ?3, finished_at = NULL, \
             max_attempts = attempt + ?4 WHERE id = ?1 AND namespace = ?2 AND state IN ('dead', 'failed')",
        )
        .bind(id)
        .bind(namespace)
        .bind(now)
        .bind(i64::from(extra_attempts))
        .execute(&mut *tx)
        .await
        .map_err(db_err)?;
        if updated.rows_affected() == 0 {
            let state: Option<String> =
                sqlx::query_scalar("SELECT state FROM executions WHERE id = ?1 AND namespace = ?2")
                    .bind(id)
                    .bind(namespace)
                    .fetch_optional(&mut *tx)
                    .await
                    .map_err(db_err)?;
            return Err(match state {
                None => Error::NotFound(format!("execution {id}")),
                Some(s) => Error::Conflict(format!(
                    "execution {id} is {s}; only dead or failed executions can be re-driven"
                )),
            });
        }
        tx.commit().await.map_err(db_err)?;
        self.execution_get(namespace, id)
            .await?
            .ok_or_else(|| Error::NotFound(format!("execution {id}")))
    }
}

type Tx<'a> = sqlx::Transaction<'a, sqlx::Sqlite>;

async fn insert_executions(
    tx: &mut Tx<'_>,
    executions: &[&NewExecution],
    now: Timestamp,
    node: Option<&str>,
) -> Result<u32> {
    let mut rows = Vec::with_capacity(executions.len());
    for e in executions {
        let run = serde_json::to_string(&e.run).map_err(|err| Error::Corrupt(err.to_string()))?;
        rows.push((*e, run));
    }
    let mut inserted = 0;
    for part in values::chunks(&rows) {
        let sql = format!(
            "INSERT INTO executions (id, namespace, job, job_uid, job_version, shard, trigger, \
             scheduled_at, fire_at, queued_at, due_at, finished_at, state, max_attempts, lease_ms, \
             run, triggered_by, created_at) VALUES {} ON CONFLICT DO NOTHING",
            values::values_list(part.len(), 18)
        );
        let mut q = sqlx::query(&sql);
        for (e, run) in part {
            let waiting = !e.state.is_terminal();
            q = q
                .bind(&e.id)
                .bind(&e.namespace)
                .bind(&e.job)
                .bind(&e.job_uid)
                .bind(e.job_version)
                .bind(i64::from(e.shard))
                .bind(e.trigger.as_str())
                .bind(ms(e.scheduled_at))
                .bind(ms(e.fire_at))
                .bind(ms(e.fire_at))
                .bind(waiting.then(|| ms(e.fire_at)))
                .bind((!waiting).then(|| ms(now)))
                .bind(e.state.as_str())
                .bind(i64::from(e.run.retry.max_attempts))
                .bind(e.run.heartbeat_timeout.as_millis_i64())
                .bind(run)
                .bind(node)
                .bind(ms(now));
        }
        let done = q.execute(&mut **tx).await.map_err(db_err)?;
        inserted += done.rows_affected();
    }
    Ok(u32::try_from(inserted).unwrap_or(u32::MAX))
}

/// Inserts new jobs in one statement, as [`write_job`] would one by one;
/// [`Error::Conflict`] naming the first that already exists (the caller's transaction is then
/// dropped, so nothing is written).
async fn insert_jobs(
    tx: &mut Tx<'_>,
    writes: &[JobWrite],
    now: Timestamp,
) -> Result<Vec<JobRecord>> {
    let mut rows = Vec::with_capacity(writes.len());
    for w in writes {
        let r = &w.record;
        let spec = serde_json::to_string(&r.spec).map_err(|e| Error::Corrupt(e.to_string()))?;
        rows.push(serde_json::json!([
            r.spec.namespace,
            r.spec.name,
            r.uid,
            r.shard,
            spec,
            r.spec.paused,
            r.next_slot_at.map(ms),
            r.next_fire_at.map(ms)
        ]));
    }
    // `WHERE true` keeps SQLite from reading `ON CONFLICT` as part of the SELECT's join.
    let inserted: Vec<(String, String)> = sqlx::query_as(
        "INSERT INTO jobs (namespace, name, uid, shard, version, spec, paused, created_at, updated_at, \
           next_slot_at, next_fire_at) \
         SELECT j.value ->> 0, j.value ->> 1, j.value ->> 2, j.value ->> 3, 1, j.value ->> 4, \
           j.value ->> 5, ?2, ?2, j.value ->> 6, j.value ->> 7 \
         FROM json_each(?1) AS j WHERE true \
         ON CONFLICT (namespace, name) DO NOTHING RETURNING namespace, name",
    )
    .bind(serde_json::Value::Array(rows).to_string())
    .bind(ms(now))
    .fetch_all(&mut **tx)
    .await
    .map_err(db_err)?;
    sundial_store::inserted_jobs(writes, inserted, now)
}

/// Writes one job inside `tx` (see [`Store::job_write_batch`]).
async fn write_job(tx: &mut Tx<'_>, w: &JobWrite, now: Timestamp) -> Result<JobRecord> {
    let r = &w.record;
    let spec = serde_json::to_string(&r.spec).map_err(|e| Error::Corrupt(e.to_string()))?;
    let version = match w.expected_version {
        None => {
            insert_jobs(tx, std::slice::from_ref(w), now).await?;
            1
        }
        Some(expected) => {
            let updated = sqlx::query(
                "UPDATE jobs SET version = version + 1, spec = ?4, paused = ?5, updated_at = ?6, \
                 next_slot_at = ?7, next_fire_at = ?8 \
                 WHERE namespace = ?1 AND name = ?2 AND version = ?3",
            )
            .bind(&r.spec.namespace)
            .bind(&r.spec.name)
            .bind(expected)
            .bind(&spec)
            .bind(r.spec.paused)
            .bind(ms(now))
            .bind(r.next_slot_at.map(ms))
            .bind(r.next_fire_at.map(ms))
            .execute(&mut **tx)
            .await
            .map_err(db_err)?;
            if updated.rows_affected() == 0 {
                return Err(version_mismatch(tx, &r.spec.namespace, &r.spec.name, expected).await);
            }
            expected + 1
        }
    };
    match w.pending {
        PendingExecutions::Keep => {}
        PendingExecutions::Cancel => cancel_pending(tx, &r.uid, now).await?,
        PendingExecutions::Update => {
            let run = serde_json::to_string(&RunSpec::of(&r.spec))
                .map_err(|e| Error::Corrupt(e.to_string()))?;
            sqlx::query(
                "UPDATE executions SET run = ?2, job_version = ?3, max_attempts = ?4, lease_ms = ?5 \
                 WHERE job_uid = ?1 AND due_at IS NOT NULL AND attempt = 0",
            )
            .bind(&r.uid)
            .bind(run)
            .bind(version)
            .bind(i64::from(r.spec.retry.max_attempts))
            .bind(r.spec.heartbeat_timeout.as_millis_i64())
            .execute(&mut **tx)
            .await
            .map_err(db_err)?;
        }
    }
    Ok(JobRecord {
        version,
        created_at: if w.expected_version.is_none() {
            now
        } else {
            r.created_at
        },
        updated_at: now,
        ..r.clone()
    })
}

/// Applies the misfire policy to a never-started execution of a scheduled slot claimed later
/// than its job's threshold ([`misfire_runs`]): records it `missed` and returns false, or
/// marks it `misfire` when it runs for its episode and returns true.
async fn late_slot_runs(
    tx: &mut Tx<'_>,
    row: &sqlx::sqlite::SqliteRow,
    id: &str,
    uid: &str,
    trigger: Trigger,
    run: &RunSpec,
    now: i64,
) -> Result<bool> {
    let fire_at: i64 = row.try_get("fire_at").map_err(db_err)?;
    let attempt: i64 = row.try_get("attempt").map_err(db_err)?;
    let late_ms = now - fire_at;
    let threshold_ms = run.misfire_threshold.as_millis_i64();
    if trigger != Trigger::Schedule || attempt > 0 || run.one_off || late_ms <= threshold_ms {
        return Ok(true);
    }
    // A later slot is due when a later execution of the job waits, or when the job's next
    // slot (not triggered yet) has come due: the scheduler will trigger it, as the run of
    // its own misfire episode if it is late too, so this one must not run as well.
    let later_due: bool = sqlx::query_scalar(
        "SELECT EXISTS (SELECT 1 FROM executions WHERE job_uid = ?1 AND due_at IS NOT NULL AND due_at <= ?3 \
         AND attempt = 0 AND fire_at > ?2) \
         OR EXISTS (SELECT 1 FROM jobs WHERE uid = ?1 AND next_fire_at <= ?3)",
    )
    .bind(uid)
    .bind(fire_at)
    .bind(now)
    .fetch_one(&mut **tx)
    .await
    .map_err(db_err)?;
    let runs = misfire_runs(run.misfire_policy, threshold_ms, late_ms, later_due);
    let sql = if runs {
        "UPDATE executions SET trigger = 'misfire' WHERE id = ?1"
    } else {
        "UPDATE executions SET state = 'missed', trigger = 'misfire', due_at = NULL, finished_at = ?2 WHERE id = ?1"
    };
    sqlx::query(sql)
        .bind(id)
        .bind(now)
        .execute(&mut **tx)
        .await
        .map_err(db_err)?;
    Ok(runs)
}

/// Applies fenced completions inside `tx`, two statements whatever their number; per
/// completion, false when stale (nothing changed for it).
async fn complete_all_in_tx(
    tx: &mut Tx<'_>,
    completions: &[AttemptComplete],
    now: i64,
) -> Result<Vec<bool>> {
    if completions.is_empty() {
        return Ok(Vec::new());
    }
    let mut updated: Vec<(String, i64, Option<String>, Option<i64>)> =
        Vec::with_capacity(completions.len());
    for part in values::chunks(completions) {
        let sql = format!(
            "UPDATE executions SET state = c.column3, due_at = c.column4, \
               finished_at = c.column5, lease_expires_at = NULL \
             FROM (VALUES {}) AS c \
             WHERE executions.id = c.column1 AND executions.attempt = c.column2 \
               AND executions.state = 'running' \
               AND (c.column6 = 0 OR executions.lease_expires_at < c.column7) \
             RETURNING executions.id, executions.attempt, executions.worker, \
               executions.attempt_started_at",
            values::values_list(part.len(), 7)
        );
        let mut q = sqlx::query_as(&sql);
        for c in part {
            let (state, retry_at) = c.next.state();
            let due_at = retry_at.map(ms);
            let finished_at = due_at.is_none().then_some(now);
            q = q
                .bind(&c.attempt.id)
                .bind(i64::from(c.attempt.attempt))
                .bind(state.as_str())
                .bind(due_at)
                .bind(finished_at)
                .bind(i64::from(c.only_if_lapsed))
                .bind(now);
        }
        updated.extend(q.fetch_all(&mut **tx).await.map_err(db_err)?);
    }
    // The attempt's row is written now, once, with what the execution row held of it.
    let updated: std::collections::HashMap<(String, i64), (Option<String>, Option<i64>)> = updated
        .into_iter()
        .map(|(id, attempt, worker, started)| ((id, attempt), (worker, started)))
        .collect();
    let mut applied = Vec::with_capacity(completions.len());
    let mut attempts = Vec::with_capacity(updated.len());
    for c in completions {
        let key = (c.attempt.id.clone(), i64::from(c.attempt.attempt));
        let ended = updated.get(&key);
        applied.push(ended.is_some());
        if let Some((worker, started)) = ended {
            attempts.push((c, worker.as_deref().unwrap_or(""), started.unwrap_or(now)));
        }
    }
    for part in values::chunks(&attempts) {
        let sql = format!(
            "INSERT INTO attempts (execution_id, attempt, worker, started_at, finished_at, outcome, \
               status_code, error, detail) VALUES {} \
             ON CONFLICT (execution_id, attempt) DO UPDATE SET finished_at = excluded.finished_at, \
               outcome = excluded.outcome, status_code = excluded.status_code, \
               error = excluded.error, detail = excluded.detail",
            values::values_list(part.len(), 9)
        );
        let mut q = sqlx::query(&sql);
        for (c, worker, started) in part {
            q = q
                .bind(&c.attempt.id)
                .bind(i64::from(c.attempt.attempt))
                .bind(*worker)
                .bind(*started)
                .bind(now)
                .bind(c.outcome.as_str())
                .bind(c.status_code)
                .bind(c.error.as_deref())
                .bind(c.detail.as_deref());
        }
        q.execute(&mut **tx).await.map_err(db_err)?;
    }
    Ok(applied)
}

/// Cancels one execution (whatever its state) and closes its open attempt as `cancelled`.
async fn cancel_in_tx(tx: &mut Tx<'_>, id: &str, now: i64) -> Result<()> {
    sqlx::query(CLOSE_RUNNING_ATTEMPT_CANCELLED)
        .bind(id)
        .bind(now)
        .execute(&mut **tx)
        .await
        .map_err(db_err)?;
    sqlx::query(
        "UPDATE executions SET state = 'cancelled', due_at = NULL, lease_expires_at = NULL, \
         finished_at = ?2 WHERE id = ?1",
    )
    .bind(id)
    .bind(now)
    .execute(&mut **tx)
    .await
    .map_err(db_err)?;
    Ok(())
}

/// Cancels the not-yet-started executions of a job incarnation.
async fn cancel_pending(tx: &mut Tx<'_>, uid: &str, now: Timestamp) -> Result<()> {
    sqlx::query(
        "UPDATE executions SET state = 'cancelled', due_at = NULL, finished_at = ?2 \
         WHERE job_uid = ?1 AND due_at IS NOT NULL AND attempt = 0",
    )
    .bind(uid)
    .bind(ms(now))
    .execute(&mut **tx)
    .await
    .map_err(db_err)?;
    Ok(())
}

async fn version_mismatch(tx: &mut Tx<'_>, namespace: &str, name: &str, expected: i64) -> Error {
    let found: std::result::Result<Option<i64>, _> =
        sqlx::query_scalar("SELECT version FROM jobs WHERE namespace = ?1 AND name = ?2")
            .bind(namespace)
            .bind(name)
            .fetch_optional(&mut **tx)
            .await;
    match found {
        Ok(Some(actual)) => Error::StaleVersion { expected, actual },
        Ok(None) => Error::NotFound(format!("job {namespace}/{name}")),
        Err(e) => db_err(e),
    }
}

fn stale_attempt(a: &AttemptRef) -> Error {
    Error::StaleFence(format!(
        "attempt {} of execution {} is not the current running attempt or its lease lapsed",
        a.attempt, a.id
    ))
}
