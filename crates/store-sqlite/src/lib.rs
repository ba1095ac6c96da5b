//! Sundial's embedded store: SQLite in one file, for one process.
//!
//! Invariants (beyond those of [`sundial_store`]):
//! - One process at most runs the scheduler on a file: the first [`sundial_store::SchedulerStore::shard_lease_renew`]
//!   takes an exclusive OS lock on `<file>.scheduler.lock`, which the OS drops when the process
//!   dies, so a crashed scheduler's successor starts at once and a second live one is refused
//!   with [`Error::InUse`].
//! - Writes go through one connection (SQLite has one writer anyway), each domain step in one
//!   `BEGIN IMMEDIATE` transaction; reads use a small pool of their own (WAL mode).
//! - Time is the injected [`Clock`]'s: in one process it is the only clock there is.
//! - Instants are stored as INTEGER milliseconds since the Unix epoch, UTC.
//! - The write-ahead log is copied back into the database file by a connection of its own
//!   ([`Checkpoint`], a maintenance service, `PRAGMA wal_checkpoint(PASSIVE)`), beside the writer rather than
//!   inside one of its commits; the writer checkpoints itself only when the log passes
//!   [`WRITER_CHECKPOINT_PAGES`], so the log stays bounded if the background pass falls behind.

#![warn(missing_docs)]

mod alerts;
mod backfills;
mod bench;
mod calendars;
mod claim;
mod complete;
mod executions;
mod jobs;
mod leases;
mod liveness;
mod maintenance;
mod nodes;
mod reads;
mod release;
mod retention;
mod rows;
mod runs;
mod secrets;
mod trigger;
mod values;
mod workflows;

use std::path::PathBuf;
use std::str::FromStr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use jiff::Timestamp;
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous};
use sqlx::{Row, SqlitePool};
use sundial_clock::Clock;
use sundial_core::SHARD_COUNT;
use sundial_core::execution::ExecutionState;
use sundial_store::NewRun;
use sundial_store::claim::{ActiveExecution, DueExecution, JobFacts};
use sundial_store::{
    AttemptComplete, AttemptRef, ClaimedExecution, Error, ExecutionClaim, ExecutionRecord,
    JobRecord, JobWrite, NewExecution, Result, RunSpec, ShardLease, ShardLeaseRequest, Signals,
    TriggerCommit, TriggerCommitted,
};
use sundial_store::{StoreBase, StoreShared};

use rows::{commit, db_err, ms, ts};
use workflows::SignalCreated as _;

pub use maintenance::Checkpoint;

/// Classifies a driver error as the store does (see [`Error`]'s table: SQLite's codes by
/// kind, the driver's own errors, never the database's text in the message): for tools and
/// tests that send statements of their own.
pub fn classify(e: sqlx::Error) -> Error {
    rows::db_err(e)
}

/// Log size, in pages, at which the writer checkpoints inside its own commit (SQLite's
/// `wal_autocheckpoint`, <https://sqlite.org/pragma.html#pragma_wal_autocheckpoint>; its
/// default is 1,000): 16,384 pages, 64 MiB at the 4 KiB page size.
pub const WRITER_CHECKPOINT_PAGES: u32 = 16_384;

/// Rows (and statement results) a connection's SQLite thread may hand back before the task
/// that asked for them has read them: 4,096, above a claim batch and its `RETURNING` rows.
/// sqlx runs each connection's statements on a thread of its own and passes results back
/// through a channel of this size (`SqliteConnectOptions::row_buffer_size`, default 50); at
/// 50, a claim of 512 executions stopped that thread about ten times mid-statement until a
/// busy tokio worker polled the claiming task again, holding the one writer idle meanwhile.
pub const ROW_BUFFER: usize = 4_096;

/// The SQLite-backed [`Store`](sundial_store::Store).
#[derive(Debug)]
pub struct SqliteStore {
    writer: SqlitePool,
    /// The connection of the log checkpoint ([`Checkpoint`]). None when the URL names no file
    /// (sqlx also names its in-memory databases, which have no log to checkpoint).
    checkpointer: Option<SqlitePool>,
    reader: SqlitePool,
    clock: Arc<dyn Clock>,
    lock_path: Option<PathBuf>,
    scheduler_lock: Mutex<Option<std::fs::File>>,
    instance: String,
    signals: Signals,
    /// Workflow versions parsed once (they never change once written).
    workflow_specs: sundial_store::workflow::SpecCache,
}

impl SqliteStore {
    /// Opens (creating if missing) the database at `url` (`sqlite://PATH` or `sqlite:PATH`)
    /// and applies pending migrations.
    ///
    /// # Errors
    /// [`Error::Unavailable`] when the file cannot be opened or migrated.
    pub async fn open(url: &str, clock: Arc<dyn Clock>) -> Result<Self> {
        let options = SqliteConnectOptions::from_str(url)
            .map_err(db_err)?
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            .synchronous(SqliteSynchronous::Normal)
            .busy_timeout(Duration::from_secs(10))
            .pragma("temp_store", "memory")
            .row_buffer_size(ROW_BUFFER);
        let lock_path = {
            let file = options.get_filename();
            let name = file.to_string_lossy();
            (!name.is_empty() && name != ":memory:")
                .then(|| PathBuf::from(format!("{name}.scheduler.lock")))
        };
        let writer = SqlitePoolOptions::new()
            .max_connections(1)
            .connect_with(
                options
                    .clone()
                    .pragma("wal_autocheckpoint", WRITER_CHECKPOINT_PAGES.to_string()),
            )
            .await
            .map_err(db_err)?;
        sqlx::migrate!("./migrations")
            .run(&writer)
            .await
            .map_err(|e| Error::Unavailable(Box::new(e)))?;
        let reader = SqlitePoolOptions::new()
            .max_connections(4)
            .connect_with(options.clone().read_only(true))
            .await
            .map_err(db_err)?;
        let checkpointer = if lock_path.is_some() {
            let pool = SqlitePoolOptions::new()
                .max_connections(1)
                .connect_with(options)
                .await
                .map_err(db_err)?;
            Some(pool)
        } else {
            None
        };
        Ok(SqliteStore {
            writer,
            checkpointer,
            reader,
            clock,
            lock_path,
            scheduler_lock: Mutex::new(None),
            instance: uuid::Uuid::now_v7().to_string(),
            signals: Signals::new(),
            workflow_specs: Default::default(),
        })
    }

    async fn begin(&self) -> Result<sqlx::Transaction<'_, sqlx::Sqlite>> {
        self.writer
            .begin_with("BEGIN IMMEDIATE")
            .await
            .map_err(db_err)
    }

    fn take_scheduler_lock(&self) -> Result<()> {
        let mut held = self
            .scheduler_lock
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        if held.is_some() {
            return Ok(());
        }
        let Some(path) = &self.lock_path else {
            return Ok(());
        };
        let file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(path)
            .map_err(|e| Error::Unavailable(Box::new(e)))?;
        match file.try_lock() {
            Ok(()) => {
                *held = Some(file);
                Ok(())
            }
            Err(std::fs::TryLockError::WouldBlock) => Err(Error::InUse(format!(
                "another process runs the scheduler on this SQLite database ({} is locked); \
                 an embedded store serves one scheduler — use PostgreSQL to run several",
                path.display()
            ))),
            Err(std::fs::TryLockError::Error(e)) => Err(Error::Unavailable(Box::new(e))),
        }
    }
}

#[async_trait]
impl StoreBase for SqliteStore {
    async fn now(&self) -> Result<Timestamp> {
        Ok(self.clock.now())
    }

    fn signals(&self) -> Signals {
        self.signals.clone()
    }
}

sundial_store::forward_store_traits!(SqliteStore);

type Tx<'a> = sqlx::Transaction<'a, sqlx::Sqlite>;
