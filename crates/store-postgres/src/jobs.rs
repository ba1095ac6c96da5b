//! Jobs: read, list, write (one by one or a batch of plain inserts in one statement), delete;
//! a write steers the job's not-started executions in the same transaction (`PendingExecutions`).
//! The writes are written once (`sundial_store::steps::jobs`) over this file's statements.

use super::*;
use sundial_store::steps::jobs::{self as steps, JobStatements, VersionStatements};

pub(crate) const JOB_COLUMNS: &str = "j.namespace, j.name, j.uid, j.shard, j.version, j.spec::text AS spec, \
    j.created_at, j.updated_at, j.next_slot_at, j.next_fire_at";

/// The job's last execution (the latest slot whose fire time `$1` has reached), read through
/// `executions_job` in slot order; and the fire time of its first execution still waiting.
pub(crate) const LAST_EXECUTION: &str = "(SELECT e.id || '|' || e.state || '|' || e.scheduled_at \
    FROM executions e WHERE e.namespace = j.namespace AND e.job = j.name AND e.job_uid = j.uid \
    AND e.fire_at <= $1 ORDER BY e.scheduled_at DESC, e.id DESC LIMIT 1) AS last_execution, \
    (SELECT min(e.fire_at) FROM execution_queue q JOIN executions e ON e.id = q.id \
    WHERE q.job_uid = j.uid AND q.due_at IS NOT NULL AND e.attempt = 0) AS pending_fire_at";

/// The statements of a job's writes (`sundial_store::steps::jobs`) on a PostgreSQL
/// transaction.
pub(crate) struct JobTx<'t, 'c>(pub(crate) &'t mut Tx<'c>);

impl VersionStatements for JobTx<'_, '_> {
    async fn version(&mut self, kind: &str, namespace: &str, name: &str) -> Result<Option<i64>> {
        sqlx::query_scalar(&format!(
            "SELECT version FROM {kind}s WHERE namespace = $1 AND name = $2"
        ))
        .bind(namespace)
        .bind(name)
        .fetch_optional(&mut **self.0)
        .await
        .map_err(db_err)
    }
}

impl JobStatements for JobTx<'_, '_> {
    /// One statement: an UNNEST of column arrays.
    async fn insert(&mut self, writes: &[JobWrite], now: i64) -> Result<Vec<(String, String)>> {
        let n = writes.len();
        let (mut nss, mut names, mut uids, mut shards) = (
            Vec::with_capacity(n),
            Vec::with_capacity(n),
            Vec::with_capacity(n),
            Vec::with_capacity(n),
        );
        let (mut specs, mut paused, mut slots, mut fires) = (
            Vec::with_capacity(n),
            Vec::with_capacity(n),
            Vec::with_capacity(n),
            Vec::with_capacity(n),
        );
        for w in writes {
            let r = &w.record;
            nss.push(r.spec.namespace.as_str());
            names.push(r.spec.name.as_str());
            uids.push(r.uid.as_str());
            shards.push(i64::from(r.shard));
            specs.push(serde_json::to_string(&r.spec).map_err(|e| Error::Corrupt(e.to_string()))?);
            paused.push(r.spec.paused);
            slots.push(r.next_slot_at.map(ms));
            fires.push(r.next_fire_at.map(ms));
        }
        sqlx::query_as(
            "INSERT INTO jobs (namespace, name, uid, shard, version, spec, paused, created_at, updated_at, \
               next_slot_at, next_fire_at) \
             SELECT ns, name, uid, shard, 1, spec::jsonb, paused, $9, $9, slot, fire \
             FROM UNNEST($1::text[], $2::text[], $3::text[], $4::bigint[], $5::text[], $6::bool[], \
               $7::bigint[], $8::bigint[]) AS t(ns, name, uid, shard, spec, paused, slot, fire) \
             ON CONFLICT (namespace, name) DO NOTHING RETURNING namespace, name",
        )
        .bind(&nss)
        .bind(&names)
        .bind(&uids)
        .bind(&shards)
        .bind(&specs)
        .bind(&paused)
        .bind(&slots)
        .bind(&fires)
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
            "UPDATE jobs SET version = version + 1, spec = $4::jsonb, paused = $5, updated_at = $6, \
             next_slot_at = $7, next_fire_at = $8 WHERE namespace = $1 AND name = $2 AND version = $3",
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

    /// Executions held by a worker are signalled inside the transaction (`NOTIFY`, delivered
    /// at the commit).
    async fn end_pending(
        &mut self,
        uid: &str,
        now: i64,
        future: FutureSlots,
    ) -> Result<Vec<String>> {
        // Executions claimed ahead whose attempt has not started (docs/guarantees.md, "Claim
        // ahead") end like those not yet due, and their worker is told to drop them.
        let held_sql = match future {
            FutureSlots::Drop => "DELETE FROM executions",
            FutureSlots::Cancel => {
                "UPDATE executions SET state = 'cancelled', finished_at = $2, lease_expires_at = NULL"
            }
        };
        let held: Vec<String> = sqlx::query_scalar(&format!(
            "WITH e AS ({held_sql} \
               WHERE id IN (SELECT id FROM execution_queue WHERE job_uid = $1 AND due_at IS NULL) \
               AND state = 'running' AND attempt_started_at > $2 RETURNING id) \
             DELETE FROM execution_queue q USING e WHERE q.job_uid = $1 AND q.id = e.id RETURNING q.id"
        ))
        .bind(uid)
        .bind(now)
        .fetch_all(&mut **self.0)
        .await
        .map_err(db_err)?;
        for id in &held {
            crate::notify::notify_cancelled(self.0, id).await?;
        }
        if future == FutureSlots::Drop {
            sqlx::query(
                "WITH e AS (DELETE FROM executions \
                   WHERE id IN (SELECT id FROM execution_queue WHERE job_uid = $1 AND due_at IS NOT NULL) \
                   AND attempt = 0 AND fire_at > $2 RETURNING id) \
                 DELETE FROM execution_queue q USING e WHERE q.job_uid = $1 AND q.id = e.id",
            )
            .bind(uid)
            .bind(now)
            .execute(&mut **self.0)
            .await
            .map_err(db_err)?;
        }
        sqlx::query(
            "WITH e AS (UPDATE executions SET state = 'cancelled', due_at = NULL, finished_at = $2 \
               WHERE id IN (SELECT id FROM execution_queue WHERE job_uid = $1 AND due_at IS NOT NULL) \
               AND attempt = 0 RETURNING id) \
             DELETE FROM execution_queue q USING e WHERE q.job_uid = $1 AND q.id = e.id",
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
            "UPDATE executions SET run = $2, job_version = $3, max_attempts = $4, lease_ms = $5 \
             WHERE id IN (SELECT id FROM execution_queue WHERE job_uid = $1 AND due_at IS NOT NULL) \
             AND attempt = 0",
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
            "DELETE FROM jobs WHERE namespace = $1 AND name = $2 AND ($3::bigint IS NULL OR version = $3) RETURNING uid",
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
    store: &PgStore,
    writes: &[JobWrite],
) -> Result<Vec<JobRecord>> {
    let mut tx = store.begin().await?;
    let now = store.now_ms(&mut *tx).await?;
    let done = steps::job_write_batch(&mut JobTx(&mut tx), writes, now).await?;
    commit(tx).await?;
    Ok(done.records)
}

pub(crate) async fn job_delete(
    store: &PgStore,
    namespace: &str,
    name: &str,
    expected_version: Option<i64>,
) -> Result<()> {
    let mut tx = store.begin().await?;
    let now = store.now_ms(&mut *tx).await?;
    steps::job_delete(&mut JobTx(&mut tx), namespace, name, expected_version, now).await?;
    commit(tx).await
}
