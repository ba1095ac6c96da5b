//! Backfills (docs/time.md, "Backfill"): the driver's reads of running backfills and taken
//! slots; the creation, the fenced step and the cancel are `sundial_store::steps::backfill`
//! (the step and the cancel over this file's statements), the API's reads
//! `sundial_store::steps::listings`. A step locks the
//! backfill row (`FOR UPDATE`) after the shard fence, so a cancel waits for an in-flight step
//! and a step after a cancel writes nothing.

use super::*;
use sundial_store::steps::backfill::{self as steps, BackfillAdvance, BackfillStatements};
use sundial_store::steps::listings::BACKFILL_COLUMNS;
use sundial_store::{
    BackfillOf, BackfillRecord, BackfillStep, BackfillStepped, NewExecution, NewRun,
};

fn i64_of(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

pub(crate) async fn backfill_running(
    store: &PgStore,
    shards: &[u16],
) -> Result<Vec<BackfillRecord>> {
    if shards.is_empty() {
        return Ok(Vec::new());
    }
    let shards: Vec<i64> = shards.iter().map(|s| i64::from(*s)).collect();
    sqlx::query(&format!(
        "SELECT {BACKFILL_COLUMNS} FROM backfills WHERE state = 'running' AND shard = ANY($1) \
         ORDER BY created_at, id"
    ))
    .bind(&shards)
    .fetch_all(&store.pool)
    .await
    .map_err(db_err)?
    .iter()
    .map(rows::backfill)
    .collect()
}

pub(crate) async fn backfill_taken(
    store: &PgStore,
    of: BackfillOf,
    ids: &[String],
) -> Result<std::collections::HashSet<String>> {
    if ids.is_empty() {
        return Ok(Default::default());
    }
    let table = match of {
        BackfillOf::Job => "executions",
        BackfillOf::Workflow => "workflow_runs",
    };
    let found: Vec<String> =
        sqlx::query_scalar(&format!("SELECT id FROM {table} WHERE id = ANY($1)"))
            .bind(ids)
            .fetch_all(&store.pool)
            .await
            .map_err(db_err)?;
    Ok(found.into_iter().collect())
}

pub(crate) async fn backfill_unfinished(store: &PgStore, of: BackfillOf, uid: &str) -> Result<u64> {
    let sql = match of {
        BackfillOf::Job => "SELECT count(*) FROM execution_queue WHERE job_uid = $1".to_owned(),
        BackfillOf::Workflow => format!(
            "SELECT count(*) FROM workflow_runs WHERE workflow_uid = $1 AND state IN {}",
            rows::UNFINISHED_RUN
        ),
    };
    let n: i64 = sqlx::query_scalar(&sql)
        .bind(uid)
        .fetch_one(&store.pool)
        .await
        .map_err(db_err)?;
    Ok(u64::try_from(n).unwrap_or(0))
}

/// A backfill step's and cancel's statements ([`BackfillStatements`]) on a transaction; the
/// backfill row is locked (`FOR UPDATE`) after the shard fence, so a cancel waits for an
/// in-flight step, and tasks made due are notified in the transaction.
struct Statements<'t, 'c, 's> {
    tx: &'t mut Tx<'c>,
    store: &'s PgStore,
}

impl BackfillStatements for Statements<'_, '_, '_> {
    async fn now(&mut self) -> Result<i64> {
        self.store.now_ms(&mut **self.tx).await
    }

    async fn check_fence(
        &mut self,
        node: &str,
        leases: &[ShardLease],
        shard: u16,
        now: i64,
    ) -> Result<()> {
        trigger::check_fence(self.tx, node, leases, &[shard], now).await
    }

    async fn running_at(&mut self, id: &str, cursor: i64) -> Result<Option<Option<String>>> {
        sqlx::query_scalar(
            "SELECT last_id FROM backfills WHERE id = $1 AND state = 'running' AND cursor_at = $2 \
             FOR UPDATE",
        )
        .bind(id)
        .bind(cursor)
        .fetch_optional(&mut **self.tx)
        .await
        .map_err(db_err)
    }

    async fn hold_workflow(&mut self, run: &NewRun) -> Result<()> {
        // Runs of one workflow are created one at a time, as run_create does.
        workflows::lock_run_version(self.tx, run).await
    }

    async fn unfinished_run_due(&mut self, uid: &str, now: i64) -> Result<bool> {
        let busy: Option<i32> = sqlx::query_scalar(&format!(
            "SELECT 1 FROM workflow_runs WHERE workflow_uid = $1 AND state IN {} \
             AND fire_at <= $2 LIMIT 1",
            rows::UNFINISHED_RUN
        ))
        .bind(uid)
        .bind(now)
        .fetch_optional(&mut **self.tx)
        .await
        .map_err(db_err)?;
        Ok(busy.is_some())
    }

    async fn execution_state(&mut self, id: &str) -> Result<Option<String>> {
        sqlx::query_scalar("SELECT state FROM executions WHERE id = $1")
            .bind(id)
            .fetch_optional(&mut **self.tx)
            .await
            .map_err(db_err)
    }

    async fn insert_executions(
        &mut self,
        executions: &[NewExecution],
        now: i64,
        node: &str,
    ) -> Result<u32> {
        let executions: Vec<&NewExecution> = executions.iter().collect();
        let (created, _) =
            trigger::insert_executions(self.tx, &executions, now, Some(node), None).await?;
        if created > 0 {
            notify_due(self.tx).await?;
        }
        Ok(created)
    }

    async fn create_run(&mut self, run: &NewRun, now: i64) -> Result<Option<String>> {
        let made =
            workflows::create_run_in_tx(self.tx, &self.store.workflow_specs, run, now).await?;
        Ok(made.inserted.then_some(made.id))
    }

    async fn advance(&mut self, a: &BackfillAdvance<'_>) -> Result<()> {
        sqlx::query(
            "UPDATE backfills SET cursor_at = $2, created = created + $3, existing = existing + $4, \
               last_id = COALESCE($5, last_id), updated_at = $6, \
               state = CASE WHEN $7 THEN 'done' ELSE state END, \
               finished_at = CASE WHEN $7 THEN $6 ELSE finished_at END \
             WHERE id = $1",
        )
        .bind(a.id)
        .bind(a.cursor)
        .bind(i64::from(a.created))
        .bind(i64_of(a.existing))
        .bind(&a.last_id)
        .bind(a.now)
        .bind(a.done)
        .execute(&mut **self.tx)
        .await
        .map_err(db_err)?;
        Ok(())
    }

    async fn backfill_state(&mut self, namespace: &str, id: &str) -> Result<Option<String>> {
        sqlx::query_scalar(
            "SELECT state FROM backfills WHERE namespace = $1 AND id = $2 FOR UPDATE",
        )
        .bind(namespace)
        .bind(id)
        .fetch_optional(&mut **self.tx)
        .await
        .map_err(db_err)
    }

    async fn cancel(&mut self, id: &str, reason: Option<&str>, now: i64) -> Result<BackfillRecord> {
        let row = sqlx::query(&format!(
            "UPDATE backfills SET state = 'cancelled', reason = $2, updated_at = $3, \
             finished_at = $3 WHERE id = $1 RETURNING {BACKFILL_COLUMNS}"
        ))
        .bind(id)
        .bind(reason)
        .bind(now)
        .fetch_one(&mut **self.tx)
        .await
        .map_err(db_err)?;
        rows::backfill(&row)
    }
}

/// Applies a backfill step (`sundial_store::steps::backfill`) in one transaction, committed
/// only when it applied.
pub(crate) async fn backfill_step(store: &PgStore, step: &BackfillStep) -> Result<BackfillStepped> {
    let mut tx = store.begin().await?;
    let stepped = steps::backfill_step(&mut Statements { tx: &mut tx, store }, step).await?;
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
    let record = steps::backfill_cancel(
        &mut Statements { tx: &mut tx, store },
        namespace,
        id,
        reason,
    )
    .await?;
    commit(tx).await?;
    Ok(record)
}
