//! The maintenance services of the PostgreSQL store: the queue vacuum, and the day partitions
//! of the history made ahead of time.

use std::sync::Arc;

use async_trait::async_trait;
use sqlx::PgPool;
use sundial_core::Dur;
use sundial_store::Result;
use sundial_store::maintenance::Service;

use crate::rows::db_err;

/// Vacuums `execution_queue` every `maintenance.queue_vacuum_every` (default 10 s,
/// [`sundial_store::maintenance::QUEUE_VACUUM_EVERY_DEFAULT`]).
///
/// Every execution leaves two dead queue rows (its claim and its completion), 20,000 a second
/// at 10,000 executions a second, while autovacuum visits a database once a minute
/// (`autovacuum_naptime`): between its passes the claim's index scan steps over the dead
/// rows of every execution since (BENCHMARKS.md, "The PostgreSQL queue table"). The table's
/// live rows are only the unfinished executions, so a pass costs about what died since the
/// last one. `SKIP_LOCKED` leaves the table to a pass already running in another process, so
/// the vacuum never waits on the claim or completion paths.
#[derive(Debug)]
pub struct QueueVacuum {
    pool: PgPool,
    every: Dur,
}

impl QueueVacuum {
    /// A vacuum of the queue of the database behind `pool`, every `every`.
    pub fn new(pool: PgPool, every: Dur) -> Self {
        QueueVacuum { pool, every }
    }
}

#[async_trait]
impl Service for QueueVacuum {
    fn name(&self) -> &'static str {
        "queue_vacuum"
    }

    fn every(&self) -> Dur {
        self.every
    }

    /// One `VACUUM (SKIP_LOCKED) execution_queue`; 1 when it ran, 0 once the pool is closed.
    ///
    /// # Errors
    /// The store's, classified (`sundial_store::Error`).
    async fn run_once(&self) -> Result<u64> {
        if self.pool.is_closed() {
            return Ok(0);
        }
        sqlx::raw_sql("VACUUM (SKIP_LOCKED) execution_queue")
            .execute(&self.pool)
            .await
            .map_err(db_err)?;
        Ok(1)
    }
}

/// The history's tables partitioned by day (migration 0010; ARCHITECTURE.md, "History
/// partitions"), in the order the service visits them: (table, partition key).
pub const PARTITIONED: [(&str, &str); 3] = [
    ("executions", "id"),
    ("attempts", "execution_id"),
    ("workflow_runs", "id"),
];

/// How many UTC days after today each pass makes sure have their partitions (3): a pass
/// that fails, or a database that refuses the lock for a while, leaves days of room.
pub const PARTITION_DAYS_AHEAD: i64 = 3;

/// The period of [`HistoryPartitions`]: 1 hour.
pub const PARTITIONS_EVERY: Dur = Dur::from_secs(3600);

/// How long a pass waits for the locks of an attach (100 ms) before it gives up until the
/// next: queries that would lock the default partition queue behind a waiting attach, so the
/// wait is what they could be held up by.
pub const PARTITION_LOCK_TIMEOUT_MS: u16 = 100;

/// Creates the day partitions of the history's tables ahead of time, every
/// [`PARTITIONS_EVERY`]: for today and the [`PARTITION_DAYS_AHEAD`] days after it, by the
/// store's clock, a partition of each table of [`PARTITIONED`] that lacks one.
///
/// Invariants: a day already covered (by `<table>_before`, the rows from before migration
/// 0010) or whose ids the default partition already holds gets no partition (its rows stay
/// where they are); a pass never waits more than [`PARTITION_LOCK_TIMEOUT_MS`] for a lock,
/// so the trigger, claim and completion paths are never held up longer than that.
#[derive(Debug)]
pub struct HistoryPartitions {
    pool: PgPool,
    clock: Option<std::sync::Arc<dyn sundial_clock::Clock>>,
}

impl HistoryPartitions {
    /// The service for the database behind `pool`; `clock` replaces the database's when set
    /// (the store's test clock).
    pub fn new(pool: PgPool, clock: Option<std::sync::Arc<dyn sundial_clock::Clock>>) -> Self {
        HistoryPartitions { pool, clock }
    }
}

/// The advisory lock a pass holds while it makes a partition (`pg_try_advisory_xact_lock`);
/// anything else that makes day partitions takes it too (the bench's loader).
pub const PARTITIONS_LOCK_KEY: i64 = 0x5375_6e64_6961_6c50; // "SundialP"

/// Milliseconds in a UTC day, the span of one history partition.
pub(crate) const DAY_MS: i64 = 86_400_000;

#[async_trait]
impl Service for HistoryPartitions {
    fn name(&self) -> &'static str {
        "history_partitions"
    }

    fn every(&self) -> Dur {
        PARTITIONS_EVERY
    }

    /// Creates the missing partitions of today and the days ahead; returns how many it made
    /// (0 once the pool is closed).
    ///
    /// # Errors
    /// The store's, classified (`sundial_store::Error`): a lock not had within
    /// [`PARTITION_LOCK_TIMEOUT_MS`] is `Contended`, and the next pass tries again.
    async fn run_once(&self) -> Result<u64> {
        if self.pool.is_closed() {
            return Ok(0);
        }
        let today = crate::now_ms(self.clock.as_ref(), &self.pool)
            .await?
            .div_euclid(DAY_MS)
            * DAY_MS;
        let mut made = 0;
        for day in 0..=PARTITION_DAYS_AHEAD {
            for (table, key) in PARTITIONED {
                // One statement, its own transaction: the locks of the attach end with it,
                // even if this process stalls (a paused VM, SIGSTOP) right after sending it.
                let created: bool =
                    sqlx::query_scalar("SELECT sundial_history_day_create($1, $2, $3, $4, $5)")
                        .bind(table)
                        .bind(key)
                        .bind(today + day * DAY_MS)
                        .bind(i32::from(PARTITION_LOCK_TIMEOUT_MS))
                        .bind(PARTITIONS_LOCK_KEY)
                        .fetch_one(&self.pool)
                        .await
                        .map_err(db_err)?;
                made += u64::from(created);
            }
        }
        Ok(made)
    }
}

/// The store's own maintenance services ([`sundial_store::MaintenanceStore::maintenance`]).
pub(crate) fn services(
    store: &crate::PgStore,
    config: &sundial_store::maintenance::MaintenanceConfig,
) -> Vec<Arc<dyn Service>> {
    vec![
        Arc::new(QueueVacuum::new(
            store.pool.clone(),
            config.queue_vacuum_every,
        )),
        Arc::new(HistoryPartitions::new(
            store.pool.clone(),
            store.clock.clone(),
        )),
    ]
}
