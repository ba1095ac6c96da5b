//! Jobs: read, list, write (one by one or a batch of plain inserts in one statement), delete;
//! a write steers the job's not-started executions in the same transaction (`PendingExecutions`).
//! The writes are written once (`sundial_store::steps::jobs`) over this file's statements.

use super::*;
use crate::reads::SqlTx;
use sundial_store::steps::jobs::{self as steps, JobStatements};

pub(crate) const JOB_COLUMNS: &str = "j.namespace, j.name, j.uid, j.shard, j.version, j.spec::text AS spec, \
    j.created_at, j.updated_at, j.next_slot_at, j.next_fire_at";

/// The job's last execution (the latest slot whose fire time `$1` has reached), read through
/// `executions_job` in slot order; and the fire time of its first execution still waiting.
pub(crate) const LAST_EXECUTION: &str = "(SELECT e.id || '|' || e.state || '|' || e.scheduled_at \
    FROM executions e WHERE e.namespace = j.namespace AND e.job = j.name AND e.job_uid = j.uid \
    AND e.fire_at <= $1 ORDER BY e.scheduled_at DESC, e.id DESC LIMIT 1) AS last_execution, \
    (SELECT min(e.fire_at) FROM execution_queue q JOIN executions e ON e.id = q.id \
    WHERE q.job_uid = j.uid AND q.due_at IS NOT NULL AND e.attempt = 0) AS pending_fire_at";

impl JobStatements for SqlTx<'_, '_> {
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

    const END_HELD: &'static str = "WITH e AS ({end} \
        WHERE id IN (SELECT id FROM execution_queue WHERE job_uid = $1 AND due_at IS NULL) \
        AND state = 'running' AND attempt_started_at > $2 RETURNING id) \
        DELETE FROM execution_queue q USING e WHERE q.job_uid = $1 AND q.id = e.id RETURNING q.id";
    const DROP_FUTURE: &'static str = "WITH e AS (DELETE FROM executions \
        WHERE id IN (SELECT id FROM execution_queue WHERE job_uid = $1 AND due_at IS NOT NULL) \
        AND attempt = 0 AND fire_at > $2 RETURNING id) \
        DELETE FROM execution_queue q USING e WHERE q.job_uid = $1 AND q.id = e.id";
    const CANCEL_WAITING: &'static str = "WITH e AS (UPDATE executions SET state = 'cancelled', \
        due_at = NULL, finished_at = $2 \
        WHERE id IN (SELECT id FROM execution_queue WHERE job_uid = $1 AND due_at IS NOT NULL) \
        AND attempt = 0 RETURNING id) \
        DELETE FROM execution_queue q USING e WHERE q.job_uid = $1 AND q.id = e.id";
    const UPDATE_PENDING: &'static str = "UPDATE executions SET run = $2, job_version = $3, \
        max_attempts = $4, lease_ms = $5 \
        WHERE id IN (SELECT id FROM execution_queue WHERE job_uid = $1 AND due_at IS NOT NULL) \
        AND attempt = 0";

    /// Signalled inside the transaction (`NOTIFY`, delivered at the commit).
    async fn stop(&mut self, held: Vec<String>) -> Result<Vec<String>> {
        for id in &held {
            crate::notify::notify_cancelled(self.0, id).await?;
        }
        Ok(Vec::new())
    }
}

pub(crate) async fn job_write_batch(
    store: &PgStore,
    writes: &[JobWrite],
) -> Result<Vec<JobRecord>> {
    let mut tx = store.begin().await?;
    let now = store.now_ms(&mut *tx).await?;
    let done = steps::job_write_batch(&mut SqlTx(&mut tx), writes, now).await?;
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
    steps::job_delete(&mut SqlTx(&mut tx), namespace, name, expected_version, now).await?;
    commit(tx).await
}
