//! Workflows in the store (docs/workflows.md): their records, and the decisions both stores
//! apply inside their transactions — which task executions a new run gets, and what the end
//! of a task releases — decided once here over facts the stores fetch
//! (ARCHITECTURE.md, "Workflows").
//!
//! Instants are UTC at millisecond resolution: [`jiff::Timestamp`]s, or `i64` milliseconds
//! since the Unix epoch where a store passes its clock's reading (`now`).
//!
//! Invariants every store keeps, with these decisions:
//! - One run per slot of a workflow incarnation (`workflow_runs_slot`), and exactly one
//!   execution per (run, task) (`executions_run_task`): W1.
//! - Release happens only in the transaction that ends a task — a fenced completion that
//!   applied, a cancel, the reaper's completion — under the run's row lock, so two endings in
//!   one run see each other; a completion refused as stale ends nothing and so releases
//!   nothing: W3.
//! - A run reads its tasks from the version it was created with (`workflow_versions`, never
//!   changed once written): W4.
//! - A cancelled run's unfinished tasks are cancelled in the cancel's transaction and a
//!   cancelled run releases nothing: W5.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

use jiff::Timestamp;
use serde::Serialize;
use serde_json::Value;
use sundial_core::execution::{ExecutionState, Trigger};
use sundial_core::job::ConcurrencyPolicy;
use sundial_core::workflow::dag::Dag;
use sundial_core::workflow::release::{self, RunState, run_state};
use sundial_core::workflow::spec::WorkflowSpec;
use sundial_core::workflow::template::{self, Context};

use crate::{Error, Result, RunSpec};

/// A stored workflow: the spec plus what the store keeps about it.
#[derive(Debug, Clone, PartialEq)]
pub struct WorkflowRecord {
    /// The definition as last written.
    pub spec: WorkflowSpec,
    /// Identity of this incarnation of the name (a new one after delete and re-create).
    pub uid: String,
    /// `shard_of(namespace, name)`.
    pub shard: u16,
    /// Starts at 1, grows by one with every write by a user.
    pub version: i64,
    /// Creation instant.
    pub created_at: Timestamp,
    /// Last write by a user.
    pub updated_at: Timestamp,
    /// The next slot not yet triggered; `None` without a schedule, paused or completed.
    pub next_slot_at: Option<Timestamp>,
    /// That slot's fire time (slot + jitter).
    pub next_fire_at: Option<Timestamp>,
    /// The newest run whose fire time has passed.
    pub last_run: Option<RunSummary>,
}

impl WorkflowRecord {
    /// `paused`, `completed` (a schedule that yields nothing more) or `active` (a workflow
    /// without a schedule is `active`: it runs when triggered).
    pub fn state(&self) -> &'static str {
        if self.spec.paused {
            "paused"
        } else if self.spec.schedule.is_some() && self.next_slot_at.is_none() {
            "completed"
        } else {
            "active"
        }
    }
}

/// The `last_run` of a workflow.
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
pub struct RunSummary {
    /// Run id.
    pub id: String,
    /// Its state as of the read.
    pub state: RunState,
    /// Its slot.
    pub scheduled_at: Timestamp,
}

/// `workflow_list` parameters.
#[derive(Debug, Clone, Default)]
pub struct WorkflowListQuery {
    /// Namespace.
    pub namespace: String,
    /// Only paused (true) or unpaused (false) workflows.
    pub paused: Option<bool>,
    /// Only workflows with this label key and value.
    pub label: Option<(String, String)>,
    /// Names strictly after this one (the page token).
    pub after_name: Option<String>,
    /// Page size, 1 to 1000.
    pub limit: u32,
}

/// `workflow_write_batch` parameters for one workflow.
#[derive(Debug, Clone)]
pub struct WorkflowWrite {
    /// The workflow as it should be stored; `version` is ignored (the store assigns it).
    pub record: WorkflowRecord,
    /// `None` to create; `Some(v)` to replace version `v`.
    pub expected_version: Option<i64>,
    /// A replace that changes what a run does (anything but the description and labels):
    /// the workflow's runs that have not started are cancelled ([`affects_runs`]).
    pub cancel_not_started: bool,
}

/// Whether writing `new` over `old` changes what a run of it does, or whether it runs: any
/// change but of the description and labels (docs/workflows.md: changing a workflow cancels its runs
/// that have not started; a description or a label is no change to a run).
pub fn affects_runs(old: &WorkflowSpec, new: &WorkflowSpec) -> bool {
    let mut same_words = old.clone();
    same_words.description.clone_from(&new.description);
    same_words.labels.clone_from(&new.labels);
    same_words != *new
}

/// A run to create (a slot of the schedule, or a manual trigger).
#[derive(Debug, Clone)]
pub struct NewRun {
    /// UUID text: for a slot, derived from (workflow incarnation, slot) by
    /// `sundial_core::ids::slot_run_id`; for a manual trigger, a UUIDv7.
    pub id: String,
    /// Namespace.
    pub namespace: String,
    /// Workflow name.
    pub workflow: String,
    /// Workflow incarnation.
    pub workflow_uid: String,
    /// The version the run executes (W4).
    pub workflow_version: i64,
    /// Shard of the workflow.
    pub shard: u16,
    /// `schedule`, `misfire` or `manual`.
    pub trigger: Trigger,
    /// Its slot (for a manual trigger, the instant of the request).
    pub scheduled_at: Timestamp,
    /// When its tasks without upstream become due.
    pub fire_at: Timestamp,
    /// The workflow's params with the trigger's merged over them.
    pub params: serde_json::Map<String, Value>,
    /// `None` to run; `Some(skipped | missed)` to record a slot a policy did not run.
    pub recorded_as: Option<RunState>,
}

/// One workflow's trigger (the scheduler's commit for it): the advance of its next slot and
/// the runs of the slots passed.
#[derive(Debug, Clone)]
pub struct WorkflowTrigger {
    /// The scheduler node.
    pub node: String,
    /// The shard leases the trigger relies on, as read.
    pub leases: Vec<crate::ShardLease>,
    /// Workflow incarnation read.
    pub uid: String,
    /// Its shard.
    pub shard: u16,
    /// Version read (the advance is conditional on it).
    pub version: i64,
    /// Next slot read (the advance is conditional on it).
    pub expected_next_slot: Timestamp,
    /// The new next slot; `None` completes the schedule.
    pub next_slot_at: Option<Timestamp>,
    /// Its fire time.
    pub next_fire_at: Option<Timestamp>,
    /// Runs for the slots passed (`schedule` or `misfire`; `missed` ones recorded only).
    pub runs: Vec<NewRun>,
}

/// One task's execution as a new run creates it ([`plan_run`]).
#[derive(Debug, Clone, PartialEq)]
pub struct NewTask {
    /// Execution id, derived from (run, task) by `sundial_core::ids::task_execution_id`.
    pub id: String,
    /// Task name.
    pub task: String,
    /// `pending`, `scheduled` (due at the run's fire time), or an ending decided at creation
    /// (`failed` when its target did not render, then its downstream's endings).
    pub state: ExecutionState,
    /// Attempts allowed.
    pub max_attempts: u32,
    /// What to run: rendered for a due task, as written for a pending one.
    pub run: RunSpec,
    /// Why it failed without running, for a task whose target did not render.
    pub error: Option<String>,
}

/// A run as recorded, with its tasks (empty in listings).
#[derive(Debug, Clone, PartialEq)]
pub struct RunRecord {
    /// UUID text: for a slot, derived from (workflow incarnation, slot) by
    /// `sundial_core::ids::slot_run_id`; for a manual trigger, a UUIDv7.
    pub id: String,
    /// Namespace.
    pub namespace: String,
    /// Workflow name.
    pub workflow: String,
    /// The version it executes.
    pub workflow_version: i64,
    /// Why it was created.
    pub trigger: Trigger,
    /// Its slot.
    pub scheduled_at: Timestamp,
    /// When its first tasks became due.
    pub fire_at: Timestamp,
    /// Its state as of the read (a stored `scheduled` whose fire time passed reads `running`).
    pub state: RunState,
    /// Its params.
    pub params: serde_json::Map<String, Value>,
    /// Creation instant.
    pub created_at: Timestamp,
    /// When its first attempt started.
    pub started_at: Option<Timestamp>,
    /// When it reached a terminal state.
    pub finished_at: Option<Timestamp>,
    /// Its tasks in the order of the workflow version's `tasks`.
    pub tasks: Vec<TaskRecord>,
}

/// One task of a run.
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
pub struct TaskRecord {
    /// Task name.
    pub name: String,
    /// Its direct upstream.
    pub depends_on: Vec<String>,
    /// Its trigger rule.
    pub trigger_rule: sundial_core::workflow::TriggerRule,
    /// Its execution's state as of the read.
    pub state: ExecutionState,
    /// Its execution.
    pub execution_id: String,
    /// Current or last attempt number (0 before the first).
    pub attempt: u32,
    /// First attempt's start.
    pub started_at: Option<Timestamp>,
    /// When it ended.
    pub finished_at: Option<Timestamp>,
    /// Its output, for a task with `output: json` that succeeded.
    pub output: Option<Value>,
}

/// `run_list` parameters.
#[derive(Debug, Clone, Default)]
pub struct RunListQuery {
    /// Namespace.
    pub namespace: String,
    /// Only this workflow's runs.
    pub workflow: Option<String>,
    /// Only runs in this state as a reader sees it.
    pub state: Option<RunState>,
    /// Page token: runs strictly before this (scheduled_at, id) in the order.
    pub before: Option<(Timestamp, String)>,
    /// Page size, 1 to 1000.
    pub limit: u32,
}

/// The run-relevant definition of task `i` of `spec` with `target` (rendered, or as written
/// for a task still pending): its retry, timeouts and output from the workflow's defaults.
/// A task runs whenever it is due (no concurrency or misfire judgement of its own: the
/// policies act on runs).
pub fn task_run_spec(
    spec: &WorkflowSpec,
    i: usize,
    target: sundial_core::job::TargetSpec,
) -> RunSpec {
    let task = &spec.tasks[i];
    RunSpec {
        target,
        retry: task.retry_policy(&spec.defaults),
        timeout: task.timeout(&spec.defaults),
        heartbeat_timeout: task.heartbeat_timeout(&spec.defaults),
        concurrency_policy: ConcurrencyPolicy::Allow,
        misfire_policy: Default::default(),
        misfire_threshold: spec.misfire_threshold,
        one_off: true,
        output: task.output.is_some(),
        // The authored target's, not the rendered one's: a reference an upstream's output
        // inserted is never rendered (`sundial_core::secrets`).
        secrets: sundial_core::secrets::target_references(&task.target)
            .into_keys()
            .collect(),
    }
}

/// The facts of one run that a release decides over, fetched by the store under the run's
/// row lock.
#[derive(Debug, Clone)]
pub struct RunFacts<'a> {
    /// Run id.
    pub run_id: &'a str,
    /// The run's slot.
    pub scheduled_at: Timestamp,
    /// The run's params.
    pub params: &'a serde_json::Map<String, Value>,
    /// The version the run executes.
    pub spec: &'a WorkflowSpec,
    /// Its graph.
    pub dag: &'a Dag,
    /// Each task's execution, indexed like `spec.tasks`.
    pub tasks: Vec<TaskFact>,
}

/// One task's execution as a release sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct TaskFact {
    /// Execution id.
    pub execution_id: String,
    /// Stored state.
    pub state: ExecutionState,
    /// Its output, when it kept one.
    pub output: Option<Value>,
}

/// What a release writes, in the transaction that ended a task.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RunStep {
    /// Executions that become `queued` (due now), each with its rendered definition.
    pub queued: Vec<(String, RunSpec)>,
    /// Executions that end without running (`upstream_failed`, `skipped`).
    pub ended: Vec<(String, ExecutionState)>,
    /// Executions that fail for good without running because their target did not render,
    /// with the reason (the field and the missing path).
    pub failed: Vec<(String, String)>,
    /// The run's terminal state when its last task ended.
    pub run_state: Option<RunState>,
}

impl RunStep {
    /// True when the release changes nothing.
    pub fn is_empty(&self) -> bool {
        self.queued.is_empty()
            && self.ended.is_empty()
            && self.failed.is_empty()
            && self.run_state.is_none()
    }
}

/// Decides what the current task states of a run release (docs/workflows.md, "Release"; in one
/// transaction"): each `pending` task whose trigger rule is met is rendered and queued — or,
/// when a template path is missing or a header would hold CR/LF, fails for good — and every
/// task whose rule can no longer be met ends, transitively, until nothing changes; the run
/// ends when its last task does.
pub fn release(facts: &RunFacts<'_>) -> RunStep {
    let mut states: Vec<ExecutionState> = facts.tasks.iter().map(|t| t.state).collect();
    let outputs: BTreeMap<String, Value> = facts
        .tasks
        .iter()
        .zip(&facts.spec.tasks)
        .filter_map(|(t, s)| t.output.clone().map(|o| (s.name.clone(), o)))
        .collect();
    let ctx = Context {
        run_id: facts.run_id,
        scheduled_at: facts.scheduled_at,
        params: facts.params,
        outputs: &outputs,
    };
    let mut step = RunStep::default();
    loop {
        let decided = release::release(facts.dag, &mut states);
        let mut render_failed = false;
        for &i in &decided.queued {
            let id = facts.tasks[i].execution_id.clone();
            match template::render_target(&facts.spec.tasks[i].target, &ctx) {
                Ok(target) => step.queued.push((id, task_run_spec(facts.spec, i, target))),
                Err(e) => {
                    states[i] = ExecutionState::Failed;
                    step.failed
                        .push((id, format!("the target did not render: {e}")));
                    render_failed = true;
                }
            }
        }
        step.ended.extend(
            decided
                .ended
                .iter()
                .map(|&(i, s)| (facts.tasks[i].execution_id.clone(), s)),
        );
        // A task failed at render time can decide its downstream in turn.
        if !render_failed {
            break;
        }
    }
    step.run_state = run_state(&states);
    step
}

/// The task executions of a new run of `spec` (docs/workflows.md, "Runs"): tasks without upstream are
/// `scheduled` at the run's fire time with their targets rendered, the others `pending` —
/// or, when a root's target does not render, `failed` with its downstream decided. Also the
/// run's terminal state when that leaves nothing to run.
pub fn plan_run(spec: &WorkflowSpec, dag: &Dag, run: &NewRun) -> (Vec<NewTask>, Option<RunState>) {
    let mut tasks: Vec<NewTask> = spec
        .tasks
        .iter()
        .enumerate()
        .map(|(i, t)| {
            let run_spec = task_run_spec(spec, i, t.target.clone());
            NewTask {
                id: sundial_core::ids::task_execution_id(&run.id, &t.name, run.scheduled_at),
                task: t.name.clone(),
                state: ExecutionState::Pending,
                max_attempts: run_spec.retry.max_attempts,
                run: run_spec,
                error: None,
            }
        })
        .collect();
    let facts = RunFacts {
        run_id: &run.id,
        scheduled_at: run.scheduled_at,
        params: &run.params,
        spec,
        dag,
        tasks: tasks
            .iter()
            .map(|t| TaskFact {
                execution_id: t.id.clone(),
                state: ExecutionState::Pending,
                output: None,
            })
            .collect(),
    };
    let step = release(&facts);
    let index: HashMap<String, usize> = tasks
        .iter()
        .enumerate()
        .map(|(i, t)| (t.id.clone(), i))
        .collect();
    for (id, run_spec) in step.queued {
        let t = &mut tasks[index[&id]];
        t.state = ExecutionState::Scheduled;
        t.run = run_spec;
    }
    for (id, state) in step.ended {
        tasks[index[&id]].state = state;
    }
    for (id, error) in step.failed {
        let t = &mut tasks[index[&id]];
        t.state = ExecutionState::Failed;
        t.error = Some(error);
    }
    (tasks, step.run_state)
}

/// The tasks a retry of a terminal run resets (docs/workflows.md, "Retry from failure"), as indices:
/// `names` and their downstream, or without names every task that ended `failed`, `dead`,
/// `cancelled` or `upstream_failed` and its downstream.
///
/// # Errors
/// [`Error::NotFound`] naming a task the run's version does not have.
pub fn retry_plan(
    spec: &WorkflowSpec,
    dag: &Dag,
    states: &[ExecutionState],
    names: &[String],
) -> Result<Vec<usize>> {
    let named = names
        .iter()
        .map(|n| {
            spec.task(n)
                .map(|(i, _)| i)
                .ok_or_else(|| Error::NotFound(format!("task '{n}' of this run's version")))
        })
        .collect::<Result<Vec<_>>>()?;
    let mask = release::retry_set(dag, states, &named);
    Ok((0..mask.len()).filter(|&i| mask[i]).collect())
}

/// A run's task facts in the order of its version's `tasks`, from the facts read by task name.
///
/// # Errors
/// [`Error::Corrupt`] when a task of the version has no execution in the run.
pub fn facts_in_order(
    spec: &WorkflowSpec,
    mut by_task: HashMap<String, TaskFact>,
    run_id: &str,
) -> Result<Vec<TaskFact>> {
    spec.tasks
        .iter()
        .map(|t| {
            by_task.remove(&t.name).ok_or_else(|| {
                Error::Corrupt(format!("run {run_id} has no execution for task {}", t.name))
            })
        })
        .collect()
}

/// Sorts a run's tasks in the order of its version's `tasks`.
pub fn order_tasks(spec: &WorkflowSpec, tasks: &mut [TaskRecord]) {
    let order: HashMap<&str, usize> = spec
        .tasks
        .iter()
        .enumerate()
        .map(|(i, t)| (t.name.as_str(), i))
        .collect();
    tasks.sort_by_key(|t| order.get(t.name.as_str()).copied().unwrap_or(usize::MAX));
}

/// Whether a run in `state` may be cancelled (docs/workflows.md, "Cancel").
///
/// # Errors
/// [`Error::Conflict`] for a terminal run.
pub fn check_cancellable(id: &str, state: RunState) -> Result<()> {
    if state.is_terminal() {
        return Err(Error::Conflict(format!("run {id} is already {state}")));
    }
    Ok(())
}

/// Whether a run in `state` may be retried (docs/workflows.md, "Retry from failure").
///
/// # Errors
/// [`Error::Conflict`] for a run that is not terminal, or that was `skipped` or `missed` (it
/// has no tasks).
pub fn check_retryable(id: &str, state: RunState) -> Result<()> {
    if !state.is_terminal() {
        return Err(Error::Conflict(format!(
            "run {id} is {state}; only a terminal run can be retried"
        )));
    }
    if matches!(state, RunState::Skipped | RunState::Missed) {
        return Err(Error::Conflict(format!(
            "run {id} was {state} and has no tasks to retry"
        )));
    }
    Ok(())
}

/// Whether a run may be retried given whether its workflow incarnation still exists: a run
/// of a deleted workflow stays as it ended.
///
/// # Errors
/// [`Error::Conflict`] when the workflow was deleted.
pub fn check_not_deleted(id: &str, workflow_exists: bool) -> Result<()> {
    if workflow_exists {
        Ok(())
    } else {
        Err(Error::Conflict(format!(
            "run {id} belongs to a workflow that was deleted; it cannot run again"
        )))
    }
}

/// What a retry of run `id` does about the workflow's other unfinished runs, under the
/// concurrency policy of the run's version (docs/workflows.md, "Policies on runs"): `allow` nothing; `skip`
/// refuses the retry while another run is unfinished; `replace` has them cancelled (the
/// runs returned).
///
/// # Errors
/// [`Error::Conflict`] under `skip` while another run is unfinished.
pub fn retry_policy(
    id: &str,
    policy: ConcurrencyPolicy,
    others_unfinished: Vec<String>,
) -> Result<Vec<String>> {
    match policy {
        _ if others_unfinished.is_empty() => Ok(Vec::new()),
        ConcurrencyPolicy::Allow => Ok(Vec::new()),
        ConcurrencyPolicy::Skip => Err(Error::Conflict(format!(
            "run {id} cannot run again while run {} of its workflow is unfinished (concurrency_policy: skip)",
            others_unfinished[0]
        ))),
        ConcurrencyPolicy::Replace => Ok(others_unfinished),
    }
}

/// The tasks a retry of run `id` resets, as [`retry_plan`] picks them, each with the
/// definition it gets back (its target as written, rendered again when it is released) and
/// the attempts it is allowed beyond those it had.
///
/// # Errors
/// Those of [`retry_plan`]; [`Error::Conflict`] when nothing would be reset.
pub fn retry_resets(
    id: &str,
    spec: &WorkflowSpec,
    dag: &Dag,
    facts: &[TaskFact],
    names: &[String],
) -> Result<Vec<(String, u32, RunSpec)>> {
    let states: Vec<ExecutionState> = facts.iter().map(|f| f.state).collect();
    let reset = retry_plan(spec, dag, &states, names)?;
    if reset.is_empty() {
        return Err(Error::Conflict(format!(
            "run {id} has no failed task to retry; name the tasks to run again"
        )));
    }
    Ok(reset
        .into_iter()
        .map(|i| {
            let run = task_run_spec(spec, i, spec.tasks[i].target.clone());
            (facts[i].execution_id.clone(), run.retry.max_attempts, run)
        })
        .collect())
}

/// How a new run is stored: its tasks, its state and its timeout instant (UTC ms).
#[derive(Debug, Clone)]
pub struct RunCreation {
    /// Its task executions (none for a run recorded `skipped` or `missed`).
    pub tasks: Vec<NewTask>,
    /// `scheduled` before its fire time, `running` after, or the terminal state it is
    /// recorded in (or reaches at once, every task ended at creation).
    pub state: RunState,
    /// When its `run_timeout` passes, while it is unfinished.
    pub timeout_at: Option<i64>,
}

/// How `run` is created at `now` (UTC ms): recorded as `recorded_as` (a policy's `skipped`
/// or `missed`, no tasks), or with its tasks as [`plan_run`] decides.
pub fn run_creation(
    spec: &WorkflowSpec,
    dag: &Dag,
    run: &NewRun,
    recorded_as: Option<RunState>,
    now: i64,
) -> RunCreation {
    let (tasks, ended) = match recorded_as {
        Some(state) => (Vec::new(), Some(state)),
        None => plan_run(spec, dag, run),
    };
    let fire_at = run.fire_at.as_millisecond();
    let state = match ended {
        Some(s) => s,
        None if fire_at > now => RunState::Scheduled,
        None => RunState::Running,
    };
    let timeout_at = spec
        .run_timeout
        .filter(|_| !state.is_terminal())
        .map(|t| fire_at.max(now) + t.as_millis_i64());
    RunCreation {
        tasks,
        state,
        timeout_at,
    }
}

/// Workflow versions by (uid, version), parsed once per process: a version never changes once
/// written, so a release reads its spec and graph from here instead of the database after the
/// first time.
#[derive(Debug, Default)]
pub struct SpecCache {
    versions: Mutex<HashMap<(String, i64), Arc<ParsedVersion>>>,
}

/// One workflow version, parsed: its spec and its task graph.
#[derive(Debug)]
pub struct ParsedVersion {
    /// The version's spec.
    pub spec: WorkflowSpec,
    /// Its task graph.
    pub dag: Dag,
}

/// The most versions a [`SpecCache`] holds; past it the cache is emptied and refilled.
pub const SPEC_CACHE_MAX: usize = 4096;

impl SpecCache {
    /// The parsed version, if cached.
    pub fn get(&self, uid: &str, version: i64) -> Option<Arc<ParsedVersion>> {
        self.versions
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&(uid.to_owned(), version))
            .cloned()
    }

    /// Parses a version's stored spec (JSON text) and caches it.
    ///
    /// # Errors
    /// [`Error::Corrupt`] when the text is not a workflow spec.
    pub fn insert(&self, uid: &str, version: i64, spec_json: &str) -> Result<Arc<ParsedVersion>> {
        let spec: WorkflowSpec = serde_json::from_str(spec_json)
            .map_err(|e| Error::Corrupt(format!("workflow {uid} version {version}: {e}")))?;
        let dag = Dag::of(&spec);
        let parsed = Arc::new(ParsedVersion { spec, dag });
        let mut versions = self.versions.lock().unwrap_or_else(|p| p.into_inner());
        if versions.len() >= SPEC_CACHE_MAX {
            versions.clear();
        }
        versions.insert((uid.to_owned(), version), parsed.clone());
        Ok(parsed)
    }
}

/// A run's state as a reader sees it at `now` (UTC ms): a stored `scheduled` whose fire time
/// has passed reads `running`.
pub fn run_state_as_of(stored: RunState, fire_at: i64, now: i64) -> RunState {
    match stored {
        RunState::Scheduled if fire_at <= now => RunState::Running,
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use sundial_core::validate::Context as VContext;
    use sundial_core::workflow::validate::workflow_from_json;

    fn spec(body: Value) -> WorkflowSpec {
        let ctx = VContext {
            namespace: "ns".into(),
            name: Some("wf".into()),
            ..Default::default()
        };
        workflow_from_json(&body, &ctx).expect("valid")
    }

    fn new_run(params: Value) -> NewRun {
        NewRun {
            id: "run-1".into(),
            namespace: "ns".into(),
            workflow: "wf".into(),
            workflow_uid: "uid".into(),
            workflow_version: 1,
            shard: 0,
            trigger: Trigger::Manual,
            scheduled_at: "2027-01-01T00:00:00Z".parse().expect("instant"),
            fire_at: "2027-01-01T00:00:00Z".parse().expect("instant"),
            params: params.as_object().cloned().unwrap_or_default(),
            recorded_as: None,
        }
    }

    #[test]
    fn only_the_description_and_labels_leave_runs_alone() {
        let old = spec(
            json!({"tasks": [{"name": "a", "target": {"type": "http", "url": "http://h/a"}}]}),
        );
        let mut words = old.clone();
        words.description = "nightly".into();
        words.labels.insert("team".into(), "etl".into());
        assert!(!affects_runs(&old, &words));
        let mut paused = old.clone();
        paused.paused = true;
        assert!(affects_runs(&old, &paused));
        let mut params = old.clone();
        params.params.insert("region".into(), json!("eu"));
        assert!(affects_runs(&old, &params));
    }

    #[test]
    fn a_new_run_queues_its_roots_rendered_and_leaves_the_rest_pending() {
        let s = spec(json!({"tasks": [
            {"name": "a", "output": "json", "target": {"type": "http", "url": "http://h/{{ run.params.p }}"}},
            {"name": "b", "depends_on": ["a"], "target": {"type": "http", "url": "http://h/{{ tasks.a.output.x }}"}}
        ]}));
        let (tasks, state) = plan_run(&s, &Dag::of(&s), &new_run(json!({"p": "q r"})));
        assert_eq!(state, None);
        assert_eq!(tasks[0].state, ExecutionState::Scheduled);
        assert!(tasks[0].run.output);
        let sundial_core::job::TargetSpec::Http(h) = &tasks[0].run.target else {
            panic!("http")
        };
        assert_eq!(h.url, "http://h/q%20r");
        assert_eq!(tasks[1].state, ExecutionState::Pending);
    }

    #[test]
    fn a_root_that_does_not_render_fails_and_decides_its_downstream() {
        let s = spec(json!({"tasks": [
            {"name": "a", "target": {"type": "http", "url": "http://h/{{ run.params.missing }}"}},
            {"name": "b", "depends_on": ["a"], "target": {"type": "http", "url": "http://h/b"}},
            {"name": "alert", "depends_on": ["a"], "trigger_rule": "one_failed",
             "target": {"type": "http", "url": "http://h/alert"}}
        ]}));
        let (tasks, state) = plan_run(&s, &Dag::of(&s), &new_run(json!({})));
        assert_eq!(tasks[0].state, ExecutionState::Failed);
        assert!(
            tasks[0]
                .error
                .as_deref()
                .unwrap()
                .contains("run.params.missing is missing"),
            "{:?}",
            tasks[0].error
        );
        assert_eq!(tasks[1].state, ExecutionState::UpstreamFailed);
        assert_eq!(tasks[2].state, ExecutionState::Scheduled);
        assert_eq!(state, None);
    }
}
