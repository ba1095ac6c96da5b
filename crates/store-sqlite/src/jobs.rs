//! Jobs: read, list, write (one by one or a batch of plain inserts in one statement), delete;
//! a write steers the job's not-started executions in the same transaction (`PendingExecutions`).
//! The writes are written once (`sundial_store::steps::jobs`) over this file's statements.

use super::*;
use sundial_store::steps::jobs::{self as steps, JobStatements, VersionStatements};

pub(crate) const JOB_COLUMNS: &str = "j.namespace, j.name, j.uid, j.shard, j.version, j.spec, j.created_at, \
    j.updated_at, j.next_slot_at, j.next_fire_at";

/// The job's last execution (the latest slot whose fire time `$1` has reached), read through
/// `executions_job` in slot order; and the fire time of its first execution still waiting.
pub(crate) const LAST_EXECUTION: &str = "(SELECT e.id || '|' || e.state || '|' || e.scheduled_at \
    FROM executions e WHERE e.namespace = j.namespace AND e.job = j.name AND e.job_uid = j.uid \
    AND e.fire_at <= $1 ORDER BY e.scheduled_at DESC, e.id DESC LIMIT 1) AS last_execution, \
    (SELECT min(e.fire_at) FROM executions e WHERE e.job_uid = j.uid AND e.due_at IS NOT NULL \
    AND e.attempt = 0) AS pending_fire_at";

/// The statements of a job's writes (`sundial_store::steps::jobs`) on the embedded store's
/// write transaction.
pub(crate) struct JobTx<'t, 'c>(pub(crate) &'t mut Tx<'c>);

impl VersionStatements for JobTx<'_, '_> {
    async fn version(&mut self, kind: &str, namespace: &str, name: &str) -> Result<Option<i64>> {
        sqlx::query_scalar(&format!(
            "SELECT version FROM {kind}s WHERE namespace = ?1 AND name = ?2"
        ))
        .bind(namespace)
        .bind(name)
        .fetch_optional(&mut **self.0)
        .await
        .map_err(db_err)
    }
}

impl JobStatements for JobTx<'_, '_> {
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

    async fn replace(
        &mut self,
        r: &JobRecord,
        spec: &str,
        expected: i64,
        now: i64,
    ) -> Result<bool> {
        let updated = sqlx::query(
            "UPDATE jobs SET version = version + 1, spec = ?4, paused = ?5, updated_at = ?6, \
             next_slot_at = ?7, next_fire_at = ?8 \
             WHERE namespace = ?1 AND name = ?2 AND version = ?3",
        )
        .bind(&r.spec.namespace)
        .bind(&r.spec.name)
        .bind(expected)
        .bind(spec)
        .bind(r.spec.paused)
        .bind(now)
        .bind(r.next_slot_at.map(ms))
        .bind(r.next_fire_at.map(ms))
        .execute(&mut **self.0)
        .await
        .map_err(db_err)?;
        Ok(updated.rows_affected() > 0)
    }

    async fn end_pending(
        &mut self,
        uid: &str,
        now: i64,
        future: FutureSlots,
    ) -> Result<Vec<String>> {
        // Executions claimed ahead whose attempt has not started (docs/guarantees.md, "Claim
        // ahead") end like those not yet due; the caller tells their worker to drop them once
        // this transaction has committed.
        let held_sql = match future {
            FutureSlots::Drop => "DELETE FROM executions",
            FutureSlots::Cancel => {
                "UPDATE executions SET state = 'cancelled', finished_at = ?2, lease_expires_at = NULL"
            }
        };
        let held: Vec<String> = sqlx::query_scalar(&format!(
            "{held_sql} WHERE job_uid = ?1 AND state = 'running' AND attempt_started_at > ?2 \
             RETURNING id"
        ))
        .bind(uid)
        .bind(now)
        .fetch_all(&mut **self.0)
        .await
        .map_err(db_err)?;
        if future == FutureSlots::Drop {
            sqlx::query(
                "DELETE FROM executions WHERE job_uid = ?1 AND due_at IS NOT NULL AND attempt = 0 \
                 AND fire_at > ?2",
            )
            .bind(uid)
            .bind(now)
            .execute(&mut **self.0)
            .await
            .map_err(db_err)?;
        }
        sqlx::query(
            "UPDATE executions SET state = 'cancelled', due_at = NULL, finished_at = ?2 \
             WHERE job_uid = ?1 AND due_at IS NOT NULL AND attempt = 0",
        )
        .bind(uid)
        .bind(now)
        .execute(&mut **self.0)
        .await
        .map_err(db_err)?;
        Ok(held)
    }

    async fn update_pending(
        &mut self,
        uid: &str,
        run: &str,
        version: i64,
        max_attempts: i64,
        lease_ms: i64,
    ) -> Result<()> {
        sqlx::query(
            "UPDATE executions SET run = ?2, job_version = ?3, max_attempts = ?4, lease_ms = ?5 \
             WHERE job_uid = ?1 AND due_at IS NOT NULL AND attempt = 0",
        )
        .bind(uid)
        .bind(run)
        .bind(version)
        .bind(max_attempts)
        .bind(lease_ms)
        .execute(&mut **self.0)
        .await
        .map_err(db_err)?;
        Ok(())
    }

    async fn delete(
        &mut self,
        namespace: &str,
        name: &str,
        expected: Option<i64>,
    ) -> Result<Option<String>> {
        sqlx::query_scalar(
            "DELETE FROM jobs WHERE namespace = ?1 AND name = ?2 AND (?3 IS NULL OR version = ?3) \
             RETURNING uid",
        )
        .bind(namespace)
        .bind(name)
        .bind(expected)
        .fetch_optional(&mut **self.0)
        .await
        .map_err(db_err)
    }
}

pub(crate) async fn job_write_batch(
    store: &SqliteStore,
    writes: &[JobWrite],
) -> Result<Vec<JobRecord>> {
    let now = ms(store.clock.now());
    let mut tx = store.begin().await?;
    let done = steps::job_write_batch(&mut JobTx(&mut tx), writes, now).await?;
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
        steps::job_delete(&mut JobTx(&mut tx), namespace, name, expected_version, now).await?;
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
