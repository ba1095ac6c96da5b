//! History retention (`MaintenanceStore::history_prune`, docs/configuration.md "history_retention"):
//! the history walked in (slot, id) order from where the last call stopped, the expired rows
//! of each step deleted in one write transaction.
//!
//! Expired means finished before the cut-off and not the newest finished execution of its
//! job (or run of its workflow) while that job (workflow) exists. The walk reads the slot
//! indexes of migration 0009, the newest-finished test reads `executions_job`
//! (`workflow_runs_history`). A deleted execution takes its attempts with it; a dead letter
//! goes by the delete trigger of migration 0008.

use sundial_store::{HistoryKey, HistoryKind, HistoryPrune, HistoryPruned};

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
    let (table, expired, scope) = match prune.kind {
        HistoryKind::Executions => ("executions", EXECUTION_EXPIRED, "e.run_id IS NULL AND "),
        HistoryKind::Runs => ("workflow_runs", RUN_EXPIRED, ""),
    };
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
    let (after_at, after_id) = prune.after.as_ref().map_or((i64::MIN, String::new()), |k| {
        (ms(k.scheduled_at), k.id.clone())
    });
    let mut tx = store.begin().await?;
    let seen: Vec<(String, i64, bool)> = sqlx::query_as(&format!(
        "SELECT e.id, e.scheduled_at, {expired} FROM {table} e \
         WHERE {scope}e.scheduled_at < ?1 AND (e.scheduled_at, e.id) > (?2, ?3) \
         ORDER BY e.scheduled_at, e.id LIMIT ?4"
    ))
    .bind(before)
    .bind(after_at)
    .bind(&after_id)
    .bind(i64::from(prune.limit))
    .fetch_all(&mut *tx)
    .await
    .map_err(db_err)?;
    let doomed: Vec<&str> = seen
        .iter()
        .filter(|(_, _, expired)| *expired)
        .map(|(id, _, _)| id.as_str())
        .collect();
    let mut done = HistoryPruned::default();
    if !doomed.is_empty() {
        let ids = serde_json::to_string(&doomed).map_err(|e| Error::Defect(Box::new(e)))?;
        if prune.kind == HistoryKind::Runs {
            sqlx::query(
                "DELETE FROM attempts WHERE execution_id IN \
                   (SELECT id FROM executions WHERE run_id IN (SELECT value FROM json_each(?1)))",
            )
            .bind(&ids)
            .execute(&mut *tx)
            .await
            .map_err(db_err)?;
            done.task_executions = sqlx::query(
                "DELETE FROM executions WHERE run_id IN (SELECT value FROM json_each(?1))",
            )
            .bind(&ids)
            .execute(&mut *tx)
            .await
            .map_err(db_err)?
            .rows_affected();
        } else {
            sqlx::query(
                "DELETE FROM attempts WHERE execution_id IN (SELECT value FROM json_each(?1))",
            )
            .bind(&ids)
            .execute(&mut *tx)
            .await
            .map_err(db_err)?;
        }
        done.deleted = sqlx::query(&format!(
            "DELETE FROM {table} WHERE id IN (SELECT value FROM json_each(?1))"
        ))
        .bind(&ids)
        .execute(&mut *tx)
        .await
        .map_err(db_err)?
        .rows_affected();
    }
    commit(tx).await?;
    if seen.len() == prune.limit as usize
        && let Some((id, at, _)) = seen.last()
    {
        done.next = Some(HistoryKey {
            scheduled_at: ts(*at)?,
            id: id.clone(),
        });
    }
    Ok(done)
}
