//! Workflow runs as the API sees them (docs/workflows.md, "Runs"): read, cancel and retry
//! one, and the expiry of runs past their `run_timeout`, written once in
//! `sundial_store::steps::runs`; this file keeps what SQLite does its own way: the one
//! writer's transaction holds every row it reads (no row locks), history is deleted row by row
//! (nothing to refuse), the tasks are reset one statement each, and the workers are signalled
//! after the commit. A run's creation and the release of its tasks are in `workflows.rs` and
//! `sundial_store::steps::release`.

use sundial_store::RunRecord;
use sundial_store::steps::runs::{self as steps, RunStatements};

use super::*;
use crate::reads::SqlTx;
use crate::release::Release;
use crate::rows::to_json;
use sundial_store::steps::run_create;

impl<'c> RunStatements for Release<'_, 'c> {
    type Tx<'a>
        = SqlTx<'a, 'c>
    where
        Self: 'a;

    const TIMED_OUT: &'static str = "SELECT id FROM workflow_runs WHERE timeout_at <= $1 \
         AND state IN ('scheduled', 'running') ORDER BY timeout_at LIMIT $2";

    fn tx(&mut self) -> SqlTx<'_, 'c> {
        SqlTx(&mut *self.0)
    }

    async fn refuse_if_dropping(&mut self, _id: &str) -> Result<()> {
        // History is deleted row by row here, inside the one writer's transactions.
        Ok(())
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
    steps::run_read(store, namespace, id).await
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
    steps::run_read(store, namespace, id).await
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
    let specs = &store.workflow_specs;
    let created = run_create::create_held_run(&mut SqlTx(&mut tx), specs, run, now).await?;
    commit(tx).await?;
    created.signal(store);
    steps::run_read(store, &run.namespace, &created.id).await
}
