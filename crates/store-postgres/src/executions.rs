//! Executions and history: one execution with its attempts, pages of history, cancel and
//! re-drive, and the bulk cancel the claim's `replace` uses.

use super::*;

/// Records the running attempts of executions `$1` (an array; those running) as ended
/// `cancelled` at `$2`.
pub(crate) const CLOSE_RUNNING_ATTEMPTS_CANCELLED: &str = "INSERT INTO attempts (execution_id, attempt, worker, \
    started_at, finished_at, outcome) \
    SELECT id, attempt, coalesce(worker, ''), coalesce(attempt_started_at, started_at, $2), $2, 'cancelled' \
    FROM executions WHERE id = ANY($1) AND state = 'running' \
    ON CONFLICT (execution_id, attempt) DO UPDATE SET finished_at = excluded.finished_at, \
      outcome = excluded.outcome WHERE attempts.finished_at IS NULL";

/// Cancels one execution (whatever its state) and closes its open attempt as `cancelled`.
pub(crate) async fn cancel_in_tx(tx: &mut Tx<'_>, id: &str, now: i64) -> Result<()> {
    cancel_all_in_tx(tx, &[id], now).await
}

/// Cancels executions (whatever their state) and closes their open attempts as `cancelled`,
/// three statements whatever their number.
pub(crate) async fn cancel_all_in_tx(tx: &mut Tx<'_>, ids: &[&str], now: i64) -> Result<()> {
    sqlx::query(CLOSE_RUNNING_ATTEMPTS_CANCELLED)
        .bind(ids)
        .bind(now)
        .execute(&mut **tx)
        .await
        .map_err(db_err)?;
    sqlx::query(
        "UPDATE executions SET state = 'cancelled', due_at = NULL, lease_expires_at = NULL, finished_at = $2 \
         WHERE id = ANY($1)",
    )
    .bind(ids)
    .bind(now)
    .execute(&mut **tx)
    .await
    .map_err(db_err)?;
    // A statement of its own, after the update has locked the execution rows: its snapshot
    // sees a queue row that a re-drive committed while the update waited for that lock.
    sqlx::query("DELETE FROM execution_queue WHERE id = ANY($1)")
        .bind(ids)
        .execute(&mut **tx)
        .await
        .map_err(db_err)?;
    Ok(())
}

pub(crate) async fn execution_cancel(
    store: &PgStore,
    namespace: &str,
    id: &str,
) -> Result<ExecutionRecord> {
    let mut tx = store.begin().await?;
    let now = store.now_ms(&mut *tx).await?;
    // A workflow task's run is locked before the task (the lock order of `workflows`).
    let runs = workflows::lock_runs_of(&mut tx, &[id]).await?;
    let row = sqlx::query(
        "SELECT state, attempt FROM executions WHERE id = $1 AND namespace = $2 FOR UPDATE",
    )
    .bind(id)
    .bind(namespace)
    .fetch_optional(&mut *tx)
    .await
    .map_err(db_err)?
    .ok_or_else(|| Error::NotFound(format!("execution {id}")))?;
    let state: ExecutionState = rows::parse(row.try_get::<String, _>("state").map_err(db_err)?)?;
    if state.is_terminal() {
        return Err(Error::Conflict(format!(
            "execution {id} is already {state}"
        )));
    }
    cancel_in_tx(&mut tx, id, now).await?;
    if state == ExecutionState::Running {
        notify_cancelled(&mut tx, id).await?;
    }
    // A workflow task's cancel is an ending like any other: its downstream is decided now.
    if release::release_runs_in_tx(&mut tx, &store.workflow_specs, &runs, now).await? > 0 {
        notify_due(&mut tx).await?;
    }
    commit(tx).await?;
    store
        .execution_get(namespace, id)
        .await?
        .ok_or_else(|| Error::NotFound(format!("execution {id}")))
}

pub(crate) async fn execution_redrive(
    store: &PgStore,
    namespace: &str,
    id: &str,
    extra_attempts: u32,
) -> Result<ExecutionRecord> {
    let mut tx = store.begin().await?;
    crate::retention::refuse_if_dropping(&mut tx, id).await?;
    let now = store.now_ms(&mut *tx).await?;
    let updated = sqlx::query(
        "WITH e AS (UPDATE executions SET state = 'queued', due_at = $3, queued_at = $3, finished_at = NULL, \
           max_attempts = attempt + $4 WHERE id = $1 AND namespace = $2 AND state IN ('dead', 'failed') \
           AND run_id IS NULL \
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
        let found: Option<(String, Option<String>)> =
            sqlx::query_as("SELECT state, run_id FROM executions WHERE id = $1 AND namespace = $2")
                .bind(id)
                .bind(namespace)
                .fetch_optional(&mut *tx)
                .await
                .map_err(db_err)?;
        return Err(match found {
            None => Error::NotFound(format!("execution {id}")),
            Some((_, Some(run))) => Error::Conflict(format!(
                "execution {id} is a task of workflow run {run}; retry the run instead"
            )),
            Some((s, None)) => Error::Conflict(format!(
                "execution {id} is {s}; only dead or failed executions can be re-driven"
            )),
        });
    }
    notify_due(&mut tx).await?;
    commit(tx).await?;
    store
        .execution_get(namespace, id)
        .await?
        .ok_or_else(|| Error::NotFound(format!("execution {id}")))
}
