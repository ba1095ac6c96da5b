//! Workflow runs as the API sees them (docs/workflows.md, "Runs"): read, list, cancel and
//! retry one, and the expiry of runs past their `run_timeout`. A run's creation and the release
//! of its tasks are in `workflows.rs` and `sundial_store::steps::release`.

use std::collections::HashMap;

use sundial_core::workflow::RunState;
use sundial_store::workflow::{
    TaskFact, check_cancellable, check_not_deleted, check_retryable, facts_in_order, order_tasks,
    retry_policy, retry_resets,
};
use sundial_store::{RunListQuery, RunRecord};

use super::*;
use crate::release::release_runs_in_tx;
use crate::rows::{UNFINISHED_RUN, to_json};
pub(crate) use crate::workflows::run_expire;
use crate::workflows::{
    RUN_COLUMNS, TASK_COLUMNS, cancel_runs_in_tx, create_run_in_tx, lock_run_version, version_spec,
};

pub(crate) async fn run_get(
    store: &PgStore,
    namespace: &str,
    id: &str,
) -> Result<Option<RunRecord>> {
    let now = store.now_ms(&store.pool).await?;
    let sql =
        format!("SELECT {RUN_COLUMNS} FROM workflow_runs r WHERE r.id = $1 AND r.namespace = $2");
    let Some(row) = sqlx::query(&sql)
        .bind(id)
        .bind(namespace)
        .fetch_optional(&store.pool)
        .await
        .map_err(db_err)?
    else {
        return Ok(None);
    };
    let mut run = rows::run(&row, now)?;
    let uid: String = row.try_get("workflow_uid").map_err(db_err)?;
    let parsed = version_spec(
        &store.pool,
        &store.workflow_specs,
        &uid,
        run.workflow_version,
    )
    .await?;
    let spec = &parsed.spec;
    let task_rows = sqlx::query(&format!(
        "SELECT {TASK_COLUMNS} FROM executions WHERE run_id = $1"
    ))
    .bind(id)
    .fetch_all(&store.pool)
    .await
    .map_err(db_err)?;
    let mut tasks = task_rows
        .iter()
        .map(|r| rows::task_record(r, spec, now))
        .collect::<Result<Vec<_>>>()?;
    order_tasks(spec, &mut tasks);
    run.tasks = tasks;
    Ok(Some(run))
}

pub(crate) async fn run_list(store: &PgStore, q: &RunListQuery) -> Result<Vec<RunRecord>> {
    let now = store.now_ms(&store.pool).await?;
    let mut sql = format!("SELECT {RUN_COLUMNS} FROM workflow_runs r WHERE r.namespace = $1");
    if q.workflow.is_some() {
        sql.push_str(" AND r.workflow = $2");
    }
    match q.state {
        Some(RunState::Running) => sql
            .push_str(" AND (r.state = 'running' OR (r.state = 'scheduled' AND r.fire_at <= $3))"),
        Some(RunState::Scheduled) => sql.push_str(" AND r.state = 'scheduled' AND r.fire_at > $3"),
        Some(_) => sql.push_str(" AND r.state = $4"),
        None => {}
    }
    if q.before.is_some() {
        sql.push_str(" AND (r.scheduled_at < $5 OR (r.scheduled_at = $5 AND r.id < $6))");
    }
    sql.push_str(" ORDER BY r.scheduled_at DESC, r.id DESC LIMIT $7");
    let (before_at, before_id) = q
        .before
        .clone()
        .map_or((0, String::new()), |(t, id)| (ms(t), id));
    let rows = sqlx::query(&sql)
        .bind(&q.namespace)
        .bind(q.workflow.as_deref())
        .bind(now)
        .bind(q.state.map(RunState::as_str))
        .bind(before_at)
        .bind(before_id)
        .bind(i64::from(q.limit))
        .fetch_all(&store.pool)
        .await
        .map_err(db_err)?;
    rows.iter().map(|r| rows::run(r, now)).collect()
}

/// Locks run `id` of `namespace` inside `tx`; its stored state and its version's identity.
async fn locked_run(tx: &mut Tx<'_>, namespace: &str, id: &str) -> Result<(RunState, String, i64)> {
    let row: Option<(String, String, i64)> = sqlx::query_as(
        "SELECT state, workflow_uid, workflow_version FROM workflow_runs \
         WHERE id = $1 AND namespace = $2 FOR UPDATE",
    )
    .bind(id)
    .bind(namespace)
    .fetch_optional(&mut **tx)
    .await
    .map_err(db_err)?;
    let (state, uid, version) = row.ok_or_else(|| Error::NotFound(format!("run {id}")))?;
    Ok((rows::parse(state)?, uid, version))
}

pub(crate) async fn run_cancel(store: &PgStore, namespace: &str, id: &str) -> Result<RunRecord> {
    let mut tx = store.begin().await?;
    let now = store.now_ms(&mut *tx).await?;
    let (state, _, _) = locked_run(&mut tx, namespace, id).await?;
    check_cancellable(id, state)?;
    cancel_runs_in_tx(&mut tx, &[id.to_owned()], now, RunState::Cancelled).await?;
    commit(tx).await?;
    run_get(store, namespace, id)
        .await?
        .ok_or_else(|| Error::NotFound(format!("run {id}")))
}

pub(crate) async fn run_retry(
    store: &PgStore,
    namespace: &str,
    id: &str,
    names: &[String],
) -> Result<RunRecord> {
    let mut tx = store.begin().await?;
    let now = store.now_ms(&mut *tx).await?;
    let (state, uid, version) = locked_run(&mut tx, namespace, id).await?;
    check_retryable(id, state)?;
    crate::retention::refuse_if_dropping(&mut tx, id).await?;
    let current: Option<i32> = sqlx::query_scalar("SELECT 1 FROM workflows WHERE uid = $1")
        .bind(&uid)
        .fetch_optional(&mut *tx)
        .await
        .map_err(db_err)?;
    check_not_deleted(id, current.is_some())?;
    let parsed = version_spec(&mut *tx, &store.workflow_specs, &uid, version).await?;
    let (spec, dag) = (&parsed.spec, &parsed.dag);
    let others: Vec<String> = sqlx::query_scalar(&format!(
        "SELECT id FROM workflow_runs WHERE workflow_uid = $1 AND id <> $2 \
         AND state IN {UNFINISHED_RUN} ORDER BY id FOR UPDATE"
    ))
    .bind(&uid)
    .bind(id)
    .fetch_all(&mut *tx)
    .await
    .map_err(db_err)?;
    let replaced = retry_policy(id, spec.concurrency_policy, others)?;
    cancel_runs_in_tx(&mut tx, &replaced, now, RunState::Cancelled).await?;
    let task_rows = sqlx::query(
        "SELECT id, task, state, output FROM executions WHERE run_id = $1 ORDER BY id FOR UPDATE",
    )
    .bind(id)
    .fetch_all(&mut *tx)
    .await
    .map_err(db_err)?;
    let by_task: HashMap<String, TaskFact> = task_rows
        .iter()
        .map(rows::task_fact)
        .collect::<Result<_>>()?;
    let facts = facts_in_order(spec, by_task, id)?;
    let (mut ids, mut extra, mut runs) = (Vec::new(), Vec::new(), Vec::new());
    for (execution, more, run_spec) in retry_resets(id, spec, dag, &facts, names)? {
        ids.push(execution);
        extra.push(i64::from(more));
        runs.push(to_json(&run_spec)?);
    }
    sqlx::query(
        "UPDATE executions x SET state = 'pending', due_at = NULL, finished_at = NULL, \
           lease_expires_at = NULL, output = NULL, max_attempts = x.attempt + r.extra, run = r.run \
         FROM UNNEST($1::text[], $2::bigint[], $3::text[]) AS r(id, extra, run) WHERE x.id = r.id",
    )
    .bind(&ids)
    .bind(&extra)
    .bind(&runs)
    .execute(&mut *tx)
    .await
    .map_err(db_err)?;
    sqlx::query(
        "UPDATE workflow_runs SET state = 'running', finished_at = NULL, timeout_at = $2 WHERE id = $1",
    )
    .bind(id)
    .bind(spec.run_timeout.map(|t| now + t.as_millis_i64()))
    .execute(&mut *tx)
    .await
    .map_err(db_err)?;
    let queued = release_runs_in_tx(&mut tx, &store.workflow_specs, &[id.to_owned()], now).await?;
    if queued > 0 {
        notify_due(&mut tx).await?;
    }
    commit(tx).await?;
    run_get(store, namespace, id)
        .await?
        .ok_or_else(|| Error::NotFound(format!("run {id}")))
}

pub(crate) async fn run_create(store: &PgStore, run: &NewRun) -> Result<RunRecord> {
    let mut tx = store.begin().await?;
    let now = store.now_ms(&mut *tx).await?;
    lock_run_version(&mut tx, run).await?;
    let id = create_run_in_tx(&mut tx, &store.workflow_specs, run, now)
        .await?
        .id;
    commit(tx).await?;
    run_get(store, &run.namespace, &id)
        .await?
        .ok_or_else(|| Error::NotFound(format!("run {id}")))
}
