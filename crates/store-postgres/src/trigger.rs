//! The trigger: due jobs by fire time, and the fenced commit that advances each job's next
//! slot (conditional on the version and slot read) and inserts its executions, one per slot
//! (`ON CONFLICT DO NOTHING`), with their queue rows.

use super::*;
use crate::reads::SqlTx;
use sundial_store::steps::audit;
use sundial_store::steps::trigger::{self as steps, Insert, TriggerStatements};

/// Inserts executions in one statement (UNNEST of column arrays), with their queue rows;
/// returns how many were new. With `claimed` (a worker and the epoch of its lease) they are
/// written as their first attempt under that lease, `running` from their fire time, or
/// from `now` for a slot due already (`sundial_store::handoff::started_at`), their queue rows under the lease, and the ids of the new ones
/// are returned as well; without it they wait for a claim (`due_at` their fire time).
#[expect(
    clippy::type_complexity,
    reason = "one tuple of column arrays per UNNEST group keeps the binds in statement order"
)]
pub(crate) async fn insert_executions(
    tx: &mut Tx<'_>,
    batch: Insert<'_>,
) -> Result<(u32, Vec<String>)> {
    let Insert {
        executions: es,
        now,
        node,
        claimed,
    } = batch;
    if es.is_empty() {
        return Ok((0, Vec::new()));
    }
    let mut cols: (
        Vec<&str>,
        Vec<&str>,
        Vec<&str>,
        Vec<&str>,
        Vec<i64>,
        Vec<i64>,
        Vec<&str>,
    ) = Default::default();
    let mut times: (Vec<i64>, Vec<i64>, Vec<Option<i64>>, Vec<Option<i64>>) = Default::default();
    let mut rest: (Vec<&str>, Vec<i64>, Vec<i64>, Vec<String>) = Default::default();
    for e in es {
        // One execution per slot (G1) rests on the primary key of the partitioned table
        // (migration 0010), so a slot's execution must carry the id derived from it.
        if matches!(
            e.trigger,
            sundial_core::execution::Trigger::Schedule
                | sundial_core::execution::Trigger::Misfire
                | sundial_core::execution::Trigger::Backfill
        ) && e.id != sundial_core::ids::slot_execution_id(&e.job_uid, e.scheduled_at)
        {
            return Err(Error::Defect(
                format!(
                    "execution {} of slot {} of job incarnation {}: a slot's execution id must be derived from them (sundial_core::ids::slot_execution_id)",
                    e.id, e.scheduled_at, e.job_uid
                )
                .into(),
            ));
        }
        cols.0.push(&e.id);
        cols.1.push(&e.namespace);
        cols.2.push(&e.job);
        cols.3.push(&e.job_uid);
        cols.4.push(e.job_version);
        cols.5.push(i64::from(e.shard));
        cols.6.push(e.trigger.as_str());
        let waiting = !e.state.is_terminal() && claimed.is_none();
        times.0.push(ms(e.scheduled_at));
        times.1.push(ms(e.fire_at));
        times.2.push(waiting.then(|| ms(e.fire_at)));
        times.3.push(e.state.is_terminal().then_some(now));
        rest.0.push(match claimed {
            Some(_) => sundial_core::execution::ExecutionState::Running.as_str(),
            None => e.state.as_str(),
        });
        rest.1.push(i64::from(e.run.retry.max_attempts));
        rest.2.push(e.run.heartbeat_timeout.as_millis_i64());
        rest.3
            .push(serde_json::to_string(&e.run).map_err(|err| Error::Corrupt(err.to_string()))?);
    }
    // The 17 binds both statements share, in statement order ($1-$17).
    macro_rules! bind_rows {
        ($q:expr) => {
            $q.bind(&cols.0)
                .bind(&cols.1)
                .bind(&cols.2)
                .bind(&cols.3)
                .bind(&cols.4)
                .bind(&cols.5)
                .bind(&cols.6)
                .bind(&times.0)
                .bind(&times.1)
                .bind(&times.2)
                .bind(&times.3)
                .bind(&rest.0)
                .bind(&rest.1)
                .bind(&rest.2)
                .bind(&rest.3)
                .bind(node)
                .bind(now)
        };
    }
    if let Some((worker, epoch)) = claimed {
        // Claimed as written: the attempt runs under the worker lease from its fire time (from
        // now for a slot written late), with no lease of its own; its queue row carries the lease's epoch for the reaper.
        let ids = sqlx::query_scalar(
            "WITH e AS (INSERT INTO executions (id, namespace, job, job_uid, job_version, shard, trigger, \
               scheduled_at, fire_at, queued_at, due_at, finished_at, state, max_attempts, lease_ms, run, \
               triggered_by, created_at, attempt, worker, worker_epoch, started_at, attempt_started_at) \
             SELECT id, ns, job, uid, ver, shard, trig, sched, fire, fire, due, fin, st, maxa, lease, run, \
               $16, $17, 1, $18, $19, GREATEST(fire, $17), GREATEST(fire, $17) \
             FROM UNNEST($1::text[], $2::text[], $3::text[], $4::text[], $5::bigint[], $6::bigint[], $7::text[], \
               $8::bigint[], $9::bigint[], $10::bigint[], $11::bigint[], $12::text[], $13::bigint[], $14::bigint[], $15::text[]) \
               AS t(id, ns, job, uid, ver, shard, trig, sched, fire, due, fin, st, maxa, lease, run) \
             ON CONFLICT DO NOTHING RETURNING id, namespace, job_uid), \
             q AS (INSERT INTO execution_queue (id, namespace, job_uid, worker_epoch) \
               SELECT id, namespace, job_uid, $19 FROM e) \
             SELECT id FROM e",
        );
        let ids: Vec<String> = bind_rows!(ids)
            .bind(worker)
            .bind(epoch)
            .fetch_all(&mut **tx)
            .await
            .map_err(db_err)?;
        return Ok((u32::try_from(ids.len()).unwrap_or(u32::MAX), ids));
    }
    // The waiting ones (due_at set) also get their queue row; a slot that already has its
    // execution (ON CONFLICT) gets neither.
    let inserted = sqlx::query_scalar(
        "WITH e AS (INSERT INTO executions (id, namespace, job, job_uid, job_version, shard, trigger, scheduled_at, \
           fire_at, queued_at, due_at, finished_at, state, max_attempts, lease_ms, run, triggered_by, created_at) \
         SELECT id, ns, job, uid, ver, shard, trig, sched, fire, fire, due, fin, st, maxa, lease, run, $16, $17 \
         FROM UNNEST($1::text[], $2::text[], $3::text[], $4::text[], $5::bigint[], $6::bigint[], $7::text[], \
           $8::bigint[], $9::bigint[], $10::bigint[], $11::bigint[], $12::text[], $13::bigint[], $14::bigint[], $15::text[]) \
           AS t(id, ns, job, uid, ver, shard, trig, sched, fire, due, fin, st, maxa, lease, run) \
         ON CONFLICT DO NOTHING RETURNING id, namespace, job_uid, due_at), \
         q AS (INSERT INTO execution_queue (id, namespace, job_uid, due_at) \
           SELECT id, namespace, job_uid, due_at FROM e WHERE due_at IS NOT NULL) \
         SELECT count(*) FROM e",
    );
    let inserted: i64 = bind_rows!(inserted)
        .fetch_one(&mut **tx)
        .await
        .map_err(db_err)?;
    Ok((u32::try_from(inserted).unwrap_or(u32::MAX), Vec::new()))
}

pub(crate) async fn trigger_commit(store: &PgStore, c: &TriggerCommit) -> Result<TriggerCommitted> {
    let mut tx = store.begin().await?;
    let now = store.now_ms(&mut *tx).await?;
    let applied = steps::trigger_commit(&mut TriggerTx(&mut tx), c, ts(now)?).await?;
    commit(tx).await?;
    if !applied.handed_any() {
        return Ok(applied.into_committed(ts(now)?));
    }
    // The claims first, with the reading before the commit (held longer if it stayed), then
    // the store's clock once the commit is done and they are built, as a claim ahead reads it:
    // the worker's holds end no earlier than the fire times (`claim.rs`, `execution_claim`),
    // and no later by the time building them took.
    let mut done = applied.into_committed(ts(now)?);
    let claimed_at = match &store.clock {
        Some(clock) => clock.now(),
        None => match store.now_ms(&store.pool).await {
            Ok(t) => ts(t.max(now))?,
            Err(e) => {
                tracing::warn!(error = %e,
                    "reading the store's clock after a trigger commit failed; its handed-out executions start late by the commit's time");
                ts(now)?
            }
        },
    };
    sundial_store::handoff::restamp(&mut done.handed, claimed_at);
    Ok(done)
}

/// The trigger's statements ([`TriggerStatements`]) on an open transaction: the shard leases
/// and the worker lease locked against a take-over, the workers woken by `NOTIFY` on commit.
struct TriggerTx<'t, 'c>(&'t mut Tx<'c>);

impl TriggerStatements for TriggerTx<'_, '_> {
    async fn check_fence(
        &mut self,
        node: &str,
        leases: &[ShardLease],
        shards: &[u16],
        now: i64,
    ) -> Result<()> {
        check_fence(self.0, node, leases, shards, now).await
    }

    #[expect(
        clippy::type_complexity,
        reason = "one tuple of column arrays for the UNNEST keeps the binds in statement order"
    )]
    async fn advance_jobs(&mut self, jobs: &[sundial_store::JobTrigger]) -> Result<Vec<String>> {
        // Every job of the batch in one statement; a job that changed since it was read
        // (version or next slot) is left out.
        let mut cols: (
            Vec<&str>,
            Vec<i64>,
            Vec<i64>,
            Vec<Option<i64>>,
            Vec<Option<i64>>,
        ) = Default::default();
        for job in jobs {
            cols.0.push(&job.uid);
            cols.1.push(job.version);
            cols.2.push(ms(job.expected_next_slot));
            cols.3.push(job.next_slot_at.map(ms));
            cols.4.push(job.next_fire_at.map(ms));
        }
        sqlx::query_scalar(
            "UPDATE jobs j SET next_slot_at = t.next_slot, next_fire_at = t.next_fire \
             FROM UNNEST($1::text[], $2::bigint[], $3::bigint[], $4::bigint[], $5::bigint[]) \
               AS t(uid, version, expected, next_slot, next_fire) \
             WHERE j.uid = t.uid AND j.version = t.version AND j.next_slot_at = t.expected RETURNING j.uid",
        )
        .bind(&cols.0)
        .bind(&cols.1)
        .bind(&cols.2)
        .bind(&cols.3)
        .bind(&cols.4)
        .fetch_all(&mut **self.0)
        .await
        .map_err(db_err)
    }

    async fn worker_lease_stands(&mut self, epoch: i64) -> Result<bool> {
        // Locked as a claim locks it, so a take-over waits for this commit.
        liveness::lock_if_standing(self.0, epoch).await
    }

    async fn insert_executions(&mut self, batch: Insert<'_>) -> Result<(u32, Vec<String>)> {
        insert_executions(self.0, batch).await
    }

    async fn waiting_inserted(&mut self) -> Result<()> {
        notify_due(self.0).await
    }
}

/// Fencing: locks the lease rows of `shards` against a concurrent takeover (`FOR SHARE`, so
/// a takeover waits for this transaction), then checks that each is still leased to `node`
/// with the epoch in `leases`, unexpired at `now`; otherwise [`Error::StaleFence`] and
/// nothing may be written.
pub(crate) async fn check_fence(
    tx: &mut Tx<'_>,
    node: &str,
    leases: &[ShardLease],
    shards: &[u16],
    now: i64,
) -> Result<()> {
    let mut locked: Vec<i64> = shards.iter().map(|s| i64::from(*s)).collect();
    locked.sort_unstable();
    locked.dedup();
    let held = sqlx::query(
        "SELECT shard, epoch, expires_at FROM shard_leases \
         WHERE shard = ANY($1) AND owner = $2 AND expires_at > $3 ORDER BY shard FOR SHARE",
    )
    .bind(&locked)
    .bind(node)
    .bind(now)
    .fetch_all(&mut **tx)
    .await
    .map_err(db_err)?;
    let held: Vec<ShardLease> = held.iter().map(rows::shard_lease).collect::<Result<_>>()?;
    steps::fence_holds(node, leases, &held, shards, ts(now)?)
}

pub(crate) async fn execution_insert(store: &PgStore, e: &NewExecution) -> Result<ExecutionRecord> {
    let mut tx = store.begin().await?;
    let now = store.now_ms(&mut *tx).await?;
    steps::execution_insert(&mut TriggerTx(&mut tx), e, ts(now)?).await?;
    let change = steps::trigger_change(e);
    audit::record(&mut SqlTx(&mut tx), &[change], now).await?;
    commit(tx).await?;
    store
        .execution_get(&e.namespace, &e.id)
        .await?
        .ok_or_else(|| Error::NotFound(format!("execution {}", e.id)))
}
