//! Executions and history: one execution's cancel and re-drive, and the bulk cancel the
//! claim's `replace` and a run's cancel use, written once in
//! `sundial_store::steps::executions` over this store's transaction ([`SqlTx`]); this store
//! keeps no queue apart ([`ExecutionDialect`]) and signals after the commit.

use super::*;
use sundial_store::steps::release::release_runs;

use crate::reads::SqlTx;
use sundial_store::steps::executions::{self as steps, ExecutionDialect};

/// No queue apart from the execution rows, which a re-drive updates alone.
impl ExecutionDialect for SqliteStore {
    const DEQUEUE: Option<&'static str> = None;
    const REDRIVE: &'static str = "UPDATE executions SET state = 'queued', due_at = $3, \
         queued_at = $3, finished_at = NULL, max_attempts = attempt + $4 \
         WHERE id = $1 AND namespace = $2 AND state IN ('dead', 'failed') AND run_id IS NULL";
}

pub(crate) async fn execution_cancel(
    store: &SqliteStore,
    namespace: &str,
    id: &str,
) -> Result<ExecutionRecord> {
    let now = ms(store.clock.now());
    let mut tx = store.begin().await?;
    let before = steps::execution_cancel(&mut SqlTx(&mut tx), namespace, id, now).await?;
    // A workflow task's cancel is an ending like any other: its downstream is decided now.
    let queued = match before.run_id {
        Some(run) => release_runs(&mut SqlTx(&mut tx), &store.workflow_specs, &[run], now).await?,
        None => 0,
    };
    commit(tx).await?;
    if queued > 0 {
        store.signals.due.notify_one();
    }
    if before.state == ExecutionState::Running {
        let _ = store.signals.cancelled.send(id.to_owned());
    }
    steps::execution_after(store, namespace, id).await
}

pub(crate) async fn execution_redrive(
    store: &SqliteStore,
    namespace: &str,
    id: &str,
    extra_attempts: u32,
) -> Result<ExecutionRecord> {
    let now = ms(store.clock.now());
    let mut tx = store.begin().await?;
    steps::execution_redrive(&mut SqlTx(&mut tx), namespace, id, now, extra_attempts).await?;
    commit(tx).await?;
    steps::execution_after(store, namespace, id).await
}
