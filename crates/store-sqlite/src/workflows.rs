//! Workflows (docs/workflows.md) on SQLite: the writes, a run's creation and a workflow's
//! trigger are written once (`sundial_store::steps::workflow_writes`,
//! `sundial_store::steps::run_create`); this file keeps the transactions around them and what
//! the embedded store does its own way there: a new run's task rows in multi-row `VALUES`
//! lists, and the workers told after the commit ([`SignalCreated`]). SQLite's one writer
//! serialises every step, so two endings in one run never release at once.

use sundial_core::execution::Trigger;
pub(crate) use sundial_store::steps::run_create::CreatedRun;
use sundial_store::steps::run_create::{self, RunCreationStatements};
use sundial_store::workflow::NewTask;
use sundial_store::{NewRun, WorkflowRecord, WorkflowTrigger, WorkflowWrite};

use super::*;
use crate::reads::SqlTx;
use crate::rows::to_json;
use sundial_store::steps::workflow_writes as steps;

pub(crate) async fn workflow_write_batch(
    store: &SqliteStore,
    writes: &[WorkflowWrite],
) -> Result<Vec<WorkflowRecord>> {
    let now = ms(store.clock.now());
    let mut tx = store.begin().await?;
    let done = steps::workflow_write_batch(&mut SqlTx(&mut tx), writes, now).await?;
    commit(tx).await?;
    jobs::signal_cancelled(store, done.stopped);
    Ok(done.records)
}

pub(crate) async fn workflow_delete(
    store: &SqliteStore,
    namespace: &str,
    name: &str,
    expected_version: Option<i64>,
) -> Result<()> {
    let now = ms(store.clock.now());
    let mut tx = store.begin().await?;
    let mut s = SqlTx(&mut tx);
    let done = steps::workflow_delete(&mut s, namespace, name, expected_version, now).await?;
    commit(tx).await?;
    jobs::signal_cancelled(store, done.stopped);
    Ok(())
}

/// The run creation's statements of the embedded store ([`RunCreationStatements`]) on its
/// write transaction, whose single writer holds what it reads until it commits: task rows in
/// multi-row `VALUES` lists, and the workers told after the commit.
impl RunCreationStatements for SqlTx<'_, '_> {
    /// The unique index on (workflow incarnation, slot) holds one run per slot.
    const SLOT_RUN_IDS: bool = false;

    async fn insert_tasks(&mut self, run: &NewRun, tasks: &[NewTask], now: i64) -> Result<()> {
        insert_tasks(self.0, run, tasks, now).await
    }

    async fn stop(&mut self, running: Vec<String>) -> Result<Vec<String>> {
        Ok(running)
    }

    async fn notify_due(&mut self) -> Result<()> {
        Ok(())
    }
}

/// Tells the workers what creating a run did, once its transaction has committed.
pub(crate) trait SignalCreated {
    /// Wakes the workers when tasks became due; tells those of the stopped executions.
    fn signal(&self, store: &SqliteStore);
}

impl SignalCreated for CreatedRun {
    fn signal(&self, store: &SqliteStore) {
        if self.due {
            store.signals.due.notify_one();
        }
        for id in &self.stopped {
            let _ = store.signals.cancelled.send(id.clone());
        }
    }
}

/// Commits one workflow's trigger: fenced by the shard lease, the advance conditional on the
/// version and slot read, then its runs created as `run_create` would.
pub(crate) async fn workflow_trigger(store: &SqliteStore, t: &WorkflowTrigger) -> Result<u32> {
    let now = ms(store.clock.now());
    let mut tx = store.begin().await?;
    trigger::check_fence(&mut tx, store, &t.node, &t.leases, &[t.shard]).await?;
    let specs = &store.workflow_specs;
    let created = run_create::workflow_trigger(&mut SqlTx(&mut tx), specs, t, now).await?;
    commit(tx).await?;
    for c in &created {
        c.signal(store);
    }
    Ok(run_create::inserted(&created))
}

/// Inserts a new run's task executions, in multi-row `VALUES` lists of a bounded size.
async fn insert_tasks(tx: &mut Tx<'_>, run: &NewRun, tasks: &[NewTask], now: i64) -> Result<()> {
    let mut rows = Vec::with_capacity(tasks.len());
    for t in tasks {
        rows.push((t, to_json(&t.run)?));
    }
    for part in values::chunks(&rows) {
        let sql = format!(
            "INSERT INTO executions (id, namespace, job, job_uid, job_version, shard, trigger, \
             scheduled_at, fire_at, queued_at, due_at, finished_at, state, attempt, max_attempts, \
             lease_ms, run, created_at, run_id, task) VALUES {}",
            values::values_list(part.len(), 20)
        );
        let mut q = sqlx::query(&sql);
        for (t, run_json) in part {
            let due = t.state == ExecutionState::Scheduled;
            let failed = t.error.is_some();
            q = q
                .bind(&t.id)
                .bind(&run.namespace)
                .bind(&run.workflow)
                .bind(&run.workflow_uid)
                .bind(run.workflow_version)
                .bind(i64::from(run.shard))
                .bind(Trigger::Workflow.as_str())
                .bind(ms(run.scheduled_at))
                .bind(ms(run.fire_at))
                .bind(ms(run.fire_at))
                .bind(due.then(|| ms(run.fire_at)))
                .bind(t.state.is_terminal().then_some(now))
                .bind(t.state.as_str())
                .bind(i64::from(failed))
                .bind(i64::from(t.max_attempts))
                .bind(t.run.heartbeat_timeout.as_millis_i64())
                .bind(run_json)
                .bind(now)
                .bind(&run.id)
                .bind(&t.task);
        }
        q.execute(&mut **tx).await.map_err(db_err)?;
    }
    Ok(())
}
