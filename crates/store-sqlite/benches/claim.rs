//! Cost of the claim path of the embedded SQLite store: [`WorkerStore::execution_claim`] of a batch
//! of due executions, alone and followed by their completion ([`WorkerStore::attempt_complete_batch`]).
//!
//! Each batch size `n` (256 and 1,000 executions per claim) has a fresh database file in a
//! temp dir with `n` every-10 s jobs (`allow` concurrency, the default). One iteration:
//! 1. setup, not measured: the clock (a [`ManualClock`]) moves to the next slot and one
//!    [`SchedulerStore::trigger_commit`] inserts one execution per job for it, so `n` executions are
//!    due exactly now (no misfire judgement, nothing early);
//! 2. measured: one `execution_claim` with a limit of `n`, which hands out all `n`;
//! 3. `claim`: completions not measured; `claim_complete`: measured too — every attempt
//!    `succeeded`, written in `attempt_complete_batch` calls of at most 256 (the worker's group
//!    commit, `COMPLETION_BATCH` in crates/worker).
//!
//! Reported: time per iteration (one claim of `n`, plus the completions of `n` for
//! `claim_complete`) and, as throughput, executions per second; time per execution is the
//! time per iteration divided by `n`. Completed executions stay in the file as history, as
//! they would in production; the claim reads through the `executions_due` index and does not
//! see them.
//!
//! Run: `cargo bench -p sundial-store-sqlite --bench claim` (`-- --quick` for a smoke run).

use std::sync::Arc;
use std::time::{Duration, Instant};
use sundial_store::prelude::*;

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use jiff::{SignedDuration, Timestamp};
use sundial_clock::{Clock, ManualClock};
use sundial_core::Dur;
use sundial_core::execution::AttemptOutcome;
use sundial_store::testkit::{execution, job_trigger, new_job_writes, t0};
use sundial_store::{
    AttemptComplete, AttemptRef, ClaimedExecution, ExecutionClaim, JobRecord, NextStep, ShardLease,
    ShardLeaseRequest, TriggerCommit,
};
use sundial_store_sqlite::SqliteStore;
use tokio::runtime::Runtime;

/// Executions claimed per call.
const BATCHES: [u32; 2] = [256, 1000];
/// Completions per `attempt_complete_batch` call, as the worker writes them.
const COMPLETION_BATCH: usize = 256;
/// Seconds between two slots of a job, and how far the clock moves per iteration.
const EVERY_S: i64 = 10;

/// One store with `n` jobs, triggered one slot at a time.
struct Queue {
    store: SqliteStore,
    clock: Arc<ManualClock>,
    jobs: Vec<JobRecord>,
    leases: Vec<ShardLease>,
    /// The slot the next [`Queue::fill`] triggers.
    slot: Timestamp,
    n: u32,
    _dir: tempfile::TempDir,
}

impl Queue {
    async fn new(n: u32) -> Queue {
        let dir = tempfile::tempdir().expect("temp dir");
        let url = format!("sqlite://{}", dir.path().join("sundial.db").display());
        let clock = Arc::new(ManualClock::new(t0()));
        let store_clock: Arc<dyn Clock> = clock.clone();
        let store = SqliteStore::open(&url, store_clock)
            .await
            .expect("open store");
        let jobs = store
            .job_write_batch(&new_job_writes("bench", n as usize))
            .await
            .expect("create jobs");
        // Long enough for any number of iterations at EVERY_S apiece.
        let leases = store
            .shard_lease_renew(&ShardLeaseRequest {
                node: "bench".into(),
                ttl: Dur::from_secs(10 * 365 * 86_400),
            })
            .await
            .expect("shard leases");
        Queue {
            store,
            clock,
            jobs,
            leases,
            slot: t0(),
            n,
            _dir: dir,
        }
    }

    /// Moves the clock to the next slot and triggers it for every job: `n` executions due now.
    async fn fill(&mut self) {
        let slot = self.slot;
        let next = slot + SignedDuration::from_secs(EVERY_S);
        self.clock.set(slot);
        let jobs = self
            .jobs
            .iter()
            .map(|job| job_trigger(job, slot, Some(next), vec![execution(job, slot)]))
            .collect();
        let done = self
            .store
            .trigger_commit(&TriggerCommit {
                node: "bench".into(),
                leases: self.leases.clone(),
                jobs,
                handoff: None,
            })
            .await
            .expect("trigger");
        assert_eq!(done.executions_inserted, self.n, "one execution per job");
        self.slot = next;
    }

    /// Claims every due execution in one call.
    async fn claim(&self) -> Vec<ClaimedExecution> {
        let claimed = self
            .store
            .execution_claim(&ExecutionClaim {
                worker: "bench".into(),
                limit: self.n,
                rate_limits: Default::default(),
                ahead_ms: 0,
                epoch: None,
                on_time_first: false,
            })
            .await
            .expect("claim");
        assert_eq!(claimed.len(), self.n as usize, "every due execution");
        claimed
    }

    /// Records every claimed attempt `succeeded`, [`COMPLETION_BATCH`] per call.
    async fn complete(&self, claimed: &[ClaimedExecution]) {
        let completions: Vec<AttemptComplete> = claimed
            .iter()
            .map(|c| AttemptComplete {
                attempt: AttemptRef {
                    id: c.id.clone(),
                    attempt: c.attempt,
                },
                outcome: AttemptOutcome::Succeeded,
                status_code: Some(200),
                error: None,
                detail: None,
                next: NextStep::Succeeded,
                only_if_lapsed: false,
                output: None,
            })
            .collect();
        for batch in completions.chunks(COMPLETION_BATCH) {
            let applied = self
                .store
                .attempt_complete_batch(batch)
                .await
                .expect("complete");
            assert!(applied.iter().all(|a| *a), "every completion applies");
        }
    }
}

fn claim_path(c: &mut Criterion) {
    let rt = Runtime::new().expect("tokio runtime");
    let mut group = c.benchmark_group("claim_path");
    // The untimed setup costs about as much as the timed part: fewer, longer samples.
    group.sample_size(20);
    group.warm_up_time(Duration::from_secs(1));
    for n in BATCHES {
        group.throughput(Throughput::Elements(u64::from(n)));
        let mut queue = rt.block_on(Queue::new(n));
        group.bench_function(BenchmarkId::new("claim", n), |b| {
            let q = &mut queue;
            b.iter_custom(|iters| {
                let mut measured = Duration::ZERO;
                for _ in 0..iters {
                    rt.block_on(q.fill());
                    let start = Instant::now();
                    let claimed = rt.block_on(q.claim());
                    measured += start.elapsed();
                    rt.block_on(q.complete(&claimed));
                }
                measured
            })
        });
        group.bench_function(BenchmarkId::new("claim_complete", n), |b| {
            let q = &mut queue;
            b.iter_custom(|iters| {
                let mut measured = Duration::ZERO;
                for _ in 0..iters {
                    rt.block_on(q.fill());
                    let start = Instant::now();
                    let claimed = rt.block_on(q.claim());
                    rt.block_on(q.complete(&claimed));
                    measured += start.elapsed();
                }
                measured
            })
        });
        drop(queue);
    }
    group.finish();
}

criterion_group!(benches, claim_path);
criterion_main!(benches);
