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

use crate::claim::{ActiveExecution, ClaimPlan, DueExecution, JobFacts, allowance, oldest_due};
use crate::claim_order::{ClaimReads, Read};
use crate::concurrency::refill;
use crate::{ClaimedExecution, ExecutionClaim, Result, RunSpec};

/// The statements of a claim, in the dialect of one store, on the transaction the caller
/// opened. Instants are Unix milliseconds, UTC. Every method may fail with the store's
/// classified error.
pub trait ClaimStatements: Send {
    /// Fails with [`crate::Error::StaleFence`] unless the worker lease `epoch` stands, holding
    /// it against a take-over until the transaction ends where the store can.
    fn worker_lease_holds(&mut self, epoch: i64) -> impl Future<Output = Result<()>> + Send;

    /// The store's clock, read inside the transaction where the store keeps one.
    fn now(&mut self) -> impl Future<Output = Result<i64>> + Send;

    /// The bucket of `namespace` as stored (`tokens`, `updated_at`), `None` when it has none
    /// yet; where the store can, locked until the transaction ends, so one claimer at a time
    /// spends a namespace's tokens (`rate` per second, the bucket's start where it is
    /// created).
    fn bucket(
        &mut self,
        namespace: &str,
        rate: f64,
        now: i64,
    ) -> impl Future<Output = Result<Option<(f64, i64)>>> + Send;

    /// The executions of namespaces not in `limited` with `read.after < due_at <=
    /// read.until`, oldest due first, at most `read.limit`, locked against other claims where
    /// the store can (skipping those another claim holds).
    fn due(
        &mut self,
        read: Read,
        limited: &[String],
    ) -> impl Future<Output = Result<Vec<DueExecution>>> + Send;

    /// The executions of `namespace` due at `now`, oldest due first, at most `limit`, locked
    /// as [`ClaimStatements::due`] locks.
    fn due_in(
        &mut self,
        namespace: &str,
        now: i64,
        limit: i64,
    ) -> impl Future<Output = Result<Vec<DueExecution>>> + Send;

    /// The facts of the jobs of `due` that need them ([`DueExecution::needs_facts`]) at
    /// `now`, read under the store's per-job lock (taken first, in one order).
    fn job_facts(
        &mut self,
        due: &[DueExecution],
        now: i64,
    ) -> impl Future<Output = Result<HashMap<String, JobFacts>>> + Send;

    /// Marks `ids` as catch-ups of a misfire episode (`trigger: misfire`), left as they are
    /// otherwise.
    fn mark_misfire(&mut self, ids: &[String]) -> impl Future<Output = Result<()>> + Send;

    /// Ends `ids` in `state` (`missed`, or `skipped`) at `now`, off the claims' queue;
    /// with `misfire`, their trigger becomes `misfire`.
    fn finish(
        &mut self,
        ids: &[String],
        state: ExecutionState,
        misfire: bool,
        now: i64,
    ) -> impl Future<Output = Result<()>> + Send;

    /// Leaves `ids` waiting, due again at `until`.
    fn defer(&mut self, ids: &[String], until: i64) -> impl Future<Output = Result<()>> + Send;

    /// Cancels `cancelled` at `now`; where the store signals inside the transaction
    /// (PostgreSQL's `NOTIFY`), the workers of the running ones are signalled too.
    fn cancel(
        &mut self,
        cancelled: &[ActiveExecution],
        now: i64,
    ) -> impl Future<Output = Result<()>> + Send;

    /// Starts the next attempt of each of `ids` still waiting, for `worker` at `now` (under
    /// the worker lease `epoch`, or with a lease of its own without one), each starting at
    /// its fire time if that is later; returns them with the run definition of `runs` and
    /// `claimed_at` = `now` (the caller restamps it), in fire time order. Fails with
    /// [`crate::Error::Corrupt`] for a row handed out whose run definition was not read.
    fn hand_out(
        &mut self,
        worker: &str,
        now: i64,
        ids: &[String],
        epoch: Option<i64>,
        runs: HashMap<String, RunSpec>,
    ) -> impl Future<Output = Result<Vec<ClaimedExecution>>> + Send;

    /// Writes `namespace`'s bucket back with `tokens` at `now`, its time never moving back.
    fn write_bucket(
        &mut self,
        namespace: &str,
        tokens: f64,
        now: i64,
    ) -> impl Future<Output = Result<()>> + Send;
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
        let stored = s.bucket(ns, *rate, now).await?;
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
        let more = s.due(read, &limited).await?;
        returned = more.len();
        due.extend(more);
    }
    for (ns, tokens) in &buckets {
        let take = allowance(*tokens, request.limit);
        if take > 0 {
            due.extend(s.due_in(ns, now, take).await?);
        }
    }
    if !buckets.is_empty() || request.on_time_first {
        oldest_due(&mut due, request.limit);
    }
    let facts = s.job_facts(&due, now).await?;
    let plan = crate::claim::plan(&due, &facts, &buckets, now);
    apply(s, &plan, now).await?;
    let runs = plan.runs(due);
    let claimed = s
        .hand_out(&request.worker, now, &plan.run, request.epoch, runs)
        .await?;
    for (ns, tokens) in &plan.buckets {
        s.write_bucket(ns, *tokens, now).await?;
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
        s.mark_misfire(&plan.misfire).await?;
    }
    if !plan.missed.is_empty() {
        s.finish(&plan.missed, ExecutionState::Missed, true, now)
            .await?;
    }
    if !plan.skipped.is_empty() {
        s.finish(&plan.skipped, ExecutionState::Skipped, false, now)
            .await?;
    }
    if !plan.deferred.is_empty() {
        s.defer(&plan.deferred, ClaimPlan::deferred_until(now))
            .await?;
    }
    if !plan.cancelled.is_empty() {
        s.cancel(&plan.cancelled, now).await?;
    }
    Ok(())
}
