//! History retention (`MaintenanceStore::history_prune`, docs/configuration.md "history_retention"):
//! the history walked in (slot, id) order from where the last call stopped, the expired rows
//! of each step deleted in one write transaction; the walk is written once
//! (`sundial_store::steps::retention`) over this file's statements.
//!
//! Expired means finished before the cut-off and not the newest finished execution of its
//! job (or run of its workflow) while that job (workflow) exists. The walk reads the slot
//! indexes of migration 0009, the newest-finished test reads `executions_job`
//! (`workflow_runs_history`). A deleted execution takes its attempts with it; a dead letter
//! goes by the delete trigger of migration 0008.

use sundial_store::steps::retention::{self as steps, RetentionStatements};
use sundial_store::{HistoryKind, HistoryPrune, HistoryPruned};

use super::*;

/// The expiry test of an execution `e` of a job at the cut-off `?1`.
const EXECUTION_EXPIRED: &str = "(e.finished_at IS NOT NULL AND e.finished_at < ?1 \
    AND e.state IN ('succeeded', 'failed', 'dead', 'cancelled', 'skipped', 'missed', 'upstream_failed') \
    AND (NOT EXISTS (SELECT 1 FROM jobs j WHERE j.namespace = e.namespace AND j.name = e.job) \
         OR EXISTS (SELECT 1 FROM executions n \
                    WHERE n.namespace = e.namespace AND n.job = e.job \
                      AND n.scheduled_at >= e.scheduled_at AND n.id <> e.id \
                      AND (n.scheduled_at > e.scheduled_at OR n.id > e.id) \
                      AND n.finished_at IS NOT NULL AND n.run_id IS NULL)))";

/// The expiry test of a run `e` at the cut-off `?1`.
const RUN_EXPIRED: &str = "(e.finished_at IS NOT NULL AND e.finished_at < ?1 \
    AND e.state IN ('succeeded', 'failed', 'cancelled', 'skipped', 'missed') \
    AND NOT EXISTS (SELECT 1 FROM executions t WHERE t.run_id = e.id AND t.finished_at IS NULL) \
    AND (NOT EXISTS (SELECT 1 FROM workflows w WHERE w.namespace = e.namespace AND w.name = e.workflow) \
         OR EXISTS (SELECT 1 FROM workflow_runs n \
                    WHERE n.namespace = e.namespace AND n.workflow = e.workflow \
                      AND n.scheduled_at >= e.scheduled_at AND n.id <> e.id \
                      AND (n.scheduled_at > e.scheduled_at OR n.id > e.id) \
                      AND n.finished_at IS NOT NULL)))";

pub(crate) async fn history_prune(
    store: &SqliteStore,
    prune: &HistoryPrune,
) -> Result<HistoryPruned> {
    let before = ms(prune.before);
    let (table, expired, scope) = walk(prune.kind);
    if prune.dry_run {
        let deleted: i64 = sqlx::query_scalar(&format!(
            "SELECT count(*) FROM {table} e WHERE {scope}e.scheduled_at < ?1 AND {expired}"
        ))
        .bind(before)
        .fetch_one(&store.reader)
        .await
        .map_err(db_err)?;
        let task_executions: i64 = if prune.kind == HistoryKind::Runs {
            sqlx::query_scalar(&format!(
                "SELECT count(*) FROM executions WHERE run_id IN \
                   (SELECT e.id FROM workflow_runs e WHERE e.scheduled_at < ?1 AND {RUN_EXPIRED})"
            ))
            .bind(before)
            .fetch_one(&store.reader)
            .await
            .map_err(db_err)?
        } else {
            0
        };
        return Ok(HistoryPruned {
            deleted: u64::try_from(deleted).unwrap_or(0),
            task_executions: u64::try_from(task_executions).unwrap_or(0),
            next: None,
        });
    }
    let mut tx = store.begin().await?;
    let done = steps::history_walk(&mut RetentionTx(&mut tx), prune).await?;
    commit(tx).await?;
    Ok(done)
}

/// The statements of a retention step (`sundial_store::steps::retention`) on the embedded
/// store's write transaction: its single writer holds every row it reads until it commits.
struct RetentionTx<'t, 'c>(&'t mut Tx<'c>);

/// The table of a walk, its expiry test, and the condition that scopes it to its rows.
fn walk(kind: HistoryKind) -> (&'static str, &'static str, &'static str) {
    match kind {
        HistoryKind::Executions => ("executions", EXECUTION_EXPIRED, "e.run_id IS NULL AND "),
        HistoryKind::Runs => ("workflow_runs", RUN_EXPIRED, ""),
    }
}

impl RetentionStatements for RetentionTx<'_, '_> {
    async fn page(
        &mut self,
        kind: HistoryKind,
        before: i64,
        (after_at, after_id): (i64, &str),
        limit: u32,
    ) -> Result<Vec<(String, i64, bool)>> {
        let (table, expired, scope) = walk(kind);
        sqlx::query_as(&format!(
            "SELECT e.id, e.scheduled_at, {expired} FROM {table} e \
             WHERE {scope}e.scheduled_at < ?1 AND (e.scheduled_at, e.id) > (?2, ?3) \
             ORDER BY e.scheduled_at, e.id LIMIT ?4"
        ))
        .bind(before)
        .bind(after_at)
        .bind(after_id)
        .bind(i64::from(limit))
        .fetch_all(&mut **self.0)
        .await
        .map_err(db_err)
    }

    async fn hold(&mut self, _: HistoryKind, ids: &[String], _: i64) -> Result<Vec<String>> {
        Ok(ids.to_vec())
    }

    async fn delete(&mut self, kind: HistoryKind, ids: &[String]) -> Result<(u64, u64)> {
        let (table, _, _) = walk(kind);
        let ids = serde_json::to_string(ids).map_err(|e| Error::Defect(Box::new(e)))?;
        let mut task_executions = 0;
        if kind == HistoryKind::Runs {
            sqlx::query(
                "DELETE FROM attempts WHERE execution_id IN \
                   (SELECT id FROM executions WHERE run_id IN (SELECT value FROM json_each(?1)))",
            )
            .bind(&ids)
            .execute(&mut **self.0)
            .await
            .map_err(db_err)?;
            task_executions = sqlx::query(
                "DELETE FROM executions WHERE run_id IN (SELECT value FROM json_each(?1))",
            )
            .bind(&ids)
            .execute(&mut **self.0)
            .await
            .map_err(db_err)?
            .rows_affected();
        } else {
            sqlx::query(
                "DELETE FROM attempts WHERE execution_id IN (SELECT value FROM json_each(?1))",
            )
            .bind(&ids)
            .execute(&mut **self.0)
            .await
            .map_err(db_err)?;
        }
        let deleted = sqlx::query(&format!(
            "DELETE FROM {table} WHERE id IN (SELECT value FROM json_each(?1))"
        ))
        .bind(&ids)
        .execute(&mut **self.0)
        .await
        .map_err(db_err)?
        .rows_affected();
        Ok((deleted, task_executions))
    }
}
