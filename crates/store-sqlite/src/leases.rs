//! Shard leases: the embedded store gives every shard to the one process holding the OS lock
//! on `<db>.scheduler.lock`, with an epoch that grows with every new holder, and refuses a
//! second live scheduler.

use super::*;

pub(crate) async fn shard_lease_renew(
    store: &SqliteStore,
    request: &ShardLeaseRequest,
) -> Result<Vec<ShardLease>> {
    store.take_scheduler_lock()?;
    let now = store.clock.now();
    let expires = now + request.ttl.as_signed();
    // The OS lock proves any other owner dead: take every shard, bumping the epoch when the
    // owner (this process instance) changes.
    let owner = format!("{}/{}", request.node, store.instance);
    let mut tx = store.begin().await?;
    let rows = sqlx::query(
        "WITH RECURSIVE s(n) AS (SELECT 0 UNION ALL SELECT n + 1 FROM s WHERE n + 1 < ?1) \
         INSERT INTO shard_leases (shard, owner, epoch, expires_at) SELECT n, ?2, 1, ?3 FROM s WHERE true \
         ON CONFLICT (shard) DO UPDATE SET \
           epoch = CASE WHEN owner = excluded.owner THEN epoch ELSE epoch + 1 END, \
           owner = excluded.owner, expires_at = excluded.expires_at \
         RETURNING shard, epoch, expires_at",
    )
    .bind(i64::from(SHARD_COUNT))
    .bind(&owner)
    .bind(ms(expires))
    .fetch_all(&mut *tx)
    .await
    .map_err(db_err)?;
    commit(tx).await?;
    rows.iter().map(rows::shard_lease).collect()
}

pub(crate) async fn shard_lease_release(store: &SqliteStore, node: &str) -> Result<()> {
    let owner = format!("{node}/{}", store.instance);
    sqlx::query("UPDATE shard_leases SET expires_at = 0 WHERE owner = ?1")
        .bind(owner)
        .execute(&store.writer)
        .await
        .map_err(db_err)?;
    *store
        .scheduler_lock
        .lock()
        .unwrap_or_else(|e| e.into_inner()) = None;
    Ok(())
}
