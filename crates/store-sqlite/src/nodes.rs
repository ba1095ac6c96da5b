//! Nodes: the heartbeat every process writes, and the cluster status (live nodes, their
//! shards, queue depth), written once (`sundial_store::steps::nodes`) over these statements.

use super::*;
use sundial_store::steps::nodes::NodeStatements;

impl NodeStatements for SqliteStore {
    fn instance(&self) -> &str {
        &self.instance
    }

    async fn nodes(&self, now: i64) -> Result<Vec<sundial_store::NodeStatus>> {
        let nodes = sqlx::query(
            "SELECT n.id, n.roles, n.started_at, n.heartbeat_at, n.expires_at, \
               (SELECT count(*) FROM shard_leases s WHERE s.owner = n.id || '/' || n.instance AND s.expires_at > ?1) AS shards, \
               w.epoch AS wl_epoch, w.renewed_at AS wl_renewed_at, w.expires_at AS wl_expires_at, \
               (SELECT count(*) FROM executions e WHERE e.state = 'running' AND e.worker_epoch = w.epoch) AS wl_held \
             FROM nodes n LEFT JOIN worker_leases w \
               ON w.epoch = (SELECT max(epoch) FROM worker_leases l WHERE l.worker = n.id) \
             WHERE n.expires_at > ?1 - 60000 ORDER BY n.id",
        )
        .bind(now)
        .fetch_all(&self.reader)
        .await
        .map_err(db_err)?;
        nodes.iter().map(|r| rows::node(r, now)).collect()
    }

    async fn queue_counts(&self, now: i64) -> Result<(i64, i64, i64)> {
        sqlx::query_as(
            "SELECT coalesce(sum(due_at <= ?1), 0), coalesce(sum(due_at > ?1), 0), \
             (SELECT count(*) FROM executions WHERE state = 'running') \
             FROM executions WHERE due_at IS NOT NULL",
        )
        .bind(now)
        .fetch_one(&self.reader)
        .await
        .map_err(db_err)
    }

    async fn queued_by_namespace(&self, now: i64) -> Result<Vec<(String, i64)>> {
        sqlx::query_as(
            "SELECT namespace, count(*) FROM executions \
             WHERE due_at IS NOT NULL AND due_at <= ?1 GROUP BY namespace",
        )
        .bind(now)
        .fetch_all(&self.reader)
        .await
        .map_err(db_err)
    }

    /// The embedded store's lease owner is `node/instance`; the status shows the node.
    async fn shard_owners(&self, now: i64) -> Result<Vec<(i64, String)>> {
        let leases: Vec<(i64, String)> = sqlx::query_as(
            "SELECT shard, owner FROM shard_leases WHERE expires_at > ?1 AND owner <> ''",
        )
        .bind(now)
        .fetch_all(&self.reader)
        .await
        .map_err(db_err)?;
        Ok(leases
            .into_iter()
            .map(|(shard, owner)| {
                let node = owner.split('/').next().unwrap_or_default().to_owned();
                (shard, node)
            })
            .collect())
    }
}
