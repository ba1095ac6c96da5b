//! The claim's statements on the single writer (which is the per-job lock), for the claim
//! written once in `sundial_store::steps::claim`: the due executions, the facts of their
//! jobs, and the plan's writes, a few statements whatever the batch.

use sundial_store::claim_order::Read;
use sundial_store::steps::claim::{self as steps, ClaimStatements};

use super::*;

/// [`CLAIMED_COLUMNS`] but the run definition, which the claim already read.
pub(crate) const CLAIM_RETURNING: &str = "id, namespace, job, trigger, attempt, max_attempts, scheduled_at, fire_at, \
    started_at, lease_expires_at, worker_epoch";

/// Reads the [`JobFacts`] of the jobs of `due` that need them ([`DueExecution::needs_facts`]),
/// in three statements whatever their number. The embedded store's single writer is the
/// per-job lock: no other claim runs between these reads and the plan's writes.
pub(crate) async fn job_facts(
    tx: &mut Tx<'_>,
    due: &[DueExecution],
    now: i64,
) -> Result<std::collections::HashMap<String, JobFacts>> {
    let mut uids: Vec<&str> = due
        .iter()
        .filter(|e| e.needs_facts(now))
        .map(|e| e.job_uid.as_str())
        .collect();
    uids.sort_unstable();
    uids.dedup();
    let mut facts: std::collections::HashMap<String, JobFacts> = uids
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
    .fetch_all(&mut **tx)
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
    .fetch_all(&mut **tx)
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
    .fetch_all(&mut **tx)
    .await
    .map_err(db_err)?;
    for (uid, next) in jobs {
        if let Some(f) = facts.get_mut(&uid) {
            f.next_fire_at = next;
        }
    }
    Ok(facts)
}

pub(crate) async fn execution_claim(
    store: &SqliteStore,
    claim: &ExecutionClaim,
) -> Result<Vec<ClaimedExecution>> {
    let mut tx = store.begin().await?;
    let applied = steps::claim(&mut ClaimTx { tx: &mut tx, store }, claim).await?;
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
struct ClaimTx<'t, 'c, 's> {
    tx: &'t mut Tx<'c>,
    store: &'s SqliteStore,
}

/// The columns a claim reads of a due execution (`rows::due_execution`).
const DUE_COLUMNS: &str =
    "id, namespace, job_uid, trigger, run, scheduled_at, fire_at, attempt, due_at";

/// A JSON array of `ids`, for `json_each`.
pub(crate) fn list<T: serde::Serialize>(ids: &[T]) -> Result<String> {
    serde_json::to_string(ids).map_err(|e| Error::Corrupt(e.to_string()))
}

impl ClaimStatements for ClaimTx<'_, '_, '_> {
    async fn worker_lease_holds(&mut self, epoch: i64) -> Result<()> {
        liveness::check_for_claim(self.tx, epoch).await
    }

    async fn now(&mut self) -> Result<i64> {
        Ok(ms(self.store.clock.now()))
    }

    async fn bucket(
        &mut self,
        namespace: &str,
        _rate: f64,
        _now: i64,
    ) -> Result<Option<(f64, i64)>> {
        sqlx::query_as("SELECT tokens, updated_at FROM namespace_rates WHERE namespace = ?1")
            .bind(namespace)
            .fetch_optional(&mut **self.tx)
            .await
            .map_err(db_err)
    }

    async fn due(&mut self, read: Read, limited: &[String]) -> Result<Vec<DueExecution>> {
        let rows = sqlx::query(&format!(
            "SELECT {DUE_COLUMNS} FROM executions WHERE due_at > ?4 AND due_at <= ?1 \
             AND namespace NOT IN (SELECT value FROM json_each(?3)) ORDER BY due_at LIMIT ?2"
        ))
        .bind(read.until)
        .bind(i64::from(read.limit))
        .bind(list(limited)?)
        .bind(read.after)
        .fetch_all(&mut **self.tx)
        .await
        .map_err(db_err)?;
        rows.iter().map(rows::due_execution).collect()
    }

    async fn due_in(&mut self, namespace: &str, now: i64, limit: i64) -> Result<Vec<DueExecution>> {
        let rows = sqlx::query(&format!(
            "SELECT {DUE_COLUMNS} FROM executions \
             WHERE namespace = ?1 AND due_at <= ?2 ORDER BY due_at LIMIT ?3"
        ))
        .bind(namespace)
        .bind(now)
        .bind(limit)
        .fetch_all(&mut **self.tx)
        .await
        .map_err(db_err)?;
        rows.iter().map(rows::due_execution).collect()
    }

    async fn job_facts(
        &mut self,
        due: &[DueExecution],
        now: i64,
    ) -> Result<std::collections::HashMap<String, JobFacts>> {
        job_facts(self.tx, due, now).await
    }

    async fn mark_misfire(&mut self, ids: &[String]) -> Result<()> {
        sqlx::query(
            "UPDATE executions SET trigger = 'misfire' WHERE id IN (SELECT value FROM json_each(?1))",
        )
        .bind(list(ids)?)
        .execute(&mut **self.tx)
        .await
        .map_err(db_err)?;
        Ok(())
    }

    async fn finish(
        &mut self,
        ids: &[String],
        state: ExecutionState,
        misfire: bool,
        now: i64,
    ) -> Result<()> {
        let trigger = if misfire { "'misfire'" } else { "trigger" };
        sqlx::query(&format!(
            "UPDATE executions SET state = ?3, trigger = {trigger}, due_at = NULL, \
               finished_at = ?2 WHERE id IN (SELECT value FROM json_each(?1))"
        ))
        .bind(list(ids)?)
        .bind(now)
        .bind(state.as_str())
        .execute(&mut **self.tx)
        .await
        .map_err(db_err)?;
        Ok(())
    }

    async fn defer(&mut self, ids: &[String], until: i64) -> Result<()> {
        sqlx::query(
            "UPDATE executions SET due_at = ?2 WHERE id IN (SELECT value FROM json_each(?1))",
        )
        .bind(list(ids)?)
        .bind(until)
        .execute(&mut **self.tx)
        .await
        .map_err(db_err)?;
        Ok(())
    }

    async fn cancel(&mut self, cancelled: &[ActiveExecution], now: i64) -> Result<()> {
        let ids: Vec<&str> = cancelled.iter().map(|a| a.id.as_str()).collect();
        cancel_all_in_tx(self.tx, &ids, now).await
    }

    async fn hand_out(
        &mut self,
        worker: &str,
        now: i64,
        ids: &[String],
        epoch: Option<i64>,
        runs: std::collections::HashMap<String, sundial_store::RunSpec>,
    ) -> Result<Vec<ClaimedExecution>> {
        let sql = format!(
            "UPDATE executions SET state = 'running', attempt = attempt + 1, worker = ?1, \
               started_at = coalesce(started_at, max(?2, fire_at)), \
               attempt_started_at = max(?2, fire_at), worker_epoch = ?4, \
               lease_expires_at = CASE WHEN ?4 IS NULL THEN max(?2, fire_at) + lease_ms END, \
               due_at = NULL \
             WHERE id IN (SELECT value FROM json_each(?3)) \
               AND state IN ('scheduled', 'queued', 'retry_wait') \
             RETURNING {CLAIM_RETURNING}"
        );
        let rows = sqlx::query(&sql)
            .bind(worker)
            .bind(now)
            .bind(list(ids)?)
            .bind(epoch)
            .fetch_all(&mut **self.tx)
            .await
            .map_err(db_err)?;
        rows::claimed_rows(&rows, runs, now, now)
    }

    async fn write_bucket(&mut self, namespace: &str, tokens: f64, now: i64) -> Result<()> {
        // The bucket's time never moves back: a clock read earlier than the bucket's last
        // write (a clock stepped back) must not refill the same milliseconds twice.
        sqlx::query(
            "INSERT INTO namespace_rates (namespace, tokens, updated_at) VALUES (?1, ?2, ?3) \
             ON CONFLICT (namespace) DO UPDATE SET tokens = excluded.tokens, \
             updated_at = max(namespace_rates.updated_at, excluded.updated_at)",
        )
        .bind(namespace)
        .bind(tokens)
        .bind(now)
        .execute(&mut **self.tx)
        .await
        .map_err(db_err)?;
        Ok(())
    }
}

pub(crate) async fn execution_next_due(store: &SqliteStore) -> Result<Option<Timestamp>> {
    let row = sqlx::query("SELECT min(due_at) AS due FROM executions WHERE due_at IS NOT NULL")
        .fetch_one(&store.reader)
        .await
        .map_err(db_err)?;
    let due: Option<i64> = row.try_get("due").map_err(db_err)?;
    due.map(ts).transpose()
}

pub(crate) async fn execution_due_count(
    store: &SqliteStore,
    from: Timestamp,
    until: Timestamp,
    cap: u32,
) -> Result<u64> {
    // `due_at >= ?1` implies `due_at IS NOT NULL`: the partial index `executions_due` serves it.
    let n: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM (SELECT 1 FROM executions WHERE due_at >= ?1 AND due_at < ?2 LIMIT ?3)",
    )
    .bind(ms(from))
    .bind(ms(until))
    .bind(i64::from(cap))
    .fetch_one(&store.reader)
    .await
    .map_err(db_err)?;
    Ok(u64::try_from(n).unwrap_or(0))
}
