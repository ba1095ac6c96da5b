//! Sundial's domain model, free of I/O and async.
//!
//! - [`job`]: the job resource (docs/policies.md) as a validated [`job::JobSpec`].
//! - [`validate`]: turns untrusted JSON into a `JobSpec`, naming every bad field
//!   (docs/guarantees.md#g7-bad-input).
//! - [`schedule`]: the slots a schedule yields, bounded by `start_at`/`end_at`.
//! - [`execution`]: execution states, triggers and attempt outcomes (ARCHITECTURE.md,
//!   "Execution states"; docs/failure-classes.md).
//! - [`retry`]: backoff between attempts.
//! - [`plan`]: which executions a due job gets, misfire policies included.
//! - [`hash`]: the stable hashes behind shard placement and per-slot jitter.
//! - [`workflow`]: workflows (docs/workflows.md): their spec and validation, the task graph,
//!   the pure release logic and templates.
//!
//! Invariants: nothing here reads the clock, touches the network or the disk; every instant is
//! a UTC [`jiff::Timestamp`] at millisecond resolution, every duration a [`duration::Dur`].

#![warn(missing_docs)]

pub mod allow;
pub mod backfill;
pub mod calendar;
pub mod duration;
pub mod execution;
pub mod field_error;
pub mod hash;
pub mod ids;
pub mod job;
pub mod names;
pub mod plan;
pub mod retry;
pub mod schedule;
pub mod secrets;
pub mod validate;
mod walker;
pub mod workflow;

pub use duration::Dur;
pub use job::JobSpec;

/// Number of logical shards jobs and executions are spread over (ARCHITECTURE.md, "The shape").
pub const SHARD_COUNT: u16 = 1024;

/// Truncates an instant to whole milliseconds (toward the past), the resolution at which
/// Sundial stores instants.
pub fn truncate_ms(t: jiff::Timestamp) -> jiff::Timestamp {
    jiff::Timestamp::from_millisecond(t.as_millisecond()).unwrap_or(t)
}
