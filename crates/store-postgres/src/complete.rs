//! Attempts and completion: the heartbeats that extend running attempts' leases, a batch in
//! one statement, and the batch of completions written in one statement (and, for workflow
//! tasks, a second one in the transaction of their release), each fenced by its attempt number
//! and its lease (live for a heartbeat and a worker's completion, lapsed for the reaper's:
//! docs/guarantees.md, "G3 Fencing"), with its attempt row and its queue row.

use super::*;
use crate::liveness::WORKER_LEASE_STANDS;
use crate::reads::SqlTx;
use sundial_store::LateVerdict;
use sundial_store::completion::CompletionWrite;
use sundial_store::steps::release::release_runs;
use sundial_store::steps::{complete as step, late};

/// A row the completion statement returns: id, attempt, run id, `finished_at` (set when the
/// execution ended), and the statement's now (UTC ms).
type EndedRow = (String, i64, Option<String>, Option<i64>, i64);

pub(crate) async fn attempt_heartbeat_batch(
    store: &PgStore,
    attempts: &[AttemptRef],
) -> Result<Vec<Option<Timestamp>>> {
    if attempts.is_empty() {
        return Ok(Vec::new());
    }
    let now = store.now_ms(&store.pool).await?;
    let ids: Vec<&str> = attempts.iter().map(|a| a.id.as_str()).collect();
    let numbers: Vec<i64> = attempts.iter().map(|a| i64::from(a.attempt)).collect();
    // The queue rows are found by primary key from an array of the renewed ids, never by
    // joining the CTE (see the claim).
    let sql = format!(
        "WITH a AS (SELECT * FROM UNNEST($1::text[], $2::bigint[]) AS a(id, attempt)), \
         e AS (UPDATE executions x SET lease_expires_at = $3 + x.lease_ms FROM a \
           WHERE x.id = a.id AND x.attempt = a.attempt AND x.state = 'running' \
             AND (x.lease_expires_at IS NULL OR x.lease_expires_at >= $3) AND {WORKER_LEASE_STANDS} \
           RETURNING x.id, x.attempt, x.lease_expires_at), \
         q AS (UPDATE execution_queue q SET lease_expires_at = e.lease_expires_at FROM e \
           WHERE q.id = ANY(ARRAY(SELECT id FROM e)) AND q.id = e.id) \
         SELECT id, attempt, lease_expires_at FROM e"
    );
    let renewed: Vec<(String, i64, i64)> = sqlx::query_as(&sql)
        .bind(&ids)
        .bind(&numbers)
        .bind(now)
        .fetch_all(&store.pool)
        .await
        .map_err(db_err)?;
    let renewed: std::collections::HashMap<(String, i64), i64> = renewed
        .into_iter()
        .map(|(id, attempt, expiry)| ((id, attempt), expiry))
        .collect();
    attempts
        .iter()
        .map(|a| {
            renewed
                .get(&(a.id.clone(), i64::from(a.attempt)))
                .map(|&expiry| ts(expiry))
                .transpose()
        })
        .collect()
}

/// [`sundial_store::WorkerStore::attempt_judge_late`], written once
/// (`sundial_store::steps::late`) over [`LateTx`], in one transaction.
pub(crate) async fn attempt_judge_late(
    store: &PgStore,
    attempts: &[AttemptRef],
) -> Result<Vec<LateVerdict>> {
    let mut tx = store.begin().await?;
    let verdicts = late::judge_late(&mut LateTx(SqlTx(&mut tx), store), attempts).await?;
    commit(tx).await?;
    Ok(verdicts)
}

/// The statements of the late judgement on a PostgreSQL transaction.
struct LateTx<'t, 'c>(SqlTx<'t, 'c>, &'t PgStore);

impl<'t, 'c> late::LateStatements for LateTx<'t, 'c> {
    type Tx = SqlTx<'t, 'c>;
    const RECORD_MISSED: &'static str = "WITH e AS (UPDATE executions SET state = 'missed', \
          trigger = 'misfire', attempt = 0, worker = NULL, started_at = NULL, \
          attempt_started_at = NULL, worker_epoch = NULL, lease_expires_at = NULL, due_at = NULL, \
          finished_at = $2 WHERE id = ANY($1) RETURNING id) \
        DELETE FROM execution_queue q WHERE q.id = ANY(ARRAY(SELECT id FROM e))";

    fn tx(&mut self) -> &mut SqlTx<'t, 'c> {
        &mut self.0
    }

    async fn now(&mut self) -> Result<i64> {
        self.1.now_ms(&mut **self.0.0).await
    }

    /// The execution rows are locked (`FOR UPDATE`) before any queue row is touched, the lock
    /// order of every writer.
    async fn held(&mut self, attempts: &[AttemptRef], now: i64) -> Result<Vec<late::HeldAttempt>> {
        let ids: Vec<&str> = attempts.iter().map(|a| a.id.as_str()).collect();
        let numbers: Vec<i64> = attempts.iter().map(|a| i64::from(a.attempt)).collect();
        let rows = sqlx::query(&format!(
            "SELECT x.id, x.attempt, x.namespace, x.job, x.job_uid, x.trigger, x.run, \
               x.scheduled_at, x.fire_at \
             FROM executions x JOIN UNNEST($1::text[], $2::bigint[]) AS a(id, attempt) \
               ON x.id = a.id AND x.attempt = a.attempt \
             WHERE x.id = ANY($1) AND x.state = 'running' AND (x.lease_expires_at IS NULL OR x.lease_expires_at >= $3) \
               AND {WORKER_LEASE_STANDS} \
             ORDER BY x.id FOR UPDATE OF x"
        ))
        .bind(&ids)
        .bind(&numbers)
        .bind(now)
        .fetch_all(&mut **self.0.0)
        .await
        .map_err(db_err)?;
        rows.iter().map(rows::held_attempt).collect()
    }
}

/// [`sundial_store::WorkerStore::attempt_complete_batch`], written once
/// (`sundial_store::steps::complete`): the batch's job executions are one statement on its own
/// (no transaction around it), each completion still fenced on its own attempt number and
/// lease; that statement leaves workflow tasks alone and names them, and theirs is a second
/// statement, in a transaction that first locks their runs (the lock order of `workflows`) and
/// applies their release with them.
pub(crate) async fn attempt_complete_batch(
    store: &PgStore,
    completions: &[AttemptComplete],
) -> Result<Vec<bool>> {
    step::complete_batch(store, completions).await
}

impl step::CompletionStatements for PgStore {
    async fn complete_jobs(&self, writes: &[CompletionWrite<'_>]) -> Result<step::JobsCompleted> {
        let rows = complete_statement(&self.pool, self, writes, false).await?;
        let mut done = step::JobsCompleted::default();
        for (id, attempt, run, finished_at, _) in rows {
            if attempt < 0 {
                done.tasks.push(id);
            } else {
                done.ended.push(step::Ended {
                    id,
                    attempt,
                    run,
                    finished: finished_at.is_some(),
                });
            }
        }
        Ok(done)
    }

    async fn complete_tasks(&self, writes: &[CompletionWrite<'_>]) -> Result<step::TasksCompleted> {
        let mut tx = self.begin().await?;
        let done = step::complete_tasks(
            &mut TaskTx {
                tx: &mut tx,
                store: self,
            },
            writes,
        )
        .await?;
        if done.queued > 0 {
            notify_due(&mut tx).await?;
        }
        commit(tx).await?;
        // This process's workers are woken at once, without waiting for the notification to
        // come back through the listener's connection; other processes get the NOTIFY.
        if done.queued > 0
            && let Some(signals) = self.signals.get()
        {
            signals.due.notify_one();
        }
        Ok(done)
    }
}

/// The statements of the transaction that ends workflow tasks, on PostgreSQL.
struct TaskTx<'t, 'c> {
    tx: &'t mut Tx<'c>,
    store: &'t PgStore,
}

impl step::TaskCompletionStatements for TaskTx<'_, '_> {
    async fn hold_runs(&mut self, ids: &[&str]) -> Result<()> {
        workflows::lock_runs_of(self.tx, ids).await?;
        Ok(())
    }

    async fn apply(&mut self, writes: &[CompletionWrite<'_>]) -> Result<(Vec<step::Ended>, i64)> {
        let rows = complete_statement(&mut **self.tx, self.store, writes, true).await?;
        let now = rows.first().map_or(0, |r| r.4);
        let ended = rows
            .into_iter()
            .map(|(id, attempt, run, finished_at, _)| step::Ended {
                id,
                attempt,
                run,
                finished: finished_at.is_some(),
            })
            .collect();
        Ok((ended, now))
    }

    async fn release(&mut self, runs: &[String], now: i64) -> Result<usize> {
        release_runs(&mut SqlTx(self.tx), &self.store.workflow_specs, runs, now).await
    }
}

/// Applies in one statement the completions of job executions (`tasks` false) or of
/// workflow tasks (`tasks` true), each fenced by its attempt number and lease, leaving the others
/// alone. Returns a row per completion that applied (id, attempt, run id, `finished_at`, the
/// statement's now) and, with `tasks` false, a row with attempt −1 for each workflow task
/// among those it did not apply (found by primary key among those ids only, so a batch of
/// job executions pays for none).
async fn complete_statement<'e, E: sqlx::PgExecutor<'e>>(
    executor: E,
    store: &PgStore,
    writes: &[CompletionWrite<'_>],
    tasks: bool,
) -> Result<Vec<EndedRow>> {
    let test_now = store.clock.as_ref().map(|c| ms(c.now()));
    let n = writes.len();
    let mut ids = Vec::with_capacity(n);
    let mut attempts = Vec::with_capacity(n);
    let mut states = Vec::with_capacity(n);
    let mut retry_ins = Vec::with_capacity(n);
    let mut lapsed_only = Vec::with_capacity(n);
    let mut outcomes = Vec::with_capacity(n);
    let mut codes = Vec::with_capacity(n);
    let mut errors = Vec::with_capacity(n);
    let mut details = Vec::with_capacity(n);
    let mut outputs = Vec::with_capacity(n);
    // The transition is `sundial_store::completion`'s: a write with no retry delay finishes
    // (`finished_at` = now, the queue row deleted), one with a delay waits for its retry,
    // due that long after the statement's now.
    for w in writes {
        let c = w.completion;
        ids.push(c.attempt.id.as_str());
        attempts.push(i64::from(c.attempt.attempt));
        states.push(w.state.as_str());
        retry_ins.push(w.retry_in.map(|d| d.as_millis_i64()));
        lapsed_only.push(c.only_if_lapsed);
        outcomes.push(c.outcome.as_str());
        codes.push(c.status_code);
        errors.push(c.error.as_deref());
        details.push(c.detail.as_deref());
        outputs.push(
            c.output
                .as_deref()
                .filter(|_| w.state == sundial_core::execution::ExecutionState::Succeeded),
        );
    }
    // The queue rows are found by primary key from an array of the applied ids, never by
    // joining the CTE (see the claim). The job/task test reads `$12` through a sub-select:
    // with the parameter folded into the plan, `(run_id IS NOT NULL) = false` becomes
    // `run_id IS NULL`, the predicate of `executions_time` (0009), and on statistics taken
    // while the table was small the planner walked that whole index for every batch
    // (BENCHMARKS.md, "A partial index the completion must not use").
    let sql = format!(
        "WITH now AS (SELECT coalesce($1::bigint, {DB_NOW}) AS t), \
         c AS (SELECT * FROM UNNEST($2::text[], $3::bigint[], $4::text[], $5::bigint[], $6::bool[], \
                 $7::text[], $8::bigint[], $9::text[], $10::text[], $11::text[]) \
               AS c(id, attempt, state, retry_in, lapsed_only, outcome, status_code, error, detail, output)), \
         e AS (UPDATE executions x SET state = c.state, \
                 due_at = CASE WHEN c.retry_in IS NOT NULL \
                   THEN GREATEST((SELECT t FROM now) + c.retry_in, x.fire_at) END, \
                 finished_at = CASE WHEN c.retry_in IS NULL THEN (SELECT t FROM now) END, \
                 lease_expires_at = NULL, output = c.output \
               FROM c WHERE x.id = c.id AND x.attempt = c.attempt AND x.state = 'running' \
                 AND (x.run_id IS NOT NULL) = (SELECT $12::bool) \
                 AND CASE WHEN c.lapsed_only \
                   THEN x.lease_expires_at < (SELECT t FROM now) OR NOT {WORKER_LEASE_STANDS} \
                   ELSE (x.lease_expires_at IS NULL OR x.lease_expires_at >= (SELECT t FROM now)) \
                     AND {WORKER_LEASE_STANDS} END \
               RETURNING x.id, x.attempt, x.worker, x.attempt_started_at, x.due_at, x.run_id, x.finished_at), \
         done AS (DELETE FROM execution_queue q \
               WHERE q.id = ANY(ARRAY(SELECT id FROM e WHERE due_at IS NULL))), \
         retry AS (UPDATE execution_queue q SET due_at = e.due_at, lease_expires_at = NULL, worker_epoch = NULL \
               FROM e WHERE q.id = ANY(ARRAY(SELECT id FROM e WHERE due_at IS NOT NULL)) AND q.id = e.id), \
         a AS (INSERT INTO attempts (execution_id, attempt, worker, started_at, finished_at, outcome, \
                 status_code, error, detail) \
               SELECT e.id, e.attempt, coalesce(e.worker, ''), \
                 LEAST(coalesce(e.attempt_started_at, (SELECT t FROM now)), (SELECT t FROM now)), \
                 (SELECT t FROM now), c.outcome, \
                 c.status_code, c.error, c.detail \
               FROM e JOIN c ON c.id = e.id AND c.attempt = e.attempt \
               ON CONFLICT (execution_id, attempt) DO UPDATE SET finished_at = excluded.finished_at, \
                 outcome = excluded.outcome, status_code = excluded.status_code, \
                 error = excluded.error, detail = excluded.detail) \
         SELECT id, attempt, run_id, finished_at, (SELECT t FROM now) FROM e \
         UNION ALL \
         SELECT id, -1, run_id, NULL, 0 FROM executions \
           WHERE NOT $12 AND run_id IS NOT NULL AND id = ANY(ARRAY( \
             SELECT id FROM c EXCEPT SELECT id FROM e))"
    );
    sqlx::query_as(&sql)
        .bind(test_now)
        .bind(&ids)
        .bind(&attempts)
        .bind(&states)
        .bind(&retry_ins)
        .bind(&lapsed_only)
        .bind(&outcomes)
        .bind(&codes)
        .bind(&errors)
        .bind(&details)
        .bind(&outputs)
        .bind(tasks)
        .fetch_all(executor)
        .await
        .map_err(db_err)
}

/// The running executions whose lease lapsed before `$1`, the longest lapsed first, at most
/// `$2`, found through their queue rows (`sundial_store::steps::claim::shared::lapsed`).
pub(crate) const LAPSED: &str = "SELECT id, namespace, job, trigger, attempt, max_attempts, \
    scheduled_at, fire_at, started_at, lease_expires_at, worker_epoch, run FROM executions \
    WHERE id = ANY(ARRAY(SELECT id FROM execution_queue WHERE lease_expires_at < $1 \
      ORDER BY lease_expires_at LIMIT $2)) \
    AND state = 'running' ORDER BY lease_expires_at";
