//! Worker liveness leases (docs/guarantees.md, "Workers"): one row of
//! `worker_leases` per lease (migration 0013), taken, renewed in one statement, given up, and
//! taken over by the reaper with every attempt recorded under it.
//!
//! Invariants: a lease stands until a reaper takes it over (deletes its row), even past its
//! expiry; a claim under an epoch locks the lease row (`FOR KEY SHARE`) in its transaction, so a
//! take-over (the row's `DELETE`) waits for a claim in flight, and the attempts that claim
//! recorded are marked by the take-over's next statement, which reads after the claim's commit.

use super::*;

use crate::reads::SqlTx;
use sundial_store::steps::liveness::{self as steps, LeaseDialect};

/// The lease row held `FOR KEY SHARE` by a claim (renewals go on, a take-over waits for the
/// claim); the orphaned attempts marked on the execution row, then on its queue row (the
/// store's lock order), the look at the queue paid only when a lease was taken over.
impl LeaseDialect for PgStore {
    const LEASE_HOLD: &'static str = " FOR KEY SHARE";
    const MARK_ORPHANED: &'static str = "WITH gone AS (SELECT id FROM execution_queue q \
           WHERE q.worker_epoch IS NOT NULL \
           AND NOT EXISTS (SELECT 1 FROM worker_leases w WHERE w.epoch = q.worker_epoch)), \
         e AS (UPDATE executions x SET lease_expires_at = $1 - 1 \
           WHERE x.id = ANY(ARRAY(SELECT id FROM gone)) AND x.state = 'running' \
             AND x.worker_epoch IS NOT NULL \
             AND (x.lease_expires_at IS NULL OR x.lease_expires_at >= $1) \
           RETURNING x.id) \
         UPDATE execution_queue q SET lease_expires_at = $1 - 1 \
           WHERE q.id = ANY(ARRAY(SELECT id FROM e))";
}

pub(crate) async fn worker_lease_reap(store: &PgStore, limit: u32) -> Result<Vec<i64>> {
    let mut tx = store.begin().await?;
    let now = store.now_ms(&mut *tx).await?;
    let epochs = steps::worker_lease_reap(&mut SqlTx(&mut tx), now, limit).await?;
    commit(tx).await?;
    Ok(epochs)
}

/// Locks the worker lease `epoch` for a claim in `tx` (`FOR KEY SHARE`: renewals go on, a
/// take-over waits for the claim).
///
/// # Errors
/// [`Error::StaleFence`] when a reaper took the lease over: the worker must take a new one.
pub(crate) async fn lock_for_claim(tx: &mut Tx<'_>, epoch: i64) -> Result<()> {
    steps::worker_lease_holds(&mut SqlTx(tx), epoch).await
}

/// Locks the worker lease `epoch` in `tx` as [`lock_for_claim`] does; `false` when a reaper
/// took it over (nothing locked).
pub(crate) async fn lock_if_standing(tx: &mut Tx<'_>, epoch: i64) -> Result<bool> {
    steps::worker_lease_stands(&mut SqlTx(tx), epoch).await
}

/// The SQL test that an attempt's worker lease, if it runs under one, still stands: `x` names
/// the execution row.
pub(crate) const WORKER_LEASE_STANDS: &str = "(x.worker_epoch IS NULL OR EXISTS \
    (SELECT 1 FROM worker_leases w WHERE w.epoch = x.worker_epoch))";
