//! `--expired N` of `sundial bench burst|steady`: N finished executions of jobs that no longer
//! exist, one attempt each, finished 60 days ago, written through the store's
//! [`BenchStore`] before the nodes start, so that history retention (default 30 days) prunes
//! them all while the workload runs (BENCHMARKS.md, "Retention under load"), in the namespace
//! [`NAMESPACE`]. On PostgreSQL their days get partitions of their own, so retention drops
//! them a day at a time. Also the figures the report gives: how many of them are left, the
//! database's size, and the executions in each state at the end of a run.

use std::collections::BTreeMap;
use std::sync::Arc;

use anyhow::Context as _;
use jiff::{SignedDuration, Timestamp};
use sundial_clock::SystemClock;
use sundial_store::bench::{BenchStore, ExpiredLoad};
use sundial_store_postgres::PgStore;
use sundial_store_sqlite::SqliteStore;

/// The namespace the expired executions are written in.
pub(crate) const NAMESPACE: &str = "bench-history";

/// Executions written per statement.
const CHUNK: u64 = 500_000;

/// The store at `url` (migrated) as a [`BenchStore`].
///
/// # Errors
/// The store cannot be opened.
async fn open(url: &str) -> anyhow::Result<Box<dyn BenchStore>> {
    Ok(if url.starts_with("sqlite:") {
        Box::new(SqliteStore::open(url, Arc::new(SystemClock)).await?)
    } else {
        Box::new(PgStore::open(url, None).await?)
    })
}

/// Writes `n` expired executions (and an attempt each) into the store at `url`, migrating it
/// first, then checkpoints it.
///
/// # Errors
/// The store cannot be opened or written.
pub(crate) async fn load_expired(url: &str, n: u64) -> anyhow::Result<()> {
    let store = open(url).await?;
    let base_ms = (Timestamp::now() - SignedDuration::from_hours(60 * 24)).as_millisecond();
    let started = std::time::Instant::now();
    let mut first = 1u64;
    while first <= n {
        let last = (first + CHUNK - 1).min(n);
        store
            .load_expired(&ExpiredLoad {
                namespace: NAMESPACE.into(),
                first,
                last,
                base_ms,
            })
            .await
            .context("--expired")?;
        eprint!("\rloaded {last}/{n} expired executions");
        first = last + 1;
    }
    eprintln!(" in {:.1} s", started.elapsed().as_secs_f64());
    checkpoint_store(store.as_ref()).await;
    Ok(())
}

/// Checkpoints the store at `url` after a load ([`BenchStore::checkpoint`]), so that the
/// measured phase does not pay for the load's log. PostgreSQL's `CHECKPOINT` needs superuser
/// or the `pg_checkpoint` role (PostgreSQL 15); without them, or when the store cannot be
/// opened, the bench says so and goes on.
pub(crate) async fn checkpoint(url: &str) {
    match open(url).await {
        Ok(store) => checkpoint_store(store.as_ref()).await,
        Err(e) => eprintln!("could not open the store to checkpoint it ({e:#})"),
    }
}

async fn checkpoint_store(store: &dyn BenchStore) {
    match store.checkpoint().await {
        Ok(()) => eprintln!("checkpointed the store after the load"),
        Err(e) => eprintln!(
            "could not checkpoint the store after the load ({e}); the measured phase pays for the load's log"
        ),
    }
}

/// The loaded executions still in the store, and the database's size in bytes
/// ([`BenchStore::storage_bytes`]).
///
/// # Errors
/// The store cannot be read.
pub(crate) async fn left(url: &str) -> anyhow::Result<(u64, u64)> {
    let store = open(url).await?;
    let rows = store
        .execution_counts(Some(NAMESPACE))
        .await?
        .values()
        .sum();
    Ok((rows, store.storage_bytes().await?))
}

/// How many executions the store at `url` holds in each state (`succeeded`, `missed`,
/// `retry_wait`, ...), read once a run has ended, so a report says what a run that fell
/// behind left undone and what the misfire policy recorded instead of running.
///
/// # Errors
/// The store cannot be read.
pub(crate) async fn executions_by_state(url: &str) -> anyhow::Result<BTreeMap<String, u64>> {
    Ok(open(url).await?.execution_counts(None).await?)
}
