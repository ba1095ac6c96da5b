//! Workflows and their runs (docs/workflows.md): read, list, write and delete workflows;
//! create runs and their tasks; and the release applied inside every transaction that ends a
//! task (`release_runs_in_tx`, over `release.rs`'s statements). Reading, listing, cancelling,
//! retrying and expiring runs is in `runs.rs`. The decisions are `sundial_store::workflow`'s;
//! this file fetches their facts and applies them. SQLite's one writer serialises every
//! step, so two endings in one run never release at once.

use sundial_core::execution::Trigger;
use sundial_core::job::ConcurrencyPolicy;
use sundial_core::workflow::RunState;
use sundial_store::workflow::{NewTask, RunCreation, SpecCache, run_creation};
use sundial_store::{NewRun, TriggerListDue, WorkflowRecord, WorkflowTrigger, WorkflowWrite};

use super::*;
use crate::release::{record_failed_attempt, version_spec};
use crate::rows::{UNFINISHED_RUN, to_json};
use sundial_store::steps::jobs::VersionStatements;
use sundial_store::steps::listings::WORKFLOW_COLUMNS;
use sundial_store::steps::workflow_writes::shared;

use crate::reads::SqlTx;
use sundial_store::steps::workflow_writes::{self as steps, WorkflowStatements};

pub(crate) const TASK_COLUMNS: &str =
    "id, task, state, fire_at, attempt, started_at, finished_at, output";

/// The states of an execution that is not terminal, as an SQL list.
const UNFINISHED_EXECUTION: &str = "('pending', 'scheduled', 'queued', 'running', 'retry_wait')";

pub(crate) async fn workflow_write_batch(
    store: &SqliteStore,
    writes: &[WorkflowWrite],
) -> Result<Vec<WorkflowRecord>> {
    let now = ms(store.clock.now());
    let mut tx = store.begin().await?;
    let done = steps::workflow_write_batch(&mut WorkflowTx(&mut tx), writes, now).await?;
    commit(tx).await?;
    jobs::signal_cancelled(store, done.stopped);
    Ok(done.records)
}

pub(crate) async fn workflow_delete(
    store: &SqliteStore,
    namespace: &str,
    name: &str,
    expected_version: Option<i64>,
) -> Result<()> {
    let now = ms(store.clock.now());
    let mut tx = store.begin().await?;
    let mut s = WorkflowTx(&mut tx);
    let done = steps::workflow_delete(&mut s, namespace, name, expected_version, now).await?;
    commit(tx).await?;
    jobs::signal_cancelled(store, done.stopped);
    Ok(())
}

/// The statements of a workflow's writes (`sundial_store::steps::workflow_writes`) on the
/// embedded store's write transaction, whose single writer holds what it reads until it
/// commits.
struct WorkflowTx<'t, 'c>(&'t mut Tx<'c>);

impl VersionStatements for WorkflowTx<'_, '_> {
    async fn version(&mut self, kind: &str, namespace: &str, name: &str) -> Result<Option<i64>> {
        jobs::JobTx(&mut *self.0)
            .version(kind, namespace, name)
            .await
    }
}

impl WorkflowStatements for WorkflowTx<'_, '_> {
    async fn insert(&mut self, r: &WorkflowRecord, spec: &str, now: i64) -> Result<Option<String>> {
        shared::insert(&mut SqlTx(&mut *self.0), r, spec, now).await
    }

    async fn replace(
        &mut self,
        r: &WorkflowRecord,
        spec: &str,
        expected: i64,
        now: i64,
    ) -> Result<Option<String>> {
        shared::replace(&mut SqlTx(&mut *self.0), r, spec, expected, now).await
    }

    async fn add_version(&mut self, uid: &str, version: i64, spec: &str) -> Result<()> {
        shared::add_version(&mut SqlTx(&mut *self.0), uid, version, spec).await
    }

    async fn not_started_runs(&mut self, uid: &str, now: i64) -> Result<Vec<String>> {
        sqlx::query_scalar(
            "SELECT id FROM workflow_runs WHERE workflow_uid = ?1 AND state = 'scheduled' \
             AND fire_at > ?2",
        )
        .bind(uid)
        .bind(now)
        .fetch_all(&mut **self.0)
        .await
        .map_err(db_err)
    }

    async fn unfinished_runs(&mut self, uid: &str) -> Result<Vec<String>> {
        sqlx::query_scalar(&format!(
            "SELECT id FROM workflow_runs WHERE workflow_uid = ?1 AND state IN {UNFINISHED_RUN}"
        ))
        .bind(uid)
        .fetch_all(&mut **self.0)
        .await
        .map_err(db_err)
    }

    async fn cancel_runs(&mut self, runs: &[String], now: i64) -> Result<Vec<String>> {
        cancel_runs_in_tx(self.0, runs, now, RunState::Cancelled).await
    }

    async fn delete(
        &mut self,
        namespace: &str,
        name: &str,
        expected: Option<i64>,
    ) -> Result<Option<String>> {
        shared::delete(&mut SqlTx(&mut *self.0), namespace, name, expected).await
    }
}

/// Ends runs that are not terminal in `end` (`cancelled`, or `failed` past their
/// `run_timeout`): their unfinished tasks become `cancelled` (running
/// attempts recorded `cancelled`) and the runs `end`. Returns the ids of executions
/// that were running, whose workers are to be told.
pub(crate) async fn cancel_runs_in_tx(
    tx: &mut Tx<'_>,
    runs: &[String],
    now: i64,
    end: RunState,
) -> Result<Vec<String>> {
    if runs.is_empty() {
        return Ok(Vec::new());
    }
    let runs_json = to_json(&runs)?;
    let tasks: Vec<(String, String)> = sqlx::query_as(&format!(
        "SELECT id, state FROM executions WHERE run_id IN (SELECT value FROM json_each(?1)) \
         AND state IN {UNFINISHED_EXECUTION}"
    ))
    .bind(&runs_json)
    .fetch_all(&mut **tx)
    .await
    .map_err(db_err)?;
    let ids: Vec<&str> = tasks.iter().map(|(id, _)| id.as_str()).collect();
    if !ids.is_empty() {
        cancel_all_in_tx(tx, &ids, now).await?;
    }
    sqlx::query(&format!(
        "UPDATE workflow_runs SET state = ?3, finished_at = ?2, timeout_at = NULL \
         WHERE id IN (SELECT value FROM json_each(?1)) AND state IN {UNFINISHED_RUN}"
    ))
    .bind(&runs_json)
    .bind(now)
    .bind(end.as_str())
    .execute(&mut **tx)
    .await
    .map_err(db_err)?;
    Ok(tasks
        .into_iter()
        .filter(|(_, state)| state == "running")
        .map(|(id, _)| id)
        .collect())
}

/// Checks, inside the one writer's transaction, that `run`'s workflow still has the run's
/// version.
///
/// # Errors
/// [`Error::NotFound`] when the workflow incarnation is gone; [`Error::StaleVersion`] when
/// its version is no longer `run.workflow_version`.
pub(crate) async fn check_run_version(tx: &mut Tx<'_>, run: &NewRun) -> Result<()> {
    let version: Option<i64> = sqlx::query_scalar("SELECT version FROM workflows WHERE uid = ?1")
        .bind(&run.workflow_uid)
        .fetch_optional(&mut **tx)
        .await
        .map_err(db_err)?;
    match version {
        None => Err(Error::NotFound(format!(
            "workflow {}/{}",
            run.namespace, run.workflow
        ))),
        Some(v) if v != run.workflow_version => Err(Error::StaleVersion {
            expected: run.workflow_version,
            actual: v,
        }),
        Some(_) => Ok(()),
    }
}

/// What creating a run did, for the signals sent after its commit.
pub(crate) struct CreatedRun {
    /// The run's id: the new run's, or the one the slot already had.
    pub(crate) id: String,
    /// Whether a new run was inserted.
    pub(crate) inserted: bool,
    /// Whether tasks were made due.
    due: bool,
    /// Running executions cancelled (a `replace`).
    stopped: Vec<String>,
}

impl CreatedRun {
    pub(crate) fn signal(&self, store: &SqliteStore) {
        if self.due {
            store.signals.due.notify_one();
        }
        for id in &self.stopped {
            let _ = store.signals.cancelled.send(id.clone());
        }
    }
}

/// Creates a run of the workflow version `run` names inside `tx` (the workflow's existence
/// and version checked by the caller): the slot's existing run for a `schedule` or `misfire`
/// run whose slot has one, else a run with its tasks as `plan_run` decides, under the
/// workflow's concurrency policy as of `now`.
pub(crate) async fn create_run_in_tx(
    tx: &mut Tx<'_>,
    specs: &SpecCache,
    run: &NewRun,
    now: i64,
) -> Result<CreatedRun> {
    if matches!(
        run.trigger,
        Trigger::Schedule | Trigger::Misfire | Trigger::Backfill
    ) {
        let existing: Option<String> = sqlx::query_scalar(
            "SELECT id FROM workflow_runs WHERE workflow_uid = ?1 AND scheduled_at = ?2 \
             AND trigger IN ('schedule', 'misfire', 'backfill')",
        )
        .bind(&run.workflow_uid)
        .bind(ms(run.scheduled_at))
        .fetch_optional(&mut **tx)
        .await
        .map_err(db_err)?;
        if let Some(id) = existing {
            return Ok(CreatedRun {
                id,
                inserted: false,
                due: false,
                stopped: Vec::new(),
            });
        }
    }
    let parsed = version_spec(tx, specs, &run.workflow_uid, run.workflow_version).await?;
    let (spec, dag) = (&parsed.spec, &parsed.dag);
    let mut recorded_as = run.recorded_as;
    let mut stopped = Vec::new();
    if recorded_as.is_none() && spec.concurrency_policy != ConcurrencyPolicy::Allow {
        let unfinished: Vec<String> = sqlx::query_scalar(&format!(
            "SELECT id FROM workflow_runs WHERE workflow_uid = ?1 AND state IN {UNFINISHED_RUN}"
        ))
        .bind(&run.workflow_uid)
        .fetch_all(&mut **tx)
        .await
        .map_err(db_err)?;
        if !unfinished.is_empty() {
            match spec.concurrency_policy {
                ConcurrencyPolicy::Skip => recorded_as = Some(RunState::Skipped),
                _ => stopped = cancel_runs_in_tx(tx, &unfinished, now, RunState::Cancelled).await?,
            }
        }
    }
    let RunCreation {
        tasks,
        state,
        timeout_at,
    } = run_creation(spec, dag, run, recorded_as, now);
    sqlx::query(
        "INSERT INTO workflow_runs (id, namespace, workflow, workflow_uid, workflow_version, shard, \
           trigger, scheduled_at, fire_at, state, params, created_at, finished_at, timeout_at) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14)",
    )
    .bind(&run.id)
    .bind(&run.namespace)
    .bind(&run.workflow)
    .bind(&run.workflow_uid)
    .bind(run.workflow_version)
    .bind(i64::from(run.shard))
    .bind(run.trigger.as_str())
    .bind(ms(run.scheduled_at))
    .bind(ms(run.fire_at))
    .bind(state.as_str())
    .bind(to_json(&run.params)?)
    .bind(now)
    .bind(state.is_terminal().then_some(now))
    .bind(timeout_at)
    .execute(&mut **tx)
    .await
    .map_err(db_err)?;
    insert_tasks(tx, run, &tasks, now).await?;
    Ok(CreatedRun {
        id: run.id.clone(),
        inserted: true,
        due: tasks.iter().any(|t| t.state == ExecutionState::Scheduled),
        stopped,
    })
}

/// Lists workflows of the given shards whose next fire time is at or before the horizon,
/// earliest first.
pub(crate) async fn workflow_list_due(
    store: &SqliteStore,
    q: &TriggerListDue,
) -> Result<Vec<WorkflowRecord>> {
    let now = ms(store.clock.now());
    let shards = to_json(&q.shards)?;
    let sql = format!(
        "SELECT {WORKFLOW_COLUMNS}, NULL AS last_run FROM workflows w \
         WHERE w.next_fire_at <= ?1 AND w.shard IN (SELECT value FROM json_each(?2)) \
         ORDER BY w.next_fire_at LIMIT ?3"
    );
    let rows = sqlx::query(&sql)
        .bind(ms(q.horizon))
        .bind(shards)
        .bind(i64::from(q.limit))
        .fetch_all(&store.reader)
        .await
        .map_err(db_err)?;
    rows.iter().map(|r| rows::workflow(r, now)).collect()
}

/// Commits one workflow's trigger: fenced by the shard lease, the advance conditional on the
/// version and slot read, then its runs created as `run_create` would.
pub(crate) async fn workflow_trigger(store: &SqliteStore, t: &WorkflowTrigger) -> Result<u32> {
    let now = ms(store.clock.now());
    let mut tx = store.begin().await?;
    trigger::check_fence(&mut tx, store, &t.node, &t.leases, &[t.shard]).await?;
    let advanced = sqlx::query(
        "UPDATE workflows SET next_slot_at = ?4, next_fire_at = ?5 \
         WHERE uid = ?1 AND version = ?2 AND next_slot_at = ?3",
    )
    .bind(&t.uid)
    .bind(t.version)
    .bind(ms(t.expected_next_slot))
    .bind(t.next_slot_at.map(ms))
    .bind(t.next_fire_at.map(ms))
    .execute(&mut *tx)
    .await
    .map_err(db_err)?;
    if advanced.rows_affected() == 0 {
        return Ok(0);
    }
    let mut created = Vec::with_capacity(t.runs.len());
    for run in &t.runs {
        created.push(create_run_in_tx(&mut tx, &store.workflow_specs, run, now).await?);
    }
    commit(tx).await?;
    for c in &created {
        c.signal(store);
    }
    Ok(u32::try_from(created.iter().filter(|c| c.inserted).count()).unwrap_or(u32::MAX))
}

/// Inserts a new run's task executions, and an attempt row for each that failed at creation
/// (its target did not render).
async fn insert_tasks(tx: &mut Tx<'_>, run: &NewRun, tasks: &[NewTask], now: i64) -> Result<()> {
    let mut rows = Vec::with_capacity(tasks.len());
    for t in tasks {
        rows.push((t, to_json(&t.run)?));
    }
    for part in values::chunks(&rows) {
        let sql = format!(
            "INSERT INTO executions (id, namespace, job, job_uid, job_version, shard, trigger, \
             scheduled_at, fire_at, queued_at, due_at, finished_at, state, attempt, max_attempts, \
             lease_ms, run, created_at, run_id, task) VALUES {}",
            values::values_list(part.len(), 20)
        );
        let mut q = sqlx::query(&sql);
        for (t, run_json) in part {
            let due = t.state == ExecutionState::Scheduled;
            let failed = t.error.is_some();
            q = q
                .bind(&t.id)
                .bind(&run.namespace)
                .bind(&run.workflow)
                .bind(&run.workflow_uid)
                .bind(run.workflow_version)
                .bind(i64::from(run.shard))
                .bind(Trigger::Workflow.as_str())
                .bind(ms(run.scheduled_at))
                .bind(ms(run.fire_at))
                .bind(ms(run.fire_at))
                .bind(due.then(|| ms(run.fire_at)))
                .bind(t.state.is_terminal().then_some(now))
                .bind(t.state.as_str())
                .bind(i64::from(failed))
                .bind(i64::from(t.max_attempts))
                .bind(t.run.heartbeat_timeout.as_millis_i64())
                .bind(run_json)
                .bind(now)
                .bind(&run.id)
                .bind(&t.task);
        }
        q.execute(&mut **tx).await.map_err(db_err)?;
    }
    for t in tasks {
        if let Some(error) = &t.error {
            record_failed_attempt(tx, &t.id, 1, error, now).await?;
        }
    }
    Ok(())
}
