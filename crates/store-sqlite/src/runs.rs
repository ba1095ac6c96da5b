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
use crate::workflows::{TASK_COLUMNS, cancel_runs_in_tx, check_run_version, create_run_in_tx};
use sundial_store::steps::listings::RUN_COLUMNS;

pub(crate) async fn run_get(
    store: &SqliteStore,
    namespace: &str,
    id: &str,
) -> Result<Option<RunRecord>> {
    let now = ms(store.clock.now());
    let sql =
        format!("SELECT {RUN_COLUMNS} FROM workflow_runs r WHERE r.id = ?1 AND r.namespace = ?2");
    let Some(row) = sqlx::query(&sql)
        .bind(id)
        .bind(namespace)
        .fetch_optional(&store.reader)
        .await
        .map_err(db_err)?
    else {
        return Ok(None);
    };
    let mut run = rows::run(&row, now)?;
    let uid: String = row.try_get("workflow_uid").map_err(db_err)?;
    let mut conn = store.reader.acquire().await.map_err(db_err)?;
    let parsed = match store.workflow_specs.get(&uid, run.workflow_version) {
        Some(p) => p,
        None => {
            let text: String = sqlx::query_scalar(
                "SELECT spec FROM workflow_versions WHERE uid = ?1 AND version = ?2",
            )
            .bind(&uid)
            .bind(run.workflow_version)
            .fetch_one(&mut *conn)
            .await
            .map_err(db_err)?;
            store
                .workflow_specs
                .insert(&uid, run.workflow_version, &text)?
        }
    };
    let spec = &parsed.spec;
    let task_rows = sqlx::query(&format!(
        "SELECT {TASK_COLUMNS} FROM executions WHERE run_id = ?1"
    ))
    .bind(id)
    .fetch_all(&mut *conn)
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
        // The one writer's transaction holds every row it reads.
        let row: Option<(String, String, i64)> = sqlx::query_as(
            "SELECT state, workflow_uid, workflow_version FROM workflow_runs WHERE id = ?1 AND namespace = ?2",
        )
        .bind(id)
        .bind(namespace)
        .fetch_optional(&mut **self.0)
        .await
        .map_err(db_err)?;
        let (state, uid, version) = row.ok_or_else(|| Error::NotFound(format!("run {id}")))?;
        Ok((rows::parse(state)?, uid, version))
    }

    async fn refuse_if_dropping(&mut self, _id: &str) -> Result<()> {
        // History is deleted row by row here, inside the one writer's transactions.
        Ok(())
    }

    async fn workflow_exists(&mut self, uid: &str) -> Result<bool> {
        let found: Option<i64> = sqlx::query_scalar("SELECT 1 FROM workflows WHERE uid = ?1")
            .bind(uid)
            .fetch_optional(&mut **self.0)
            .await
            .map_err(db_err)?;
        Ok(found.is_some())
    }

    async fn other_unfinished_runs(&mut self, uid: &str, id: &str) -> Result<Vec<String>> {
        sqlx::query_scalar(&format!(
            "SELECT id FROM workflow_runs WHERE workflow_uid = ?1 AND id <> ?2 AND state IN {UNFINISHED_RUN}"
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
        cancel_runs_in_tx(self.0, runs, now, end).await
    }

    async fn locked_task_facts(&mut self, id: &str) -> Result<HashMap<String, TaskFact>> {
        let rows_ = sqlx::query("SELECT id, task, state, output FROM executions WHERE run_id = ?1")
            .bind(id)
            .fetch_all(&mut **self.0)
            .await
            .map_err(db_err)?;
        rows_.iter().map(rows::task_fact).collect()
    }

    async fn reset_tasks(&mut self, resets: &[(String, u32, RunSpec)]) -> Result<()> {
        for (execution, extra, run_spec) in resets {
            sqlx::query(
                "UPDATE executions SET state = 'pending', due_at = NULL, finished_at = NULL, \
                 lease_expires_at = NULL, output = NULL, max_attempts = attempt + ?2, run = ?3 \
                 WHERE id = ?1",
            )
            .bind(execution)
            .bind(i64::from(*extra))
            .bind(to_json(run_spec)?)
            .execute(&mut **self.0)
            .await
            .map_err(db_err)?;
        }
        Ok(())
    }

    async fn reopen_run(&mut self, id: &str, timeout_at: Option<i64>) -> Result<()> {
        sqlx::query(
            "UPDATE workflow_runs SET state = 'running', finished_at = NULL, timeout_at = ?2 WHERE id = ?1",
        )
        .bind(id)
        .bind(timeout_at)
        .execute(&mut **self.0)
        .await
        .map_err(db_err)?;
        Ok(())
    }

    async fn runs_timed_out(&mut self, now: i64, limit: u32) -> Result<Vec<String>> {
        sqlx::query_scalar(&format!(
            "SELECT id FROM workflow_runs WHERE timeout_at <= ?1 AND state IN {UNFINISHED_RUN} \
             ORDER BY timeout_at LIMIT ?2"
        ))
        .bind(now)
        .bind(i64::from(limit))
        .fetch_all(&mut **self.0)
        .await
        .map_err(db_err)
    }

    async fn notify_due(&mut self) -> Result<()> {
        // Signalled after the commit (`Signals::due`).
        Ok(())
    }
}

pub(crate) async fn run_cancel(
    store: &SqliteStore,
    namespace: &str,
    id: &str,
) -> Result<RunRecord> {
    let now = ms(store.clock.now());
    let mut tx = store.begin().await?;
    let stopped = steps::run_cancel(&mut Release(&mut tx), namespace, id, now).await?;
    commit(tx).await?;
    for e in stopped {
        let _ = store.signals.cancelled.send(e);
    }
    run_get(store, namespace, id)
        .await?
        .ok_or_else(|| Error::NotFound(format!("run {id}")))
}

pub(crate) async fn run_retry(
    store: &SqliteStore,
    namespace: &str,
    id: &str,
    names: &[String],
) -> Result<RunRecord> {
    let now = ms(store.clock.now());
    let mut tx = store.begin().await?;
    let cache = &store.workflow_specs;
    let retried = steps::run_retry(&mut Release(&mut tx), cache, namespace, id, names, now).await?;
    commit(tx).await?;
    if retried.queued > 0 {
        store.signals.due.notify_one();
    }
    for e in retried.stopped {
        let _ = store.signals.cancelled.send(e);
    }
    run_get(store, namespace, id)
        .await?
        .ok_or_else(|| Error::NotFound(format!("run {id}")))
}

pub(crate) async fn run_expire(store: &SqliteStore, limit: u32) -> Result<u32> {
    let now = ms(store.clock.now());
    let mut tx = store.begin().await?;
    let (expired, stopped) = steps::run_expire(&mut Release(&mut tx), now, limit).await?;
    commit(tx).await?;
    for id in stopped {
        let _ = store.signals.cancelled.send(id);
    }
    Ok(expired)
}

pub(crate) async fn run_create(store: &SqliteStore, run: &NewRun) -> Result<RunRecord> {
    let now = ms(store.clock.now());
    let mut tx = store.begin().await?;
    check_run_version(&mut tx, run).await?;
    let created = create_run_in_tx(&mut tx, &store.workflow_specs, run, now).await?;
    commit(tx).await?;
    created.signal(store);
    run_get(store, &run.namespace, &created.id)
        .await?
        .ok_or_else(|| Error::NotFound(format!("run {}", created.id)))
}
