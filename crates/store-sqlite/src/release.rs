//! The release's statements on SQLite ([`ReleaseStatements`]; the step itself is
//! `sundial_store::steps::release`): lists travel as one JSON text read with `json_each`, so
//! every write is one statement however many rows. SQLite's one writer serialises every
//! transaction, so two endings in one run never release at once.
//!
//! It also holds `release_runs_in_tx` (the step on a transaction), a version's parsed spec
//! through the cache (`version_spec`) and the attempt row of a task failed without running
//! (`record_failed_attempt`), which run creation shares.

use sundial_store::steps::release::{ReleaseStatements, RunRow, parsed_version, release_runs};
use sundial_store::workflow::{SpecCache, TaskFact};

use super::*;
use crate::rows::{UNFINISHED_RUN, to_json};

/// The release's statements on an open write transaction.
pub(crate) struct Release<'t, 'c>(pub(crate) &'t mut Tx<'c>);

impl ReleaseStatements for Release<'_, '_> {
    async fn unfinished_runs(&mut self, runs: &[String]) -> Result<Vec<RunRow>> {
        let rows: Vec<(String, String, i64, i64, String)> = sqlx::query_as(&format!(
            "SELECT id, workflow_uid, workflow_version, scheduled_at, params FROM workflow_runs \
             WHERE id IN (SELECT value FROM json_each(?1)) AND state IN {UNFINISHED_RUN}"
        ))
        .bind(to_json(&runs)?)
        .fetch_all(&mut **self.0)
        .await
        .map_err(db_err)?;
        Ok(rows.into_iter().map(RunRow::from).collect())
    }

    async fn task_facts(&mut self, runs: &[&str]) -> Result<Vec<(String, String, TaskFact)>> {
        let rows = sqlx::query(
            "SELECT run_id, id, task, state, output FROM executions \
             WHERE run_id IN (SELECT value FROM json_each(?1))",
        )
        .bind(to_json(&runs)?)
        .fetch_all(&mut **self.0)
        .await
        .map_err(db_err)?;
        rows.iter().map(rows::run_task_fact).collect()
    }

    async fn version_spec(&mut self, uid: &str, version: i64) -> Result<Option<String>> {
        sqlx::query_scalar("SELECT spec FROM workflow_versions WHERE uid = ?1 AND version = ?2")
            .bind(uid)
            .bind(version)
            .fetch_optional(&mut **self.0)
            .await
            .map_err(db_err)
    }

    async fn queue_tasks(&mut self, queued: &[(String, String)], now: i64) -> Result<()> {
        update_by_pairs(
            self.0,
            "executions",
            "state = 'scheduled', due_at = ?2, fire_at = ?2, queued_at = ?2, run = q.v",
            queued,
            now,
        )
        .await
    }

    async fn end_tasks(&mut self, ended: &[(String, &'static str)], now: i64) -> Result<()> {
        update_by_pairs(
            self.0,
            "executions",
            "state = q.v, due_at = NULL, finished_at = ?2",
            ended,
            now,
        )
        .await
    }

    async fn fail_task(&mut self, id: &str, error: &str, now: i64) -> Result<()> {
        let attempt: i64 = sqlx::query_scalar(
            "UPDATE executions SET state = 'failed', due_at = NULL, finished_at = ?2, \
             attempt = attempt + 1 WHERE id = ?1 RETURNING attempt",
        )
        .bind(id)
        .bind(now)
        .fetch_one(&mut **self.0)
        .await
        .map_err(db_err)?;
        record_failed_attempt(self.0, id, attempt, error, now).await
    }

    async fn end_runs(&mut self, ended: &[(String, &'static str)], now: i64) -> Result<()> {
        update_by_pairs(
            self.0,
            "workflow_runs",
            "state = q.v, finished_at = ?2, timeout_at = NULL",
            ended,
            now,
        )
        .await
    }
}

/// Updates the rows of `table` named by the first of each `(id, value)` pair, setting `set`,
/// in which `q.v` is the pair's value and `?2` is `now` (ms): one statement however many
/// pairs, none for none.
///
/// # Errors
/// The store's, classified.
async fn update_by_pairs<V: serde::Serialize + Sync>(
    tx: &mut Tx<'_>,
    table: &str,
    set: &str,
    pairs: &[(String, V)],
    now: i64,
) -> Result<()> {
    if pairs.is_empty() {
        return Ok(());
    }
    sqlx::query(&format!(
        "UPDATE {table} SET {set} \
         FROM (SELECT json_extract(value, '$[0]') AS id, json_extract(value, '$[1]') AS v \
               FROM json_each(?1)) AS q \
         WHERE {table}.id = q.id"
    ))
    .bind(to_json(&pairs)?)
    .bind(now)
    .execute(&mut **tx)
    .await
    .map_err(db_err)?;
    Ok(())
}

/// Applies the release of each run in `runs` (ids; repeats and runs that are terminal are
/// ignored) inside `tx`: `sundial_store::steps::release` over [`Release`]'s statements.
/// Returns how many tasks became due.
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
         VALUES (?1, ?2, '', ?3, ?3, 'permanent_failure', ?4)",
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

/// The parsed spec of a workflow version, from the cache or the database.
pub(crate) async fn version_spec(
    tx: &mut Tx<'_>,
    cache: &SpecCache,
    uid: &str,
    version: i64,
) -> Result<std::sync::Arc<sundial_store::workflow::ParsedVersion>> {
    parsed_version(&mut Release(tx), cache, uid, version).await
}
