//! Executions and history: one execution's cancel and re-drive, and the bulk cancel the
//! claim's `replace` and a run's cancel use, written once in
//! `sundial_store::steps::executions` over this store's transaction ([`SqlTx`]); this store
//! keeps its queue table in step ([`ExecutionDialect`]), locks a task's run first and
//! notifies inside the transaction.

use super::*;
use sundial_store::steps::release::release_runs;

use crate::reads::SqlTx;
use sundial_store::steps::executions::{self as steps, ExecutionDialect};

/// The queue row taken away after a cancel; a re-drive writes it again with the execution.
impl ExecutionDialect for PgStore {
    const DEQUEUE: Option<&'static str> = Some("DELETE FROM execution_queue WHERE id = ANY($1)");
    const REDRIVE: &'static str = "WITH e AS (UPDATE executions SET state = 'queued', \
           due_at = $3, queued_at = $3, finished_at = NULL, max_attempts = attempt + $4 \
           WHERE id = $1 AND namespace = $2 AND state IN ('dead', 'failed') AND run_id IS NULL \
           RETURNING id, namespace, job_uid) \
         INSERT INTO execution_queue (id, namespace, job_uid, due_at) \
           SELECT id, namespace, job_uid, $3 FROM e \
         ON CONFLICT (id) DO UPDATE SET due_at = excluded.due_at, lease_expires_at = NULL";
}

pub(crate) async fn execution_cancel(
    store: &PgStore,
    namespace: &str,
    id: &str,
) -> Result<ExecutionRecord> {
    let mut tx = store.begin().await?;
    let now = store.now_ms(&mut *tx).await?;
    // A workflow task's run is locked before the task (the lock order of `workflows`).
    let runs = workflows::lock_runs_of(&mut tx, &[id]).await?;
    let before = steps::execution_cancel(&mut SqlTx(&mut tx), namespace, id, now).await?;
    if before.state == ExecutionState::Running {
        notify_cancelled(&mut tx, id).await?;
    }
    // A workflow task's cancel is an ending like any other: its downstream is decided now.
    if release_runs(&mut SqlTx(&mut tx), &store.workflow_specs, &runs, now).await? > 0 {
        notify_due(&mut tx).await?;
    }
    commit(tx).await?;
    steps::execution_after(store, namespace, id).await
}

pub(crate) async fn execution_redrive(
    store: &PgStore,
    namespace: &str,
    id: &str,
    extra_attempts: u32,
) -> Result<ExecutionRecord> {
    let mut tx = store.begin().await?;
    crate::retention::refuse_if_dropping(&mut tx, id).await?;
    let now = store.now_ms(&mut *tx).await?;
    steps::execution_redrive(&mut SqlTx(&mut tx), namespace, id, now, extra_attempts).await?;
    notify_due(&mut tx).await?;
    commit(tx).await?;
    steps::execution_after(store, namespace, id).await
}
