//! The inputs and outputs of [`crate::Store`] methods. Instants are UTC at millisecond
//! resolution; durations are [`Dur`].

use jiff::Timestamp;
use serde::{Deserialize, Serialize};
use sundial_core::Dur;
use sundial_core::execution::{AttemptOutcome, ExecutionState, Trigger};
use sundial_core::job::{ConcurrencyPolicy, JobSpec, TargetSpec};
use sundial_core::retry::RetryPolicy;

/// A stored job: the spec plus what the store and scheduler keep about it.
#[derive(Debug, Clone, PartialEq)]
pub struct JobRecord {
    /// The definition as last written.
    pub spec: JobSpec,
    /// Identity of this incarnation of the name (a new one after delete and re-create), so a
    /// re-created job never collides with its predecessor's slots.
    pub uid: String,
    /// `shard_of(namespace, name)`.
    pub shard: u16,
    /// Starts at 1, grows by one with every write by a user.
    pub version: i64,
    /// Creation instant.
    pub created_at: Timestamp,
    /// Last write by a user.
    pub updated_at: Timestamp,
    /// The next slot not yet triggered; `None` when paused or completed.
    pub next_slot_at: Option<Timestamp>,
    /// That slot's fire time (slot + jitter).
    pub next_fire_at: Option<Timestamp>,
    /// The earliest fire time among the job's executions created ahead that have not started
    /// (read-only; ignored on writes).
    pub pending_fire_at: Option<Timestamp>,
    /// The newest execution whose fire time has passed.
    pub last_execution: Option<ExecutionSummary>,
}

impl JobRecord {
    /// When the job fires next: its earliest execution that has not started, or else its next
    /// slot not yet triggered.
    pub fn upcoming_fire_at(&self) -> Option<Timestamp> {
        match (self.pending_fire_at, self.next_fire_at) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// `paused`, `completed` (the schedule yields nothing more) or `active`.
    pub fn state(&self) -> &'static str {
        if self.spec.paused {
            "paused"
        } else if self.next_slot_at.is_none() {
            "completed"
        } else {
            "active"
        }
    }
}

/// The `last_execution` of a job.
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
pub struct ExecutionSummary {
    /// Execution id.
    pub id: String,
    /// Stored state.
    pub state: ExecutionState,
    /// Its slot.
    pub scheduled_at: Timestamp,
}

/// `job_list` parameters.
#[derive(Debug, Clone, Default)]
pub struct JobListQuery {
    /// Namespace.
    pub namespace: String,
    /// Only paused (true) or unpaused (false) jobs.
    pub paused: Option<bool>,
    /// Only jobs with this label key and value.
    pub label: Option<(String, String)>,
    /// Names strictly after this one (the page token).
    pub after_name: Option<String>,
    /// Page size, 1 to 1000.
    pub limit: u32,
}

/// `job_write` parameters.
#[derive(Debug, Clone)]
pub struct JobWrite {
    /// The job as it should be stored; `version` is ignored (the store assigns it).
    pub record: JobRecord,
    /// `None` to create; `Some(v)` to replace version `v`.
    pub expected_version: Option<i64>,
    /// What happens to the job's not-yet-started executions, in the same transaction.
    pub pending: PendingExecutions,
}

/// What a job write does to the job's executions that have not started yet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PendingExecutions {
    /// Leave them as they are (nothing that affects a run changed).
    Keep,
    /// Give them the new definition's [`RunSpec`] and version, so every run that has not
    /// started runs what the job says now.
    Update,
    /// End them (the schedule or time zone changed, or the job was paused): those already
    /// due are `cancelled`; those whose fire time has not come are removed ([`FutureSlots::Drop`]),
    /// so that a slot the job yields again after the change (a resume before a slot written
    /// ahead, a new zone with the same instants) fires (docs/policies.md, "Pause and resume").
    Cancel,
}

/// What ending a job's not-started executions does with those whose fire time is still ahead.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FutureSlots {
    /// Record them `cancelled`, like the due ones (a deleted job: its incarnation ends).
    Cancel,
    /// Remove them: they were written ahead and never became due (a pause, a schedule change).
    Drop,
}

/// `shard_lease_renew` parameters.
#[derive(Debug, Clone)]
pub struct ShardLeaseRequest {
    /// The scheduler node.
    pub node: String,
    /// Lease time to live.
    pub ttl: Dur,
}

/// A shard held by a node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ShardLease {
    /// Shard number, `0..1024`.
    pub shard: u16,
    /// The fencing token of this ownership; grows with every change of owner.
    pub epoch: i64,
    /// When the lease lapses unless renewed.
    pub expires_at: Timestamp,
}

/// `trigger_list_due` parameters.
#[derive(Debug, Clone)]
pub struct TriggerListDue {
    /// Shards to look in.
    pub shards: Vec<u16>,
    /// Jobs whose next fire time is at or before this instant.
    pub horizon: Timestamp,
    /// At most this many jobs.
    pub limit: u32,
}

/// `trigger_next_due` parameters: the scheduler's look beyond its horizon
/// (docs/guarantees.md, "Bursts").
#[derive(Debug, Clone)]
pub struct TriggerNextDue {
    /// Shards to look in.
    pub shards: Vec<u16>,
    /// Jobs whose next fire time is after this instant (UTC, to the millisecond)…
    pub after: Timestamp,
    /// …and at or before this one: a first job due later is not looked at (nor counted).
    pub until: Timestamp,
    /// How far past the earliest of them to count: the count covers next fire times at or
    /// after it and before it plus `span`.
    pub span: Dur,
    /// Count no more than this many.
    pub cap: u32,
}

/// What [`crate::SchedulerStore::trigger_next_due`] found: the earliest next fire time beyond the
/// horizon, and how many jobs come due within the span from it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NextDue {
    /// The earliest next fire time after the look's `after`, at or before its `until` (UTC).
    pub fire_at: Timestamp,
    /// Jobs whose next fire time is at or after `fire_at` and before `fire_at + span`, that
    /// one included, at most the look's `cap`.
    pub jobs: u64,
}

/// `trigger_due_seconds` parameters: the scheduler's sweep of the seconds coming into reach
/// (docs/configuration.md, "lookahead", "Bursts").
#[derive(Debug, Clone)]
pub struct TriggerDueSeconds {
    /// Shards to look in.
    pub shards: Vec<u16>,
    /// Jobs whose next fire time is at or after this instant (UTC, to the millisecond)…
    pub from: Timestamp,
    /// …and before this one.
    pub until: Timestamp,
    /// Read no more than this many jobs, earliest first.
    pub cap: u32,
}

/// A job whose next slot is due within the horizon.
#[derive(Debug, Clone)]
pub struct DueJob {
    /// The definition.
    pub spec: JobSpec,
    /// Incarnation identity.
    pub uid: String,
    /// Shard.
    pub shard: u16,
    /// Version read (the advance is conditional on it).
    pub version: i64,
    /// Next slot read (the advance is conditional on it).
    pub next_slot_at: Timestamp,
}

/// What a trigger commit may hand to the worker beside its scheduler (`crate::handoff`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TriggerHandoff {
    /// The worker's node name, written as the executions' `worker`.
    pub worker: String,
    /// The epoch of the worker lease the handed executions run under: the fencing token the
    /// reaper checks (docs/guarantees.md, "Workers").
    pub epoch: i64,
    /// The most executions the commit may hand out: the room the worker reserved to hold them.
    pub limit: u32,
    /// How far ahead of the commit a handed-out execution's fire time may be: the widest
    /// window the worker claims ahead in (10 s), so that nothing is held longer, or shown
    /// `running` earlier, than a claim ahead would; a longer `lookahead` writes the slots
    /// beyond it to wait for a claim.
    pub within: sundial_core::Dur,
    /// Namespaces the worker rate-limits: their executions are claimed through their token
    /// buckets, never handed out.
    pub rate_limited: Vec<String>,
}

/// One trigger transaction.
#[derive(Debug, Clone)]
pub struct TriggerCommit {
    /// The scheduler node.
    pub node: String,
    /// The shard leases the batch relies on, as read.
    pub leases: Vec<ShardLease>,
    /// Per job: the advance and its executions.
    pub jobs: Vec<JobTrigger>,
    /// The worker beside the scheduler that takes, already claimed, the executions it may
    /// (`crate::handoff`); `None` writes every execution to wait for a claim.
    pub handoff: Option<TriggerHandoff>,
}

/// The trigger of one job.
#[derive(Debug, Clone)]
pub struct JobTrigger {
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
    /// Incarnation read.
    pub uid: String,
    /// Shard.
    pub shard: u16,
    /// Version read.
    pub version: i64,
    /// Next slot read.
    pub expected_next_slot: Timestamp,
    /// The new next slot; `None` completes the job.
    pub next_slot_at: Option<Timestamp>,
    /// Its fire time.
    pub next_fire_at: Option<Timestamp>,
    /// Executions to insert for the slots passed.
    pub executions: Vec<NewExecution>,
}

/// What a trigger commit did.
#[derive(Debug, Clone, Default)]
pub struct TriggerCommitted {
    /// Jobs advanced.
    pub jobs_advanced: u32,
    /// Jobs skipped because they changed since read.
    pub jobs_changed: u32,
    /// The uids of those jobs, whose executions were not inserted (usually none).
    pub changed: Vec<String>,
    /// Executions inserted, the handed-out ones included.
    pub executions_inserted: u32,
    /// The executions handed out to [`TriggerCommit::handoff`]'s worker, claimed under its
    /// lease (`crate::handoff::claimed`), in fire time order; empty without a handoff.
    pub handed: Vec<ClaimedExecution>,
}

impl TriggerCommitted {
    /// What `commit` did to its jobs once the jobs whose uids are in `advanced` advanced (the
    /// others changed since they were read); `executions_inserted` and `handed` are left for
    /// the store to fill.
    pub fn of(commit: &TriggerCommit, advanced: &std::collections::HashSet<String>) -> Self {
        let changed: Vec<String> = commit
            .jobs
            .iter()
            .filter(|j| !advanced.contains(&j.uid))
            .map(|j| j.uid.clone())
            .collect();
        TriggerCommitted {
            jobs_advanced: u32::try_from(advanced.len()).unwrap_or(u32::MAX),
            jobs_changed: u32::try_from(changed.len()).unwrap_or(u32::MAX),
            changed,
            executions_inserted: 0,
            handed: Vec::new(),
        }
    }
}

/// What a worker needs to run an execution, fixed when the execution is created.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunSpec {
    /// The target.
    pub target: TargetSpec,
    /// Retry policy.
    pub retry: RetryPolicy,
    /// Per-attempt timeout.
    pub timeout: Dur,
    /// Attempt lease length; renewed every third of it.
    pub heartbeat_timeout: Dur,
    /// Concurrency policy.
    pub concurrency_policy: ConcurrencyPolicy,
    /// Misfire policy, for an execution created ahead whose fire time passed while nothing
    /// could run it.
    #[serde(default)]
    pub misfire_policy: sundial_core::job::MisfirePolicy,
    /// Lateness beyond which such an execution is a misfire.
    #[serde(default = "default_misfire_threshold")]
    pub misfire_threshold: Dur,
    /// The job's schedule is one-off (`at`): its slot always runs, however late (also every
    /// workflow task: the policies act on its run).
    #[serde(default)]
    pub one_off: bool,
    /// Keep a successful response's body as the execution's output (a workflow task with
    /// `output: json`, docs/workflows.md#outputs-and-templates).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub output: bool,
    /// The secrets the authored target references (`{{ secret.NAME }}`, docs/security.md,
    /// "Secrets"), by name: the only ones the worker renders into it at send time. Names,
    /// never values.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub secrets: Vec<String>,
}

fn default_misfire_threshold() -> Dur {
    Dur::from_secs(60)
}

impl RunSpec {
    /// The run-relevant part of a job spec.
    pub fn of(spec: &JobSpec) -> Self {
        RunSpec {
            target: spec.target.clone(),
            retry: spec.retry.clone(),
            timeout: spec.timeout,
            heartbeat_timeout: spec.heartbeat_timeout,
            concurrency_policy: spec.concurrency_policy,
            misfire_policy: spec.misfire_policy,
            misfire_threshold: spec.misfire_threshold,
            one_off: matches!(
                spec.schedule.kind,
                sundial_core::job::ScheduleKind::At { .. }
            ),
            output: false,
            secrets: sundial_core::secrets::target_references(&spec.target)
                .into_keys()
                .collect(),
        }
    }
}

/// An execution to insert.
#[derive(Debug, Clone)]
pub struct NewExecution {
    /// UUID text, its leading 48 bits its instant in Unix ms: for a slot, derived from (job
    /// incarnation, slot) by `sundial_core::ids::slot_execution_id`; for a manual run, a
    /// UUIDv7.
    pub id: String,
    /// Namespace.
    pub namespace: String,
    /// Job name.
    pub job: String,
    /// Job incarnation.
    pub job_uid: String,
    /// Job version it was created from.
    pub job_version: i64,
    /// Shard of the job.
    pub shard: u16,
    /// Why.
    pub trigger: Trigger,
    /// Its slot (for a manual trigger, the instant of the request).
    pub scheduled_at: Timestamp,
    /// When it becomes due.
    pub fire_at: Timestamp,
    /// `scheduled` or `queued` to run; `skipped`/`missed` as a record only.
    pub state: ExecutionState,
    /// What to run.
    pub run: RunSpec,
}

impl NewExecution {
    /// A manual run of `job` (`POST .../jobs/{name}/trigger`, README.md "The API"): queued at
    /// once, outside the schedule, its slot and fire time `now` (UTC), its id a UUIDv7.
    pub fn manual(job: &JobRecord, now: Timestamp) -> NewExecution {
        NewExecution {
            id: uuid::Uuid::now_v7().to_string(),
            namespace: job.spec.namespace.clone(),
            job: job.spec.name.clone(),
            job_uid: job.uid.clone(),
            job_version: job.version,
            shard: job.shard,
            trigger: Trigger::Manual,
            scheduled_at: now,
            fire_at: now,
            state: ExecutionState::Queued,
            run: RunSpec::of(&job.spec),
        }
    }
}

/// `execution_claim` parameters.
#[derive(Debug, Clone, Default)]
pub struct ExecutionClaim {
    /// The worker node.
    pub worker: String,
    /// At most this many.
    pub limit: u32,
    /// Per-namespace dispatch limits, in executions per second, enforced across every worker
    /// of the store (a token bucket per namespace holding at most one second's worth).
    pub rate_limits: std::collections::BTreeMap<String, f64>,
    /// Claim ahead: also hand out executions whose fire time is up to this many milliseconds
    /// after the store's clock, for the worker to hold until it (0: only due ones). Only
    /// executions whose claim decides nothing that can change before the fire time are
    /// taken ahead: never started, `trigger` `schedule` or `manual`, due at their fire time,
    /// a job whose `concurrency_policy` is `allow`, a namespace without a rate limit
    /// (docs/guarantees.md, "Claim ahead").
    pub ahead_ms: u32,
    /// The epoch of the worker's liveness lease ([`WorkerLease`]) the attempts are claimed
    /// under, or `None` for a claim outside any worker lease (each attempt then has a lease of
    /// its own of `heartbeat_timeout` from its start, as it is renewed). With an epoch, each
    /// attempt records it and has no lease of its own until its first heartbeat: it lapses
    /// when the worker's lease does (docs/guarantees.md, "Workers").
    pub epoch: Option<i64>,
    /// Read the executions due within the last `claim_order::ON_TIME_WINDOW_MS` before older
    /// ones (keeping the backlog's share), instead of the oldest due first: what a worker asks
    /// for while its backlog drains (docs/guarantees.md, "Claim order under a backlog";
    /// [`crate::claim_order`]).
    pub on_time_first: bool,
}

/// A worker process's liveness lease (docs/guarantees.md, "Workers"): one row per lease in the store, renewed by
/// one write however many attempts the worker holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WorkerLease {
    /// The lease's epoch: grows with every lease taken in the store, so a worker that lost its
    /// lease and takes a new one holds a higher epoch than any attempt it ran before.
    pub epoch: i64,
    /// When it lapses unless renewed, by the store's clock (UTC).
    pub expires_at: Timestamp,
}

/// An execution handed to a worker (or found with a lapsed lease).
#[derive(Debug, Clone)]
pub struct ClaimedExecution {
    /// Execution id.
    pub id: String,
    /// Namespace.
    pub namespace: String,
    /// Job name.
    pub job: String,
    /// Why the execution exists (`schedule`, `manual`, `misfire`, ...): a `schedule` slot's
    /// first attempt that may start too late is judged by its store before it starts
    /// ([`ClaimedExecution::may_be_late`]).
    pub trigger: Trigger,
    /// The attempt number this claim holds: the fencing token.
    pub attempt: u32,
    /// Attempts allowed.
    pub max_attempts: u32,
    /// Slot.
    pub scheduled_at: Timestamp,
    /// Fire time.
    pub fire_at: Timestamp,
    /// When the attempt starts, by the store's clock: the claim's time, or the fire time of an
    /// execution claimed ahead (the worker holds it until then).
    pub started_at: Timestamp,
    /// The store's clock when the claim was made (UTC): `started_at - claimed_at` is how long
    /// the worker holds an execution claimed ahead, on its own clock, from when the claim
    /// returned (so never early, whatever the skew between the clocks).
    pub claimed_at: Timestamp,
    /// The attempt's own lease expiry (UTC), or `None` while it has none: an attempt claimed
    /// under a worker lease has one only once it has been renewed, after running a third of its
    /// `heartbeat_timeout`; until then its worker's lease is its lease.
    pub lease_expires_at: Option<Timestamp>,
    /// The epoch of the worker lease the attempt runs under, if any.
    pub worker_epoch: Option<i64>,
    /// What to run.
    pub run: RunSpec,
}

impl ClaimedExecution {
    /// Whether this attempt, which waited `waited` past the moment it was due to start (its
    /// hold's end and the wait for a delivery slot, the difference of two readings of the
    /// worker's clock), may have passed its job's
    /// `misfire_threshold`, so that its store must judge it before it starts
    /// ([`WorkerStore::attempt_judge_late`](crate::WorkerStore::attempt_judge_late),
    /// docs/policies.md, "Late in the worker"): a first attempt of a scheduled slot of a
    /// recurring job, not under `run_all`, whose lateness when it was due to start
    /// (`started_at - fire_at`, both by the store's clock) plus the wait is past the threshold.
    /// The store decides by its own clock; no clock of the worker's is compared with a store
    /// instant.
    pub fn may_be_late(&self, waited: jiff::SignedDuration) -> bool {
        crate::steps::late::judged(self.trigger, self.attempt, &self.run)
            && self.run.misfire_policy != sundial_core::job::MisfirePolicy::RunAll
            && self.started_at.duration_since(self.fire_at) + waited
                > self.run.misfire_threshold.as_signed()
    }
}

/// The store's judgement of a held first attempt that got its delivery slot late
/// ([`WorkerStore::attempt_judge_late`](crate::WorkerStore::attempt_judge_late)).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LateVerdict {
    /// Start it: on time by the store's clock, or its misfire policy runs it (then it is the
    /// episode's run, `trigger: misfire`).
    Start,
    /// Its misfire policy does not run it: recorded `missed`; drop it, write nothing more.
    Missed,
    /// Not this attempt's any more (cancelled, its lease lapsed or taken over): drop it.
    Stale,
}

/// Names one attempt of one execution: the fencing key of heartbeats and completions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AttemptRef {
    /// Execution id.
    pub id: String,
    /// Attempt number.
    pub attempt: u32,
}

/// Where an execution goes after an attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NextStep {
    /// Terminal `succeeded`.
    Succeeded,
    /// Terminal `failed` (permanent error).
    Failed,
    /// Terminal `dead` (attempts exhausted).
    Dead,
    /// `retry_wait`, due again this long after the store's now when the completion is
    /// written: the delay is counted on the store's clock, as every due time is
    /// (docs/guarantees.md, G5), so neither a worker's skewed clock nor the time its
    /// completion waited to be written (the completion writer's group commit) moves it.
    RetryAfter(Dur),
}

impl NextStep {
    /// What became of the attempt, in one word: `succeeded`, `failed`, `dead` or `retrying`
    /// (the `sundial.outcome` of its span).
    pub fn outcome(self) -> &'static str {
        match self {
            NextStep::Succeeded => "succeeded",
            NextStep::Failed => "failed",
            NextStep::Dead => "dead",
            NextStep::RetryAfter(_) => "retrying",
        }
    }

    /// The execution's state after this step, and for `retry_wait` the delay after the
    /// store's now at which it is due again; `None` for a terminal state, which records its
    /// `finished_at` instead.
    pub fn state(self) -> (ExecutionState, Option<Dur>) {
        match self {
            NextStep::Succeeded => (ExecutionState::Succeeded, None),
            NextStep::Failed => (ExecutionState::Failed, None),
            NextStep::Dead => (ExecutionState::Dead, None),
            NextStep::RetryAfter(delay) => (ExecutionState::RetryWait, Some(delay)),
        }
    }
}

/// `attempt_complete` parameters.
#[derive(Debug, Clone)]
pub struct AttemptComplete {
    /// The attempt (fencing token).
    pub attempt: AttemptRef,
    /// How it ended.
    pub outcome: AttemptOutcome,
    /// HTTP status, container exit code, ... when there was one.
    pub status_code: Option<i64>,
    /// Error text, at most a few KiB.
    pub error: Option<String>,
    /// What the target reported beyond success or failure (a container's output tail, a
    /// broker's sequence number), at most a few KiB.
    pub detail: Option<String>,
    /// Where the execution goes.
    pub next: NextStep,
    /// Only complete when the lease has lapsed (the reaper's path).
    pub only_if_lapsed: bool,
    /// A successful attempt's output, JSON text of at most 64 KiB (a workflow task with
    /// `output: json`); `None` otherwise.
    pub output: Option<String>,
}

/// One attempt as recorded.
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
pub struct AttemptRecord {
    /// Number, from 1.
    pub attempt: u32,
    /// Worker node.
    pub worker: String,
    /// Start.
    pub started_at: Timestamp,
    /// End, when ended.
    pub finished_at: Option<Timestamp>,
    /// How it ended; `None` while running.
    pub outcome: Option<AttemptOutcome>,
    /// HTTP status or exit code.
    pub status_code: Option<i64>,
    /// Error text.
    pub error: Option<String>,
    /// What the target reported beyond success or failure.
    pub detail: Option<String>,
    /// `finished_at - started_at` in milliseconds.
    pub duration_ms: Option<i64>,
}

/// One execution as recorded.
#[derive(Debug, Clone, PartialEq)]
pub struct ExecutionRecord {
    /// UUID text, its leading 48 bits its instant in Unix ms: for a slot, derived from (job
    /// incarnation, slot) by `sundial_core::ids::slot_execution_id`; for a manual run, a
    /// UUIDv7.
    pub id: String,
    /// Namespace.
    pub namespace: String,
    /// Job name.
    pub job: String,
    /// Job version it was created from.
    pub job_version: i64,
    /// Why.
    pub trigger: Trigger,
    /// Slot.
    pub scheduled_at: Timestamp,
    /// Fire time.
    pub fire_at: Timestamp,
    /// When it was (last) queued: its fire time, or the instant of a manual trigger or re-drive.
    pub queued_at: Timestamp,
    /// First attempt's start.
    pub started_at: Option<Timestamp>,
    /// When it reached a terminal state.
    pub finished_at: Option<Timestamp>,
    /// Stored state (`scheduled` covers `queued`; see `ExecutionState::as_of`).
    pub state: ExecutionState,
    /// Current or last attempt number (0 before the first).
    pub attempt: u32,
    /// Attempts allowed.
    pub max_attempts: u32,
    /// Next attempt's due time in `retry_wait`.
    pub next_attempt_at: Option<Timestamp>,
    /// Worker of the current or last attempt.
    pub worker: Option<String>,
    /// The workflow run it belongs to, for a workflow task (docs/workflows.md).
    pub run_id: Option<String>,
    /// Its task's name in that run.
    pub task: Option<String>,
    /// Attempts, oldest first (empty in listings).
    pub attempts: Vec<AttemptRecord>,
}

/// `execution_list` parameters.
#[derive(Debug, Clone, Default)]
pub struct ExecutionListQuery {
    /// Namespace.
    pub namespace: String,
    /// Only this job's executions.
    pub job: Option<String>,
    /// Only this state as a reader sees it (`queued` and `scheduled` split at `now`).
    pub state: Option<ExecutionState>,
    /// Page token: executions strictly before this (scheduled_at, id) in the order.
    pub before: Option<(Timestamp, String)>,
    /// Page size, 1 to 1000.
    pub limit: u32,
}

/// The cluster as the store sees it (`GET /v1/cluster`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ClusterStatus {
    /// The store's time.
    pub now: Timestamp,
    /// Nodes seen in the last minute.
    pub nodes: Vec<NodeStatus>,
    /// Executions due and waiting for a worker.
    pub queued: u64,
    /// Executions created ahead of their fire time (or waiting for a retry).
    pub scheduled: u64,
    /// Executions with a running attempt.
    pub running: u64,
    /// Executions due and waiting for a worker, per namespace (namespaces with none are
    /// left out): the queue depth that autoscaling reads.
    pub queued_by_namespace: crate::NamespaceCounts,
    /// Executions in state `dead` (dead letters awaiting re-drive), per namespace
    /// (namespaces with none are left out).
    pub dead_by_namespace: crate::NamespaceCounts,
    /// The node holding each shard's unexpired lease, indexed by shard (0 to 1023); `None`
    /// for a shard no node holds.
    pub shard_owners: Vec<Option<String>>,
}

/// One node (process).
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
pub struct NodeStatus {
    /// Node id.
    pub id: String,
    /// Roles it runs.
    pub roles: Vec<String>,
    /// When its process registered.
    pub started_at: Timestamp,
    /// Its last heartbeat.
    pub heartbeat_at: Timestamp,
    /// True while its heartbeat has not expired.
    pub live: bool,
    /// Shards it holds.
    pub shards: u32,
    /// Its worker liveness lease, when it runs the worker role and holds one (docs/guarantees.md, "Workers").
    pub worker_lease: Option<NodeWorkerLease>,
}

/// A node's worker liveness lease, as `GET /v1/cluster` shows it.
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
pub struct NodeWorkerLease {
    /// The lease's epoch (grows with every lease taken).
    pub epoch: i64,
    /// Its last renewal, by the store's clock (UTC).
    pub renewed_at: Timestamp,
    /// When it lapses unless renewed (UTC).
    pub expires_at: Timestamp,
    /// True while it has not lapsed by the store's clock.
    pub live: bool,
    /// Executions with an attempt running under it: delivering, or held after a claim ahead
    /// until their fire time.
    pub held: u64,
}

/// What one [`HistoryPrune`] looks at: the executions of jobs, or workflow runs (each with its
/// tasks' executions).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HistoryKind {
    /// Executions of jobs (not workflow tasks), with their attempts.
    Executions,
    /// Workflow runs, with their tasks' executions and those executions' attempts.
    Runs,
}

/// A position in the history: the slot (UTC) and id of the last row a [`HistoryPrune`]
/// looked at; the next call goes on after it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HistoryKey {
    /// The row's slot (`scheduled_at`).
    pub scheduled_at: Timestamp,
    /// The row's id.
    pub id: String,
}

/// One call of history retention ([`crate::MaintenanceStore::history_prune`], docs/configuration.md,
/// "history_retention").
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HistoryPrune {
    /// Executions or runs.
    pub kind: HistoryKind,
    /// What finished before this instant (UTC, by the store's clock) is expired: the store's
    /// now minus `history_retention`.
    pub before: Timestamp,
    /// At most this many rows looked at (and so deleted) in one call, in slot order. Ignored
    /// by `dry_run`, which counts them all.
    pub limit: u32,
    /// Go on after this row; `None`: from the oldest.
    pub after: Option<HistoryKey>,
    /// Count what is expired, delete nothing.
    pub dry_run: bool,
}

/// What one [`HistoryPrune`] deleted (or, in a dry run, would delete).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HistoryPruned {
    /// Executions of jobs, or runs, deleted.
    pub deleted: u64,
    /// The executions of those runs' tasks (0 for [`HistoryKind::Executions`]).
    pub task_executions: u64,
    /// Where the next call goes on; `None` once everything up to `before` was looked at (and
    /// always after a dry run).
    pub next: Option<HistoryKey>,
}

/// A secret as listed (docs/security.md, "Secrets"): never its value.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SecretRecord {
    /// Namespace.
    pub namespace: String,
    /// Name, unique in the namespace (a name as for jobs).
    pub name: String,
    /// 1 on creation, incremented by every put.
    pub version: i64,
    /// When it was created (the store's clock, UTC).
    pub created_at: Timestamp,
    /// When its value last changed (the store's clock, UTC).
    pub updated_at: Timestamp,
}

/// A secret's value as stored: sealed with AES-256-GCM by the process that wrote it, opened
/// only by a worker at send time (`sundial_core::secrets`). The store sees bytes only.
#[derive(Clone, PartialEq, Eq)]
pub struct SealedSecret {
    /// The 12-byte nonce the value was sealed with.
    pub nonce: Vec<u8>,
    /// The sealed value with its 16-byte tag.
    pub ciphertext: Vec<u8>,
}

impl std::fmt::Debug for SealedSecret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SealedSecret")
            .field("bytes", &self.ciphertext.len())
            .finish_non_exhaustive()
    }
}

/// A holiday calendar as stored (docs/time.md, "Calendars").
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CalendarRecord {
    /// Namespace.
    pub namespace: String,
    /// Name, unique in the namespace.
    pub name: String,
    /// The definition.
    pub spec: sundial_core::calendar::CalendarSpec,
    /// 1 on creation, incremented by every write that changes the spec.
    pub version: i64,
    /// When it was created (the store's clock, UTC).
    pub created_at: Timestamp,
    /// When it last changed (the store's clock, UTC).
    pub updated_at: Timestamp,
}

#[cfg(test)]
mod tests {
    use super::*;
    use jiff::SignedDuration;
    use sundial_core::job::MisfirePolicy;

    fn held(trigger: Trigger, late_s: i64, policy: MisfirePolicy) -> ClaimedExecution {
        let fire = Timestamp::UNIX_EPOCH;
        let mut run = RunSpec::of(&crate::testkit::job_record("ns", "j").spec);
        run.misfire_policy = policy;
        run.misfire_threshold = Dur::from_secs(60);
        ClaimedExecution {
            id: "e".into(),
            namespace: "ns".into(),
            job: "j".into(),
            trigger,
            attempt: 1,
            max_attempts: 3,
            scheduled_at: fire,
            fire_at: fire,
            started_at: fire + SignedDuration::from_secs(late_s),
            claimed_at: fire,
            lease_expires_at: None,
            worker_epoch: Some(1),
            run,
        }
    }

    #[test]
    fn a_held_attempt_asks_for_judgement_once_its_lateness_and_wait_pass_the_threshold() {
        let s = SignedDuration::from_secs;
        let once = held(Trigger::Schedule, 0, MisfirePolicy::RunOnce);
        assert!(!once.may_be_late(s(60)), "at the threshold");
        assert!(once.may_be_late(s(61)));
        let written_late = held(Trigger::Schedule, 30, MisfirePolicy::Skip);
        assert!(!written_late.may_be_late(s(30)));
        assert!(
            written_late.may_be_late(s(31)),
            "lateness at the start counts"
        );
        assert!(!held(Trigger::Schedule, 0, MisfirePolicy::RunAll).may_be_late(s(600)));
        assert!(!held(Trigger::Manual, 0, MisfirePolicy::Skip).may_be_late(s(600)));
    }
}
