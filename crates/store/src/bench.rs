//! What load generators need of a store beyond the roles' steps (`sundial bench`, figures in
//! BENCHMARKS.md): history written in bulk as if years of operation had left it, and counts
//! read once a run has ended. Not part of [`crate::Store`]: no role of the server holds it and
//! nothing the API accepts reaches it.
//!
//! Invariants: the rows [`BenchStore::load_expired`] writes are ones the store's own steps
//! could have written (a succeeded execution of a job that no longer exists, with its one
//! attempt; on PostgreSQL an id that leads with its slot time, in a partition of its day), so
//! history retention and every read treat them as real history.

use std::collections::BTreeMap;

use async_trait::async_trait;

use crate::Result;
use crate::reads::{Reader, Statement, Transaction};

/// Expired history to write: executions number `first..=last` (1-based) of `namespace`.
///
/// Execution `i` is of job `old-{i % 1000}`, shard `i % 1024`; it was scheduled, fired and
/// started at `base_ms + i` (Unix milliseconds, UTC) and succeeded 50 ms later on its first
/// attempt (HTTP 200).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExpiredLoad {
    /// The namespace the executions are written in.
    pub namespace: String,
    /// The first execution's number (1 or more).
    pub first: u64,
    /// The last execution's number, inclusive.
    pub last: u64,
    /// The instant execution 0 would have, in Unix milliseconds (UTC).
    pub base_ms: i64,
}

/// A store's support for load generators.
#[async_trait]
pub trait BenchStore: Send + Sync {
    /// Writes the executions of `load` and an attempt each, in one statement per table; on
    /// PostgreSQL the partitions of their days are made first (ARCHITECTURE.md, "History
    /// partitions"), so that retention drops them a day at a time.
    ///
    /// # Errors
    /// [`crate::Error::Contended`] (a unique violation; nothing written) when an execution of
    /// the same number was written before in any namespace, the ids being made from the
    /// numbers; [`crate::Error::Defect`] for a number past `i64::MAX`; a database error
    /// otherwise.
    async fn load_expired(&self, load: &ExpiredLoad) -> Result<()>;

    /// Writes what the database's log holds into its files, so that work measured next does
    /// not pay for a bulk load's write-back: PostgreSQL's `CHECKPOINT`, SQLite's
    /// `wal_checkpoint(TRUNCATE)`.
    ///
    /// # Errors
    /// A database error (on PostgreSQL, a user who may not run `CHECKPOINT`).
    async fn checkpoint(&self) -> Result<()>;

    /// How many executions the store holds in each state (`succeeded`, `missed`, ...), of
    /// `namespace` or of every namespace.
    ///
    /// # Errors
    /// A database error.
    async fn execution_counts(&self, namespace: Option<&str>) -> Result<BTreeMap<String, u64>>;

    /// The database's size in bytes: PostgreSQL's `pg_database_size`, or SQLite's file and
    /// its write-ahead log (0 for a database with no file).
    ///
    /// # Errors
    /// A database error.
    async fn storage_bytes(&self) -> Result<u64>;
}

/// Rows of (state, count) as the map [`BenchStore::execution_counts`] answers with; a
/// negative count (which no database returns) counts as 0.
pub fn counts_by_state(rows: Vec<(String, i64)>) -> BTreeMap<String, u64> {
    rows.into_iter()
        .map(|(state, n)| (state, u64::try_from(n).unwrap_or(0)))
        .collect()
}

/// The execution number `n` of an [`ExpiredLoad`] as the databases' 64-bit integer.
///
/// # Errors
/// [`crate::Error::Defect`] for a number past `i64::MAX`.
pub fn number(n: u64) -> Result<i64> {
    i64::try_from(n)
        .map_err(|_| crate::Error::Defect(format!("execution number {n} too large").into()))
}

/// Writes the executions of `load` and their attempts in the caller's open transaction `tx`,
/// with the store's two statements `[executions, attempts]`: `$1` the load's `base_ms` (Unix
/// ms, UTC), `$2` and `$3` its first and last numbers, `$4` its namespace. The caller commits.
///
/// # Errors
/// [`crate::Error::Defect`] for a number past `i64::MAX`; the store's classified error
/// ([`crate::Error::Contended`] for a unique violation).
pub async fn write_expired<T: Transaction>(
    tx: &mut T,
    load: &ExpiredLoad,
    statements: [&str; 2],
) -> Result<()> {
    let (first, last) = (number(load.first)?, number(load.last)?);
    for sql in statements {
        let st = Statement::new(sql)
            .bind(load.base_ms)
            .bind(first)
            .bind(last)
            .bind(&load.namespace);
        tx.execute(&st).await?;
    }
    Ok(())
}

/// [`BenchStore::execution_counts`] read on the store's read connections.
///
/// # Errors
/// The store's classified error; [`crate::Error::Corrupt`] for a row that does not decode.
pub async fn execution_counts<S: Reader>(
    store: &S,
    namespace: Option<&str>,
) -> Result<BTreeMap<String, u64>> {
    let st = Statement::new(
        "SELECT state, count(*) FROM executions \
         WHERE CAST($1 AS TEXT) IS NULL OR namespace = $1 GROUP BY state",
    )
    .bind(namespace);
    let rows = store
        .rows(&st)
        .await?
        .iter()
        .map(|row| Ok((S::text(row)?, S::int(row, 1)?)))
        .collect::<Result<Vec<_>>>()?;
    Ok(counts_by_state(rows))
}

/// The 64-bit integer the store's read of `sql` (no parameters, one row) answers with, as a
/// size in bytes: 0 for a negative one (which no database returns) or no row.
///
/// # Errors
/// The store's classified error; [`crate::Error::Corrupt`] for a value that does not decode.
pub async fn size<S: Reader>(store: &S, sql: &str) -> Result<u64> {
    let bytes = match store.row(&Statement::new(sql)).await? {
        Some(row) => S::int(&row, 0)?,
        None => 0,
    };
    Ok(u64::try_from(bytes).unwrap_or(0))
}
