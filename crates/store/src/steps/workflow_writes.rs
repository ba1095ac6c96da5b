//! A workflow's writes (docs/workflows.md, "Versions", "Pause, resume, delete"), written once
//! over the statements each store provides ([`WorkflowStatements`], on the caller's open
//! transaction): creations, conditional replacements that record the new version and cancel the runs that
//! have not started when the change affects them, and deletes that cancel every unfinished
//! run. The caller opens the transaction, runs [`workflow_write_batch`] or [`workflow_delete`],
//! commits only when the step returns `Ok`, and then tells the workers of the tasks the step
//! stopped, if its dialect does not do that inside the transaction.
//!
//! Invariants: a batch is all or nothing; a creation of a workflow that exists is refused
//! ([`Error::Conflict`]); a replacement applies only while the stored version is the expected
//! one ([`Error::StaleVersion`], or [`Error::NotFound`] when there is none) and moves the
//! version on by one; every version written is kept (`workflow_versions`), so a run created
//! earlier finishes on its own; runs are cancelled in the transaction of the write.

use std::future::Future;

use sundial_core::workflow::RunState;

use super::jobs::{VersionStatements, version_mismatch};
use super::run_create::{RunCreationStatements, cancel_runs, unfinished_runs};
use crate::audit::Change;
use crate::reads::{Reader, Statement, Transaction};
use crate::workflow::{WorkflowRecord, WorkflowWrite};
use crate::{Error, Result};

/// The statements of a workflow's writes, in the dialect of one store, on the transaction the
/// caller opened. Instants are UTC milliseconds since the epoch. Every method may fail with
/// the store's classified error.
pub trait WorkflowStatements: VersionStatements {
    /// Inserts `record` (its spec stored as `spec`, JSON text) as version 1, `created_at` =
    /// `updated_at` = `now`, unless its name is taken; returns its uid, `None` when the name
    /// was taken.
    fn insert(
        &mut self,
        record: &WorkflowRecord,
        spec: &str,
        now: i64,
    ) -> impl Future<Output = Result<Option<String>>> + Send;

    /// Replaces workflow `record.spec.namespace`/`record.spec.name` with `record` (its spec
    /// as `spec`) while its version is `expected`: the version moves on by one, `updated_at`
    /// becomes `now`, the paused flag, next slot and next fire time are the record's. Returns
    /// the workflow's uid, `None` when nothing changed.
    fn replace(
        &mut self,
        record: &WorkflowRecord,
        spec: &str,
        expected: i64,
        now: i64,
    ) -> impl Future<Output = Result<Option<String>>> + Send;

    /// Keeps `spec` as version `version` of workflow incarnation `uid`.
    fn add_version(
        &mut self,
        uid: &str,
        version: i64,
        spec: &str,
    ) -> impl Future<Output = Result<()>> + Send;

    /// The runs of workflow incarnation `uid` that have not started by `now` (`scheduled`,
    /// fire time after `now`), each held until the transaction ends where the store can.
    fn not_started_runs(
        &mut self,
        uid: &str,
        now: i64,
    ) -> impl Future<Output = Result<Vec<String>>> + Send;

    /// The unfinished runs of workflow incarnation `uid`, each held until the transaction
    /// ends where the store can.
    fn unfinished_runs(&mut self, uid: &str) -> impl Future<Output = Result<Vec<String>>> + Send;

    /// Cancels `runs` at `now` (their unfinished tasks `cancelled`, running attempts
    /// recorded so); returns the ids of the tasks that were running, whose workers must
    /// stop them (a store that signals inside the transaction has done so).
    fn cancel_runs(
        &mut self,
        runs: &[String],
        now: i64,
    ) -> impl Future<Output = Result<Vec<String>>> + Send;

    /// Deletes workflow `namespace`/`name` if its version is `expected` (any version for
    /// `None`); returns the uid of the incarnation deleted, `None` when nothing was.
    fn delete(
        &mut self,
        namespace: &str,
        name: &str,
        expected: Option<i64>,
    ) -> impl Future<Output = Result<Option<String>>> + Send;
}

/// What a batch of workflow writes or a delete did: the records as written (a delete writes
/// none), and the tasks it stopped, whose workers must drop them.
#[derive(Debug, Default)]
pub struct WorkflowsWritten {
    /// The records as written, in the order of the writes.
    pub records: Vec<WorkflowRecord>,
    /// Ids of task executions that were running when their run was cancelled.
    pub stopped: Vec<String>,
}

/// Writes `writes` at `now` (UTC ms), one by one, each as
/// [`crate::ApiStore::workflow_write_batch`] describes.
///
/// # Errors
/// The first write that fails: [`Error::Conflict`] (a creation whose name is taken),
/// [`Error::StaleVersion`] or [`Error::NotFound`] (a replacement of another version, or of no
/// workflow), [`Error::Corrupt`] for a spec or clock reading that does not convert, or the
/// store's.
pub async fn workflow_write_batch<S: WorkflowStatements + Transaction>(
    s: &mut S,
    writes: &[WorkflowWrite],
    now: i64,
) -> Result<WorkflowsWritten> {
    let at = super::instant(now)?;
    let mut done = WorkflowsWritten::default();
    for w in writes {
        let r = &w.record;
        let (ns, name) = (&r.spec.namespace, &r.spec.name);
        let spec = serde_json::to_string(&r.spec).map_err(|e| Error::Corrupt(e.to_string()))?;
        let (uid, version) = match w.expected_version {
            None => match s.insert(r, &spec, now).await? {
                Some(uid) => (uid, 1),
                None => {
                    return Err(Error::Conflict(format!(
                        "workflow {ns}/{name} already exists"
                    )));
                }
            },
            Some(expected) => match s.replace(r, &spec, expected, now).await? {
                Some(uid) => (uid, expected + 1),
                None => return Err(version_mismatch(s, "workflow", ns, name, expected).await),
            },
        };
        s.add_version(&uid, version, &spec).await?;
        // A change cancels the runs that have not started; started ones finish on their version.
        if w.expected_version.is_some() && w.cancel_not_started {
            let not_started = s.not_started_runs(&uid, now).await?;
            if !not_started.is_empty() {
                done.stopped.extend(s.cancel_runs(&not_started, now).await?);
            }
        }
        done.records.push(WorkflowRecord {
            uid,
            version,
            created_at: if w.expected_version.is_none() {
                at
            } else {
                r.created_at
            },
            updated_at: at,
            ..r.clone()
        });
    }
    let changes: Vec<Change> = writes
        .iter()
        .zip(&done.records)
        .map(|(w, r)| {
            let (ns, name) = (&r.spec.namespace, &r.spec.name);
            Change::written("workflow", ns, name, w.expected_version, r.version)
        })
        .collect();
    super::audit::record(s, &changes, now).await?;
    Ok(done)
}

/// Deletes workflow `namespace`/`name` at `now` (UTC ms) if its version is `expected` (any for
/// `None`), cancelling every unfinished run of it; returns the tasks it stopped.
///
/// # Errors
/// [`Error::StaleVersion`] (another version) or [`Error::NotFound`] (no such workflow), or the
/// store's.
pub async fn workflow_delete<S: WorkflowStatements + Transaction>(
    s: &mut S,
    namespace: &str,
    name: &str,
    expected: Option<i64>,
    now: i64,
) -> Result<WorkflowsWritten> {
    let version_before = match expected {
        Some(v) => Some(v),
        None => s.version("workflow", namespace, name).await?,
    };
    let Some(uid) = s.delete(namespace, name, expected).await? else {
        let expected = expected.unwrap_or(0);
        return Err(version_mismatch(s, "workflow", namespace, name, expected).await);
    };
    let unfinished = s.unfinished_runs(&uid).await?;
    let stopped = if unfinished.is_empty() {
        Vec::new()
    } else {
        s.cancel_runs(&unfinished, now).await?
    };
    let change = Change {
        resource: "workflow",
        namespace: namespace.to_owned(),
        name: name.to_owned(),
        action: "delete",
        version_before,
        version_after: None,
    };
    super::audit::record(s, &[change], now).await?;
    Ok(WorkflowsWritten {
        records: Vec::new(),
        stopped,
    })
}

/// The statements of a workflow's writes on any store's transaction that provides the
/// dialect's run cancellation ([`RunCreationStatements`]): the SQL is shared ([`shared`]).
impl<T: RunCreationStatements> WorkflowStatements for T {
    async fn insert(&mut self, r: &WorkflowRecord, spec: &str, now: i64) -> Result<Option<String>> {
        shared::insert(self, r, spec, now).await
    }

    async fn replace(
        &mut self,
        r: &WorkflowRecord,
        spec: &str,
        expected: i64,
        now: i64,
    ) -> Result<Option<String>> {
        shared::replace(self, r, spec, expected, now).await
    }

    async fn add_version(&mut self, uid: &str, version: i64, spec: &str) -> Result<()> {
        shared::add_version(self, uid, version, spec).await
    }

    async fn not_started_runs(&mut self, uid: &str, now: i64) -> Result<Vec<String>> {
        unfinished_runs(self, uid, Some(now)).await
    }

    async fn unfinished_runs(&mut self, uid: &str) -> Result<Vec<String>> {
        unfinished_runs(self, uid, None).await
    }

    async fn cancel_runs(&mut self, runs: &[String], now: i64) -> Result<Vec<String>> {
        cancel_runs(self, runs, now, RunState::Cancelled).await
    }

    async fn delete(
        &mut self,
        namespace: &str,
        name: &str,
        expected: Option<i64>,
    ) -> Result<Option<String>> {
        shared::delete(self, namespace, name, expected).await
    }
}

/// The statements of [`WorkflowStatements`] whose SQL both stores share, on any store's
/// [`Transaction`].
pub mod shared {
    use super::*;

    /// The uid a statement returned, `None` when it wrote nothing.
    async fn uid<T: Transaction>(tx: &mut T, st: &Statement<'_>) -> Result<Option<String>> {
        tx.row(st)
            .await?
            .as_ref()
            .map(<T::Store as Reader>::text)
            .transpose()
    }

    /// [`WorkflowStatements::insert`]: the workflow at version 1, `created_at` = `updated_at`
    /// = `now` (Unix ms, UTC), unless its name is taken.
    ///
    /// # Errors
    /// The store's classified error.
    pub async fn insert<T: Transaction>(
        tx: &mut T,
        r: &WorkflowRecord,
        spec: &str,
        now: i64,
    ) -> Result<Option<String>> {
        let st = Statement::new(
            "INSERT INTO workflows (namespace, name, uid, shard, version, spec, paused, \
               created_at, updated_at, next_slot_at, next_fire_at) \
             VALUES ($1, $2, $3, $4, 1, $5, $6, $7, $7, $8, $9) \
             ON CONFLICT (namespace, name) DO NOTHING RETURNING uid",
        )
        .bind(r.spec.namespace.as_str())
        .bind(r.spec.name.as_str())
        .bind(r.uid.as_str())
        .bind(i64::from(r.shard))
        .bind(spec)
        .bind(r.spec.paused)
        .bind(now)
        .bind(r.next_slot_at.map(|t| t.as_millisecond()))
        .bind(r.next_fire_at.map(|t| t.as_millisecond()));
        uid(tx, &st).await
    }

    /// [`WorkflowStatements::replace`].
    ///
    /// # Errors
    /// The store's classified error.
    pub async fn replace<T: Transaction>(
        tx: &mut T,
        r: &WorkflowRecord,
        spec: &str,
        expected: i64,
        now: i64,
    ) -> Result<Option<String>> {
        let st = Statement::new(
            "UPDATE workflows SET version = version + 1, spec = $4, paused = $5, updated_at = $6, \
             next_slot_at = $7, next_fire_at = $8 \
             WHERE namespace = $1 AND name = $2 AND version = $3 RETURNING uid",
        )
        .bind(r.spec.namespace.as_str())
        .bind(r.spec.name.as_str())
        .bind(expected);
        let st = super::super::jobs::bind_definition(
            st,
            spec,
            r.spec.paused,
            now,
            r.next_slot_at,
            r.next_fire_at,
        );
        uid(tx, &st).await
    }

    /// [`WorkflowStatements::add_version`].
    ///
    /// # Errors
    /// The store's classified error (a version kept already is a conflict).
    pub async fn add_version<T: Transaction>(
        tx: &mut T,
        uid: &str,
        version: i64,
        spec: &str,
    ) -> Result<()> {
        let st = Statement::new(
            "INSERT INTO workflow_versions (uid, version, spec) VALUES ($1, $2, $3)",
        )
        .bind(uid)
        .bind(version)
        .bind(spec);
        tx.execute(&st).await?;
        Ok(())
    }

    /// [`WorkflowStatements::delete`].
    ///
    /// # Errors
    /// The store's classified error.
    pub async fn delete<T: Transaction>(
        tx: &mut T,
        namespace: &str,
        name: &str,
        expected: Option<i64>,
    ) -> Result<Option<String>> {
        let st = Statement::new(
            "DELETE FROM workflows WHERE namespace = $1 AND name = $2 \
             AND (CAST($3 AS BIGINT) IS NULL OR version = $3) RETURNING uid",
        )
        .bind(namespace)
        .bind(name)
        .bind(expected);
        uid(tx, &st).await
    }
}
