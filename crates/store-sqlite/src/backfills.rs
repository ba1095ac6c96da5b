//! Backfills (docs/time.md, "Backfill"): the driver's reads of running backfills and taken
//! slots; the creation, the fenced step and the cancel are `sundial_store::steps::backfill`
//! (the step and the cancel over this file's statements), the API's reads
//! `sundial_store::steps::listings`. A step and a
//! cancel are transactions of the one writer, so a step after a cancel writes nothing.

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
    store: &SqliteStore,
    shards: &[u16],
) -> Result<Vec<BackfillRecord>> {
    if shards.is_empty() {
        return Ok(Vec::new());
    }
    // The embedded store's one scheduler holds every shard: read the running ones, keep those
    // of the shards given.
    let running: Vec<BackfillRecord> = sqlx::query(&format!(
        "SELECT {BACKFILL_COLUMNS} FROM backfills WHERE state = 'running' ORDER BY created_at, id"
    ))
    .fetch_all(&store.reader)
    .await
    .map_err(db_err)?
    .iter()
    .map(rows::backfill)
    .collect::<Result<_>>()?;
    Ok(running
        .into_iter()
        .filter(|b| shards.contains(&b.shard))
        .collect())
}

pub(crate) async fn backfill_taken(
    store: &SqliteStore,
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
    let mut found = std::collections::HashSet::new();
    for part in ids.chunks(500) {
        let marks = vec!["?"; part.len()].join(", ");
        let sql = format!("SELECT id FROM {table} WHERE id IN ({marks})");
        let mut q = sqlx::query_scalar::<_, String>(&sql);
        for id in part {
            q = q.bind(id);
        }
        found.extend(q.fetch_all(&store.reader).await.map_err(db_err)?);
    }
    Ok(found)
}

pub(crate) async fn backfill_unfinished(
    store: &SqliteStore,
    of: BackfillOf,
    uid: &str,
) -> Result<u64> {
    // The embedded store keeps its queue on executions: waiting ones have `due_at`, running
    // ones a lease (each through a partial index by incarnation).
    let sql = match of {
        BackfillOf::Job => {
            "SELECT (SELECT count(*) FROM executions WHERE job_uid = ?1 AND due_at IS NOT NULL) \
             + (SELECT count(*) FROM executions WHERE job_uid = ?1 AND state = 'running')"
                .to_owned()
        }
        BackfillOf::Workflow => format!(
            "SELECT count(*) FROM workflow_runs WHERE workflow_uid = ?1 AND state IN {}",
            rows::UNFINISHED_RUN
        ),
    };
    let n: i64 = sqlx::query_scalar(&sql)
        .bind(uid)
        .fetch_one(&store.reader)
        .await
        .map_err(db_err)?;
    Ok(u64::try_from(n).unwrap_or(0))
}

/// A backfill step's and cancel's statements ([`BackfillStatements`]) on the writer's
/// transaction; what the step made due or stopped is signalled after the commit.
struct Statements<'t, 'c, 's> {
    tx: &'t mut Tx<'c>,
    store: &'s SqliteStore,
    /// Executions went in: the workers are woken on commit.
    due: bool,
    made_runs: Vec<workflows::CreatedRun>,
}

impl BackfillStatements for Statements<'_, '_, '_> {
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
        trigger::check_fence(self.tx, self.store, node, leases, &[shard]).await
    }

    async fn running_at(&mut self, id: &str, cursor: i64) -> Result<Option<Option<String>>> {
        sqlx::query_scalar(
            "SELECT last_id FROM backfills WHERE id = ?1 AND state = 'running' AND cursor_at = ?2",
        )
        .bind(id)
        .bind(cursor)
        .fetch_optional(&mut **self.tx)
        .await
        .map_err(db_err)
    }

    async fn hold_workflow(&mut self, run: &NewRun) -> Result<()> {
        workflows::check_run_version(self.tx, run).await
    }

    async fn unfinished_run_due(&mut self, uid: &str, now: i64) -> Result<bool> {
        let busy: Option<i32> = sqlx::query_scalar(&format!(
            "SELECT 1 FROM workflow_runs WHERE workflow_uid = ?1 AND state IN {} \
             AND fire_at <= ?2 LIMIT 1",
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
        sqlx::query_scalar("SELECT state FROM executions WHERE id = ?1")
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
        let created = trigger::insert_executions(self.tx, &executions, ts(now)?, Some(node), None)
            .await?
            .0;
        self.due |= created > 0;
        Ok(created)
    }

    async fn create_run(&mut self, run: &NewRun, now: i64) -> Result<Option<String>> {
        let made =
            workflows::create_run_in_tx(self.tx, &self.store.workflow_specs, run, now).await?;
        let id = made.inserted.then(|| made.id.clone());
        self.made_runs.push(made);
        Ok(id)
    }

    async fn advance(&mut self, a: &BackfillAdvance<'_>) -> Result<()> {
        sqlx::query(
            "UPDATE backfills SET cursor_at = ?2, created = created + ?3, existing = existing + ?4, \
               last_id = COALESCE(?5, last_id), updated_at = ?6, \
               state = CASE WHEN ?7 THEN 'done' ELSE state END, \
               finished_at = CASE WHEN ?7 THEN ?6 ELSE finished_at END \
             WHERE id = ?1",
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
        sqlx::query_scalar("SELECT state FROM backfills WHERE namespace = ?1 AND id = ?2")
            .bind(namespace)
            .bind(id)
            .fetch_optional(&mut **self.tx)
            .await
            .map_err(db_err)
    }

    async fn cancel(&mut self, id: &str, reason: Option<&str>, now: i64) -> Result<BackfillRecord> {
        let row = sqlx::query(&format!(
            "UPDATE backfills SET state = 'cancelled', reason = ?2, updated_at = ?3, \
             finished_at = ?3 WHERE id = ?1 RETURNING {BACKFILL_COLUMNS}"
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

/// Applies a backfill step (`sundial_store::steps::backfill`) in one write transaction,
/// committed only when it applied; the workers are woken after the commit.
pub(crate) async fn backfill_step(
    store: &SqliteStore,
    step: &BackfillStep,
) -> Result<BackfillStepped> {
    let mut tx = store.begin().await?;
    let (stepped, due, made_runs) = {
        let mut s = Statements {
            tx: &mut tx,
            store,
            due: false,
            made_runs: Vec::new(),
        };
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
        let mut s = Statements {
            tx: &mut tx,
            store,
            due: false,
            made_runs: Vec::new(),
        };
        steps::backfill_cancel(&mut s, namespace, id, reason).await?
    };
    commit(tx).await?;
    Ok(record)
}
