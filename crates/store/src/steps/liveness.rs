//! A worker's liveness lease taken, renewed and given up (docs/guarantees.md, "Workers"),
//! written once over a store's [`Writer`]: one statement each, by the store's clock. Its
//! take-over by a reaper, which marks the attempts recorded under it, stays in each store
//! (PostgreSQL also keeps a queue table to mark).
//!
//! Invariants: a lease's epoch is new for every take (the store's sequence), so an epoch names
//! one lease for ever; a renewal or a release of an epoch whose row a reaper deleted changes
//! nothing; a release ends the lease at once (its expiry moved just before now, never later),
//! so a reaper may take it over at its next pass.

use sundial_core::Dur;

use crate::reads::{Statement, Writer};
use crate::{Error, Result, WorkerLease};

/// Takes a new lease for `worker`, expiring `ttl` after the store's now.
///
/// # Errors
/// The store's classified error; [`Error::Corrupt`] when the insert returns no row or an
/// expiry that is no instant.
pub async fn worker_lease_acquire<W: Writer>(
    store: &W,
    worker: &str,
    ttl: Dur,
) -> Result<WorkerLease> {
    let now = store.now().await?;
    let st = Statement::new(
        "INSERT INTO worker_leases (worker, acquired_at, renewed_at, expires_at) \
         VALUES ($1, $2, $2, $2 + $3) RETURNING epoch, expires_at",
    )
    .bind(worker)
    .bind(now)
    .bind(ttl.as_millis_i64());
    let row = store
        .returning(&st)
        .await?
        .ok_or_else(|| Error::Corrupt("worker lease insert returned no row".into()))?;
    Ok(WorkerLease {
        epoch: W::int(&row, 0)?,
        expires_at: super::instant(W::int(&row, 1)?)?,
    })
}

/// Renews lease `epoch` to expire `ttl` after the store's now; `None` when a reaper took it
/// over (its row is gone).
///
/// # Errors
/// The store's classified error; [`Error::Corrupt`] for an expiry that is no instant.
pub async fn worker_lease_renew<W: Writer>(
    store: &W,
    epoch: i64,
    ttl: Dur,
) -> Result<Option<jiff::Timestamp>> {
    let now = store.now().await?;
    let st = Statement::new(
        "UPDATE worker_leases SET renewed_at = $2, expires_at = $2 + $3 WHERE epoch = $1 \
         RETURNING expires_at",
    )
    .bind(epoch)
    .bind(now)
    .bind(ttl.as_millis_i64());
    match store.returning(&st).await? {
        Some(row) => Ok(Some(super::instant(W::int(&row, 0)?)?)),
        None => Ok(None),
    }
}

/// Gives lease `epoch` up: its expiry moves to just before the store's now (never later), so
/// the next reaper pass takes it over; nothing when it is gone already.
///
/// # Errors
/// The store's classified error.
pub async fn worker_lease_release<W: Writer>(store: &W, epoch: i64) -> Result<()> {
    let now = store.now().await?;
    let st = Statement::new(
        "UPDATE worker_leases SET expires_at = CASE WHEN expires_at < $2 - 1 THEN expires_at \
           ELSE $2 - 1 END WHERE epoch = $1",
    )
    .bind(epoch)
    .bind(now);
    store.execute(&st).await?;
    Ok(())
}
