//! A backfill (docs/time.md, "Backfill"): its creation, fenced step and cancel, and the
//! driver's reads of running backfills, taken slots and unfinished work, written once. The
//! statements both stores share run on the step's open [`Transaction`]
//! ([`BackfillStatements::tx`]), with the row lock as the dialect's fragment
//! ([`Reader::FOR_UPDATE`]: a step locks the backfill row after the shard fence, so a cancel
//! waits for an in-flight step; SQLite's one writer holds every row anyway); what differs per
//! store (its clock, the fence, run creation, inserting executions and waking workers) is
//! [`BackfillStatements`]. The caller opens the transaction, runs [`backfill_step`] or
//! [`backfill_cancel`], and commits only when it returns a write (`Applied`, a cancelled
//! record); a `Stale` or `Waiting` step is rolled back, having written nothing.
//!
//! Invariants (as `crate::backfill` states them): a step applies only while its shard lease is
//! held with the epoch it read and the backfill is still `running` at the cursor it was
//! planned from, so a step after a cancel or a takeover writes nothing; a serial step creates
//! nothing while the previous execution or run is unfinished; slots found taken meanwhile are
//! counted as `existing`, never created twice.

use std::collections::HashSet;
use std::future::Future;

use sundial_core::execution::ExecutionState;

use crate::reads::{Reader, Statement, Transaction};
use crate::steps::listings::BACKFILL_COLUMNS;
use crate::steps::run_create::{UNFINISHED_RUN, hold_run_version};
use crate::{
    BackfillOf, BackfillRecord, BackfillStep, BackfillStepped, Error, NewBackfill, NewRun, Result,
    ShardLease,
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

/// The statements of a backfill step and cancel that differ per store, on the transaction the
/// caller opened; the others are this module's, on [`BackfillStatements::tx`]. Every method
/// may fail with the store's classified error.
pub trait BackfillStatements: Send {
    /// The store's open transaction, as the statements both stores share take it.
    type Tx: Transaction;

    /// The caller's open transaction.
    fn tx(&mut self) -> &mut Self::Tx;

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

    /// Inserts `step.executions` (skipping slots taken) due by `step.node`, at `now` (Unix ms,
    /// UTC); returns how many went in. The store wakes the workers on commit.
    fn insert_executions(
        &mut self,
        step: &BackfillStep,
        now: i64,
    ) -> impl Future<Output = Result<u32>> + Send;

    /// Creates `run` at `now` as run creation does; `Some(id)` when a new run went in, `None`
    /// when its slot had one.
    fn create_run(
        &mut self,
        run: &NewRun,
        now: i64,
    ) -> impl Future<Output = Result<Option<String>>> + Send;
}

/// The backfill `id`'s `last_id` when it is `running` with `cursor_at` = `cursor` (Unix ms),
/// its row held against a concurrent cancel until the transaction ends; `None` otherwise.
async fn running_at<T: Transaction>(
    tx: &mut T,
    id: &str,
    cursor: i64,
) -> Result<Option<Option<String>>> {
    let sql = format!(
        "SELECT {BACKFILL_COLUMNS} FROM backfills \
         WHERE id = $1 AND state = 'running' AND cursor_at = $2{}",
        <T::Store as Reader>::FOR_UPDATE
    );
    let row = tx.row(&Statement::new(sql).bind(id).bind(cursor)).await?;
    row.map(|r| Ok(<T::Store as Reader>::backfill(&r)?.last_id))
        .transpose()
}

/// Whether a run of the workflow incarnation `uid` is unfinished with its fire time at or
/// before `now` (Unix ms, UTC).
async fn unfinished_run_due<T: Transaction>(tx: &mut T, uid: &str, now: i64) -> Result<bool> {
    let sql = format!(
        "SELECT 1 FROM workflow_runs WHERE workflow_uid = $1 AND state IN {UNFINISHED_RUN} \
         AND fire_at <= $2 LIMIT 1"
    );
    Ok(tx
        .row(&Statement::new(sql).bind(uid).bind(now))
        .await?
        .is_some())
}

/// The stored state of execution `id`, `None` when there is none.
async fn execution_state<T: Transaction>(tx: &mut T, id: &str) -> Result<Option<String>> {
    let st = Statement::new("SELECT state FROM executions WHERE id = $1").bind(id);
    tx.row(&st)
        .await?
        .as_ref()
        .map(<T::Store as Reader>::text)
        .transpose()
}

/// Writes `a` to its backfill row.
async fn advance<T: Transaction>(tx: &mut T, a: &BackfillAdvance<'_>) -> Result<()> {
    let st = Statement::new(
        "UPDATE backfills SET cursor_at = $2, created = created + $3, existing = existing + $4, \
           last_id = COALESCE($5, last_id), updated_at = $6, \
           state = CASE WHEN $7 THEN 'done' ELSE state END, \
           finished_at = CASE WHEN $7 THEN $6 ELSE finished_at END \
         WHERE id = $1",
    )
    .bind(a.id)
    .bind(a.cursor)
    .bind(i64::from(a.created))
    .bind(i64::try_from(a.existing).unwrap_or(i64::MAX))
    .bind(a.last_id.as_deref())
    .bind(a.now)
    .bind(a.done);
    tx.execute(&st).await?;
    Ok(())
}

/// The state of backfill `id` of `namespace`, its row held until the transaction ends; `None`
/// when there is none.
async fn backfill_state<T: Transaction>(
    tx: &mut T,
    namespace: &str,
    id: &str,
) -> Result<Option<String>> {
    let sql = format!(
        "SELECT state FROM backfills WHERE namespace = $1 AND id = $2{}",
        <T::Store as Reader>::FOR_UPDATE
    );
    tx.row(&Statement::new(sql).bind(namespace).bind(id))
        .await?
        .as_ref()
        .map(<T::Store as Reader>::text)
        .transpose()
}

/// Marks backfill `id` `cancelled` with `reason` at `now` (Unix ms, UTC) and returns it.
async fn cancel<T: Transaction>(
    tx: &mut T,
    id: &str,
    reason: Option<&str>,
    now: i64,
) -> Result<BackfillRecord> {
    let sql = format!(
        "UPDATE backfills SET state = 'cancelled', reason = $2, updated_at = $3, \
         finished_at = $3 WHERE id = $1 RETURNING {BACKFILL_COLUMNS}"
    );
    match tx
        .row(&Statement::new(sql).bind(id).bind(reason).bind(now))
        .await?
    {
        Some(row) => <T::Store as Reader>::backfill(&row),
        None => Err(Error::NotFound(format!("backfill {id}"))),
    }
}

/// The running backfills of `shards`, oldest first (by `created_at`, then id).
///
/// # Errors
/// The store's classified error; [`Error::Corrupt`] for a row that does not decode.
pub async fn backfill_running<S: Reader>(s: &S, shards: &[u16]) -> Result<Vec<BackfillRecord>> {
    if shards.is_empty() {
        return Ok(Vec::new());
    }
    let shards: Vec<i64> = shards.iter().map(|s| i64::from(*s)).collect();
    let sql = format!(
        "SELECT {BACKFILL_COLUMNS} FROM backfills WHERE state = 'running' AND {} \
         ORDER BY created_at, id",
        S::one_of("shard", 1)
    );
    let st = Statement::new(sql).bind(shards.as_slice());
    s.rows(&st).await?.iter().map(S::backfill).collect()
}

/// Which of `ids` already name an execution (a job's backfill) or a run (a workflow's).
///
/// # Errors
/// The store's classified error.
pub async fn backfill_taken<S: Reader>(
    s: &S,
    of: BackfillOf,
    ids: &[String],
) -> Result<HashSet<String>> {
    if ids.is_empty() {
        return Ok(HashSet::new());
    }
    let table = match of {
        BackfillOf::Job => "executions",
        BackfillOf::Workflow => "workflow_runs",
    };
    let sql = format!("SELECT id FROM {table} WHERE {}", S::one_of("id", 1));
    let st = Statement::new(sql).bind(ids);
    s.rows(&st).await?.iter().map(S::text).collect()
}

/// How many executions of job incarnation `uid` ([`Reader::UNFINISHED_EXECUTIONS`]), or runs
/// of workflow incarnation `uid`, are unfinished.
///
/// # Errors
/// The store's classified error.
pub async fn backfill_unfinished<S: Reader>(s: &S, of: BackfillOf, uid: &str) -> Result<u64> {
    let sql = match of {
        BackfillOf::Job => S::UNFINISHED_EXECUTIONS.to_owned(),
        BackfillOf::Workflow => format!(
            "SELECT count(*) FROM workflow_runs WHERE workflow_uid = $1 AND state IN {UNFINISHED_RUN}"
        ),
    };
    let n = match s.row(&Statement::new(sql).bind(uid)).await? {
        Some(row) => S::int(&row, 0)?,
        None => 0,
    };
    Ok(u64::try_from(n).unwrap_or(0))
}

/// Creates backfill `b`, `running` from its first slot, in one statement and its audit entry
/// in the caller's transaction at `now` (Unix ms, UTC, the store's clock).
///
/// # Errors
/// [`Error::Conflict`] when a backfill with its id exists (nothing written); the store's
/// classified error; [`Error::Corrupt`] for a row that does not decode.
pub async fn backfill_create<T: Transaction>(
    tx: &mut T,
    b: &NewBackfill,
    now: i64,
) -> Result<BackfillRecord> {
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
    let Some(row) = tx.row(&st).await? else {
        return Err(Error::Conflict(format!("backfill {} exists", b.id)));
    };
    let created = <T::Store as Reader>::backfill(&row)?;
    let change = change(&b.namespace, &b.id, "create");
    super::audit::record(tx, &[change], now).await?;
    Ok(created)
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
    let cursor = step.expected_cursor.as_millisecond();
    let Some(last_id) = running_at(s.tx(), &step.id, cursor).await? else {
        return Ok(BackfillStepped::Stale);
    };
    if let Some(run) = step.runs.first() {
        // Runs of one workflow are created one at a time, as run creation does.
        hold_run_version(s.tx(), run).await?;
    }
    let planned = step.executions.len() + step.runs.len();
    if step.serial && planned > 0 && must_wait(s, step, last_id.as_deref(), now).await? {
        return Ok(BackfillStepped::Waiting);
    }
    let mut created = 0u32;
    let mut last = None;
    if !step.executions.is_empty() {
        created = s.insert_executions(step, now).await?;
        last = step.executions.last().map(|e| e.id.clone());
    }
    for run in &step.runs {
        if let Some(id) = s.create_run(run, now).await? {
            created += 1;
            last = Some(id);
        }
    }
    let found_taken = u64::try_from(planned).unwrap_or(u64::MAX) - u64::from(created);
    let advanced = BackfillAdvance {
        id: &step.id,
        cursor: step.cursor.as_millisecond(),
        created,
        existing: step.existing + found_taken,
        last_id: last,
        now,
        done: step.done,
    };
    advance(s.tx(), &advanced).await?;
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
        return unfinished_run_due(s.tx(), uid, now).await;
    }
    let Some(last) = last_id else {
        return Ok(false);
    };
    Ok(match execution_state(s.tx(), last).await? {
        Some(state) => !state
            .parse::<ExecutionState>()
            .map_err(Error::Corrupt)?
            .is_terminal(),
        None => false,
    })
}

/// The audit log's change `action` of backfill `id` of `namespace` (not versioned).
fn change(namespace: &str, id: &str, action: &'static str) -> crate::audit::Change {
    crate::audit::Change {
        resource: "backfill",
        namespace: namespace.to_owned(),
        name: id.to_owned(),
        action,
        version_before: None,
        version_after: None,
    }
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
    match backfill_state(s.tx(), namespace, id).await?.as_deref() {
        None => Err(Error::NotFound(format!("backfill {id}"))),
        Some("running") => {
            let cancelled = cancel(s.tx(), id, reason, now).await?;
            let change = change(namespace, id, "cancel");
            super::audit::record(s.tx(), &[change], now).await?;
            Ok(cancelled)
        }
        Some(other) => Err(Error::Conflict(format!("backfill {id} is {other}"))),
    }
}
