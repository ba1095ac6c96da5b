//! Attempts and completion: the heartbeats that extend running attempts' leases, a batch in
//! one transaction, and the batch of completions written in multi-row `VALUES` statements
//! (`sundial_store::steps::complete`), each fenced by its attempt number and its lease (live
//! for a worker's completion, lapsed for the reaper's), with its attempt row.

use super::*;
use crate::liveness::WORKER_LEASE_STANDS;
use crate::reads::SqlTx;
use sundial_store::LateVerdict;
use sundial_store::completion::CompletionWrite;
use sundial_store::steps::release::release_runs;
use sundial_store::steps::{complete as step, late};

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

/// Applies `writes` inside `tx` at `now` (UTC ms), each fenced by its attempt number and its
/// lease, with their attempt rows: two statements a chunk of the batch whatever their number.
/// Returns what applied.
async fn apply_in_tx(
    tx: &mut Tx<'_>,
    writes: &[CompletionWrite<'_>],
    now: i64,
) -> Result<Vec<step::Ended>> {
    let mut updated: Vec<EndedRow> = Vec::with_capacity(writes.len());
    for part in values::chunks(writes) {
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
    // The attempt's row is written now, once, with what the execution row held of it.
    let by_attempt: std::collections::HashMap<(&str, i64), &EndedRow> =
        updated.iter().map(|u| ((u.0.as_str(), u.1), u)).collect();
    let mut attempts = Vec::with_capacity(updated.len());
    for w in writes {
        let c = w.completion;
        if let Some(u) = by_attempt.get(&(c.attempt.id.as_str(), i64::from(c.attempt.attempt))) {
            // An attempt held after a claim ahead and reaped before its fire time ends now.
            let started = u.3.unwrap_or(now).min(now);
            attempts.push((c, u.2.as_deref().unwrap_or(""), started));
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
    Ok(updated
        .into_iter()
        .map(|(id, attempt, _, _, run, finished_at)| step::Ended {
            id,
            attempt,
            run,
            finished: finished_at.is_some(),
        })
        .collect())
}

/// [`sundial_store::WorkerStore::attempt_complete_batch`], written once
/// (`sundial_store::steps::complete`): the one writer applies the whole batch, workflow tasks
/// with their runs' release included, in one transaction.
pub(crate) async fn attempt_complete_batch(
    store: &SqliteStore,
    completions: &[AttemptComplete],
) -> Result<Vec<bool>> {
    step::complete_batch(store, completions).await
}

impl step::CompletionStatements for SqliteStore {
    /// The whole batch, in the transaction of [`step::CompletionStatements::complete_tasks`]
    /// (which serves job executions as well): no task is left for another transaction.
    async fn complete_jobs(&self, writes: &[CompletionWrite<'_>]) -> Result<step::JobsCompleted> {
        let done = self.complete_tasks(writes).await?;
        Ok(step::JobsCompleted {
            ended: done.ended,
            tasks: Vec::new(),
        })
    }

    async fn complete_tasks(&self, writes: &[CompletionWrite<'_>]) -> Result<step::TasksCompleted> {
        let now = ms(self.clock.now());
        let mut tx = self.begin().await?;
        let done = step::complete_tasks(
            &mut TaskTx {
                tx: &mut tx,
                specs: &self.workflow_specs,
                now,
            },
            writes,
        )
        .await?;
        commit(tx).await?;
        if done.queued > 0 {
            self.signals.due.notify_one();
        }
        Ok(done)
    }
}

/// The statements of the transaction of a batch of completions, job executions and workflow
/// tasks alike, on the embedded store's write transaction.
struct TaskTx<'t, 'c> {
    tx: &'t mut Tx<'c>,
    specs: &'t sundial_store::workflow::SpecCache,
    /// The process's clock, read before the transaction began.
    now: i64,
}

impl step::TaskCompletionStatements for TaskTx<'_, '_> {
    async fn hold_runs(&mut self, _ids: &[&str]) -> Result<()> {
        // The one writer holds every row until the commit.
        Ok(())
    }

    async fn apply(&mut self, writes: &[CompletionWrite<'_>]) -> Result<(Vec<step::Ended>, i64)> {
        Ok((apply_in_tx(self.tx, writes, self.now).await?, self.now))
    }

    async fn release(&mut self, runs: &[String], now: i64) -> Result<usize> {
        release_runs(&mut SqlTx(self.tx), self.specs, runs, now).await
    }
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

/// [`sundial_store::WorkerStore::attempt_judge_late`], written once
/// (`sundial_store::steps::late`) over [`LateTx`], in one write transaction.
pub(crate) async fn attempt_judge_late(
    store: &SqliteStore,
    attempts: &[AttemptRef],
) -> Result<Vec<LateVerdict>> {
    let now = ms(store.clock.now());
    let mut tx = store.begin().await?;
    let verdicts = late::judge_late(&mut LateTx(SqlTx(&mut tx), now), attempts).await?;
    commit(tx).await?;
    Ok(verdicts)
}

/// The statements of the late judgement on the embedded store's write transaction, whose
/// single writer holds the rows it reads until it commits, and the process's clock, read
/// before the transaction began.
struct LateTx<'t, 'c>(SqlTx<'t, 'c>, i64);

impl<'t, 'c> late::LateStatements for LateTx<'t, 'c> {
    type Tx = SqlTx<'t, 'c>;
    const RECORD_MISSED: &'static str = "UPDATE executions SET state = 'missed', \
        trigger = 'misfire', attempt = 0, worker = NULL, started_at = NULL, \
        attempt_started_at = NULL, worker_epoch = NULL, lease_expires_at = NULL, due_at = NULL, \
        finished_at = $2 WHERE id IN (SELECT value FROM json_each($1))";

    fn tx(&mut self) -> &mut SqlTx<'t, 'c> {
        &mut self.0
    }

    async fn now(&mut self) -> Result<i64> {
        Ok(self.1)
    }

    async fn held(&mut self, attempts: &[AttemptRef], now: i64) -> Result<Vec<late::HeldAttempt>> {
        let sql = format!(
            "SELECT id, attempt, namespace, job, job_uid, trigger, run, scheduled_at, fire_at \
             FROM executions WHERE id = ?1 AND attempt = ?2 AND state = 'running' \
               AND (lease_expires_at IS NULL OR lease_expires_at >= ?3) AND {WORKER_LEASE_STANDS}"
        );
        let mut held = Vec::with_capacity(attempts.len());
        for a in attempts {
            let row = sqlx::query(&sql)
                .bind(&a.id)
                .bind(i64::from(a.attempt))
                .bind(now)
                .fetch_optional(&mut **self.0.0)
                .await
                .map_err(db_err)?;
            if let Some(row) = row {
                held.push(rows::held_attempt(&row)?);
            }
        }
        Ok(held)
    }
}

/// The running executions whose lease lapsed before `$1`, the longest lapsed first, at most
/// `$2` (`sundial_store::steps::claim::shared::lapsed`).
pub(crate) const LAPSED: &str = "SELECT id, namespace, job, trigger, attempt, max_attempts, \
    scheduled_at, fire_at, started_at, lease_expires_at, worker_epoch, run FROM executions \
    WHERE state = 'running' AND lease_expires_at < $1 ORDER BY lease_expires_at LIMIT $2";
