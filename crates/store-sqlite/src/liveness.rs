//! Worker liveness leases (docs/guarantees.md, "Workers"): one row of
//! `worker_leases` per lease (migration 0013), taken, renewed in one statement, given up, and
//! taken over by the reaper with every attempt recorded under it.
//!
//! Invariants: a lease stands until a reaper takes it over (deletes its row), even past its
//! expiry; the take-over and the marking of its attempts are one write transaction, and a claim
//! under an epoch checks the lease row in its own, so (one writer at a time) no attempt is
//! recorded under an epoch after its take-over.

use super::*;

use crate::reads::SqlTx;
use sundial_store::steps::liveness::{self as steps, LeaseDialect};

/// No lock on the lease row (the one writer keeps a take-over out); the orphaned attempts
/// marked on the execution rows (the running rows are read through `executions_lease`).
impl LeaseDialect for SqliteStore {
    const LEASE_HOLD: &'static str = "";
    const MARK_ORPHANED: &'static str = "UPDATE executions SET lease_expires_at = $1 - 1 \
         WHERE state = 'running' AND worker_epoch IS NOT NULL \
           AND (lease_expires_at IS NULL OR lease_expires_at >= $1) \
           AND NOT (executions.worker_epoch IS NULL OR EXISTS \
             (SELECT 1 FROM worker_leases w WHERE w.epoch = executions.worker_epoch))";
}

pub(crate) async fn worker_lease_reap(store: &SqliteStore, limit: u32) -> Result<Vec<i64>> {
    let now = ms(store.clock.now());
    let mut tx = store.begin().await?;
    let epochs = steps::worker_lease_reap(&mut SqlTx(&mut tx), now, limit).await?;
    commit(tx).await?;
    Ok(epochs)
}

/// Checks in the claim's transaction `tx` that the worker lease `epoch` stands.
///
/// # Errors
/// [`Error::StaleFence`] when a reaper took the lease over: the worker must take a new one.
pub(crate) async fn check_for_claim(tx: &mut Tx<'_>, epoch: i64) -> Result<()> {
    steps::worker_lease_holds(&mut SqlTx(tx), epoch).await
}

/// Whether the worker lease `epoch` still stands (no reaper took it over), read in `tx`: the
/// single writer keeps a take-over out until `tx` ends.
pub(crate) async fn lease_stands(tx: &mut Tx<'_>, epoch: i64) -> Result<bool> {
    steps::worker_lease_stands(&mut SqlTx(tx), epoch).await
}

/// The SQL test that an execution's attempt's worker lease, if it runs under one, still stands.
pub(crate) const WORKER_LEASE_STANDS: &str = "(executions.worker_epoch IS NULL OR EXISTS \
    (SELECT 1 FROM worker_leases w WHERE w.epoch = executions.worker_epoch))";
