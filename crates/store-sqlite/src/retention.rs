//! History retention (`MaintenanceStore::history_prune`, docs/configuration.md "history_retention"):
//! the history walked in (slot, id) order from where the last call stopped, the expired rows
//! of each step deleted in one write transaction; the walk is written once
//! (`sundial_store::steps::retention`), its statements too, over this store's transaction.
//!
//! Expired means finished before the cut-off and not the newest finished execution of its
//! job (or run of its workflow) while that job (workflow) exists. The walk reads the slot
//! indexes of migration 0009, the newest-finished test reads `executions_job`
//! (`workflow_runs_history`). A deleted execution takes its attempts with it; a dead letter
//! goes by the delete trigger of migration 0008.

use sundial_store::steps::retention::{self as steps, RetentionDialect, Walk};
use sundial_store::{HistoryPrune, HistoryPruned};

use super::*;
use crate::reads::SqlTx;

/// The newer row's test spelled out for `executions_job` (`workflow_runs_history`); the
/// single writer holds every row a step reads until it commits, so nothing is skipped.
impl RetentionDialect for SqliteStore {
    const NEWER: &'static str = "n.scheduled_at >= e.scheduled_at AND n.id <> e.id \
        AND (n.scheduled_at > e.scheduled_at OR n.id > e.id)";
    const TASK_ATTEMPTS_DELETE: &'static str = "DELETE FROM attempts WHERE execution_id IN \
        (SELECT id FROM executions WHERE run_id IN (SELECT value FROM json_each($1)))";
    const SKIP_HELD: Option<&'static str> = None;
}

pub(crate) async fn history_prune(
    store: &SqliteStore,
    prune: &HistoryPrune,
) -> Result<HistoryPruned> {
    if prune.dry_run {
        return steps::history_count(store, prune).await;
    }
    let mut tx = store.begin().await?;
    let walked = steps::table(prune.kind).0.to_owned();
    let done = steps::history_walk(&mut Walk::new(SqlTx(&mut tx), walked), prune).await?;
    commit(tx).await?;
    Ok(done)
}
