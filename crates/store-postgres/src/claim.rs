//! The claim's statements for the claim written once in `sundial_store::steps::claim`: due
//! executions locked `FOR UPDATE SKIP LOCKED` (execution row, then queue row), the facts of
//! their jobs read under per-job advisory locks, and the plan's writes, a few statements
//! whatever the batch.

use sundial_store::claim::FactsByJob;
use sundial_store::steps::claim::{self as steps, ClaimStatements};

use super::*;
use crate::reads::SqlTx;

pub(crate) async fn execution_claim(
    store: &PgStore,
    claim: &ExecutionClaim,
) -> Result<Vec<ClaimedExecution>> {
    let mut tx = store.begin().await?;
    let applied = steps::claim(&mut ClaimTx(SqlTx(&mut tx), store), claim).await?;
    commit(tx).await?;
    // The store's clock read once the claim has committed: a worker holds what it claimed
    // ahead for its start less this reading, counted from when the claim returns, so every
    // millisecond between the reading and the return starts the held executions that much
    // late. A reading inside the statement came before the queue rows' update and the commit,
    // tens of milliseconds for a claim of hundreds on a busy machine (BENCHMARKS.md, "Claims
    // paced by the window"); this one costs a round trip, paid only by a claim that took
    // some ahead (for a due execution `started_at` is `now`, and nothing is held). The claim
    // has committed, so a failed reading must not fail it (its executions would wait for the
    // reaper): `now`, read before the claim, is earlier still, so the holds end later, never
    // before the fire time.
    let now = applied.now;
    let claimed_at = match &store.clock {
        Some(clock) => crate::ms(clock.now()),
        None if applied.took_ahead() => match store.now_ms(&store.pool).await {
            Ok(t) => t.max(now),
            Err(e) => {
                tracing::warn!(error = %e,
                    "reading the store's clock after a claim failed; its held executions start late by the claim's time");
                now
            }
        },
        None => now,
    };
    let mut claimed = applied.claimed;
    sundial_store::handoff::restamp(&mut claimed, ts(claimed_at)?);
    Ok(claimed)
}

/// The claim's statements ([`ClaimStatements`]) on one transaction: due executions locked
/// `FOR UPDATE SKIP LOCKED` (execution row, then queue row), per-job advisory locks, buckets
/// locked by row, cancellations signalled by `NOTIFY` inside the transaction.
struct ClaimTx<'t, 'c, 's>(SqlTx<'t, 'c>, &'s PgStore);

impl<'t, 'c> ClaimStatements for ClaimTx<'t, 'c, '_> {
    type Tx = SqlTx<'t, 'c>;
    /// The due executions of the namespaces not in `$3`, `$4 < due_at <= $1`, oldest due first,
    /// at most `$2`, each locked (execution row, then queue row) against other claims, skipping
    /// those another claim holds.
    const DUE: &'static str = "SELECT e.id, e.namespace, e.job_uid, e.trigger, e.run, e.scheduled_at, \
        e.fire_at, e.attempt, q.due_at FROM executions e JOIN execution_queue q ON q.id = e.id \
        WHERE q.due_at <= $1 AND q.namespace <> ALL($3) AND q.due_at > $4 \
        ORDER BY q.due_at LIMIT $2 FOR UPDATE OF e, q SKIP LOCKED";

    /// The executions of namespace `$3` due at `$1`, oldest due first, at most `$2`, locked as
    /// [`ClaimStatements::DUE`] locks them.
    const DUE_IN: &'static str = "SELECT e.id, e.namespace, e.job_uid, e.trigger, e.run, e.scheduled_at, \
        e.fire_at, e.attempt, q.due_at FROM executions e JOIN execution_queue q ON q.id = e.id \
        WHERE q.due_at <= $1 AND q.namespace = $3 \
        ORDER BY q.due_at LIMIT $2 FOR UPDATE OF e, q SKIP LOCKED";

    /// Ends the executions `$1` in state `$3` at `$2`, their trigger `misfire` when `$4`, and
    /// takes them off the queue (`shared::finish`).
    const FINISH: &'static str = "WITH q AS (DELETE FROM execution_queue WHERE id = ANY($1)) \
        UPDATE executions SET state = $3, trigger = CASE WHEN $4 THEN 'misfire' ELSE trigger END, \
        due_at = NULL, finished_at = $2 WHERE id = ANY($1)";

    /// Moves the due time of the executions `$1`, and of their queue rows, to `$2`
    /// (`shared::defer`).
    const DEFER: &'static str = "WITH q AS (UPDATE execution_queue SET due_at = $2 WHERE id = ANY($1)) \
        UPDATE executions SET due_at = $2 WHERE id = ANY($1)";

    /// Hands the executions `$3` (still waiting) to worker `$1` at `$2` under worker lease `$4`,
    /// with their queue rows. The queue rows are found by `id = ANY(ARRAY(SELECT … FROM
    /// claimed))`, an index condition on the primary key, never by joining the CTE: the planner
    /// estimates a CTE at one row and, on a queue it last analysed empty, walked the whole queue
    /// index once against it (BENCHMARKS.md, "Plans on stale statistics").
    const HAND_OUT: &'static str = "WITH claimed AS (UPDATE executions e SET state = 'running', \
          attempt = e.attempt + 1, worker = $1, \
          started_at = coalesce(e.started_at, GREATEST($2, e.fire_at)), \
          attempt_started_at = GREATEST($2, e.fire_at), worker_epoch = $4, \
          lease_expires_at = CASE WHEN $4::bigint IS NULL THEN GREATEST($2, e.fire_at) + e.lease_ms END, \
          due_at = NULL \
          WHERE e.id = ANY($3) AND e.state IN ('scheduled', 'queued', 'retry_wait') \
          RETURNING id, namespace, job, trigger, attempt, max_attempts, scheduled_at, fire_at, \
          started_at, lease_expires_at, worker_epoch), \
        queue AS (UPDATE execution_queue q SET due_at = NULL, worker_epoch = $4, \
          lease_expires_at = CASE WHEN $4::bigint IS NULL THEN GREATEST($2, x.fire_at) + x.lease_ms END \
          FROM executions x WHERE q.id = ANY(ARRAY(SELECT id FROM claimed)) AND x.id = q.id) \
        SELECT * FROM claimed ORDER BY fire_at";

    /// Created full where missing, then locked by the read: one claimer at a time spends a
    /// namespace's tokens, whichever process it is in.
    const CREATE_BUCKET: Option<&'static str> = Some(
        "INSERT INTO namespace_rates (namespace, tokens, updated_at) VALUES ($1, $2, $3) \
         ON CONFLICT DO NOTHING",
    );

    /// This claim read the clock before it locked the bucket, so a claim that read it later
    /// may have refilled it first.
    const WRITE_BUCKET: &'static str = "UPDATE namespace_rates SET tokens = $2, \
        updated_at = GREATEST(updated_at, $3) WHERE namespace = $1";

    fn tx(&mut self) -> &mut SqlTx<'t, 'c> {
        &mut self.0
    }

    async fn worker_lease_holds(&mut self, epoch: i64) -> Result<()> {
        liveness::lock_for_claim(self.0.0, epoch).await
    }

    async fn now(&mut self) -> Result<i64> {
        self.1.now_ms(&mut **self.0.0).await
    }

    /// Reads, under a per-job advisory lock, the [`JobFacts`] of the jobs of `due` that need them
    /// ([`DueExecution::needs_facts`]), in two statements whatever their number. The locks are
    /// taken in one order (by key), so two claims cannot deadlock on them, and before the facts
    /// are read, so a claim that chose an execution of a job has committed before another reads
    /// the job as idle.
    async fn job_facts(&mut self, due: &[DueExecution], now: i64) -> Result<FactsByJob> {
        let uids = steps::fact_uids(due, now);
        if uids.is_empty() {
            return Ok(Default::default());
        }
        let mut locked: Vec<&str> = due
            .iter()
            .filter(|e| e.run.concurrency_policy != ConcurrencyPolicy::Allow)
            .map(|e| e.job_uid.as_str())
            .collect();
        locked.sort_unstable();
        locked.dedup();
        if !locked.is_empty() {
            // A function scan of the array yields its elements in order: the locks are taken in
            // the order of the sorted uids.
            sqlx::query(
                "SELECT pg_advisory_xact_lock(hashtextextended(u, 0)) FROM UNNEST($1::text[]) AS u",
            )
            .bind(&locked)
            .execute(&mut **self.0.0)
            .await
            .map_err(db_err)?;
        }
        let read: Vec<&str> = due.iter().map(|e| e.id.as_str()).collect();
        let rows = sqlx::query(
            "SELECT u.uid, j.next_fire_at, \
               (SELECT array_agg(e.id || '|' || e.state) FROM execution_queue q JOIN executions e ON e.id = q.id \
                WHERE q.job_uid = u.uid AND e.state IN ('running', 'retry_wait')) AS active, \
               (SELECT max(e.fire_at) FROM execution_queue q JOIN executions e ON e.id = q.id \
                WHERE q.job_uid = u.uid AND q.due_at <= $2 AND e.attempt = 0) AS latest_due_fire_at, \
               (SELECT min(e.scheduled_at) FROM execution_queue q JOIN executions e ON e.id = q.id \
                WHERE q.job_uid = u.uid AND q.due_at IS NOT NULL AND e.attempt = 0 \
                  AND e.trigger = 'misfire' AND e.id <> ALL($3)) AS earliest_waiting_catchup \
             FROM UNNEST($1::text[]) AS u(uid) LEFT JOIN jobs j ON j.uid = u.uid",
        )
        .bind(&uids)
        .bind(now)
        .bind(&read)
        .fetch_all(&mut **self.0.0)
        .await
        .map_err(db_err)?;
        let mut facts = std::collections::HashMap::with_capacity(rows.len());
        for r in &rows {
            let uid: String = r.try_get("uid").map_err(db_err)?;
            let active: Option<Vec<String>> = r.try_get("active").map_err(db_err)?;
            facts.insert(
                uid,
                JobFacts {
                    active: active
                        .unwrap_or_default()
                        .into_iter()
                        .filter_map(|a| {
                            a.rsplit_once('|').map(|(id, state)| ActiveExecution {
                                id: id.to_owned(),
                                running: state == "running",
                            })
                        })
                        .collect(),
                    next_fire_at: r.try_get("next_fire_at").map_err(db_err)?,
                    latest_due_fire_at: r.try_get("latest_due_fire_at").map_err(db_err)?,
                    earliest_waiting_catchup: r
                        .try_get("earliest_waiting_catchup")
                        .map_err(db_err)?,
                },
            );
        }
        Ok(facts)
    }
}
