//! A workflow run cancelled, retried or expired, and a run read with its tasks
//! (docs/workflows.md, "Runs"), written once: the statements both stores share run on the
//! caller's open [`Transaction`] ([`RunStatements::tx`]), with the row lock as the dialect's
//! fragment ([`Reader::FOR_UPDATE`]); what differs per store is [`RunStatements`], beside the
//! release's [`ReleaseStatements`] it extends. The caller opens the transaction, runs
//! [`run_cancel`], [`run_retry`] or [`run_expire`], commits, and then signals the executions
//! the step returns as stopped (none where the store signals inside the transaction, as
//! PostgreSQL's `NOTIFY` does).
//!
//! [`run_cancel`], [`run_retry`] and [`run_expire`] return futures declared `Send`: an `async
//! fn` over [`RunStatements::tx`] leaves the compiler to prove its future `Send` at each
//! store's transaction type for every lifetime of the transaction, which it cannot; declared
//! here, it is proved once over the trait.
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

use crate::reads::{Reader, Statement, Transaction};
use crate::steps::listings::RUN_COLUMNS;
use crate::workflow::{
    SpecCache, TaskFact, check_cancellable, check_not_deleted, check_retryable, facts_in_order,
    order_tasks, retry_policy, retry_resets,
};
use crate::{Error, Result, RunRecord, RunSpec};

use super::release::{ReleaseStatements, release_runs};
use super::run_create::{RunCreationStatements, UNFINISHED_RUN, cancel_runs, parsed_version};

/// A run task's columns, as [`Reader::task`] decodes them.
pub const TASK_COLUMNS: &str = "id, task, state, fire_at, attempt, started_at, finished_at, output";

/// The statements of a run's cancel, retry and expiry that differ per store, on the
/// transaction the caller opened; the others are this module's, on [`RunStatements::tx`].
/// Every method may fail with the store's classified error.
pub trait RunStatements: ReleaseStatements {
    /// The store's open transaction, as the statements both stores share take it (with run
    /// creation's, whose [`RunCreationStatements::notify_due`] a retry's release uses).
    type Tx<'a>: RunCreationStatements
    where
        Self: 'a;

    /// The unfinished runs whose `timeout_at` (Unix ms, UTC) is at or before `$1` (now),
    /// those that timed out first, at most `$2`: one text column, the run's id, each row held
    /// until the transaction ends where the store can (skipping those another transaction
    /// holds).
    const TIMED_OUT: &'static str;

    /// The caller's open transaction.
    fn tx(&mut self) -> Self::Tx<'_>;

    /// Fails with [`crate::Error::Conflict`] when run `id`'s day of history is being dropped
    /// (PostgreSQL's daily partitions), holding off such a drop until the transaction ends;
    /// nothing to check where history is deleted row by row.
    fn refuse_if_dropping(&mut self, id: &str) -> impl Future<Output = Result<()>> + Send;

    /// Puts each `(execution, extra attempts, definition)` back to `pending`: no due time, no
    /// end, no lease, no output, `max_attempts` its attempts so far plus the extra ones, and
    /// the definition re-rendered.
    fn reset_tasks(
        &mut self,
        resets: &[(String, u32, RunSpec)],
    ) -> impl Future<Output = Result<()>> + Send;
}

/// The state, workflow incarnation and version of run `id` of `namespace`, its row held until
/// the transaction ends.
///
/// # Errors
/// [`Error::NotFound`] when there is no such run; [`Error::Corrupt`] for a state that does not
/// parse; the store's classified error.
async fn locked_run<T: Transaction>(
    tx: &mut T,
    namespace: &str,
    id: &str,
) -> Result<(RunState, String, i64)> {
    let sql = format!(
        "SELECT state, workflow_uid, workflow_version FROM workflow_runs \
         WHERE id = $1 AND namespace = $2{}",
        <T::Store as Reader>::FOR_UPDATE
    );
    let row = tx
        .row(&Statement::new(sql).bind(id).bind(namespace))
        .await?
        .ok_or_else(|| Error::NotFound(format!("run {id}")))?;
    let state = <T::Store as Reader>::text(&row)?
        .parse()
        .map_err(Error::Corrupt)?;
    let uid = <T::Store as Reader>::text_at(&row, 1)?;
    Ok((state, uid, <T::Store as Reader>::int(&row, 2)?))
}

/// Whether the workflow incarnation `uid` still exists (not deleted).
async fn workflow_exists<T: Transaction>(tx: &mut T, uid: &str) -> Result<bool> {
    let st = Statement::new("SELECT 1 FROM workflows WHERE uid = $1").bind(uid);
    Ok(tx.row(&st).await?.is_some())
}

/// The texts in the first column of the rows `st` returns.
async fn texts<T: Transaction>(tx: &mut T, st: &Statement<'_>) -> Result<Vec<String>> {
    tx.rows(st)
        .await?
        .iter()
        .map(<T::Store as Reader>::text)
        .collect()
}

/// The ids of the unfinished runs of `uid` other than `id`, in id order, held until the
/// transaction ends.
async fn other_unfinished_runs<T: Transaction>(
    tx: &mut T,
    uid: &str,
    id: &str,
) -> Result<Vec<String>> {
    let sql = format!(
        "SELECT id FROM workflow_runs WHERE workflow_uid = $1 AND id <> $2 \
         AND state IN {UNFINISHED_RUN} ORDER BY id{}",
        <T::Store as Reader>::FOR_UPDATE
    );
    texts(tx, &Statement::new(sql).bind(uid).bind(id)).await
}

/// What each task of run `id` stands at, by task name, its rows held (in id order) until the
/// transaction ends.
async fn locked_task_facts<T: Transaction>(
    tx: &mut T,
    id: &str,
) -> Result<HashMap<String, TaskFact>> {
    let sql = format!(
        "SELECT id, task, state, output FROM executions WHERE run_id = $1 ORDER BY id{}",
        <T::Store as Reader>::FOR_UPDATE
    );
    tx.rows(&Statement::new(sql).bind(id))
        .await?
        .iter()
        .map(<T::Store as Reader>::task_fact)
        .collect()
}

/// Marks run `id` `running` again, unfinished, with `timeout_at` (Unix ms, UTC; none when the
/// workflow has no `run_timeout`).
async fn reopen_run<T: Transaction>(tx: &mut T, id: &str, timeout_at: Option<i64>) -> Result<()> {
    let st = Statement::new(
        "UPDATE workflow_runs SET state = 'running', finished_at = NULL, timeout_at = $2 \
         WHERE id = $1",
    )
    .bind(id)
    .bind(timeout_at);
    tx.execute(&st).await?;
    Ok(())
}

/// The ids of the runs [`RunStatements::TIMED_OUT`] names at `now` (Unix ms, UTC), at most
/// `limit`.
async fn runs_timed_out<S: RunStatements>(s: &mut S, now: i64, limit: u32) -> Result<Vec<String>> {
    let st = Statement::new(S::TIMED_OUT)
        .bind(now)
        .bind(i64::from(limit));
    texts(&mut s.tx(), &st).await
}

/// Run `id` of `namespace` with its tasks (in the order of its workflow version's spec, read
/// through [`Reader::specs`]), as a reader sees it at the store's now; `None` when there is no
/// such run.
///
/// # Errors
/// [`Error::Corrupt`] for a row that does not decode or a version that is missing or does not
/// parse; the store's classified error.
pub async fn run_get<S: Reader>(s: &S, namespace: &str, id: &str) -> Result<Option<RunRecord>> {
    let now = s.now().await?;
    let sql = format!(
        "SELECT r.workflow_uid AS version_uid, {RUN_COLUMNS} FROM workflow_runs r \
         WHERE r.id = $1 AND r.namespace = $2"
    );
    let Some(row) = s.row(&Statement::new(sql).bind(id).bind(namespace)).await? else {
        return Ok(None);
    };
    let mut run = S::run(&row, now)?;
    let uid = S::text(&row)?;
    let version = run.workflow_version;
    let cache = s.specs();
    let parsed = match cache.get(&uid, version) {
        Some(parsed) => parsed,
        None => {
            let st = Statement::new(
                "SELECT spec FROM workflow_versions WHERE uid = $1 AND version = $2",
            )
            .bind(uid.as_str())
            .bind(version);
            let text = s.row(&st).await?.as_ref().map(S::text).transpose()?;
            let text = text.ok_or_else(|| {
                Error::Corrupt(format!("workflow {uid} has no version {version}"))
            })?;
            cache.insert(&uid, version, &text)?
        }
    };
    let sql = format!("SELECT {TASK_COLUMNS} FROM executions WHERE run_id = $1");
    let mut tasks = s
        .rows(&Statement::new(sql).bind(id))
        .await?
        .iter()
        .map(|r| S::task(r, &parsed.spec, now))
        .collect::<Result<Vec<_>>>()?;
    order_tasks(&parsed.spec, &mut tasks);
    run.tasks = tasks;
    Ok(Some(run))
}

/// [`run_get`] of a run that exists: what a cancel, retry or creation answers after its commit.
///
/// # Errors
/// [`Error::NotFound`] when the run is gone; as [`run_get`].
pub async fn run_read<S: Reader>(s: &S, namespace: &str, id: &str) -> Result<RunRecord> {
    run_get(s, namespace, id)
        .await?
        .ok_or_else(|| Error::NotFound(format!("run {id}")))
}

/// What a retry did, for the caller to signal after the commit.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Retried {
    /// Executions of replaced runs that were running (see [`RunCreationStatements::stop`]).
    pub stopped: Vec<String>,
    /// Task executions queued by the release.
    pub queued: usize,
}

/// Cancels run `id` of `namespace` at `now` (Unix ms, UTC); returns the executions to signal.
///
/// # Errors
/// [`crate::Error::NotFound`] when there is no such run; [`crate::Error::Conflict`] when it
/// has finished (`workflow::check_cancellable`).
#[expect(
    clippy::manual_async_fn,
    reason = "declared `Send`, so that it is proved over the trait (module docs)"
)]
pub fn run_cancel<S: RunStatements>(
    s: &mut S,
    namespace: &str,
    id: &str,
    now: i64,
) -> impl Future<Output = Result<Vec<String>>> + Send {
    async move {
        let (state, _, _) = locked_run(&mut s.tx(), namespace, id).await?;
        check_cancellable(id, state)?;
        let stopped = cancel_runs(&mut s.tx(), &[id.to_owned()], now, RunState::Cancelled).await?;
        super::audit::record(&mut s.tx(), &[change(namespace, id, "cancel")], now).await?;
        Ok(stopped)
    }
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
#[expect(
    clippy::manual_async_fn,
    reason = "declared `Send`, so that it is proved over the trait (module docs)"
)]
pub fn run_retry<S: RunStatements>(
    s: &mut S,
    cache: &SpecCache,
    namespace: &str,
    id: &str,
    names: &[String],
    now: i64,
) -> impl Future<Output = Result<Retried>> + Send {
    async move {
        let (state, uid, version) = locked_run(&mut s.tx(), namespace, id).await?;
        check_retryable(id, state)?;
        s.refuse_if_dropping(id).await?;
        let exists = workflow_exists(&mut s.tx(), &uid).await?;
        check_not_deleted(id, exists)?;
        let parsed = parsed_version(s, cache, &uid, version).await?;
        let (spec, dag) = (&parsed.spec, &parsed.dag);
        let others = other_unfinished_runs(&mut s.tx(), &uid, id).await?;
        let replaced = retry_policy(id, spec.concurrency_policy, others)?;
        let stopped = cancel_runs(&mut s.tx(), &replaced, now, RunState::Cancelled).await?;
        let by_task = locked_task_facts(&mut s.tx(), id).await?;
        let facts = facts_in_order(spec, by_task, id)?;
        let resets = retry_resets(id, spec, dag, &facts, names)?;
        s.reset_tasks(&resets).await?;
        let timeout_at = spec.run_timeout.map(|t| now + t.as_millis_i64());
        reopen_run(&mut s.tx(), id, timeout_at).await?;
        let queued = release_runs(s, cache, &[id.to_owned()], now).await?;
        if queued > 0 {
            s.tx().notify_due().await?;
        }
        super::audit::record(&mut s.tx(), &[change(namespace, id, "retry")], now).await?;
        Ok(Retried { stopped, queued })
    }
}

/// The audit log's change `action` of run `id` of `namespace` (not versioned).
fn change(namespace: &str, id: &str, action: &'static str) -> crate::audit::Change {
    crate::audit::Change {
        resource: "run",
        namespace: namespace.to_owned(),
        name: id.to_owned(),
        action,
        version_before: None,
        version_after: None,
    }
}

/// Fails the unfinished runs past their `run_timeout` at `now` (Unix ms, UTC), at most `limit`;
/// returns how many, and the executions to signal.
#[expect(
    clippy::manual_async_fn,
    reason = "declared `Send`, so that it is proved over the trait (module docs)"
)]
pub fn run_expire<S: RunStatements>(
    s: &mut S,
    now: i64,
    limit: u32,
) -> impl Future<Output = Result<(u32, Vec<String>)>> + Send {
    async move {
        let expired = runs_timed_out(s, now, limit).await?;
        let stopped = cancel_runs(&mut s.tx(), &expired, now, RunState::Failed).await?;
        Ok((u32::try_from(expired.len()).unwrap_or(u32::MAX), stopped))
    }
}

/// Expands, inside a store's `impl` of [`Reader`], the decoders the run steps read with
/// ([`Reader::text_at`], [`Reader::task_fact`], [`Reader::task`]) as the store's `rows` module
/// (expanded from [`crate::row_decoders!`]), in scope where it expands, defines them, and
/// [`Reader::specs`] as the store's `workflow_specs`.
#[macro_export]
macro_rules! run_decoders {
    () => {
        fn text_at(row: &Self::Row, column: usize) -> $crate::Result<String> {
            sqlx::Row::try_get(row, column).map_err(rows::db_err)
        }

        fn task_fact(row: &Self::Row) -> $crate::Result<(String, $crate::workflow::TaskFact)> {
            rows::task_fact(row)
        }

        fn task(
            row: &Self::Row,
            spec: &sundial_core::workflow::WorkflowSpec,
            now: i64,
        ) -> $crate::Result<$crate::TaskRecord> {
            rows::task_record(row, spec, now)
        }

        fn specs(&self) -> &$crate::workflow::SpecCache {
            &self.workflow_specs
        }
    };
}
