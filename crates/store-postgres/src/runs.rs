//! Workflow runs as the API sees them (docs/workflows.md, "Runs"): read, list, cancel and
//! retry one, and the expiry of runs past their `run_timeout`. A run's creation and the release
//! of its tasks are in `workflows.rs` and `sundial_store::steps::release`.

use std::collections::HashMap;

use sundial_core::workflow::RunState;
use sundial_store::RunRecord;
use sundial_store::steps::runs::{self as steps, RunStatements};
use sundial_store::workflow::{TaskFact, order_tasks};

use super::*;
use crate::release::Release;
use crate::rows::{UNFINISHED_RUN, to_json};
use crate::workflows::{
    TASK_COLUMNS, cancel_runs_in_tx, create_run_in_tx, lock_run_version, version_spec,
};
use sundial_store::steps::listings::RUN_COLUMNS;

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

impl RunStatements for Release<'_, '_> {
    async fn locked_run(&mut self, namespace: &str, id: &str) -> Result<(RunState, String, i64)> {
        let row: Option<(String, String, i64)> = sqlx::query_as(
            "SELECT state, workflow_uid, workflow_version FROM workflow_runs \
             WHERE id = $1 AND namespace = $2 FOR UPDATE",
        )
        .bind(id)
        .bind(namespace)
        .fetch_optional(&mut **self.0)
        .await
        .map_err(db_err)?;
        let (state, uid, version) = row.ok_or_else(|| Error::NotFound(format!("run {id}")))?;
        Ok((rows::parse(state)?, uid, version))
    }

    async fn refuse_if_dropping(&mut self, id: &str) -> Result<()> {
        crate::retention::refuse_if_dropping(self.0, id).await
    }

    async fn workflow_exists(&mut self, uid: &str) -> Result<bool> {
        let found: Option<i32> = sqlx::query_scalar("SELECT 1 FROM workflows WHERE uid = $1")
            .bind(uid)
            .fetch_optional(&mut **self.0)
            .await
            .map_err(db_err)?;
        Ok(found.is_some())
    }

    async fn other_unfinished_runs(&mut self, uid: &str, id: &str) -> Result<Vec<String>> {
        sqlx::query_scalar(&format!(
            "SELECT id FROM workflow_runs WHERE workflow_uid = $1 AND id <> $2 \
             AND state IN {UNFINISHED_RUN} ORDER BY id FOR UPDATE"
        ))
        .bind(uid)
        .bind(id)
        .fetch_all(&mut **self.0)
        .await
        .map_err(db_err)
    }

    async fn cancel_runs(
        &mut self,
        runs: &[String],
        now: i64,
        end: RunState,
    ) -> Result<Vec<String>> {
        // The running executions are signalled by NOTIFY in the transaction.
        cancel_runs_in_tx(self.0, runs, now, end).await?;
        Ok(Vec::new())
    }

    async fn locked_task_facts(&mut self, id: &str) -> Result<HashMap<String, TaskFact>> {
        let task_rows = sqlx::query(
            "SELECT id, task, state, output FROM executions WHERE run_id = $1 ORDER BY id FOR UPDATE",
        )
        .bind(id)
        .fetch_all(&mut **self.0)
        .await
        .map_err(db_err)?;
        task_rows.iter().map(rows::task_fact).collect()
    }

    async fn reset_tasks(&mut self, resets: &[(String, u32, RunSpec)]) -> Result<()> {
        let (mut ids, mut extra, mut runs) = (Vec::new(), Vec::new(), Vec::new());
        for (execution, more, run_spec) in resets {
            ids.push(execution.as_str());
            extra.push(i64::from(*more));
            runs.push(to_json(run_spec)?);
        }
        sqlx::query(
            "UPDATE executions x SET state = 'pending', due_at = NULL, finished_at = NULL, \
               lease_expires_at = NULL, output = NULL, max_attempts = x.attempt + r.extra, run = r.run \
             FROM UNNEST($1::text[], $2::bigint[], $3::text[]) AS r(id, extra, run) WHERE x.id = r.id",
        )
        .bind(&ids)
        .bind(&extra)
        .bind(&runs)
        .execute(&mut **self.0)
        .await
        .map_err(db_err)?;
        Ok(())
    }

    async fn reopen_run(&mut self, id: &str, timeout_at: Option<i64>) -> Result<()> {
        sqlx::query(
            "UPDATE workflow_runs SET state = 'running', finished_at = NULL, timeout_at = $2 WHERE id = $1",
        )
        .bind(id)
        .bind(timeout_at)
        .execute(&mut **self.0)
        .await
        .map_err(db_err)?;
        Ok(())
    }

    async fn runs_timed_out(&mut self, now: i64, limit: u32) -> Result<Vec<String>> {
        // Locked in id order, skipping runs another reaper holds.
        sqlx::query_scalar(&format!(
            "SELECT id FROM workflow_runs WHERE id = ANY(ARRAY( \
               SELECT id FROM workflow_runs WHERE timeout_at <= $1 ORDER BY timeout_at LIMIT $2)) \
             AND state IN {UNFINISHED_RUN} ORDER BY id FOR UPDATE SKIP LOCKED"
        ))
        .bind(now)
        .bind(i64::from(limit))
        .fetch_all(&mut **self.0)
        .await
        .map_err(db_err)
    }

    async fn notify_due(&mut self) -> Result<()> {
        notify_due(self.0).await
    }
}

pub(crate) async fn run_cancel(store: &PgStore, namespace: &str, id: &str) -> Result<RunRecord> {
    let mut tx = store.begin().await?;
    let now = store.now_ms(&mut *tx).await?;
    steps::run_cancel(&mut Release(&mut tx), namespace, id, now).await?;
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
    let cache = &store.workflow_specs;
    steps::run_retry(&mut Release(&mut tx), cache, namespace, id, names, now).await?;
    commit(tx).await?;
    run_get(store, namespace, id)
        .await?
        .ok_or_else(|| Error::NotFound(format!("run {id}")))
}

pub(crate) async fn run_expire(store: &PgStore, limit: u32) -> Result<u32> {
    let mut tx = store.begin().await?;
    let now = store.now_ms(&mut *tx).await?;
    let (expired, _) = steps::run_expire(&mut Release(&mut tx), now, limit).await?;
    commit(tx).await?;
    Ok(expired)
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
