//! The release's updates on SQLite ([`ReleaseStatements`]; the step itself, its reads and a task's
//! failing are `sundial_store::steps::release`): lists travel as one JSON text read with
//! `json_each`, so every write is one statement however many rows. SQLite's one writer serialises
//! every transaction, so two endings in one run never release at once.

use sundial_store::steps::release::ReleaseStatements;

use super::*;
use crate::rows::to_json;

/// The release's statements on an open write transaction: this store's
/// [`SqlTx`](crate::reads::SqlTx), by the name the steps that extend the release (a run's
/// cancel, retry and expiry) know it.
pub(crate) use crate::reads::SqlTx as Release;

/// The updates, each one statement over a JSON array of (id, value) pairs.
impl ReleaseStatements for Release<'_, '_> {
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
