//! Checks of nodes and the cluster status: the node heartbeat's liveness and its refusal of a
//! node id another live process holds, and the counts `GET /v1/cluster` shows.

use super::*;

fn roles(list: &[&str]) -> Vec<String> {
    list.iter().map(|r| (*r).to_owned()).collect()
}

async fn node(store: &dyn Store, id: &str) -> Option<crate::NodeStatus> {
    let status = store.cluster_status().await.expect("cluster status");
    status.nodes.into_iter().find(|n| n.id == id)
}

/// A heartbeat shows the node live, with its roles, until its time to live passes; a later
/// heartbeat of the same process moves `heartbeat_at` on and keeps `started_at`. A node whose
/// heartbeat lapsed a minute ago is no longer listed.
pub async fn a_node_heartbeat_shows_the_node_live_with_its_roles_until_its_ttl(h: Harness) {
    let clock = Arc::new(ManualClock::new(t0()));
    let store = h.open(clock.clone()).await;
    let ttl = Dur::from_secs(10);
    store
        .node_heartbeat("n1", &roles(&["api", "worker"]), ttl)
        .await
        .expect("heartbeat");
    let n = node(&*store, "n1").await.expect("listed");
    assert_eq!(n.roles, ["api", "worker"]);
    assert!(n.live);
    assert_eq!((n.started_at, n.heartbeat_at), (t0(), t0()));

    clock.advance(SignedDuration::from_secs(5));
    store
        .node_heartbeat("n1", &roles(&["api", "worker"]), ttl)
        .await
        .expect("heartbeat");
    let n = node(&*store, "n1").await.expect("listed");
    assert_eq!(n.started_at, t0(), "the same process keeps its start");
    assert_eq!(n.heartbeat_at, t0() + SignedDuration::from_secs(5));

    clock.advance(SignedDuration::from_secs(11));
    let n = node(&*store, "n1").await.expect("still listed");
    assert!(!n.live, "its heartbeat lapsed");
    clock.advance(SignedDuration::from_secs(61));
    assert!(node(&*store, "n1").await.is_none(), "gone after a minute");
}

/// A node id is one live process's: another process's heartbeat under it is refused with
/// `Conflict` and changes nothing, until the holder's heartbeat lapses.
pub async fn a_node_id_held_by_another_live_process_is_refused(h: Harness) {
    let clock = Arc::new(ManualClock::new(t0()));
    let first = h.open(clock.clone()).await;
    let second = h.another_process(clock.clone()).await;
    let ttl = Dur::from_secs(10);
    first
        .node_heartbeat("n", &roles(&["worker"]), ttl)
        .await
        .expect("first heartbeat");
    match second.node_heartbeat("n", &roles(&["api"]), ttl).await {
        Err(Error::Conflict(message)) => assert!(message.contains("node id"), "{message}"),
        other => panic!("expected Conflict, got {other:?}"),
    }
    let n = node(&*first, "n").await.expect("listed");
    assert_eq!(n.roles, ["worker"], "the refused heartbeat changed nothing");

    clock.advance(SignedDuration::from_secs(11));
    second
        .node_heartbeat("n", &roles(&["api"]), ttl)
        .await
        .expect("the id is free once its holder's heartbeat lapsed");
    let n = node(&*second, "n").await.expect("listed");
    assert_eq!(n.roles, ["api"]);
    assert_eq!(
        n.started_at,
        t0() + SignedDuration::from_secs(11),
        "a new process"
    );
}

/// The cluster status counts executions due and waiting (`queued`), created ahead of their
/// fire time (`scheduled`) and running (`running`), by the store's clock, and the shards each
/// node holds.
pub async fn cluster_status_counts_the_queue_and_each_nodes_shards(h: Harness) {
    let clock = Arc::new(ManualClock::new(t0()));
    let store = h.open(clock.clone()).await;
    store
        .node_heartbeat("s", &roles(&["scheduler", "worker"]), Dur::from_secs(10))
        .await
        .expect("heartbeat");
    let job = create(&*store, "ns", "a").await;
    let slots = [
        t0(),
        t0() + SignedDuration::from_secs(1),
        t0() + SignedDuration::from_secs(10),
    ];
    trigger(&*store, "s", &job, &slots).await.expect("trigger");
    let n = node(&*store, "s").await.expect("listed");
    assert_eq!(
        n.shards,
        u32::from(sundial_core::SHARD_COUNT),
        "a lone scheduler holds every shard"
    );

    let status = store.cluster_status().await.expect("status");
    assert_eq!((status.queued, status.scheduled, status.running), (1, 2, 0));
    assert_eq!(status.now, t0());
    let claimed = store.execution_claim(&claim("w", 10)).await.expect("claim");
    assert_eq!(claimed.len(), 1);
    let status = store.cluster_status().await.expect("status");
    assert_eq!((status.queued, status.scheduled, status.running), (0, 2, 1));
    clock.advance(SignedDuration::from_secs(1));
    let status = store.cluster_status().await.expect("status");
    assert_eq!((status.queued, status.scheduled, status.running), (1, 1, 1));
}
