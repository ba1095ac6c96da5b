//! Jobs: read, list, write (one by one or a batch of plain inserts in one statement), delete;
//! a write steers the job's not-started executions in the same transaction (`PendingExecutions`).

use super::*;

pub(crate) const JOB_COLUMNS: &str = "j.namespace, j.name, j.uid, j.shard, j.version, j.spec, j.created_at, \
    j.updated_at, j.next_slot_at, j.next_fire_at";

/// The job's last execution (the latest slot whose fire time `?1` has reached), read through
/// `executions_job` in slot order; and the fire time of its first execution still waiting.
pub(crate) const LAST_EXECUTION: &str = "(SELECT e.id || '|' || e.state || '|' || e.scheduled_at \
    FROM executions e WHERE e.namespace = j.namespace AND e.job = j.name AND e.job_uid = j.uid \
    AND e.fire_at <= ?1 ORDER BY e.scheduled_at DESC, e.id DESC LIMIT 1) AS last_execution, \
    (SELECT min(e.fire_at) FROM executions e WHERE e.job_uid = j.uid AND e.due_at IS NOT NULL \
    AND e.attempt = 0) AS pending_fire_at";

/// Inserts new jobs in one statement, as [`write_job`] would one by one;
/// [`Error::Conflict`] naming the first that already exists (the caller's transaction is then
/// dropped, so nothing is written).
pub(crate) async fn insert_jobs(
    tx: &mut Tx<'_>,
    writes: &[JobWrite],
    now: Timestamp,
) -> Result<Vec<JobRecord>> {
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
    let inserted: Vec<(String, String)> = sqlx::query_as(
        "INSERT INTO jobs (namespace, name, uid, shard, version, spec, paused, created_at, updated_at, \
           next_slot_at, next_fire_at) \
         SELECT j.value ->> 0, j.value ->> 1, j.value ->> 2, j.value ->> 3, 1, j.value ->> 4, \
           j.value ->> 5, ?2, ?2, j.value ->> 6, j.value ->> 7 \
         FROM json_each(?1) AS j WHERE true \
         ON CONFLICT (namespace, name) DO NOTHING RETURNING namespace, name",
    )
    .bind(serde_json::Value::Array(rows).to_string())
    .bind(ms(now))
    .fetch_all(&mut **tx)
    .await
    .map_err(db_err)?;
    sundial_store::inserted_jobs(writes, inserted, now)
}

/// Writes one job inside `tx` (see [`ApiStore::job_write_batch`]).
pub(crate) async fn write_job(
    tx: &mut Tx<'_>,
    w: &JobWrite,
    now: Timestamp,
    cancelled: &mut Vec<String>,
) -> Result<JobRecord> {
    let r = &w.record;
    let spec = serde_json::to_string(&r.spec).map_err(|e| Error::Corrupt(e.to_string()))?;
    let version = match w.expected_version {
        None => {
            insert_jobs(tx, std::slice::from_ref(w), now).await?;
            1
        }
        Some(expected) => {
            let updated = sqlx::query(
                "UPDATE jobs SET version = version + 1, spec = ?4, paused = ?5, updated_at = ?6, \
                 next_slot_at = ?7, next_fire_at = ?8 \
                 WHERE namespace = ?1 AND name = ?2 AND version = ?3",
            )
            .bind(&r.spec.namespace)
            .bind(&r.spec.name)
            .bind(expected)
            .bind(&spec)
            .bind(r.spec.paused)
            .bind(ms(now))
            .bind(r.next_slot_at.map(ms))
            .bind(r.next_fire_at.map(ms))
            .execute(&mut **tx)
            .await
            .map_err(db_err)?;
            if updated.rows_affected() == 0 {
                return Err(
                    version_mismatch(tx, "job", &r.spec.namespace, &r.spec.name, expected).await,
                );
            }
            expected + 1
        }
    };
    match w.pending {
        PendingExecutions::Keep => {}
        PendingExecutions::Cancel => {
            cancelled.extend(cancel_pending(tx, &r.uid, now, FutureSlots::Drop).await?);
        }
        PendingExecutions::Update => {
            let run = serde_json::to_string(&RunSpec::of(&r.spec))
                .map_err(|e| Error::Corrupt(e.to_string()))?;
            sqlx::query(
                "UPDATE executions SET run = ?2, job_version = ?3, max_attempts = ?4, lease_ms = ?5 \
                 WHERE job_uid = ?1 AND due_at IS NOT NULL AND attempt = 0",
            )
            .bind(&r.uid)
            .bind(run)
            .bind(version)
            .bind(i64::from(r.spec.retry.max_attempts))
            .bind(r.spec.heartbeat_timeout.as_millis_i64())
            .execute(&mut **tx)
            .await
            .map_err(db_err)?;
        }
    }
    Ok(JobRecord {
        version,
        created_at: if w.expected_version.is_none() {
            now
        } else {
            r.created_at
        },
        updated_at: now,
        ..r.clone()
    })
}

/// Cancels the not-yet-started executions of a job incarnation. With
/// [`FutureSlots::Drop`] (a pause or a change of schedule) those whose fire time has not
/// come yet are removed instead: they were written ahead of their slot (trigger ahead) and
/// never became due, and the job may yield the same slot again after the change, which must
/// then fire (docs/policies.md, "Pause and resume").
pub(crate) async fn cancel_pending(
    tx: &mut Tx<'_>,
    uid: &str,
    now: Timestamp,
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
    .bind(ms(now))
    .fetch_all(&mut **tx)
    .await
    .map_err(db_err)?;
    if future == FutureSlots::Drop {
        sqlx::query(
            "DELETE FROM executions WHERE job_uid = ?1 AND due_at IS NOT NULL AND attempt = 0 \
             AND fire_at > ?2",
        )
        .bind(uid)
        .bind(ms(now))
        .execute(&mut **tx)
        .await
        .map_err(db_err)?;
    }
    sqlx::query(
        "UPDATE executions SET state = 'cancelled', due_at = NULL, finished_at = ?2 \
         WHERE job_uid = ?1 AND due_at IS NOT NULL AND attempt = 0",
    )
    .bind(uid)
    .bind(ms(now))
    .execute(&mut **tx)
    .await
    .map_err(db_err)?;
    Ok(held)
}

/// The error of a conditional write of the `kind` (`job` or `workflow`, the row of the table
/// `<kind>s`) named `namespace`/`name` that changed nothing: [`Error::StaleVersion`] with the
/// version found, or [`Error::NotFound`] when there is none.
pub(crate) async fn version_mismatch(
    tx: &mut Tx<'_>,
    kind: &str,
    namespace: &str,
    name: &str,
    expected: i64,
) -> Error {
    let found: std::result::Result<Option<i64>, _> = sqlx::query_scalar(&format!(
        "SELECT version FROM {kind}s WHERE namespace = ?1 AND name = ?2"
    ))
    .bind(namespace)
    .bind(name)
    .fetch_optional(&mut **tx)
    .await;
    match found {
        Ok(Some(actual)) => Error::StaleVersion { expected, actual },
        Ok(None) => Error::NotFound(format!("{kind} {namespace}/{name}")),
        Err(e) => db_err(e),
    }
}

pub(crate) async fn job_get(
    store: &SqliteStore,
    namespace: &str,
    name: &str,
) -> Result<Option<JobRecord>> {
    let sql = format!(
        "SELECT {JOB_COLUMNS}, {LAST_EXECUTION} FROM jobs j WHERE j.namespace = ?2 AND j.name = ?3"
    );
    let row = sqlx::query(&sql)
        .bind(ms(store.clock.now()))
        .bind(namespace)
        .bind(name)
        .fetch_optional(&store.reader)
        .await
        .map_err(db_err)?;
    row.map(|r| rows::job(&r)).transpose()
}

pub(crate) async fn job_get_many(
    store: &SqliteStore,
    namespace: &str,
    names: &[String],
) -> Result<Vec<JobRecord>> {
    let sql = format!(
        "SELECT {JOB_COLUMNS}, {LAST_EXECUTION} FROM jobs j WHERE j.namespace = ?2 \
         AND j.name IN (SELECT value FROM json_each(?3))"
    );
    let names = serde_json::to_string(names).map_err(|e| Error::Corrupt(e.to_string()))?;
    let rows = sqlx::query(&sql)
        .bind(ms(store.clock.now()))
        .bind(namespace)
        .bind(names)
        .fetch_all(&store.reader)
        .await
        .map_err(db_err)?;
    rows.iter().map(rows::job).collect()
}

pub(crate) async fn job_list(store: &SqliteStore, q: &JobListQuery) -> Result<Vec<JobRecord>> {
    let mut sql = format!(
        "SELECT {JOB_COLUMNS}, {LAST_EXECUTION} FROM jobs j WHERE j.namespace = ?2 AND j.name > ?3"
    );
    if let Some(p) = q.paused {
        sql.push_str(if p {
            " AND j.paused = 1"
        } else {
            " AND j.paused = 0"
        });
    }
    if q.label.is_some() {
        sql.push_str(" AND json_extract(j.spec, '$.labels.' || json_quote(?5)) = ?6");
    }
    sql.push_str(" ORDER BY j.name LIMIT ?4");
    let (key, value) = q.label.clone().unwrap_or_default();
    let rows = sqlx::query(&sql)
        .bind(ms(store.clock.now()))
        .bind(&q.namespace)
        .bind(q.after_name.as_deref().unwrap_or(""))
        .bind(i64::from(q.limit))
        .bind(key)
        .bind(value)
        .fetch_all(&store.reader)
        .await
        .map_err(db_err)?;
    rows.iter().map(rows::job).collect()
}

pub(crate) async fn job_write_batch(
    store: &SqliteStore,
    writes: &[JobWrite],
) -> Result<Vec<JobRecord>> {
    let now = store.clock.now();
    let mut tx = store.begin().await?;
    let mut cancelled = Vec::new();
    let written = if writes.iter().all(is_plain_insert) {
        insert_jobs(&mut tx, writes, now).await?
    } else {
        let mut written = Vec::with_capacity(writes.len());
        for w in writes {
            written.push(write_job(&mut tx, w, now, &mut cancelled).await?);
        }
        written
    };
    commit(tx).await?;
    for id in cancelled {
        let _ = store.signals.cancelled.send(id);
    }
    Ok(written)
}

pub(crate) async fn job_delete(
    store: &SqliteStore,
    namespace: &str,
    name: &str,
    expected_version: Option<i64>,
) -> Result<()> {
    let now = store.clock.now();
    let mut tx = store.begin().await?;
    let row = sqlx::query(
        "DELETE FROM jobs WHERE namespace = ?1 AND name = ?2 AND (?3 IS NULL OR version = ?3) \
         RETURNING uid",
    )
    .bind(namespace)
    .bind(name)
    .bind(expected_version)
    .fetch_optional(&mut *tx)
    .await
    .map_err(db_err)?;
    let Some(row) = row else {
        return Err(version_mismatch(
            &mut tx,
            "job",
            namespace,
            name,
            expected_version.unwrap_or(0),
        )
        .await);
    };
    let uid: String = row.try_get("uid").map_err(db_err)?;
    let cancelled = cancel_pending(&mut tx, &uid, now, FutureSlots::Cancel).await?;
    commit(tx).await?;
    for id in cancelled {
        let _ = store.signals.cancelled.send(id);
    }
    Ok(())
}

/// The namespaces that hold a job or a workflow, in name order.
pub(crate) async fn namespace_list(store: &SqliteStore) -> Result<Vec<String>> {
    // A skip scan: one index lookup per namespace, on each table's primary key.
    sqlx::query_scalar(
            "WITH RECURSIVE j AS ( \
           SELECT min(namespace) AS ns FROM jobs \
           UNION ALL SELECT (SELECT min(namespace) FROM jobs WHERE namespace > j.ns) FROM j WHERE j.ns IS NOT NULL), \
         w AS ( \
           SELECT min(namespace) AS ns FROM workflows \
           UNION ALL SELECT (SELECT min(namespace) FROM workflows WHERE namespace > w.ns) FROM w WHERE w.ns IS NOT NULL) \
         SELECT ns FROM j WHERE ns IS NOT NULL UNION SELECT ns FROM w WHERE ns IS NOT NULL ORDER BY 1",
        )
        .fetch_all(&store.reader)
        .await
        .map_err(db_err)
}
