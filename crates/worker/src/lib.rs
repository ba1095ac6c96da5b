//! The worker role: claim → dispatch → complete (ARCHITECTURE.md, "The shape": "executions are the
//! queue").
//!
//! ```text
//!  claim (attempt n, under the worker lease's epoch: liveness.rs)
//!    ├── worker lease taken over ──▶ abandon: drop the delivery (or the held execution), write nothing
//!    ├── heartbeat from heartbeat_timeout / 3 after the start, every third, until written ── refused? ──▶ abandon
//!    ├── dispatch ──▶ success ─────────────────▶ complete(n): succeeded
//!    │            ├─▶ permanent ───────────────▶ complete(n): failed
//!    │            └─▶ transient / timeout ─────▶ complete(n): retry_wait (backoff) | dead (n = max)
//!    └── timeout (per attempt) counts as transient
//!  reaper: lapsed worker leases taken over; running attempts whose lease lapsed ──▶ complete(n, only if lapsed): retry_wait | dead
//! ```
//!
//! The reaper is a maintenance service ([`Reaper`], `sundial_store::maintenance`) of its own,
//! holding the store, not a [`Worker`], run by the
//! process's maintenance runner beside [`Worker::run`], every `maintenance.reaper_every`.
//!
//! Invariants:
//! - Every completion and heartbeat carries the attempt number it was claimed with (the
//!   fencing token); the store refuses stale ones, so a worker that lost its lease can never
//!   overwrite the outcome of the attempt that replaced it (docs/guarantees.md#g3-fencing).
//! - An attempt never starts before its execution's fire time (docs/guarantees.md#g5-never-early):
//!   the store hands out due executions, by its own clock, and, within the claim window
//!   (`claim_ahead`, widened for a burst by [`burst_window`] to at most [`BURST_WINDOW_MAX`]),
//!   executions claimed ahead with the store's clock at the claim (`claimed_at`) and their start
//!   (`started_at`, the fire time). The worker holds such an execution for `started_at -
//!   claimed_at` counted on its own clock from when the claim returned, which is no earlier
//!   than the store's clock reads the fire time, whatever the skew between the two clocks.
//! - At most `max_claimed_ahead` executions are held at once. A held execution is registered
//!   for cancellation like a running one (a cancel drops it before it starts); at its start it
//!   waits for a delivery slot and room for its completion while renewing its lease, so a wait
//!   longer than its lease can never let a second attempt start beside it. A first attempt of
//!   a scheduled slot that may have got its delivery slot only past its job's
//!   `misfire_threshold` (`ClaimedExecution::may_be_late`, its lateness by the store's clock
//!   when due plus the wait, the difference of two readings of the worker's clock) starts only if its store, judging
//!   by the misfire policy on its own clock, says so (docs/policies.md, "Late in the worker").
//! - Every claim of a running worker is made under its liveness lease ([`Liveness`],
//!   docs/guarantees.md, "Workers"): a held execution starts only while that lease is known good, and, while this
//!   worker's last store call failed for a reason a retry may fix, only once the store
//!   confirmed a renewal asked for then (docs/guarantees.md, "Workers", "Claim ahead"). A lease
//!   taken over drops everything held or running under it, writing nothing.
//! - At most `max_in_flight` deliveries run at once in one worker, and at most
//!   [`UNWRITTEN_PER_SLOT`] × `max_in_flight` + `max_claimed_ahead` claimed attempts wait for
//!   their completion to be written. A delivery frees its slot as soon as the target answers,
//!   so a store that is slow to write outcomes does not hold back the next deliveries (it
//!   throttles claims only once that bound is reached).
//! - Metrics: `sundial_trigger_lag_seconds` (first attempt start − fire time, histogram) and
//!   `sundial_attempts_total{outcome}`.
//! - The scheduler of this process may hand this worker the executions it writes, already
//!   claimed under its liveness lease (`handoff.rs`, `sundial_store::handoff`): held as
//!   executions claimed ahead are, within the room reserved for them in the `max_claimed_ahead`
//!   bound; while the store has a backlog, its scheduler leaves the slots this worker would
//!   take beyond that room in their jobs.
//! - Claims read the oldest due first, or the executions due within the last second first
//!   while the store's backlog shrinks (`backlog.rs`, docs/guarantees.md, "Claim order under a
//!   backlog"); either way each is claimed once and never early.
//! - A round of claims is up to [`CLAIMS_AT_ONCE`] store calls of up to `claim_batch` each,
//!   run side by side and asking together for no more than the free capacity; every attempt of
//!   the round starts as its claim returns.
//! - Completions of concurrent attempts are written together, up to [`COMPLETION_BATCH`] in
//!   one store transaction (group commit), after at most [`COMPLETION_GATHER`] for a batch to
//!   fill; each is still fenced on its own. While attempts past their start wait for a
//!   delivery slot, the writer defers, since it last caught up, for as long as the most
//!   attempts it saw waiting take to deliver at [`BURST_DELIVERY_RATE`] ([`defer_budget`],
//!   500 ms–5 s), and never once the room for unwritten completions is down to
//!   `max_in_flight`: deliveries before bookkeeping.
//! - The store's judgements of late attempts are asked together, up to [`JUDGEMENT_BATCH`] in
//!   one store call after at most [`RENEWAL_GATHER`], each judged on its own.
//! - Lease renewals of concurrent attempts are written together too, up to
//!   [`RENEWAL_BATCH`] in one store call after at most [`RENEWAL_GATHER`]; each is judged on
//!   its own, and one refused abandons its attempt only.
//! - A cancelled execution's attempt is stopped as soon as the store's cancel signal arrives
//!   (dropping the delivery), and writes nothing.

#![warn(missing_docs)]

mod alerts;
mod attempts;
mod backlog;
mod claims;
mod completions;
mod handoff;
mod liveness;
mod reaper;
mod renewals;
mod secrets;

pub use alerts::{
    ALERT_BATCH, ALERT_DELIVERY_TIMEOUT, ALERT_LEASE, ALERT_MAX_BACKOFF, ALERT_MAX_ROUNDS,
    ALERTS_EVERY_DEFAULT, AlertDispatcher, AlertRule, backoff as alert_backoff,
    message as alert_message,
};
pub use attempts::JUDGEMENT_BATCH;
use attempts::{Failure, Judgement, log_dropped_before_start};
pub use backlog::{BACKLOG_COUNT_CAP, BACKLOG_EVERY};
#[cfg(test)]
use completions::defers_writing;
pub use completions::{
    BURST_DELIVERY_RATE, COMPLETION_BATCH, COMPLETION_DEFER_MAX, COMPLETION_DEFER_MIN,
    COMPLETION_GATHER, UNWRITTEN_PER_SLOT, defer_budget, lease_cap,
};
use completions::{log_ending, unwritten_capacity};
pub use liveness::{LeaseState, Liveness, RENEW_RETRY, start_margin};
pub use reaper::{REAP_BATCH, REAP_PASS_MAX, Reaper, reap_grace};
use renewals::{LeaseLost, Renewal};
pub use renewals::{RENEWAL_BATCH, RENEWAL_GATHER};

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use jiff::Timestamp;
use sundial_clock::Clock;
use sundial_core::Dur;
use sundial_core::execution::AttemptOutcome;
use sundial_store::{
    AttemptComplete, AttemptRef, ClaimedExecution, Error as StoreError, ExecutionClaim,
    LateVerdict, NextStep, WorkerStore,
};
use sundial_target::{Delivery, Error as TargetError, Target};
use tokio::sync::{Notify, Semaphore, watch};
use tracing::Instrument as _;

/// A completion waiting to be written, its attempt's `heartbeat_timeout` (which bounds how
/// long the writer may defer it, [`lease_cap`]) and where to send whether it applied.
type Completion = (
    AttemptComplete,
    Duration,
    tokio::sync::oneshot::Sender<Result<bool, CompletionError>>,
);

/// Takes a writer's queue out of the worker, once: the first [`Worker::run`] spawns the
/// writer; without it (a worker driven by hand) callers write alone.
fn take<T>(
    queue: &std::sync::Mutex<Option<tokio::sync::mpsc::UnboundedReceiver<T>>>,
) -> Option<tokio::sync::mpsc::UnboundedReceiver<T>> {
    queue.lock().unwrap_or_else(|p| p.into_inner()).take()
}

/// Why a completion was not written.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CompletionError {
    /// The store failed the batch the completion was in. `retry` is true when writing it
    /// again may succeed ([`StoreError::is_retryable_when_idempotent`]): completions are fenced
    /// by attempt number, so one written twice changes nothing the second time.
    #[error("the store failed the completion: {message}")]
    Store {
        /// Whether writing it again may succeed.
        retry: bool,
        /// The store's error, for the log.
        message: String,
    },
    /// The worker's completion writer has stopped (the worker is shutting down); the
    /// attempt's lease lapses and the reaper retries it.
    #[error("the completion writer has stopped")]
    WriterStopped,
}

impl From<&StoreError> for CompletionError {
    fn from(e: &StoreError) -> Self {
        CompletionError::Store {
            retry: e.is_retryable_when_idempotent(),
            message: e.to_string(),
        }
    }
}
/// Most executions a worker holds after claiming them ahead by default (100,000): the
/// `max_claimed_ahead` setting's default (docs/configuration.md, "max_claimed_ahead"). At a
/// steady rate the `claim_ahead` window bounds what is held (10,000 at 10,000 executions/s
/// with the default 1 s); the bound matters in a burst, where everything due at one instant
/// comes into the window at once, and a worker that holds it before the fire time has only
/// its deliveries left to do then (BENCHMARKS.md, "A burst held whole").
pub const DEFAULT_MAX_CLAIMED_AHEAD: usize = 100_000;

/// The claim rate a worker counts on for a burst by default (20,000 executions/s), below
/// what one worker's claims took alone on the benchmark machine (about 56,000/s on SQLite and
/// 35,000/s on PostgreSQL while the scheduler was still writing the burst; BENCHMARKS.md, "A
/// burst held whole").
pub const BURST_CLAIM_RATE: u32 = 20_000;

/// The widest claim window a burst gets (10 s), `claim_ahead`'s own maximum.
pub const BURST_WINDOW_MAX: Dur = Dur::from_secs(10);

/// The claim window for the next claims (docs/guarantees.md, "Claim ahead", "Bursts"):
/// `near` (the `claim_ahead` setting), widened by the time it takes to claim, at `rate`
/// executions per second, the part of `mass` that cannot be claimed within `near` at that
/// rate; `mass` is how many executions come due within `near` of the next one due. At most
/// [`BURST_WINDOW_MAX`], never narrower than `near`. A steady rate below `rate` keeps `near`;
/// 100,000 due at one instant with the defaults (1 s, 20,000/s) get 5 s, so a worker starts
/// claiming them as soon as the scheduler has written them (5 s ahead by default).
pub fn burst_window(near: Dur, mass: u64, rate: u32) -> Dur {
    if near.as_millis() == 0 {
        // Claiming ahead is off, for a burst too.
        return near;
    }
    let rate = u64::from(rate.max(1));
    let within = rate.saturating_mul(near.as_millis()) / 1000;
    let lead_ms = mass.saturating_sub(within).saturating_mul(1000) / rate;
    let widest = BURST_WINDOW_MAX.as_millis().max(near.as_millis());
    Dur::from_millis(near.as_millis().saturating_add(lead_ms).min(widest))
}

/// How often a deferring completion writer looks at the room left for unwritten completions
/// (2 ms).
const DEFER_LOOK: Duration = Duration::from_millis(2);

/// How long before its fire time a worker claims an execution by default (1 s): the
/// `claim_ahead` setting's default (docs/configuration.md, "claim_ahead").
pub const DEFAULT_CLAIM_AHEAD: Dur = Dur::from_secs(1);

/// Waits for at least one item of `queue`, then, unless `cap` are already there, lets more
/// arrive for `wait` and takes those too, up to `cap` in `batch` (group commit). Returns how
/// many `batch` holds: 0 only when the queue is closed and empty.
async fn gather<T>(
    queue: &mut tokio::sync::mpsc::UnboundedReceiver<T>,
    batch: &mut Vec<T>,
    cap: usize,
    wait: Duration,
) -> usize {
    if queue.recv_many(batch, cap).await == 0 {
        return 0;
    }
    if batch.len() < cap {
        tokio::time::sleep(wait).await;
        while batch.len() < cap
            && let Ok(item) = queue.try_recv()
        {
            batch.push(item);
        }
    }
    batch.len()
}

/// Most claims a worker runs at once, each of up to `claim_batch` executions (2).
pub const CLAIMS_AT_ONCE: usize = 2;

/// The shortest wait between two claims that found nothing (25 ms).
pub const MIN_IDLE: jiff::SignedDuration = jiff::SignedDuration::from_millis(25);

/// How long to wait before the next round of claims after one that started `started`
/// attempts and was handed less than it asked for, when the next execution is due in
/// `until_due` (negative or zero: due already) by the store's clock, with a `claim_ahead`
/// window of `ahead`:
/// - an execution due already: at once if the round started something (it came due while
///   the round ran), else after [`MIN_IDLE`] (it is held back: a rate limit, a deferred
///   catch-up), so nothing busy-loops;
/// - the next one past the window: when it comes within it, but no sooner than an eighth of
///   `ahead`, so that at a steady rate one claim takes an eighth of a window's executions
///   (docs/guarantees.md, "Claim ahead", Bounds) rather than each claim the few that came
///   into the window while the last one ran;
/// - one within the window already, which the round left (it came into the window while the
///   round ran, or it is not one to claim ahead): when it comes due, and after a round that
///   started something no later than an eighth of `ahead`;
///
/// and never longer than `poll`.
fn next_look(
    started: usize,
    until_due: jiff::SignedDuration,
    ahead: jiff::SignedDuration,
    poll: jiff::SignedDuration,
) -> jiff::SignedDuration {
    let wait = if !until_due.is_positive() {
        // Due already: it came due while the round ran (claim it now), or it is held back
        // (a rate-limited namespace, a deferred catch-up): look again after MIN_IDLE.
        if started > 0 {
            jiff::SignedDuration::ZERO
        } else {
            MIN_IDLE
        }
    } else if until_due > ahead {
        // At the window's edge, but no sooner than an eighth of the window: a claim then
        // takes what came into the window in the meantime at once, not one claim per
        // execution at a steady rate.
        (until_due - ahead).max(ahead / 8)
    } else if started == 0 {
        until_due
    } else {
        until_due.min(ahead / 8)
    };
    wait.min(poll)
}

/// What one round of claims ([`Worker::claim_round`]) asked for and got.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
struct Round {
    /// Executions the round's claims asked for together (0 when no capacity was free).
    asked: usize,
    /// Executions the store handed out.
    handed: usize,
    /// Attempts started or held among them.
    started: usize,
}

impl Round {
    /// Whether the store handed out all that was asked for, so more may be waiting.
    fn full(&self) -> bool {
        self.asked > 0 && self.handed >= self.asked
    }
}

/// Worker settings.
#[derive(Debug, Clone)]
pub struct WorkerConfig {
    /// This node's id, recorded on each attempt.
    pub node: String,
    /// Most deliveries running at once. Default 1024.
    pub max_in_flight: usize,
    /// Most executions claimed per store call. Default 512.
    pub claim_batch: u32,
    /// Longest idle wait before looking for due executions again. Default `1s`.
    pub poll: Dur,
    /// Per-namespace dispatch limits (executions per second), enforced cluster-wide by the store.
    pub rate_limits: std::collections::BTreeMap<String, f64>,
    /// How long before its fire time an execution may be claimed and held on this worker's
    /// timer until it (docs/guarantees.md, "Claim ahead"); zero claims only due executions.
    /// Default [`DEFAULT_CLAIM_AHEAD`].
    pub claim_ahead: Dur,
    /// Most executions held at once after a claim ahead; zero claims only due executions.
    /// Default [`DEFAULT_MAX_CLAIMED_AHEAD`].
    pub max_claimed_ahead: usize,
    /// The claim rate, executions per second, this worker counts on for a burst: the part of
    /// a burst beyond what it claims at this rate within `claim_ahead` is claimed earlier, by
    /// the time it takes at this rate ([`burst_window`]). Default [`BURST_CLAIM_RATE`].
    pub burst_claim_rate: u32,
    /// How long this worker's liveness lease lasts unless renewed (renewed every third of
    /// it): a worker that dies, or is paused or cut off from the store this long, loses every
    /// execution it holds (docs/guarantees.md, "Workers"). The server's `lease_ttl`. Default [`DEFAULT_LEASE_TTL`].
    pub lease_ttl: Dur,
    /// The key that opens secret values for `{{ secret.NAME }}` at send time
    /// (docs/security.md, "Secrets"); `None`: an attempt whose target uses a secret fails for
    /// good, saying so. Default `None`.
    pub secrets_key: Option<Arc<sundial_core::secrets::SecretsKey>>,
    /// How long a stopping worker lets its running attempts (and those claimed ahead) finish
    /// before it hands what is left back: its liveness lease is given up, and another
    /// worker's reaper retries them (docs/operations.md, "Stopping and rolling restarts").
    /// The server's `shutdown_grace`. Default [`DEFAULT_SHUTDOWN_GRACE`].
    pub shutdown_grace: Dur,
}

/// The default `shutdown_grace` (25 s: within Kubernetes' default 30 s between SIGTERM and
/// SIGKILL, with room for the rest of the stop).
pub const DEFAULT_SHUTDOWN_GRACE: Dur = Dur::from_secs(25);

/// The default `lease_ttl` of a worker's liveness lease (10 s), the shard leases' default too.
pub const DEFAULT_LEASE_TTL: Dur = Dur::from_secs(10);

impl WorkerConfig {
    /// The defaults for a node id.
    pub fn new(node: impl Into<String>) -> Self {
        WorkerConfig {
            node: node.into(),
            max_in_flight: 1024,
            claim_batch: 512,
            poll: Dur::from_secs(1),
            rate_limits: Default::default(),
            claim_ahead: DEFAULT_CLAIM_AHEAD,
            max_claimed_ahead: DEFAULT_MAX_CLAIMED_AHEAD,
            burst_claim_rate: BURST_CLAIM_RATE,
            lease_ttl: DEFAULT_LEASE_TTL,
            secrets_key: None,
            shutdown_grace: DEFAULT_SHUTDOWN_GRACE,
        }
    }
}

/// The worker role.
#[derive(Clone)]
pub struct Worker {
    store: Arc<dyn WorkerStore>,
    clock: Arc<dyn Clock>,
    target: Arc<dyn Target>,
    config: WorkerConfig,
    wake: Arc<Notify>,
    /// Delivery slots: one is held from the claim until the target answers.
    slots: Arc<Semaphore>,
    /// Held from the claim until the attempt's completion is written (or it is abandoned).
    unwritten: Arc<Semaphore>,
    /// Held by an execution claimed ahead from the claim until it has its `unwritten` permit.
    ahead: Arc<Semaphore>,
    /// The window of the next claims ahead, in milliseconds: `claim_ahead`, or wider for a
    /// burst ([`burst_window`]), as the last idle look sized it.
    window_ms: Arc<AtomicU64>,
    /// Whether this worker's last store call (a claim, a heartbeat or a completion) failed in
    /// a way a retry may fix: the store is presumed unreachable until one succeeds.
    store_down: Arc<watch::Sender<bool>>,
    /// Attempts running in this worker: execution id → the signal that stops it.
    running: Arc<std::sync::Mutex<std::collections::HashMap<String, Arc<Notify>>>>,
    /// Completions to write, in batches ([`Worker::completion_batcher`]).
    batcher: tokio::sync::mpsc::UnboundedSender<Completion>,
    batcher_queue: Arc<std::sync::Mutex<Option<tokio::sync::mpsc::UnboundedReceiver<Completion>>>>,
    /// Lease renewals to write, in batches ([`Worker::renewal_writer`]).
    renewals: tokio::sync::mpsc::UnboundedSender<Renewal>,
    renewal_queue: Arc<std::sync::Mutex<Option<tokio::sync::mpsc::UnboundedReceiver<Renewal>>>>,
    /// Late attempts to have judged, in batches ([`Worker::judgement_writer`]).
    judgements: tokio::sync::mpsc::UnboundedSender<Judgement>,
    judgement_queue: Arc<std::sync::Mutex<Option<tokio::sync::mpsc::UnboundedReceiver<Judgement>>>>,
    /// Attempts past their start waiting for a delivery slot or room for their completion
    /// ([`Waiting`]); the completion writer defers while there are some.
    waiting: Arc<AtomicUsize>,
    /// Notified when `waiting` falls to zero.
    none_waiting: Arc<Notify>,
    /// This process's liveness lease (docs/guarantees.md, "Workers"), taken and renewed while [`Worker::run`] runs.
    liveness: Arc<Liveness>,
    /// Whether claims go under the liveness lease: set by [`Worker::run`]. A worker driven by
    /// hand claims outside any, each attempt with a lease of its own.
    leased: Arc<std::sync::atomic::AtomicBool>,
    /// Set once [`Worker::run`] is told to stop: no execution is taken any more, not even one
    /// the local scheduler would hand over ([`Handoff::offer`]).
    stopping: Arc<std::sync::atomic::AtomicBool>,
    /// The jitter of retry delays ([`Jitter`]).
    jitter: Jitter,
    /// Whether claims read on time first ([`Worker::backlog_watch`]; oldest first until the
    /// backlog is seen draining).
    on_time_first: Arc<std::sync::atomic::AtomicBool>,
    /// Whether the store's last backlog count found executions due longer ago than a second
    /// (true until the first count): the scheduler beside this worker hands it nothing then
    /// (`handoff.rs`), so its room serves the backlog.
    backlogged: Arc<std::sync::atomic::AtomicBool>,
}

/// Counts an attempt past its start among the worker's `waiting` ones while it lives.
struct Waiting<'a>(&'a Worker);

impl<'a> Waiting<'a> {
    fn new(worker: &'a Worker) -> Self {
        worker.waiting.fetch_add(1, Ordering::SeqCst);
        Waiting(worker)
    }
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        if self.0.waiting.fetch_sub(1, Ordering::SeqCst) == 1 {
            self.0.none_waiting.notify_waiters();
        }
    }
}

/// The completion writer's deferral since it last caught up with its queue: when that was,
/// and the most attempts it has seen waiting to start since.
struct Behind {
    since: tokio::time::Instant,
    peak_waiting: usize,
}

impl Behind {
    fn now() -> Self {
        Behind {
            since: tokio::time::Instant::now(),
            peak_waiting: 0,
        }
    }
}

impl std::fmt::Debug for Worker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Worker")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl Worker {
    /// A worker. Notify `wake` when executions may have become due (an in-process scheduler
    /// does after each commit).
    pub fn new(
        store: Arc<dyn WorkerStore>,
        clock: Arc<dyn Clock>,
        target: Arc<dyn Target>,
        config: WorkerConfig,
        wake: Arc<Notify>,
    ) -> Self {
        let slots = Arc::new(Semaphore::new(config.max_in_flight));
        let unwritten = Arc::new(Semaphore::new(unwritten_capacity(&config)));
        let ahead = Arc::new(Semaphore::new(config.max_claimed_ahead));
        let window_ms = Arc::new(AtomicU64::new(config.claim_ahead.as_millis()));
        let (batcher, queue) = tokio::sync::mpsc::unbounded_channel();
        let (renewals, renewal_queue) = tokio::sync::mpsc::unbounded_channel();
        let (judgements, judgement_queue) = tokio::sync::mpsc::unbounded_channel();
        let liveness = Arc::new(Liveness::new(
            store.clone(),
            config.node.clone(),
            config.lease_ttl,
        ));
        Worker {
            store,
            clock,
            target,
            config,
            wake,
            slots,
            unwritten,
            ahead,
            window_ms,
            store_down: Arc::new(watch::Sender::new(false)),
            running: Arc::default(),
            batcher,
            batcher_queue: Arc::new(std::sync::Mutex::new(Some(queue))),
            renewals,
            renewal_queue: Arc::new(std::sync::Mutex::new(Some(renewal_queue))),
            judgements,
            judgement_queue: Arc::new(std::sync::Mutex::new(Some(judgement_queue))),
            waiting: Arc::default(),
            none_waiting: Arc::default(),
            liveness,
            leased: Arc::default(),
            stopping: Arc::default(),
            jitter: random_jitter(),
            on_time_first: Arc::default(),
            backlogged: Arc::new(std::sync::atomic::AtomicBool::new(true)),
        }
    }

    /// This worker with `jitter` as the source of its retry delays' jitter.
    pub fn with_jitter(mut self, jitter: Jitter) -> Self {
        self.jitter = jitter;
        self
    }

    /// This worker's liveness lease.
    pub fn liveness(&self) -> &Arc<Liveness> {
        &self.liveness
    }

    /// Claims and runs executions until `shutdown` turns true; then waits for the attempts in
    /// flight to finish (at most their timeout).
    pub async fn run(self, mut shutdown: watch::Receiver<bool>) {
        let signals = self.store.signals();
        let due_signal = signals.due.clone();
        let canceller = tokio::spawn(self.clone().cancel_loop(signals.cancelled.subscribe()));
        let batcher =
            take(&self.batcher_queue).map(|q| tokio::spawn(self.clone().completion_batcher(q)));
        let renewer =
            take(&self.renewal_queue).map(|q| tokio::spawn(self.clone().renewal_writer(q)));
        let judge =
            take(&self.judgement_queue).map(|q| tokio::spawn(self.clone().judgement_writer(q)));
        let backlog = tokio::spawn(self.clone().backlog_watch(shutdown.clone()));
        // The liveness lease: claims wait for it, and it is given up once every attempt has
        // ended.
        self.leased.store(true, Ordering::Relaxed);
        let (stop_lease, lease_stop) = watch::channel(false);
        let lease = tokio::spawn(self.liveness.clone().run(lease_stop));
        {
            let mut epochs = self.liveness.epochs();
            tokio::select! {
                _ = epochs.wait_for(Option::is_some) => {}
                _ = shutdown.wait_for(|s| *s) => {}
            }
        }
        // A new lease after a lost one: claim at once, not at the next idle look.
        let rewake = {
            let (mut epochs, wake) = (self.liveness.epochs(), self.wake.clone());
            tokio::spawn(async move {
                while epochs.changed().await.is_ok() {
                    if epochs.borrow_and_update().is_some() {
                        wake.notify_one();
                    }
                }
            })
        };
        while !*shutdown.borrow() {
            let round = self.claim_round().await;
            // One reading decides both whether to claim again and what to wait for, so a slot
            // freed after it wakes the wait below at once instead of being missed until the
            // deadline.
            let (slots_full, unwritten_full) = (
                self.slots.available_permits() == 0,
                self.unwritten.available_permits() == 0,
            );
            // Only a round handed all it asked for may have left more behind it: claim again at
            // once. One handed less took what there was; the next look is `idle_deadline`'s.
            if round.full() && !slots_full && !unwritten_full {
                continue;
            }
            let deadline = self.idle_deadline(round.started).await;
            tokio::select! {
                _ = self.clock.sleep_until(deadline) => {}
                _ = self.wake.notified() => {}
                _ = due_signal.notified() => {}
                _ = shutdown.changed() => {}
                permit = self.slots.clone().acquire_owned(), if slots_full => drop(permit),
                permit = self.unwritten.clone().acquire_owned(), if unwritten_full => drop(permit),
            }
        }
        self.stopping.store(true, Ordering::Relaxed);
        // What this worker holds gets `shutdown_grace` to finish, then is handed back.
        let grace = self.config.shutdown_grace.as_std();
        let drained = tokio::time::timeout(grace, async {
            // An execution held after a claim ahead starts within `claim_ahead`, and gives its
            // `ahead` permit back only once it holds an `unwritten` one: once they are all
            // back, every attempt left holds an `unwritten` permit.
            let held = u32::try_from(self.config.max_claimed_ahead).unwrap_or(u32::MAX);
            let _ = self.ahead.acquire_many(held).await;
            // Every attempt holds an `unwritten` permit until it has ended (its delivery slot
            // only until the target answers), so having them all back means no attempt is
            // left.
            let all = u32::try_from(unwritten_capacity(&self.config)).unwrap_or(u32::MAX);
            let _ = self.unwritten.acquire_many(all).await;
        })
        .await
        .is_ok();
        if !drained {
            // Handed back: the lease is given up below, so another worker's reaper retries
            // what is still running or held (its attempts' completions, should they come,
            // are refused by the fence).
            tracing::warn!(
                grace = %self.config.shutdown_grace,
                "attempts still running after shutdown_grace; handing them back to the other workers"
            );
        }
        canceller.abort();
        backlog.abort();
        if let Some(b) = batcher {
            b.abort();
        }
        if let Some(r) = renewer {
            r.abort();
        }
        if let Some(j) = judge {
            j.abort();
        }
        let _ = stop_lease.send(true);
        let _ = lease.await;
        rewake.abort();
    }
}

/// Where a worker draws the jitter of its retry delays: a number in `[0, 1)` per call
/// (`rand::random` by default; [`Worker::with_jitter`] and [`Reaper::with_jitter`] give another,
/// as tests do for delays they can predict).
pub type Jitter = Arc<dyn Fn() -> f64 + Send + Sync>;

/// The default [`Jitter`]: a uniform random number in `[0, 1)`.
pub fn random_jitter() -> Jitter {
    Arc::new(rand::random::<f64>)
}

#[cfg(test)]
mod tests;
