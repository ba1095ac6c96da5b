//! The alert outbox (`sundial_store::alerts`): events written by the triggers of migration
//! 0008, claimed under a lease with `SKIP LOCKED` (so dispatchers in several processes never
//! wait on each other), settled by their round.

use sundial_store::alerts::{AlertDetailsRow, AlertRow, events_of};
use sundial_store::{AlertEvent, AlertSettle};

use super::*;

pub(crate) async fn alert_states_add(store: &PgStore, states: &[String]) -> Result<()> {
    sundial_store::alerts::check_states(states)?;
    sqlx::query(
        "INSERT INTO alert_states (state) SELECT UNNEST($1::text[]) ON CONFLICT DO NOTHING",
    )
    .bind(states)
    .execute(&store.pool)
    .await
    .map_err(db_err)?;
    Ok(())
}

pub(crate) async fn alert_claim(
    store: &PgStore,
    limit: u32,
    lease: Duration,
) -> Result<Vec<AlertEvent>> {
    let now = store.now_ms(&store.pool).await?;
    let lease_ms = i64::try_from(lease.as_millis()).unwrap_or(i64::MAX / 2);
    let claimed: Vec<AlertRow> = sqlx::query_as(
        "WITH c AS (SELECT seq FROM alert_events \
                    WHERE due_at <= $1 AND (lease_expires_at IS NULL OR lease_expires_at < $1) \
                    ORDER BY seq LIMIT $2 FOR UPDATE SKIP LOCKED) \
         UPDATE alert_events a SET lease_expires_at = $1 + $3, attempts = a.attempts + 1 \
         FROM c WHERE a.seq = c.seq \
         RETURNING a.seq, a.attempts, a.kind, a.id, a.state, a.namespace, a.delivered",
    )
    .bind(now)
    .bind(i64::from(limit))
    .bind(lease_ms)
    .fetch_all(&store.pool)
    .await
    .map_err(db_err)?;
    if claimed.is_empty() {
        return Ok(Vec::new());
    }
    let ids_of = |kind: &str| -> Vec<&str> {
        claimed
            .iter()
            .filter(|r| r.2 == kind)
            .map(|r| r.3.as_str())
            .collect()
    };
    let executions: Vec<AlertDetailsRow> = sqlx::query_as(
        "SELECT x.id, x.job, x.task, x.run_id, x.attempt, x.finished_at, \
           (SELECT a.error FROM attempts a WHERE a.execution_id = x.id \
            ORDER BY a.attempt DESC LIMIT 1) \
         FROM executions x WHERE x.id = ANY($1)",
    )
    .bind(ids_of("execution"))
    .fetch_all(&store.pool)
    .await
    .map_err(db_err)?;
    let runs: Vec<AlertDetailsRow> = sqlx::query_as(
        "SELECT r.id, r.workflow, NULL::text, NULL::text, 0::bigint, r.finished_at, \
           (SELECT a.error FROM executions x JOIN attempts a ON a.execution_id = x.id \
            WHERE x.run_id = r.id AND a.error IS NOT NULL ORDER BY a.finished_at LIMIT 1) \
         FROM workflow_runs r WHERE r.id = ANY($1)",
    )
    .bind(ids_of("run"))
    .fetch_all(&store.pool)
    .await
    .map_err(db_err)?;
    let (events, gone) = events_of(claimed, &executions, &runs)?;
    if !gone.is_empty() {
        sqlx::query("DELETE FROM alert_events WHERE seq = ANY($1)")
            .bind(&gone)
            .execute(&store.pool)
            .await
            .map_err(db_err)?;
    }
    Ok(events)
}

pub(crate) async fn alert_settle(
    store: &PgStore,
    seq: i64,
    round: u32,
    settle: &AlertSettle,
) -> Result<bool> {
    let done = match settle {
        AlertSettle::Done => {
            sqlx::query("DELETE FROM alert_events WHERE seq = $1 AND attempts = $2")
                .bind(seq)
                .bind(i64::from(round))
                .execute(&store.pool)
                .await
        }
        AlertSettle::Retry { delivered, due_at } => {
            sqlx::query(
                "UPDATE alert_events SET due_at = $3, lease_expires_at = NULL, delivered = $4 \
                 WHERE seq = $1 AND attempts = $2",
            )
            .bind(seq)
            .bind(i64::from(round))
            .bind(ms(*due_at))
            .bind(sundial_store::alerts::delivered_json(delivered)?)
            .execute(&store.pool)
            .await
        }
    }
    .map_err(db_err)?;
    Ok(done.rows_affected() == 1)
}
