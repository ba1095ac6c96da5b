//! A node's heartbeat and the cluster status (docs/configuration.md, "node_id"), written
//! once over the statements each store provides ([`NodeStatements`], on its [`Writer`]).
//!
//! Invariants: a node id is held by one live process at a time: a heartbeat from another
//! process (another instance) takes the id over only once the holder's registration has
//! expired, and is refused otherwise, writing nothing. The status is read at one instant of
//! the store's clock and reports only unexpired shard leases.

use std::future::Future;

use sundial_core::Dur;

use crate::reads::{Statement, Writer};
use crate::{ClusterStatus, Error, NodeStatus, Result};

/// The statements of a heartbeat and of the cluster status, in the dialect of one store.
/// Every method may fail with the store's classified error.
pub trait NodeStatements: Writer {
    /// This process's instance: a fresh id every time the store is opened, so a node id's
    /// holder is one process.
    fn instance(&self) -> &str;

    /// The nodes seen in the minute before `now`, in id order, with their shard counts and
    /// worker leases.
    fn nodes(&self, now: i64) -> impl Future<Output = Result<Vec<NodeStatus>>> + Send;

    /// Executions waiting for a claim due by `now`, those due later, and those with a running
    /// attempt (or held under a worker lease).
    fn queue_counts(&self, now: i64) -> impl Future<Output = Result<(i64, i64, i64)>> + Send;

    /// Executions waiting for a claim due by `now`, per namespace.
    fn queued_by_namespace(
        &self,
        now: i64,
    ) -> impl Future<Output = Result<Vec<(String, i64)>>> + Send;

    /// The unexpired shard leases at `now`: (shard, the owning node's id).
    fn shard_owners(&self, now: i64) -> impl Future<Output = Result<Vec<(i64, String)>>> + Send;
}

/// A node's registration or renewal: `$1` the node, `$2` this process's instance, `$3` its
/// roles, `$4` now (Unix ms, UTC), `$5` the time to live in milliseconds. It writes nothing
/// while another instance holds the id unexpired.
const UPSERT_NODE: &str = "INSERT INTO nodes (id, instance, roles, started_at, heartbeat_at, \
      expires_at) VALUES ($1, $2, $3, $4, $4, $4 + $5) \
    ON CONFLICT (id) DO UPDATE SET instance = excluded.instance, roles = excluded.roles, \
      heartbeat_at = excluded.heartbeat_at, expires_at = excluded.expires_at, \
      started_at = CASE WHEN nodes.instance = excluded.instance THEN nodes.started_at \
        ELSE excluded.started_at END \
    WHERE nodes.instance = excluded.instance OR nodes.expires_at <= $4";

/// Writes `node`'s heartbeat: registers it with `roles`, or renews it, for `ttl`.
///
/// # Errors
/// [`Error::Conflict`] naming the node id when another live process holds it (nothing
/// written); otherwise the store's classified error.
pub async fn node_heartbeat<S: NodeStatements>(
    store: &S,
    node: &str,
    roles: &[String],
    ttl: Dur,
) -> Result<()> {
    let now = store.now().await?;
    let roles = roles.join(",");
    let st = Statement::new(UPSERT_NODE)
        .bind(node)
        .bind(store.instance())
        .bind(roles.as_str())
        .bind(now)
        .bind(ttl.as_millis_i64());
    if store.execute(&st).await? > 0 {
        Ok(())
    } else {
        Err(Error::Conflict(format!(
            "node id '{node}' is held by another live process; give each process its own --node-id"
        )))
    }
}

/// The cluster status at the store's now.
///
/// # Errors
/// The store's classified error of the first statement that failed; [`Error::Corrupt`] when
/// the store's now is no instant.
pub async fn cluster_status<S: NodeStatements>(store: &S) -> Result<ClusterStatus> {
    let now = store.now().await?;
    let nodes = store.nodes(now).await?;
    let (queued, scheduled, running) = store.queue_counts(now).await?;
    let queued_by_namespace = store.queued_by_namespace(now).await?;
    let dead_by_namespace = store
        .rows(&Statement::new(
            "SELECT namespace, count(*) FROM dead_letters GROUP BY namespace",
        ))
        .await?
        .iter()
        .map(|r| Ok((S::text(r)?, S::int(r, 1)?)))
        .collect::<Result<Vec<_>>>()?;
    let leases = store.shard_owners(now).await?;
    Ok(ClusterStatus {
        shard_owners: shard_owners(leases),
        now: super::instant(now)?,
        nodes,
        queued: count(queued),
        scheduled: count(scheduled),
        running: count(running),
        queued_by_namespace: crate::alerts::namespace_counts(queued_by_namespace),
        dead_by_namespace: crate::alerts::namespace_counts(dead_by_namespace),
    })
}

/// A stored count as a `u64`; a negative one (none is) reads 0.
fn count(n: i64) -> u64 {
    u64::try_from(n).unwrap_or(0)
}

/// The owner of each shard, indexed by shard (0 to [`sundial_core::SHARD_COUNT`] − 1), from
/// the leases; a lease of a shard out of range is left out.
fn shard_owners(leases: Vec<(i64, String)>) -> Vec<Option<String>> {
    let mut owners = vec![None; usize::from(sundial_core::SHARD_COUNT)];
    for (shard, owner) in leases {
        if let Some(cell) = usize::try_from(shard).ok().and_then(|s| owners.get_mut(s)) {
            *cell = Some(owner);
        }
    }
    owners
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shard_owners_are_indexed_by_shard_and_out_of_range_leases_left_out() {
        let owners = shard_owners(vec![
            (0, "a".into()),
            (5, "b".into()),
            (-1, "x".into()),
            (i64::from(sundial_core::SHARD_COUNT), "y".into()),
        ]);
        assert_eq!(owners.len(), usize::from(sundial_core::SHARD_COUNT));
        assert_eq!(owners[0].as_deref(), Some("a"));
        assert_eq!(owners[5].as_deref(), Some("b"));
        assert_eq!(owners.iter().flatten().count(), 2);
        assert_eq!(count(-3), 0);
    }
}
