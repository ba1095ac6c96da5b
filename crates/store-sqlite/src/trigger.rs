//! The trigger: due jobs by fire time, and the fenced commit that advances each job's next
//! slot (conditional on the version and slot read) and inserts its executions, one per slot
//! (`ON CONFLICT DO NOTHING`), in multi-row `VALUES` statements.

use super::*;
use crate::reads::SqlTx;
use sundial_store::steps::audit;
use sundial_store::steps::trigger::{self as steps, Insert, TriggerStatements};

/// Inserts `executions` (`ON CONFLICT DO NOTHING`: a slot written before keeps its
/// execution) in multi-row `VALUES` statements; returns how many were new. With `claimed`
/// (a worker and the epoch of its lease) they are written as their first attempt under that
/// lease, `running` from their fire time, or from `now` for a slot due already
/// (`sundial_store::handoff::started_at`), and the ids of the new
/// ones are returned as well; without it they wait for a claim (`due_at` their fire time).
pub(crate) async fn insert_executions(
    tx: &mut Tx<'_>,
    batch: Insert<'_>,
) -> Result<(u32, Vec<String>)> {
    let (executions, node, claimed) = (batch.executions, batch.node, batch.claimed);
    let now = ts(batch.now)?;
    let mut rows = Vec::with_capacity(executions.len());
    for e in executions {
        let run = serde_json::to_string(&e.run).map_err(|err| Error::Corrupt(err.to_string()))?;
        rows.push((*e, run));
    }
    let (mut inserted, mut ids) = (0, Vec::new());
    let (claim_columns, width) = match claimed {
        Some(_) => (
            ", attempt, worker, worker_epoch, started_at, attempt_started_at",
            23,
        ),
        None => ("", 18),
    };
    let returning = if claimed.is_some() {
        " RETURNING id"
    } else {
        ""
    };
    for part in values::chunks(&rows) {
        let sql = format!(
            "INSERT INTO executions (id, namespace, job, job_uid, job_version, shard, trigger, \
             scheduled_at, fire_at, queued_at, due_at, finished_at, state, max_attempts, lease_ms, \
             run, triggered_by, created_at{claim_columns}) VALUES {} ON CONFLICT DO NOTHING{returning}",
            values::values_list(part.len(), width)
        );
        let mut q = sqlx::query(&sql);
        for (e, run) in part {
            let waiting = !e.state.is_terminal() && claimed.is_none();
            let state = match claimed {
                Some(_) => ExecutionState::Running.as_str(),
                None => e.state.as_str(),
            };
            q = q
                .bind(&e.id)
                .bind(&e.namespace)
                .bind(&e.job)
                .bind(&e.job_uid)
                .bind(e.job_version)
                .bind(i64::from(e.shard))
                .bind(e.trigger.as_str())
                .bind(ms(e.scheduled_at))
                .bind(ms(e.fire_at))
                .bind(ms(e.fire_at))
                .bind(waiting.then(|| ms(e.fire_at)))
                .bind((e.state.is_terminal()).then(|| ms(now)))
                .bind(state)
                .bind(i64::from(e.run.retry.max_attempts))
                .bind(e.run.heartbeat_timeout.as_millis_i64())
                .bind(run)
                .bind(node)
                .bind(ms(now));
            if let Some((worker, epoch)) = claimed {
                q = q
                    .bind(1_i64)
                    .bind(worker)
                    .bind(epoch)
                    .bind(ms(sundial_store::handoff::started_at(e, now)))
                    .bind(ms(sundial_store::handoff::started_at(e, now)));
            }
        }
        if claimed.is_some() {
            let rows = q.fetch_all(&mut **tx).await.map_err(db_err)?;
            for row in &rows {
                ids.push(row.try_get::<String, _>("id").map_err(db_err)?);
            }
            inserted += rows.len() as u64;
        } else {
            inserted += q.execute(&mut **tx).await.map_err(db_err)?.rows_affected();
        }
    }
    Ok((u32::try_from(inserted).unwrap_or(u32::MAX), ids))
}

pub(crate) async fn trigger_commit(
    store: &SqliteStore,
    c: &TriggerCommit,
) -> Result<TriggerCommitted> {
    let now = store.clock.now();
    let mut tx = store.begin().await?;
    let applied = steps::trigger_commit(&mut TriggerTx { tx: &mut tx, store }, c, now).await?;
    commit(tx).await?;
    // The clock once the commit is done and the claims are built: a commit of thousands of
    // executions, and building their claims, take milliseconds that a reading before them
    // would add to every hold.
    let mut done = applied.into_committed(store.clock.now());
    sundial_store::handoff::restamp(&mut done.handed, store.clock.now());
    Ok(done)
}

/// The trigger's statements ([`TriggerStatements`]) on the writer's transaction. The workers
/// find the executions that wait for a claim by their own timers: nothing is signalled.
struct TriggerTx<'t, 'c, 's> {
    tx: &'t mut Tx<'c>,
    store: &'s SqliteStore,
}

impl TriggerStatements for TriggerTx<'_, '_, '_> {
    async fn check_fence(
        &mut self,
        node: &str,
        leases: &[ShardLease],
        shards: &[u16],
        _now: i64,
    ) -> Result<()> {
        check_fence(self.tx, self.store, node, leases, shards).await
    }

    async fn advance_jobs(&mut self, jobs: &[sundial_store::JobTrigger]) -> Result<Vec<String>> {
        // Every job of the batch advances conditionally on the version and slot it read, a
        // few statements whatever the batch's size.
        let mut advanced = Vec::with_capacity(jobs.len());
        for part in values::chunks(jobs) {
            let sql = format!(
                "UPDATE jobs SET next_slot_at = j.column4, next_fire_at = j.column5 \
                 FROM (VALUES {}) AS j \
                 WHERE jobs.uid = j.column1 AND jobs.version = j.column2 \
                   AND jobs.next_slot_at = j.column3 \
                 RETURNING jobs.uid",
                values::values_list(part.len(), 5)
            );
            let mut q = sqlx::query_scalar::<_, String>(&sql);
            for job in part {
                q = q
                    .bind(&job.uid)
                    .bind(job.version)
                    .bind(ms(job.expected_next_slot))
                    .bind(job.next_slot_at.map(ms))
                    .bind(job.next_fire_at.map(ms));
            }
            advanced.extend(q.fetch_all(&mut **self.tx).await.map_err(db_err)?);
        }
        Ok(advanced)
    }

    async fn worker_lease_stands(&mut self, epoch: i64) -> Result<bool> {
        liveness::lease_stands(self.tx, epoch).await
    }

    async fn insert_executions(&mut self, batch: Insert<'_>) -> Result<(u32, Vec<String>)> {
        insert_executions(self.tx, batch).await
    }

    async fn waiting_inserted(&mut self) -> Result<()> {
        Ok(())
    }
}

/// Fencing: every shard in `shards` must still be leased to `node` (this process) with the
/// epoch in `leases`, unexpired; otherwise [`Error::StaleFence`] and nothing may be written.
pub(crate) async fn check_fence(
    tx: &mut Tx<'_>,
    store: &SqliteStore,
    node: &str,
    leases: &[ShardLease],
    shards: &[u16],
) -> Result<()> {
    let now = store.clock.now();
    let owner_prefix = format!("{node}/{}", store.instance);
    let held = sqlx::query("SELECT shard, epoch, expires_at FROM shard_leases WHERE owner = ?1")
        .bind(&owner_prefix)
        .fetch_all(&mut **tx)
        .await
        .map_err(db_err)?;
    let held: Vec<ShardLease> = held.iter().map(rows::shard_lease).collect::<Result<_>>()?;
    steps::fence_holds(node, leases, &held, shards, now)
}

pub(crate) async fn execution_insert(
    store: &SqliteStore,
    e: &NewExecution,
) -> Result<ExecutionRecord> {
    let now = store.clock.now();
    let mut tx = store.begin().await?;
    steps::execution_insert(&mut TriggerTx { tx: &mut tx, store }, e, now).await?;
    let change = steps::trigger_change(e);
    audit::record(&mut SqlTx(&mut tx), &[change], ms(now)).await?;
    commit(tx).await?;
    store
        .execution_get(&e.namespace, &e.id)
        .await?
        .ok_or_else(|| Error::NotFound(format!("execution {}", e.id)))
}
