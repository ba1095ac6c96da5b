//! Notifications: `NOTIFY` on commit for executions that became due, executions cancelled
//! while running and shard leases given up, and the listener that turns them into this
//! process's `Signals`.

use super::*;

/// Keeps a connection listening on [`DUE_CHANNEL`], [`CANCEL_CHANNEL`] and [`SHARDS_CHANNEL`]
/// and turns each
/// notification into the matching [`Signals`]; on a lost connection it wakes the due signal
/// (work may have come due meanwhile) and reconnects.
pub(crate) async fn listen(url: String, signals: Signals) {
    loop {
        match PgListener::connect(&url).await {
            Ok(mut listener) => {
                if let Err(e) = listener
                    .listen_all([DUE_CHANNEL, CANCEL_CHANNEL, SHARDS_CHANNEL])
                    .await
                {
                    tracing::warn!(error = %e, "LISTEN failed");
                } else {
                    loop {
                        match listener.try_recv().await {
                            Ok(Some(n)) if n.channel() == CANCEL_CHANNEL => {
                                let _ = signals.cancelled.send(n.payload().to_owned());
                            }
                            Ok(Some(n)) if n.channel() == SHARDS_CHANNEL => {
                                signals.shards.notify_one();
                            }
                            Ok(_) => signals.due.notify_one(),
                            Err(e) => {
                                tracing::warn!(error = %e, "notification connection lost");
                                break;
                            }
                        }
                    }
                }
            }
            Err(e) => tracing::debug!(error = %e, "cannot connect the notification listener"),
        }
        signals.due.notify_one();
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// Tells every process that an execution was cancelled (delivered on commit).
pub(crate) async fn notify_cancelled(tx: &mut Tx<'_>, id: &str) -> Result<()> {
    sqlx::query("SELECT pg_notify($1, $2)")
        .bind(CANCEL_CHANNEL)
        .bind(id)
        .execute(&mut **tx)
        .await
        .map_err(db_err)?;
    Ok(())
}

pub(crate) async fn notify_due(tx: &mut Tx<'_>) -> Result<()> {
    sqlx::query("SELECT pg_notify($1, '')")
        .bind(DUE_CHANNEL)
        .execute(&mut **tx)
        .await
        .map_err(db_err)?;
    Ok(())
}
