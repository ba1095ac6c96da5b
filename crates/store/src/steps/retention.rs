//! History retention's walk (`MaintenanceStore::history_prune`, docs/configuration.md
//! "history_retention"), written once over the statements each store provides
//! ([`RetentionStatements`], on the caller's open transaction): one step of the walk of the
//! history in (slot, id) order from where the last call stopped, the expired rows of the step
//! deleted in the caller's transaction. Each store keeps its expiry test (SQL), its locks and
//! any maintenance of its own beside the walk (PostgreSQL drops expired days whole).
//!
//! Invariants: a step reads at most `limit` rows of the walk, all with a slot before the
//! cut-off, in (slot, id) order after the key it was given; it deletes only rows its store's
//! expiry test judged expired and still holds, a workflow run's task executions with it and an
//! execution's attempts with it; it returns the key of its last row when it read a full page
//! (the walk goes on from there), `None` otherwise.

use std::future::Future;

use crate::{HistoryKey, HistoryKind, HistoryPrune, HistoryPruned, Result};

/// The statements of a retention step, in the dialect of one store, on the transaction the
/// caller opened. Instants are UTC milliseconds since the epoch. Every method may fail with
/// the store's classified error.
pub trait RetentionStatements: Send {
    /// Up to `limit` rows of the `kind` walk with a slot before `before`, after the key
    /// `after` (slot, id), in (slot, id) order: each one's id, slot and whether the store's
    /// expiry test at the cut-off `before` judges it expired.
    fn page(
        &mut self,
        kind: HistoryKind,
        before: i64,
        after: (i64, &str),
        limit: u32,
    ) -> impl Future<Output = Result<Vec<(String, i64, bool)>>> + Send;

    /// Those of the expired `ids` the transaction may delete, held until it ends: the rows
    /// still finished before `before` that no other transaction holds, where the store can
    /// tell (the others are left for a later pass).
    fn hold(
        &mut self,
        kind: HistoryKind,
        ids: &[String],
        before: i64,
    ) -> impl Future<Output = Result<Vec<String>>> + Send;

    /// Deletes `ids` of the `kind` walk with their attempts (and a run's task executions and
    /// their attempts); returns how many rows of the walk went and how many task executions.
    fn delete(
        &mut self,
        kind: HistoryKind,
        ids: &[String],
    ) -> impl Future<Output = Result<(u64, u64)>> + Send;
}

/// One step of the walk `prune` describes (not a dry run: the store counts those itself),
/// in the caller's transaction.
///
/// # Errors
/// The store's classified error; [`crate::Error::Corrupt`] for a slot that is no instant.
pub async fn history_walk<S: RetentionStatements>(
    s: &mut S,
    prune: &HistoryPrune,
) -> Result<HistoryPruned> {
    let before = prune.before.as_millisecond();
    let after = prune.after.as_ref().map_or((i64::MIN, ""), |k| {
        (k.scheduled_at.as_millisecond(), k.id.as_str())
    });
    let seen = s.page(prune.kind, before, after, prune.limit).await?;
    let doomed: Vec<String> = seen
        .iter()
        .filter(|(_, _, expired)| *expired)
        .map(|(id, _, _)| id.clone())
        .collect();
    let mut done = HistoryPruned::default();
    if !doomed.is_empty() {
        let held = s.hold(prune.kind, &doomed, before).await?;
        if !held.is_empty() {
            (done.deleted, done.task_executions) = s.delete(prune.kind, &held).await?;
        }
    }
    if seen.len() == prune.limit as usize
        && let Some((id, at, _)) = seen.last()
    {
        done.next = Some(HistoryKey {
            scheduled_at: super::instant(*at)?,
            id: id.clone(),
        });
    }
    Ok(done)
}
