//! Backfills (docs/time.md, "Backfill"): the creation, the driver's reads, the fenced step and
//! the cancel are written once in `sundial_store::steps::backfill`, the API's reads in
//! `sundial_store::steps::listings`. This file keeps what PostgreSQL does its own way in a
//! step: the database's clock, the shard fence, the workflow row locked for run creation, and
//! the workers woken by `NOTIFY` inside the transaction when executions went in. A step locks
//! the backfill row (`FOR UPDATE`) after the shard fence, so a cancel waits for an in-flight
//! step and a step after a cancel writes nothing.

use super::*;
use crate::reads::SqlTx;
use sundial_store::steps::backfill::{self as steps, BackfillStatements};
use sundial_store::steps::run_create;
use sundial_store::steps::trigger::Insert;
use sundial_store::{BackfillRecord, BackfillStep, BackfillStepped, NewExecution, NewRun};

/// A backfill step's and cancel's statements ([`BackfillStatements`]) on a transaction; tasks
/// made due are notified in the transaction.
struct Statements<'t, 'c, 's> {
    tx: SqlTx<'t, 'c>,
    store: &'s PgStore,
}

impl<'t, 'c> BackfillStatements for Statements<'t, 'c, '_> {
    type Tx = SqlTx<'t, 'c>;

    fn tx(&mut self) -> &mut SqlTx<'t, 'c> {
        &mut self.tx
    }

    async fn now(&mut self) -> Result<i64> {
        self.store.now_ms(&mut **self.tx.0).await
    }

    async fn check_fence(
        &mut self,
        node: &str,
        leases: &[ShardLease],
        shard: u16,
        now: i64,
    ) -> Result<()> {
        trigger::check_fence(self.tx.0, node, leases, &[shard], now).await
    }

    async fn insert_executions(&mut self, step: &BackfillStep, now: i64) -> Result<u32> {
        let executions: Vec<&NewExecution> = step.executions.iter().collect();
        let node = Some(step.node.as_str());
        let (created, _) =
            trigger::insert_executions(self.tx.0, Insert::waiting(&executions, now, node)).await?;
        if created > 0 {
            notify_due(self.tx.0).await?;
        }
        Ok(created)
    }

    async fn create_run(&mut self, run: &NewRun, now: i64) -> Result<Option<String>> {
        let specs = &self.store.workflow_specs;
        let made = run_create::create_run(&mut self.tx, specs, run, now).await?;
        Ok(made.inserted.then_some(made.id))
    }
}

/// Applies a backfill step (`sundial_store::steps::backfill`) in one transaction, committed
/// only when it applied.
pub(crate) async fn backfill_step(store: &PgStore, step: &BackfillStep) -> Result<BackfillStepped> {
    let mut tx = store.begin().await?;
    let mut s = Statements {
        tx: SqlTx(&mut tx),
        store,
    };
    let stepped = steps::backfill_step(&mut s, step).await?;
    if let BackfillStepped::Applied(_) = stepped {
        commit(tx).await?;
    }
    Ok(stepped)
}

/// Cancels a running backfill (`sundial_store::steps::backfill`) in one transaction.
pub(crate) async fn backfill_cancel(
    store: &PgStore,
    namespace: &str,
    id: &str,
    reason: Option<&str>,
) -> Result<BackfillRecord> {
    let mut tx = store.begin().await?;
    let mut s = Statements {
        tx: SqlTx(&mut tx),
        store,
    };
    let record = steps::backfill_cancel(&mut s, namespace, id, reason).await?;
    commit(tx).await?;
    Ok(record)
}

pub(crate) async fn backfill_create(
    store: &PgStore,
    backfill: &sundial_store::NewBackfill,
) -> Result<BackfillRecord> {
    let mut tx = store.begin().await?;
    let now = store.now_ms(&mut *tx).await?;
    let created = steps::backfill_create(&mut SqlTx(&mut tx), backfill, now).await?;
    commit(tx).await?;
    Ok(created)
}
