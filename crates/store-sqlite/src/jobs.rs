//! Jobs: read, list, write (one by one or a batch of plain inserts in one statement), delete;
//! a write steers the job's not-started executions in the same transaction (`PendingExecutions`).
//! The writes are written once (`sundial_store::steps::jobs`) over this file's statements.

use super::*;
use crate::reads::SqlTx;
use sundial_store::steps::jobs::{self as steps, JobStatements};

pub(crate) const JOB_COLUMNS: &str = "j.namespace, j.name, j.uid, j.shard, j.version, j.spec, j.created_at, \
    j.updated_at, j.next_slot_at, j.next_fire_at";

/// The job's last execution (the latest slot whose fire time `$1` has reached), read through
/// `executions_job` in slot order; and the fire time of its first execution still waiting.
pub(crate) const LAST_EXECUTION: &str = "(SELECT e.id || '|' || e.state || '|' || e.scheduled_at \
    FROM executions e WHERE e.namespace = j.namespace AND e.job = j.name AND e.job_uid = j.uid \
    AND e.fire_at <= $1 ORDER BY e.scheduled_at DESC, e.id DESC LIMIT 1) AS last_execution, \
    (SELECT min(e.fire_at) FROM executions e WHERE e.job_uid = j.uid AND e.due_at IS NOT NULL \
    AND e.attempt = 0) AS pending_fire_at";

impl JobStatements for SqlTx<'_, '_> {
    async fn insert(&mut self, writes: &[JobWrite], now: i64) -> Result<Vec<(String, String)>> {
        let mut rows = Vec::with_capacity(writes.len());
        for w in writes {
            let r = &w.record;
            let spec = serde_json::to_string(&r.spec).map_err(|e| Error::Corrupt(e.to_string()))?;
            rows.push(serde_json::json!([
                r.spec.namespace,
                r.spec.name,
                r.uid,
                r.shard,
                spec,
                r.spec.paused,
                r.next_slot_at.map(ms),
                r.next_fire_at.map(ms)
            ]));
        }
        // `WHERE true` keeps SQLite from reading `ON CONFLICT` as part of the SELECT's join.
        sqlx::query_as(
            "INSERT INTO jobs (namespace, name, uid, shard, version, spec, paused, created_at, updated_at, \
               next_slot_at, next_fire_at) \
             SELECT j.value ->> 0, j.value ->> 1, j.value ->> 2, j.value ->> 3, 1, j.value ->> 4, \
               j.value ->> 5, ?2, ?2, j.value ->> 6, j.value ->> 7 \
             FROM json_each(?1) AS j WHERE true \
             ON CONFLICT (namespace, name) DO NOTHING RETURNING namespace, name",
        )
        .bind(serde_json::Value::Array(rows).to_string())
        .bind(now)
        .fetch_all(&mut **self.0)
        .await
        .map_err(db_err)
    }

    const END_HELD: &'static str = "{end} WHERE job_uid = $1 AND state = 'running' \
        AND attempt_started_at > $2 RETURNING id";
    const DROP_FUTURE: &'static str = "DELETE FROM executions WHERE job_uid = $1 \
        AND due_at IS NOT NULL AND attempt = 0 AND fire_at > $2";
    const CANCEL_WAITING: &'static str = "UPDATE executions SET state = 'cancelled', \
        due_at = NULL, finished_at = $2 WHERE job_uid = $1 AND due_at IS NOT NULL AND attempt = 0";
    const UPDATE_PENDING: &'static str = "UPDATE executions SET run = $2, job_version = $3, \
        max_attempts = $4, lease_ms = $5 WHERE job_uid = $1 AND due_at IS NOT NULL AND attempt = 0";

    /// The caller tells their workers once the transaction has committed.
    async fn stop(&mut self, held: Vec<String>) -> Result<Vec<String>> {
        Ok(held)
    }
}

pub(crate) async fn job_write_batch(
    store: &SqliteStore,
    writes: &[JobWrite],
) -> Result<Vec<JobRecord>> {
    let now = ms(store.clock.now());
    let mut tx = store.begin().await?;
    let done = steps::job_write_batch(&mut SqlTx(&mut tx), writes, now).await?;
    commit(tx).await?;
    signal_cancelled(store, done.cancelled);
    Ok(done.records)
}

pub(crate) async fn job_delete(
    store: &SqliteStore,
    namespace: &str,
    name: &str,
    expected_version: Option<i64>,
) -> Result<()> {
    let now = ms(store.clock.now());
    let mut tx = store.begin().await?;
    let done =
        steps::job_delete(&mut SqlTx(&mut tx), namespace, name, expected_version, now).await?;
    commit(tx).await?;
    signal_cancelled(store, done.cancelled);
    Ok(())
}

/// Tells the workers holding `cancelled` (ended, or their runs cancelled, by a committed job or
/// workflow write) to drop them.
pub(crate) fn signal_cancelled(store: &SqliteStore, cancelled: Vec<String>) {
    for id in cancelled {
        let _ = store.signals.cancelled.send(id);
    }
}
