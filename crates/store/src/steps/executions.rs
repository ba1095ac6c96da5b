//! An execution's cancel (docs/policies.md) and re-drive (docs/failure-classes.md, "Dead letter and
//! re-drive"), and the bulk cancel of a claim's `replace` and a run's cancel, written once over a
//! store's open [`Transaction`]; what the dialects say differently (PostgreSQL's queue table, which
//! a cancel empties and a re-drive fills) is in [`ExecutionDialect`]. The caller opens the
//! transaction, takes the store's now (Unix ms, UTC), runs a step, signals what it must and commits
//! only when the step returns `Ok` (an error has written nothing the caller keeps).
//!
//! Invariants: a cancel ends every execution it names as `cancelled` at `now`, whatever its state,
//! with no due time and no lease, and records a running one's attempt as ended `cancelled` (an
//! attempt already recorded as ended keeps its ending); one execution's cancel refuses an execution
//! already in a terminal state. A re-drive queues only a `dead` or `failed` execution that is no
//! task of a workflow run, due at once, with `extra_attempts` more attempts than it has made.

use crate::reads::{Reader, Statement, Transaction};
use crate::steps::listings::{self, EXECUTION_COLUMNS};
use crate::{Error, ExecutionRecord, Result};

/// What the stores say differently about an execution's cancel and re-drive, supplied by
/// each store's [`Reader`].
pub trait ExecutionDialect: Reader {
    /// The statement, if the store keeps a queue apart from the execution rows, that takes
    /// executions `$1` (a [`crate::reads::Value::Texts`]) off it, run after their rows are
    /// updated (and so locked).
    const DEQUEUE: Option<&'static str>;

    /// The statement that re-drives execution `$1` of namespace `$2` at `$3` (the now, Unix
    /// ms, UTC) with `$4` more attempts than it has made, when it is `dead` or `failed` and no
    /// task of a run: queued, due at `$3`, queued at `$3`, not finished. It changes one row
    /// when it re-drives the execution, none otherwise.
    const REDRIVE: &'static str;
}

/// Cancels executions `ids` (whatever their state) at `now` (Unix ms, UTC) and records their
/// running attempts as ended `cancelled`: a statement a kind of write whatever their number.
///
/// # Errors
/// The store's classified error.
pub async fn cancel_all<T: Transaction>(tx: &mut T, ids: &[String], now: i64) -> Result<()>
where
    T::Store: ExecutionDialect,
{
    let close = format!(
        "INSERT INTO attempts (execution_id, attempt, worker, started_at, finished_at, outcome) \
         SELECT id, attempt, coalesce(worker, ''), coalesce(attempt_started_at, started_at, $2), \
           $2, 'cancelled' \
         FROM executions WHERE {} AND state = 'running' \
         ON CONFLICT (execution_id, attempt) DO UPDATE SET finished_at = excluded.finished_at, \
           outcome = excluded.outcome WHERE attempts.finished_at IS NULL",
        T::Store::one_of("id", 1)
    );
    tx.execute(&Statement::new(close).bind(ids).bind(now))
        .await?;
    let cancel = format!(
        "UPDATE executions SET state = 'cancelled', due_at = NULL, lease_expires_at = NULL, \
         finished_at = $2 WHERE {}",
        T::Store::one_of("id", 1)
    );
    tx.execute(&Statement::new(cancel).bind(ids).bind(now))
        .await?;
    if let Some(dequeue) = <T::Store as ExecutionDialect>::DEQUEUE {
        // A statement of its own, after the update has locked the execution rows: its
        // snapshot sees a queue row that a re-drive committed while the update waited.
        tx.execute(&Statement::new(dequeue).bind(ids)).await?;
    }
    Ok(())
}

/// Cancels execution `id` of `namespace` at `now` (Unix ms, UTC) as [`cancel_all`] does, its
/// row held until the transaction ends where the store can ([`Reader::FOR_UPDATE`]). Returns
/// the execution as it was before the cancel (without its attempts): the caller signals a
/// running one's worker and decides the downstream of a run's task.
///
/// # Errors
/// [`Error::NotFound`] when there is no such execution; [`Error::Conflict`] when it is in a
/// terminal state already; [`Error::Corrupt`] for a row that does not decode; the store's
/// classified error.
pub async fn execution_cancel<T: Transaction>(
    tx: &mut T,
    namespace: &str,
    id: &str,
    now: i64,
) -> Result<ExecutionRecord>
where
    T::Store: ExecutionDialect,
{
    let sql = format!(
        "SELECT {EXECUTION_COLUMNS} FROM executions WHERE id = $1 AND namespace = $2{}",
        <T::Store as Reader>::FOR_UPDATE
    );
    let row = tx
        .row(&Statement::new(sql).bind(id).bind(namespace))
        .await?
        .ok_or_else(|| Error::NotFound(format!("execution {id}")))?;
    let before = T::Store::execution(&row)?;
    if before.state.is_terminal() {
        return Err(Error::Conflict(format!(
            "execution {id} is already {}",
            before.state
        )));
    }
    cancel_all(tx, &[id.to_owned()], now).await?;
    super::audit::record(tx, &[change(namespace, id, "cancel")], now).await?;
    Ok(before)
}

/// Re-drives execution `id` of `namespace` at `now` (Unix ms, UTC) with `extra_attempts` more
/// attempts ([`ExecutionDialect::REDRIVE`]).
///
/// # Errors
/// [`Error::NotFound`] when there is no such execution; [`Error::Conflict`] when it is a task
/// of a workflow run (retry the run instead) or neither `dead` nor `failed`; the store's
/// classified error.
pub async fn execution_redrive<T: Transaction>(
    tx: &mut T,
    namespace: &str,
    id: &str,
    now: i64,
    extra_attempts: u32,
) -> Result<()>
where
    T::Store: ExecutionDialect,
{
    let redrive = Statement::new(<T::Store as ExecutionDialect>::REDRIVE)
        .bind(id)
        .bind(namespace)
        .bind(now)
        .bind(i64::from(extra_attempts));
    if tx.execute(&redrive).await? > 0 {
        return super::audit::record(tx, &[change(namespace, id, "retry")], now).await;
    }
    let sql =
        format!("SELECT {EXECUTION_COLUMNS} FROM executions WHERE id = $1 AND namespace = $2");
    let found = tx
        .row(&Statement::new(sql).bind(id).bind(namespace))
        .await?;
    Err(match found.as_ref().map(T::Store::execution).transpose()? {
        None => Error::NotFound(format!("execution {id}")),
        Some(ExecutionRecord {
            run_id: Some(run), ..
        }) => Error::Conflict(format!(
            "execution {id} is a task of workflow run {run}; retry the run instead"
        )),
        Some(e) => Error::Conflict(format!(
            "execution {id} is {}; only dead or failed executions can be re-driven",
            e.state
        )),
    })
}

/// The audit log's change `action` of execution `id` of `namespace` (not versioned).
fn change(namespace: &str, id: &str, action: &'static str) -> crate::audit::Change {
    crate::audit::Change {
        resource: "execution",
        namespace: namespace.to_owned(),
        name: id.to_owned(),
        action,
        version_before: None,
        version_after: None,
    }
}

/// Execution `id` of `namespace` with its attempts, as the caller's step left it (read after
/// the commit).
///
/// # Errors
/// [`Error::NotFound`] when it is gone (a retention pass may have deleted it since); the
/// store's classified error.
pub async fn execution_after<S: Reader>(
    store: &S,
    namespace: &str,
    id: &str,
) -> Result<ExecutionRecord> {
    listings::execution_get(store, namespace, id)
        .await?
        .ok_or_else(|| Error::NotFound(format!("execution {id}")))
}
