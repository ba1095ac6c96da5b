//! The release's statements on PostgreSQL ([`ReleaseStatements`]; the step itself is
//! `sundial_store::steps::release`): lists travel as arrays (`ANY`, `UNNEST`), so every write
//! is one statement however many rows, and a task made due enters `execution_queue` in the
//! statement that queues it. The caller has locked the runs' rows in id order
//! (`workflows::lock_runs_of`, the lock order of `workflows.rs`), so two endings in one run
//! never release at once.
//!
//! It also holds `release_runs_in_tx` (the step on a transaction), a version's stored spec
//! (`spec_text`) and the attempt row of a task failed without running
//! (`record_failed_attempt`), which run creation shares.

use sundial_store::steps::release::{ReleaseStatements, RunRow, release_runs};
use sundial_store::workflow::{SpecCache, TaskFact};

use super::*;
use crate::rows::UNFINISHED_RUN;

/// The release's statements on an open transaction.
pub(crate) struct Release<'t, 'c>(pub(crate) &'t mut Tx<'c>);

impl ReleaseStatements for Release<'_, '_> {
    async fn unfinished_runs(&mut self, runs: &[String]) -> Result<Vec<RunRow>> {
        let rows: Vec<(String, String, i64, i64, String)> = sqlx::query_as(&format!(
            "SELECT id, workflow_uid, workflow_version, scheduled_at, params FROM workflow_runs \
             WHERE id = ANY($1) AND state IN {UNFINISHED_RUN}"
        ))
        .bind(runs)
        .fetch_all(&mut **self.0)
        .await
        .map_err(db_err)?;
        Ok(rows.into_iter().map(RunRow::from).collect())
    }

    async fn task_facts(&mut self, runs: &[&str]) -> Result<Vec<(String, String, TaskFact)>> {
        let rows = sqlx::query(
            "SELECT run_id, id, task, state, output FROM executions WHERE run_id = ANY($1)",
        )
        .bind(runs)
        .fetch_all(&mut **self.0)
        .await
        .map_err(db_err)?;
        rows.iter().map(rows::run_task_fact).collect()
    }

    async fn version_spec(&mut self, uid: &str, version: i64) -> Result<Option<String>> {
        spec_text(&mut **self.0, uid, version).await
    }

    async fn queue_tasks(&mut self, queued: &[(String, String)], now: i64) -> Result<()> {
        let (ids, runs): (Vec<&str>, Vec<&str>) = queued
            .iter()
            .map(|(id, run)| (id.as_str(), run.as_str()))
            .unzip();
        sqlx::query(
            "WITH q AS (SELECT * FROM UNNEST($1::text[], $2::text[]) AS q(id, run)), \
             e AS (UPDATE executions x SET state = 'scheduled', due_at = $3, fire_at = $3, \
                     queued_at = $3, run = q.run FROM q WHERE x.id = q.id \
                   RETURNING x.id, x.namespace, x.job_uid) \
             INSERT INTO execution_queue (id, namespace, job_uid, due_at) \
             SELECT id, namespace, job_uid, $3 FROM e",
        )
        .bind(&ids)
        .bind(&runs)
        .bind(now)
        .execute(&mut **self.0)
        .await
        .map_err(db_err)?;
        Ok(())
    }

    async fn end_tasks(&mut self, ended: &[(String, &'static str)], now: i64) -> Result<()> {
        set_states(
            self.0,
            "UPDATE executions x SET state = e.state, due_at = NULL, finished_at = $3 \
             FROM UNNEST($1::text[], $2::text[]) AS e(id, state) WHERE x.id = e.id",
            ended,
            now,
        )
        .await
    }

    async fn fail_task(&mut self, id: &str, error: &str, now: i64) -> Result<()> {
        let attempt: i64 = sqlx::query_scalar(
            "UPDATE executions SET state = 'failed', due_at = NULL, finished_at = $2, \
             attempt = attempt + 1 WHERE id = $1 RETURNING attempt",
        )
        .bind(id)
        .bind(now)
        .fetch_one(&mut **self.0)
        .await
        .map_err(db_err)?;
        record_failed_attempt(self.0, id, attempt, error, now).await
    }

    async fn end_runs(&mut self, ended: &[(String, &'static str)], now: i64) -> Result<()> {
        set_states(
            self.0,
            "UPDATE workflow_runs r SET state = e.state, finished_at = $3, timeout_at = NULL \
             FROM UNNEST($1::text[], $2::text[]) AS e(id, state) WHERE r.id = e.id",
            ended,
            now,
        )
        .await
    }
}

/// Runs `sql`, an update whose `$1` and `$2` are the ids and states of `pairs` as arrays and
/// `$3` is `now` (ms): one statement however many pairs.
///
/// # Errors
/// The store's, classified.
async fn set_states(
    tx: &mut Tx<'_>,
    sql: &str,
    pairs: &[(String, &'static str)],
    now: i64,
) -> Result<()> {
    let (ids, states): (Vec<&str>, Vec<&str>) = pairs
        .iter()
        .map(|(id, state)| (id.as_str(), *state))
        .unzip();
    sqlx::query(sql)
        .bind(&ids)
        .bind(&states)
        .bind(now)
        .execute(&mut **tx)
        .await
        .map_err(db_err)?;
    Ok(())
}

/// Applies the release of each run in `runs` (ids whose rows `tx` has locked; runs that are
/// terminal are left alone) inside `tx`: `sundial_store::steps::release` over [`Release`]'s
/// statements. Returns how many tasks became due (the caller notifies).
pub(crate) async fn release_runs_in_tx(
    tx: &mut Tx<'_>,
    cache: &SpecCache,
    runs: &[String],
    now: i64,
) -> Result<usize> {
    release_runs(&mut Release(tx), cache, runs, now).await
}

/// The attempt row of a task that failed without running (its target did not render).
pub(crate) async fn record_failed_attempt(
    tx: &mut Tx<'_>,
    id: &str,
    attempt: i64,
    error: &str,
    now: i64,
) -> Result<()> {
    sqlx::query(
        "INSERT INTO attempts (execution_id, attempt, worker, started_at, finished_at, outcome, error) \
         VALUES ($1, $2, '', $3, $3, 'permanent_failure', $4)",
    )
    .bind(id)
    .bind(attempt)
    .bind(now)
    .bind(error)
    .execute(&mut **tx)
    .await
    .map_err(db_err)?;
    Ok(())
}

/// The stored spec (JSON text) of version `version` of workflow incarnation `uid`.
pub(crate) async fn spec_text<'e, E: sqlx::PgExecutor<'e>>(
    executor: E,
    uid: &str,
    version: i64,
) -> Result<Option<String>> {
    sqlx::query_scalar("SELECT spec FROM workflow_versions WHERE uid = $1 AND version = $2")
        .bind(uid)
        .bind(version)
        .fetch_optional(executor)
        .await
        .map_err(db_err)
}
