//! The scheduler role: turns due slots into executions, ahead of their fire time
//! (DESIGN.md decision 4, "trigger ahead, run on the dot").
//!
//! Each pass: renew the shard leases (every third of their TTL), read the jobs of the held
//! shards whose next fire time is within the lookahead, plan each one's executions
//! ([`sundial_core::plan`], misfire policies included) and commit them in batches, fenced by
//! the shard epochs read; the due workflows of the held shards get their runs the same way,
//! one fenced commit per workflow (docs/workflows.md#runs). Then sleep until the next pass (at most one second), or until
//! [`Scheduler::waker`] is notified that a job changed.
//!
//! Invariants:
//! - Nothing is triggered for a shard without a live lease; a commit whose epoch went stale
//!   writes nothing ([`sundial_store::Error::StaleFence`]) and the leases are re-read.
//! - A slot's execution is inserted once: the store's unique (job, slot) index makes a repeated
//!   commit (after a crash between commit and acknowledgement) a no-op.
//! - Memory holds one batch of due jobs at a time, never the stored jobs.
//!
//! Metrics: `sundial_triggers_total` (executions inserted), `sundial_shards_held`,
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
use sundial_core::execution::Trigger;
use sundial_core::hash::fire_time;
use sundial_core::job::ScheduleSpec;
use sundial_core::plan::{JobTiming, Plan, plan};
use sundial_core::schedule::Schedule;
use sundial_core::workflow::RunState;
use sundial_store::{
    DueJob, Error as StoreError, JobTrigger, NewExecution, NewRun, RunSpec, ShardLease,
    ShardLeaseRequest, Store, TriggerCommit, TriggerListDue, WorkflowTrigger,
};
use tokio::sync::{Notify, watch};

/// How long before their fire time slots are triggered by default (5 s): the `lookahead`
/// setting's default (docs/configuration.md, "lookahead").
pub const DEFAULT_LOOKAHEAD: Dur = Dur::from_secs(5);

/// Scheduler settings.
#[derive(Debug, Clone)]
pub struct SchedulerConfig {
    /// This node's id (shard lease owner).
    pub node: String,
    /// How far ahead of their fire time slots are triggered. Default [`DEFAULT_LOOKAHEAD`].
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
}

/// The scheduler role.
#[derive(Debug)]
pub struct Scheduler {
    store: Arc<dyn Store>,
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
        store: Arc<dyn Store>,
        clock: Arc<dyn Clock>,
        config: SchedulerConfig,
        triggered: Arc<Notify>,
    ) -> Self {
        Scheduler {
            store,
            clock,
            config,
            leases: Vec::new(),
            leases_renewed_at: None,
            missing_calendars: Default::default(),
            published: watch::Sender::new(Vec::new()),
            waker: Arc::new(Notify::new()),
            triggered,
        }
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
        loop {
            if *shutdown.borrow() {
                break;
            }
            let (more, next_run_in) = match self.pass().await {
                Ok(report) => (report.jobs >= self.config.batch, report.next_run_in),
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
        let commit = TriggerCommit {
            node: self.config.node.clone(),
            leases: self.leases.clone(),
            jobs,
        };
        match self.store.trigger_commit(&commit).await {
            Ok(done) => {
                report.executions = done.executions_inserted;
                metrics::counter!("sundial_triggers_total")
                    .increment(u64::from(done.executions_inserted));
                if done.executions_inserted > 0 {
                    self.triggered.notify_one();
                }
                if sundial_trace::enabled() {
                    self.trace_triggers(&commit, &done.changed);
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

/// A manual run of a job (`POST .../trigger`): queued at once, outside the schedule.
pub fn manual_execution(job: &sundial_store::JobRecord, now: Timestamp) -> NewExecution {
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
        state: sundial_core::execution::ExecutionState::Queued,
        run: RunSpec::of(&job.spec),
    }
}
