//! Backfills (docs/time.md, "Backfill"): the creation, the driver's reads, the fenced step and
//! the cancel are written once in `sundial_store::steps::backfill`, the API's reads in
//! `sundial_store::steps::listings`. This file keeps what SQLite does its own way in a step:
//! the store's clock, the shard fence, the workflow's version checked for run creation, and
//! what the step made due or created signalled after the commit. A step and a cancel are
//! transactions of the one writer, so a step after a cancel writes nothing.

use super::*;
use crate::reads::SqlTx;
use sundial_store::steps::backfill::{self as steps, BackfillStatements};
use sundial_store::steps::run_create;
use sundial_store::steps::trigger::Insert;
use sundial_store::{BackfillRecord, BackfillStep, BackfillStepped, NewExecution, NewRun};

/// A backfill step's and cancel's statements ([`BackfillStatements`]) on the writer's
/// transaction; what the step made due or created is signalled after the commit.
struct Statements<'t, 'c, 's> {
    tx: SqlTx<'t, 'c>,
    store: &'s SqliteStore,
    /// Executions went in: the workers are woken on commit.
    due: bool,
    made_runs: Vec<workflows::CreatedRun>,
}

impl<'t, 'c, 's> Statements<'t, 'c, 's> {
    fn new(tx: &'t mut Tx<'c>, store: &'s SqliteStore) -> Self {
        Statements {
            tx: SqlTx(tx),
            store,
            due: false,
            made_runs: Vec::new(),
        }
    }
}

impl<'t, 'c> BackfillStatements for Statements<'t, 'c, '_> {
    type Tx = SqlTx<'t, 'c>;

    fn tx(&mut self) -> &mut SqlTx<'t, 'c> {
        &mut self.tx
    }

    async fn now(&mut self) -> Result<i64> {
        Ok(ms(self.store.clock.now()))
    }

    async fn check_fence(
        &mut self,
        node: &str,
        leases: &[ShardLease],
        shard: u16,
        _now: i64,
    ) -> Result<()> {
        trigger::check_fence(self.tx.0, self.store, node, leases, &[shard]).await
    }

    async fn insert_executions(&mut self, step: &BackfillStep, now: i64) -> Result<u32> {
        let executions: Vec<&NewExecution> = step.executions.iter().collect();
        let node = Some(step.node.as_str());
        let created =
            trigger::insert_executions(self.tx.0, Insert::waiting(&executions, now, node))
                .await?
                .0;
        self.due |= created > 0;
        Ok(created)
    }

    async fn create_run(&mut self, run: &NewRun, now: i64) -> Result<Option<String>> {
        let specs = &self.store.workflow_specs;
        let made = run_create::create_run(&mut self.tx, specs, run, now).await?;
        let id = made.inserted.then(|| made.id.clone());
        self.made_runs.push(made);
        Ok(id)
    }
}

/// Applies a backfill step (`sundial_store::steps::backfill`) in one write transaction,
/// committed only when it applied; the workers are woken after the commit.
pub(crate) async fn backfill_step(
    store: &SqliteStore,
    step: &BackfillStep,
) -> Result<BackfillStepped> {
    let mut tx = store.begin().await?;
    let (stepped, due, made_runs) = {
        let mut s = Statements::new(&mut tx, store);
        let stepped = steps::backfill_step(&mut s, step).await?;
        (stepped, s.due, s.made_runs)
    };
    if let BackfillStepped::Applied(_) = stepped {
        commit(tx).await?;
        if due {
            store.signals.due.notify_one();
        }
        for made in &made_runs {
            made.signal(store);
        }
    }
    Ok(stepped)
}

/// Cancels a running backfill (`sundial_store::steps::backfill`) in one write transaction.
pub(crate) async fn backfill_cancel(
    store: &SqliteStore,
    namespace: &str,
    id: &str,
    reason: Option<&str>,
) -> Result<BackfillRecord> {
    let mut tx = store.begin().await?;
    let record = {
        let mut s = Statements::new(&mut tx, store);
        steps::backfill_cancel(&mut s, namespace, id, reason).await?
    };
    commit(tx).await?;
    Ok(record)
}

pub(crate) async fn backfill_create(
    store: &SqliteStore,
    backfill: &sundial_store::NewBackfill,
) -> Result<BackfillRecord> {
    let now = ms(store.clock.now());
    let mut tx = store.begin().await?;
    let created = steps::backfill_create(&mut SqlTx(&mut tx), backfill, now).await?;
    commit(tx).await?;
    Ok(created)
}
