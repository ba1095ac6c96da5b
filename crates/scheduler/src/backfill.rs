//! The backfill driver (docs/time.md, "Backfill"): in each scheduler process, it
//! walks the running backfills of the shards this node holds, creating their slots'
//! executions (or runs) at each one's `max_per_second`, oldest slot first.
//!
//! Each pass reads the running backfills of the held shards; for each, it refills the
//! backfill's token bucket, plans a step from the stored cursor
//! ([`sundial_core::backfill::choose`] over the slots from the cursor and which of them
//! already have an execution or run) and commits it fenced by the shard lease
//! ([`SchedulerStore::backfill_step`]).
//!
//! Invariants:
//! - Progress lives in the store only: a step's slots, cursor and counts commit together, so
//!   a driver killed at any point leaves a backfill that the shard's next holder resumes from
//!   its cursor, creating no slot twice (the slot-derived ids make a repeated insert a no-op)
//!   and skipping none.
//! - A backfill never creates more than `max_per_second` slots in any second of one driver's
//!   life (a bucket of 0.1 s worth, RFC 2697's committed burst), and a new driver starts with
//!   an empty bucket.
//! - Back-pressure: under `allow`, a step creates nothing beyond 0.2 s worth of the rate (at
//!   least 10) of the job's unfinished executions (the workflow's runs), so a target slower
//!   than the rate slows the backfill rather than queueing its executions ahead of the
//!   ordinary slots.
//! - Under a concurrency policy other than `allow`, one slot at a time: the next is created
//!   only once the previous ended ([`sundial_store::BackfillStep::serial`]).
//! - A backfill whose job or workflow was deleted (or replaced by another of the same name)
//!   ends `cancelled` with the reason; a paused one waits.
//!
//! Metrics: `sundial_backfill_created_total` (executions and runs created).

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use jiff::{SignedDuration, Timestamp};
use sundial_clock::Clock;
use sundial_core::backfill::{choose, slots};
use sundial_core::execution::{ExecutionState, Trigger};
use sundial_core::ids::{slot_execution_id, slot_run_id};
use sundial_core::job::{ConcurrencyPolicy, ScheduleSpec};
use sundial_core::schedule::Schedule;
use sundial_store::{
    BackfillOf, BackfillRecord, BackfillStep, BackfillStepped, Error as StoreError, NewExecution,
    NewRun, RunSpec, SchedulerStore, ShardLease,
};
use tokio::sync::{Notify, watch};

/// The slots a step looks at past the cursor at most (to pass slots done already quickly).
const CANDIDATES: usize = 1000;

/// How long between passes while backfills run, and while none does.
const BUSY_EVERY: SignedDuration = SignedDuration::from_millis(50);
const IDLE_EVERY: SignedDuration = SignedDuration::from_secs(1);

/// How long a serial backfill whose previous execution or run is unfinished waits before it
/// looks again.
const WAITING_EVERY: SignedDuration = SignedDuration::from_millis(500);

/// Seconds' worth of a backfill's slots that may be unfinished at once (at least
/// [`MIN_UNFINISHED`]): a target slower than the rate slows the backfill down, instead of a
/// queue of backfilled executions building up ahead of the ordinary slots.
const UNFINISHED_SECONDS: f64 = 0.2;
const MIN_UNFINISHED: u64 = 10;

/// Seconds' worth of slots a backfill's bucket holds (as the namespaces' dispatch buckets,
/// `sundial_store::concurrency::BURST_SECONDS`).
const BURST_SECONDS: f64 = 0.1;

/// One backfill's rate state in this driver.
#[derive(Debug, Clone, Copy)]
struct Bucket {
    tokens: f64,
    at: Timestamp,
    not_before: Option<Timestamp>,
}

/// The driver of one scheduler process.
#[derive(Debug)]
pub struct Backfiller {
    store: Arc<dyn SchedulerStore>,
    clock: Arc<dyn Clock>,
    node: String,
    leases: watch::Receiver<Vec<ShardLease>>,
    triggered: Arc<Notify>,
    buckets: HashMap<String, Bucket>,
}

/// What one pass did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BackfillPass {
    /// Running backfills of the held shards.
    pub running: u32,
    /// Executions and runs created.
    pub created: u32,
}

impl Backfiller {
    /// A driver for node `node`, following the shard leases its scheduler publishes
    /// ([`crate::Scheduler::lease_watch`]). `triggered` is notified when a step created
    /// executions (an in-process worker waits on it).
    pub fn new(
        store: Arc<dyn SchedulerStore>,
        clock: Arc<dyn Clock>,
        node: impl Into<String>,
        leases: watch::Receiver<Vec<ShardLease>>,
        triggered: Arc<Notify>,
    ) -> Self {
        Backfiller {
            store,
            clock,
            node: node.into(),
            leases,
            triggered,
            buckets: HashMap::new(),
        }
    }

    /// Runs passes until `shutdown` turns true: every 50 ms while a backfill runs, every
    /// second otherwise. A failed pass is logged and retried.
    pub async fn run(mut self, mut shutdown: watch::Receiver<bool>) {
        loop {
            if *shutdown.borrow() {
                return;
            }
            let busy = match self.pass().await {
                Ok(pass) => pass.running > 0,
                Err(e) => {
                    tracing::warn!(error = %e, "backfill pass failed; retrying");
                    false
                }
            };
            let deadline = self.clock.now() + if busy { BUSY_EVERY } else { IDLE_EVERY };
            tokio::select! {
                _ = self.clock.sleep_until(deadline) => {}
                _ = shutdown.changed() => {}
            }
        }
    }

    /// One pass over the running backfills of the held shards.
    ///
    /// # Errors
    /// The store's, when the backfills cannot be read; a step that fails is logged and left
    /// for the next pass.
    pub async fn pass(&mut self) -> Result<BackfillPass, StoreError> {
        let leases = self.leases.borrow().clone();
        if leases.is_empty() {
            return Ok(BackfillPass::default());
        }
        let shards: Vec<u16> = leases.iter().map(|l| l.shard).collect();
        let running = self.store.backfill_running(&shards).await?;
        let ids: HashSet<&str> = running.iter().map(|b| b.id.as_str()).collect();
        self.buckets.retain(|id, _| ids.contains(id.as_str()));
        let mut pass = BackfillPass {
            running: u32::try_from(running.len()).unwrap_or(u32::MAX),
            created: 0,
        };
        if running.is_empty() {
            return Ok(pass);
        }
        let now = self.store.now().await?;
        for b in &running {
            match self.step(b, &leases, now).await {
                Ok(created) => pass.created += created,
                Err(e @ StoreError::StaleFence(_)) => {
                    tracing::warn!(error = %e, "shard lease lost; the backfill goes on where the shard goes");
                    return Ok(pass);
                }
                Err(e) => {
                    tracing::warn!(backfill = %b.id, namespace = %b.namespace, name = %b.name, error = %e,
                        "a backfill step failed; retrying next pass");
                }
            }
        }
        if pass.created > 0 {
            metrics::counter!("sundial_backfill_created_total").increment(u64::from(pass.created));
            self.triggered.notify_one();
        }
        Ok(pass)
    }

    /// The slots this backfill may create now, its bucket refilled to `now`.
    fn allowance(&mut self, b: &BackfillRecord, now: Timestamp) -> usize {
        let rate = f64::from(b.max_per_second.max(1));
        let depth = (rate * BURST_SECONDS).max(1.0);
        let bucket = self.buckets.entry(b.id.clone()).or_insert(Bucket {
            tokens: 0.0,
            at: now,
            not_before: None,
        });
        if bucket.not_before.is_some_and(|t| now < t) {
            return 0;
        }
        let elapsed = now.duration_since(bucket.at).as_secs_f64().max(0.0);
        bucket.tokens = (bucket.tokens + rate * elapsed).min(depth);
        bucket.at = now;
        if bucket.tokens >= 1.0 {
            bucket.tokens.floor() as usize
        } else {
            0
        }
    }

    fn spend(&mut self, id: &str, n: usize, wait_until: Option<Timestamp>) {
        if let Some(bucket) = self.buckets.get_mut(id) {
            bucket.tokens = (bucket.tokens - n as f64).max(0.0);
            bucket.not_before = wait_until;
        }
    }

    /// Plans and commits one step of `b`; returns what it created.
    async fn step(
        &mut self,
        b: &BackfillRecord,
        leases: &[ShardLease],
        now: Timestamp,
    ) -> Result<u32, StoreError> {
        // Nothing to read while the bucket is empty or a serial backfill waits.
        let allowed = self.allowance(b, now);
        if allowed == 0 {
            return Ok(0);
        }
        let Some(target) = self.target(b, now).await? else {
            return Ok(0);
        };
        let serial = target.policy != ConcurrencyPolicy::Allow;
        let want = if serial {
            1
        } else {
            // Back-pressure: room for what the job's unfinished executions leave.
            let cap =
                ((f64::from(b.max_per_second) * UNFINISHED_SECONDS) as u64).max(MIN_UNFINISHED);
            let unfinished = self.store.backfill_unfinished(b.of, &b.uid).await?;
            allowed.min(usize::try_from(cap.saturating_sub(unfinished)).unwrap_or(usize::MAX))
        };
        if want == 0 {
            return Ok(0);
        }
        let schedule = match self.schedule(&b.namespace, &target.schedule).await? {
            Ok(schedule) => schedule,
            Err(reason) => {
                self.end(b, &reason).await;
                return Ok(0);
            }
        };
        let limit = CANDIDATES.max(want);
        let candidates = slots(&schedule, b.cursor, b.to, limit);
        let exhausted = candidates.len() < limit;
        let derived = |slot: &Timestamp| match b.of {
            BackfillOf::Job => slot_execution_id(&b.uid, *slot),
            BackfillOf::Workflow => slot_run_id(&b.uid, *slot),
        };
        let ids: Vec<String> = candidates.iter().map(derived).collect();
        let taken_ids = self.store.backfill_taken(b.of, &ids).await?;
        let taken: HashSet<Timestamp> = candidates
            .iter()
            .zip(&ids)
            .filter(|(_, id)| taken_ids.contains(*id))
            .map(|(slot, _)| *slot)
            .collect();
        let plan = choose(&candidates, &taken, want, b.cursor, b.to, exhausted);
        let (mut executions, mut runs) = (Vec::new(), Vec::new());
        for slot in &plan.chosen {
            match &target.make {
                Make::Execution(template) => executions.push(NewExecution {
                    id: derived(slot),
                    scheduled_at: *slot,
                    ..template.clone()
                }),
                Make::Run(template) => runs.push(NewRun {
                    id: derived(slot),
                    scheduled_at: *slot,
                    ..template.clone()
                }),
            }
        }
        let chosen = plan.chosen.len();
        let step = BackfillStep {
            node: self.node.clone(),
            leases: leases.to_vec(),
            id: b.id.clone(),
            shard: b.shard,
            expected_cursor: b.cursor,
            cursor: plan.cursor,
            executions,
            runs,
            existing: plan.existing,
            done: plan.done,
            serial,
        };
        match self.store.backfill_step(&step).await? {
            BackfillStepped::Applied(created) => {
                self.spend(&b.id, chosen, None);
                if plan.done {
                    tracing::info!(backfill = %b.id, namespace = %b.namespace, name = %b.name,
                        created = b.created + u64::from(created), "backfill done");
                }
                Ok(created)
            }
            BackfillStepped::Waiting => {
                self.spend(&b.id, 0, Some(now + WAITING_EVERY));
                Ok(0)
            }
            BackfillStepped::Stale => Ok(0),
        }
    }

    /// What the backfill fills, read now; `None` (after ending the backfill when its job or
    /// workflow is gone) when there is nothing to do this pass.
    async fn target(
        &self,
        b: &BackfillRecord,
        now: Timestamp,
    ) -> Result<Option<Target>, StoreError> {
        match b.of {
            BackfillOf::Job => {
                let job = self.store.job_get(&b.namespace, &b.name).await?;
                let Some(job) = job.filter(|j| j.uid == b.uid) else {
                    self.end(b, "job deleted").await;
                    return Ok(None);
                };
                if job.spec.paused {
                    return Ok(None);
                }
                Ok(Some(Target {
                    policy: job.spec.concurrency_policy,
                    schedule: job.spec.schedule.clone(),
                    make: Make::Execution(NewExecution {
                        id: String::new(),
                        namespace: job.spec.namespace.clone(),
                        job: job.spec.name.clone(),
                        job_uid: job.uid.clone(),
                        job_version: job.version,
                        shard: job.shard,
                        trigger: Trigger::Backfill,
                        scheduled_at: now,
                        fire_at: now,
                        state: ExecutionState::Queued,
                        run: RunSpec::of(&job.spec),
                    }),
                }))
            }
            BackfillOf::Workflow => {
                let wf = self.store.workflow_get(&b.namespace, &b.name).await?;
                let Some(wf) = wf.filter(|w| w.uid == b.uid) else {
                    self.end(b, "workflow deleted").await;
                    return Ok(None);
                };
                if wf.spec.paused {
                    return Ok(None);
                }
                let Some(schedule) = wf.spec.schedule.clone() else {
                    self.end(b, "the workflow has no schedule any more").await;
                    return Ok(None);
                };
                Ok(Some(Target {
                    policy: wf.spec.concurrency_policy,
                    schedule,
                    make: Make::Run(NewRun {
                        id: String::new(),
                        namespace: wf.spec.namespace.clone(),
                        workflow: wf.spec.name.clone(),
                        workflow_uid: wf.uid.clone(),
                        workflow_version: wf.version,
                        shard: wf.shard,
                        trigger: Trigger::Backfill,
                        scheduled_at: now,
                        fire_at: now,
                        params: wf.spec.params.clone(),
                        recorded_as: None,
                    }),
                }))
            }
        }
    }

    /// The schedule with the calendars it names (a named calendar that does not exist
    /// excludes nothing, as in the trigger pass), or why it cannot be walked.
    async fn schedule(
        &self,
        namespace: &str,
        spec: &ScheduleSpec,
    ) -> Result<Result<Schedule, String>, StoreError> {
        let schedule = match Schedule::compile(spec) {
            Ok(s) => s,
            Err(e) => return Ok(Err(format!("the stored schedule does not compile: {e}"))),
        };
        if spec.exclude_calendars.is_empty() {
            return Ok(Ok(schedule));
        }
        let stored: sundial_core::calendar::NsCalendars = self
            .store
            .calendar_list(namespace)
            .await?
            .into_iter()
            .filter_map(|c| Some((c.name, c.spec.compile().ok()?)))
            .collect();
        let calendars = sundial_core::calendar::named_calendars(spec, &stored);
        Ok(Ok(schedule.with_calendars(calendars)))
    }

    /// Ends `b` as `cancelled` with `reason` (its job or workflow is gone or cannot be
    /// walked); a failure is logged and the next pass tries again.
    async fn end(&self, b: &BackfillRecord, reason: &str) {
        match self
            .store
            .backfill_cancel(&b.namespace, &b.id, Some(reason))
            .await
        {
            Ok(_) | Err(StoreError::Conflict(_)) => {
                tracing::warn!(backfill = %b.id, namespace = %b.namespace, name = %b.name, reason,
                    "backfill cancelled");
            }
            Err(e) => {
                tracing::warn!(backfill = %b.id, error = %e, "ending a backfill failed; retrying");
            }
        }
    }
}

/// What a backfill's slots become, and under which policy.
struct Target {
    policy: ConcurrencyPolicy,
    schedule: ScheduleSpec,
    make: Make,
}

/// The execution or run of a slot, but for its id and slot.
enum Make {
    Execution(NewExecution),
    Run(NewRun),
}
