//! The scheduler role: turns due slots into executions, ahead of their fire time
//! (ARCHITECTURE.md, "The shape": "trigger ahead, run on the dot").
//!
//! Each pass: renew the shard leases (every third of their TTL), read the jobs of the held
//! shards whose next fire time is within the lookahead, plan each one's executions
//! ([`sundial_core::plan`], misfire policies included) and commit them in batches, fenced by
//! the shard epochs read; the due workflows of the held shards get their runs the same way,
//! one fenced commit per workflow (docs/workflows.md#runs). Then sleep until the next pass (at most one second), or until
//! [`Scheduler::waker`] is notified that a job changed.
//!
//! A burst widens the jobs' lookahead: a pass that read fewer due jobs than a batch looks for
//! bursts within [`BURST_LOOKAHEAD_MAX`] (the first jobs due beyond its horizon, and a sweep
//! of the seconds that came into reach since the last look, each counted once), and when more
//! come due within a second than it writes in a second at [`BURST_TRIGGER_RATE`], the
//! lookahead grows by the time the rest would take ([`burst_lookahead`]), so a burst is
//! written before its fire time as a lone slot is (docs/configuration.md, "lookahead",
//! "Bursts").
//!
//! Beside a worker ([`Scheduler::hand_off_to`]), a pass writes the slots that worker takes
//! already claimed, and, while the store has a backlog, none that it has no room for: their
//! jobs stay due until a pass finds room ([`DEFER_RETRY`]; docs/guarantees.md, "Slots handed to the worker beside
//! the scheduler"), so more load than the workers serve leaves its lateness in the jobs
//! rather than in executions a claim would write again.
//!
//! Invariants:
//! - Nothing is triggered for a shard without a live lease; a commit whose epoch went stale
//!   writes nothing ([`sundial_store::Error::StaleFence`]) and the leases are re-read.
//! - A slot's execution is inserted once: the store's unique (job, slot) index makes a repeated
//!   commit (after a crash between commit and acknowledgement) a no-op.
//! - Memory holds one batch of due jobs at a time, never the stored jobs.
//! - The jobs' lookahead is never narrower than the `lookahead` setting; workflows keep the
//!   setting's.
//!
//! Metrics: `sundial_triggers_total` (executions inserted), `sundial_shards_held`,
//! `sundial_trigger_deferred_total` (due jobs left for a later pass for want of room, a job
//! counted again at every pass that defers it),
//! `sundial_trigger_fenced_total` (commits refused for a stale shard epoch),
//! `sundial_workflow_runs_total` (workflow runs created).

#![warn(missing_docs)]

pub mod backfill;

use std::collections::HashMap;
use std::sync::Arc;

use jiff::Timestamp;
use sundial_clock::Clock;
use sundial_core::Dur;
use sundial_core::execution::ExecutionState;
use sundial_core::hash::fire_time;
use sundial_core::job::ScheduleSpec;
use sundial_core::plan::{JobTiming, Plan, plan};
use sundial_core::schedule::Schedule;
use sundial_core::workflow::RunState;
use sundial_store::handoff::{Handoff, defer_beyond_room};
use sundial_store::{
    DueJob, Error as StoreError, JobTrigger, NewExecution, NewRun, RunSpec, SchedulerStore,
    ShardLease, ShardLeaseRequest, TriggerCommit, TriggerDueSeconds, TriggerListDue,
    TriggerNextDue, WorkflowTrigger,
};
use tokio::sync::{Notify, watch};

/// How long before their fire time slots are triggered by default (5 s): the `lookahead`
/// setting's default (docs/configuration.md, "lookahead").
pub const DEFAULT_LOOKAHEAD: Dur = Dur::from_secs(5);

/// The trigger rate a scheduler counts on for a burst by default (10,000 executions/s),
/// below what one scheduler wrote on the benchmark machines (about 20,000/s on PostgreSQL
/// and more on SQLite; BENCHMARKS.md, "A burst written ahead").
pub const BURST_TRIGGER_RATE: u32 = 10_000;

/// The widest lookahead a burst gets (30 s), unless the `lookahead` setting is wider.
pub const BURST_LOOKAHEAD_MAX: Dur = Dur::from_secs(30);

/// How far past the first job due beyond the horizon a pass counts (1 s), and the sweep's
/// unit: a burst is many slots at one instant, as at the top of an hour.
pub const BURST_SPAN: Dur = Dur::from_secs(1);

/// The jobs' lookahead for the next passes (docs/configuration.md, "lookahead", "Bursts"):
/// `lookahead` (the setting), widened by the time it takes to write, at `rate` executions per
/// second, the part of `burst` that cannot be written within [`BURST_SPAN`] at that rate;
/// `burst` is how many jobs come due within [`BURST_SPAN`] of the first one due beyond the
/// horizon. At most [`BURST_LOOKAHEAD_MAX`] (or `lookahead` if that is wider), never narrower
/// than `lookahead`. A steady rate below `rate` keeps `lookahead`; 100,000 jobs due at one
/// instant with the defaults (5 s, 10,000/s) get 14 s, so they are written about as long
/// before their fire time as a lone slot is.
pub fn burst_lookahead(lookahead: Dur, burst: u64, rate: u32) -> Dur {
    let lead_ms =
        burst.saturating_sub(span_worth(rate)).saturating_mul(1000) / u64::from(rate.max(1));
    let widest = BURST_LOOKAHEAD_MAX.as_millis().max(lookahead.as_millis());
    Dur::from_millis(lookahead.as_millis().saturating_add(lead_ms).min(widest))
}

/// How many jobs a scheduler writes in [`BURST_SPAN`] at `rate` executions per second (a
/// rate of 0 taken as 1): a second holding more is a burst.
fn span_worth(rate: u32) -> u64 {
    u64::from(rate.max(1)).saturating_mul(BURST_SPAN.as_millis()) / 1000
}

/// Scheduler settings.
#[derive(Debug, Clone)]
pub struct SchedulerConfig {
    /// This node's id (shard lease owner).
    pub node: String,
    /// How far ahead of their fire time slots are triggered. Default [`DEFAULT_LOOKAHEAD`]; a
    /// burst widens it for jobs ([`burst_lookahead`]).
    pub lookahead: Dur,
    /// Longest sleep between passes. Default `1s`.
    pub tick: Dur,
    /// Shard lease time to live; renewed every third of it. Default `10s`.
    pub lease_ttl: Dur,
    /// Jobs per trigger transaction. Default 2500: on the embedded store a commit costs
    /// about one page write per touched index page, and a job's executions sit on pages
    /// of their own in the indexes keyed by job, so larger commits write fewer pages per
    /// execution (a steady 10,000/s on SQLite: 7,400–8,400/s achieved at 1000, 9,300–9,900/s
    /// at 2500, no better at 5000 for 50 MB more memory).
    pub batch: u32,
    /// The trigger rate counted on for a burst, in executions per second
    /// ([`burst_lookahead`]). Default [`BURST_TRIGGER_RATE`].
    pub burst_trigger_rate: u32,
}

impl SchedulerConfig {
    /// The defaults for a node id.
    pub fn new(node: impl Into<String>) -> Self {
        SchedulerConfig {
            node: node.into(),
            lookahead: DEFAULT_LOOKAHEAD,
            tick: Dur::from_secs(1),
            lease_ttl: Dur::from_secs(10),
            batch: 2500,
            burst_trigger_rate: BURST_TRIGGER_RATE,
        }
    }
}

/// Why the scheduler stopped.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The store refused this node the shards (another scheduler holds them).
    #[error(transparent)]
    InUse(StoreError),
}

/// What one pass did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PassReport {
    /// Due jobs read.
    pub jobs: u32,
    /// Executions inserted (including `missed` records).
    pub executions: u32,
    /// Misfired slots dropped beyond the record bound.
    pub dropped: u64,
    /// Workflow runs created (including `missed` records).
    pub runs: u32,
    /// How long until the earliest run held back for its fire time (a workflow under `skip`
    /// or `replace`), by the store's clock: the next pass comes no later.
    pub next_run_in: Option<jiff::SignedDuration>,
    /// The jobs' lookahead widened for a burst whose first slot it now reaches: the next pass
    /// comes at once.
    pub burst_in_reach: bool,
    /// Due jobs left for a later pass because the store had a backlog and the worker beside
    /// this scheduler no room for their slots ([`sundial_store::handoff::defer_beyond_room`]): the next pass
    /// comes after [`DEFER_RETRY`].
    pub deferred: u32,
}

/// How long a scheduler that deferred due jobs for want of room in the worker beside it waits
/// before it looks again (250 ms), whatever changes meanwhile: long enough that a saturated process
/// does not spend its CPU re-reading and re-planning the same jobs, short against the lateness
/// a full worker already means.
pub const DEFER_RETRY: Dur = Dur::from_millis(250);

/// The scheduler role.
#[derive(Debug)]
pub struct Scheduler {
    store: Arc<dyn SchedulerStore>,
    clock: Arc<dyn Clock>,
    config: SchedulerConfig,
    leases: Vec<ShardLease>,
    leases_renewed_at: Option<Timestamp>,
    waker: Arc<Notify>,
    triggered: Arc<Notify>,
    /// Calendars named by a schedule but not found, already said in the log.
    missing_calendars: std::collections::HashSet<(String, String)>,
    /// The leases held, for the backfill driver ([`Scheduler::lease_watch`]).
    published: watch::Sender<Vec<ShardLease>>,
    /// The jobs' lookahead, as the last look beyond the horizon left it ([`burst_lookahead`]).
    jobs_lookahead: Dur,
    /// The shards the sweep of the seconds ahead counted for, and until when (exclusive).
    swept: Option<(Vec<u16>, Timestamp)>,
    /// Bursts the sweep found and the horizon has not reached: jobs by second (Unix seconds,
    /// UTC).
    bursts: std::collections::BTreeMap<i64, u64>,
    /// The worker of this process, which takes the executions a commit may hand out
    /// ([`Scheduler::hand_off_to`]).
    handoff: Option<Arc<dyn Handoff>>,
}

/// The calendars one pass needs, by (namespace, name), compiled once for the pass.
type PassCalendars = HashMap<(String, String), sundial_cron::Calendar>;

/// Drops the planned slots that fall on a date one of the schedule's calendars excludes:
/// they are not fired and not recorded (docs/time.md, "Calendars"). The plan's next slot is
/// left as the schedule alone gives it, so a calendar changed later applies to every slot
/// not yet triggered, in both directions.
fn drop_excluded(
    planned: &mut Plan,
    namespace: &str,
    schedule: &ScheduleSpec,
    calendars: &PassCalendars,
) {
    if schedule.exclude_calendars.is_empty() {
        return;
    }
    let named: Vec<&sundial_cron::Calendar> = schedule
        .exclude_calendars
        .iter()
        .filter_map(|name| calendars.get(&(namespace.to_owned(), name.clone())))
        .collect();
    planned.executions.retain(|e| {
        named
            .iter()
            .all(|c| c.excluded_until(e.scheduled_at).is_none())
    });
}

impl Scheduler {
    /// A scheduler over a store. `triggered` is notified after each commit that inserted
    /// executions (an in-process worker waits on it).
    pub fn new(
        store: Arc<dyn SchedulerStore>,
        clock: Arc<dyn Clock>,
        config: SchedulerConfig,
        triggered: Arc<Notify>,
    ) -> Self {
        Scheduler {
            store,
            clock,
            jobs_lookahead: config.lookahead,
            swept: None,
            bursts: Default::default(),
            config,
            leases: Vec::new(),
            leases_renewed_at: None,
            missing_calendars: Default::default(),
            published: watch::Sender::new(Vec::new()),
            waker: Arc::new(Notify::new()),
            triggered,
            handoff: None,
        }
    }

    /// Hands the executions this scheduler writes to `worker`, the worker of its process,
    /// already claimed, as far as it has room and they may be handed out
    /// (`sundial_store::handoff`, docs/guarantees.md, "Slots handed to the worker beside the
    /// scheduler"); the rest wait in the store for a claim, as without it, but for those the
    /// worker would take while the store has a backlog: their jobs stay due for a later pass
    /// ([`PassReport::deferred`]).
    pub fn hand_off_to(&mut self, worker: Arc<dyn Handoff>) {
        self.handoff = Some(worker);
    }

    /// Notify this to run a pass at once (a job was created or changed).
    pub fn waker(&self) -> Arc<Notify> {
        self.waker.clone()
    }

    /// The shards held after the last renewal.
    pub fn leases(&self) -> &[ShardLease] {
        &self.leases
    }

    /// The shards held, as each pass leaves them (empty while none is held): what the
    /// backfill driver of this process ([`backfill::Backfiller`]) follows.
    pub fn lease_watch(&self) -> watch::Receiver<Vec<ShardLease>> {
        self.published.subscribe()
    }

    fn publish_leases(&self) {
        self.published.send_if_modified(|held| {
            let changed = *held != self.leases;
            if changed {
                held.clone_from(&self.leases);
            }
            changed
        });
    }

    /// Takes the shard leases; call once before [`Scheduler::run`] to fail fast.
    ///
    /// # Errors
    /// [`Error::InUse`] when another scheduler holds the store; other store errors are
    /// retried by the loop and returned here only as `Ok` with no shards.
    pub async fn acquire(&mut self) -> Result<(), Error> {
        let now = self.store.now().await.map_err(|e| {
            tracing::warn!(error = %e, "reading the store's time failed");
        });
        let Ok(now) = now else { return Ok(()) };
        match self.renew_leases(now).await {
            Err(e @ StoreError::InUse(_)) => Err(Error::InUse(e)),
            Err(e) => {
                tracing::warn!(error = %e, "shard lease renewal failed; retrying");
                Ok(())
            }
            Ok(()) => Ok(()),
        }
    }

    /// Runs passes until `shutdown` turns true, then releases the leases.
    ///
    /// # Errors
    /// [`Error::InUse`] if another scheduler takes the store.
    pub async fn run(mut self, mut shutdown: watch::Receiver<bool>) -> Result<(), Error> {
        // Another process gave its shards up: renew now and take them, not a third of the
        // lease's TTL later.
        let released = self.store.signals().shards;
        loop {
            if *shutdown.borrow() {
                break;
            }
            let (more, next_run_in) = match self.pass().await {
                Ok(report) if report.deferred > 0 => {
                    // Not woken by a job's change meanwhile, which would re-plan the same
                    // deferred jobs at once; a workflow run held back still comes on time.
                    let retry = DEFER_RETRY.as_signed();
                    let wait = report
                        .next_run_in
                        .map_or(retry, |n| n.clamp(jiff::SignedDuration::ZERO, retry));
                    let deadline = self.clock.now() + wait;
                    tokio::select! {
                        _ = self.clock.sleep_until(deadline) => {}
                        _ = shutdown.changed() => {}
                    }
                    continue;
                }
                Ok(report) => (
                    report.jobs >= self.config.batch || report.burst_in_reach,
                    report.next_run_in,
                ),
                Err(StoreError::InUse(e)) => return Err(Error::InUse(StoreError::InUse(e))),
                Err(e) => {
                    tracing::warn!(error = %e, "trigger pass failed");
                    (false, None)
                }
            };
            if more {
                continue;
            }
            // A run held back for its fire time is created on the dot, not a tick later.
            let wait = next_run_in.map_or(self.config.tick.as_signed(), |d| {
                d.max(jiff::SignedDuration::ZERO)
                    .min(self.config.tick.as_signed())
            });
            let deadline = self.clock.now() + wait;
            tokio::select! {
                _ = self.clock.sleep_until(deadline) => {}
                _ = self.waker.notified() => {}
                _ = released.notified() => self.leases_renewed_at = None,
                _ = shutdown.changed() => {}
            }
        }
        self.leases.clear();
        self.publish_leases();
        if let Err(e) = self.store.shard_lease_release(&self.config.node).await {
            tracing::warn!(error = %e, "releasing shard leases failed");
        }
        Ok(())
    }

    /// Renews the leases; `now` is the store's time the renewal is recorded at (the node's
    /// own clock may be skewed, docs/guarantees.md#g3-fencing).
    async fn renew_leases(&mut self, now: Timestamp) -> Result<(), StoreError> {
        let request = ShardLeaseRequest {
            node: self.config.node.clone(),
            ttl: self.config.lease_ttl,
        };
        match self.store.shard_lease_renew(&request).await {
            Ok(leases) => {
                metrics::gauge!("sundial_shards_held").set(leases.len() as f64);
                if leases.len() != self.leases.len() {
                    tracing::info!(node = %self.config.node, held = leases.len(), before = self.leases.len(), "shard leases changed");
                }
                self.leases = leases;
                self.leases_renewed_at = Some(now);
                Ok(())
            }
            Err(e) => {
                if !self.leases.is_empty() {
                    tracing::warn!(node = %self.config.node, error = %e, "shard lease renewal failed; triggering nothing until it succeeds");
                }
                self.leases.clear();
                Err(e)
            }
        }
    }

    /// One pass: renew leases when a third of their TTL has passed, then trigger every due job
    /// of the held shards, in batches.
    ///
    /// # Errors
    /// A store error; a stale fence clears the leases so the next pass re-reads them.
    pub async fn pass(&mut self) -> Result<PassReport, StoreError> {
        let report = self.trigger_pass().await;
        self.publish_leases();
        report
    }

    async fn trigger_pass(&mut self) -> Result<PassReport, StoreError> {
        let now = self.store.now().await?;
        let renew_after = self.config.lease_ttl.as_signed() / 3;
        if self
            .leases_renewed_at
            .is_none_or(|at| now - renew_after >= at)
            || self.leases.is_empty()
        {
            self.renew_leases(now).await?;
        }
        let mut report = PassReport::default();
        if self.leases.is_empty() {
            return Ok(report);
        }
        let horizon = now + self.config.lookahead.as_signed();
        // A workflow that cannot be triggered now must not hold up the jobs' pass.
        match self.trigger_workflows(now, horizon).await {
            Ok((runs, held_back)) => {
                report.runs = runs;
                report.next_run_in = held_back.map(|at| at.duration_since(now));
            }
            Err(e @ StoreError::StaleFence(_)) => return Err(e),
            Err(e) => tracing::warn!(error = %e, "triggering workflows failed; retrying next pass"),
        }
        let horizon = now + self.jobs_lookahead.as_signed();
        let listing = std::time::Instant::now();
        let due = self
            .store
            .trigger_list_due(&TriggerListDue {
                shards: self.leases.iter().map(|l| l.shard).collect(),
                horizon,
                limit: self.config.batch,
            })
            .await?;
        report.jobs = u32::try_from(due.len()).unwrap_or(u32::MAX);
        if due.is_empty() {
            report.burst_in_reach = self.look_beyond(now, horizon).await;
            return Ok(report);
        }
        let calendars = self
            .calendars(due.iter().map(|j| (&j.spec.namespace, &j.spec.schedule)))
            .await?;
        let mut jobs = Vec::with_capacity(due.len());
        for job in &due {
            let (trigger, dropped) = self.job_trigger(job, now, horizon, &calendars);
            report.dropped += dropped;
            jobs.push(trigger);
        }
        let planned: usize = jobs.iter().map(|j| j.executions.len()).sum();
        let offer = self.handoff.as_ref().and_then(|w| w.offer(planned));
        if let Some(offer) = offer.as_ref().filter(|o| o.defer) {
            report.deferred = u32::try_from(defer_beyond_room(&mut jobs, &offer.request, now))
                .unwrap_or(u32::MAX);
            if report.deferred > 0 {
                metrics::counter!("sundial_trigger_deferred_total")
                    .increment(u64::from(report.deferred));
                tracing::debug!(
                    deferred = report.deferred,
                    room = offer.request.limit,
                    "due jobs deferred: a backlog in the store, no room in the worker"
                );
            }
            if jobs.is_empty() {
                if report.jobs < self.config.batch {
                    report.burst_in_reach = self.look_beyond(now, horizon).await;
                }
                return Ok(report);
            }
        }
        let commit = TriggerCommit {
            node: self.config.node.clone(),
            leases: self.leases.clone(),
            jobs,
            handoff: offer
                .as_ref()
                .filter(|o| o.request.limit > 0)
                .map(|o| o.request.clone()),
        };
        let (listed_ms, committing) = (
            listing.elapsed().as_secs_f64() * 1e3,
            std::time::Instant::now(),
        );
        let committed = self.store.trigger_commit(&commit).await;
        tracing::debug!(
            jobs = report.jobs,
            listed_and_planned_ms = listed_ms,
            commit_ms = committing.elapsed().as_secs_f64() * 1e3,
            "trigger commit returned"
        );
        match committed {
            Ok(mut done) => {
                report.executions = done.executions_inserted;
                metrics::counter!("sundial_triggers_total")
                    .increment(u64::from(done.executions_inserted));
                let handed = std::mem::take(&mut done.handed);
                // The worker's claims are woken only for what waits in the store.
                if done.executions_inserted as usize > handed.len() {
                    self.triggered.notify_one();
                }
                if let Some(offer) = offer {
                    (offer.deliver)(handed, self.clock.now());
                }
                if sundial_trace::enabled() {
                    self.trace_triggers(&commit, &done.changed);
                }
                if report.jobs < self.config.batch {
                    report.burst_in_reach = self.look_beyond(now, horizon).await;
                }
                Ok(report)
            }
            Err(e @ StoreError::StaleFence(_)) => {
                metrics::counter!("sundial_trigger_fenced_total").increment(1);
                tracing::warn!(error = %e, "shard lease lost; re-reading leases");
                self.leases.clear();
                Err(e)
            }
            Err(e) => Err(e),
        }
    }

    /// After a pass that triggered every job due within `horizon`, looks beyond it for bursts
    /// and sets the jobs' lookahead for the next passes ([`burst_lookahead`],
    /// docs/configuration.md, "lookahead", "Bursts"). Two reads: the first jobs due beyond the
    /// horizon (a burst with nothing before it, however late it was created), and the sweep of
    /// the seconds that came into reach (within [`BURST_LOOKAHEAD_MAX`]) since the last look,
    /// each counted once, whose bursts are remembered until the horizon passes them (a burst
    /// behind a steady stream of slots). A burst widens the lookahead once its fire time is
    /// within what it needs and a pass. Returns whether the lookahead widened to reach a
    /// burst's first slot from `now`, so the next pass should come at once. A failed read is
    /// logged and changes nothing: the pass that wrote its jobs still succeeded.
    async fn look_beyond(&mut self, now: Timestamp, horizon: Timestamp) -> bool {
        let rate = self.config.burst_trigger_rate.max(1);
        let widest = BURST_LOOKAHEAD_MAX.max(self.config.lookahead);
        let reach = now + widest.as_signed();
        // A burst larger than the one that widens it to the widest widens it no further.
        let cap = u64::from(rate).saturating_mul(
            (widest
                .as_millis()
                .saturating_sub(self.config.lookahead.as_millis()))
            .saturating_add(BURST_SPAN.as_millis()),
        ) / 1000;
        let cap = u32::try_from(cap).unwrap_or(u32::MAX);
        let shards: Vec<u16> = self.leases.iter().map(|l| l.shard).collect();
        let first = self
            .store
            .trigger_next_due(&TriggerNextDue {
                shards: shards.clone(),
                after: horizon,
                until: reach,
                span: BURST_SPAN,
                cap,
            })
            .await;
        let first = match first {
            Ok(first) => first,
            Err(e) => {
                tracing::warn!(error = %e, "looking beyond the lookahead for a burst failed");
                return false;
            }
        };
        self.sweep(shards, horizon, reach, cap).await;
        // What the horizon reached was written by this pass: a burst whose second starts
        // within it is done (the rest of that second, if any, is the first beyond it).
        let horizon_s = horizon.as_second();
        self.bursts.retain(|second, _| *second > horizon_s);
        // Each burst in sight, with the lookahead it needs (the setting for one that is not a
        // burst at all).
        let candidates: Vec<(Timestamp, u64, Dur)> = self
            .bursts
            .iter()
            .filter_map(|(second, jobs)| Some((Timestamp::from_second(*second).ok()?, *jobs)))
            .chain(first.map(|n| (n.fire_at, n.jobs)))
            .map(|(at, jobs)| (at, jobs, burst_lookahead(self.config.lookahead, jobs, rate)))
            .collect();
        let before = self.jobs_lookahead;
        let pass = self.config.tick.as_signed();
        // The widest lookahead a burst needs once it is within it and a pass.
        let widening = candidates
            .iter()
            .filter(|(at, _, needed)| *at <= now + needed.as_signed() + pass)
            .max_by_key(|(at, _, needed)| (*needed, std::cmp::Reverse(*at)));
        self.jobs_lookahead = widening.map_or(self.config.lookahead, |(_, _, needed)| {
            (*needed).max(self.config.lookahead)
        });
        let lookahead = self.jobs_lookahead;
        if lookahead <= before {
            return false;
        }
        if let Some((at, jobs, _)) = widening {
            tracing::info!(jobs, fire_at = %at, lookahead = %lookahead,
                "a burst is due: triggering its jobs further ahead");
        }
        candidates
            .iter()
            .any(|(at, _, _)| *at <= now + lookahead.as_signed())
    }

    /// Counts, per second, the jobs due in the seconds that came into `reach` since the last
    /// sweep (all of them beyond `horizon` after a change of shards), and remembers the seconds
    /// with more than one second's worth at the burst rate. A capped read covers a prefix: the
    /// next sweep starts again at its last second.
    async fn sweep(&mut self, shards: Vec<u16>, horizon: Timestamp, reach: Timestamp, cap: u32) {
        let from = match &self.swept {
            Some((held, until)) if *held == shards => (*until).max(horizon),
            _ => {
                self.bursts.clear();
                horizon
            }
        };
        if from >= reach {
            return;
        }
        let seconds = self
            .store
            .trigger_due_seconds(&TriggerDueSeconds {
                shards: shards.clone(),
                from,
                until: reach,
                cap,
            })
            .await;
        let seconds = match seconds {
            Ok(seconds) => seconds,
            Err(e) => {
                tracing::warn!(error = %e, "sweeping the seconds ahead for bursts failed");
                return;
            }
        };
        let read: u64 = seconds.iter().map(|(_, n)| n).sum();
        let within = span_worth(self.config.burst_trigger_rate);
        let until = match seconds.last() {
            Some((last, _)) if read >= u64::from(cap) => {
                Timestamp::from_second(*last).map_or(reach, |t| t.max(from))
            }
            _ => reach,
        };
        for (second, jobs) in seconds {
            if jobs > within {
                self.bursts.insert(second, jobs);
            }
        }
        self.swept = Some((shards, until));
    }

    /// Reads and compiles the calendars the `schedules` name (each namespace's calendars in one
    /// read), for one pass: a calendar changed since the last pass takes effect for every slot
    /// not yet triggered (docs/time.md, "Calendars"). A named calendar that does not exist (it
    /// was deleted while a write naming it raced the delete) excludes nothing; the log says so
    /// once per process.
    ///
    /// # Errors
    /// The store's, when a read fails.
    async fn calendars<'a>(
        &mut self,
        schedules: impl Iterator<Item = (&'a String, &'a ScheduleSpec)>,
    ) -> Result<PassCalendars, StoreError> {
        let mut wanted: std::collections::BTreeMap<&str, Vec<&str>> = Default::default();
        for (ns, schedule) in schedules {
            for name in &schedule.exclude_calendars {
                wanted.entry(ns.as_str()).or_default().push(name.as_str());
            }
        }
        let mut out = PassCalendars::new();
        for (ns, names) in wanted {
            let stored = self.store.calendar_list(ns).await?;
            for name in names {
                let key = (ns.to_owned(), name.to_owned());
                if out.contains_key(&key) {
                    continue;
                }
                match stored
                    .iter()
                    .find(|c| c.name == name)
                    .map(|c| c.spec.compile())
                {
                    Some(Ok(calendar)) => {
                        out.insert(key, calendar);
                    }
                    Some(Err(e)) => {
                        if self.missing_calendars.insert(key) {
                            tracing::error!(namespace = ns, calendar = name, error = %e,
                                "a stored calendar does not compile; it excludes nothing");
                        }
                    }
                    None => {
                        if self.missing_calendars.insert(key) {
                            tracing::warn!(
                                namespace = ns,
                                calendar = name,
                                "a schedule names a calendar that does not exist; it excludes nothing"
                            );
                        }
                    }
                }
            }
        }
        Ok(out)
    }

    /// Records the trigger span of every execution `commit` wrote (those of the jobs in
    /// `changed` were not written), docs/operations.md#traces.
    fn trace_triggers(&self, commit: &TriggerCommit, changed: &[String]) {
        for job in commit.jobs.iter().filter(|j| !changed.contains(&j.uid)) {
            for e in &job.executions {
                // Only what will run: a slot recorded missed or skipped has no attempts.
                if !matches!(e.state, ExecutionState::Scheduled | ExecutionState::Queued) {
                    continue;
                }
                sundial_trace::trigger(&sundial_trace::Triggered {
                    execution_id: &e.id,
                    namespace: &e.namespace,
                    job: &e.job,
                    scheduled_at: e.scheduled_at,
                    fire_at: e.fire_at,
                    origin: sundial_trace::Origin::Schedule,
                    node: &self.config.node,
                });
            }
        }
    }

    /// Creates the runs of the due workflows of the held shards, one fenced commit per
    /// workflow. A workflow under `skip` or `replace` gets its run at its fire time, not
    /// ahead, so that its policy is judged against the runs unfinished then; under `allow`
    /// its runs are created within the lookahead, as jobs' executions are.
    ///
    /// # Errors
    /// A store error; a stale fence clears the leases so the next pass re-reads them.
    async fn trigger_workflows(
        &mut self,
        now: Timestamp,
        horizon: Timestamp,
    ) -> Result<(u32, Option<Timestamp>), StoreError> {
        let due = self
            .store
            .workflow_list_due(&TriggerListDue {
                shards: self.leases.iter().map(|l| l.shard).collect(),
                horizon,
                limit: self.config.batch,
            })
            .await?;
        let calendars = self
            .calendars(
                due.iter()
                    .filter_map(|w| Some((&w.spec.namespace, w.spec.schedule.as_ref()?))),
            )
            .await?;
        let (mut runs, mut held_back) = (0, None::<Timestamp>);
        for w in &due {
            let (Some(schedule), Some(next_slot), Some(next_fire)) =
                (&w.spec.schedule, w.next_slot_at, w.next_fire_at)
            else {
                continue;
            };
            let exact = w.spec.concurrency_policy != sundial_core::job::ConcurrencyPolicy::Allow;
            if exact && next_fire > now {
                held_back = Some(held_back.map_or(next_fire, |h| h.min(next_fire)));
                continue;
            }
            let mut planned = match Schedule::compile(schedule) {
                Ok(compiled) => plan(
                    &compiled,
                    JobTiming {
                        uid: &w.uid,
                        jitter: w.spec.jitter,
                        misfire_policy: w.spec.misfire_policy,
                        misfire_threshold: w.spec.misfire_threshold,
                    },
                    next_slot,
                    now,
                    if exact { now } else { horizon },
                ),
                Err(e) => {
                    tracing::error!(workflow = %w.spec.name, namespace = %w.spec.namespace, error = %e,
                        "stored schedule does not compile; completing the workflow's schedule");
                    Plan {
                        executions: Vec::new(),
                        next_slot: None,
                        dropped: 0,
                    }
                }
            };
            drop_excluded(&mut planned, &w.spec.namespace, schedule, &calendars);
            let trigger = WorkflowTrigger {
                node: self.config.node.clone(),
                leases: self.leases.clone(),
                uid: w.uid.clone(),
                shard: w.shard,
                version: w.version,
                expected_next_slot: next_slot,
                next_slot_at: planned.next_slot,
                next_fire_at: planned
                    .next_slot
                    .map(|slot| fire_time(&w.uid, slot, w.spec.jitter)),
                runs: planned
                    .executions
                    .iter()
                    .map(|e| NewRun {
                        id: sundial_core::ids::slot_run_id(&w.uid, e.scheduled_at),
                        namespace: w.spec.namespace.clone(),
                        workflow: w.spec.name.clone(),
                        workflow_uid: w.uid.clone(),
                        workflow_version: w.version,
                        shard: w.shard,
                        trigger: e.trigger,
                        scheduled_at: e.scheduled_at,
                        fire_at: e.fire_at,
                        params: w.spec.params.clone(),
                        recorded_as: (e.state == ExecutionState::Missed)
                            .then_some(RunState::Missed),
                    })
                    .collect(),
            };
            match self.store.workflow_trigger(&trigger).await {
                Ok(n) => {
                    runs += n;
                    metrics::counter!("sundial_workflow_runs_total").increment(u64::from(n));
                    if n > 0 {
                        self.triggered.notify_one();
                    }
                }
                Err(e @ StoreError::StaleFence(_)) => {
                    metrics::counter!("sundial_trigger_fenced_total").increment(1);
                    tracing::warn!(error = %e, "shard lease lost; re-reading leases");
                    self.leases.clear();
                    return Err(e);
                }
                Err(e) => {
                    tracing::warn!(workflow = %w.spec.name, namespace = %w.spec.namespace, error = %e,
                        "creating a workflow's runs failed; retrying next pass");
                }
            }
        }
        Ok((runs, held_back))
    }

    /// Plans one due job. A job whose stored schedule no longer compiles (it was valid when
    /// written) is completed rather than retried forever.
    fn job_trigger(
        &self,
        job: &DueJob,
        now: Timestamp,
        horizon: Timestamp,
        calendars: &PassCalendars,
    ) -> (JobTrigger, u64) {
        let spec = &job.spec;
        let mut planned = match Schedule::compile(&spec.schedule) {
            Ok(schedule) => {
                let timing = JobTiming {
                    uid: &job.uid,
                    jitter: spec.jitter,
                    misfire_policy: spec.misfire_policy,
                    misfire_threshold: spec.misfire_threshold,
                };
                plan(&schedule, timing, job.next_slot_at, now, horizon)
            }
            Err(e) => {
                tracing::error!(job = %spec.name, namespace = %spec.namespace, error = %e,
                    "stored schedule does not compile; completing the job");
                Plan {
                    executions: Vec::new(),
                    next_slot: None,
                    dropped: 0,
                }
            }
        };
        drop_excluded(&mut planned, &spec.namespace, &spec.schedule, calendars);
        if planned.dropped > 0 {
            tracing::warn!(job = %spec.name, namespace = %spec.namespace, dropped = planned.dropped,
                "misfire episode longer than the record bound");
        }
        let run = RunSpec::of(spec);
        let executions = planned
            .executions
            .into_iter()
            .map(|e| NewExecution {
                id: sundial_core::ids::slot_execution_id(&job.uid, e.scheduled_at),
                namespace: spec.namespace.clone(),
                job: spec.name.clone(),
                job_uid: job.uid.clone(),
                job_version: job.version,
                shard: job.shard,
                trigger: e.trigger,
                scheduled_at: e.scheduled_at,
                fire_at: e.fire_at,
                state: e.state,
                run: run.clone(),
            })
            .collect();
        let trigger = JobTrigger {
            namespace: spec.namespace.clone(),
            name: spec.name.clone(),
            uid: job.uid.clone(),
            shard: job.shard,
            version: job.version,
            expected_next_slot: job.next_slot_at,
            next_slot_at: planned.next_slot,
            next_fire_at: planned
                .next_slot
                .map(|slot| fire_time(&job.uid, slot, spec.jitter)),
            executions,
        };
        (trigger, planned.dropped)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_burst_widens_the_lookahead_by_the_time_its_excess_takes() {
        let s = Dur::from_secs;
        // Within a second's worth at the rate: the setting.
        assert_eq!(burst_lookahead(s(5), 0, 10_000), s(5));
        assert_eq!(burst_lookahead(s(5), 10_000, 10_000), s(5));
        // 100,000 at one instant: 9 s more to write the 90,000 beyond the first second's.
        assert_eq!(burst_lookahead(s(5), 100_000, 10_000), s(14));
        assert_eq!(
            burst_lookahead(s(5), 15_000, 10_000),
            Dur::from_millis(5_500)
        );
        // At most BURST_LOOKAHEAD_MAX, unless the setting is wider; never narrower.
        assert_eq!(
            burst_lookahead(s(5), 10_000_000, 10_000),
            BURST_LOOKAHEAD_MAX
        );
        assert_eq!(burst_lookahead(s(45), 10_000_000, 10_000), s(45));
        assert_eq!(burst_lookahead(s(60), 0, 10_000), s(60));
        // A rate of 0 is taken as 1 a second, not a division by zero.
        assert_eq!(burst_lookahead(s(5), 3, 0), s(7));
    }
}
