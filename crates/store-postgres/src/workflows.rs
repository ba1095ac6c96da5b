//! Workflows and their runs (docs/workflows.md): read, list, write and delete workflows;
//! create runs and their tasks; and the release applied inside every transaction that ends a
//! task (`release_runs_in_tx`, over `release.rs`'s statements). Reading, listing, cancelling,
//! retrying and expiring runs is in `runs.rs`. The decisions are `sundial_store::workflow`'s;
//! this file fetches their facts and applies them.
//!
//! Lock order, so that endings, cancels and retries of one run neither deadlock nor miss
//! each other: a transaction locks the run rows it touches first (`FOR UPDATE`, in id
//! order), then the run's execution rows. A completion finds the runs of its executions
//! before it updates them ([`lock_runs_of`]); a cancel locks the run, then its unfinished
//! tasks `FOR UPDATE` (waiting for a claim in flight, and reading the state it left).

use sundial_core::execution::Trigger;
use sundial_core::job::ConcurrencyPolicy;
use sundial_core::workflow::RunState;
use sundial_store::workflow::{NewTask, RunCreation, SpecCache, run_creation};
use sundial_store::{NewRun, TriggerListDue, WorkflowRecord, WorkflowTrigger, WorkflowWrite};

use super::*;
use crate::release::{record_failed_attempt, spec_text};
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
    store: &PgStore,
    writes: &[WorkflowWrite],
) -> Result<Vec<WorkflowRecord>> {
    let mut tx = store.begin().await?;
    let now = store.now_ms(&mut *tx).await?;
    let done = steps::workflow_write_batch(&mut WorkflowTx(&mut tx), writes, now).await?;
    commit(tx).await?;
    Ok(done.records)
}

pub(crate) async fn workflow_delete(
    store: &PgStore,
    namespace: &str,
    name: &str,
    expected_version: Option<i64>,
) -> Result<()> {
    let mut tx = store.begin().await?;
    let now = store.now_ms(&mut *tx).await?;
    let mut s = WorkflowTx(&mut tx);
    steps::workflow_delete(&mut s, namespace, name, expected_version, now).await?;
    commit(tx).await
}

/// The statements of a workflow's writes (`sundial_store::steps::workflow_writes`) on a
/// PostgreSQL transaction: the runs it cancels are locked first, in id order (the lock order of
/// `workflows`), and their tasks' workers are notified at the commit.
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
            "SELECT id FROM workflow_runs WHERE workflow_uid = $1 AND state = 'scheduled' \
             AND fire_at > $2 ORDER BY id FOR UPDATE",
        )
        .bind(uid)
        .bind(now)
        .fetch_all(&mut **self.0)
        .await
        .map_err(db_err)
    }

    async fn unfinished_runs(&mut self, uid: &str) -> Result<Vec<String>> {
        sqlx::query_scalar(&format!(
            "SELECT id FROM workflow_runs WHERE workflow_uid = $1 AND state IN {UNFINISHED_RUN} \
             ORDER BY id FOR UPDATE"
        ))
        .bind(uid)
        .fetch_all(&mut **self.0)
        .await
        .map_err(db_err)
    }

    /// The tasks' workers are notified inside the transaction: nothing is left to signal.
    async fn cancel_runs(&mut self, runs: &[String], now: i64) -> Result<Vec<String>> {
        cancel_runs_in_tx(self.0, runs, now, RunState::Cancelled).await?;
        Ok(Vec::new())
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
/// `run_timeout`) and whose rows `tx` has locked: their unfinished tasks
/// become `cancelled` (running attempts recorded `cancelled`, their workers notified on
/// commit) and the runs `end`.
pub(crate) async fn cancel_runs_in_tx(
    tx: &mut Tx<'_>,
    runs: &[String],
    now: i64,
    end: RunState,
) -> Result<()> {
    if runs.is_empty() {
        return Ok(());
    }
    // Locked, so a claim in flight finishes first and its `running` is what is read here.
    let tasks: Vec<(String, String)> = sqlx::query_as(&format!(
        "SELECT id, state FROM executions WHERE run_id = ANY($1) AND state IN {UNFINISHED_EXECUTION} \
         ORDER BY id FOR UPDATE"
    ))
    .bind(runs)
    .fetch_all(&mut **tx)
    .await
    .map_err(db_err)?;
    let ids: Vec<&str> = tasks.iter().map(|(id, _)| id.as_str()).collect();
    if !ids.is_empty() {
        cancel_all_in_tx(tx, &ids, now).await?;
    }
    for (id, state) in &tasks {
        if state == "running" {
            notify_cancelled(tx, id).await?;
        }
    }
    sqlx::query(&format!(
        "UPDATE workflow_runs SET state = $3, finished_at = $2, timeout_at = NULL \
         WHERE id = ANY($1) AND state IN {UNFINISHED_RUN}"
    ))
    .bind(runs)
    .bind(now)
    .bind(end.as_str())
    .execute(&mut **tx)
    .await
    .map_err(db_err)?;
    Ok(())
}

/// The parsed spec of a workflow version, from the cache or the database.
pub(crate) async fn version_spec<'e, E: sqlx::PgExecutor<'e>>(
    executor: E,
    cache: &SpecCache,
    uid: &str,
    version: i64,
) -> Result<std::sync::Arc<sundial_store::workflow::ParsedVersion>> {
    if let Some(parsed) = cache.get(uid, version) {
        return Ok(parsed);
    }
    let text = spec_text(executor, uid, version)
        .await?
        .ok_or_else(|| Error::Corrupt(format!("workflow {uid} has no version {version}")))?;
    cache.insert(uid, version, &text)
}

/// Locks the row of `run`'s workflow and checks that its version is still the run's: runs of
/// one workflow are created one at a time, so the concurrency policy sees every unfinished
/// run, and a write of the workflow waits.
///
/// # Errors
/// [`Error::NotFound`] when the workflow incarnation is gone; [`Error::StaleVersion`] when
/// its version is no longer `run.workflow_version`.
pub(crate) async fn lock_run_version(tx: &mut Tx<'_>, run: &NewRun) -> Result<()> {
    let version: Option<i64> =
        sqlx::query_scalar("SELECT version FROM workflows WHERE uid = $1 FOR UPDATE")
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

/// What creating a run did.
pub(crate) struct CreatedRun {
    /// The run's id: the new run's, or the one the slot already had.
    pub(crate) id: String,
    /// Whether a new run was inserted.
    pub(crate) inserted: bool,
}

/// Creates a run of the workflow version `run` names inside `tx`, whose workflow row the
/// caller has locked and checked: the slot's existing run for a `schedule` or `misfire` run
/// whose slot has one, else a run with its tasks as `plan_run` decides, under the workflow's
/// concurrency policy as of `now`. Tasks made due and attempts stopped are notified on commit.
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
            "SELECT id FROM workflow_runs WHERE workflow_uid = $1 AND scheduled_at = $2 \
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
            });
        }
    }
    let parsed = version_spec(&mut **tx, specs, &run.workflow_uid, run.workflow_version).await?;
    let (spec, dag) = (&parsed.spec, &parsed.dag);
    let mut recorded_as = run.recorded_as;
    if recorded_as.is_none() && spec.concurrency_policy != ConcurrencyPolicy::Allow {
        let unfinished = WorkflowTx(&mut *tx)
            .unfinished_runs(&run.workflow_uid)
            .await?;
        if !unfinished.is_empty() {
            match spec.concurrency_policy {
                ConcurrencyPolicy::Skip => recorded_as = Some(RunState::Skipped),
                _ => cancel_runs_in_tx(tx, &unfinished, now, RunState::Cancelled).await?,
            }
        }
    }
    // One run per slot (W1) rests on the primary key of the partitioned table (migration
    // 0010), so a slot's run must carry the id derived from it.
    if matches!(
        run.trigger,
        Trigger::Schedule | Trigger::Misfire | Trigger::Backfill
    ) && run.id != sundial_core::ids::slot_run_id(&run.workflow_uid, run.scheduled_at)
    {
        return Err(Error::Defect(
            format!(
                "run {} of slot {} of workflow incarnation {}: a slot's run id must be derived from them (sundial_core::ids::slot_run_id)",
                run.id, run.scheduled_at, run.workflow_uid
            )
            .into(),
        ));
    }
    let RunCreation {
        tasks,
        state,
        timeout_at,
    } = run_creation(spec, dag, run, recorded_as, now);
    sqlx::query(
        "INSERT INTO workflow_runs (id, namespace, workflow, workflow_uid, workflow_version, shard, \
           trigger, scheduled_at, fire_at, state, params, created_at, finished_at, timeout_at) \
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14)",
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
    if tasks.iter().any(|t| t.state == ExecutionState::Scheduled) {
        notify_due(tx).await?;
    }
    Ok(CreatedRun {
        id: run.id.clone(),
        inserted: true,
    })
}

/// Lists workflows of the given shards whose next fire time is at or before the horizon,
/// earliest first.
pub(crate) async fn workflow_list_due(
    store: &PgStore,
    q: &TriggerListDue,
) -> Result<Vec<WorkflowRecord>> {
    let now = store.now_ms(&store.pool).await?;
    let shards: Vec<i64> = q.shards.iter().map(|s| i64::from(*s)).collect();
    let sql = format!(
        "SELECT {WORKFLOW_COLUMNS}, NULL::text AS last_run FROM workflows w \
         WHERE w.shard = ANY($1) AND w.next_fire_at <= $2 ORDER BY w.next_fire_at LIMIT $3"
    );
    let rows = sqlx::query(&sql)
        .bind(&shards)
        .bind(ms(q.horizon))
        .bind(i64::from(q.limit))
        .fetch_all(&store.pool)
        .await
        .map_err(db_err)?;
    rows.iter().map(|r| rows::workflow(r, now)).collect()
}

/// Commits one workflow's trigger: fenced by the shard lease, the advance conditional on the
/// version and slot read (which also locks the workflow row, as `run_create` does), then its
/// runs created.
pub(crate) async fn workflow_trigger(store: &PgStore, t: &WorkflowTrigger) -> Result<u32> {
    let mut tx = store.begin().await?;
    let now = store.now_ms(&mut *tx).await?;
    trigger::check_fence(&mut tx, &t.node, &t.leases, &[t.shard], now).await?;
    let advanced = sqlx::query(
        "UPDATE workflows SET next_slot_at = $4, next_fire_at = $5 \
         WHERE uid = $1 AND version = $2 AND next_slot_at = $3",
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
    let mut inserted = 0u32;
    for run in &t.runs {
        let created = create_run_in_tx(&mut tx, &store.workflow_specs, run, now).await?;
        inserted += u32::from(created.inserted);
    }
    commit(tx).await?;
    Ok(inserted)
}

/// Inserts a new run's task executions (and the queue rows of those due), and an attempt row
/// for each that failed at creation (its target did not render); a few statements whatever
/// the number of tasks.
async fn insert_tasks(tx: &mut Tx<'_>, run: &NewRun, tasks: &[NewTask], now: i64) -> Result<()> {
    if tasks.is_empty() {
        return Ok(());
    }
    let n = tasks.len();
    let (
        mut ids,
        mut names,
        mut states,
        mut due,
        mut finished,
        mut attempts,
        mut max,
        mut lease,
        mut runs,
    ) = (
        Vec::with_capacity(n),
        Vec::with_capacity(n),
        Vec::with_capacity(n),
        Vec::with_capacity(n),
        Vec::with_capacity(n),
        Vec::with_capacity(n),
        Vec::with_capacity(n),
        Vec::with_capacity(n),
        Vec::with_capacity(n),
    );
    for t in tasks {
        ids.push(t.id.as_str());
        names.push(t.task.as_str());
        states.push(t.state.as_str());
        due.push((t.state == ExecutionState::Scheduled).then(|| ms(run.fire_at)));
        finished.push(t.state.is_terminal().then_some(now));
        attempts.push(i64::from(t.error.is_some()));
        max.push(i64::from(t.max_attempts));
        lease.push(t.run.heartbeat_timeout.as_millis_i64());
        runs.push(to_json(&t.run)?);
    }
    sqlx::query(
        "WITH t AS (SELECT * FROM UNNEST($1::text[], $2::text[], $3::text[], $4::bigint[], $5::bigint[], \
                 $6::bigint[], $7::bigint[], $8::bigint[], $9::text[]) \
               AS t(id, task, state, due_at, finished_at, attempt, max_attempts, lease_ms, run)), \
         e AS (INSERT INTO executions (id, namespace, job, job_uid, job_version, shard, trigger, \
                 scheduled_at, fire_at, queued_at, due_at, finished_at, state, attempt, max_attempts, \
                 lease_ms, run, created_at, run_id, task) \
               SELECT t.id, $10, $11, $12, $13, $14, 'workflow', $15, $16, $16, t.due_at, t.finished_at, \
                 t.state, t.attempt, t.max_attempts, t.lease_ms, t.run, $17, $18, t.task FROM t \
               RETURNING id, due_at) \
         INSERT INTO execution_queue (id, namespace, job_uid, due_at) \
         SELECT id, $10, $12, due_at FROM e WHERE due_at IS NOT NULL",
    )
    .bind(&ids)
    .bind(&names)
    .bind(&states)
    .bind(&due)
    .bind(&finished)
    .bind(&attempts)
    .bind(&max)
    .bind(&lease)
    .bind(&runs)
    .bind(&run.namespace)
    .bind(&run.workflow)
    .bind(&run.workflow_uid)
    .bind(run.workflow_version)
    .bind(i64::from(run.shard))
    .bind(ms(run.scheduled_at))
    .bind(ms(run.fire_at))
    .bind(now)
    .bind(&run.id)
    .execute(&mut **tx)
    .await
    .map_err(db_err)?;
    for t in tasks {
        if let Some(error) = &t.error {
            record_failed_attempt(tx, &t.id, 1, error, now).await?;
        }
    }
    Ok(())
}

/// Locks, in id order, the runs the executions `ids` belong to, before anything of them is
/// updated (the module's lock order); returns them.
pub(crate) async fn lock_runs_of(tx: &mut Tx<'_>, ids: &[&str]) -> Result<Vec<String>> {
    sqlx::query_scalar(
        "SELECT id FROM workflow_runs WHERE id = ANY(ARRAY( \
           SELECT DISTINCT run_id FROM executions WHERE id = ANY($1) AND run_id IS NOT NULL)) \
         ORDER BY id FOR UPDATE",
    )
    .bind(ids)
    .fetch_all(&mut **tx)
    .await
    .map_err(db_err)
}
