//! Executions and history: one execution with its attempts, pages of history, cancel and
//! re-drive, and the bulk cancel the claim's `replace` uses.

use super::*;

/// The attempts of execution `$1`: the ended ones from `attempts`, the running one from the
/// execution row (its `attempts` row is written when it ends).
pub(crate) const ATTEMPTS_OF_EXECUTION: &str = "SELECT attempt, worker, started_at, finished_at, outcome, \
    status_code, error, detail FROM attempts WHERE execution_id = $1 \
    UNION ALL \
    SELECT e.attempt, coalesce(e.worker, ''), coalesce(e.attempt_started_at, e.started_at), \
      NULL::bigint, NULL::text, NULL::bigint, NULL::text, NULL::text \
    FROM executions e WHERE e.id = $1 AND e.state = 'running' \
      AND NOT EXISTS (SELECT 1 FROM attempts a WHERE a.execution_id = e.id AND a.attempt = e.attempt) \
    ORDER BY attempt";

/// Records the running attempts of executions `$1` (an array; those running) as ended
/// `cancelled` at `$2`.
pub(crate) const CLOSE_RUNNING_ATTEMPTS_CANCELLED: &str = "INSERT INTO attempts (execution_id, attempt, worker, \
    started_at, finished_at, outcome) \
    SELECT id, attempt, coalesce(worker, ''), coalesce(attempt_started_at, started_at, $2), $2, 'cancelled' \
    FROM executions WHERE id = ANY($1) AND state = 'running' \
    ON CONFLICT (execution_id, attempt) DO UPDATE SET finished_at = excluded.finished_at, \
      outcome = excluded.outcome WHERE attempts.finished_at IS NULL";

pub(crate) const EXECUTION_COLUMNS: &str = "id, namespace, job, job_version, trigger, scheduled_at, fire_at, \
    queued_at, started_at, finished_at, state, attempt, max_attempts, due_at, worker, run_id, task";

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

pub(crate) async fn execution_get(
    store: &PgStore,
    namespace: &str,
    id: &str,
) -> Result<Option<ExecutionRecord>> {
    let sql =
        format!("SELECT {EXECUTION_COLUMNS} FROM executions WHERE id = $1 AND namespace = $2");
    let Some(row) = sqlx::query(&sql)
        .bind(id)
        .bind(namespace)
        .fetch_optional(&store.pool)
        .await
        .map_err(db_err)?
    else {
        return Ok(None);
    };
    let mut record = rows::execution(&row)?;
    let attempts = sqlx::query(ATTEMPTS_OF_EXECUTION)
        .bind(id)
        .fetch_all(&store.pool)
        .await
        .map_err(db_err)?;
    record.attempts = attempts.iter().map(rows::attempt).collect::<Result<_>>()?;
    Ok(Some(record))
}

pub(crate) async fn execution_list(
    store: &PgStore,
    q: &ExecutionListQuery,
) -> Result<Vec<ExecutionRecord>> {
    let mut sql = format!("SELECT {EXECUTION_COLUMNS} FROM executions WHERE namespace = $1");
    if q.job.is_some() {
        // A job's history; a workflow of the same name keeps its tasks apart.
        sql.push_str(" AND job = $2 AND run_id IS NULL");
    }
    match q.state {
        Some(ExecutionState::Queued) => {
            sql.push_str(" AND state IN ('scheduled', 'queued') AND fire_at <= $3")
        }
        Some(ExecutionState::Scheduled) => {
            sql.push_str(" AND state = 'scheduled' AND fire_at > $3")
        }
        // The dead-letter listing pages through `dead_letters` (0008), never through the
        // whole history: the ids of one page, then their rows.
        Some(ExecutionState::Dead) if q.job.is_none() => {
            sql.push_str(
                " AND state = $4 AND id IN (SELECT d.id FROM dead_letters d WHERE d.namespace = $1",
            );
            if q.before.is_some() {
                sql.push_str(" AND (d.scheduled_at, d.id) < ($5, $6)");
            }
            sql.push_str(" ORDER BY d.scheduled_at DESC, d.id DESC LIMIT $7)");
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
    let now = store.now_ms(&store.pool).await?;
    let rows = sqlx::query(&sql)
        .bind(&q.namespace)
        .bind(q.job.as_deref())
        .bind(now)
        .bind(q.state.map(ExecutionState::as_str))
        .bind(before_at)
        .bind(before_id)
        .bind(i64::from(q.limit))
        .fetch_all(&store.pool)
        .await
        .map_err(db_err)?;
    rows.iter().map(rows::execution).collect()
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
