//! Backfills (docs/time.md, "Backfill"): create, read, the driver's fenced step, cancel.
//! A step and a cancel are transactions of the one writer, so a step after a cancel writes
//! nothing.

use super::*;
use sundial_store::{BackfillOf, BackfillRecord, BackfillStep, BackfillStepped, NewBackfill};

const COLUMNS: &str = "id, namespace, of, name, uid, shard, from_at, to_at, max_per_second, \
    state, slots, created, existing, cursor_at, last_id, reason, created_at, updated_at, \
    finished_at";

fn i64_of(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

pub(crate) async fn backfill_create(
    store: &SqliteStore,
    b: &NewBackfill,
) -> Result<BackfillRecord> {
    let now = ms(store.clock.now());
    let mut tx = store.begin().await?;
    let inserted = sqlx::query(
        "INSERT INTO backfills (id, namespace, of, name, uid, shard, from_at, to_at, \
           max_per_second, state, slots, cursor_at, created_at, updated_at) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, 'running', ?10, ?7, ?11, ?11) \
         ON CONFLICT (id) DO NOTHING",
    )
    .bind(&b.id)
    .bind(&b.namespace)
    .bind(b.of.as_str())
    .bind(&b.name)
    .bind(&b.uid)
    .bind(i64::from(b.shard))
    .bind(ms(b.from))
    .bind(ms(b.to))
    .bind(i64::from(b.max_per_second))
    .bind(i64_of(b.slots))
    .bind(now)
    .execute(&mut *tx)
    .await
    .map_err(db_err)?;
    if inserted.rows_affected() == 0 {
        return Err(Error::Conflict(format!("backfill {} exists", b.id)));
    }
    let row = sqlx::query(&format!("SELECT {COLUMNS} FROM backfills WHERE id = ?1"))
        .bind(&b.id)
        .fetch_one(&mut *tx)
        .await
        .map_err(db_err)?;
    let record = rows::backfill(&row)?;
    commit(tx).await?;
    Ok(record)
}

pub(crate) async fn backfill_get(
    store: &SqliteStore,
    namespace: &str,
    id: &str,
) -> Result<Option<BackfillRecord>> {
    sqlx::query(&format!(
        "SELECT {COLUMNS} FROM backfills WHERE namespace = ?1 AND id = ?2"
    ))
    .bind(namespace)
    .bind(id)
    .fetch_optional(&store.reader)
    .await
    .map_err(db_err)?
    .as_ref()
    .map(rows::backfill)
    .transpose()
}

pub(crate) async fn backfill_list(
    store: &SqliteStore,
    namespace: &str,
    of: BackfillOf,
    name: &str,
) -> Result<Vec<BackfillRecord>> {
    sqlx::query(&format!(
        "SELECT {COLUMNS} FROM backfills WHERE namespace = ?1 AND of = ?2 AND name = ?3 \
         ORDER BY created_at DESC, id DESC LIMIT 100"
    ))
    .bind(namespace)
    .bind(of.as_str())
    .bind(name)
    .fetch_all(&store.reader)
    .await
    .map_err(db_err)?
    .iter()
    .map(rows::backfill)
    .collect()
}

pub(crate) async fn backfill_running(
    store: &SqliteStore,
    shards: &[u16],
) -> Result<Vec<BackfillRecord>> {
    if shards.is_empty() {
        return Ok(Vec::new());
    }
    // The embedded store's one scheduler holds every shard: read the running ones, keep those
    // of the shards given.
    let running: Vec<BackfillRecord> = sqlx::query(&format!(
        "SELECT {COLUMNS} FROM backfills WHERE state = 'running' ORDER BY created_at, id"
    ))
    .fetch_all(&store.reader)
    .await
    .map_err(db_err)?
    .iter()
    .map(rows::backfill)
    .collect::<Result<_>>()?;
    Ok(running
        .into_iter()
        .filter(|b| shards.contains(&b.shard))
        .collect())
}

pub(crate) async fn backfill_taken(
    store: &SqliteStore,
    of: BackfillOf,
    ids: &[String],
) -> Result<std::collections::HashSet<String>> {
    if ids.is_empty() {
        return Ok(Default::default());
    }
    let table = match of {
        BackfillOf::Job => "executions",
        BackfillOf::Workflow => "workflow_runs",
    };
    let mut found = std::collections::HashSet::new();
    for part in ids.chunks(500) {
        let marks = vec!["?"; part.len()].join(", ");
        let sql = format!("SELECT id FROM {table} WHERE id IN ({marks})");
        let mut q = sqlx::query_scalar::<_, String>(&sql);
        for id in part {
            q = q.bind(id);
        }
        found.extend(q.fetch_all(&store.reader).await.map_err(db_err)?);
    }
    Ok(found)
}

pub(crate) async fn backfill_unfinished(
    store: &SqliteStore,
    of: BackfillOf,
    uid: &str,
) -> Result<u64> {
    // The embedded store keeps its queue on executions: waiting ones have `due_at`, running
    // ones a lease (each through a partial index by incarnation).
    let sql = match of {
        BackfillOf::Job => {
            "SELECT (SELECT count(*) FROM executions WHERE job_uid = ?1 AND due_at IS NOT NULL) \
             + (SELECT count(*) FROM executions WHERE job_uid = ?1 AND state = 'running')"
                .to_owned()
        }
        BackfillOf::Workflow => format!(
            "SELECT count(*) FROM workflow_runs WHERE workflow_uid = ?1 AND state IN {}",
            workflows::UNFINISHED_RUN
        ),
    };
    let n: i64 = sqlx::query_scalar(&sql)
        .bind(uid)
        .fetch_one(&store.reader)
        .await
        .map_err(db_err)?;
    Ok(u64::try_from(n).unwrap_or(0))
}

/// Whether a serial step must wait: the backfill's previous execution or run is unfinished,
/// or (a workflow) another run of it is unfinished and past its fire time at `now`.
async fn must_wait(
    tx: &mut Tx<'_>,
    step: &BackfillStep,
    last_id: Option<&str>,
    now: i64,
) -> Result<bool> {
    if let Some(uid) = step.runs.first().map(|r| &r.workflow_uid) {
        let busy: Option<i32> = sqlx::query_scalar(&format!(
            "SELECT 1 FROM workflow_runs WHERE workflow_uid = ?1 AND state IN {} \
             AND fire_at <= ?2 LIMIT 1",
            workflows::UNFINISHED_RUN
        ))
        .bind(uid)
        .bind(now)
        .fetch_optional(&mut **tx)
        .await
        .map_err(db_err)?;
        return Ok(busy.is_some());
    }
    let Some(last) = last_id else {
        return Ok(false);
    };
    let state: Option<String> = sqlx::query_scalar("SELECT state FROM executions WHERE id = ?1")
        .bind(last)
        .fetch_optional(&mut **tx)
        .await
        .map_err(db_err)?;
    Ok(match state {
        Some(s) => !s
            .parse::<ExecutionState>()
            .map_err(Error::Corrupt)?
            .is_terminal(),
        None => false,
    })
}

pub(crate) async fn backfill_step(
    store: &SqliteStore,
    step: &BackfillStep,
) -> Result<BackfillStepped> {
    let now = ms(store.clock.now());
    let mut tx = store.begin().await?;
    trigger::check_fence(&mut tx, store, &step.node, &step.leases, &[step.shard]).await?;
    let current: Option<Option<String>> = sqlx::query_scalar(
        "SELECT last_id FROM backfills WHERE id = ?1 AND state = 'running' AND cursor_at = ?2 \
        ",
    )
    .bind(&step.id)
    .bind(ms(step.expected_cursor))
    .fetch_optional(&mut *tx)
    .await
    .map_err(db_err)?;
    let Some(last_id) = current else {
        return Ok(BackfillStepped::Stale);
    };
    if let Some(run) = step.runs.first() {
        workflows::check_run_version(&mut tx, run).await?;
    }
    let planned = step.executions.len() + step.runs.len();
    if step.serial && planned > 0 && must_wait(&mut tx, step, last_id.as_deref(), now).await? {
        return Ok(BackfillStepped::Waiting);
    }
    let mut created = 0u32;
    let mut last = None;
    let mut made_runs = Vec::new();
    if !step.executions.is_empty() {
        let executions: Vec<&sundial_store::NewExecution> = step.executions.iter().collect();
        created =
            trigger::insert_executions(&mut tx, &executions, ts(now)?, Some(&step.node)).await?;
        last = step.executions.last().map(|e| e.id.clone());
    }
    for run in &step.runs {
        let made = workflows::create_run_in_tx(&mut tx, &store.workflow_specs, run, now).await?;
        if made.inserted {
            created += 1;
            last = Some(made.id.clone());
        }
        made_runs.push(made);
    }
    let found_taken = u64::try_from(planned).unwrap_or(u64::MAX) - u64::from(created);
    sqlx::query(
        "UPDATE backfills SET cursor_at = ?2, created = created + ?3, existing = existing + ?4, \
           last_id = COALESCE(?5, last_id), updated_at = ?6, \
           state = CASE WHEN ?7 THEN 'done' ELSE state END, \
           finished_at = CASE WHEN ?7 THEN ?6 ELSE finished_at END \
         WHERE id = ?1",
    )
    .bind(&step.id)
    .bind(ms(step.cursor))
    .bind(i64::from(created))
    .bind(i64_of(step.existing + found_taken))
    .bind(last)
    .bind(now)
    .bind(step.done)
    .execute(&mut *tx)
    .await
    .map_err(db_err)?;
    commit(tx).await?;
    if !step.executions.is_empty() && created > 0 {
        store.signals.due.notify_one();
    }
    for made in &made_runs {
        made.signal(store);
    }
    Ok(BackfillStepped::Applied(created))
}

pub(crate) async fn backfill_cancel(
    store: &SqliteStore,
    namespace: &str,
    id: &str,
    reason: Option<&str>,
) -> Result<BackfillRecord> {
    let now = ms(store.clock.now());
    let mut tx = store.begin().await?;
    let state: Option<String> =
        sqlx::query_scalar("SELECT state FROM backfills WHERE namespace = ?1 AND id = ?2")
            .bind(namespace)
            .bind(id)
            .fetch_optional(&mut *tx)
            .await
            .map_err(db_err)?;
    match state.as_deref() {
        None => return Err(Error::NotFound(format!("backfill {id}"))),
        Some("running") => {}
        Some(other) => return Err(Error::Conflict(format!("backfill {id} is {other}"))),
    }
    let row = sqlx::query(&format!(
        "UPDATE backfills SET state = 'cancelled', reason = ?2, updated_at = ?3, finished_at = ?3 \
         WHERE id = ?1 RETURNING {COLUMNS}"
    ))
    .bind(id)
    .bind(reason)
    .bind(now)
    .fetch_one(&mut *tx)
    .await
    .map_err(db_err)?;
    let record = rows::backfill(&row)?;
    commit(tx).await?;
    Ok(record)
}
