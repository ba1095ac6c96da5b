//! The maintenance service of the embedded store: the log checkpoint.

use std::sync::Arc;

use async_trait::async_trait;
use sqlx::SqlitePool;
use sundial_core::Dur;
use sundial_store::Result;
use sundial_store::maintenance::Service;

use crate::rows::db_err;

/// Copies committed log frames into the database file every `maintenance.checkpoint_every`
/// (default 100 ms, [`sundial_store::maintenance::CHECKPOINT_EVERY_DEFAULT`]) on a connection
/// of its own, with `PRAGMA wal_checkpoint(PASSIVE)`: it copies what no reader still needs
/// and never waits for the writer or the readers (<https://sqlite.org/wal.html#ckpt>), so that
/// the writer's commits seldom do it themselves (the writer still does past
/// [`crate::WRITER_CHECKPOINT_PAGES`], which bounds the log if this falls behind).
#[derive(Debug)]
pub struct Checkpoint {
    pool: SqlitePool,
    every: Dur,
}

impl Checkpoint {
    /// A checkpoint of the database behind `pool` every `every`.
    pub fn new(pool: SqlitePool, every: Dur) -> Self {
        Checkpoint { pool, every }
    }
}

#[async_trait]
impl Service for Checkpoint {
    fn name(&self) -> &'static str {
        "checkpoint"
    }

    fn every(&self) -> Dur {
        self.every
    }

    /// One passive checkpoint; returns the log frames it copied back.
    ///
    /// # Errors
    /// The store's, classified (`sundial_store::Error`).
    async fn run_once(&self) -> Result<u64> {
        let (_busy, _log, copied): (i64, i64, i64) =
            sqlx::query_as("PRAGMA wal_checkpoint(PASSIVE)")
                .fetch_one(&self.pool)
                .await
                .map_err(db_err)?;
        Ok(u64::try_from(copied).unwrap_or(0))
    }
}

/// The store's own maintenance services ([`sundial_store::MaintenanceStore::maintenance`]).
pub(crate) fn services(
    store: &crate::SqliteStore,
    config: &sundial_store::maintenance::MaintenanceConfig,
) -> Vec<Arc<dyn Service>> {
    store
        .checkpointer
        .iter()
        .map(|pool| {
            Arc::new(Checkpoint::new(pool.clone(), config.checkpoint_every))
                as Arc<dyn sundial_store::maintenance::Service>
        })
        .collect()
}
