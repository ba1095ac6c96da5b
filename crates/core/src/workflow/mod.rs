//! Workflows: DAGs of tasks on one schedule (docs/workflows.md).
//!
//! - [`spec`]: the workflow resource as a validated [`WorkflowSpec`].
//! - [`validate`]: untrusted JSON to a `WorkflowSpec`, naming every bad field (duplicate task
//!   names, unknown upstream, cycles spelled out, templates that refer to what a task cannot
//!   see, `output` on a target that gives none).
//! - [`dag`]: the task graph by index: upstream, downstream, topological order, cycles.
//! - [`graph`]: the task graph rendered for people, as text or Graphviz `dot`.
//! - [`release`]: the pure release logic — trigger rules, what a completion makes `queued` or
//!   ends, a run's state — that each store applies inside the completing transaction.
//! - [`template`]: `{{ run.* }}` and `{{ tasks.NAME.output.* }}` references in target strings,
//!   parsed when a workflow is written and rendered once when a task becomes `queued`.
//!
//! Invariants: nothing here does I/O or reads the clock; a `WorkflowSpec` built by
//! [`validate::workflow_from_json`] is acyclic, has 1 to [`MAX_TASKS`] tasks with distinct
//! names, and every template in it parses and refers only to the run or to an upstream task
//! (direct or transitive) that keeps an output.

pub mod dag;
pub mod graph;
pub mod release;
pub mod spec;
pub mod template;
pub mod validate;

pub use release::{RunState, TriggerRule};
pub use spec::{TaskSpec, WorkflowSpec};

/// The most tasks one workflow may have (docs/workflows.md).
pub const MAX_TASKS: usize = 500;

/// The largest task output kept: a response body of at most 64 KiB that is one JSON value
/// (docs/workflows.md, "Outputs and templates").
pub const MAX_OUTPUT_BYTES: usize = 64 * 1024;
