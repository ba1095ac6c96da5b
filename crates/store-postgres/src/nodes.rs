//! Nodes: the heartbeat every process writes, and the cluster status (live nodes, their
//! shards, queue depth).

use super::*;

pub(crate) async fn node_heartbeat(
    store: &PgStore,
    node: &str,
    roles: &[String],
    ttl: sundial_core::Dur,
) -> Result<()> {
    let now = store.now_ms(&store.pool).await?;
    let done = sqlx::query(
        "INSERT INTO nodes (id, instance, roles, started_at, heartbeat_at, expires_at) VALUES ($1, $2, $3, $4, $4, $4 + $5) \
         ON CONFLICT (id) DO UPDATE SET instance = excluded.instance, roles = excluded.roles, \
           heartbeat_at = excluded.heartbeat_at, expires_at = excluded.expires_at, \
           started_at = CASE WHEN nodes.instance = excluded.instance THEN nodes.started_at ELSE excluded.started_at END \
         WHERE nodes.instance = excluded.instance OR nodes.expires_at <= $4",
    )
    .bind(node)
    .bind(&store.instance)
    .bind(roles.join(","))
    .bind(now)
    .bind(ttl.as_millis_i64())
    .execute(&store.pool)
    .await
    .map_err(db_err)?;
    if done.rows_affected() == 0 {
        return Err(Error::Conflict(format!(
            "node id '{node}' is held by another live process; give each process its own --node-id"
        )));
    }
    Ok(())
}

pub(crate) async fn cluster_status(store: &PgStore) -> Result<ClusterStatus> {
    let now = store.now_ms(&store.pool).await?;
    let nodes = sqlx::query(
        "SELECT n.id, n.roles, n.started_at, n.heartbeat_at, n.expires_at, \
           (SELECT count(*) FROM shard_leases s WHERE s.owner = n.id AND s.expires_at > $1) AS shards, \
           w.epoch AS wl_epoch, w.renewed_at AS wl_renewed_at, w.expires_at AS wl_expires_at, \
           (SELECT count(*) FROM execution_queue q WHERE q.worker_epoch = w.epoch) AS wl_held \
         FROM nodes n LEFT JOIN worker_leases w \
           ON w.epoch = (SELECT max(epoch) FROM worker_leases l WHERE l.worker = n.id) \
         WHERE n.expires_at > $1 - 60000 ORDER BY n.id",
    )
    .bind(now)
    .fetch_all(&store.pool)
    .await
    .map_err(db_err)?;
    let nodes = nodes
        .iter()
        .map(|r| rows::node(r, now))
        .collect::<Result<_>>()?;
    let (queued, scheduled, running): (i64, i64, i64) = sqlx::query_as(
        "SELECT count(*) FILTER (WHERE due_at <= $1), count(*) FILTER (WHERE due_at > $1), \
           count(*) FILTER (WHERE lease_expires_at IS NOT NULL OR worker_epoch IS NOT NULL) \
         FROM execution_queue",
    )
    .bind(now)
    .fetch_one(&store.pool)
    .await
    .map_err(db_err)?;
    let queued_by_namespace: Vec<(String, i64)> = sqlx::query_as(
        "SELECT namespace, count(*) FROM execution_queue WHERE due_at <= $1 GROUP BY namespace",
    )
    .bind(now)
    .fetch_all(&store.pool)
    .await
    .map_err(db_err)?;
    let dead_by_namespace: Vec<(String, i64)> =
        sqlx::query_as("SELECT namespace, count(*) FROM dead_letters GROUP BY namespace")
            .fetch_all(&store.pool)
            .await
            .map_err(db_err)?;
    // The embedded store's lease owner is `node/instance`; the map shows nodes.
    let leases: Vec<(i64, String)> = sqlx::query_as(
        "SELECT shard, owner FROM shard_leases WHERE expires_at > $1 AND owner <> ''",
    )
    .bind(now)
    .fetch_all(&store.pool)
    .await
    .map_err(db_err)?;
    let mut shard_owners = vec![None; sundial_core::SHARD_COUNT as usize];
    for (shard, owner) in leases.into_iter() {
        if let Some(cell) = usize::try_from(shard)
            .ok()
            .and_then(|s| shard_owners.get_mut(s))
        {
            *cell = Some(owner);
        }
    }
    Ok(ClusterStatus {
        shard_owners,
        now: ts(now)?,
        nodes,
        queued: u64::try_from(queued).unwrap_or(0),
        scheduled: u64::try_from(scheduled).unwrap_or(0),
        running: u64::try_from(running).unwrap_or(0),
        queued_by_namespace: sundial_store::alerts::namespace_counts(queued_by_namespace),
        dead_by_namespace: sundial_store::alerts::namespace_counts(dead_by_namespace),
    })
}
