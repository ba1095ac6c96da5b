//! Shard leases: a scheduler's renewal registers it live in `nodes`, renews what it holds,
//! gives back shards beyond its share of the live schedulers and takes free ones up to it, each
//! change of owner bumping the shard's epoch (the fencing token of a trigger commit).

use super::*;

pub(crate) async fn shard_lease_renew(
    store: &PgStore,
    request: &ShardLeaseRequest,
) -> Result<Vec<ShardLease>> {
    let node = &request.node;
    let ttl = request.ttl.as_millis_i64();
    let mut tx = store.begin().await?;
    let now = store.now_ms(&mut *tx).await?;
    // Heartbeat as a scheduler; a node id held by another live process is refused.
    let registered = sqlx::query(
        "INSERT INTO nodes (id, instance, roles, started_at, heartbeat_at, expires_at, scheduler_expires_at) \
         VALUES ($1, $2, 'scheduler', $3, $3, $3 + $4, $3 + $4) \
         ON CONFLICT (id) DO UPDATE SET instance = excluded.instance, heartbeat_at = excluded.heartbeat_at, \
           expires_at = excluded.expires_at, scheduler_expires_at = excluded.scheduler_expires_at, \
           started_at = CASE WHEN nodes.instance = excluded.instance THEN nodes.started_at ELSE excluded.started_at END \
         WHERE nodes.instance = excluded.instance OR nodes.expires_at <= $3",
    )
    .bind(node)
    .bind(&store.instance)
    .bind(now)
    .bind(ttl)
    .execute(&mut *tx)
    .await
    .map_err(db_err)?;
    if registered.rows_affected() == 0 {
        return Err(Error::Conflict(format!(
            "node id '{node}' is held by another live process; give each process its own --node-id"
        )));
    }
    let live: i64 =
        sqlx::query_scalar("SELECT count(*) FROM nodes WHERE scheduler_expires_at > $1")
            .bind(now)
            .fetch_one(&mut *tx)
            .await
            .map_err(db_err)?;
    let shards = i64::from(SHARD_COUNT);
    let share = (shards + live.max(1) - 1) / live.max(1);
    // Renew what this node holds and has not lost.
    let held: i64 = sqlx::query_scalar(
        "WITH r AS (UPDATE shard_leases SET expires_at = $2 + $3 WHERE owner = $1 AND expires_at > $2 RETURNING 1) \
         SELECT count(*) FROM r",
    )
    .bind(node)
    .bind(now)
    .bind(ttl)
    .fetch_one(&mut *tx)
    .await
    .map_err(db_err)?;
    if held > share {
        // Give back the excess so newly joined nodes can take it.
        sqlx::query(
            "UPDATE shard_leases SET expires_at = 0 WHERE shard IN \
             (SELECT shard FROM shard_leases WHERE owner = $1 AND expires_at > $2 ORDER BY shard DESC LIMIT $3)",
        )
        .bind(node)
        .bind(now)
        .bind(held - share)
        .execute(&mut *tx)
        .await
        .map_err(db_err)?;
    } else if held < share {
        // Take free shards (lapsed or given back), bumping each one's epoch.
        sqlx::query(
            "UPDATE shard_leases SET owner = $1, epoch = epoch + 1, expires_at = $2 + $3 WHERE shard IN \
             (SELECT shard FROM shard_leases WHERE expires_at <= $2 ORDER BY shard LIMIT $4 FOR UPDATE SKIP LOCKED)",
        )
        .bind(node)
        .bind(now)
        .bind(ttl)
        .bind(share - held)
        .execute(&mut *tx)
        .await
        .map_err(db_err)?;
    }
    let rows = sqlx::query("SELECT shard, epoch, expires_at FROM shard_leases WHERE owner = $1 AND expires_at > $2 ORDER BY shard")
        .bind(node)
        .bind(now)
        .fetch_all(&mut *tx)
        .await
        .map_err(db_err)?;
    commit(tx).await?;
    rows.iter().map(rows::shard_lease).collect()
}

pub(crate) async fn shard_lease_release(store: &PgStore, node: &str) -> Result<()> {
    let mut tx = store.begin().await?;
    sqlx::query("UPDATE shard_leases SET expires_at = 0 WHERE owner = $1")
        .bind(node)
        .execute(&mut *tx)
        .await
        .map_err(db_err)?;
    sqlx::query("UPDATE nodes SET scheduler_expires_at = 0 WHERE id = $1 AND instance = $2")
        .bind(node)
        .bind(&store.instance)
        .execute(&mut *tx)
        .await
        .map_err(db_err)?;
    // The other schedulers renew at once on commit, and take the shards given up.
    sqlx::query("SELECT pg_notify($1, $2)")
        .bind(SHARDS_CHANNEL)
        .bind(node)
        .execute(&mut *tx)
        .await
        .map_err(db_err)?;
    commit(tx).await
}
