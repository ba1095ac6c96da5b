//! A worker's liveness lease taken, renewed and given up (docs/guarantees.md, "Workers"),
//! written once over a store's [`Writer`]: one statement each, by the store's clock. Its
//! take-over by a reaper ([`worker_lease_reap`]), which marks the attempts recorded under it,
//! and a claim's check that its lease stands ([`worker_lease_holds`]) are written once over
//! the store's open [`Transaction`], with what the dialects say differently (the lock a claim
//! holds on the lease row, the marking that PostgreSQL also makes on its queue table) in
//! [`LeaseDialect`].
//!
//! Invariants: a lease's epoch is new for every take (the store's sequence), so an epoch names
//! one lease for ever; a renewal or a release of an epoch whose row a reaper deleted changes
//! nothing; a release ends the lease at once (its expiry moved just before now, never later),
//! so a reaper may take it over at its next pass. A lease stands until a reaper takes it over
//! (deletes its row), even past its expiry; a take-over never deletes a row whose expiry is
//! not before the reaper's now, and it marks, in the same transaction, every running attempt
//! whose lease row is gone as lapsed just before that now.

use sundial_core::Dur;

use crate::reads::{Reader, Statement, Transaction, Writer};
use crate::{Error, Result, WorkerLease};

/// What the stores say differently about the worker leases' take-over and a claim's hold on
/// a lease, supplied by each store's [`Reader`].
pub trait LeaseDialect: Reader {
    /// What the `SELECT` of a lease row in a claim's transaction ends with to keep a
    /// take-over out until the transaction ends (` FOR KEY SHARE`, which lets renewals go
    /// on), or nothing where the one writer keeps it out.
    const LEASE_HOLD: &'static str;

    /// The statement that marks every running attempt whose lease row is gone (and whose
    /// lease did not lapse already) as lapsed at `$1` − 1, `$1` the reaper's now (Unix ms,
    /// UTC), everywhere the store keeps an execution's lease expiry.
    const MARK_ORPHANED: &'static str;
}

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

/// Takes over up to `limit` leases that expired before `now` (the store's now, Unix ms, UTC,
/// read in `tx`), the longest expired first: deletes their rows and marks every running
/// attempt whose lease row is gone (not only those of the epochs taken over now) as lapsed
/// at `now` − 1, so the lapsed-attempt pass retries or fails them. Returns the epochs taken
/// over, none when no lease had expired (then nothing is marked). The caller commits.
///
/// # Errors
/// The store's classified error; [`Error::Corrupt`] for an epoch that does not decode.
pub async fn worker_lease_reap<T: Transaction>(tx: &mut T, now: i64, limit: u32) -> Result<Vec<i64>>
where
    T::Store: LeaseDialect,
{
    // On PostgreSQL the DELETE waits for the claims in flight under these epochs (they hold
    // the rows with `LeaseDialect::LEASE_HOLD`); the marking is a statement of its own, so it
    // reads what those claims committed.
    let taken = Statement::new(
        "DELETE FROM worker_leases WHERE epoch IN \
           (SELECT epoch FROM worker_leases WHERE expires_at < $1 ORDER BY expires_at LIMIT $2) \
         AND expires_at < $1 RETURNING epoch",
    )
    .bind(now)
    .bind(i64::from(limit));
    let epochs = tx
        .rows(&taken)
        .await?
        .iter()
        .map(|row| T::Store::int(row, 0))
        .collect::<Result<Vec<i64>>>()?;
    if !epochs.is_empty() {
        let mark = Statement::new(<T::Store as LeaseDialect>::MARK_ORPHANED).bind(now);
        tx.execute(&mark).await?;
    }
    Ok(epochs)
}

/// Whether the worker lease `epoch` still stands (no reaper took it over), read in `tx` and
/// held until `tx` ends ([`LeaseDialect::LEASE_HOLD`]) so no take-over comes in between.
///
/// # Errors
/// The store's classified error.
pub async fn worker_lease_stands<T: Transaction>(tx: &mut T, epoch: i64) -> Result<bool>
where
    T::Store: LeaseDialect,
{
    let sql = format!(
        "SELECT epoch FROM worker_leases WHERE epoch = $1{}",
        <T::Store as LeaseDialect>::LEASE_HOLD
    );
    Ok(tx.row(&Statement::new(sql).bind(epoch)).await?.is_some())
}

/// Checks in a claim's transaction `tx` that the worker lease `epoch` stands, holding it as
/// [`worker_lease_stands`] does.
///
/// # Errors
/// [`Error::StaleFence`] when a reaper took the lease over: the worker must take a new one;
/// the store's classified error.
pub async fn worker_lease_holds<T: Transaction>(tx: &mut T, epoch: i64) -> Result<()>
where
    T::Store: LeaseDialect,
{
    if worker_lease_stands(tx, epoch).await? {
        Ok(())
    } else {
        Err(Error::StaleFence(format!(
            "worker lease {epoch} was taken over by a reaper"
        )))
    }
}
