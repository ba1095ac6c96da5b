//! The workflow resource (docs/workflows.md): what a user writes, after validation.
//!
//! A [`WorkflowSpec`] is only built by [`super::validate::workflow_from_json`] (untrusted
//! input) or by deserializing what a store wrote (trusted). It keeps what the user wrote — a
//! task's `retry` is its own overrides, not the policy resolved over the workflow's
//! `defaults` — so that a merge patch of `defaults` reaches every task that did not override
//! it; [`TaskSpec::retry_policy`] and friends resolve the effective values.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::duration::Dur;
use crate::job::{ConcurrencyPolicy, MisfirePolicy, ScheduleSpec, TargetSpec};
use crate::retry::RetryPolicy;

/// When a task runs, judged from the states of its direct upstream (docs/workflows.md).
///
/// A task without upstream is released when its run starts, whatever its rule.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum TriggerRule {
    /// Every upstream succeeded; one skipped by its own rule counts as satisfied. The default.
    /// Ends `upstream_failed` as soon as one upstream ends otherwise.
    #[default]
    AllSuccess,
    /// Every upstream is terminal, whatever the outcome. Never ends without running.
    AllDone,
    /// As soon as one upstream ended `failed`, `dead`, `cancelled` or `upstream_failed`.
    /// Ends `skipped` when every upstream ended and none of them that way.
    OneFailed,
    /// As soon as one upstream succeeded. Ends `upstream_failed` when every upstream ended and
    /// none succeeded.
    OneSuccess,
}

/// A validated workflow definition: a DAG of tasks with one optional schedule.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct WorkflowSpec {
    /// Tenant; a name matching [`crate::names::check_name`].
    pub namespace: String,
    /// Workflow name, unique in its namespace among workflows.
    pub name: String,
    /// Free text, at most 4,096 bytes.
    #[serde(default)]
    pub description: String,
    /// Free-form labels, filterable with `?label=k=v`.
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    /// When runs are created; `None`: only by `POST .../trigger`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schedule: Option<ScheduleSpec>,
    /// Run parameters, a JSON object; a manual trigger's `params` are merged over them.
    #[serde(default)]
    pub params: serde_json::Map<String, serde_json::Value>,
    /// What happens when a slot comes due while a run is not terminal. Default `allow`.
    pub concurrency_policy: ConcurrencyPolicy,
    /// What happens to slots that passed while no scheduler could create their runs.
    /// Default `run_once`.
    pub misfire_policy: MisfirePolicy,
    /// A slot later than this when the scheduler reaches it is a misfire. Default `60s`.
    pub misfire_threshold: Dur,
    /// Each slot's fire time is offset by a deterministic value in `[0, jitter)`. Default `0s`.
    pub jitter: Dur,
    /// A run still unfinished this long after its fire time (or its creation, when later; or
    /// its retry) fails, by the store's clock: its unfinished tasks are cancelled, running
    /// attempts stopped. `None` (or `0s` when written): no limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_timeout: Option<Dur>,
    /// A paused workflow creates no runs; runs already started finish.
    #[serde(default)]
    pub paused: bool,
    /// What every task inherits unless it says otherwise.
    #[serde(default, skip_serializing_if = "TaskDefaults::is_empty")]
    pub defaults: TaskDefaults,
    /// The tasks, 1 to [`super::MAX_TASKS`], in the order written; upstream tasks need not
    /// come first.
    pub tasks: Vec<TaskSpec>,
}

/// `defaults`: a task's `retry`, `timeout` and `heartbeat_timeout` when it sets none.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct TaskDefaults {
    /// Overrides of the job retry defaults (docs/policies.md, "retry").
    #[serde(default, skip_serializing_if = "RetryOverrides::is_empty")]
    pub retry: RetryOverrides,
    /// Per-attempt timeout.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout: Option<Dur>,
    /// Attempt lease length.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub heartbeat_timeout: Option<Dur>,
}

impl TaskDefaults {
    /// True when nothing is set (the field is then left out of the JSON).
    pub fn is_empty(&self) -> bool {
        self.retry.is_empty() && self.timeout.is_none() && self.heartbeat_timeout.is_none()
    }
}

/// Some fields of a [`RetryPolicy`], each overriding the layer below it (job defaults, then
/// the workflow's `defaults.retry`, then the task's `retry`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct RetryOverrides {
    /// Attempts in all, 1 to 1,000.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_attempts: Option<u32>,
    /// Delay after the first failed attempt.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub initial_interval: Option<Dur>,
    /// Growth factor per attempt, 1.0 to 100.0.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub multiplier: Option<f64>,
    /// Cap on any delay.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_interval: Option<Dur>,
    /// Full jitter on each delay.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub jitter: Option<bool>,
}

impl RetryOverrides {
    /// True when no field is set.
    pub fn is_empty(&self) -> bool {
        *self == RetryOverrides::default()
    }

    /// `base` with the fields set here replaced.
    pub fn over(&self, base: RetryPolicy) -> RetryPolicy {
        RetryPolicy {
            max_attempts: self.max_attempts.unwrap_or(base.max_attempts),
            initial_interval: self.initial_interval.unwrap_or(base.initial_interval),
            multiplier: self.multiplier.unwrap_or(base.multiplier),
            max_interval: self.max_interval.unwrap_or(base.max_interval),
            jitter: self.jitter.unwrap_or(base.jitter),
        }
    }
}

/// What a task keeps of a successful attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum OutputKind {
    /// The 2xx response body, a JSON value of at most [`super::MAX_OUTPUT_BYTES`]; anything
    /// else fails the attempt for good (HTTP targets only).
    Json,
}

/// One task of a workflow: a target run as an execution of the run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct TaskSpec {
    /// Task name, unique in the workflow; the job-name pattern.
    pub name: String,
    /// Names of the task's direct upstream tasks, each once.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub depends_on: Vec<String>,
    /// When the task runs, judged from its direct upstream. Default `all_success`.
    #[serde(default)]
    pub trigger_rule: TriggerRule,
    /// Keep the response body as the task's output.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output: Option<OutputKind>,
    /// What the task does; its strings may hold templates ([`super::template`]).
    pub target: TargetSpec,
    /// The task's own retry overrides, over the workflow's `defaults.retry`.
    #[serde(default, skip_serializing_if = "RetryOverrides::is_empty")]
    pub retry: RetryOverrides,
    /// The task's own per-attempt timeout.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout: Option<Dur>,
    /// The task's own attempt lease length.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub heartbeat_timeout: Option<Dur>,
}

/// The job default timeout (docs/policies.md): `5m`.
pub const DEFAULT_TIMEOUT: Dur = Dur::from_secs(300);
/// The job default heartbeat timeout (docs/policies.md): `30s`.
pub const DEFAULT_HEARTBEAT_TIMEOUT: Dur = Dur::from_secs(30);

impl TaskSpec {
    /// The task's effective retry policy: its own overrides over the workflow's defaults over
    /// the job defaults (docs/workflows.md).
    pub fn retry_policy(&self, defaults: &TaskDefaults) -> RetryPolicy {
        self.retry.over(defaults.retry.over(RetryPolicy::default()))
    }

    /// The task's effective per-attempt timeout.
    pub fn timeout(&self, defaults: &TaskDefaults) -> Dur {
        self.timeout.or(defaults.timeout).unwrap_or(DEFAULT_TIMEOUT)
    }

    /// The task's effective attempt lease length.
    pub fn heartbeat_timeout(&self, defaults: &TaskDefaults) -> Dur {
        self.heartbeat_timeout
            .or(defaults.heartbeat_timeout)
            .unwrap_or(DEFAULT_HEARTBEAT_TIMEOUT)
    }
}

impl WorkflowSpec {
    /// The task with this name, with its index.
    pub fn task(&self, name: &str) -> Option<(usize, &TaskSpec)> {
        self.tasks.iter().enumerate().find(|(_, t)| t.name == name)
    }
}
