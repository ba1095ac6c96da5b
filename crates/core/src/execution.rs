//! Execution states, triggers and attempt outcomes (ARCHITECTURE.md, "Execution states";
//! docs/failure-classes.md).
//!
//! ```text
//!  scheduled ──(fire_at passes)──▶ queued ──claim──▶ running ──▶ succeeded
//!      │                             ▲                  │ ├──▶ failed     (permanent error)
//!      │                             │                  │ ├──▶ dead       (attempts exhausted)
//!      │                             └──── retry_wait ◀─┘ └──▶ cancelled
//!      ├──▶ cancelled   (job updated, paused or deleted before it started; or by hand)
//!      ├──▶ skipped     (concurrency policy)
//!      └──▶ missed      (misfire policy)
//!  pending ──(upstream met)──▶ queued      (a workflow task, docs/workflows.md)
//!     └──▶ upstream_failed | skipped | cancelled   (its trigger rule can no longer be met)
//!  dead | failed ──re-drive──▶ queued   (the only way out of a terminal state)
//! ```
//! `scheduled` and `queued` are one stored state: an execution created ahead of its fire time
//! reads as `scheduled` until `fire_at` passes, then as `queued` ([`ExecutionState::as_of`]).

use std::fmt;
use std::str::FromStr;

use jiff::Timestamp;
use serde::{Deserialize, Serialize};

/// The state of an execution.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum ExecutionState {
    /// Created ahead of its fire time.
    Scheduled,
    /// A workflow task waiting on its upstream tasks (docs/workflows.md); made `queued` by
    /// the completion that meets its trigger rule, in that completion's transaction.
    Pending,
    /// Due, waiting for a worker.
    Queued,
    /// An attempt holds a lease on it.
    Running,
    /// Waiting for its next attempt after a transient failure.
    RetryWait,
    /// Terminal: an attempt succeeded.
    Succeeded,
    /// Terminal: a permanent failure.
    Failed,
    /// Terminal: attempts exhausted (dead letter).
    Dead,
    /// Terminal: cancelled by hand, or by an update, pause or delete of its job.
    Cancelled,
    /// Terminal: not run because of the concurrency policy.
    Skipped,
    /// Terminal: not run because of the misfire policy.
    Missed,
    /// Terminal: a workflow task whose upstream failed.
    UpstreamFailed,
}

impl ExecutionState {
    /// Every state, the ones that are not terminal first.
    pub const ALL: [ExecutionState; 12] = [
        Self::Scheduled,
        Self::Pending,
        Self::Queued,
        Self::Running,
        Self::RetryWait,
        Self::Succeeded,
        Self::Failed,
        Self::Dead,
        Self::Cancelled,
        Self::Skipped,
        Self::Missed,
        Self::UpstreamFailed,
    ];

    /// The snake_case name used in JSON and in the store.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Scheduled => "scheduled",
            Self::Pending => "pending",
            Self::Queued => "queued",
            Self::Running => "running",
            Self::RetryWait => "retry_wait",
            Self::Succeeded => "succeeded",
            Self::Failed => "failed",
            Self::Dead => "dead",
            Self::Cancelled => "cancelled",
            Self::Skipped => "skipped",
            Self::Missed => "missed",
            Self::UpstreamFailed => "upstream_failed",
        }
    }

    /// True for the states that never change (but for a re-drive of `dead` and `failed`).
    pub const fn is_terminal(self) -> bool {
        !matches!(
            self,
            Self::Scheduled | Self::Pending | Self::Queued | Self::Running | Self::RetryWait
        )
    }

    /// True when a re-drive may move this state back to `queued`.
    pub const fn is_redrivable(self) -> bool {
        matches!(self, Self::Dead | Self::Failed)
    }

    /// The state as a reader sees it at `now`: a stored `scheduled` whose fire time has passed
    /// reads as `queued`.
    pub fn as_of(self, fire_at: Timestamp, now: Timestamp) -> Self {
        match self {
            Self::Scheduled if fire_at <= now => Self::Queued,
            other => other,
        }
    }
}

impl fmt::Display for ExecutionState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for ExecutionState {
    type Err = String;

    /// Parses the snake_case name.
    ///
    /// # Errors
    /// A message listing the valid names.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::ALL
            .into_iter()
            .find(|st| st.as_str() == s)
            .ok_or_else(|| {
                let names: Vec<_> = Self::ALL.iter().map(|s| s.as_str()).collect();
                format!("unknown state '{s}'; expected one of {}", names.join(", "))
            })
    }
}

/// Why an execution was created.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum Trigger {
    /// A slot of the schedule, on time.
    Schedule,
    /// `POST .../trigger`.
    Manual,
    /// The slot that runs for a misfire episode.
    Misfire,
    /// A workflow task whose upstream tasks succeeded.
    Workflow,
    /// A past slot a backfill created (docs/time.md, "Backfill").
    Backfill,
}

impl Trigger {
    /// The snake_case name used in JSON and in the store.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Schedule => "schedule",
            Self::Manual => "manual",
            Self::Misfire => "misfire",
            Self::Workflow => "workflow",
            Self::Backfill => "backfill",
        }
    }
}

impl FromStr for Trigger {
    type Err = String;

    /// Parses the snake_case name.
    ///
    /// # Errors
    /// A message naming the unknown value.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        [
            Self::Schedule,
            Self::Manual,
            Self::Misfire,
            Self::Workflow,
            Self::Backfill,
        ]
        .into_iter()
        .find(|t| t.as_str() == s)
        .ok_or_else(|| format!("unknown trigger '{s}'"))
    }
}

/// How one attempt ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum AttemptOutcome {
    /// The target reported success.
    Succeeded,
    /// A transient failure (retried while attempts remain).
    TransientFailure,
    /// A permanent failure (never retried).
    PermanentFailure,
    /// The per-attempt timeout elapsed (transient).
    TimedOut,
    /// The worker's lease lapsed: it crashed or lost the database (transient).
    LeaseLapsed,
    /// The execution was cancelled while the attempt ran.
    Cancelled,
}

impl AttemptOutcome {
    /// The snake_case name used in JSON and in the store.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Succeeded => "succeeded",
            Self::TransientFailure => "transient_failure",
            Self::PermanentFailure => "permanent_failure",
            Self::TimedOut => "timed_out",
            Self::LeaseLapsed => "lease_lapsed",
            Self::Cancelled => "cancelled",
        }
    }
}

impl FromStr for AttemptOutcome {
    type Err = String;

    /// Parses the snake_case name.
    ///
    /// # Errors
    /// A message naming the unknown value.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        [
            Self::Succeeded,
            Self::TransientFailure,
            Self::PermanentFailure,
            Self::TimedOut,
            Self::LeaseLapsed,
            Self::Cancelled,
        ]
        .into_iter()
        .find(|o| o.as_str() == s)
        .ok_or_else(|| format!("unknown attempt outcome '{s}'"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn state_names_round_trip() {
        for st in ExecutionState::ALL {
            assert_eq!(st.as_str().parse::<ExecutionState>().unwrap(), st);
            assert_eq!(serde_json::to_value(st).unwrap(), st.as_str());
        }
    }

    #[test]
    fn only_dead_and_failed_are_redrivable_and_both_are_terminal() {
        for st in ExecutionState::ALL {
            if st.is_redrivable() {
                assert!(st.is_terminal());
            }
        }
        assert!(ExecutionState::Dead.is_redrivable());
        assert!(!ExecutionState::Succeeded.is_redrivable());
    }

    #[test]
    fn scheduled_reads_as_queued_once_due() {
        let t: Timestamp = "2026-01-01T00:00:00Z".parse().unwrap();
        let later = t + jiff::SignedDuration::from_secs(1);
        assert_eq!(
            ExecutionState::Scheduled.as_of(later, t),
            ExecutionState::Scheduled
        );
        assert_eq!(
            ExecutionState::Scheduled.as_of(t, t),
            ExecutionState::Queued
        );
    }
}
