//! Sundial's shared store: PostgreSQL, for any number of processes.
//!
//! Invariants (beyond those of [`sundial_store`]):
//! - The database clock is the time authority: every due check, lease and timestamp is
//!   computed from `clock_timestamp()` in the statement's transaction — unless the store was
//!   opened with a test clock, which replaces it (STYLE.md: `coalesce($now, now())`).
//! - Shard leases are rows of `shard_leases`; a change of owner bumps the shard's epoch. The
//!   live scheduler nodes (rows of `nodes` with an unexpired heartbeat) share the 1,024 shards
//!   evenly: each renewal gives back shards beyond a node's share and takes free ones up to it.
//! - A trigger commit locks the lease rows of its shards (`FOR SHARE`) and checks owner,
//!   epoch and expiry before writing, so a takeover waits for an in-flight commit and a
//!   commit after a takeover writes nothing.
//! - Workers claim with `FOR UPDATE SKIP LOCKED`: no execution is handed to two claimers,
//!   and claimers never wait on each other. A commit that makes executions due sends
//!   `NOTIFY sundial_due`, which wakes idle workers ([`Store::due_signal`]).
//! - `execution_queue` (migration 0004) has a row exactly for each unfinished execution, and
//!   its `due_at` / `lease_expires_at` equal the execution row's: every statement that
//!   changes one changes the other in the same transaction. Lookups of waiting or running
//!   executions read the queue; the execution row is the history and is never indexed on
//!   those columns, so its claim and completion updates are HOT. Writers lock the execution
//!   row before its queue row; the claim locks both, in that order, with `SKIP LOCKED`.
//!   Worker processes vacuum the queue every [`QUEUE_VACUUM_EVERY`].

#![warn(missing_docs)]

mod rows;

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use async_trait::async_trait;
use jiff::Timestamp;
use sqlx::postgres::{PgConnectOptions, PgListener, PgPoolOptions};
use sqlx::{ConnectOptions, PgPool, Postgres, Row};
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

/// The channel a commit that makes executions due notifies.
pub const DUE_CHANNEL: &str = "sundial_due";

/// The channel a commit that cancels a running execution notifies, with the execution id.
pub const CANCEL_CHANNEL: &str = "sundial_cancel";

const DB_NOW: &str = "(extract(epoch from clock_timestamp()) * 1000)::bigint";

/// The PostgreSQL-backed [`Store`].
#[derive(Debug)]
pub struct PgStore {
    pool: PgPool,
    url: String,
    clock: Option<Arc<dyn Clock>>,
    instance: String,
    signals: OnceLock<Signals>,
    /// The notification listener and the queue vacuum, started with the first
    /// [`Store::signals`] call and stopped when the store is dropped.
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
        let options = options
            .log_statements(tracing::log::LevelFilter::Trace)
            .options([
                ("max_parallel_workers_per_gather", "0"),
                ("jit", "off"),
                ("enable_seqscan", "off"),
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
            background: Default::default(),
        })
    }

    /// Closes the connection pool.
    pub async fn close(&self) {
        self.pool.close().await;
    }

    /// The current instant by the time authority, read inside `tx` when there is one.
    async fn now_ms<'e, E: sqlx::PgExecutor<'e>>(&self, executor: E) -> Result<i64> {
        if let Some(clock) = &self.clock {
            return Ok(ms(clock.now()));
        }
        sqlx::query_scalar(&format!("SELECT {DB_NOW}"))
            .fetch_one(executor)
            .await
            .map_err(db_err)
    }

    async fn begin(&self) -> Result<Tx<'_>> {
        self.pool.begin().await.map_err(db_err)
    }
}

const JOB_COLUMNS: &str = "j.namespace, j.name, j.uid, j.shard, j.version, j.spec::text AS spec, \
    j.created_at, j.updated_at, j.next_slot_at, j.next_fire_at";

/// The job's last execution (the latest slot whose fire time `$1` has reached), read through
/// `executions_job` in slot order; and the fire time of its first execution still waiting.
const LAST_EXECUTION: &str = "(SELECT e.id || '|' || e.state || '|' || e.scheduled_at \
    FROM executions e WHERE e.namespace = j.namespace AND e.job = j.name AND e.job_uid = j.uid \
    AND e.fire_at <= $1 ORDER BY e.scheduled_at DESC, e.id DESC LIMIT 1) AS last_execution, \
    (SELECT min(e.fire_at) FROM execution_queue q JOIN executions e ON e.id = q.id \
    WHERE q.job_uid = j.uid AND q.due_at IS NOT NULL AND e.attempt = 0) AS pending_fire_at";

/// The attempts of execution `$1`: the ended ones from `attempts`, the running one from the
/// execution row (its `attempts` row is written when it ends).
const ATTEMPTS_OF_EXECUTION: &str = "SELECT attempt, worker, started_at, finished_at, outcome, \
    status_code, error, detail FROM attempts WHERE execution_id = $1 \
    UNION ALL \
    SELECT e.attempt, coalesce(e.worker, ''), coalesce(e.attempt_started_at, e.started_at), \
      NULL::bigint, NULL::text, NULL::bigint, NULL::text, NULL::text \
    FROM executions e WHERE e.id = $1 AND e.state = 'running' \
      AND NOT EXISTS (SELECT 1 FROM attempts a WHERE a.execution_id = e.id AND a.attempt = e.attempt) \
    ORDER BY attempt";

/// Records the running attempt of execution `$1` (if any) as ended `cancelled` at `$2`.
const CLOSE_RUNNING_ATTEMPT_CANCELLED: &str = "INSERT INTO attempts (execution_id, attempt, worker, \
    started_at, finished_at, outcome) \
    SELECT id, attempt, coalesce(worker, ''), coalesce(attempt_started_at, started_at, $2), $2, 'cancelled' \
    FROM executions WHERE id = $1 AND state = 'running' \
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
impl Store for PgStore {
    async fn now(&self) -> Result<Timestamp> {
        ts(self.now_ms(&self.pool).await?)
    }

    fn signals(&self) -> Signals {
        self.signals
            .get_or_init(|| {
                let signals = Signals::new();
                let (url, s) = (self.url.clone(), signals.clone());
                let listener = tokio::spawn(async move { listen(url, s).await });
                let vacuum = tokio::spawn(vacuum_queue(self.pool.clone()));
                self.background
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .extend([listener.abort_handle(), vacuum.abort_handle()]);
                signals
            })
            .clone()
    }

    async fn job_get(&self, namespace: &str, name: &str) -> Result<Option<JobRecord>> {
        let sql = format!(
            "SELECT {JOB_COLUMNS}, {LAST_EXECUTION} FROM jobs j WHERE j.namespace = $2 AND j.name = $3"
        );
        let now = self.now_ms(&self.pool).await?;
        let row = sqlx::query(&sql)
            .bind(now)
            .bind(namespace)
            .bind(name)
            .fetch_optional(&self.pool)
            .await
            .map_err(db_err)?;
        row.map(|r| rows::job(&r)).transpose()
    }

    async fn job_get_many(&self, namespace: &str, names: &[String]) -> Result<Vec<JobRecord>> {
        let sql = format!(
            "SELECT {JOB_COLUMNS}, {LAST_EXECUTION} FROM jobs j WHERE j.namespace = $2 AND j.name = ANY($3)"
        );
        let now = self.now_ms(&self.pool).await?;
        let rows = sqlx::query(&sql)
            .bind(now)
            .bind(namespace)
            .bind(names)
            .fetch_all(&self.pool)
            .await
            .map_err(db_err)?;
        rows.iter().map(rows::job).collect()
    }

    async fn job_list(&self, q: &JobListQuery) -> Result<Vec<JobRecord>> {
        let mut sql = format!(
            "SELECT {JOB_COLUMNS}, {LAST_EXECUTION} FROM jobs j WHERE j.namespace = $2 AND j.name > $3"
        );
        if let Some(p) = q.paused {
            sql.push_str(if p {
                " AND j.paused"
            } else {
                " AND NOT j.paused"
            });
        }
        if q.label.is_some() {
            sql.push_str(" AND j.spec -> 'labels' ->> $5 = $6");
        }
        sql.push_str(" ORDER BY j.name LIMIT $4");
        let (key, value) = q.label.clone().unwrap_or_default();
        let now = self.now_ms(&self.pool).await?;
        let rows = sqlx::query(&sql)
            .bind(now)
            .bind(&q.namespace)
            .bind(q.after_name.as_deref().unwrap_or(""))
            .bind(i64::from(q.limit))
            .bind(key)
            .bind(value)
            .fetch_all(&self.pool)
            .await
            .map_err(db_err)?;
        rows.iter().map(rows::job).collect()
    }

    async fn job_write_batch(&self, writes: &[JobWrite]) -> Result<Vec<JobRecord>> {
        let mut tx = self.begin().await?;
        let now = self.now_ms(&mut *tx).await?;
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
        let mut tx = self.begin().await?;
        let now = self.now_ms(&mut *tx).await?;
        let uid: Option<String> = sqlx::query_scalar(
            "DELETE FROM jobs WHERE namespace = $1 AND name = $2 AND ($3::bigint IS NULL OR version = $3) RETURNING uid",
        )
        .bind(namespace)
        .bind(name)
        .bind(expected_version)
        .fetch_optional(&mut *tx)
        .await
        .map_err(db_err)?;
        let Some(uid) = uid else {
            return Err(
                version_mismatch(&mut tx, namespace, name, expected_version.unwrap_or(0)).await,
            );
        };
        cancel_pending(&mut tx, &uid, now).await?;
        tx.commit().await.map_err(db_err)
    }

    async fn shard_lease_renew(&self, request: &ShardLeaseRequest) -> Result<Vec<ShardLease>> {
        let node = &request.node;
        let ttl = request.ttl.as_millis_i64();
        let mut tx = self.begin().await?;
        let now = self.now_ms(&mut *tx).await?;
        // Heartbeat as a scheduler; a node id held by another live process is refused.
        let registered = sqlx::query(
            "INSERT INTO nodes (id, instance, roles, started_at, heartbeat_at, expires_at, scheduler_expires_at) \
             VALUES ($1, $2, 'scheduler', $3, $3, $3 + $4, $3 + $4) \
             ON CONFLICT (id) DO UPDATE SET instance = excluded.instance, heartbeat_at = excluded.heartbeat_at, \
               expires_at = excluded.expires_at, scheduler_expires_at = excluded.scheduler_expires_at, \
               started_at = CASE WHEN nodes.instance = excluded.instance THEN nodes.started_at ELSE excluded.started_at END \
             WHERE nodes.instance = excluded.instance OR nodes.expires_at <= $3",
        )
        .bind(node)
        .bind(&self.instance)
        .bind(now)
        .bind(ttl)
        .execute(&mut *tx)
        .await
        .map_err(db_err)?;
        if registered.rows_affected() == 0 {
            return Err(Error::Conflict(format!(
                "node id '{node}' is held by another live process; give each process its own --node-id"
            )));
        }
        let live: i64 =
            sqlx::query_scalar("SELECT count(*) FROM nodes WHERE scheduler_expires_at > $1")
                .bind(now)
                .fetch_one(&mut *tx)
                .await
                .map_err(db_err)?;
        let shards = i64::from(SHARD_COUNT);
        let share = (shards + live.max(1) - 1) / live.max(1);
        // Renew what this node holds and has not lost.
        let held: i64 = sqlx::query_scalar(
            "WITH r AS (UPDATE shard_leases SET expires_at = $2 + $3 WHERE owner = $1 AND expires_at > $2 RETURNING 1) \
             SELECT count(*) FROM r",
        )
        .bind(node)
        .bind(now)
        .bind(ttl)
        .fetch_one(&mut *tx)
        .await
        .map_err(db_err)?;
        if held > share {
            // Give back the excess so newly joined nodes can take it.
            sqlx::query(
                "UPDATE shard_leases SET expires_at = 0 WHERE shard IN \
                 (SELECT shard FROM shard_leases WHERE owner = $1 AND expires_at > $2 ORDER BY shard DESC LIMIT $3)",
            )
            .bind(node)
            .bind(now)
            .bind(held - share)
            .execute(&mut *tx)
            .await
            .map_err(db_err)?;
        } else if held < share {
            // Take free shards (lapsed or given back), bumping each one's epoch.
            sqlx::query(
                "UPDATE shard_leases SET owner = $1, epoch = epoch + 1, expires_at = $2 + $3 WHERE shard IN \
                 (SELECT shard FROM shard_leases WHERE expires_at <= $2 ORDER BY shard LIMIT $4 FOR UPDATE SKIP LOCKED)",
            )
            .bind(node)
            .bind(now)
            .bind(ttl)
            .bind(share - held)
            .execute(&mut *tx)
            .await
            .map_err(db_err)?;
        }
        let rows = sqlx::query("SELECT shard, epoch, expires_at FROM shard_leases WHERE owner = $1 AND expires_at > $2 ORDER BY shard")
            .bind(node)
            .bind(now)
            .fetch_all(&mut *tx)
            .await
            .map_err(db_err)?;
        tx.commit().await.map_err(db_err)?;
        rows.iter().map(rows::shard_lease).collect()
    }

    async fn shard_lease_release(&self, node: &str) -> Result<()> {
        let mut tx = self.begin().await?;
        sqlx::query("UPDATE shard_leases SET expires_at = 0 WHERE owner = $1")
            .bind(node)
            .execute(&mut *tx)
            .await
            .map_err(db_err)?;
        sqlx::query("UPDATE nodes SET scheduler_expires_at = 0 WHERE id = $1 AND instance = $2")
            .bind(node)
            .bind(&self.instance)
            .execute(&mut *tx)
            .await
            .map_err(db_err)?;
        tx.commit().await.map_err(db_err)
    }

    async fn trigger_list_due(&self, q: &TriggerListDue) -> Result<Vec<DueJob>> {
        if q.shards.is_empty() {
            return Ok(Vec::new());
        }
        let shards: Vec<i64> = q.shards.iter().map(|s| i64::from(*s)).collect();
        let rows = sqlx::query(
            "SELECT uid, shard, version, spec::text AS spec, next_slot_at FROM jobs \
             WHERE shard = ANY($1) AND next_fire_at <= $2 ORDER BY next_fire_at LIMIT $3",
        )
        .bind(&shards)
        .bind(ms(q.horizon))
        .bind(i64::from(q.limit))
        .fetch_all(&self.pool)
        .await
        .map_err(db_err)?;
        rows.iter().map(rows::due_job).collect()
    }

    async fn trigger_commit(&self, c: &TriggerCommit) -> Result<TriggerCommitted> {
        let mut tx = self.begin().await?;
        let now = self.now_ms(&mut *tx).await?;
        let mut shards: Vec<i64> = c.jobs.iter().map(|j| i64::from(j.shard)).collect();
        shards.sort_unstable();
        shards.dedup();
        // Fencing: lock the lease rows against a concurrent takeover, then check them.
        let held = sqlx::query(
            "SELECT shard, epoch, expires_at FROM shard_leases \
             WHERE shard = ANY($1) AND owner = $2 AND expires_at > $3 ORDER BY shard FOR SHARE",
        )
        .bind(&shards)
        .bind(&c.node)
        .bind(now)
        .fetch_all(&mut *tx)
        .await
        .map_err(db_err)?;
        let held: Vec<ShardLease> = held.iter().map(rows::shard_lease).collect::<Result<_>>()?;
        for shard in &shards {
            let current = held.iter().find(|l| i64::from(l.shard) == *shard);
            let read = c.leases.iter().find(|l| i64::from(l.shard) == *shard);
            if !matches!((read, current), (Some(r), Some(h)) if r.epoch == h.epoch) {
                return Err(Error::StaleFence(format!(
                    "shard {shard} is no longer leased to {} with the epoch read",
                    c.node
                )));
            }
        }
        // Advance every job of the batch in one statement; a job that changed since it was
        // read (version or next slot) is left out, and so are its executions.
        let mut cols: (
            Vec<&str>,
            Vec<i64>,
            Vec<i64>,
            Vec<Option<i64>>,
            Vec<Option<i64>>,
        ) = Default::default();
        for job in &c.jobs {
            cols.0.push(&job.uid);
            cols.1.push(job.version);
            cols.2.push(ms(job.expected_next_slot));
            cols.3.push(job.next_slot_at.map(ms));
            cols.4.push(job.next_fire_at.map(ms));
        }
        let advanced: Vec<String> = sqlx::query_scalar(
            "UPDATE jobs j SET next_slot_at = t.next_slot, next_fire_at = t.next_fire \
             FROM UNNEST($1::text[], $2::bigint[], $3::bigint[], $4::bigint[], $5::bigint[]) \
               AS t(uid, version, expected, next_slot, next_fire) \
             WHERE j.uid = t.uid AND j.version = t.version AND j.next_slot_at = t.expected RETURNING j.uid",
        )
        .bind(&cols.0)
        .bind(&cols.1)
        .bind(&cols.2)
        .bind(&cols.3)
        .bind(&cols.4)
        .fetch_all(&mut *tx)
        .await
        .map_err(db_err)?;
        let advanced: std::collections::HashSet<String> = advanced.into_iter().collect();
        let executions: Vec<NewExecution> = c
            .jobs
            .iter()
            .filter(|j| advanced.contains(&j.uid))
            .flat_map(|j| j.executions.iter().cloned())
            .collect();
        let mut done = TriggerCommitted {
            jobs_advanced: u32::try_from(advanced.len()).unwrap_or(u32::MAX),
            jobs_changed: u32::try_from(c.jobs.len() - advanced.len()).unwrap_or(u32::MAX),
            executions_inserted: 0,
        };
        done.executions_inserted =
            insert_executions(&mut tx, &executions, now, Some(&c.node)).await?;
        if done.executions_inserted > 0 {
            notify_due(&mut tx).await?;
        }
        tx.commit().await.map_err(db_err)?;
        Ok(done)
    }

    async fn execution_insert(&self, e: &NewExecution) -> Result<ExecutionRecord> {
        let mut tx = self.begin().await?;
        let now = self.now_ms(&mut *tx).await?;
        insert_executions(&mut tx, std::slice::from_ref(e), now, None).await?;
        notify_due(&mut tx).await?;
        tx.commit().await.map_err(db_err)?;
        self.execution_get(&e.namespace, &e.id)
            .await?
            .ok_or_else(|| Error::NotFound(format!("execution {}", e.id)))
    }

    async fn execution_claim(&self, claim: &ExecutionClaim) -> Result<Vec<ClaimedExecution>> {
        let mut tx = self.begin().await?;
        let now = self.now_ms(&mut *tx).await?;
        // Token buckets of the rate-limited namespaces, locked and refilled to now: one claimer
        // at a time spends a namespace's tokens, whichever process it is in.
        let mut buckets = Vec::with_capacity(claim.rate_limits.len());
        for (ns, rate) in &claim.rate_limits {
            sqlx::query(
                "INSERT INTO namespace_rates (namespace, tokens, updated_at) VALUES ($1, $2, $3) ON CONFLICT DO NOTHING",
            )
            .bind(ns)
            .bind(*rate)
            .bind(now)
            .execute(&mut *tx)
            .await
            .map_err(db_err)?;
            let row: Option<(f64, i64)> = sqlx::query_as(
                "SELECT tokens, updated_at FROM namespace_rates WHERE namespace = $1 FOR UPDATE",
            )
            .bind(ns)
            .fetch_optional(&mut *tx)
            .await
            .map_err(db_err)?;
            buckets.push((ns.clone(), refill(row, *rate, now)));
        }
        let limited: Vec<String> = claim.rate_limits.keys().cloned().collect();
        let mut due = sqlx::query(
            "SELECT e.id, e.job_uid, e.trigger, e.run, q.due_at, e.fire_at, e.attempt \
             FROM executions e JOIN execution_queue q ON q.id = e.id \
             WHERE q.due_at <= $1 AND q.namespace <> ALL($3) \
             ORDER BY q.due_at LIMIT $2 FOR UPDATE OF e, q SKIP LOCKED",
        )
        .bind(now)
        .bind(i64::from(claim.limit))
        .bind(&limited)
        .fetch_all(&mut *tx)
        .await
        .map_err(db_err)?;
        for (ns, tokens) in &buckets {
            let allowance = whole_tokens(*tokens).min(i64::from(claim.limit));
            if allowance > 0 {
                due.extend(
                    sqlx::query(
                        "SELECT e.id, e.job_uid, e.trigger, e.run, q.due_at, e.fire_at, e.attempt \
                         FROM executions e JOIN execution_queue q ON q.id = e.id \
                         WHERE q.namespace = $1 AND q.due_at <= $2 \
                         ORDER BY q.due_at LIMIT $3 FOR UPDATE OF e, q SKIP LOCKED",
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
            // One decision per job at a time, across every worker.
            sqlx::query("SELECT pg_advisory_xact_lock(hashtextextended($1, 0))")
                .bind(&uid)
                .execute(&mut *tx)
                .await
                .map_err(db_err)?;
            let active: Vec<(String, String)> = sqlx::query_as(
                "SELECT e.id, e.state FROM execution_queue q JOIN executions e ON e.id = q.id \
                 WHERE q.job_uid = $1 AND e.state IN ('running', 'retry_wait') AND q.id <> $2",
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
                    sqlx::query(
                        "WITH q AS (DELETE FROM execution_queue WHERE id = $1) \
                         UPDATE executions SET state = 'skipped', due_at = NULL, finished_at = $2 WHERE id = $1",
                    )
                        .bind(&id)
                        .bind(now)
                        .execute(&mut *tx)
                        .await
                        .map_err(db_err)?;
                    continue;
                }
                Decision::Defer => {
                    sqlx::query(
                        "WITH q AS (UPDATE execution_queue SET due_at = $2 WHERE id = $1) \
                         UPDATE executions SET due_at = $2 WHERE id = $1",
                    )
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
                            notify_cancelled(&mut tx, other).await?;
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
        // The queue rows are found by `id = ANY(ARRAY(SELECT … FROM claimed))`, an index
        // condition on the primary key, never by joining the CTE: the planner estimates a CTE
        // at one row and, on a queue it last analysed empty, walked the whole queue index once
        // against it (2.7 s for one claim with 50,000 waiting).
        let sql = format!(
            "WITH claimed AS (UPDATE executions e SET state = 'running', attempt = e.attempt + 1, worker = $1, \
                 started_at = coalesce(e.started_at, $2), attempt_started_at = $2, \
                 lease_expires_at = $2 + e.lease_ms, due_at = NULL \
                 WHERE e.id = ANY($3) AND e.state IN ('scheduled', 'queued', 'retry_wait') \
                 RETURNING {CLAIM_RETURNING}), \
             queue AS (UPDATE execution_queue q SET due_at = NULL, lease_expires_at = $2 + x.lease_ms \
                 FROM executions x WHERE q.id = ANY(ARRAY(SELECT id FROM claimed)) AND x.id = q.id) \
             SELECT * FROM claimed ORDER BY fire_at"
        );
        let rows = sqlx::query(&sql)
            .bind(&claim.worker)
            .bind(now)
            .bind(&ids)
            .fetch_all(&mut *tx)
            .await
            .map_err(db_err)?;
        for (ns, tokens) in &buckets {
            let spent = rows
                .iter()
                .filter(|r| r.try_get::<String, _>("namespace").is_ok_and(|n| n == *ns))
                .count() as f64;
            sqlx::query(
                "UPDATE namespace_rates SET tokens = $2, updated_at = $3 WHERE namespace = $1",
            )
            .bind(ns)
            .bind(tokens - spent)
            .bind(now)
            .execute(&mut *tx)
            .await
            .map_err(db_err)?;
        }
        tx.commit().await.map_err(db_err)?;
        let mut runs = batch.into_runs();
        let started = ts(now)?;
        rows.iter()
            .map(|r| {
                let id: String = r.try_get("id").map_err(db_err)?;
                let run = runs.remove(&id).ok_or_else(|| {
                    Error::Corrupt(format!("claimed execution {id} was not among those read"))
                })?;
                rows::claimed_with(r, run).map(|c| ClaimedExecution {
                    started_at: started,
                    ..c
                })
            })
            .collect()
    }

    async fn execution_next_due(&self) -> Result<Option<Timestamp>> {
        let due: Option<i64> =
            sqlx::query_scalar("SELECT min(due_at) FROM execution_queue WHERE due_at IS NOT NULL")
                .fetch_one(&self.pool)
                .await
                .map_err(db_err)?;
        due.map(ts).transpose()
    }

    async fn attempt_heartbeat(&self, a: &AttemptRef) -> Result<Timestamp> {
        let now = self.now_ms(&self.pool).await?;
        let expiry: Option<i64> = sqlx::query_scalar(
            "WITH e AS (UPDATE executions SET lease_expires_at = $3 + lease_ms \
               WHERE id = $1 AND attempt = $2 AND state = 'running' AND lease_expires_at >= $3 \
               RETURNING id, lease_expires_at), \
             q AS (UPDATE execution_queue q SET lease_expires_at = e.lease_expires_at FROM e \
               WHERE q.id = $1 AND q.id = e.id) \
             SELECT lease_expires_at FROM e",
        )
        .bind(&a.id)
        .bind(i64::from(a.attempt))
        .bind(now)
        .fetch_optional(&self.pool)
        .await
        .map_err(db_err)?;
        match expiry {
            Some(e) => ts(e),
            None => Err(stale_attempt(a)),
        }
    }

    async fn attempt_complete_batch(&self, completions: &[AttemptComplete]) -> Result<Vec<bool>> {
        // One statement for the whole batch: each completion is still fenced on its own
        // attempt number (and, for the reaper, on its lapsed lease). The queue rows are found
        // by primary key from an array of the applied ids, never by joining the CTE (see the
        // claim).
        if completions.is_empty() {
            return Ok(Vec::new());
        }
        let test_now = self.clock.as_ref().map(|c| ms(c.now()));
        let n = completions.len();
        let mut ids = Vec::with_capacity(n);
        let mut attempts = Vec::with_capacity(n);
        let mut states = Vec::with_capacity(n);
        let mut retry_ats = Vec::with_capacity(n);
        let mut lapsed_only = Vec::with_capacity(n);
        let mut outcomes = Vec::with_capacity(n);
        let mut codes = Vec::with_capacity(n);
        let mut errors = Vec::with_capacity(n);
        let mut details = Vec::with_capacity(n);
        for c in completions {
            let (state, retry_at) = c.next.state();
            ids.push(c.attempt.id.as_str());
            attempts.push(i64::from(c.attempt.attempt));
            states.push(state.as_str());
            retry_ats.push(retry_at.map(ms));
            lapsed_only.push(c.only_if_lapsed);
            outcomes.push(c.outcome.as_str());
            codes.push(c.status_code);
            errors.push(c.error.as_deref());
            details.push(c.detail.as_deref());
        }
        let sql = format!(
            "WITH now AS (SELECT coalesce($1::bigint, {DB_NOW}) AS t), \
             c AS (SELECT * FROM UNNEST($2::text[], $3::bigint[], $4::text[], $5::bigint[], $6::bool[], \
                     $7::text[], $8::bigint[], $9::text[], $10::text[]) \
                   AS c(id, attempt, state, retry_at, lapsed_only, outcome, status_code, error, detail)), \
             e AS (UPDATE executions x SET state = c.state, due_at = c.retry_at, \
                     finished_at = CASE WHEN c.retry_at IS NULL THEN (SELECT t FROM now) END, \
                     lease_expires_at = NULL \
                   FROM c WHERE x.id = c.id AND x.attempt = c.attempt AND x.state = 'running' \
                     AND (NOT c.lapsed_only OR x.lease_expires_at < (SELECT t FROM now)) \
                   RETURNING x.id, x.attempt, x.worker, x.attempt_started_at, x.due_at), \
             done AS (DELETE FROM execution_queue q \
                   WHERE q.id = ANY(ARRAY(SELECT id FROM e WHERE due_at IS NULL))), \
             retry AS (UPDATE execution_queue q SET due_at = e.due_at, lease_expires_at = NULL \
                   FROM e WHERE q.id = ANY(ARRAY(SELECT id FROM e WHERE due_at IS NOT NULL)) AND q.id = e.id), \
             a AS (INSERT INTO attempts (execution_id, attempt, worker, started_at, finished_at, outcome, \
                     status_code, error, detail) \
                   SELECT e.id, e.attempt, coalesce(e.worker, ''), \
                     coalesce(e.attempt_started_at, (SELECT t FROM now)), (SELECT t FROM now), c.outcome, \
                     c.status_code, c.error, c.detail \
                   FROM e JOIN c ON c.id = e.id AND c.attempt = e.attempt \
                   ON CONFLICT (execution_id, attempt) DO UPDATE SET finished_at = excluded.finished_at, \
                     outcome = excluded.outcome, status_code = excluded.status_code, \
                     error = excluded.error, detail = excluded.detail) \
             SELECT id, attempt FROM e"
        );
        let done: Vec<(String, i64)> = sqlx::query_as(&sql)
            .bind(test_now)
            .bind(&ids)
            .bind(&attempts)
            .bind(&states)
            .bind(&retry_ats)
            .bind(&lapsed_only)
            .bind(&outcomes)
            .bind(&codes)
            .bind(&errors)
            .bind(&details)
            .fetch_all(&self.pool)
            .await
            .map_err(db_err)?;
        let done: std::collections::HashSet<(String, i64)> = done.into_iter().collect();
        Ok(completions
            .iter()
            .map(|c| done.contains(&(c.attempt.id.clone(), i64::from(c.attempt.attempt))))
            .collect())
    }

    async fn attempt_list_lapsed(&self, limit: u32) -> Result<Vec<ClaimedExecution>> {
        let now = self.now_ms(&self.pool).await?;
        let sql = format!(
            "SELECT {CLAIMED_COLUMNS} FROM executions WHERE id = ANY(ARRAY( \
               SELECT id FROM execution_queue WHERE lease_expires_at < $1 ORDER BY lease_expires_at LIMIT $2)) \
             AND state = 'running' ORDER BY lease_expires_at"
        );
        let rows = sqlx::query(&sql)
            .bind(now)
            .bind(i64::from(limit))
            .fetch_all(&self.pool)
            .await
            .map_err(db_err)?;
        rows.iter().map(rows::claimed).collect()
    }

    async fn execution_get(&self, namespace: &str, id: &str) -> Result<Option<ExecutionRecord>> {
        let sql =
            format!("SELECT {EXECUTION_COLUMNS} FROM executions WHERE id = $1 AND namespace = $2");
        let Some(row) = sqlx::query(&sql)
            .bind(id)
            .bind(namespace)
            .fetch_optional(&self.pool)
            .await
            .map_err(db_err)?
        else {
            return Ok(None);
        };
        let mut record = rows::execution(&row)?;
        let attempts = sqlx::query(ATTEMPTS_OF_EXECUTION)
            .bind(id)
            .fetch_all(&self.pool)
            .await
            .map_err(db_err)?;
        record.attempts = attempts.iter().map(rows::attempt).collect::<Result<_>>()?;
        Ok(Some(record))
    }

    async fn execution_list(&self, q: &ExecutionListQuery) -> Result<Vec<ExecutionRecord>> {
        let mut sql = format!("SELECT {EXECUTION_COLUMNS} FROM executions WHERE namespace = $1");
        if q.job.is_some() {
            sql.push_str(" AND job = $2");
        }
        match q.state {
            Some(ExecutionState::Queued) => {
                sql.push_str(" AND state IN ('scheduled', 'queued') AND fire_at <= $3")
            }
            Some(ExecutionState::Scheduled) => {
                sql.push_str(" AND state = 'scheduled' AND fire_at > $3")
            }
            Some(_) => sql.push_str(" AND state = $4"),
            None => {}
        }
        if q.before.is_some() {
            sql.push_str(" AND (scheduled_at, id) < ($5, $6)");
        }
        sql.push_str(" ORDER BY scheduled_at DESC, id DESC LIMIT $7");
        let (before_at, before_id) = q
            .before
            .clone()
            .map_or((0, String::new()), |(t, id)| (ms(t), id));
        let now = self.now_ms(&self.pool).await?;
        let rows = sqlx::query(&sql)
            .bind(&q.namespace)
            .bind(q.job.as_deref())
            .bind(now)
            .bind(q.state.map(ExecutionState::as_str))
            .bind(before_at)
            .bind(before_id)
            .bind(i64::from(q.limit))
            .fetch_all(&self.pool)
            .await
            .map_err(db_err)?;
        rows.iter().map(rows::execution).collect()
    }

    async fn execution_cancel(&self, namespace: &str, id: &str) -> Result<ExecutionRecord> {
        let mut tx = self.begin().await?;
        let now = self.now_ms(&mut *tx).await?;
        let row = sqlx::query(
            "SELECT state, attempt FROM executions WHERE id = $1 AND namespace = $2 FOR UPDATE",
        )
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
        if state == ExecutionState::Running {
            notify_cancelled(&mut tx, id).await?;
        }
        tx.commit().await.map_err(db_err)?;
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
        let mut tx = self.begin().await?;
        let now = self.now_ms(&mut *tx).await?;
        let updated = sqlx::query(
            "WITH e AS (UPDATE executions SET state = 'queued', due_at = $3, queued_at = $3, finished_at = NULL, \
               max_attempts = attempt + $4 WHERE id = $1 AND namespace = $2 AND state IN ('dead', 'failed') \
               RETURNING id, namespace, job_uid) \
             INSERT INTO execution_queue (id, namespace, job_uid, due_at) SELECT id, namespace, job_uid, $3 FROM e \
             ON CONFLICT (id) DO UPDATE SET due_at = excluded.due_at, lease_expires_at = NULL",
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
                sqlx::query_scalar("SELECT state FROM executions WHERE id = $1 AND namespace = $2")
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
        notify_due(&mut tx).await?;
        tx.commit().await.map_err(db_err)?;
        self.execution_get(namespace, id)
            .await?
            .ok_or_else(|| Error::NotFound(format!("execution {id}")))
    }

    async fn node_heartbeat(
        &self,
        node: &str,
        roles: &[String],
        ttl: sundial_core::Dur,
    ) -> Result<()> {
        let now = self.now_ms(&self.pool).await?;
        let done = sqlx::query(
            "INSERT INTO nodes (id, instance, roles, started_at, heartbeat_at, expires_at) VALUES ($1, $2, $3, $4, $4, $4 + $5) \
             ON CONFLICT (id) DO UPDATE SET instance = excluded.instance, roles = excluded.roles, \
               heartbeat_at = excluded.heartbeat_at, expires_at = excluded.expires_at, \
               started_at = CASE WHEN nodes.instance = excluded.instance THEN nodes.started_at ELSE excluded.started_at END \
             WHERE nodes.instance = excluded.instance OR nodes.expires_at <= $4",
        )
        .bind(node)
        .bind(&self.instance)
        .bind(roles.join(","))
        .bind(now)
        .bind(ttl.as_millis_i64())
        .execute(&self.pool)
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
        let now = self.now_ms(&self.pool).await?;
        let nodes = sqlx::query(
            "SELECT n.id, n.roles, n.started_at, n.heartbeat_at, n.expires_at, \
               (SELECT count(*) FROM shard_leases s WHERE s.owner = n.id AND s.expires_at > $1) AS shards \
             FROM nodes n WHERE n.expires_at > $1 - 60000 ORDER BY n.id",
        )
        .bind(now)
        .fetch_all(&self.pool)
        .await
        .map_err(db_err)?;
        let nodes = nodes
            .iter()
            .map(|r| rows::node(r, now))
            .collect::<Result<_>>()?;
        let (queued, scheduled, running): (i64, i64, i64) = sqlx::query_as(
            "SELECT count(*) FILTER (WHERE due_at <= $1), count(*) FILTER (WHERE due_at > $1), \
               count(*) FILTER (WHERE lease_expires_at IS NOT NULL) \
             FROM execution_queue",
        )
        .bind(now)
        .fetch_one(&self.pool)
        .await
        .map_err(db_err)?;
        Ok(ClusterStatus {
            now: ts(now)?,
            nodes,
            queued: u64::try_from(queued).unwrap_or(0),
            scheduled: u64::try_from(scheduled).unwrap_or(0),
            running: u64::try_from(running).unwrap_or(0),
        })
    }
}

/// Keeps a connection listening on [`DUE_CHANNEL`] and [`CANCEL_CHANNEL`] and turns each
/// notification into the matching [`Signals`]; on a lost connection it wakes the due signal
/// (work may have come due meanwhile) and reconnects.
async fn listen(url: String, signals: Signals) {
    loop {
        match PgListener::connect(&url).await {
            Ok(mut listener) => {
                if let Err(e) = listener.listen_all([DUE_CHANNEL, CANCEL_CHANNEL]).await {
                    tracing::warn!(error = %e, "LISTEN failed");
                } else {
                    loop {
                        match listener.try_recv().await {
                            Ok(Some(n)) if n.channel() == CANCEL_CHANNEL => {
                                let _ = signals.cancelled.send(n.payload().to_owned());
                            }
                            Ok(_) => signals.due.notify_one(),
                            Err(e) => {
                                tracing::warn!(error = %e, "notification connection lost");
                                break;
                            }
                        }
                    }
                }
            }
            Err(e) => tracing::debug!(error = %e, "cannot connect the notification listener"),
        }
        signals.due.notify_one();
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// How often a worker process vacuums `execution_queue` ([`vacuum_queue`]).
pub const QUEUE_VACUUM_EVERY: Duration = Duration::from_secs(10);

/// Vacuums `execution_queue` every [`QUEUE_VACUUM_EVERY`] until the pool is closed.
///
/// Every execution leaves two dead queue rows (its claim and its completion), 20,000 a second
/// at 10,000 executions a second, while autovacuum visits a database once a minute
/// (`autovacuum_naptime`): between its passes the claim's index scan steps over the dead
/// rows of every execution since (BENCHMARKS.md, "Steady load"). The table's live rows are
/// only the unfinished executions, so a pass costs about what died since the last one.
/// `SKIP_LOCKED` leaves the table to a pass already running in another process.
async fn vacuum_queue(pool: PgPool) {
    loop {
        tokio::time::sleep(QUEUE_VACUUM_EVERY).await;
        if pool.is_closed() {
            return;
        }
        if let Err(e) = sqlx::raw_sql("VACUUM (SKIP_LOCKED) execution_queue")
            .execute(&pool)
            .await
        {
            tracing::debug!(error = %e, "vacuuming execution_queue failed");
        }
    }
}

/// Tells every process that an execution was cancelled (delivered on commit).
async fn notify_cancelled(tx: &mut Tx<'_>, id: &str) -> Result<()> {
    sqlx::query("SELECT pg_notify($1, $2)")
        .bind(CANCEL_CHANNEL)
        .bind(id)
        .execute(&mut **tx)
        .await
        .map_err(db_err)?;
    Ok(())
}

async fn notify_due(tx: &mut Tx<'_>) -> Result<()> {
    sqlx::query("SELECT pg_notify($1, '')")
        .bind(DUE_CHANNEL)
        .execute(&mut **tx)
        .await
        .map_err(db_err)?;
    Ok(())
}

/// Inserts executions in one statement (UNNEST of column arrays); returns how many were new.
async fn insert_executions(
    tx: &mut Tx<'_>,
    es: &[NewExecution],
    now: i64,
    node: Option<&str>,
) -> Result<u32> {
    if es.is_empty() {
        return Ok(0);
    }
    let mut cols: (
        Vec<&str>,
        Vec<&str>,
        Vec<&str>,
        Vec<&str>,
        Vec<i64>,
        Vec<i64>,
        Vec<&str>,
    ) = Default::default();
    let mut times: (Vec<i64>, Vec<i64>, Vec<Option<i64>>, Vec<Option<i64>>) = Default::default();
    let mut rest: (Vec<&str>, Vec<i64>, Vec<i64>, Vec<String>) = Default::default();
    for e in es {
        cols.0.push(&e.id);
        cols.1.push(&e.namespace);
        cols.2.push(&e.job);
        cols.3.push(&e.job_uid);
        cols.4.push(e.job_version);
        cols.5.push(i64::from(e.shard));
        cols.6.push(e.trigger.as_str());
        let waiting = !e.state.is_terminal();
        times.0.push(ms(e.scheduled_at));
        times.1.push(ms(e.fire_at));
        times.2.push(waiting.then(|| ms(e.fire_at)));
        times.3.push((!waiting).then_some(now));
        rest.0.push(e.state.as_str());
        rest.1.push(i64::from(e.run.retry.max_attempts));
        rest.2.push(e.run.heartbeat_timeout.as_millis_i64());
        rest.3
            .push(serde_json::to_string(&e.run).map_err(|err| Error::Corrupt(err.to_string()))?);
    }
    // The waiting ones (due_at set) also get their queue row; a slot that already has its
    // execution (ON CONFLICT) gets neither.
    let inserted: i64 = sqlx::query_scalar(
        "WITH e AS (INSERT INTO executions (id, namespace, job, job_uid, job_version, shard, trigger, scheduled_at, \
           fire_at, queued_at, due_at, finished_at, state, max_attempts, lease_ms, run, triggered_by, created_at) \
         SELECT id, ns, job, uid, ver, shard, trig, sched, fire, fire, due, fin, st, maxa, lease, run, $16, $17 \
         FROM UNNEST($1::text[], $2::text[], $3::text[], $4::text[], $5::bigint[], $6::bigint[], $7::text[], \
           $8::bigint[], $9::bigint[], $10::bigint[], $11::bigint[], $12::text[], $13::bigint[], $14::bigint[], $15::text[]) \
           AS t(id, ns, job, uid, ver, shard, trig, sched, fire, due, fin, st, maxa, lease, run) \
         ON CONFLICT DO NOTHING RETURNING id, namespace, job_uid, due_at), \
         q AS (INSERT INTO execution_queue (id, namespace, job_uid, due_at) \
           SELECT id, namespace, job_uid, due_at FROM e WHERE due_at IS NOT NULL) \
         SELECT count(*) FROM e",
    )
    .bind(&cols.0)
    .bind(&cols.1)
    .bind(&cols.2)
    .bind(&cols.3)
    .bind(&cols.4)
    .bind(&cols.5)
    .bind(&cols.6)
    .bind(&times.0)
    .bind(&times.1)
    .bind(&times.2)
    .bind(&times.3)
    .bind(&rest.0)
    .bind(&rest.1)
    .bind(&rest.2)
    .bind(&rest.3)
    .bind(node)
    .bind(now)
    .fetch_one(&mut **tx)
    .await
    .map_err(db_err)?;
    Ok(u32::try_from(inserted).unwrap_or(u32::MAX))
}

/// Writes one job inside `tx` (see [`Store::job_write_batch`]).
/// Inserts new jobs in one statement (UNNEST of column arrays), as [`write_job`] would one by
/// one; [`Error::Conflict`] naming the first that already exists (the caller's transaction
/// is then dropped, so nothing is written).
async fn insert_jobs(tx: &mut Tx<'_>, writes: &[JobWrite], now: i64) -> Result<Vec<JobRecord>> {
    let n = writes.len();
    let (mut nss, mut names, mut uids, mut shards) = (
        Vec::with_capacity(n),
        Vec::with_capacity(n),
        Vec::with_capacity(n),
        Vec::with_capacity(n),
    );
    let (mut specs, mut paused, mut slots, mut fires) = (
        Vec::with_capacity(n),
        Vec::with_capacity(n),
        Vec::with_capacity(n),
        Vec::with_capacity(n),
    );
    for w in writes {
        let r = &w.record;
        nss.push(r.spec.namespace.as_str());
        names.push(r.spec.name.as_str());
        uids.push(r.uid.as_str());
        shards.push(i64::from(r.shard));
        specs.push(serde_json::to_string(&r.spec).map_err(|e| Error::Corrupt(e.to_string()))?);
        paused.push(r.spec.paused);
        slots.push(r.next_slot_at.map(ms));
        fires.push(r.next_fire_at.map(ms));
    }
    let inserted: Vec<(String, String)> = sqlx::query_as(
        "INSERT INTO jobs (namespace, name, uid, shard, version, spec, paused, created_at, updated_at, \
           next_slot_at, next_fire_at) \
         SELECT ns, name, uid, shard, 1, spec::jsonb, paused, $9, $9, slot, fire \
         FROM UNNEST($1::text[], $2::text[], $3::text[], $4::bigint[], $5::text[], $6::bool[], \
           $7::bigint[], $8::bigint[]) AS t(ns, name, uid, shard, spec, paused, slot, fire) \
         ON CONFLICT (namespace, name) DO NOTHING RETURNING namespace, name",
    )
    .bind(&nss)
    .bind(&names)
    .bind(&uids)
    .bind(&shards)
    .bind(&specs)
    .bind(&paused)
    .bind(&slots)
    .bind(&fires)
    .bind(now)
    .fetch_all(&mut **tx)
    .await
    .map_err(db_err)?;
    sundial_store::inserted_jobs(writes, inserted, ts(now)?)
}

async fn write_job(tx: &mut Tx<'_>, w: &JobWrite, now: i64) -> Result<JobRecord> {
    let r = &w.record;
    let spec = serde_json::to_string(&r.spec).map_err(|e| Error::Corrupt(e.to_string()))?;
    let version = match w.expected_version {
        None => {
            insert_jobs(tx, std::slice::from_ref(w), now).await?;
            1
        }
        Some(expected) => {
            let updated = sqlx::query(
                "UPDATE jobs SET version = version + 1, spec = $4::jsonb, paused = $5, updated_at = $6, \
                 next_slot_at = $7, next_fire_at = $8 WHERE namespace = $1 AND name = $2 AND version = $3",
            )
            .bind(&r.spec.namespace)
            .bind(&r.spec.name)
            .bind(expected)
            .bind(&spec)
            .bind(r.spec.paused)
            .bind(now)
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
                "UPDATE executions SET run = $2, job_version = $3, max_attempts = $4, lease_ms = $5 \
                 WHERE id IN (SELECT id FROM execution_queue WHERE job_uid = $1 AND due_at IS NOT NULL) \
                 AND attempt = 0",
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
    let now_ts = ts(now)?;
    Ok(JobRecord {
        version,
        created_at: if w.expected_version.is_none() {
            now_ts
        } else {
            r.created_at
        },
        updated_at: now_ts,
        ..r.clone()
    })
}

/// Applies the misfire policy to a never-started execution of a scheduled slot claimed later
/// than its job's threshold ([`misfire_runs`]): records it `missed` and returns false, or
/// marks it `misfire` when it runs for its episode and returns true.
async fn late_slot_runs(
    tx: &mut Tx<'_>,
    row: &sqlx::postgres::PgRow,
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
    // As on the embedded store: a later execution waits, or the job's next slot (not
    // triggered yet) has come due and the scheduler will trigger it.
    let later_due: bool = sqlx::query_scalar(
        "SELECT EXISTS (SELECT 1 FROM execution_queue q JOIN executions e ON e.id = q.id \
         WHERE q.job_uid = $1 AND q.due_at <= $3 AND e.attempt = 0 AND e.fire_at > $2) \
         OR EXISTS (SELECT 1 FROM jobs WHERE uid = $1 AND next_fire_at <= $3)",
    )
    .bind(uid)
    .bind(fire_at)
    .bind(now)
    .fetch_one(&mut **tx)
    .await
    .map_err(db_err)?;
    let runs = misfire_runs(run.misfire_policy, threshold_ms, late_ms, later_due);
    let sql = if runs {
        "UPDATE executions SET trigger = 'misfire' WHERE id = $1"
    } else {
        "WITH q AS (DELETE FROM execution_queue WHERE id = $1) \
         UPDATE executions SET state = 'missed', trigger = 'misfire', due_at = NULL, finished_at = $2 WHERE id = $1"
    };
    sqlx::query(sql)
        .bind(id)
        .bind(now)
        .execute(&mut **tx)
        .await
        .map_err(db_err)?;
    Ok(runs)
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
        "UPDATE executions SET state = 'cancelled', due_at = NULL, lease_expires_at = NULL, finished_at = $2 \
         WHERE id = $1",
    )
    .bind(id)
    .bind(now)
    .execute(&mut **tx)
    .await
    .map_err(db_err)?;
    // A statement of its own, after the update has locked the execution row: its snapshot
    // sees a queue row that a re-drive committed while the update waited for that lock.
    sqlx::query("DELETE FROM execution_queue WHERE id = $1")
        .bind(id)
        .execute(&mut **tx)
        .await
        .map_err(db_err)?;
    Ok(())
}

async fn cancel_pending(tx: &mut Tx<'_>, uid: &str, now: i64) -> Result<()> {
    sqlx::query(
        "WITH e AS (UPDATE executions SET state = 'cancelled', due_at = NULL, finished_at = $2 \
           WHERE id IN (SELECT id FROM execution_queue WHERE job_uid = $1 AND due_at IS NOT NULL) \
           AND attempt = 0 RETURNING id) \
         DELETE FROM execution_queue q USING e WHERE q.job_uid = $1 AND q.id = e.id",
    )
    .bind(uid)
    .bind(now)
    .execute(&mut **tx)
    .await
    .map_err(db_err)?;
    Ok(())
}

async fn version_mismatch(tx: &mut Tx<'_>, namespace: &str, name: &str, expected: i64) -> Error {
    let found: std::result::Result<Option<i64>, _> =
        sqlx::query_scalar("SELECT version FROM jobs WHERE namespace = $1 AND name = $2")
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
