//! The maintenance service of the PostgreSQL store: the queue vacuum.

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
