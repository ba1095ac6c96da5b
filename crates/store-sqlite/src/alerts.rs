//! The alert outbox (`sundial_store::alerts`): events written by the triggers of migration
//! 0008, claimed under a lease in one write transaction (the store's one writer keeps two
//! claims apart), settled by their round.

use sundial_store::alerts::{AlertDetailsRow, AlertRow, delivered_json, events_of};
use sundial_store::{AlertEvent, AlertSettle};

use super::*;

pub(crate) async fn alert_states_add(store: &SqliteStore, states: &[String]) -> Result<()> {
    sundial_store::alerts::check_states(states)?;
    let mut tx = store.begin().await?;
    for state in states {
        sqlx::query("INSERT OR IGNORE INTO alert_states (state) VALUES (?1)")
            .bind(state)
            .execute(&mut *tx)
            .await
            .map_err(db_err)?;
    }
    commit(tx).await
}

pub(crate) async fn alert_claim(
    store: &SqliteStore,
    limit: u32,
    lease: Duration,
) -> Result<Vec<AlertEvent>> {
    let now = ms(store.clock.now());
    let lease_ms = i64::try_from(lease.as_millis()).unwrap_or(i64::MAX / 2);
    let mut tx = store.begin().await?;
    let claimed: Vec<AlertRow> = sqlx::query_as(
        "UPDATE alert_events SET lease_expires_at = ?1 + ?3, attempts = attempts + 1 \
         WHERE seq IN (SELECT seq FROM alert_events \
                       WHERE due_at <= ?1 AND (lease_expires_at IS NULL OR lease_expires_at < ?1) \
                       ORDER BY seq LIMIT ?2) \
         RETURNING seq, attempts, kind, id, state, namespace, delivered",
    )
    .bind(now)
    .bind(i64::from(limit))
    .bind(lease_ms)
    .fetch_all(&mut *tx)
    .await
    .map_err(db_err)?;
    if claimed.is_empty() {
        tx.rollback().await.map_err(db_err)?;
        return Ok(Vec::new());
    }
    let mut executions: Vec<AlertDetailsRow> = Vec::new();
    let mut runs: Vec<AlertDetailsRow> = Vec::new();
    for (_, _, kind, id, _, _, _) in &claimed {
        if kind == "run" {
            runs.extend(
                sqlx::query_as(
                    "SELECT r.id, r.workflow, NULL, NULL, 0, r.finished_at, \
                       (SELECT a.error FROM executions x JOIN attempts a ON a.execution_id = x.id \
                        WHERE x.run_id = r.id AND a.error IS NOT NULL ORDER BY a.finished_at LIMIT 1) \
                     FROM workflow_runs r WHERE r.id = ?1",
                )
                .bind(id)
                .fetch_optional(&mut *tx)
                .await
                .map_err(db_err)?,
            );
        } else {
            executions.extend(
                sqlx::query_as(
                    "SELECT x.id, x.job, x.task, x.run_id, x.attempt, x.finished_at, \
                       (SELECT a.error FROM attempts a WHERE a.execution_id = x.id \
                        ORDER BY a.attempt DESC LIMIT 1) \
                     FROM executions x WHERE x.id = ?1",
                )
                .bind(id)
                .fetch_optional(&mut *tx)
                .await
                .map_err(db_err)?,
            );
        }
    }
    let (events, gone) = events_of(claimed, &executions, &runs)?;
    for seq in gone {
        sqlx::query("DELETE FROM alert_events WHERE seq = ?1")
            .bind(seq)
            .execute(&mut *tx)
            .await
            .map_err(db_err)?;
    }
    commit(tx).await?;
    Ok(events)
}

pub(crate) async fn alert_settle(
    store: &SqliteStore,
    seq: i64,
    round: u32,
    settle: &AlertSettle,
) -> Result<bool> {
    let mut tx = store.begin().await?;
    let done = match settle {
        AlertSettle::Done => {
            sqlx::query("DELETE FROM alert_events WHERE seq = ?1 AND attempts = ?2")
                .bind(seq)
                .bind(i64::from(round))
                .execute(&mut *tx)
                .await
        }
        AlertSettle::Retry { delivered, due_at } => {
            sqlx::query(
                "UPDATE alert_events SET due_at = ?3, lease_expires_at = NULL, delivered = ?4 \
                 WHERE seq = ?1 AND attempts = ?2",
            )
            .bind(seq)
            .bind(i64::from(round))
            .bind(ms(*due_at))
            .bind(delivered_json(delivered)?)
            .execute(&mut *tx)
            .await
        }
    }
    .map_err(db_err)?;
    commit(tx).await?;
    Ok(done.rows_affected() == 1)
}
