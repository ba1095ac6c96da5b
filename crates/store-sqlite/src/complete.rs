//! Attempts and completion: the heartbeats that extend running attempts' leases, a batch in
//! one transaction, and the batch of completions written in multi-row `VALUES` statements, each fenced by its attempt
//! number and its lease (live for a worker's completion, lapsed for the reaper's), with its
//! attempt row.

use super::*;
use crate::liveness::WORKER_LEASE_STANDS;

/// A row a completion's update returns: id, attempt, worker, attempt start, run id,
/// `finished_at` (set when the execution ended).
type EndedRow = (
    String,
    i64,
    Option<String>,
    Option<i64>,
    Option<String>,
    Option<i64>,
);

pub(crate) const CLAIMED_COLUMNS: &str = "id, namespace, job, trigger, attempt, max_attempts, scheduled_at, fire_at, \
    started_at, lease_expires_at, worker_epoch, run";

/// Applies fenced completions inside `tx`, two statements whatever their number (and, for
/// workflow tasks that ended, their runs' release); per completion, false when stale
/// (nothing changed for it).
pub(crate) async fn complete_all_in_tx(
    tx: &mut Tx<'_>,
    specs: &sundial_store::workflow::SpecCache,
    completions: &[AttemptComplete],
    now: i64,
) -> Result<Completed> {
    if completions.is_empty() {
        return Ok(Completed {
            applied: Vec::new(),
            queued: 0,
        });
    }
    let mut updated: Vec<EndedRow> = Vec::with_capacity(completions.len());
    let writes = sundial_store::completion::plan(completions);
    for part in values::chunks(&writes) {
        let sql = format!(
            "UPDATE executions SET state = c.column3, \
               due_at = CASE WHEN c.column4 IS NOT NULL THEN max(c.column4, executions.fire_at) END, \
               finished_at = c.column5, lease_expires_at = NULL, output = c.column8 \
             FROM (VALUES {}) AS c \
             WHERE executions.id = c.column1 AND executions.attempt = c.column2 \
               AND executions.state = 'running' \
               AND CASE WHEN c.column6 = 0 \
                 THEN (executions.lease_expires_at IS NULL OR executions.lease_expires_at >= c.column7) \
                   AND {WORKER_LEASE_STANDS} \
                 ELSE executions.lease_expires_at < c.column7 OR NOT {WORKER_LEASE_STANDS} END \
             RETURNING executions.id, executions.attempt, executions.worker, \
               executions.attempt_started_at, executions.run_id, executions.finished_at",
            values::values_list(part.len(), 8)
        );
        let mut q = sqlx::query_as(&sql);
        for w in part {
            let c = w.completion;
            q = q
                .bind(&c.attempt.id)
                .bind(i64::from(c.attempt.attempt))
                .bind(w.state.as_str())
                .bind(w.due_at(now))
                .bind(w.finishes.then_some(now))
                .bind(i64::from(c.only_if_lapsed))
                .bind(now)
                .bind(
                    c.output
                        .as_deref()
                        .filter(|_| w.state == ExecutionState::Succeeded),
                );
        }
        updated.extend(q.fetch_all(&mut **tx).await.map_err(db_err)?);
    }
    // Workflow tasks that ended release their downstream in this transaction (W3: only the
    // completions that applied are here).
    let mut runs: Vec<String> = updated
        .iter()
        .filter(|u| u.5.is_some())
        .filter_map(|u| u.4.clone())
        .collect();
    runs.sort_unstable();
    runs.dedup();
    // The attempt's row is written now, once, with what the execution row held of it.
    let updated: std::collections::HashMap<(String, i64), (Option<String>, Option<i64>)> = updated
        .into_iter()
        .map(|(id, attempt, worker, started, _, _)| ((id, attempt), (worker, started)))
        .collect();
    let mut applied = Vec::with_capacity(completions.len());
    let mut attempts = Vec::with_capacity(updated.len());
    for c in completions {
        let key = (c.attempt.id.clone(), i64::from(c.attempt.attempt));
        let ended = updated.get(&key);
        applied.push(ended.is_some());
        if let Some((worker, started)) = ended {
            // An attempt held after a claim ahead and reaped before its fire time ends now.
            let started = started.unwrap_or(now).min(now);
            attempts.push((c, worker.as_deref().unwrap_or(""), started));
        }
    }
    for part in values::chunks(&attempts) {
        let sql = format!(
            "INSERT INTO attempts (execution_id, attempt, worker, started_at, finished_at, outcome, \
               status_code, error, detail) VALUES {} \
             ON CONFLICT (execution_id, attempt) DO UPDATE SET finished_at = excluded.finished_at, \
               outcome = excluded.outcome, status_code = excluded.status_code, \
               error = excluded.error, detail = excluded.detail",
            values::values_list(part.len(), 9)
        );
        let mut q = sqlx::query(&sql);
        for (c, worker, started) in part {
            q = q
                .bind(&c.attempt.id)
                .bind(i64::from(c.attempt.attempt))
                .bind(*worker)
                .bind(*started)
                .bind(now)
                .bind(c.outcome.as_str())
                .bind(c.status_code)
                .bind(c.error.as_deref())
                .bind(c.detail.as_deref());
        }
        q.execute(&mut **tx).await.map_err(db_err)?;
    }
    let queued = release::release_runs_in_tx(tx, specs, &runs, now).await?;
    Ok(Completed { applied, queued })
}

/// What a batch of completions did.
pub(crate) struct Completed {
    /// Per completion, in order: false when stale (nothing changed for it).
    pub(crate) applied: Vec<bool>,
    /// Workflow tasks their release made due.
    pub(crate) queued: usize,
}

pub(crate) async fn attempt_heartbeat_batch(
    store: &SqliteStore,
    attempts: &[AttemptRef],
) -> Result<Vec<Option<Timestamp>>> {
    if attempts.is_empty() {
        return Ok(Vec::new());
    }
    let now = ms(store.clock.now());
    let mut tx = store.begin().await?;
    let mut renewed = Vec::with_capacity(attempts.len());
    for a in attempts {
        let expiry: Option<i64> = sqlx::query_scalar(
            &format!(
                "UPDATE executions SET lease_expires_at = ?3 + lease_ms \
                 WHERE id = ?1 AND attempt = ?2 AND state = 'running' \
                   AND (lease_expires_at IS NULL OR lease_expires_at >= ?3) AND {WORKER_LEASE_STANDS} \
                 RETURNING lease_expires_at"
            ),
        )
        .bind(&a.id)
        .bind(i64::from(a.attempt))
        .bind(now)
        .fetch_optional(&mut *tx)
        .await
        .map_err(db_err)?;
        renewed.push(expiry.map(ts).transpose()?);
    }
    commit(tx).await?;
    Ok(renewed)
}

pub(crate) async fn attempt_complete_batch(
    store: &SqliteStore,
    completions: &[AttemptComplete],
) -> Result<Vec<bool>> {
    let now = ms(store.clock.now());
    let mut tx = store.begin().await?;
    let done = complete_all_in_tx(&mut tx, &store.workflow_specs, completions, now).await?;
    commit(tx).await?;
    if done.queued > 0 {
        store.signals.due.notify_one();
    }
    Ok(done.applied)
}

/// [`sundial_store::WorkerStore::attempt_give_back`]: one fenced update a given-back attempt,
/// in one transaction; the worker claim loops are woken when any was given back.
pub(crate) async fn attempt_give_back(
    store: &SqliteStore,
    attempts: &[AttemptRef],
) -> Result<Vec<bool>> {
    if attempts.is_empty() {
        return Ok(Vec::new());
    }
    let now = ms(store.clock.now());
    let mut tx = store.begin().await?;
    let mut given = Vec::with_capacity(attempts.len());
    for a in attempts {
        let back: Option<String> = sqlx::query_scalar(&format!(
            "UPDATE executions SET state = 'scheduled', attempt = attempt - 1, worker = NULL, \
               started_at = NULL, attempt_started_at = NULL, worker_epoch = NULL, \
               lease_expires_at = NULL, due_at = fire_at \
             WHERE id = ?1 AND attempt = ?2 AND attempt = 1 AND state = 'running' \
               AND (lease_expires_at IS NULL OR lease_expires_at >= ?3) AND {WORKER_LEASE_STANDS} \
             RETURNING id"
        ))
        .bind(&a.id)
        .bind(i64::from(a.attempt))
        .bind(now)
        .fetch_optional(&mut *tx)
        .await
        .map_err(db_err)?;
        given.push(back.is_some());
    }
    commit(tx).await?;
    if given.contains(&true) {
        store.signals.due.notify_one();
    }
    Ok(given)
}

pub(crate) async fn attempt_list_lapsed(
    store: &SqliteStore,
    limit: u32,
) -> Result<Vec<ClaimedExecution>> {
    let sql = format!(
        "SELECT {CLAIMED_COLUMNS} FROM executions WHERE state = 'running' AND lease_expires_at < ?1 \
         ORDER BY lease_expires_at LIMIT ?2"
    );
    let rows = sqlx::query(&sql)
        .bind(ms(store.clock.now()))
        .bind(i64::from(limit))
        .fetch_all(&store.reader)
        .await
        .map_err(db_err)?;
    rows.iter().map(rows::claimed).collect()
}
