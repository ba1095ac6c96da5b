//! A workflow run's creation (docs/workflows.md, "Runs") and a workflow's trigger commit,
//! written once over the statements of both stores on any store's open [`Transaction`] and the
//! few a dialect writes its own way ([`RunCreationStatements`]: the task rows, the cancellation
//! of executions, the workers' signals). The caller opens the transaction, checks what fences
//! it (a shard lease for a trigger), runs the step, commits only when it returns `Ok`, and then
//! signals what [`CreatedRun`] says where its dialect does not signal inside the transaction.
//!
//! Invariants: one run per slot of a workflow incarnation (`schedule`, `misfire` and `backfill`
//! runs find the slot's run and create nothing); a run is created against the workflow version
//! it names, read with its row held until the transaction ends where the store holds rows, so
//! runs of one workflow are created one at a time and the concurrency policy sees every
//! unfinished run; a run, its tasks and the failed attempts of tasks whose target did not
//! render go in one transaction; the cancellations of a `replace` policy happen in it too.

use std::future::Future;
use std::sync::Arc;

use sundial_core::execution::{ExecutionState, Trigger};
use sundial_core::job::ConcurrencyPolicy;
use sundial_core::workflow::RunState;

use crate::reads::{Reader, Statement, Transaction};
use crate::steps::executions::{ExecutionDialect, cancel_all};
use crate::workflow::{NewTask, ParsedVersion, RunCreation, SpecCache, run_creation};
use crate::{Error, NewRun, Result, WorkflowTrigger};

/// The states of a run that is not terminal, as an SQL list.
pub const UNFINISHED_RUN: &str = "('scheduled', 'running')";

/// The states of an execution that is not terminal, as an SQL list.
pub const UNFINISHED_EXECUTION: &str =
    "('pending', 'scheduled', 'queued', 'running', 'retry_wait')";

/// The statements of a run's creation and cancellation that each dialect writes its own way,
/// on the transaction the caller opened (whose store's [`ExecutionDialect`] cancels executions). Instants are UTC milliseconds since the epoch. Every
/// method may fail with the store's classified error.
pub trait RunCreationStatements: Transaction<Store: ExecutionDialect> {
    /// Whether one run per slot rests on the run's id derived from its slot
    /// (`sundial_core::ids::slot_run_id`), as it does on PostgreSQL, whose partitioned
    /// table's primary key holds it: a slot's run with another id is then refused.
    const SLOT_RUN_IDS: bool;

    /// Inserts the task executions `tasks` of the new run `run` at `now`: those `scheduled`
    /// due at the run's fire time (and in the dialect's queue of due executions), the others
    /// not due; a few statements whatever their number.
    fn insert_tasks(
        &mut self,
        run: &NewRun,
        tasks: &[NewTask],
        now: i64,
    ) -> impl Future<Output = Result<()>> + Send;

    /// Tells the workers of the executions `running` (just cancelled) to stop them: inside
    /// the transaction where the store signals so (PostgreSQL's `NOTIFY`), returning nothing;
    /// otherwise returns them, for the caller to signal after the commit.
    fn stop(&mut self, running: Vec<String>) -> impl Future<Output = Result<Vec<String>>> + Send;

    /// Tells the store's workers that executions became due, inside the transaction where the
    /// store signals so; nothing where the caller signals after the commit.
    fn notify_due(&mut self) -> impl Future<Output = Result<()>> + Send;
}

/// What creating a run did, for the signals sent after its commit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CreatedRun {
    /// The run's id: the new run's, or the one the slot already had.
    pub id: String,
    /// Whether a new run was inserted.
    pub inserted: bool,
    /// Whether tasks were made due.
    pub due: bool,
    /// Running executions of replaced runs to stop after the commit (see
    /// [`RunCreationStatements::stop`]).
    pub stopped: Vec<String>,
}

/// The parsed spec of version `version` of workflow incarnation `uid`, from `cache` or read
/// in `tx`.
///
/// # Errors
/// [`Error::Corrupt`] when the version is not stored or does not parse; the store's.
pub async fn parsed_version<T: Transaction>(
    tx: &mut T,
    cache: &SpecCache,
    uid: &str,
    version: i64,
) -> Result<Arc<ParsedVersion>> {
    if let Some(parsed) = cache.get(uid, version) {
        return Ok(parsed);
    }
    let st = Statement::new("SELECT spec FROM workflow_versions WHERE uid = $1 AND version = $2")
        .bind(uid)
        .bind(version);
    let text = match tx.row(&st).await? {
        Some(row) => <T::Store as Reader>::text(&row)?,
        None => {
            return Err(Error::Corrupt(format!(
                "workflow {uid} has no version {version}"
            )));
        }
    };
    cache.insert(uid, version, &text)
}

/// The ids of the unfinished runs of workflow incarnation `uid` (and, with `scheduled_after`,
/// only those `scheduled` whose fire time is after it: not started), in id order, each held
/// until the transaction ends where the store holds rows (the lock order of runs).
///
/// # Errors
/// The store's.
pub async fn unfinished_runs<T: Transaction>(
    tx: &mut T,
    uid: &str,
    scheduled_after: Option<i64>,
) -> Result<Vec<String>> {
    let lock = <T::Store as Reader>::FOR_UPDATE;
    let rows = match scheduled_after {
        Some(after) => {
            let sql = format!(
                "SELECT id FROM workflow_runs WHERE workflow_uid = $1 AND state = 'scheduled' \
                 AND fire_at > $2 ORDER BY id{lock}"
            );
            tx.rows(&Statement::new(sql).bind(uid).bind(after)).await?
        }
        None => {
            let sql = format!(
                "SELECT id FROM workflow_runs WHERE workflow_uid = $1 \
                 AND state IN {UNFINISHED_RUN} ORDER BY id{lock}"
            );
            tx.rows(&Statement::new(sql).bind(uid)).await?
        }
    };
    rows.iter().map(<T::Store as Reader>::text).collect()
}

/// Ends `runs` (unfinished, held by the caller where the store holds rows) in `end`
/// (`cancelled`, or `failed` past their `run_timeout`) at `now`: their unfinished tasks become
/// `cancelled` (running attempts recorded so, their workers told) and the runs `end`. Returns
/// the running executions for the caller to signal after the commit (see
/// [`RunCreationStatements::stop`]).
///
/// # Errors
/// The store's.
pub async fn cancel_runs<S: RunCreationStatements>(
    s: &mut S,
    runs: &[String],
    now: i64,
    end: RunState,
) -> Result<Vec<String>> {
    if runs.is_empty() {
        return Ok(Vec::new());
    }
    // Held, so a claim in flight finishes first and its `running` is what is read here.
    let sql = format!(
        "SELECT id, CAST(CASE WHEN state = 'running' THEN 1 ELSE 0 END AS BIGINT) FROM executions \
         WHERE {} AND state IN {UNFINISHED_EXECUTION} ORDER BY id{}",
        <S::Store as Reader>::one_of("run_id", 1),
        <S::Store as Reader>::FOR_UPDATE
    );
    let rows = s.rows(&Statement::new(sql).bind(runs)).await?;
    let mut ids = Vec::with_capacity(rows.len());
    let mut running = Vec::new();
    for row in &rows {
        let id = <S::Store as Reader>::text(row)?;
        if <S::Store as Reader>::int(row, 1)? == 1 {
            running.push(id.clone());
        }
        ids.push(id);
    }
    if !ids.is_empty() {
        cancel_all(s, &ids, now).await?;
    }
    let stopped = s.stop(running).await?;
    let sql = format!(
        "UPDATE workflow_runs SET state = $3, finished_at = $2, timeout_at = NULL \
         WHERE {} AND state IN {UNFINISHED_RUN}",
        <S::Store as Reader>::one_of("id", 1)
    );
    s.execute(&Statement::new(sql).bind(runs).bind(now).bind(end.as_str()))
        .await?;
    Ok(stopped)
}

/// Holds the row of `run`'s workflow where the store holds rows and checks that its version
/// is still the run's: runs of one workflow are created one at a time, and a write of the
/// workflow waits.
///
/// # Errors
/// [`Error::NotFound`] when the workflow incarnation is gone; [`Error::StaleVersion`] when its
/// version is no longer `run.workflow_version`; the store's.
pub async fn hold_run_version<T: Transaction>(tx: &mut T, run: &NewRun) -> Result<()> {
    let sql = format!(
        "SELECT version FROM workflows WHERE uid = $1{}",
        <T::Store as Reader>::FOR_UPDATE
    );
    let row = tx
        .row(&Statement::new(sql).bind(run.workflow_uid.as_str()))
        .await?;
    match row.map(|r| <T::Store as Reader>::int(&r, 0)).transpose()? {
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

/// The attempt row of task execution `id` that failed without running (its target did not
/// render), as attempt `attempt`, at `now`.
///
/// # Errors
/// The store's.
pub async fn record_failed_attempt<T: Transaction>(
    tx: &mut T,
    id: &str,
    attempt: i64,
    error: &str,
    now: i64,
) -> Result<()> {
    let st = Statement::new(
        "INSERT INTO attempts (execution_id, attempt, worker, started_at, finished_at, outcome, \
           error) VALUES ($1, $2, '', $3, $3, 'permanent_failure', $4)",
    )
    .bind(id)
    .bind(attempt)
    .bind(now)
    .bind(error);
    tx.execute(&st).await?;
    Ok(())
}

/// Whether `trigger` names a slot of the schedule (or of a backfill), whose run is one per slot.
fn of_slot(trigger: Trigger) -> bool {
    matches!(
        trigger,
        Trigger::Schedule | Trigger::Misfire | Trigger::Backfill
    )
}

/// Creates a run of the workflow version `run` names at `now`, its workflow's row held and
/// version checked by the caller ([`hold_run_version`]): the slot's existing run for a
/// `schedule`, `misfire` or `backfill` run whose slot has one, else a run with its tasks as
/// [`run_creation`] decides under the workflow's concurrency policy (a `replace` cancels the
/// unfinished runs, a `skip` records the run `skipped`).
///
/// # Errors
/// [`Error::Defect`] for a slot's run whose id is not the one derived from its slot where one
/// run per slot rests on it ([`RunCreationStatements::SLOT_RUN_IDS`]); [`Error::Corrupt`] for a
/// version that is not stored or does not parse; the store's.
pub async fn create_run<S: RunCreationStatements>(
    s: &mut S,
    specs: &SpecCache,
    run: &NewRun,
    now: i64,
) -> Result<CreatedRun> {
    if of_slot(run.trigger) {
        let st = Statement::new(
            "SELECT id FROM workflow_runs WHERE workflow_uid = $1 AND scheduled_at = $2 \
             AND trigger IN ('schedule', 'misfire', 'backfill')",
        )
        .bind(run.workflow_uid.as_str())
        .bind(run.scheduled_at.as_millisecond());
        if let Some(row) = s.row(&st).await? {
            return Ok(CreatedRun {
                id: <S::Store as Reader>::text(&row)?,
                inserted: false,
                due: false,
                stopped: Vec::new(),
            });
        }
    }
    let parsed = parsed_version(s, specs, &run.workflow_uid, run.workflow_version).await?;
    let (spec, dag) = (&parsed.spec, &parsed.dag);
    let mut recorded_as = run.recorded_as;
    let mut stopped = Vec::new();
    if recorded_as.is_none() && spec.concurrency_policy != ConcurrencyPolicy::Allow {
        let unfinished = unfinished_runs(s, &run.workflow_uid, None).await?;
        if !unfinished.is_empty() {
            match spec.concurrency_policy {
                ConcurrencyPolicy::Skip => recorded_as = Some(RunState::Skipped),
                _ => stopped = cancel_runs(s, &unfinished, now, RunState::Cancelled).await?,
            }
        }
    }
    if S::SLOT_RUN_IDS
        && of_slot(run.trigger)
        && run.id != sundial_core::ids::slot_run_id(&run.workflow_uid, run.scheduled_at)
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
    let params = serde_json::to_string(&run.params).map_err(|e| Error::Corrupt(e.to_string()))?;
    let st = Statement::new(
        "INSERT INTO workflow_runs (id, namespace, workflow, workflow_uid, workflow_version, \
           shard, trigger, scheduled_at, fire_at, state, params, created_at, finished_at, \
           timeout_at) \
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14)",
    )
    .bind(run.id.as_str())
    .bind(run.namespace.as_str())
    .bind(run.workflow.as_str())
    .bind(run.workflow_uid.as_str())
    .bind(run.workflow_version)
    .bind(i64::from(run.shard))
    .bind(run.trigger.as_str())
    .bind(run.scheduled_at.as_millisecond())
    .bind(run.fire_at.as_millisecond())
    .bind(state.as_str())
    .bind(params.as_str())
    .bind(now)
    .bind(state.is_terminal().then_some(now))
    .bind(timeout_at);
    s.execute(&st).await?;
    if !tasks.is_empty() {
        s.insert_tasks(run, &tasks, now).await?;
    }
    for t in &tasks {
        if let Some(error) = &t.error {
            record_failed_attempt(s, &t.id, 1, error, now).await?;
        }
    }
    let due = tasks.iter().any(|t| t.state == ExecutionState::Scheduled);
    if due {
        s.notify_due().await?;
    }
    Ok(CreatedRun {
        id: run.id.clone(),
        inserted: true,
        due,
        stopped,
    })
}

/// Creates a run on its own (the API's trigger or retry of a workflow): its workflow's row
/// held and version checked ([`hold_run_version`]), then the run as [`create_run`] makes it,
/// recorded in the audit log as the workflow's `trigger`.
///
/// # Errors
/// [`hold_run_version`]'s and [`create_run`]'s.
pub async fn create_held_run<S: RunCreationStatements>(
    s: &mut S,
    specs: &SpecCache,
    run: &NewRun,
    now: i64,
) -> Result<CreatedRun> {
    hold_run_version(s, run).await?;
    let created = create_run(s, specs, run, now).await?;
    let change = crate::audit::Change {
        resource: "workflow",
        namespace: run.namespace.clone(),
        name: run.workflow.clone(),
        action: "trigger",
        version_before: Some(run.workflow_version),
        version_after: Some(run.workflow_version),
    };
    super::audit::record(s, &[change], now).await?;
    Ok(created)
}

/// Commits the trigger `t` of one workflow at `now`, its shard's fence checked by the caller:
/// the workflow moves to its next slot only while its version and next slot are the ones the
/// trigger read (its row held by that update where the store holds rows), then its runs are
/// created as [`create_run`] does. Returns what creating each run did, none when the workflow
/// had moved on (nothing written).
///
/// # Errors
/// [`create_run`]'s; the store's.
pub async fn workflow_trigger<S: RunCreationStatements>(
    s: &mut S,
    specs: &SpecCache,
    t: &WorkflowTrigger,
    now: i64,
) -> Result<Vec<CreatedRun>> {
    let st = Statement::new(
        "UPDATE workflows SET next_slot_at = $4, next_fire_at = $5 \
         WHERE uid = $1 AND version = $2 AND next_slot_at = $3",
    )
    .bind(t.uid.as_str())
    .bind(t.version)
    .bind(t.expected_next_slot.as_millisecond())
    .bind(t.next_slot_at.map(|x| x.as_millisecond()))
    .bind(t.next_fire_at.map(|x| x.as_millisecond()));
    if s.execute(&st).await? == 0 {
        return Ok(Vec::new());
    }
    let mut created = Vec::with_capacity(t.runs.len());
    for run in &t.runs {
        created.push(create_run(s, specs, run, now).await?);
    }
    Ok(created)
}

/// How many of `created` are new runs (a slot that had its run already is not), as
/// [`crate::SchedulerStore::workflow_trigger`] answers.
pub fn inserted(created: &[CreatedRun]) -> u32 {
    u32::try_from(created.iter().filter(|c| c.inserted).count()).unwrap_or(u32::MAX)
}
