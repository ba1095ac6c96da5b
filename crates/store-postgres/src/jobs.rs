//! Jobs: read, list, write (one by one or a batch of plain inserts in one statement), delete;
//! a write steers the job's not-started executions in the same transaction (`PendingExecutions`).

use super::*;

pub(crate) const JOB_COLUMNS: &str = "j.namespace, j.name, j.uid, j.shard, j.version, j.spec::text AS spec, \
    j.created_at, j.updated_at, j.next_slot_at, j.next_fire_at";

/// The job's last execution (the latest slot whose fire time `$1` has reached), read through
/// `executions_job` in slot order; and the fire time of its first execution still waiting.
pub(crate) const LAST_EXECUTION: &str = "(SELECT e.id || '|' || e.state || '|' || e.scheduled_at \
    FROM executions e WHERE e.namespace = j.namespace AND e.job = j.name AND e.job_uid = j.uid \
    AND e.fire_at <= $1 ORDER BY e.scheduled_at DESC, e.id DESC LIMIT 1) AS last_execution, \
    (SELECT min(e.fire_at) FROM execution_queue q JOIN executions e ON e.id = q.id \
    WHERE q.job_uid = j.uid AND q.due_at IS NOT NULL AND e.attempt = 0) AS pending_fire_at";

/// Writes one job inside `tx` (see [`ApiStore::job_write_batch`]).
/// Inserts new jobs in one statement (UNNEST of column arrays), as [`write_job`] would one by
/// one; [`Error::Conflict`] naming the first that already exists (the caller's transaction
/// is then dropped, so nothing is written).
pub(crate) async fn insert_jobs(
    tx: &mut Tx<'_>,
    writes: &[JobWrite],
    now: i64,
) -> Result<Vec<JobRecord>> {
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
    let inserted: Vec<(String, String)> = sqlx::query_as(
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
    .fetch_all(&mut **tx)
    .await
    .map_err(db_err)?;
    sundial_store::inserted_jobs(writes, inserted, ts(now)?)
}

pub(crate) async fn write_job(tx: &mut Tx<'_>, w: &JobWrite, now: i64) -> Result<JobRecord> {
    let r = &w.record;
    let spec = serde_json::to_string(&r.spec).map_err(|e| Error::Corrupt(e.to_string()))?;
    let version = match w.expected_version {
        None => {
            insert_jobs(tx, std::slice::from_ref(w), now).await?;
            1
        }
        Some(expected) => {
            let updated = sqlx::query(
                "UPDATE jobs SET version = version + 1, spec = $4::jsonb, paused = $5, updated_at = $6, \
                 next_slot_at = $7, next_fire_at = $8 WHERE namespace = $1 AND name = $2 AND version = $3",
            )
            .bind(&r.spec.namespace)
            .bind(&r.spec.name)
            .bind(expected)
            .bind(&spec)
            .bind(r.spec.paused)
            .bind(now)
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
        PendingExecutions::Cancel => cancel_pending(tx, &r.uid, now, FutureSlots::Drop).await?,
        PendingExecutions::Update => {
            let run = serde_json::to_string(&RunSpec::of(&r.spec))
                .map_err(|e| Error::Corrupt(e.to_string()))?;
            sqlx::query(
                "UPDATE executions SET run = $2, job_version = $3, max_attempts = $4, lease_ms = $5 \
                 WHERE id IN (SELECT id FROM execution_queue WHERE job_uid = $1 AND due_at IS NOT NULL) \
                 AND attempt = 0",
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
    let now_ts = ts(now)?;
    Ok(JobRecord {
        version,
        created_at: if w.expected_version.is_none() {
            now_ts
        } else {
            r.created_at
        },
        updated_at: now_ts,
        ..r.clone()
    })
}

/// Ends the not-yet-started executions of a job incarnation: as on the embedded store, with
/// [`FutureSlots::Drop`] those whose fire time has not come are removed, the others (and all
/// of them with [`FutureSlots::Cancel`]) recorded `cancelled`.
pub(crate) async fn cancel_pending(
    tx: &mut Tx<'_>,
    uid: &str,
    now: i64,
    future: FutureSlots,
) -> Result<()> {
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
    .fetch_all(&mut **tx)
    .await
    .map_err(db_err)?;
    for id in &held {
        crate::notify::notify_cancelled(tx, id).await?;
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
        .execute(&mut **tx)
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
    .execute(&mut **tx)
    .await
    .map_err(db_err)?;
    Ok(())
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
        "SELECT version FROM {kind}s WHERE namespace = $1 AND name = $2"
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
    store: &PgStore,
    namespace: &str,
    name: &str,
) -> Result<Option<JobRecord>> {
    let sql = format!(
        "SELECT {JOB_COLUMNS}, {LAST_EXECUTION} FROM jobs j WHERE j.namespace = $2 AND j.name = $3"
    );
    let now = store.now_ms(&store.pool).await?;
    let row = sqlx::query(&sql)
        .bind(now)
        .bind(namespace)
        .bind(name)
        .fetch_optional(&store.pool)
        .await
        .map_err(db_err)?;
    row.map(|r| rows::job(&r)).transpose()
}

pub(crate) async fn job_get_many(
    store: &PgStore,
    namespace: &str,
    names: &[String],
) -> Result<Vec<JobRecord>> {
    let sql = format!(
        "SELECT {JOB_COLUMNS}, {LAST_EXECUTION} FROM jobs j WHERE j.namespace = $2 AND j.name = ANY($3)"
    );
    let now = store.now_ms(&store.pool).await?;
    let rows = sqlx::query(&sql)
        .bind(now)
        .bind(namespace)
        .bind(names)
        .fetch_all(&store.pool)
        .await
        .map_err(db_err)?;
    rows.iter().map(rows::job).collect()
}

pub(crate) async fn job_list(store: &PgStore, q: &JobListQuery) -> Result<Vec<JobRecord>> {
    let mut sql = format!(
        "SELECT {JOB_COLUMNS}, {LAST_EXECUTION} FROM jobs j WHERE j.namespace = $2 AND j.name > $3"
    );
    if let Some(p) = q.paused {
        sql.push_str(if p {
            " AND j.paused"
        } else {
            " AND NOT j.paused"
        });
    }
    if q.label.is_some() {
        sql.push_str(" AND j.spec -> 'labels' ->> $5 = $6");
    }
    sql.push_str(" ORDER BY j.name LIMIT $4");
    let (key, value) = q.label.clone().unwrap_or_default();
    let now = store.now_ms(&store.pool).await?;
    let rows = sqlx::query(&sql)
        .bind(now)
        .bind(&q.namespace)
        .bind(q.after_name.as_deref().unwrap_or(""))
        .bind(i64::from(q.limit))
        .bind(key)
        .bind(value)
        .fetch_all(&store.pool)
        .await
        .map_err(db_err)?;
    rows.iter().map(rows::job).collect()
}

pub(crate) async fn job_write_batch(
    store: &PgStore,
    writes: &[JobWrite],
) -> Result<Vec<JobRecord>> {
    let mut tx = store.begin().await?;
    let now = store.now_ms(&mut *tx).await?;
    let written = if writes.iter().all(is_plain_insert) {
        insert_jobs(&mut tx, writes, now).await?
    } else {
        let mut written = Vec::with_capacity(writes.len());
        for w in writes {
            written.push(write_job(&mut tx, w, now).await?);
        }
        written
    };
    commit(tx).await?;
    Ok(written)
}

pub(crate) async fn job_delete(
    store: &PgStore,
    namespace: &str,
    name: &str,
    expected_version: Option<i64>,
) -> Result<()> {
    let mut tx = store.begin().await?;
    let now = store.now_ms(&mut *tx).await?;
    let uid: Option<String> = sqlx::query_scalar(
        "DELETE FROM jobs WHERE namespace = $1 AND name = $2 AND ($3::bigint IS NULL OR version = $3) RETURNING uid",
    )
    .bind(namespace)
    .bind(name)
    .bind(expected_version)
    .fetch_optional(&mut *tx)
    .await
    .map_err(db_err)?;
    let Some(uid) = uid else {
        return Err(version_mismatch(
            &mut tx,
            "job",
            namespace,
            name,
            expected_version.unwrap_or(0),
        )
        .await);
    };
    cancel_pending(&mut tx, &uid, now, FutureSlots::Cancel).await?;
    commit(tx).await
}

/// The namespaces that hold a job or a workflow, in name order.
pub(crate) async fn namespace_list(store: &PgStore) -> Result<Vec<String>> {
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
        .fetch_all(&store.pool)
        .await
        .map_err(db_err)
}
