//! Workflow runs as the API sees them (docs/workflows.md, "Runs"): read, cancel and retry
//! one, and the expiry of runs past their `run_timeout`, written once in
//! `sundial_store::steps::runs`; this file keeps what PostgreSQL does its own way: the expiry's
//! row locks (`FOR UPDATE SKIP LOCKED`, so two reapers never wait on each other), the refusal
//! of a run whose day of history is being dropped, the tasks reset in one statement over
//! arrays (`UNNEST`) and the workers woken by `NOTIFY` inside the transaction. A run's
//! creation and the release of its tasks are in `workflows.rs` and
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

    /// Locked in id order, skipping runs another reaper holds.
    const TIMED_OUT: &'static str = "SELECT id FROM workflow_runs WHERE id = ANY(ARRAY( \
         SELECT id FROM workflow_runs WHERE timeout_at <= $1 ORDER BY timeout_at LIMIT $2)) \
         AND state IN ('scheduled', 'running') ORDER BY id FOR UPDATE SKIP LOCKED";

    fn tx(&mut self) -> SqlTx<'_, 'c> {
        SqlTx(&mut *self.0)
    }

    async fn refuse_if_dropping(&mut self, id: &str) -> Result<()> {
        crate::retention::refuse_if_dropping(self.0, id).await
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
}

pub(crate) async fn run_cancel(store: &PgStore, namespace: &str, id: &str) -> Result<RunRecord> {
    let mut tx = store.begin().await?;
    let now = store.now_ms(&mut *tx).await?;
    steps::run_cancel(&mut Release(&mut tx), namespace, id, now).await?;
    commit(tx).await?;
    steps::run_read(store, namespace, id).await
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
    steps::run_read(store, namespace, id).await
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
    let specs = &store.workflow_specs;
    let id = run_create::create_held_run(&mut SqlTx(&mut tx), specs, run, now)
        .await?
        .id;
    commit(tx).await?;
    steps::run_read(store, &run.namespace, &id).await
}
