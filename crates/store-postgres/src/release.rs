//! The release's updates on PostgreSQL ([`ReleaseStatements`]; the step itself, its reads and a
//! task's failing are `sundial_store::steps::release`): lists travel as arrays (`UNNEST`), so every
//! write is one statement however many rows, and a task made due enters `execution_queue` in the
//! statement that queues it. The caller has locked the runs' rows in id order
//! (`workflows::lock_runs_of`, the lock order of `workflows.rs`), so two endings in one run never
//! release at once.

use sundial_store::steps::release::ReleaseStatements;

use super::*;

/// The release's statements on an open transaction: this store's
/// [`SqlTx`](crate::reads::SqlTx), by the name the steps that extend the release (a run's
/// cancel, retry and expiry) know it.
pub(crate) use crate::reads::SqlTx as Release;

/// The updates, each one statement over arrays (`UNNEST`).
impl ReleaseStatements for Release<'_, '_> {
    async fn queue_tasks(&mut self, queued: &[(String, String)], now: i64) -> Result<()> {
        let (ids, runs): (Vec<&str>, Vec<&str>) = queued
            .iter()
            .map(|(id, run)| (id.as_str(), run.as_str()))
            .unzip();
        sqlx::query(
            "WITH q AS (SELECT * FROM UNNEST($1::text[], $2::text[]) AS q(id, run)), \
             e AS (UPDATE executions x SET state = 'scheduled', due_at = $3, fire_at = $3, \
                     queued_at = $3, run = q.run FROM q WHERE x.id = q.id \
                   RETURNING x.id, x.namespace, x.job_uid) \
             INSERT INTO execution_queue (id, namespace, job_uid, due_at) \
             SELECT id, namespace, job_uid, $3 FROM e",
        )
        .bind(&ids)
        .bind(&runs)
        .bind(now)
        .execute(&mut **self.0)
        .await
        .map_err(db_err)?;
        Ok(())
    }

    async fn end_tasks(&mut self, ended: &[(String, &'static str)], now: i64) -> Result<()> {
        set_states(
            self.0,
            "UPDATE executions x SET state = e.state, due_at = NULL, finished_at = $3 \
             FROM UNNEST($1::text[], $2::text[]) AS e(id, state) WHERE x.id = e.id",
            ended,
            now,
        )
        .await
    }

    async fn end_runs(&mut self, ended: &[(String, &'static str)], now: i64) -> Result<()> {
        set_states(
            self.0,
            "UPDATE workflow_runs r SET state = e.state, finished_at = $3, timeout_at = NULL \
             FROM UNNEST($1::text[], $2::text[]) AS e(id, state) WHERE r.id = e.id",
            ended,
            now,
        )
        .await
    }
}

/// Runs `sql`, an update whose `$1` and `$2` are the ids and states of `pairs` as arrays and
/// `$3` is `now` (ms): one statement however many pairs.
///
/// # Errors
/// The store's, classified.
async fn set_states(
    tx: &mut Tx<'_>,
    sql: &str,
    pairs: &[(String, &'static str)],
    now: i64,
) -> Result<()> {
    let (ids, states): (Vec<&str>, Vec<&str>) = pairs
        .iter()
        .map(|(id, state)| (id.as_str(), *state))
        .unzip();
    sqlx::query(sql)
        .bind(&ids)
        .bind(&states)
        .bind(now)
        .execute(&mut **tx)
        .await
        .map_err(db_err)?;
    Ok(())
}
