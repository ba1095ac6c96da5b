//! A backfill's fenced step and its cancel (docs/time.md, "Backfill"), written once over the
//! statements each store provides ([`BackfillStatements`], on the step's open transaction).
//! The caller opens the transaction, runs [`backfill_step`] or [`backfill_cancel`], and
//! commits only when it returns a write (`Applied`, a cancelled record); a `Stale` or
//! `Waiting` step is rolled back, having written nothing.
//!
//! Invariants (as `crate::backfill` states them): a step applies only while its shard lease is
//! held with the epoch it read and the backfill is still `running` at the cursor it was
//! planned from, so a step after a cancel or a takeover writes nothing; a serial step creates
//! nothing while the previous execution or run is unfinished; slots found taken meanwhile are
//! counted as `existing`, never created twice.

use std::future::Future;

use sundial_core::execution::ExecutionState;

use crate::reads::{Statement, Writer};
use crate::steps::listings::BACKFILL_COLUMNS;
use crate::{
    BackfillRecord, BackfillStep, BackfillStepped, Error, NewBackfill, NewExecution, NewRun,
    Result, ShardLease,
};

/// How a step moves its backfill on: the row `id`'s cursor, counts, last id and state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BackfillAdvance<'a> {
    /// The backfill.
    pub id: &'a str,
    /// The new cursor, Unix milliseconds (UTC).
    pub cursor: i64,
    /// Executions or runs this step created.
    pub created: u32,
    /// Slots found with an execution or run already, to add to `existing`.
    pub existing: u64,
    /// The id of the last execution or run created, when the step created one.
    pub last_id: Option<String>,
    /// The step's now, Unix milliseconds (UTC): `updated_at`, and `finished_at` when done.
    pub now: i64,
    /// The range is finished: the backfill becomes `done`.
    pub done: bool,
}

/// The statements of a backfill step and cancel, in the dialect of one store, on the
/// transaction the caller opened. Every method may fail with the store's classified error.
pub trait BackfillStatements: Send {
    /// The store's now, Unix milliseconds (UTC): the database's clock on PostgreSQL, the
    /// store's clock on SQLite.
    fn now(&mut self) -> impl Future<Output = Result<i64>> + Send;

    /// Fails with [`Error::StaleFence`] unless `node` still holds `shard` with the epoch in
    /// `leases`, unexpired at `now`.
    fn check_fence(
        &mut self,
        node: &str,
        leases: &[ShardLease],
        shard: u16,
        now: i64,
    ) -> impl Future<Output = Result<()>> + Send;

    /// The backfill `id`'s `last_id` when it is `running` with `cursor_at` = `cursor` (Unix ms),
    /// its row held against a concurrent cancel until the transaction ends; `None` otherwise.
    fn running_at(
        &mut self,
        id: &str,
        cursor: i64,
    ) -> impl Future<Output = Result<Option<Option<String>>>> + Send;

    /// Holds the workflow of `run` against other run creations until the transaction ends,
    /// failing as run creation does when its version is gone.
    fn hold_workflow(&mut self, run: &NewRun) -> impl Future<Output = Result<()>> + Send;

    /// Whether a run of the workflow incarnation `uid` is unfinished with its fire time at or
    /// before `now`.
    fn unfinished_run_due(
        &mut self,
        uid: &str,
        now: i64,
    ) -> impl Future<Output = Result<bool>> + Send;

    /// The stored state of execution `id`, `None` when there is none.
    fn execution_state(&mut self, id: &str) -> impl Future<Output = Result<Option<String>>> + Send;

    /// Inserts `executions` (skipping slots taken) due by `node`, at `now`; returns how many
    /// went in. The store wakes the workers on commit.
    fn insert_executions(
        &mut self,
        executions: &[NewExecution],
        now: i64,
        node: &str,
    ) -> impl Future<Output = Result<u32>> + Send;

    /// Creates `run` at `now` as run creation does; `Some(id)` when a new run went in, `None`
    /// when its slot had one.
    fn create_run(
        &mut self,
        run: &NewRun,
        now: i64,
    ) -> impl Future<Output = Result<Option<String>>> + Send;

    /// Writes `advance` to its backfill row.
    fn advance(&mut self, advance: &BackfillAdvance<'_>)
    -> impl Future<Output = Result<()>> + Send;

    /// The state of backfill `id` of `namespace`, its row held until the transaction ends;
    /// `None` when there is none.
    fn backfill_state(
        &mut self,
        namespace: &str,
        id: &str,
    ) -> impl Future<Output = Result<Option<String>>> + Send;

    /// Marks backfill `id` `cancelled` with `reason` at `now` and returns it.
    fn cancel(
        &mut self,
        id: &str,
        reason: Option<&str>,
        now: i64,
    ) -> impl Future<Output = Result<BackfillRecord>> + Send;
}

/// Creates backfill `b`, `running` from its first slot, in one statement at the store's now.
///
/// # Errors
/// [`Error::Conflict`] when a backfill with its id exists (nothing written); the store's
/// classified error; [`Error::Corrupt`] for a row that does not decode.
pub async fn backfill_create<W: Writer>(store: &W, b: &NewBackfill) -> Result<BackfillRecord> {
    let now = store.now().await?;
    let sql = format!(
        "INSERT INTO backfills (id, namespace, of, name, uid, shard, from_at, to_at, \
           max_per_second, state, slots, cursor_at, created_at, updated_at) \
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, 'running', $10, $7, $11, $11) \
         ON CONFLICT (id) DO NOTHING RETURNING {BACKFILL_COLUMNS}"
    );
    let st = Statement::new(sql)
        .bind(&b.id)
        .bind(&b.namespace)
        .bind(b.of.as_str())
        .bind(&b.name)
        .bind(&b.uid)
        .bind(i64::from(b.shard))
        .bind(b.from.as_millisecond())
        .bind(b.to.as_millisecond())
        .bind(i64::from(b.max_per_second))
        .bind(i64::try_from(b.slots).unwrap_or(i64::MAX))
        .bind(now);
    match store.returning(&st).await? {
        Some(row) => W::backfill(&row),
        None => Err(Error::Conflict(format!("backfill {} exists", b.id))),
    }
}

/// Applies `step` (see the module's invariants).
///
/// # Errors
/// [`Error::StaleFence`] when the shard lease moved on; a statement's error.
pub async fn backfill_step<S: BackfillStatements>(
    s: &mut S,
    step: &BackfillStep,
) -> Result<BackfillStepped> {
    let now = s.now().await?;
    s.check_fence(&step.node, &step.leases, step.shard, now)
        .await?;
    let Some(last_id) = s
        .running_at(&step.id, step.expected_cursor.as_millisecond())
        .await?
    else {
        return Ok(BackfillStepped::Stale);
    };
    if let Some(run) = step.runs.first() {
        s.hold_workflow(run).await?;
    }
    let planned = step.executions.len() + step.runs.len();
    if step.serial && planned > 0 && must_wait(s, step, last_id.as_deref(), now).await? {
        return Ok(BackfillStepped::Waiting);
    }
    let mut created = 0u32;
    let mut last = None;
    if !step.executions.is_empty() {
        created = s
            .insert_executions(&step.executions, now, &step.node)
            .await?;
        last = step.executions.last().map(|e| e.id.clone());
    }
    for run in &step.runs {
        if let Some(id) = s.create_run(run, now).await? {
            created += 1;
            last = Some(id);
        }
    }
    let found_taken = u64::try_from(planned).unwrap_or(u64::MAX) - u64::from(created);
    s.advance(&BackfillAdvance {
        id: &step.id,
        cursor: step.cursor.as_millisecond(),
        created,
        existing: step.existing + found_taken,
        last_id: last,
        now,
        done: step.done,
    })
    .await?;
    Ok(BackfillStepped::Applied(created))
}

/// Whether a serial step must wait: (a workflow) another run of it is unfinished and past its
/// fire time at `now`, or (a job) the backfill's previous execution `last_id` is unfinished.
async fn must_wait<S: BackfillStatements>(
    s: &mut S,
    step: &BackfillStep,
    last_id: Option<&str>,
    now: i64,
) -> Result<bool> {
    if let Some(uid) = step.runs.first().map(|r| &r.workflow_uid) {
        return s.unfinished_run_due(uid, now).await;
    }
    let Some(last) = last_id else {
        return Ok(false);
    };
    Ok(match s.execution_state(last).await? {
        Some(state) => !state
            .parse::<ExecutionState>()
            .map_err(Error::Corrupt)?
            .is_terminal(),
        None => false,
    })
}

/// Cancels backfill `id` of `namespace` with `reason`.
///
/// # Errors
/// [`Error::NotFound`] when there is no such backfill; [`Error::Conflict`] when it is no
/// longer `running`; a statement's error.
pub async fn backfill_cancel<S: BackfillStatements>(
    s: &mut S,
    namespace: &str,
    id: &str,
    reason: Option<&str>,
) -> Result<BackfillRecord> {
    let now = s.now().await?;
    match s.backfill_state(namespace, id).await?.as_deref() {
        None => Err(Error::NotFound(format!("backfill {id}"))),
        Some("running") => s.cancel(id, reason, now).await,
        Some(other) => Err(Error::Conflict(format!("backfill {id} is {other}"))),
    }
}
