//! The claim's statements on the single writer (which is the per-job lock), for the claim
//! written once in `sundial_store::steps::claim`: the due executions, the facts of their
//! jobs, and the plan's writes, a few statements whatever the batch.

use sundial_store::claim::FactsByJob;
use sundial_store::steps::claim::{self as steps, ClaimStatements};

use super::*;
use crate::reads::SqlTx;

pub(crate) async fn execution_claim(
    store: &SqliteStore,
    claim: &ExecutionClaim,
) -> Result<Vec<ClaimedExecution>> {
    let mut tx = store.begin().await?;
    let mut statements = ClaimTx(SqlTx(&mut tx), store);
    let applied = steps::claim(&mut statements, claim).await?;
    // The clock as late in the claim as it can be read: a worker holds what it claimed ahead
    // for its start less this reading, from when the claim returns.
    let claimed_at = store.clock.now();
    commit(tx).await?;
    for id in applied.cancelled_running() {
        let _ = store.signals.cancelled.send(id.to_owned());
    }
    let mut claimed = applied.claimed;
    sundial_store::handoff::restamp(&mut claimed, claimed_at);
    Ok(claimed)
}

/// The claim's statements ([`ClaimStatements`]) on the writer's transaction: the single
/// writer is the per-job lock and the buckets' lock, so nothing is locked row by row; a
/// cancellation is signalled by the caller once the claim has committed.
struct ClaimTx<'t, 'c, 's>(SqlTx<'t, 'c>, &'s SqliteStore);

/// A JSON array of `ids`, for `json_each`.
pub(crate) fn list<T: serde::Serialize>(ids: &[T]) -> Result<String> {
    serde_json::to_string(ids).map_err(|e| Error::Corrupt(e.to_string()))
}

impl<'t, 'c> ClaimStatements for ClaimTx<'t, 'c, '_> {
    type Tx = SqlTx<'t, 'c>;
    /// The due executions of the namespaces not in `$3`, `$4 < due_at <= $1`, oldest due first,
    /// at most `$2` (`shared::due`).
    const DUE: &'static str = "SELECT id, namespace, job_uid, trigger, run, scheduled_at, fire_at, attempt, \
        due_at FROM executions WHERE due_at > $4 AND due_at <= $1 \
        AND namespace NOT IN (SELECT value FROM json_each($3)) ORDER BY due_at LIMIT $2";

    /// The executions of namespace `$3` due at `$1`, oldest due first, at most `$2`
    /// (`shared::due_in`).
    const DUE_IN: &'static str = "SELECT id, namespace, job_uid, trigger, run, scheduled_at, fire_at, \
        attempt, due_at FROM executions WHERE namespace = $3 AND due_at <= $1 ORDER BY due_at LIMIT $2";

    /// Ends the executions `$1` in state `$3` at `$2`, their trigger `misfire` when `$4`
    /// (`shared::finish`).
    const FINISH: &'static str = "UPDATE executions SET state = $3, \
        trigger = CASE WHEN $4 THEN 'misfire' ELSE trigger END, due_at = NULL, finished_at = $2 \
        WHERE id IN (SELECT value FROM json_each($1))";

    /// Moves the due time of the executions `$1` to `$2` (`shared::defer`).
    const DEFER: &'static str =
        "UPDATE executions SET due_at = $2 WHERE id IN (SELECT value FROM json_each($1))";

    /// Hands the executions `$3` (still waiting) to worker `$1` at `$2` under worker lease `$4`,
    /// an attempt starting at its fire time or `$2` if later (`shared::hand_out`).
    const HAND_OUT: &'static str = "UPDATE executions SET state = 'running', attempt = attempt + 1, \
        worker = $1, started_at = coalesce(started_at, max($2, fire_at)), \
        attempt_started_at = max($2, fire_at), worker_epoch = $4, \
        lease_expires_at = CASE WHEN $4 IS NULL THEN max($2, fire_at) + lease_ms END, due_at = NULL \
        WHERE id IN (SELECT value FROM json_each($3)) AND state IN ('scheduled', 'queued', 'retry_wait') \
        RETURNING id, namespace, job, trigger, attempt, max_attempts, scheduled_at, fire_at, \
        started_at, lease_expires_at, worker_epoch";

    /// A bucket not written yet reads as missing, full (`concurrency::bucket_depth`).
    const CREATE_BUCKET: Option<&'static str> = None;

    const WRITE_BUCKET: &'static str = "INSERT INTO namespace_rates (namespace, tokens, updated_at) \
        VALUES ($1, $2, $3) ON CONFLICT (namespace) DO UPDATE SET tokens = excluded.tokens, \
        updated_at = max(namespace_rates.updated_at, excluded.updated_at)";

    fn tx(&mut self) -> &mut SqlTx<'t, 'c> {
        &mut self.0
    }

    async fn worker_lease_holds(&mut self, epoch: i64) -> Result<()> {
        liveness::check_for_claim(self.0.0, epoch).await
    }

    async fn now(&mut self) -> Result<i64> {
        Ok(ms(self.1.clock.now()))
    }

    /// Reads the [`JobFacts`] of the jobs of `due` that need them ([`DueExecution::needs_facts`]),
    /// in three statements whatever their number. The embedded store's single writer is the
    /// per-job lock: no other claim runs between these reads and the plan's writes.
    async fn job_facts(&mut self, due: &[DueExecution], now: i64) -> Result<FactsByJob> {
        let uids = steps::fact_uids(due, now);
        let mut facts: FactsByJob = uids
            .iter()
            .map(|u| ((*u).to_owned(), JobFacts::default()))
            .collect();
        if uids.is_empty() {
            return Ok(facts);
        }
        let uids = list(&uids)?;
        let read: Vec<&str> = due.iter().map(|e| e.id.as_str()).collect();
        let read = list(&read)?;
        let active: Vec<(String, String, String)> = sqlx::query_as(
            "SELECT job_uid, id, state FROM executions WHERE state = 'running' \
               AND job_uid IN (SELECT value FROM json_each(?1)) \
             UNION ALL \
             SELECT job_uid, id, state FROM executions WHERE due_at IS NOT NULL AND state = 'retry_wait' \
               AND job_uid IN (SELECT value FROM json_each(?1))",
        )
        .bind(&uids)
        .fetch_all(&mut **self.0.0)
        .await
        .map_err(db_err)?;
        for (uid, id, state) in active {
            if let Some(f) = facts.get_mut(&uid) {
                f.active.push(ActiveExecution {
                    id,
                    running: state == "running",
                });
            }
        }
        let waiting: Vec<(String, Option<i64>, Option<i64>)> = sqlx::query_as(
            "SELECT job_uid, max(CASE WHEN due_at <= ?2 AND attempt = 0 THEN fire_at END), \
               min(CASE WHEN attempt = 0 AND trigger = 'misfire' \
                 AND id NOT IN (SELECT value FROM json_each(?3)) THEN scheduled_at END) \
             FROM executions WHERE due_at IS NOT NULL AND job_uid IN (SELECT value FROM json_each(?1)) \
             GROUP BY job_uid",
        )
        .bind(&uids)
        .bind(now)
        .bind(&read)
        .fetch_all(&mut **self.0.0)
        .await
        .map_err(db_err)?;
        for (uid, latest, catchup) in waiting {
            if let Some(f) = facts.get_mut(&uid) {
                f.latest_due_fire_at = latest;
                f.earliest_waiting_catchup = catchup;
            }
        }
        let jobs: Vec<(String, Option<i64>)> = sqlx::query_as(
            "SELECT uid, next_fire_at FROM jobs WHERE uid IN (SELECT value FROM json_each(?1))",
        )
        .bind(&uids)
        .fetch_all(&mut **self.0.0)
        .await
        .map_err(db_err)?;
        for (uid, next) in jobs {
            if let Some(f) = facts.get_mut(&uid) {
                f.next_fire_at = next;
            }
        }
        Ok(facts)
    }
}
