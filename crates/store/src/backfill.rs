//! Backfills as the store keeps them (docs/time.md, "Backfill").
//!
//! A backfill row holds its range, its rate and its progress: the cursor (every slot of the
//! range before it is dealt with), how many slots it created and how many it found done
//! already. The scheduler that holds the shard of the backfilled job or workflow drives it
//! ([`crate::SchedulerStore::backfill_step`]), one step at a time.
//!
//! Invariants every backend keeps:
//! - A step is fenced by the shard lease, as a trigger commit is, and applies only while the
//!   backfill is `running` with the cursor the step was planned from: a stale or repeated step,
//!   or one that lost to a cancel, writes nothing ([`BackfillStepped::Stale`]).
//! - A step's executions (or runs), its cursor and its counts commit in one transaction, so a
//!   crash between steps loses no slot and a resumed backfill creates none twice.
//! - A slot's execution or run carries the id derived from its slot (`sundial_core::ids`), the
//!   one the scheduler would give it: a slot that already has one gets nothing (G1, W1), and
//!   the step counts it in `existing`.
//! - A serial step (a concurrency policy other than `allow`) creates nothing while the
//!   backfill's previous execution or run is unfinished, nor, for a workflow, while another of
//!   its runs is unfinished and past its fire time ([`BackfillStepped::Waiting`]).

use jiff::Timestamp;
use serde::Serialize;

use crate::{NewExecution, NewRun, ShardLease};

/// What a backfill fills: the slots of a job or of a workflow.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum BackfillOf {
    /// A job: each slot gets an execution.
    Job,
    /// A workflow: each slot gets a run.
    Workflow,
}

impl BackfillOf {
    /// The name stored and shown: `job` or `workflow`.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Job => "job",
            Self::Workflow => "workflow",
        }
    }

    /// Parses [`BackfillOf::as_str`]'s names.
    ///
    /// # Errors
    /// [`crate::Error::Corrupt`] for any other text.
    pub fn parse(s: &str) -> crate::Result<Self> {
        match s {
            "job" => Ok(Self::Job),
            "workflow" => Ok(Self::Workflow),
            other => Err(crate::Error::Corrupt(format!("backfill of '{other}'"))),
        }
    }
}

/// Where a backfill stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum BackfillState {
    /// Slots are still being created.
    Running,
    /// Every slot of the range was dealt with.
    Done,
    /// Stopped by a cancel, or because the job or workflow was deleted.
    Cancelled,
}

impl BackfillState {
    /// The snake_case name stored and shown.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Running => "running",
            Self::Done => "done",
            Self::Cancelled => "cancelled",
        }
    }

    /// Parses [`BackfillState::as_str`]'s names.
    ///
    /// # Errors
    /// [`crate::Error::Corrupt`] for any other text.
    pub fn parse(s: &str) -> crate::Result<Self> {
        match s {
            "running" => Ok(Self::Running),
            "done" => Ok(Self::Done),
            "cancelled" => Ok(Self::Cancelled),
            other => Err(crate::Error::Corrupt(format!("backfill state '{other}'"))),
        }
    }
}

/// A backfill as stored. Instants are UTC at millisecond resolution.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BackfillRecord {
    /// UUIDv7 text.
    pub id: String,
    /// Namespace.
    pub namespace: String,
    /// A job's or a workflow's.
    pub of: BackfillOf,
    /// The job's or workflow's name.
    pub name: String,
    /// The incarnation it fills (a job deleted and created again is another).
    pub uid: String,
    /// The shard of the job or workflow (whose lease holder drives the backfill).
    pub shard: u16,
    /// First instant of the range (inclusive).
    pub from: Timestamp,
    /// End of the range (exclusive).
    pub to: Timestamp,
    /// Slots created per second at most.
    pub max_per_second: u32,
    /// Where it stands.
    pub state: BackfillState,
    /// The slots of the range when it was created.
    pub slots: u64,
    /// Executions (or runs) it created.
    pub created: u64,
    /// Slots it found with an execution (or run) already, and left alone.
    pub existing: u64,
    /// Every slot before this instant is dealt with.
    pub cursor: Timestamp,
    /// The last execution (or run) it created.
    pub last_id: Option<String>,
    /// Why it was cancelled, when not by a request (`job deleted`).
    pub reason: Option<String>,
    /// When it was created (the store's clock).
    pub created_at: Timestamp,
    /// When it last changed (the store's clock).
    pub updated_at: Timestamp,
    /// When it ended (`done` or `cancelled`).
    pub finished_at: Option<Timestamp>,
}

impl BackfillRecord {
    /// Slots not reached yet: `slots − created − existing`, 0 once it ended. An estimate while
    /// it runs if the schedule changed since it was created (it walks the current schedule).
    pub fn remaining(&self) -> u64 {
        if self.state == BackfillState::Running {
            self.slots.saturating_sub(self.created + self.existing)
        } else {
            0
        }
    }
}

/// A backfill to create (its counts start at 0, its cursor at `from`).
#[derive(Debug, Clone)]
pub struct NewBackfill {
    /// UUIDv7 text.
    pub id: String,
    /// Namespace.
    pub namespace: String,
    /// A job's or a workflow's.
    pub of: BackfillOf,
    /// The job's or workflow's name.
    pub name: String,
    /// Its incarnation.
    pub uid: String,
    /// Its shard.
    pub shard: u16,
    /// First instant (inclusive).
    pub from: Timestamp,
    /// End (exclusive).
    pub to: Timestamp,
    /// Slots per second at most.
    pub max_per_second: u32,
    /// The slots of the range.
    pub slots: u64,
}

/// One step of a backfill, planned by its driver ([`sundial_core::backfill::choose`]).
#[derive(Debug, Clone)]
pub struct BackfillStep {
    /// The scheduler node driving it.
    pub node: String,
    /// The shard leases the step relies on, as read.
    pub leases: Vec<ShardLease>,
    /// The backfill.
    pub id: String,
    /// Its shard.
    pub shard: u16,
    /// The cursor the step was planned from (the step applies only while it is current).
    pub expected_cursor: Timestamp,
    /// The new cursor.
    pub cursor: Timestamp,
    /// For a job: the executions of the chosen slots (`trigger: backfill`).
    pub executions: Vec<NewExecution>,
    /// For a workflow: the runs of the chosen slots (`trigger: backfill`).
    pub runs: Vec<NewRun>,
    /// Slots the step passed that had an execution or run already.
    pub existing: u64,
    /// The range is finished once this step applies.
    pub done: bool,
    /// Create nothing while the previous execution or run is unfinished (see the module
    /// invariants).
    pub serial: bool,
}

/// What a [`BackfillStep`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BackfillStepped {
    /// Applied: this many executions or runs were created (slots found taken meanwhile are
    /// counted as `existing`).
    Applied(u32),
    /// A serial step found the previous execution or run unfinished; nothing was written.
    Waiting,
    /// The backfill is no longer `running` with the cursor planned from; nothing was written.
    Stale,
}
