//! The store: Sundial's single source of truth and only coordinator (ARCHITECTURE.md, "The shape").
//!
//! [`Store`] has one method per domain step. Scheduler, worker and API hold an
//! `Arc<dyn Store>`; backends (embedded SQLite, shared PostgreSQL) implement it and run the same
//! conformance suite (`testkit`, feature `testkit`).
//!
//! Invariants every backend keeps:
//! - At most one execution per (job incarnation, slot): inserts for a slot that already has an
//!   execution do nothing (docs/guarantees.md#g1-one-trigger-per-slot).
//! - A trigger commit whose shard lease is not held by the caller with the epoch it read
//!   changes nothing and fails with [`Error::StaleFence`] (docs/guarantees.md#g3-fencing).
//! - A heartbeat or completion for an attempt that is not the execution's current running
//!   attempt changes nothing and fails with [`Error::StaleFence`] (docs/guarantees.md#g3-fencing).
//! - Time for every due check and lease comes from the store's own time authority
//!   ([`StoreBase::now`]): the database clock, or the injected clock of an embedded store.
//! - A workflow task's ending releases its downstream in the same transaction, and only an
//!   ending that applied does ([`workflow`]'s invariants, docs/workflows.md).

#![warn(missing_docs)]

pub mod alerts;
pub mod audit;
pub mod backfill;
pub mod bench;
pub mod claim;
pub mod claim_order;
pub mod completion;
pub mod concurrency;
pub mod errors;
mod forward;
pub mod handoff;
pub mod maintenance;
pub mod reads;
pub mod records;
mod row_decoders;
pub mod steps;
/// The store conformance suite every backend runs from its own tests (feature `testkit`,
/// never in the release binary).
#[cfg(any(test, feature = "testkit"))]
pub mod testkit;
pub mod workflow;

use async_trait::async_trait;
use jiff::Timestamp;

pub use alerts::{ALERT_STATES, AlertEvent, AlertSettle, AlertSubject, NamespaceCounts};
pub use backfill::{
    BackfillOf, BackfillRecord, BackfillState, BackfillStep, BackfillStepped, NewBackfill,
};
#[doc(hidden)]
pub use forward::support as __forward;
pub use records::*;
pub use workflow::{
    NewRun, RunListQuery, RunRecord, RunSummary, TaskRecord, WorkflowListQuery, WorkflowRecord,
    WorkflowTrigger, WorkflowWrite,
};

/// A store failure, classified so callers decide without downcasting: the domain answers
/// (`NotFound`, `Conflict`, `StaleVersion`, `StaleFence`, `InUse`) and the database failures by
/// kind, from the driver's SQLSTATE (PostgreSQL) or result code (SQLite), with the driver
/// error kept as the source:
///
/// | kind | PostgreSQL | SQLite | retry? |
/// |---|---|---|---|
/// | [`Error::Contended`] | 23505 unique violation, 40001 serialization failure, 40P01 deadlock, 55P03 lock not available | `SQLITE_BUSY`, `SQLITE_LOCKED`, unique and primary-key constraints | yes ([`Error::is_retryable`]) |
/// | [`Error::Unavailable`] | class 08 (connection), 57P01–57P03 (shutdown), 53300 (too many connections); I/O, TLS, pool time-outs | I/O errors, `SQLITE_FULL`, `SQLITE_CANTOPEN` | yes |
/// | [`Error::CommitUnknown`] | the connection lost while a commit was in flight | — | only what is idempotent ([`Error::outcome_unknown`]) |
/// | [`Error::Defect`] | anything else (a statement Sundial should never send) | anything else | no |
///
/// The messages of database failures never carry SQL or constraint text; the source does,
/// for logs.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The addressed job or execution does not exist.
    #[error("{0} not found")]
    NotFound(String),
    /// A create found the job already there, or a state change is not allowed from the
    /// current state.
    #[error("conflict: {0}")]
    Conflict(String),
    /// A conditional write carried a version that is not the current one.
    #[error("version {expected} is not the current version {actual}")]
    StaleVersion {
        /// The version the caller expected.
        expected: i64,
        /// The version found.
        actual: i64,
    },
    /// A write carried a fencing token (shard epoch or attempt number) that is no longer
    /// current, or a lease that has lapsed.
    #[error("stale fencing token: {0}")]
    StaleFence(String),
    /// The store is held by another process (e.g. a second scheduler on one SQLite file).
    #[error("store is in use: {0}")]
    InUse(String),
    /// The transaction lost to a concurrent one (a unique violation of a racing insert, a
    /// serialization failure, a deadlock, a busy database) and changed nothing; the same call
    /// may succeed when retried.
    #[error("the store was busy with a concurrent change")]
    Contended(#[source] Box<dyn std::error::Error + Send + Sync>),
    /// The database could not be reached or timed out before anything was committed; the
    /// operation may be retried.
    #[error("store unavailable")]
    Unavailable(#[source] Box<dyn std::error::Error + Send + Sync>),
    /// The connection was lost while a commit was in flight: the change may or may not have
    /// been applied. Retry only what is idempotent (fenced completions, conditional writes),
    /// or read before retrying.
    #[error("the store lost the connection during a commit; its outcome is unknown")]
    CommitUnknown(#[source] Box<dyn std::error::Error + Send + Sync>),
    /// The database refused a statement for a reason that is a defect of Sundial (a syntax
    /// error, an unexpected constraint); retrying does not help.
    #[error("the store refused a statement")]
    Defect(#[source] Box<dyn std::error::Error + Send + Sync>),
    /// Stored data could not be decoded.
    #[error("corrupt record: {0}")]
    Corrupt(String),
}

impl Error {
    /// True when retrying the same call later may succeed and nothing of it was written:
    /// [`Error::Contended`] and [`Error::Unavailable`].
    pub fn is_retryable(&self) -> bool {
        matches!(self, Error::Contended(_) | Error::Unavailable(_))
    }

    /// True when the call may or may not have been applied ([`Error::CommitUnknown`]).
    pub fn outcome_unknown(&self) -> bool {
        matches!(self, Error::CommitUnknown(_))
    }

    /// True when an idempotent call — a fenced completion or heartbeat, which changes nothing
    /// when applied twice — may be made again: [`Error::is_retryable`] or
    /// [`Error::outcome_unknown`].
    pub fn is_retryable_when_idempotent(&self) -> bool {
        self.is_retryable() || self.outcome_unknown()
    }

    /// The error a failed commit becomes: a lost connection or I/O failure while the commit
    /// was in flight leaves its outcome unknown; any other kind is kept.
    pub fn at_commit(self) -> Error {
        match self {
            Error::Unavailable(source) => Error::CommitUnknown(source),
            other => other,
        }
    }
}

/// Notifications a store delivers to the roles of one process (see [`StoreBase::signals`]).
#[derive(Debug, Clone)]
pub struct Signals {
    /// Notified when executions may have become due.
    pub due: std::sync::Arc<tokio::sync::Notify>,
    /// Carries the id of each execution cancelled while it may be running, so the worker
    /// running it stops at once rather than at its next heartbeat.
    pub cancelled: tokio::sync::broadcast::Sender<String>,
    /// Notified when another process gave its shard leases up (a graceful stop), so that a
    /// scheduler renews its own at once and takes them (docs/operations.md, "Stopping and
    /// rolling restarts").
    pub shards: std::sync::Arc<tokio::sync::Notify>,
}

impl Signals {
    /// Fresh, unconnected signals.
    pub fn new() -> Self {
        Signals {
            due: std::sync::Arc::new(tokio::sync::Notify::new()),
            cancelled: tokio::sync::broadcast::channel(1024).0,
            shards: std::sync::Arc::new(tokio::sync::Notify::new()),
        }
    }
}

impl Default for Signals {
    fn default() -> Self {
        Signals::new()
    }
}

/// Result alias for store calls.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// The refusal of a completion or heartbeat whose attempt is not the execution's running one
/// or whose lease lapsed ([`Error::StaleFence`]).
fn stale_attempt(attempt: &AttemptRef) -> Error {
    Error::StaleFence(format!(
        "attempt {} of execution {} is not the current running attempt or its lease lapsed",
        attempt.attempt, attempt.id
    ))
}

/// The store traits together, for code that calls store methods on a concrete store
/// (`SqliteStore`, `PgStore`) rather than through a `dyn` role trait: `use
/// sundial_store::prelude::*;`.
pub mod prelude {
    pub use crate::{
        ApiStore, MaintenanceStore, SchedulerStore, Store, StoreBase, StoreShared, WorkerStore,
    };
}

/// The persistence and coordination surface of Sundial: every role's steps, which both stores
/// implement (see the module invariants; each method's `# Contract` states ordering, idempotency
/// and conflict behaviour). A role depends on its own trait ([`SchedulerStore`], [`WorkerStore`],
/// [`ApiStore`], [`MaintenanceStore`]), so its reader sees what it may do; a `dyn Store` is
/// each of them (trait upcasting).
pub trait Store: SchedulerStore + WorkerStore + ApiStore + MaintenanceStore {}

impl<T: SchedulerStore + WorkerStore + ApiStore + MaintenanceStore + ?Sized> Store for T {}

/// What every role of the store reads: its clock and its signals.
#[async_trait]
pub trait StoreBase: Send + Sync + std::fmt::Debug {
    /// The store's time authority, UTC at millisecond resolution.
    async fn now(&self) -> Result<Timestamp>;

    /// The store's notifications to the roles of this process: executions that may have
    /// become due, and executions cancelled while running — from this process or, for a
    /// shared store, any other.
    fn signals(&self) -> Signals;
}

/// Steps more than one role takes: the reads of jobs, executions, workflows, runs, calendars,
/// backfills and the cluster (the API's and the scheduler's), and a backfill's cancel (the
/// API's, and the scheduler's when the backfill's job or workflow is gone).
#[async_trait]
pub trait StoreShared: StoreBase {
    /// Nodes, their roles and shard ownership, and queue depth.
    async fn cluster_status(&self) -> Result<ClusterStatus>;

    /// One job by namespace and name, with its last execution.
    async fn job_get(&self, namespace: &str, name: &str) -> Result<Option<JobRecord>>;

    /// The jobs of a namespace with these names, with their last executions, in no particular
    /// order; names that match no job are left out. The bulk apply reads a whole batch with
    /// it in one round trip.
    ///
    /// # Contract
    /// Reads only; [`Error::Unavailable`] when the store cannot be reached. The default reads
    /// the names one by one with [`StoreShared::job_get`]; both stores answer in one query.
    async fn job_get_many(&self, namespace: &str, names: &[String]) -> Result<Vec<JobRecord>> {
        let mut found = Vec::new();
        for name in names {
            found.extend(self.job_get(namespace, name).await?);
        }
        Ok(found)
    }

    /// A page of jobs of a namespace, ordered by name.
    async fn job_list(&self, query: &JobListQuery) -> Result<Vec<JobRecord>>;

    /// One execution of a namespace with its attempts.
    async fn execution_get(&self, namespace: &str, id: &str) -> Result<Option<ExecutionRecord>>;

    /// A page of executions, newest slot first.
    async fn execution_list(&self, query: &ExecutionListQuery) -> Result<Vec<ExecutionRecord>>;

    /// One workflow by namespace and name, with its last run.
    async fn workflow_get(&self, namespace: &str, name: &str) -> Result<Option<WorkflowRecord>>;

    /// A page of workflows of a namespace, ordered by name.
    async fn workflow_list(&self, query: &WorkflowListQuery) -> Result<Vec<WorkflowRecord>>;

    /// One run of a namespace with its tasks.
    async fn run_get(&self, namespace: &str, id: &str) -> Result<Option<RunRecord>>;

    /// A page of runs (without their tasks), newest slot first.
    async fn run_list(&self, query: &RunListQuery) -> Result<Vec<RunRecord>>;

    /// One calendar, if it exists.
    async fn calendar_get(&self, namespace: &str, name: &str) -> Result<Option<CalendarRecord>>;

    /// The namespace's calendars, by name (namespaces hold few: no paging).
    async fn calendar_list(&self, namespace: &str) -> Result<Vec<CalendarRecord>>;

    /// The jobs and workflows of `namespace` whose schedule names the calendar in
    /// `exclude_calendars`, as `job NAME` / `workflow NAME`, by kind and name.
    ///
    /// # Contract
    /// Reads only; on PostgreSQL through an index of only the jobs that name calendars.
    async fn calendar_users(&self, namespace: &str, name: &str) -> Result<Vec<String>>;

    /// One backfill of a namespace; `None` when the namespace holds no backfill `id`.
    ///
    /// # Contract
    /// Reads only, by primary key.
    async fn backfill_get(&self, namespace: &str, id: &str) -> Result<Option<BackfillRecord>>;

    /// The backfills of one job or workflow (by name, every incarnation), newest first, at
    /// most 100.
    ///
    /// # Contract
    /// Reads only, through the index by (namespace, kind, name, creation).
    async fn backfill_list(
        &self,
        namespace: &str,
        of: BackfillOf,
        name: &str,
    ) -> Result<Vec<BackfillRecord>>;

    /// Of the given execution ids (for [`BackfillOf::Job`]) or run ids (for
    /// [`BackfillOf::Workflow`]), those that exist. The ids are a slot's derived ids
    /// (`sundial_core::ids`), so this says which slots have an execution or run.
    ///
    /// # Contract
    /// Reads only; by primary key.
    async fn backfill_taken(
        &self,
        of: BackfillOf,
        ids: &[String],
    ) -> Result<std::collections::HashSet<String>>;

    /// How many of the job's executions (for [`BackfillOf::Job`]) or the workflow's runs are
    /// unfinished, whatever made them: the backfill driver's back-pressure.
    ///
    /// # Contract
    /// Reads only; through the index of unfinished executions (runs) by incarnation.
    async fn backfill_unfinished(&self, of: BackfillOf, uid: &str) -> Result<u64>;

    /// The namespaces that hold at least one job or workflow, sorted by name.
    ///
    /// # Contract
    /// Reads only; costs a lookup per namespace (a skip scan of the primary keys), not a
    /// scan of the jobs.
    async fn namespace_list(&self) -> Result<Vec<String>>;

    /// Cancels a running backfill: it creates nothing after this commits; what it created
    /// stays. `reason` is kept when the store's driver ends it (the job was deleted).
    ///
    /// # Contract
    /// [`Error::NotFound`]; [`Error::Conflict`] when it is not `running`.
    async fn backfill_cancel(
        &self,
        namespace: &str,
        id: &str,
        reason: Option<&str>,
    ) -> Result<BackfillRecord>;
}

/// The scheduler's steps: shard leases, the due jobs and workflows and their fenced trigger
/// commits, backfill steps (docs/guarantees.md, "G1 Exactly-once triggering").
#[async_trait]
pub trait SchedulerStore: StoreShared {
    /// Renews this node's shard leases and takes the shards due to it.
    ///
    /// # Contract
    /// Returns every shard the node holds after the call, each with its epoch. A shard whose
    /// owner changes gets a new, larger epoch. The embedded store gives one node all shards
    /// and fails with [`Error::InUse`] while another live node holds them.
    async fn shard_lease_renew(&self, request: &ShardLeaseRequest) -> Result<Vec<ShardLease>>;

    /// Releases the node's shard leases (clean shutdown), so another node can take them at once.
    async fn shard_lease_release(&self, node: &str) -> Result<()>;

    /// Active jobs in the given shards whose next fire time is at or before `horizon`, earliest
    /// first, at most `limit`.
    async fn trigger_list_due(&self, query: &TriggerListDue) -> Result<Vec<DueJob>>;

    /// The earliest next fire time after `query.after` and at or before `query.until` among
    /// the active jobs of `query.shards`, with how many of them come due from it for
    /// `query.span` (at most `query.cap`); `None` when no job is due in that range. The
    /// scheduler's look at how large the burst beyond its horizon is
    /// (docs/configuration.md, "lookahead", "Bursts"). It reads only: the first entry after
    /// `after` of the next-fire-time index and, when it is not beyond `until`, one range of it
    /// of at most `cap` entries.
    ///
    /// # Errors
    /// The store's, when the read fails; nothing is written either way.
    async fn trigger_next_due(&self, query: &TriggerNextDue) -> Result<Option<NextDue>>;

    /// How many active jobs of `query.shards` come due in each whole second (UTC, the second's
    /// start, as Unix seconds) of `[query.from, query.until)`, reading at most `query.cap` jobs,
    /// earliest first (so a capped answer covers a prefix of the range: its last second may be
    /// short). Seconds with no job are left out; ascending. The scheduler's sweep of the
    /// seconds coming into its reach, for bursts behind a steady stream of slots
    /// (docs/configuration.md, "lookahead", "Bursts"). It reads only, one range of the
    /// next-fire-time index.
    ///
    /// # Errors
    /// The store's, when the read fails; nothing is written either way.
    async fn trigger_due_seconds(&self, query: &TriggerDueSeconds) -> Result<Vec<(i64, u64)>>;

    /// Commits one trigger batch in one transaction: advances each job's next slot and inserts
    /// its executions.
    ///
    /// # Contract
    /// - Fenced: unless every shard of the batch is leased to `node` with the epoch given,
    ///   nothing is written and [`Error::StaleFence`] is returned.
    /// - Each advance applies only while the job still has the version and next slot it was
    ///   read with; otherwise that job's executions are not inserted (it changed meanwhile).
    /// - Inserting an execution for a slot that already has one does nothing (idempotent).
    async fn trigger_commit(&self, commit: &TriggerCommit) -> Result<TriggerCommitted>;

    /// Workflows of the given shards whose next fire time is at or before `horizon`, earliest
    /// first, at most `limit` (their `last_run` is not read).
    async fn workflow_list_due(&self, query: &TriggerListDue) -> Result<Vec<WorkflowRecord>>;

    /// Commits one workflow's trigger in one transaction: advances its next slot and creates
    /// its runs (each as [`ApiStore::run_create`] would). Returns the runs inserted.
    ///
    /// # Contract
    /// - Fenced: unless the workflow's shard is leased to `node` with the epoch given,
    ///   nothing is written and [`Error::StaleFence`] is returned.
    /// - The advance applies only while the workflow has the version and next slot read;
    ///   otherwise nothing is written and 0 is returned (it changed meanwhile).
    /// - A slot that already has its run gets no second one (W1).
    async fn workflow_trigger(&self, trigger: &WorkflowTrigger) -> Result<u32>;

    /// The `running` backfills of the given shards, oldest first.
    ///
    /// # Contract
    /// Reads only, through a partial index of the running ones (cheap while none runs).
    async fn backfill_running(&self, shards: &[u16]) -> Result<Vec<BackfillRecord>>;

    /// Applies one step of a backfill ([`backfill`]'s invariants): its executions or runs, its
    /// cursor and counts, in one transaction.
    ///
    /// # Contract
    /// - Fenced as [`SchedulerStore::trigger_commit`]: [`Error::StaleFence`] and nothing written unless
    ///   the shard is leased to `node` with the epoch read.
    /// - [`BackfillStepped::Stale`] (nothing written) unless the backfill is `running` with
    ///   `expected_cursor`; [`BackfillStepped::Waiting`] for a serial step whose previous
    ///   execution or run is unfinished.
    /// - A workflow's runs are created as [`ApiStore::run_create`] creates them, with the version
    ///   they name ([`Error::StaleVersion`] when it is no longer current).
    async fn backfill_step(&self, step: &BackfillStep) -> Result<BackfillStepped>;
}

/// The worker's and the reaper's steps: the worker's liveness lease, claims, lease renewals and
/// completions of attempts, the lapsed attempts, and the workflow runs past their timeout
/// (docs/guarantees.md, "Workers").
#[async_trait]
pub trait WorkerStore: StoreBase {
    /// The sealed values of those of `names` that exist in `namespace`, as (name, value), by
    /// name: what a worker opens to render `{{ secret.NAME }}` at send time
    /// (docs/security.md, "Secrets"). A name that does not exist is left out.
    async fn secret_values(
        &self,
        namespace: &str,
        names: &[String],
    ) -> Result<Vec<(String, SealedSecret)>>;

    /// Takes a new worker liveness lease for `worker` (the node id), live until now + `ttl` by
    /// the store's clock (docs/guarantees.md, "Workers").
    ///
    /// # Contract
    /// Every call takes a new lease with an epoch higher than every lease taken before in
    /// this store, whatever the worker; leases of the same worker held by other processes
    /// are left alone (each lapses on its own).
    ///
    /// # Errors
    /// The store's, when the write fails; then no lease was taken.
    async fn worker_lease_acquire(
        &self,
        worker: &str,
        ttl: sundial_core::Dur,
    ) -> Result<WorkerLease>;

    /// Renews the worker lease `epoch` to now + `ttl` by the store's clock, in one statement
    /// whatever the number of attempts held under it.
    ///
    /// # Contract
    /// `Some(new expiry)` while no reaper has taken the lease over
    /// ([`WorkerStore::worker_lease_reap`]), even past its expiry: nothing it held was given to
    /// anyone else. `None`, and no change, once it was: the worker must drop everything it
    /// holds under `epoch` and take a new lease.
    ///
    /// # Errors
    /// The store's, when the write fails; the lease is then as it was.
    async fn worker_lease_renew(
        &self,
        epoch: i64,
        ttl: sundial_core::Dur,
    ) -> Result<Option<Timestamp>>;

    /// Gives the worker lease `epoch` up (a worker stopping): it lapses now, and the next
    /// reaper pass retries whatever is still held under it.
    ///
    /// # Errors
    /// The store's, when the write fails.
    async fn worker_lease_release(&self, epoch: i64) -> Result<()>;

    /// Takes over the worker leases that lapsed by the store's clock (their expiry before
    /// now), at most `limit`: deletes them and, in the same transaction, marks every running
    /// attempt recorded under their epochs (delivering, or held after a claim ahead) lapsed,
    /// so that [`WorkerStore::attempt_list_lapsed`] lists them and the worker's heartbeats and
    /// completions under those epochs are refused (G3). Returns the epochs taken over.
    ///
    /// # Contract
    /// A claim under an epoch waits for, or is refused after, its take-over: no attempt is
    /// recorded under an epoch once it was taken over. Idempotent: a lease is taken over once.
    ///
    /// # Errors
    /// The store's, when the write fails; then nothing was taken over.
    async fn worker_lease_reap(&self, limit: u32) -> Result<Vec<i64>>;

    /// Claims up to `limit` due executions for a worker: each becomes `running` with its
    /// attempt number incremented (the new fencing token) and a lease of its heartbeat timeout.
    ///
    /// # Contract
    /// Due means `scheduled`/`queued`/`retry_wait` with due time ≤ now; oldest due first. No
    /// execution is handed to two claimers. Misfire and concurrency policies apply here, as
    /// [`claim::plan`] decides: under `skip` a due execution of an active job is recorded
    /// `skipped` (a catch-up one waits instead); under `replace` the job's active executions
    /// are cancelled (and signalled) before the new one is handed out. A namespace in
    /// `rate_limits` gets no more executions than its bucket holds: the bucket refills at the
    /// namespace's rate up to one second's worth and lives in the store, so the limit holds
    /// across every worker.
    async fn execution_claim(&self, claim: &ExecutionClaim) -> Result<Vec<ClaimedExecution>>;

    /// The earliest due time among executions waiting for a worker, if any.
    async fn execution_next_due(&self) -> Result<Option<Timestamp>>;

    /// How many executions waiting for a worker come due at or after `from` and before
    /// `until` (their due time, UTC, to the millisecond), counting no more than `cap`: a
    /// worker's look at how large the burst ahead of it is (docs/guarantees.md, "Claim ahead",
    /// "Bursts"). It reads only, one range of the due-time index of at most `cap` entries, and
    /// counts every waiting execution, those a claim ahead would not take too.
    ///
    /// # Errors
    /// The store's, when the read fails; nothing is written either way.
    async fn execution_due_count(&self, from: Timestamp, until: Timestamp, cap: u32)
    -> Result<u64>;

    /// Extends a running attempt's lease to now + its heartbeat timeout.
    ///
    /// # Contract
    /// [`Error::StaleFence`] (and no change) unless the execution is `running` with this
    /// attempt number, its own lease (if it has one) unexpired and its worker lease (if it
    /// runs under one) not taken over. Returns the new lease expiry: an attempt under a worker
    /// lease gets a lease of its own at its first heartbeat.
    async fn attempt_heartbeat(&self, attempt: &AttemptRef) -> Result<Timestamp> {
        let renewed = self
            .attempt_heartbeat_batch(std::slice::from_ref(attempt))
            .await?;
        renewed
            .into_iter()
            .next()
            .flatten()
            .ok_or_else(|| stale_attempt(attempt))
    }

    /// Extends the leases of many running attempts (a worker's heartbeats, batched) to now
    /// + each execution's heartbeat timeout, by the store's clock, in one store call: one
    /// statement on PostgreSQL, one transaction on SQLite.
    ///
    /// # Contract
    /// Per attempt, in order: its new lease expiry (UTC), or `None`, and no change for it,
    /// unless its execution is `running` with this attempt number and a lease that has not
    /// expired ([`WorkerStore::attempt_heartbeat`]'s test, each on its own).
    ///
    /// # Errors
    /// The store's, when the write fails; then no lease was extended.
    async fn attempt_heartbeat_batch(
        &self,
        attempts: &[AttemptRef],
    ) -> Result<Vec<Option<Timestamp>>>;

    /// Records how an attempt ended and moves the execution on.
    ///
    /// # Contract
    /// [`Error::StaleFence`] (and no change) unless the execution is `running` with this
    /// attempt number and a lease that has not expired by the store's clock (a worker's
    /// completion), or, for `only_if_lapsed` (the reaper's), one that has. An attempt under a
    /// worker lease ([`ExecutionClaim::epoch`]) has lapsed once that lease was taken over
    /// ([`WorkerStore::worker_lease_reap`]), or its own lease, once it has one, expired. A workflow task
    /// that ends releases its downstream and, with its run's last task, ends the run, in the
    /// same transaction ([`workflow::release`]); a stale completion releases nothing (W3).
    async fn attempt_complete(&self, completion: &AttemptComplete) -> Result<()> {
        let applied = self
            .attempt_complete_batch(std::slice::from_ref(completion))
            .await?;
        if applied.first().copied().unwrap_or(false) {
            Ok(())
        } else {
            Err(stale_attempt(&completion.attempt))
        }
    }

    /// Records many attempt outcomes (a worker's completions, batched): the job executions'
    /// in one transaction, and on PostgreSQL the workflow tasks' in a second one with their
    /// release.
    ///
    /// # Contract
    /// Each completion is fenced on its own, as [`WorkerStore::attempt_complete`]: the result says,
    /// in order, which applied (`false`: stale, nothing changed). An `Err` means none of the
    /// workflow tasks' applied; the job executions' may have (a retry of the batch then
    /// reports them `false`), so a retry is safe.
    async fn attempt_complete_batch(&self, completions: &[AttemptComplete]) -> Result<Vec<bool>>;

    /// Judges held first attempts that got their delivery slot late by their job's misfire
    /// policy, by the store's clock, in one transaction (`steps::late`, docs/policies.md,
    /// "Late in the worker"): a worker asks before it starts one for which
    /// [`ClaimedExecution::may_be_late`] holds.
    ///
    /// # Contract
    /// Per attempt, in order: [`LateVerdict::Start`] (on time by the store's clock, or run by
    /// its policy as the episode's run, then `trigger: misfire`); [`LateVerdict::Missed`]
    /// (recorded `missed`, never started); [`LateVerdict::Stale`], and no change for it, unless
    /// its execution is `running` with this attempt number, its own lease (if it has one)
    /// unexpired and its worker lease (if it runs under one) not taken over, as a worker's
    /// completion ([`WorkerStore::attempt_complete`]). An attempt that may run keeps its attempt
    /// number (one recorded `missed` ends as never started, attempt number 0). Asked again,
    /// the episode's run starts and one recorded `missed` is stale.
    ///
    /// # Errors
    /// The store's, when the transaction fails; then nothing was written, unless the error is
    /// [`Error::CommitUnknown`] (ask again: an attempt recorded `missed` is then stale, the
    /// episode's run starts).
    async fn attempt_judge_late(&self, attempts: &[AttemptRef]) -> Result<Vec<LateVerdict>>;

    /// Running attempts whose lease has lapsed (their worker is presumed dead), at most `limit`.
    async fn attempt_list_lapsed(&self, limit: u32) -> Result<Vec<ClaimedExecution>>;

    /// Fails up to `limit` runs whose `run_timeout` has passed by the store's clock: their
    /// unfinished tasks are cancelled (running attempts stopped) and the runs end `failed`.
    /// Returns how many ended.
    async fn run_expire(&self, limit: u32) -> Result<u32>;
}

/// The API's writes: jobs, manual executions and cancels, workflows and runs, re-drives,
/// calendars and backfills.
#[async_trait]
pub trait ApiStore: StoreShared {
    /// Creates or replaces a job.
    ///
    /// # Contract
    /// - `expected_version: None` creates; [`Error::Conflict`] if the job exists.
    /// - `expected_version: Some(v)` replaces only while the stored version is `v`, else
    ///   [`Error::StaleVersion`] (or [`Error::NotFound`]); the stored version becomes `v + 1`.
    /// - Per `pending`, the job's executions that have not started (`scheduled` or `queued`
    ///   with no attempt yet) are left, rewritten with the new definition, or `cancelled`, in
    ///   the same transaction.
    async fn job_write(&self, write: &JobWrite) -> Result<JobRecord> {
        let mut written = self.job_write_batch(std::slice::from_ref(write)).await?;
        written
            .pop()
            .ok_or_else(|| Error::Corrupt("a one-job batch wrote nothing".into()))
    }

    /// Writes many jobs in one transaction, each as [`ApiStore::job_write`] would: all or none.
    ///
    /// # Contract
    /// The first write that fails aborts the batch and its error is returned; nothing of the
    /// batch is stored then. Results are in the order of `writes`.
    async fn job_write_batch(&self, writes: &[JobWrite]) -> Result<Vec<JobRecord>>;

    /// Deletes a job and cancels its not-yet-started executions; history is kept.
    ///
    /// # Contract
    /// [`Error::NotFound`] if absent; [`Error::StaleVersion`] if `expected_version` is given and
    /// differs.
    async fn job_delete(
        &self,
        namespace: &str,
        name: &str,
        expected_version: Option<i64>,
    ) -> Result<()>;

    /// Inserts one execution outside the schedule (a manual trigger), due at once.
    async fn execution_insert(&self, execution: &NewExecution) -> Result<ExecutionRecord>;

    /// Cancels a non-terminal execution; a running attempt is recorded `cancelled` and its
    /// worker's next heartbeat or completion is refused. A workflow task's cancel releases
    /// its downstream in the same transaction (as any ending of a task does).
    ///
    /// # Contract
    /// [`Error::NotFound`]; [`Error::Conflict`] for a terminal execution.
    async fn execution_cancel(&self, namespace: &str, id: &str) -> Result<ExecutionRecord>;

    /// Creates or replaces workflows in one transaction: all or none.
    ///
    /// # Contract
    /// - `expected_version: None` creates; [`Error::Conflict`] if the workflow exists.
    /// - `expected_version: Some(v)` replaces only while the stored version is `v`, else
    ///   [`Error::StaleVersion`] (or [`Error::NotFound`]); the stored version becomes `v + 1`
    ///   and the new version is kept beside the old ones (runs keep theirs, W4).
    /// - A replace with `cancel_not_started` cancels the workflow's runs that have not started
    ///   (stored `scheduled`,
    ///   fire time ahead); started runs finish on their version.
    /// - Results are in the order of `writes`; the first failure aborts the batch.
    async fn workflow_write_batch(&self, writes: &[WorkflowWrite]) -> Result<Vec<WorkflowRecord>>;

    /// Deletes a workflow and cancels every run of it that is not terminal (their unfinished
    /// tasks `cancelled`, running attempts stopped); history is kept.
    ///
    /// # Contract
    /// [`Error::NotFound`] if absent; [`Error::StaleVersion`] if `expected_version` is given
    /// and differs.
    async fn workflow_delete(
        &self,
        namespace: &str,
        name: &str,
        expected_version: Option<i64>,
    ) -> Result<()>;

    /// Creates a run with one execution per task of its version, as
    /// [`workflow::plan_run`] decides, applying the workflow's concurrency policy as of now:
    /// under `skip` a run while another is not terminal is recorded `skipped` (no tasks);
    /// under `replace` the unfinished runs are cancelled first.
    ///
    /// # Contract
    /// - [`Error::NotFound`] when the workflow incarnation is gone; [`Error::StaleVersion`]
    ///   when its version is no longer `run.workflow_version`.
    /// - A `schedule` or `misfire` run for a slot that already has one creates nothing and
    ///   returns the existing run (W1).
    /// - Tasks made due are signalled to this process's workers (and, shared, every
    ///   process's).
    async fn run_create(&self, run: &NewRun) -> Result<RunRecord>;

    /// Cancels a run that is not terminal: its pending and queued tasks become `cancelled`,
    /// its running attempts are recorded `cancelled` and their workers told to stop, the run
    /// becomes `cancelled`, and nothing of it starts after this commits (W5).
    ///
    /// # Contract
    /// [`Error::NotFound`]; [`Error::Conflict`] for a terminal run.
    async fn run_cancel(&self, namespace: &str, id: &str) -> Result<RunRecord>;

    /// Re-runs a terminal run from failure ([`workflow::retry_plan`]): the chosen tasks go back
    /// to `pending` (or `queued` when their rule is met), keeping their execution ids and
    /// numbering their attempts on, each allowed its task's `max_attempts` more; the run
    /// becomes `running` again on its own version.
    ///
    /// # Contract
    /// [`Error::NotFound`] (also for a task name the run's version lacks);
    /// [`Error::Conflict`] for a run that is not terminal, one that was `skipped` or
    /// `missed` (it has no tasks), or one whose workflow was deleted; under `skip`, while
    /// another run of the workflow is unfinished (under `replace` those are cancelled).
    async fn run_retry(&self, namespace: &str, id: &str, tasks: &[String]) -> Result<RunRecord>;

    /// Re-drives a `dead` or `failed` execution: the same execution goes back to `queued`,
    /// due now, with `extra_attempts` more attempts allowed, numbered on from the last.
    ///
    /// # Contract
    /// [`Error::NotFound`]; [`Error::Conflict`] for any other state, and for a workflow
    /// task (a run is re-run with [`ApiStore::run_retry`]).
    async fn execution_redrive(
        &self,
        namespace: &str,
        id: &str,
        extra_attempts: u32,
    ) -> Result<ExecutionRecord>;

    /// Creates the calendar `namespace`/`name` or replaces its spec; returns it as stored and
    /// whether it was created. A write of the spec already stored changes nothing (its version
    /// is kept).
    ///
    /// # Contract
    /// One transaction; `version` counts changes from 1.
    async fn calendar_put(
        &self,
        namespace: &str,
        name: &str,
        spec: &sundial_core::calendar::CalendarSpec,
    ) -> Result<(CalendarRecord, bool)>;

    /// Deletes a calendar no job or workflow names.
    ///
    /// # Contract
    /// [`Error::NotFound`] when there is none; [`Error::Conflict`] naming the users (as
    /// [`StoreShared::calendar_users`] gives them) when some job or workflow names it, deleting
    /// nothing. The check and the delete are one transaction.
    async fn calendar_delete(&self, namespace: &str, name: &str) -> Result<()>;

    /// Creates the secret `namespace`/`name` with `sealed` as its value, or replaces its value
    /// (docs/security.md, "Secrets"); returns it as listed and whether it was created.
    ///
    /// # Contract
    /// One statement or transaction; `version` counts puts from 1 (every put moves it on,
    /// sealed values cannot be compared); `updated_at` is the store's clock.
    async fn secret_put(
        &self,
        namespace: &str,
        name: &str,
        sealed: &SealedSecret,
    ) -> Result<(SecretRecord, bool)>;

    /// The namespace's secrets, by name, without their values (namespaces hold few: no
    /// paging).
    async fn secret_list(&self, namespace: &str) -> Result<Vec<SecretRecord>>;

    /// Whether any namespace holds a secret (one read): a server about to make a new secrets
    /// key refuses to while values sealed under another are stored.
    async fn secret_any(&self) -> Result<bool>;

    /// The jobs and workflows of `namespace` whose target (or a task's) references the secret
    /// as `{{ secret.NAME }}`, as `job NAME` / `workflow NAME`, by kind and name
    /// (`sundial_core::secrets::names_in` over each stored spec).
    async fn secret_users(&self, namespace: &str, name: &str) -> Result<Vec<String>>;

    /// Deletes a secret no job or workflow references.
    ///
    /// # Contract
    /// [`Error::NotFound`] when there is none; [`Error::Conflict`] naming the users (as
    /// [`ApiStore::secret_users`] gives them) when some job or workflow references it,
    /// deleting nothing. The check and the delete are one transaction.
    async fn secret_delete(&self, namespace: &str, name: &str) -> Result<()>;

    /// Creates a backfill (docs/time.md, "Backfill"): `running`, its cursor at
    /// `from`, its counts 0. The scheduler holding its shard drives it from then on.
    ///
    /// # Contract
    /// One insert; [`Error::Conflict`] if the id exists.
    async fn backfill_create(&self, backfill: &NewBackfill) -> Result<BackfillRecord>;

    /// A page of a namespace's audit log (docs/security.md, "Audit log"): the entries
    /// matching `query`'s filters, newest first below its cursor, or oldest first above it
    /// (a walk of the chain, [`audit::Verifier`]).
    async fn audit_list(&self, query: &audit::AuditQuery) -> Result<Vec<audit::AuditEntry>>;
}

/// The maintenance services' steps: the store's own services, the node heartbeat, history
/// retention and the alert outbox.
#[async_trait]
pub trait MaintenanceStore: StoreBase {
    /// The maintenance services this store needs run in every process that opens it
    /// ([`maintenance::Runner`]): the PostgreSQL queue vacuum, the SQLite log checkpoint.
    /// None by default.
    fn maintenance(
        &self,
        config: &maintenance::MaintenanceConfig,
    ) -> Vec<std::sync::Arc<dyn maintenance::Service>> {
        let _ = config;
        Vec::new()
    }

    /// Records that this process is alive with `roles` until now + `ttl`.
    ///
    /// # Contract
    /// [`Error::Conflict`] (and no change) while the node id is held by another live process.
    async fn node_heartbeat(
        &self,
        node: &str,
        roles: &[String],
        ttl: sundial_core::Dur,
    ) -> Result<()>;

    /// History retention (docs/configuration.md, "history_retention"): deletes the
    /// expired history of `prune.kind`, or counts it with `dry_run`. Expired: a terminal
    /// execution of a job (not a workflow task) whose `finished_at` is before `prune.before`,
    /// with its attempts; a terminal run whose `finished_at` is before it, with its tasks'
    /// executions and their attempts. The newest finished execution of each existing job and
    /// the newest finished run of each existing workflow are kept, whatever their age.
    ///
    /// # Contract
    /// Looks at up to `prune.limit` rows with a slot before `prune.before`, in (slot, id)
    /// order after `prune.after`, deletes the expired among them in one short transaction,
    /// and says where the next call goes on. On PostgreSQL it skips rows another transaction
    /// holds (`SKIP LOCKED`), so several processes may prune at once and no trigger, claim or
    /// completion waits on it; SQLite's one writer serialises it with them. It touches nothing
    /// unfinished, nor a row finished at or after `prune.before` by the time it deletes. A dry run writes nothing and counts
    /// everything expired.
    async fn history_prune(&self, prune: &HistoryPrune) -> Result<HistoryPruned>;

    /// Registers alert states (of [`ALERT_STATES`]) so that executions and runs ending in
    /// them write an alert event from now on ([`alerts`]'s invariants). Adds to what other
    /// processes registered; never removes.
    ///
    /// # Contract
    /// Idempotent. [`Error::Defect`] for a state outside [`ALERT_STATES`] (the config's
    /// validation refuses it first).
    async fn alert_states_add(&self, states: &[String]) -> Result<()>;

    /// Claims up to `limit` alert events that are due and not held, oldest first, each for
    /// `lease` from the store's now; the claim is the event's next round.
    ///
    /// # Contract
    /// An event is returned by at most one claim while its lease holds. An event whose
    /// execution or run no longer exists is deleted, not returned.
    async fn alert_claim(&self, limit: u32, lease: std::time::Duration) -> Result<Vec<AlertEvent>>;

    /// Settles the claim `round` of event `seq`: deletes it, or puts it back until `due_at`
    /// with the alerts that took it.
    ///
    /// # Contract
    /// Returns false, changing nothing, when the event is gone or was claimed again since
    /// (its round moved on).
    async fn alert_settle(&self, seq: i64, round: u32, settle: &AlertSettle) -> Result<bool>;

    /// Audit retention (docs/configuration.md, `audit_retention`): deletes the entries written
    /// before `before` from the oldest end of each namespace's chain
    /// ([`steps::audit::audit_prune`]); returns how many went.
    async fn audit_prune(&self, before: Timestamp) -> Result<u64>;
}
