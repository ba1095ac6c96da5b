//! Cost of one due-job lookup of the scheduler ([`SchedulerStore::trigger_list_due`]) on the embedded
//! SQLite store, by number of stored jobs.
//!
//! Each size is a fresh database file in a temp dir holding `stored` far-future jobs (next fire
//! time between 1 and 2 days after the clock) plus 100 due ones (fire times in the 100 s before
//! the clock). The lookup is the scheduler's own pass: every shard (the embedded store's
//! scheduler holds all of them), a 5 s lookahead, a limit of 1,000 (the scheduler's batch), so
//! each call returns the 100 due jobs, earliest first. Time is a [`ManualClock`] that never
//! moves, so nothing depends on the wall clock.
//!
//! Reported: time per call (one `trigger_list_due`, decoding the 100 rows included). The
//! `jobs_due` index on `next_fire_at` makes the lookup proportional to what is due, not to
//! what is stored, so the figure should be flat across sizes. Loading is outside the
//! measurement, once per size, in transactions of [`CHUNK`] jobs through
//! [`ApiStore::job_write_batch`]; its wall time is printed to stderr.
//!
//! Run: `cargo bench -p sundial-store-sqlite --bench due_lookup` (`-- --quick` for a smoke run).

use std::hint::black_box;
use std::sync::Arc;
use std::time::Instant;
use sundial_store::prelude::*;

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use jiff::{SignedDuration, Timestamp};
use sundial_clock::{Clock, ManualClock};
use sundial_core::SHARD_COUNT;
use sundial_store::testkit::{job_record, t0};
use sundial_store::{JobWrite, PendingExecutions, TriggerListDue};
use sundial_store_sqlite::SqliteStore;
use tokio::runtime::Runtime;

/// Stored far-future jobs per size.
const SIZES: [u32; 2] = [10_000, 1_000_000];
/// Jobs due at the clock's instant, for every size.
const DUE: u32 = 100;
/// Jobs per `job_write_batch` (one transaction) while loading.
const CHUNK: u32 = 10_000;

/// A loaded database; the temp dir (and the file) goes when it is dropped.
struct Loaded {
    store: SqliteStore,
    _dir: tempfile::TempDir,
}

fn at(t: Timestamp, secs: i64) -> Timestamp {
    t + SignedDuration::from_secs(secs)
}

/// Writes `names` jobs in one transaction, each with its next fire time from `fire_at`.
async fn write_chunk(
    store: &SqliteStore,
    names: impl Iterator<Item = u32>,
    prefix: &str,
    fire_at: impl Fn(u32) -> Timestamp,
) {
    let writes: Vec<JobWrite> = names
        .map(|i| {
            let mut record = job_record("bench", &format!("{prefix}-{i:07}"));
            let fire = fire_at(i);
            record.next_slot_at = Some(fire);
            record.next_fire_at = Some(fire);
            JobWrite {
                record,
                expected_version: None,
                pending: PendingExecutions::Keep,
            }
        })
        .collect();
    store.job_write_batch(&writes).await.expect("load jobs");
}

/// A fresh store with `stored` far-future jobs and [`DUE`] due ones.
async fn load(stored: u32) -> Loaded {
    let dir = tempfile::tempdir().expect("temp dir");
    let url = format!("sqlite://{}", dir.path().join("sundial.db").display());
    let clock: Arc<dyn Clock> = Arc::new(ManualClock::new(t0()));
    let store = SqliteStore::open(&url, clock).await.expect("open store");
    let started = Instant::now();
    for first in (0..stored).step_by(CHUNK as usize) {
        let last = (first + CHUNK).min(stored);
        // Spread over a day, starting a day ahead: never within the lookahead.
        write_chunk(&store, first..last, "far", |i| {
            at(t0(), 86_400 + i64::from(i % 86_400))
        })
        .await;
    }
    write_chunk(&store, 0..DUE, "due", |i| at(t0(), -i64::from(i))).await;
    let due = store
        .trigger_list_due(&scheduler_pass())
        .await
        .expect("due");
    assert_eq!(due.len(), DUE as usize, "every due job, and only those");
    eprintln!(
        "due_lookup: loaded {stored} far-future + {DUE} due jobs in {:.1} s",
        started.elapsed().as_secs_f64()
    );
    Loaded { store, _dir: dir }
}

/// The scheduler's lookup on the embedded store: all shards, 5 s ahead, batches of 1,000.
fn scheduler_pass() -> TriggerListDue {
    TriggerListDue {
        shards: (0..SHARD_COUNT).collect(),
        horizon: at(t0(), 5),
        limit: 1000,
    }
}

fn due_lookup(c: &mut Criterion) {
    let rt = Runtime::new().expect("tokio runtime");
    let query = scheduler_pass();
    let mut group = c.benchmark_group("trigger_list_due");
    for stored in SIZES {
        // Loaded before the benchmark starts, even under a filter that skips it: loading
        // inside the routine would count against `--quick`'s time budget and cut the run to
        // one cold sample.
        let loaded = rt.block_on(load(stored));
        group.bench_function(BenchmarkId::new("stored", stored), |b| {
            b.iter(|| rt.block_on(loaded.store.trigger_list_due(black_box(&query))))
        });
        drop(loaded);
    }
    group.finish();
}

criterion_group!(benches, due_lookup);
criterion_main!(benches);
