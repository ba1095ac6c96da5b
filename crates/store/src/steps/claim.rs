//! The claim of due executions, written once over the statements each store provides
//! ([`ClaimStatements`], on the caller's open transaction): the worker lease checked, the
//! rate-limited namespaces' buckets refilled, the due executions read in the order the claim
//! asks for ([`crate::claim_order`]), the facts of their jobs read, the decision of
//! [`crate::claim::plan`] applied, and the executions it runs handed out. The caller opens the
//! transaction, runs [`claim`], commits, signals the cancellations its store signals after
//! the commit ([`ClaimApplied::cancelled_running`]), and stamps the claims with the store's
//! clock read as late as it can be ([`crate::handoff::restamp`]: on SQLite just before the
//! commit, on PostgreSQL after it; docs/guarantees.md, "Claim ahead", "Never early").
//!
//! Invariants: a claim under a worker lease writes nothing unless that lease stands, held
//! against a take-over until the transaction ends where the store can (docs/guarantees.md,
//! "Workers"); the facts of a job are read under the store's per-job lock, taken before they
//! are read, so two claims never both find a job idle; every write of the plan is one
//! statement a kind whatever the batch; a namespace's bucket is written back only after its
//! executions are handed out, and its time never moves back.

use std::collections::HashMap;
use std::future::Future;

use sundial_core::execution::ExecutionState;

use crate::claim::{ActiveExecution, ClaimPlan, DueExecution, FactsByJob, allowance, oldest_due};
use crate::claim_order::{ClaimReads, Read};
use crate::concurrency::refill;
use crate::reads::{Statement, Transaction};
use crate::steps::run_create::RunCreationStatements;
use crate::{ClaimedExecution, ExecutionClaim, Result, RunSpec};

/// The statements of a claim, in the dialect of one store, on the transaction the caller
/// opened. Instants are Unix milliseconds, UTC. Every method may fail with the store's
/// classified error.
pub trait ClaimStatements: Send {
    /// The store's open transaction the claim's shared statements run on, with the dialect's
    /// cancellation of executions and signals to their workers.
    type Tx: RunCreationStatements;

    /// The due executions of the namespaces not in the list `$3` with `$4 < due_at <= $1`,
    /// oldest due first, at most `$2`, locked against other claims where the store can
    /// (skipping those another claim holds), selecting a due execution's columns.
    const DUE: &'static str;

    /// The executions of namespace `$3` due at `$1`, oldest due first, at most `$2`, locked
    /// as [`ClaimStatements::DUE`] locks.
    const DUE_IN: &'static str;

    /// Ends the executions of the list `$1` in state `$3` at `$2`, off the claims' queue, their
    /// trigger `misfire` when `$4`.
    const FINISH: &'static str;

    /// Leaves the executions of the list `$1` waiting, due again at `$2`.
    const DEFER: &'static str;

    /// Starts the next attempt of each execution of the list `$3` still waiting, for worker
    /// `$1` at `$2` (under the worker lease `$4`, or with a lease of its own when `$4` is
    /// NULL), each starting at its fire time if that is later, returning
    /// [`CLAIM_RETURNING`].
    const HAND_OUT: &'static str;

    /// Where the store creates a namespace's bucket before it reads it (so that it can lock
    /// it): the statement that creates bucket `$1` full (`$2` tokens, its time `$3`), leaving
    /// one that exists alone; `None` where a bucket not written yet reads as missing.
    const CREATE_BUCKET: Option<&'static str>;

    /// Writes bucket `$1` back with `$2` tokens at `$3`, its time never moving back (a clock
    /// read earlier than the bucket's last write must not refill the same milliseconds twice).
    const WRITE_BUCKET: &'static str;

    /// The transaction, for the statements above.
    fn tx(&mut self) -> &mut Self::Tx;

    /// Fails with [`crate::Error::StaleFence`] unless the worker lease `epoch` stands, holding
    /// it against a take-over until the transaction ends where the store can.
    fn worker_lease_holds(&mut self, epoch: i64) -> impl Future<Output = Result<()>> + Send;

    /// The store's clock, read inside the transaction where the store keeps one.
    fn now(&mut self) -> impl Future<Output = Result<i64>> + Send;

    /// The facts of the jobs of `due` that need them ([`DueExecution::needs_facts`]) at
    /// `now`, read under the store's per-job lock (taken first, in one order).
    fn job_facts(
        &mut self,
        due: &[DueExecution],
        now: i64,
    ) -> impl Future<Output = Result<FactsByJob>> + Send;
}

/// What a claim applied, before the caller commits.
#[derive(Debug)]
pub struct ClaimApplied {
    /// The executions handed out, in fire time order, `claimed_at` the claim's `now` until
    /// the caller restamps them.
    pub claimed: Vec<ClaimedExecution>,
    /// The claim's time (Unix ms, UTC, the store's clock).
    pub now: i64,
    cancelled: Vec<ActiveExecution>,
}

impl ClaimApplied {
    /// The executions the claim cancelled (`replace`) that were running: their workers are to
    /// be told once the claim has committed, where the store does not signal inside it.
    pub fn cancelled_running(&self) -> impl Iterator<Item = &str> {
        self.cancelled
            .iter()
            .filter(|a| a.running)
            .map(|a| a.id.as_str())
    }

    /// Whether any execution handed out starts after the claim's time (claimed ahead): only
    /// then is a clock reading after the commit worth its cost.
    pub fn took_ahead(&self) -> bool {
        self.claimed
            .iter()
            .any(|c| c.fire_at.as_millisecond() > self.now)
    }
}

/// Runs the claim `request` inside the caller's transaction (docs/policies.md, docs/guarantees.md,
/// "Claim ahead", "Claim order under a backlog"); see the module doc.
///
/// # Errors
/// [`crate::Error::StaleFence`] when the claim's worker lease no longer stands (nothing
/// written; the caller rolls back); [`crate::Error::Corrupt`] for a row that does not decode;
/// or the store's classified error of any statement.
pub async fn claim<S: ClaimStatements>(
    s: &mut S,
    request: &ExecutionClaim,
) -> Result<ClaimApplied> {
    if let Some(epoch) = request.epoch {
        s.worker_lease_holds(epoch).await?;
    }
    let now = s.now().await?;
    // Token buckets of the rate-limited namespaces, refilled to now.
    let mut buckets = Vec::with_capacity(request.rate_limits.len());
    for (ns, rate) in &request.rate_limits {
        let stored = shared::bucket(s, ns, *rate, now).await?;
        buckets.push((ns.clone(), refill(stored, *rate, now)));
    }
    let limited: Vec<String> = request.rate_limits.keys().cloned().collect();
    // Namespaces without a rate limit are read up to the claim-ahead window (after every due
    // execution), in the order the claim asks for; a rate-limited namespace's only once due,
    // oldest first.
    let mut reads = ClaimReads::new(now, request.ahead_ms, request.limit, request.on_time_first);
    let mut due = Vec::new();
    let mut returned = 0;
    while let Some(read) = reads.next(returned) {
        let more = shared::due(s.tx(), S::DUE, read, &limited).await?;
        returned = more.len();
        due.extend(more);
    }
    for (ns, tokens) in &buckets {
        let take = allowance(*tokens, request.limit);
        if take > 0 {
            due.extend(shared::due_in(s.tx(), S::DUE_IN, ns, now, take).await?);
        }
    }
    if !buckets.is_empty() || request.on_time_first {
        oldest_due(&mut due, request.limit);
    }
    let facts = s.job_facts(&due, now).await?;
    let plan = crate::claim::plan(&due, &facts, &buckets, now);
    apply(s, &plan, now).await?;
    let runs = plan.runs(due);
    let (worker, epoch) = (request.worker.as_str(), request.epoch);
    let claimed =
        shared::hand_out(s.tx(), S::HAND_OUT, worker, now, &plan.run, epoch, runs).await?;
    for (ns, tokens) in &plan.buckets {
        let st = Statement::new(S::WRITE_BUCKET)
            .bind(ns.as_str())
            .bind(*tokens)
            .bind(now);
        s.tx().execute(&st).await?;
    }
    Ok(ClaimApplied {
        claimed,
        now,
        cancelled: plan.cancelled,
    })
}

/// Applies what a claim decided but the hand-out itself, one statement a kind.
async fn apply<S: ClaimStatements>(s: &mut S, plan: &ClaimPlan, now: i64) -> Result<()> {
    if !plan.misfire.is_empty() {
        shared::mark_misfire(s.tx(), &plan.misfire).await?;
    }
    if !plan.missed.is_empty() {
        let missed = ExecutionState::Missed;
        shared::finish(s.tx(), S::FINISH, &plan.missed, missed, true, now).await?;
    }
    if !plan.skipped.is_empty() {
        let skipped = ExecutionState::Skipped;
        shared::finish(s.tx(), S::FINISH, &plan.skipped, skipped, false, now).await?;
    }
    if !plan.deferred.is_empty() {
        let until = ClaimPlan::deferred_until(now);
        shared::defer(s.tx(), S::DEFER, &plan.deferred, until).await?;
    }
    if !plan.cancelled.is_empty() {
        // Where the store signals inside the transaction, the workers of the running ones are
        // told by `stop`; elsewhere the caller tells them after the commit
        // ([`ClaimApplied::cancelled_running`]).
        let ids: Vec<String> = plan.cancelled.iter().map(|a| a.id.clone()).collect();
        crate::steps::executions::cancel_all(s.tx(), &ids, now).await?;
        let running = plan.cancelled.iter().filter(|a| a.running);
        s.tx().stop(running.map(|a| a.id.clone()).collect()).await?;
    }
    Ok(())
}

/// The columns a claim returns of the executions it handed out (`Reader::claimed_rows`): a
/// claimed execution's but its run definition, which the claim already read.
pub const CLAIM_RETURNING: &str = "id, namespace, job, trigger, attempt, max_attempts, \
    scheduled_at, fire_at, started_at, lease_expires_at, worker_epoch";

/// The columns of a claimed execution (`Reader::claimed`): [`CLAIM_RETURNING`] and its run
/// definition.
pub const CLAIMED_COLUMNS: &str = "id, namespace, job, trigger, attempt, max_attempts, \
    scheduled_at, fire_at, started_at, lease_expires_at, worker_epoch, run";

/// The uids of the jobs of `due` whose facts the plan needs at `now`
/// ([`DueExecution::needs_facts`]), sorted and each once: the order in which a store takes
/// its per-job locks.
pub fn fact_uids(due: &[DueExecution], now: i64) -> Vec<&str> {
    let mut uids: Vec<&str> = due
        .iter()
        .filter(|e| e.needs_facts(now))
        .map(|e| e.job_uid.as_str())
        .collect();
    uids.sort_unstable();
    uids.dedup();
    uids
}

/// The claim's statements whose binds both stores share, on any store's open
/// [`Transaction`], with the SQL text the dialect gives where it differs (its queue table, its
/// row locks: [`ClaimStatements`]' constants), and the reads of the queue of due executions on
/// the store's read connections.
pub mod shared {
    use super::*;
    use crate::reads::{Reader, Statement};

    /// The claim's `due` by `sql`, whose `$1` is `read.until`, `$2` `read.limit`, `$3`
    /// the list `limited` and `$4` `read.after`, selecting a due execution's columns.
    ///
    /// # Errors
    /// The store's; [`crate::Error::Corrupt`] for a row that does not decode.
    pub async fn due<T: Transaction>(
        tx: &mut T,
        sql: &str,
        read: Read,
        limited: &[String],
    ) -> Result<Vec<DueExecution>> {
        let st = Statement::new(sql)
            .bind(read.until)
            .bind(i64::from(read.limit))
            .bind(limited)
            .bind(read.after);
        let rows = tx.rows(&st).await?;
        rows.iter()
            .map(<T::Store as Reader>::due_execution)
            .collect()
    }

    /// The claim's `due_in` by `sql`, whose `$1` is `now`, `$2` `limit` and `$3`
    /// `namespace`.
    ///
    /// # Errors
    /// As [`due`].
    pub async fn due_in<T: Transaction>(
        tx: &mut T,
        sql: &str,
        namespace: &str,
        now: i64,
        limit: i64,
    ) -> Result<Vec<DueExecution>> {
        let st = Statement::new(sql).bind(now).bind(limit).bind(namespace);
        let rows = tx.rows(&st).await?;
        rows.iter()
            .map(<T::Store as Reader>::due_execution)
            .collect()
    }

    /// The bucket of `namespace` as stored (`tokens`, `updated_at`), `None` when it has none
    /// yet; where the store can, created full first ([`ClaimStatements::CREATE_BUCKET`],
    /// `rate` per second) and locked until the transaction ends, so one claimer at a time
    /// spends a namespace's tokens.
    ///
    /// # Errors
    /// The store's.
    pub async fn bucket<S: ClaimStatements>(
        s: &mut S,
        namespace: &str,
        rate: f64,
        now: i64,
    ) -> Result<Option<(f64, i64)>> {
        if let Some(create) = S::CREATE_BUCKET {
            let depth = crate::concurrency::bucket_depth(rate);
            let st = Statement::new(create).bind(namespace).bind(depth).bind(now);
            s.tx().execute(&st).await?;
        }
        type R<S> = <<S as ClaimStatements>::Tx as Transaction>::Store;
        let sql = format!(
            "SELECT tokens, updated_at FROM namespace_rates WHERE namespace = $1{}",
            R::<S>::FOR_UPDATE
        );
        match s.tx().row(&Statement::new(sql).bind(namespace)).await? {
            Some(row) => Ok(Some((R::<S>::float(&row, 0)?, R::<S>::int(&row, 1)?))),
            None => Ok(None),
        }
    }

    /// Marks `ids` as catch-ups of a misfire episode (`trigger: misfire`).
    ///
    /// # Errors
    /// The store's.
    pub async fn mark_misfire<T: Transaction>(tx: &mut T, ids: &[String]) -> Result<()> {
        let sql = format!(
            "UPDATE executions SET trigger = 'misfire' WHERE {}",
            <T::Store as Reader>::one_of("id", 1)
        );
        tx.execute(&Statement::new(sql).bind(ids)).await?;
        Ok(())
    }

    /// The claim's `finish` by `sql`, whose `$1` is the list `ids`, `$2` `now`, `$3`
    /// the state and `$4` whether the trigger becomes `misfire`.
    ///
    /// # Errors
    /// The store's.
    pub async fn finish<T: Transaction>(
        tx: &mut T,
        sql: &str,
        ids: &[String],
        state: ExecutionState,
        misfire: bool,
        now: i64,
    ) -> Result<()> {
        let st = Statement::new(sql)
            .bind(ids)
            .bind(now)
            .bind(state.as_str())
            .bind(misfire);
        tx.execute(&st).await?;
        Ok(())
    }

    /// The claim's `defer` by `sql`, whose `$1` is the list `ids` and `$2` `until`.
    ///
    /// # Errors
    /// The store's.
    pub async fn defer<T: Transaction>(
        tx: &mut T,
        sql: &str,
        ids: &[String],
        until: i64,
    ) -> Result<()> {
        tx.execute(&Statement::new(sql).bind(ids).bind(until))
            .await?;
        Ok(())
    }

    /// The claim's `hand_out` by `sql`, whose `$1` is `worker`, `$2` `now`, `$3` the
    /// list `ids` and `$4` the worker lease's `epoch`, returning [`CLAIM_RETURNING`].
    ///
    /// # Errors
    /// The store's; [`crate::Error::Corrupt`] for a row that does not decode or was not read.
    pub async fn hand_out<T: Transaction>(
        tx: &mut T,
        sql: &str,
        worker: &str,
        now: i64,
        ids: &[String],
        epoch: Option<i64>,
        runs: HashMap<String, RunSpec>,
    ) -> Result<Vec<ClaimedExecution>> {
        let st = Statement::new(sql)
            .bind(worker)
            .bind(now)
            .bind(ids)
            .bind(epoch);
        let rows = tx.rows(&st).await?;
        <T::Store as Reader>::claimed_rows(&rows, runs, now, now)
    }

    /// The earliest due time of an execution waiting for a claim, read on the store's read
    /// connections ([`crate::WorkerStore::execution_next_due`]).
    ///
    /// # Errors
    /// The store's; [`crate::Error::Corrupt`] for a stored time that is no instant.
    pub async fn next_due<S: Reader>(s: &S) -> Result<Option<jiff::Timestamp>> {
        let sql = format!(
            "SELECT CAST(min(due_at) AS BIGINT) FROM {} WHERE due_at IS NOT NULL",
            S::DUE_TABLE
        );
        match s.row(&Statement::new(sql)).await? {
            Some(row) => S::opt_int(&row, 0)?.map(crate::steps::instant).transpose(),
            None => Ok(None),
        }
    }

    /// The running executions whose attempt's lease lapsed before the store's now, by `sql`
    /// (the dialect's: `$1` the now, `$2` `limit`, selecting [`CLAIMED_COLUMNS`]), for the
    /// reaper ([`crate::WorkerStore::attempt_list_lapsed`]).
    ///
    /// # Errors
    /// The store's; [`crate::Error::Corrupt`] for a row that does not decode.
    pub async fn lapsed<S: Reader>(s: &S, sql: &str, limit: u32) -> Result<Vec<ClaimedExecution>> {
        let now = s.now().await?;
        let st = Statement::new(sql).bind(now).bind(i64::from(limit));
        s.rows(&st).await?.iter().map(S::claimed).collect()
    }

    /// How many executions are due in [`from`, `until`), counted up to `cap`
    /// ([`crate::WorkerStore::execution_due_count`]).
    ///
    /// # Errors
    /// The store's.
    pub async fn due_count<S: Reader>(
        s: &S,
        from: jiff::Timestamp,
        until: jiff::Timestamp,
        cap: u32,
    ) -> Result<u64> {
        let sql = format!(
            "SELECT count(*) FROM (SELECT 1 FROM {} WHERE due_at >= $1 AND due_at < $2 \
             LIMIT $3) AS due",
            S::DUE_TABLE
        );
        let st = Statement::new(sql)
            .bind(from.as_millisecond())
            .bind(until.as_millisecond())
            .bind(i64::from(cap));
        match s.row(&st).await? {
            Some(row) => Ok(u64::try_from(S::int(&row, 0)?).unwrap_or(0)),
            None => Ok(0),
        }
    }
}
