//! The claim: due executions read oldest due first on the single writer (which is the per-job
//! lock), the facts of their jobs, the decision of `sundial_store::claim::plan`, and its
//! application in a few statements whatever the batch.

use sundial_store::claim_order::ClaimReads;

use super::*;

/// [`CLAIMED_COLUMNS`] but the run definition, which the claim already read.
pub(crate) const CLAIM_RETURNING: &str = "id, namespace, job, attempt, max_attempts, scheduled_at, fire_at, \
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
    let uids = serde_json::to_string(&uids).map_err(|e| Error::Corrupt(e.to_string()))?;
    let read: Vec<&str> = due.iter().map(|e| e.id.as_str()).collect();
    let read = serde_json::to_string(&read).map_err(|e| Error::Corrupt(e.to_string()))?;
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

/// Applies what a claim decided except the hand-out itself, one statement a kind.
pub(crate) async fn apply_claim_plan(tx: &mut Tx<'_>, plan: &ClaimPlan, now: i64) -> Result<()> {
    let list =
        |ids: &[String]| serde_json::to_string(ids).map_err(|e| Error::Corrupt(e.to_string()));
    if !plan.misfire.is_empty() {
        sqlx::query(
            "UPDATE executions SET trigger = 'misfire' WHERE id IN (SELECT value FROM json_each(?1))",
        )
        .bind(list(&plan.misfire)?)
        .execute(&mut **tx)
        .await
        .map_err(db_err)?;
    }
    for (ids, state, trigger) in [
        (&plan.missed, "missed", "'misfire'"),
        (&plan.skipped, "skipped", "trigger"),
    ] {
        if ids.is_empty() {
            continue;
        }
        sqlx::query(&format!(
            "UPDATE executions SET state = '{state}', trigger = {trigger}, due_at = NULL, \
               finished_at = ?2 WHERE id IN (SELECT value FROM json_each(?1))"
        ))
        .bind(list(ids)?)
        .bind(now)
        .execute(&mut **tx)
        .await
        .map_err(db_err)?;
    }
    if !plan.deferred.is_empty() {
        sqlx::query(
            "UPDATE executions SET due_at = ?2 WHERE id IN (SELECT value FROM json_each(?1))",
        )
        .bind(list(&plan.deferred)?)
        .bind(ClaimPlan::deferred_until(now))
        .execute(&mut **tx)
        .await
        .map_err(db_err)?;
    }
    if !plan.cancelled.is_empty() {
        let ids: Vec<&str> = plan.cancelled.iter().map(|a| a.id.as_str()).collect();
        cancel_all_in_tx(tx, &ids, now).await?;
    }
    Ok(())
}

pub(crate) async fn execution_claim(
    store: &SqliteStore,
    claim: &ExecutionClaim,
) -> Result<Vec<ClaimedExecution>> {
    let now = ms(store.clock.now());
    let mut tx = store.begin().await?;
    if let Some(epoch) = claim.epoch {
        liveness::check_for_claim(&mut tx, epoch).await?;
    }
    // Token buckets of the rate-limited namespaces, refilled to now.
    let mut buckets = Vec::with_capacity(claim.rate_limits.len());
    for (ns, rate) in &claim.rate_limits {
        let row: Option<(f64, i64)> =
            sqlx::query_as("SELECT tokens, updated_at FROM namespace_rates WHERE namespace = ?1")
                .bind(ns)
                .fetch_optional(&mut *tx)
                .await
                .map_err(db_err)?;
        buckets.push((ns.clone(), refill(row, *rate, now)));
    }
    let limited: Vec<&str> = claim.rate_limits.keys().map(String::as_str).collect();
    let limited = serde_json::to_string(&limited).map_err(|e| Error::Corrupt(e.to_string()))?;
    const DUE_COLUMNS: &str =
        "id, namespace, job_uid, trigger, run, scheduled_at, fire_at, attempt, due_at";
    // Namespaces without a rate limit are read up to the claim-ahead window (after every
    // due execution), in the order the claim asks for (`sundial_store::claim_order`); a
    // rate-limited namespace's only once due, oldest first.
    let sql = format!(
        "SELECT {DUE_COLUMNS} FROM executions WHERE due_at > ?4 AND due_at <= ?1 \
         AND namespace NOT IN (SELECT value FROM json_each(?3)) ORDER BY due_at LIMIT ?2"
    );
    let mut reads = ClaimReads::new(now, claim.ahead_ms, claim.limit, claim.on_time_first);
    let mut rows = Vec::new();
    let mut returned = 0;
    while let Some(read) = reads.next(returned) {
        let more = sqlx::query(&sql)
            .bind(read.until)
            .bind(i64::from(read.limit))
            .bind(&limited)
            .bind(read.after)
            .fetch_all(&mut *tx)
            .await
            .map_err(db_err)?;
        returned = more.len();
        rows.extend(more);
    }
    for (ns, tokens) in &buckets {
        let allowance = sundial_store::claim::allowance(*tokens, claim.limit);
        if allowance > 0 {
            rows.extend(
                sqlx::query(&format!(
                    "SELECT {DUE_COLUMNS} FROM executions \
                     WHERE namespace = ?1 AND due_at <= ?2 ORDER BY due_at LIMIT ?3"
                ))
                .bind(ns)
                .bind(now)
                .bind(allowance)
                .fetch_all(&mut *tx)
                .await
                .map_err(db_err)?,
            );
        }
    }
    let mut due: Vec<DueExecution> = rows
        .iter()
        .map(rows::due_execution)
        .collect::<Result<_>>()?;
    if !buckets.is_empty() || claim.on_time_first {
        sundial_store::claim::oldest_due(&mut due, claim.limit);
    }
    let facts = job_facts(&mut tx, &due, now).await?;
    let plan = sundial_store::claim::plan(&due, &facts, &buckets, now);
    apply_claim_plan(&mut tx, &plan, now).await?;
    let runs = plan.runs(due);
    let ids = serde_json::to_string(&plan.run).map_err(|e| Error::Corrupt(e.to_string()))?;
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
        .bind(&claim.worker)
        .bind(now)
        .bind(ids)
        .bind(claim.epoch)
        .fetch_all(&mut *tx)
        .await
        .map_err(db_err)?;
    // The clock as late in the claim as it can be read: a worker holds what it claimed ahead
    // for its start less this reading, from when the claim returns.
    let claimed = rows::claimed_rows(&rows, runs, now, ms(store.clock.now()))?;
    // The bucket's time never moves back (this claim read the clock before it took the
    // write lock, so a claim that read it later may have refilled the bucket first).
    for (ns, tokens) in &plan.buckets {
        sqlx::query(
            "INSERT INTO namespace_rates (namespace, tokens, updated_at) VALUES (?1, ?2, ?3) \
             ON CONFLICT (namespace) DO UPDATE SET tokens = excluded.tokens, \
             updated_at = max(namespace_rates.updated_at, excluded.updated_at)",
        )
        .bind(ns)
        .bind(*tokens)
        .bind(now)
        .execute(&mut *tx)
        .await
        .map_err(db_err)?;
    }
    commit(tx).await?;
    for a in plan.cancelled.iter().filter(|a| a.running) {
        let _ = store.signals.cancelled.send(a.id.clone());
    }
    Ok(claimed)
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
