//! History retention's walk (`MaintenanceStore::history_prune`, docs/configuration.md
//! "history_retention"), written once over the statements each store provides
//! ([`RetentionStatements`], on the caller's open transaction): one step of the walk of the
//! history in (slot, id) order from where the last call stopped, the expired rows of the step
//! deleted in the caller's transaction. The statements themselves are written once too
//! ([`Walk`], on any store's [`Transaction`], and the dry run's counts, [`history_count`], on
//! its [`Reader`]), with what the dialects say differently in [`RetentionDialect`]; each store
//! keeps the relation its walk reads and any maintenance of its own beside the walk
//! (PostgreSQL drops expired days whole).
//!
//! Expired means finished before the cut-off and not the newest finished execution of its
//! job (or run of its workflow) while that job (workflow) exists, a run only with none of its
//! tasks unfinished ([`expired`]).
//!
//! Invariants: a step reads at most `limit` rows of the walk, all with a slot before the
//! cut-off, in (slot, id) order after the key it was given; it deletes only rows its store's
//! expiry test judged expired and still holds, a workflow run's task executions with it and an
//! execution's attempts with it; it returns the key of its last row when it read a full page
//! (the walk goes on from there), `None` otherwise.

use std::future::Future;

use crate::reads::{Reader, Statement, Transaction};
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

/// What the stores say differently about retention's statements, supplied by each store's
/// [`Reader`].
pub trait RetentionDialect: Reader {
    /// A condition: row `n` sorts after row `e` by (`scheduled_at`, `id`), spelled so the
    /// store's history indexes answer it.
    const NEWER: &'static str;

    /// The statement that deletes the attempts of the task executions of runs `$1` (a
    /// [`crate::reads::Value::Texts`]).
    const TASK_ATTEMPTS_DELETE: &'static str;

    /// What the read of the expired rows a step may delete ends with to lock them and skip
    /// those another transaction holds (` FOR UPDATE SKIP LOCKED`), or `None` where the one
    /// writer holds every row the step reads (then every expired row read is deleted, with no
    /// statement to hold them).
    const SKIP_HELD: Option<&'static str>;
}

/// The table of the `kind` walk, and the condition (ending in `AND `, or empty) that scopes
/// it to its rows, `e` naming the row: a job's executions, not a run's tasks.
pub fn table(kind: HistoryKind) -> (&'static str, &'static str) {
    match kind {
        HistoryKind::Executions => ("executions", "e.run_id IS NULL AND "),
        HistoryKind::Runs => ("workflow_runs", ""),
    }
}

/// The expiry test of a row `e` of the `kind` walk at the cut-off `$1` (Unix ms, UTC): an
/// SQL condition, never NULL.
pub fn expired<S: RetentionDialect>(kind: HistoryKind) -> String {
    let newer = S::NEWER;
    match kind {
        HistoryKind::Executions => format!(
            "(e.finished_at IS NOT NULL AND e.finished_at < $1 \
             AND e.state IN ('succeeded', 'failed', 'dead', 'cancelled', 'skipped', 'missed', \
               'upstream_failed') \
             AND (NOT EXISTS (SELECT 1 FROM jobs j WHERE j.namespace = e.namespace \
                    AND j.name = e.job) \
                  OR EXISTS (SELECT 1 FROM executions n \
                    WHERE n.namespace = e.namespace AND n.job = e.job AND {newer} \
                      AND n.finished_at IS NOT NULL AND n.run_id IS NULL)))"
        ),
        HistoryKind::Runs => format!(
            "(e.finished_at IS NOT NULL AND e.finished_at < $1 \
             AND e.state IN ('succeeded', 'failed', 'cancelled', 'skipped', 'missed') \
             AND NOT EXISTS (SELECT 1 FROM executions t \
               WHERE t.run_id = e.id AND t.finished_at IS NULL) \
             AND (NOT EXISTS (SELECT 1 FROM workflows w WHERE w.namespace = e.namespace \
                    AND w.name = e.workflow) \
                  OR EXISTS (SELECT 1 FROM workflow_runs n \
                    WHERE n.namespace = e.namespace AND n.workflow = e.workflow AND {newer} \
                      AND n.finished_at IS NOT NULL)))"
        ),
    }
}

/// What a dry run of `prune` would delete, counted on the store's read connections: the
/// expired rows of the whole `kind` walk with a slot before the cut-off (and, for runs, their
/// task executions); `next` is `None`.
///
/// # Errors
/// The store's classified error.
pub async fn history_count<S: RetentionDialect>(
    store: &S,
    prune: &HistoryPrune,
) -> Result<HistoryPruned> {
    let before = prune.before.as_millisecond();
    let (table, scope) = table(prune.kind);
    let expired = expired::<S>(prune.kind);
    let count = |sql: String| async move {
        let row = store.row(&Statement::new(sql).bind(before)).await?;
        row.map_or(Ok(0), |r| S::int(&r, 0))
    };
    let deleted = count(format!(
        "SELECT count(*) FROM {table} e WHERE {scope}e.scheduled_at < $1 AND {expired}"
    ))
    .await?;
    let task_executions = if prune.kind == HistoryKind::Runs {
        count(format!(
            "SELECT count(*) FROM executions WHERE run_id IN \
               (SELECT e.id FROM workflow_runs e WHERE e.scheduled_at < $1 AND {expired})"
        ))
        .await?
    } else {
        0
    };
    Ok(HistoryPruned {
        deleted: u64::try_from(deleted).unwrap_or(0),
        task_executions: u64::try_from(task_executions).unwrap_or(0),
        next: None,
    })
}

/// The statements of a retention step on a store's open transaction `tx`, the walk reading
/// `walked` (a relation: the walk's [`table`], or what a store reads of it).
pub struct Walk<T> {
    /// The caller's open transaction.
    pub tx: T,
    /// The relation the walk reads, named `e` in its statements.
    pub walked: String,
}

impl<T> Walk<T> {
    /// The statements of a step on `tx`, the walk reading `walked`.
    pub fn new(tx: T, walked: String) -> Self {
        Walk { tx, walked }
    }
}

impl<T: Transaction> RetentionStatements for Walk<T>
where
    T::Store: RetentionDialect,
{
    async fn page(
        &mut self,
        kind: HistoryKind,
        before: i64,
        (after_at, after_id): (i64, &str),
        limit: u32,
    ) -> Result<Vec<(String, i64, bool)>> {
        let (_, scope) = table(kind);
        let sql = format!(
            "SELECT e.id, e.scheduled_at, CAST(CASE WHEN {} THEN 1 ELSE 0 END AS BIGINT) FROM {} e \
             WHERE {scope}e.scheduled_at < $1 AND (e.scheduled_at, e.id) > ($2, $3) \
             ORDER BY e.scheduled_at, e.id LIMIT $4",
            expired::<T::Store>(kind),
            self.walked
        );
        let st = Statement::new(sql)
            .bind(before)
            .bind(after_at)
            .bind(after_id)
            .bind(i64::from(limit));
        self.tx
            .rows(&st)
            .await?
            .iter()
            .map(|row| {
                Ok((
                    T::Store::text(row)?,
                    T::Store::int(row, 1)?,
                    T::Store::int(row, 2)? != 0,
                ))
            })
            .collect()
    }

    async fn hold(
        &mut self,
        kind: HistoryKind,
        ids: &[String],
        before: i64,
    ) -> Result<Vec<String>> {
        let Some(skip) = <T::Store as RetentionDialect>::SKIP_HELD else {
            return Ok(ids.to_vec());
        };
        let (table, _) = table(kind);
        let sql = format!(
            "SELECT id FROM {table} WHERE {} AND finished_at < $2{skip}",
            T::Store::one_of("id", 1)
        );
        let st = Statement::new(sql).bind(ids).bind(before);
        self.tx
            .rows(&st)
            .await?
            .iter()
            .map(T::Store::text)
            .collect()
    }

    async fn delete(&mut self, kind: HistoryKind, ids: &[String]) -> Result<(u64, u64)> {
        let (table, _) = table(kind);
        let mut task_executions = 0;
        if kind == HistoryKind::Runs {
            let attempts = <T::Store as RetentionDialect>::TASK_ATTEMPTS_DELETE;
            self.tx.execute(&Statement::new(attempts).bind(ids)).await?;
            let tasks = format!(
                "DELETE FROM executions WHERE {}",
                T::Store::one_of("run_id", 1)
            );
            task_executions = self.tx.execute(&Statement::new(tasks).bind(ids)).await?;
        } else {
            let attempts = format!(
                "DELETE FROM attempts WHERE {}",
                T::Store::one_of("execution_id", 1)
            );
            self.tx.execute(&Statement::new(attempts).bind(ids)).await?;
        }
        let rows = format!("DELETE FROM {table} WHERE {}", T::Store::one_of("id", 1));
        let deleted = self.tx.execute(&Statement::new(rows).bind(ids)).await?;
        Ok((deleted, task_executions))
    }
}
