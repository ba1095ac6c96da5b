//! A workflow run cancelled, retried or expired (docs/workflows.md, "Runs"), written once over
//! the statements each store provides ([`RunStatements`], on the caller's open transaction,
//! beside the release's [`ReleaseStatements`] it extends). The caller opens the transaction,
//! runs [`run_cancel`], [`run_retry`] or [`run_expire`], commits, and then signals the
//! executions the step returns as stopped (none where the store signals inside the
//! transaction, as PostgreSQL's `NOTIFY` does).
//!
//! Invariants: the run is read under its lock before anything is decided (so two retries, or a
//! retry and a cancel, of one run are serialised); a retry refuses a run whose workflow is
//! deleted or whose history is being dropped, cancels the other unfinished runs its workflow's
//! concurrency policy says it replaces, resets the tasks `sundial_store::workflow::retry_resets`
//! chose and releases what they make ready in the same transaction, so a committed retry has
//! queued every task it can start.

use std::collections::HashMap;
use std::future::Future;

use sundial_core::workflow::RunState;

use crate::workflow::{
    SpecCache, TaskFact, check_cancellable, check_not_deleted, check_retryable, facts_in_order,
    retry_policy, retry_resets,
};
use crate::{Result, RunSpec};

use super::release::{ReleaseStatements, parsed_version, release_runs};

/// The statements of a run's cancel, retry and expiry, in the dialect of one store, on the
/// transaction the caller opened. Every method may fail with the store's classified error.
pub trait RunStatements: ReleaseStatements {
    /// The state, workflow incarnation and version of run `id` of `namespace`, its row held
    /// until the transaction ends. [`crate::Error::NotFound`] when there is no such run.
    fn locked_run(
        &mut self,
        namespace: &str,
        id: &str,
    ) -> impl Future<Output = Result<(RunState, String, i64)>> + Send;

    /// Fails with [`crate::Error::Conflict`] when run `id`'s day of history is being dropped
    /// (PostgreSQL's daily partitions), holding off such a drop until the transaction ends;
    /// nothing to check where history is deleted row by row.
    fn refuse_if_dropping(&mut self, id: &str) -> impl Future<Output = Result<()>> + Send;

    /// Whether the workflow incarnation `uid` still exists (not deleted).
    fn workflow_exists(&mut self, uid: &str) -> impl Future<Output = Result<bool>> + Send;

    /// The ids of the unfinished runs of `uid` other than `id`, held until the transaction
    /// ends.
    fn other_unfinished_runs(
        &mut self,
        uid: &str,
        id: &str,
    ) -> impl Future<Output = Result<Vec<String>>> + Send;

    /// Ends `runs` in `end` at `now` (Unix ms, UTC) with their unfinished tasks cancelled;
    /// returns the running executions the caller signals after the commit (none where the store
    /// signals them in the transaction).
    fn cancel_runs(
        &mut self,
        runs: &[String],
        now: i64,
        end: RunState,
    ) -> impl Future<Output = Result<Vec<String>>> + Send;

    /// What each task of run `id` stands at, by task name, its rows held until the
    /// transaction ends.
    fn locked_task_facts(
        &mut self,
        id: &str,
    ) -> impl Future<Output = Result<HashMap<String, TaskFact>>> + Send;

    /// Puts each `(execution, extra attempts, definition)` back to `pending`: no due time, no
    /// end, no lease, no output, `max_attempts` its attempts so far plus the extra ones, and
    /// the definition re-rendered.
    fn reset_tasks(
        &mut self,
        resets: &[(String, u32, RunSpec)],
    ) -> impl Future<Output = Result<()>> + Send;

    /// Marks run `id` `running` again, unfinished, with `timeout_at` (Unix ms, UTC; none when
    /// the workflow has no `run_timeout`).
    fn reopen_run(
        &mut self,
        id: &str,
        timeout_at: Option<i64>,
    ) -> impl Future<Output = Result<()>> + Send;

    /// The unfinished runs whose `timeout_at` is at or before `now`, oldest first, at most
    /// `limit`.
    fn runs_timed_out(
        &mut self,
        now: i64,
        limit: u32,
    ) -> impl Future<Output = Result<Vec<String>>> + Send;

    /// Tells the store's workers that executions became due, in the transaction where the
    /// store signals so (PostgreSQL's `NOTIFY`); nothing where the caller signals after the
    /// commit.
    fn notify_due(&mut self) -> impl Future<Output = Result<()>> + Send;
}

/// What a retry did, for the caller to signal after the commit.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Retried {
    /// Executions of replaced runs that were running (see [`RunStatements::cancel_runs`]).
    pub stopped: Vec<String>,
    /// Task executions queued by the release.
    pub queued: usize,
}

/// Cancels run `id` of `namespace` at `now` (Unix ms, UTC); returns the executions to signal.
///
/// # Errors
/// [`crate::Error::NotFound`] when there is no such run; [`crate::Error::Conflict`] when it
/// has finished (`workflow::check_cancellable`).
pub async fn run_cancel<S: RunStatements>(
    s: &mut S,
    namespace: &str,
    id: &str,
    now: i64,
) -> Result<Vec<String>> {
    let (state, _, _) = s.locked_run(namespace, id).await?;
    check_cancellable(id, state)?;
    s.cancel_runs(&[id.to_owned()], now, RunState::Cancelled)
        .await
}

/// Retries run `id` of `namespace` at `now` (Unix ms, UTC): the tasks `names` (all that did not
/// succeed when empty) and their downstream go back to `pending`, the run to `running`, the
/// runs its concurrency policy replaces are cancelled, and what is ready is released.
///
/// # Errors
/// [`crate::Error::NotFound`]; [`crate::Error::Conflict`] when the run is unfinished (or was
/// `skipped` or `missed`), its workflow deleted, its history being dropped, or another run is
/// unfinished under `skip`; the errors of `workflow::retry_resets` (a task the run does not
/// have, nothing to reset).
pub async fn run_retry<S: RunStatements>(
    s: &mut S,
    cache: &SpecCache,
    namespace: &str,
    id: &str,
    names: &[String],
    now: i64,
) -> Result<Retried> {
    let (state, uid, version) = s.locked_run(namespace, id).await?;
    check_retryable(id, state)?;
    s.refuse_if_dropping(id).await?;
    let exists = s.workflow_exists(&uid).await?;
    check_not_deleted(id, exists)?;
    let parsed = parsed_version(s, cache, &uid, version).await?;
    let (spec, dag) = (&parsed.spec, &parsed.dag);
    let others = s.other_unfinished_runs(&uid, id).await?;
    let replaced = retry_policy(id, spec.concurrency_policy, others)?;
    let stopped = s.cancel_runs(&replaced, now, RunState::Cancelled).await?;
    let by_task = s.locked_task_facts(id).await?;
    let facts = facts_in_order(spec, by_task, id)?;
    let resets = retry_resets(id, spec, dag, &facts, names)?;
    s.reset_tasks(&resets).await?;
    s.reopen_run(id, spec.run_timeout.map(|t| now + t.as_millis_i64()))
        .await?;
    let queued = release_runs(s, cache, &[id.to_owned()], now).await?;
    if queued > 0 {
        s.notify_due().await?;
    }
    Ok(Retried { stopped, queued })
}

/// Fails the unfinished runs past their `run_timeout` at `now` (Unix ms, UTC), at most `limit`;
/// returns how many, and the executions to signal.
pub async fn run_expire<S: RunStatements>(
    s: &mut S,
    now: i64,
    limit: u32,
) -> Result<(u32, Vec<String>)> {
    let expired = s.runs_timed_out(now, limit).await?;
    let stopped = s.cancel_runs(&expired, now, RunState::Failed).await?;
    Ok((u32::try_from(expired.len()).unwrap_or(u32::MAX), stopped))
}
