//! The release applied inside every transaction that ends a task (docs/workflows.md,
//! "Release"): the unfinished runs among those named are read with their tasks' states and
//! outputs, [`crate::workflow::release`] decides each run's step, and what every run's step
//! writes is gathered and written one statement a kind (on SQLite a statement costs a round
//! trip to the connection's thread, BENCHMARKS.md "Claims side by side"). The reads and the
//! failing of a task are written once ([`ReleaseStatements`]' provided methods, on the store's
//! open [`Transaction`]); a store writes only the updates whose lists its dialect passes its
//! own way (arrays on PostgreSQL, JSON on SQLite), monomorphised: nothing here is boxed.
//!
//! Invariant: whatever a task's end releases is queued by the transaction that ends it; the
//! caller holds the runs' rows (PostgreSQL locks them in id order first, SQLite's one writer
//! serialises every step), so two endings in one run never release at once.

use std::collections::HashMap;
use std::future::Future;

use serde_json::{Map, Value};

use crate::reads::{Reader, Statement, Transaction};
use crate::steps::run_create::{UNFINISHED_RUN, parsed_version, record_failed_attempt};
use crate::workflow::{RunFacts, SpecCache, TaskFact, facts_in_order, release};
use crate::{Error, Result};

/// An unfinished run as the release reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunRow {
    /// The run's id.
    pub id: String,
    /// Its workflow's incarnation.
    pub workflow_uid: String,
    /// The workflow version it runs.
    pub workflow_version: i64,
    /// Its slot, Unix milliseconds (UTC).
    pub scheduled_at: i64,
    /// Its parameters, a JSON object as stored.
    pub params: String,
}

impl From<(String, String, i64, i64, String)> for RunRow {
    /// From the columns `id, workflow_uid, workflow_version, scheduled_at, params` in order.
    fn from(
        (id, workflow_uid, workflow_version, scheduled_at, params): (
            String,
            String,
            i64,
            i64,
            String,
        ),
    ) -> Self {
        RunRow {
            id,
            workflow_uid,
            workflow_version,
            scheduled_at,
            params,
        }
    }
}

/// The statements of the release on the transaction that ends the tasks (a store's open
/// [`Transaction`]): the reads and [`ReleaseStatements::fail_task`] are provided, written
/// once; a store writes the three updates in its dialect. Every method may fail with the
/// store's classified error.
pub trait ReleaseStatements: Transaction + Sized {
    /// The runs among `runs` that are `scheduled` or `running` (repeats read once).
    fn unfinished_runs(
        &mut self,
        runs: &[String],
    ) -> impl Future<Output = Result<Vec<RunRow>>> + Send {
        async move {
            let sql = format!(
                "SELECT id, workflow_uid, workflow_version, scheduled_at, params \
                 FROM workflow_runs WHERE {} AND state IN {UNFINISHED_RUN}",
                Self::Store::one_of("id", 1)
            );
            self.rows(&Statement::new(sql).bind(runs))
                .await?
                .iter()
                .map(|row| {
                    Ok(RunRow {
                        id: Self::Store::text_at(row, 0)?,
                        workflow_uid: Self::Store::text_at(row, 1)?,
                        workflow_version: Self::Store::int(row, 2)?,
                        scheduled_at: Self::Store::int(row, 3)?,
                        params: Self::Store::text_at(row, 4)?,
                    })
                })
                .collect()
        }
    }

    /// Every task execution of `runs`: (run id, task name, what the release sees of it).
    fn task_facts(
        &mut self,
        runs: &[String],
    ) -> impl Future<Output = Result<Vec<(String, String, TaskFact)>>> + Send {
        async move {
            let sql = format!(
                "SELECT run_id, id, task, state, output FROM executions WHERE {}",
                Self::Store::one_of("run_id", 1)
            );
            self.rows(&Statement::new(sql).bind(runs))
                .await?
                .iter()
                .map(|row| {
                    let (task, fact) = Self::Store::task_fact(row)?;
                    Ok((Self::Store::text_at(row, 0)?, task, fact))
                })
                .collect()
        }
    }

    /// Makes each execution of `queued` (id, its rendered run definition as JSON) due at
    /// `now` (Unix ms): `scheduled` with `due_at`, `fire_at` and `queued_at` = `now`, and in
    /// the store's queue where it keeps one. Called with at least one.
    fn queue_tasks(
        &mut self,
        queued: &[(String, String)],
        now: i64,
    ) -> impl Future<Output = Result<()>> + Send;

    /// Ends each execution of `ended` (id, terminal state) at `now` without running it.
    /// Called with at least one.
    fn end_tasks(
        &mut self,
        ended: &[(String, &'static str)],
        now: i64,
    ) -> impl Future<Output = Result<()>> + Send;

    /// Fails execution `id` for good at `now` without running it, recording an attempt
    /// (`permanent_failure`, worker `''`) with `error`; [`Error::Corrupt`] when the execution
    /// is gone.
    fn fail_task(
        &mut self,
        id: &str,
        error: &str,
        now: i64,
    ) -> impl Future<Output = Result<()>> + Send {
        async move {
            let st = Statement::new(
                "UPDATE executions SET state = 'failed', due_at = NULL, finished_at = $2, \
                 attempt = attempt + 1 WHERE id = $1 RETURNING attempt",
            )
            .bind(id)
            .bind(now);
            let row = self
                .row(&st)
                .await?
                .ok_or_else(|| Error::Corrupt(format!("task execution {id} is gone")))?;
            let attempt = Self::Store::int(&row, 0)?;
            record_failed_attempt(self, id, attempt, error, now).await
        }
    }

    /// Ends each run of `ended` (id, terminal state) at `now`, clearing its timeout. Called
    /// with at least one.
    fn end_runs(
        &mut self,
        ended: &[(String, &'static str)],
        now: i64,
    ) -> impl Future<Output = Result<()>> + Send;
}

/// Applies the release of each run in `runs` (ids; repeats and terminal runs are left alone),
/// as [`release`] decides from the runs' task states now (`now`, Unix ms). Returns how many
/// tasks became due (the caller wakes the workers).
///
/// # Errors
/// A statement's error; [`Error::Corrupt`] for a run whose workflow version or parameters
/// cannot be read, or whose tasks do not match its spec.
pub async fn release_runs<S: ReleaseStatements>(
    s: &mut S,
    cache: &SpecCache,
    runs: &[String],
    now: i64,
) -> Result<usize> {
    if runs.is_empty() {
        return Ok(0);
    }
    let run_rows = s.unfinished_runs(runs).await?;
    if run_rows.is_empty() {
        return Ok(0);
    }
    let live: Vec<String> = run_rows.iter().map(|r| r.id.clone()).collect();
    let mut facts_by_run: HashMap<String, HashMap<String, TaskFact>> = HashMap::new();
    for (run_id, task, fact) in s.task_facts(&live).await? {
        facts_by_run.entry(run_id).or_default().insert(task, fact);
    }
    let mut queued: Vec<(String, String)> = Vec::new();
    let mut ended: Vec<(String, &'static str)> = Vec::new();
    let mut ended_runs: Vec<(String, &'static str)> = Vec::new();
    let mut failed = Vec::new();
    for run in &run_rows {
        let parsed = parsed_version(s, cache, &run.workflow_uid, run.workflow_version).await?;
        let (spec, dag) = (&parsed.spec, &parsed.dag);
        let by_task = facts_by_run.remove(&run.id).unwrap_or_default();
        let tasks = facts_in_order(spec, by_task, &run.id)?;
        let params: Map<String, Value> = serde_json::from_str(&run.params)
            .map_err(|e| Error::Corrupt(format!("params: {e}")))?;
        let step = release(&RunFacts {
            run_id: &run.id,
            scheduled_at: jiff::Timestamp::from_millisecond(run.scheduled_at)
                .map_err(|e| Error::Corrupt(format!("instant {}: {e}", run.scheduled_at)))?,
            params: &params,
            spec,
            dag,
            tasks,
        });
        for (id, run_spec) in step.queued {
            let json = serde_json::to_string(&run_spec)
                .map_err(|e| Error::Corrupt(format!("encoding a run definition: {e}")))?;
            queued.push((id, json));
        }
        ended.extend(
            step.ended
                .into_iter()
                .map(|(id, state)| (id, state.as_str())),
        );
        failed.extend(step.failed);
        if let Some(state) = step.run_state {
            ended_runs.push((run.id.clone(), state.as_str()));
        }
    }
    if !queued.is_empty() {
        s.queue_tasks(&queued, now).await?;
    }
    if !ended.is_empty() {
        s.end_tasks(&ended, now).await?;
    }
    for (id, error) in &failed {
        s.fail_task(id, error, now).await?;
    }
    if !ended_runs.is_empty() {
        s.end_runs(&ended_runs, now).await?;
    }
    Ok(queued.len())
}
