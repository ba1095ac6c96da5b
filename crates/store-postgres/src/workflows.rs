//! Workflows (docs/workflows.md) on PostgreSQL: the writes, a run's creation and a
//! workflow's trigger are written once (`sundial_store::steps::workflow_writes`,
//! `sundial_store::steps::run_create`); this file keeps the transactions around them and what
//! PostgreSQL does its own way there: a new run's task rows from arrays (`UNNEST`) with the
//! queue rows of those due, and the workers told by `NOTIFY` inside the transaction.
//!
//! Lock order, so that endings, cancels and retries of one run neither deadlock nor miss
//! each other: a transaction locks the run rows it touches first (`FOR UPDATE`, in id
//! order), then the run's execution rows. A completion finds the runs of its executions
//! before it updates them ([`lock_runs_of`]); a cancel locks the run, then its unfinished
//! tasks `FOR UPDATE` (waiting for a claim in flight, and reading the state it left).

use sundial_store::steps::run_create::{self, RunCreationStatements};
use sundial_store::workflow::NewTask;
use sundial_store::{NewRun, WorkflowRecord, WorkflowTrigger, WorkflowWrite};

use super::*;
use crate::reads::SqlTx;
use crate::rows::to_json;
use sundial_store::steps::workflow_writes as steps;

pub(crate) async fn workflow_write_batch(
    store: &PgStore,
    writes: &[WorkflowWrite],
) -> Result<Vec<WorkflowRecord>> {
    let mut tx = store.begin().await?;
    let now = store.now_ms(&mut *tx).await?;
    let done = steps::workflow_write_batch(&mut SqlTx(&mut tx), writes, now).await?;
    commit(tx).await?;
    Ok(done.records)
}

pub(crate) async fn workflow_delete(
    store: &PgStore,
    namespace: &str,
    name: &str,
    expected_version: Option<i64>,
) -> Result<()> {
    let mut tx = store.begin().await?;
    let now = store.now_ms(&mut *tx).await?;
    let mut s = SqlTx(&mut tx);
    steps::workflow_delete(&mut s, namespace, name, expected_version, now).await?;
    commit(tx).await
}

/// The run creation's statements on a PostgreSQL transaction ([`RunCreationStatements`]):
/// task rows from arrays (`UNNEST`) with the queue rows of those due, and the workers told by
/// `NOTIFY`, delivered at the commit.
impl RunCreationStatements for SqlTx<'_, '_> {
    /// The partitioned table's primary key holds one run per slot (migration 0010).
    const SLOT_RUN_IDS: bool = true;

    async fn insert_tasks(&mut self, run: &NewRun, tasks: &[NewTask], now: i64) -> Result<()> {
        insert_tasks(self.0, run, tasks, now).await
    }

    async fn stop(&mut self, running: Vec<String>) -> Result<Vec<String>> {
        for id in &running {
            notify_cancelled(self.0, id).await?;
        }
        Ok(Vec::new())
    }

    async fn notify_due(&mut self) -> Result<()> {
        notify_due(self.0).await
    }
}

/// Commits one workflow's trigger: fenced by the shard lease, the advance conditional on the
/// version and slot read (which also locks the workflow row, as `run_create` does), then its
/// runs created.
pub(crate) async fn workflow_trigger(store: &PgStore, t: &WorkflowTrigger) -> Result<u32> {
    let mut tx = store.begin().await?;
    let now = store.now_ms(&mut *tx).await?;
    trigger::check_fence(&mut tx, &t.node, &t.leases, &[t.shard], now).await?;
    let specs = &store.workflow_specs;
    let created = run_create::workflow_trigger(&mut SqlTx(&mut tx), specs, t, now).await?;
    commit(tx).await?;
    Ok(run_create::inserted(&created))
}

/// Inserts a new run's task executions (and the queue rows of those due), one statement
/// whatever their number.
async fn insert_tasks(tx: &mut Tx<'_>, run: &NewRun, tasks: &[NewTask], now: i64) -> Result<()> {
    if tasks.is_empty() {
        return Ok(());
    }
    let n = tasks.len();
    let (
        mut ids,
        mut names,
        mut states,
        mut due,
        mut finished,
        mut attempts,
        mut max,
        mut lease,
        mut runs,
    ) = (
        Vec::with_capacity(n),
        Vec::with_capacity(n),
        Vec::with_capacity(n),
        Vec::with_capacity(n),
        Vec::with_capacity(n),
        Vec::with_capacity(n),
        Vec::with_capacity(n),
        Vec::with_capacity(n),
        Vec::with_capacity(n),
    );
    for t in tasks {
        ids.push(t.id.as_str());
        names.push(t.task.as_str());
        states.push(t.state.as_str());
        due.push((t.state == ExecutionState::Scheduled).then(|| ms(run.fire_at)));
        finished.push(t.state.is_terminal().then_some(now));
        attempts.push(i64::from(t.error.is_some()));
        max.push(i64::from(t.max_attempts));
        lease.push(t.run.heartbeat_timeout.as_millis_i64());
        runs.push(to_json(&t.run)?);
    }
    sqlx::query(
        "WITH t AS (SELECT * FROM UNNEST($1::text[], $2::text[], $3::text[], $4::bigint[], $5::bigint[], \
                 $6::bigint[], $7::bigint[], $8::bigint[], $9::text[]) \
               AS t(id, task, state, due_at, finished_at, attempt, max_attempts, lease_ms, run)), \
         e AS (INSERT INTO executions (id, namespace, job, job_uid, job_version, shard, trigger, \
                 scheduled_at, fire_at, queued_at, due_at, finished_at, state, attempt, max_attempts, \
                 lease_ms, run, created_at, run_id, task) \
               SELECT t.id, $10, $11, $12, $13, $14, 'workflow', $15, $16, $16, t.due_at, t.finished_at, \
                 t.state, t.attempt, t.max_attempts, t.lease_ms, t.run, $17, $18, t.task FROM t \
               RETURNING id, due_at) \
         INSERT INTO execution_queue (id, namespace, job_uid, due_at) \
         SELECT id, $10, $12, due_at FROM e WHERE due_at IS NOT NULL",
    )
    .bind(&ids)
    .bind(&names)
    .bind(&states)
    .bind(&due)
    .bind(&finished)
    .bind(&attempts)
    .bind(&max)
    .bind(&lease)
    .bind(&runs)
    .bind(&run.namespace)
    .bind(&run.workflow)
    .bind(&run.workflow_uid)
    .bind(run.workflow_version)
    .bind(i64::from(run.shard))
    .bind(ms(run.scheduled_at))
    .bind(ms(run.fire_at))
    .bind(now)
    .bind(&run.id)
    .execute(&mut **tx)
    .await
    .map_err(db_err)?;
    Ok(())
}

/// Locks, in id order, the runs the executions `ids` belong to, before anything of them is
/// updated (the module's lock order); returns them.
pub(crate) async fn lock_runs_of(tx: &mut Tx<'_>, ids: &[&str]) -> Result<Vec<String>> {
    sqlx::query_scalar(
        "SELECT id FROM workflow_runs WHERE id = ANY(ARRAY( \
           SELECT DISTINCT run_id FROM executions WHERE id = ANY($1) AND run_id IS NOT NULL)) \
         ORDER BY id FOR UPDATE",
    )
    .bind(ids)
    .fetch_all(&mut **tx)
    .await
    .map_err(db_err)
}
