//! The failure suite: real `sundial` processes on one PostgreSQL, a real loopback HTTP receiver
//! recording every delivery, real SIGKILL/SIGSTOP, a real database restart, a node cut off
//! through a TCP proxy, a node with a skewed clock. Each scenario checks docs/guarantees.md
//! mechanically from the records and prints a summary.
//!
//! Scenarios run one at a time (one restarts the shared PostgreSQL). Each uses its own freshly
//! created database, dropped afterwards. The server is `SUNDIAL_TEST_DATABASE_URL` (default
//! `postgres://root@127.0.0.1:5432/postgres`).

mod common;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use common::cluster::{
    Cluster, SERIAL, TTL_S, complete_as_a_late_worker, failover_bound, pool, restart_postgresql,
};
use common::{Receiver, Server, ServerOpts, ts, whole_second_after};
use jiff::{SignedDuration, Timestamp};
use serde_json::json;
use sqlx::Row;
use sundial_store_postgres::testing::{TestDatabase, admin_url, with_database};

/// A config naming the Podman engine that `scripts/podman-setup.sh` serves.
const ENGINE_CONFIG: &str =
    "[connections.engine]\ntype = \"container\"\nurl = \"unix:///tmp/podman.sock\"\n";

/// What the records say about a window of slots of every-second jobs.
#[derive(Debug, Default)]
struct Verdict {
    slots: usize,
    missing_executions: Vec<(String, Timestamp)>,
    duplicate_executions: Vec<(String, Timestamp)>,
    undelivered: Vec<(String, Timestamp)>,
    early: Vec<(String, Timestamp, SignedDuration)>,
    max_lag: SignedDuration,
    lag_p50_ms: i64,
    lag_p99_ms: i64,
    redeliveries: usize,
}

impl Verdict {
    fn assert_exactly_once_on_time(&self, lag_bound: SignedDuration) {
        assert!(
            self.missing_executions.is_empty(),
            "G1: slots without an execution: {:?}",
            self.missing_executions
        );
        assert!(
            self.duplicate_executions.is_empty(),
            "G1: slots with two executions: {:?}",
            self.duplicate_executions
        );
        assert!(
            self.undelivered.is_empty(),
            "G2: slots never delivered: {:?}",
            self.undelivered
        );
        assert!(
            self.early.is_empty(),
            "G5: deliveries before their fire time: {:?}",
            self.early
        );
        assert!(
            self.max_lag <= lag_bound,
            "slots fired {} late (bound {lag_bound})",
            self.max_lag
        );
    }
}

/// Waits until every slot of `jobs` in `[from, to]` was delivered (or `limit` passes), then
/// judges executions (from the database) and deliveries (from the receiver).
async fn judge(
    c: &Cluster,
    jobs: &[String],
    from: Timestamp,
    to: Timestamp,
    limit: Duration,
) -> Verdict {
    let expected = slots(jobs, from, to);
    wait_delivered(&c.receiver, &expected, limit).await;
    let pool = pool(&c.url).await;
    let rows = sqlx::query(
        "SELECT job, scheduled_at, count(*) AS n FROM executions WHERE namespace = 'f' AND scheduled_at BETWEEN $1 AND $2 GROUP BY job, scheduled_at",
    )
    .bind(from.as_millisecond())
    .bind(to.as_millisecond())
    .fetch_all(&pool)
    .await
    .unwrap();
    pool.close().await;
    let counts = rows
        .iter()
        .map(|r| {
            (
                (
                    r.get::<String, _>("job"),
                    Timestamp::from_millisecond(r.get("scheduled_at")).unwrap(),
                ),
                r.get("n"),
            )
        })
        .collect();
    verdict(&c.receiver, &expected, &counts)
}

/// Every slot of the every-second `jobs` in `[from, to]`.
fn slots(jobs: &[String], from: Timestamp, to: Timestamp) -> Vec<(String, Timestamp)> {
    jobs.iter()
        .flat_map(|j| {
            let mut t = from;
            let mut v = Vec::new();
            while t <= to {
                v.push((j.clone(), t));
                t += SignedDuration::from_secs(1);
            }
            v
        })
        .collect()
}

/// Waits until every slot of `expected` was delivered, or `limit` passes.
async fn wait_delivered(receiver: &Receiver, expected: &[(String, Timestamp)], limit: Duration) {
    let deadline = std::time::Instant::now() + limit;
    loop {
        let got: HashSet<(String, Timestamp)> = receiver
            .deliveries()
            .into_iter()
            .map(|d| (d.path, d.scheduled_at))
            .collect();
        if expected.iter().all(|k| got.contains(k)) || std::time::Instant::now() > deadline {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Judges the slots `expected` from the executions per slot (`counts`) and the receiver's
/// deliveries.
fn verdict(
    receiver: &Receiver,
    expected: &[(String, Timestamp)],
    counts: &HashMap<(String, Timestamp), i64>,
) -> Verdict {
    let mut first: HashMap<(String, Timestamp), Timestamp> = HashMap::new();
    let mut per_key: HashMap<(String, Timestamp), HashSet<String>> = HashMap::new();
    let mut v = Verdict {
        slots: expected.len(),
        ..Verdict::default()
    };
    for d in receiver.deliveries() {
        let key = (d.path.clone(), d.scheduled_at);
        let lag = d.received_at.duration_since(d.scheduled_at);
        if lag < SignedDuration::from_millis(-50) {
            v.early.push((d.path.clone(), d.scheduled_at, lag));
        }
        per_key
            .entry(key.clone())
            .or_default()
            .insert(d.execution_id.clone());
        let e = first.entry(key).or_insert(d.received_at);
        *e = (*e).min(d.received_at);
    }
    let mut lags = Vec::new();
    for key in expected {
        match counts.get(key) {
            None => v.missing_executions.push(key.clone()),
            Some(n) if *n > 1 => v.duplicate_executions.push(key.clone()),
            _ => {}
        }
        match first.get(key) {
            None => v.undelivered.push(key.clone()),
            Some(at) => lags.push(at.duration_since(key.1)),
        }
        if per_key.get(key).is_some_and(|ids| ids.len() > 1) {
            v.duplicate_executions.push(key.clone());
        }
    }
    let wanted: HashSet<&(String, Timestamp)> = expected.iter().collect();
    let deliveries = receiver
        .deliveries()
        .into_iter()
        .filter(|d| wanted.contains(&(d.path.clone(), d.scheduled_at)))
        .count();
    v.redeliveries = deliveries.saturating_sub(expected.len() - v.undelivered.len());
    lags.sort();
    v.max_lag = lags.last().copied().unwrap_or_default();
    let pct = |p: usize| {
        lags.get((lags.len() * p / 100).min(lags.len().saturating_sub(1)))
            .map_or(0, |l| l.as_millis() as i64)
    };
    v.lag_p50_ms = pct(50);
    v.lag_p99_ms = pct(99);
    v
}

fn summary(name: &str, v: &Verdict, extra: &str) {
    println!(
        "scenario {name}: {} slots, missing {}, duplicate {}, undelivered {}, early {}, redeliveries {}, lag p50 {} ms p99 {} ms max {} ms{extra}",
        v.slots,
        v.missing_executions.len(),
        v.duplicate_executions.len(),
        v.undelivered.len(),
        v.early.len(),
        v.redeliveries,
        v.lag_p50_ms,
        v.lag_p99_ms,
        v.max_lag.as_millis()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_sigkilled_node_loses_no_slot_and_fires_none_twice() {
    let _serial = SERIAL.lock().await;
    let mut c = Cluster::start(&["api,scheduler,worker"; 3], None, None).await;
    let start = whole_second_after(Duration::from_secs(3));
    let jobs = c.every_second_jobs(200, start).await;
    let kill_after = Duration::from_millis(rand::random_range(15_000..35_000));
    tokio::time::sleep_until(
        tokio::time::Instant::now()
            + (start.duration_since(Timestamp::now())).unsigned_abs()
            + kill_after,
    )
    .await;
    let victim = rand::random_range(1..3);
    let killed_at = Timestamp::now();
    c.nodes[victim].kill9();
    let end = start + SignedDuration::from_secs(60);
    tokio::time::sleep(end.duration_since(Timestamp::now()).unsigned_abs()).await;
    let v = judge(
        &c,
        &jobs,
        start,
        end - SignedDuration::from_secs(3),
        Duration::from_secs(30),
    )
    .await;
    summary(
        "a (SIGKILL)",
        &v,
        &format!(", n{victim} killed at {killed_at}"),
    );
    v.assert_exactly_once_on_time(failover_bound());
    c.finish().await;
}

/// docs/operations.md, "Stopping and rolling restarts": each of three processes in turn is
/// stopped with SIGTERM, exits 0, and is started again ten seconds later, under 60
/// every-second jobs. Every slot fires once and none more than 2 s late, nothing is delivered
/// twice, and the shards of a stopping process are owned by the others within a second of
/// the signal.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_rolling_restart_with_sigterm_loses_doubles_and_delays_no_slot() {
    let _serial = SERIAL.lock().await;
    let mut c = Cluster::start(&["api,scheduler,worker"; 3], None, None).await;
    let pool = pool(&c.url).await;
    let start = whole_second_after(Duration::from_secs(3));
    let jobs = c.every_second_jobs(60, start).await;
    tokio::time::sleep(start.duration_since(Timestamp::now()).unsigned_abs()).await;
    let mut handovers = Vec::new();
    for k in 0..3 {
        tokio::time::sleep(Duration::from_secs(10)).await;
        let node = format!("n{k}");
        let signalled = std::time::Instant::now();
        c.nodes[k].signal("TERM");
        // Its shards go to the others: no shard is left without a live owner for long.
        let taken = loop {
            let unowned: i64 = sqlx::query_scalar(
                "SELECT count(*) FROM shard_leases WHERE owner = $1 OR expires_at <= \
                 (extract(epoch FROM clock_timestamp()) * 1000)::bigint",
            )
            .bind(&node)
            .fetch_one(&pool)
            .await
            .unwrap();
            if unowned == 0 {
                break signalled.elapsed();
            }
            assert!(
                signalled.elapsed() < Duration::from_secs(15),
                "{node}'s shards still unowned 15 s after SIGTERM ({unowned} shards)"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        let code = c.nodes[k].wait_exit(Duration::from_secs(40)).await;
        assert_eq!(
            code,
            Ok(Some(0)),
            "{node} exits 0 after SIGTERM; log:\n{}",
            c.nodes[k].log()
        );
        handovers.push((node, taken, signalled.elapsed()));
        c.nodes[k].restart().await;
    }
    tokio::time::sleep(Duration::from_secs(10)).await;
    let end = Timestamp::now() - SignedDuration::from_secs(3);
    let v = judge(&c, &jobs, start, end, Duration::from_secs(30)).await;
    summary(
        "rolling restart (SIGTERM)",
        &v,
        &format!(", handovers {handovers:?}"),
    );
    v.assert_exactly_once_on_time(SignedDuration::from_secs(2));
    assert_eq!(v.redeliveries, 0, "nothing delivered twice");
    for (node, taken, _) in &handovers {
        assert!(
            *taken <= Duration::from_secs(1),
            "{node}'s shards owned by the others {taken:?} after SIGTERM, not within 1 s"
        );
    }
    c.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_sigstopped_scheduler_triggers_nothing_for_the_shards_it_lost() {
    let _serial = SERIAL.lock().await;
    let c = Cluster::start(&["api,scheduler,worker"; 3], None, None).await;
    let start = whole_second_after(Duration::from_secs(3));
    let jobs = c.every_second_jobs(60, start).await;
    tokio::time::sleep(Duration::from_secs(8)).await;
    c.nodes[1].signal("STOP");
    tokio::time::sleep(Duration::from_secs(2 * TTL_S as u64)).await;
    let resumed_at = Timestamp::now();
    c.nodes[1].signal("CONT");
    tokio::time::sleep(Duration::from_secs(10)).await;
    let end = Timestamp::now() - SignedDuration::from_secs(3);
    let v = judge(&c, &jobs, start, end, Duration::from_secs(30)).await;

    // After SIGCONT, n1 created executions only for shards it holds (again) by then.
    let pool = pool(&c.url).await;
    let stale: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM executions e WHERE e.triggered_by = 'n1' AND e.created_at >= $1 \
         AND NOT EXISTS (SELECT 1 FROM shard_leases s WHERE s.shard = e.shard AND s.owner = 'n1')",
    )
    .bind(resumed_at.as_millisecond())
    .fetch_one(&pool)
    .await
    .unwrap();
    let held: i64 = sqlx::query_scalar("SELECT count(*) FROM shard_leases WHERE owner = 'n1'")
        .fetch_one(&pool)
        .await
        .unwrap();
    pool.close().await;
    let refused = c.nodes[1].log().matches("shard lease lost").count();
    summary(
        "b (SIGSTOP 2×TTL)",
        &v,
        &format!(
            ", stale triggers {stale}, n1 fencing refusals logged {refused}, n1 shards now {held}"
        ),
    );
    assert_eq!(
        stale, 0,
        "G3: the paused scheduler triggered slots of shards it lost"
    );
    v.assert_exactly_once_on_time(failover_bound());
    c.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_worker_killed_mid_call_is_replaced_and_its_stale_completion_refused() {
    let _serial = SERIAL.lock().await;
    let mut c = Cluster::start(&["api,scheduler", "worker", "worker"], None, None).await;
    // The cluster view names every process with its roles and the scheduler's shards.
    let view = c.nodes[0]
        .wait_for(Duration::from_secs(10), async || {
            let v = c.nodes[0].get("/v1/cluster").await;
            (v["nodes"].as_array().is_some_and(|n| n.len() == 3) && v["nodes"][0]["shards"] == 1024)
                .then_some(v)
        })
        .await;
    let roles: Vec<_> = view["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| (n["id"].clone(), n["roles"].clone()))
        .collect();
    assert_eq!(
        roles,
        [
            (json!("n0"), json!(["api", "scheduler"])),
            (json!("n1"), json!(["worker"])),
            (json!("n2"), json!(["worker"]))
        ]
    );
    assert!(view["queue"]["queued"].is_u64());
    let at = whole_second_after(Duration::from_secs(2));
    c.nodes[0]
        .put_job(
            "f",
            "slow",
            json!({
                "schedule": {"at": at.to_string()},
                "target": {"type": "http", "url": c.receiver.url("slow")},
                "heartbeat_timeout": "3s",
                "timeout": "30s",
                "retry": {"max_attempts": 3, "initial_interval": "500ms", "jitter": false}
            }),
        )
        .await;
    let running = c.nodes[0]
        .wait_for(Duration::from_secs(15), async || {
            let h = c.nodes[0].history("f", "slow").await;
            h.into_iter().find(|e| e["state"] == "running")
        })
        .await;
    let first_worker = running["worker"].as_str().unwrap().to_owned();
    let victim: usize = first_worker.trim_start_matches('n').parse().unwrap();
    tokio::time::sleep(Duration::from_secs(1)).await;
    c.nodes[victim].kill9();
    let done = c.nodes[0]
        .wait_for(Duration::from_secs(30), async || {
            let h = c.nodes[0].history("f", "slow").await;
            h.into_iter().find(|e| e["state"] == "succeeded")
        })
        .await;
    let id = done["id"].as_str().unwrap().to_owned();
    let e = c.nodes[0]
        .get(&format!("/v1/namespaces/f/executions/{id}"))
        .await;
    let attempts = e["attempts"].as_array().unwrap();
    assert_eq!(e["attempt"], 2, "{e}");
    assert_eq!(attempts[0]["outcome"], "lease_lapsed");
    assert_eq!(attempts[0]["worker"], first_worker.as_str());
    assert_ne!(
        attempts[1]["worker"],
        first_worker.as_str(),
        "attempt 2 ran on another worker"
    );

    // The dead worker's completion of attempt 1, as it would have sent it: refused, no change.
    let refused = complete_as_a_late_worker(&c.url, &id, 1).await;
    assert!(
        matches!(refused, Err(sundial_store::Error::StaleFence(_))),
        "{refused:?}"
    );
    let after = c.nodes[0].execution("f", &id).await;
    assert_eq!(
        (
            after["attempt"].as_u64(),
            after["attempts"].as_array().map(Vec::len)
        ),
        (Some(2), Some(2)),
        "{after}"
    );
    println!(
        "scenario c (worker SIGKILL mid-call): attempt 1 on {first_worker} lease_lapsed, attempt 2 on {} succeeded, stale completion of attempt 1 refused",
        attempts[1]["worker"]
    );
    c.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn processes_ride_out_a_postgresql_restart() {
    let _serial = SERIAL.lock().await;
    let mut c = Cluster::start(&["api,scheduler,worker"; 2], None, None).await;
    let start = whole_second_after(Duration::from_secs(3));
    let jobs = c.every_second_jobs(30, start).await;
    tokio::time::sleep(Duration::from_secs(10)).await;
    let down = restart_postgresql().await;
    tokio::time::sleep(Duration::from_secs(15)).await;
    for (i, n) in c.nodes.iter_mut().enumerate() {
        assert!(
            n.is_running(),
            "node n{i} exited across the database restart:\n{}",
            n.log()
        );
    }
    let end = Timestamp::now() - SignedDuration::from_secs(3);
    let v = judge(&c, &jobs, start, end, Duration::from_secs(30)).await;
    summary(
        "d (PostgreSQL restart)",
        &v,
        &format!(", database down {down:?} "),
    );
    v.assert_exactly_once_on_time(failover_bound());
    c.finish().await;
}

/// A loopback TCP proxy to PostgreSQL that the test can cut and restore. A cut is a network
/// that drops packets: the proxy forwards nothing more, but closes no connection and accepts
/// new ones without answering, so the node's calls hang rather than fail.
struct Proxy {
    port: u16,
    cut: Arc<AtomicBool>,
    /// Notified on a cut: each connection stops forwarding and parks its two sockets.
    cutting: Arc<tokio::sync::Notify>,
    /// The sockets of the cut, closed on restore.
    parked: Arc<std::sync::Mutex<Vec<tokio::net::TcpStream>>>,
}

impl Proxy {
    async fn start(upstream: std::net::SocketAddr) -> Proxy {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let cut = Arc::new(AtomicBool::new(false));
        let cutting = Arc::new(tokio::sync::Notify::new());
        let parked: Arc<std::sync::Mutex<Vec<tokio::net::TcpStream>>> = Arc::default();
        let (c2, n2, p2) = (cut.clone(), cutting.clone(), parked.clone());
        tokio::spawn(async move {
            loop {
                let Ok((mut inbound, _)) = listener.accept().await else {
                    continue;
                };
                if c2.load(Ordering::SeqCst) {
                    p2.lock().unwrap().push(inbound);
                    continue;
                }
                let (cutting, parked) = (n2.clone(), p2.clone());
                tokio::spawn(async move {
                    let Ok(mut outbound) = tokio::net::TcpStream::connect(upstream).await else {
                        return;
                    };
                    let cut = cutting.notified();
                    tokio::select! {
                        _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound) => {}
                        _ = cut => parked.lock().unwrap().extend([inbound, outbound]),
                    }
                });
            }
        });
        Proxy {
            port,
            cut,
            cutting,
            parked,
        }
    }

    fn cut(&self) {
        self.cut.store(true, Ordering::SeqCst);
        self.cutting.notify_waiters();
    }

    /// Ends the cut: the parked connections are closed (the node's calls on them fail at
    /// last) and new ones are forwarded again.
    fn restore(&self) {
        self.cut.store(false, Ordering::SeqCst);
        self.parked.lock().unwrap().clear();
    }
}

/// Node n1 reaches PostgreSQL through a proxy that is cut (packets dropped: n1's calls hang)
/// for two shard-lease TTLs: n0 takes over its shards and the attempts it held, and on its
/// return n1 triggers nothing for shards it lost (G3). The cut comes half a second after a
/// slot, when no delivery is in flight but n1 holds the next second's executions after a
/// claim ahead and has no failed call to tell it the store is gone: those start, and are
/// delivered again once their leases lapse (G2 allows it; the summary counts them,
/// docs/guarantees.md, "Claim ahead", "A store outage").
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_node_cut_off_from_the_database_is_replaced_and_fires_nothing_stale_on_return() {
    let _serial = SERIAL.lock().await;
    let proxy = Proxy::start("127.0.0.1:5432".parse().unwrap()).await;
    let db_probe = TestDatabase::create("sundial_f").await;
    let proxied = with_database(&admin_url(), db_probe.name())
        .replace("127.0.0.1:5432", &format!("127.0.0.1:{}", proxy.port));
    // The cluster's database is the probe's: the proxied node reaches it through the proxy.
    let dir = tempfile::tempdir().unwrap();
    let receiver = Receiver::start().await;
    let mut nodes = Vec::new();
    for (i, url) in [db_probe.url().to_owned(), proxied].into_iter().enumerate() {
        let opts = ServerOpts {
            database_url: Some(url),
            node_id: Some(format!("n{i}")),
            args: vec!["--lease-ttl".into(), format!("{TTL_S}s")],
            env: Vec::new(),
        };
        nodes.push(Server::start_with(dir.path(), opts).await);
    }
    let c = Cluster {
        url: db_probe.url().to_owned(),
        db: Some(db_probe),
        dir,
        nodes,
        receiver,
    };
    let start = whole_second_after(Duration::from_secs(3));
    let jobs = c.every_second_jobs(40, start).await;
    let cut_at = start + SignedDuration::from_millis(8_500);
    tokio::time::sleep(
        cut_at
            .duration_since(Timestamp::now())
            .try_into()
            .unwrap_or_default(),
    )
    .await;
    proxy.cut();
    tokio::time::sleep(Duration::from_secs(2 * TTL_S as u64)).await;
    let restored_at = Timestamp::now();
    proxy.restore();
    tokio::time::sleep(Duration::from_secs(10)).await;
    let end = Timestamp::now() - SignedDuration::from_secs(3);
    let v = judge(&c, &jobs, start, end, Duration::from_secs(30)).await;
    let pool = pool(&c.url).await;
    let stale: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM executions e WHERE e.triggered_by = 'n1' AND e.created_at >= $1 \
         AND NOT EXISTS (SELECT 1 FROM shard_leases s WHERE s.shard = e.shard AND s.owner = 'n1')",
    )
    .bind(restored_at.as_millisecond())
    .fetch_one(&pool)
    .await
    .unwrap();
    let n0_shards: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM shard_leases WHERE owner = 'n0' AND expires_at > 0",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    pool.close().await;
    summary(
        "e (node cut off from PostgreSQL)",
        &v,
        &format!(", stale triggers by n1 after return {stale}, n0 shards {n0_shards}"),
    );
    assert_eq!(
        stale, 0,
        "G3: the cut-off node triggered for shards it no longer holds"
    );
    v.assert_exactly_once_on_time(failover_bound());
    c.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_node_with_a_skewed_clock_fires_nothing_early_and_nothing_late() {
    let _serial = SERIAL.lock().await;
    // Node n1 runs under libfaketime (Debian's `faketime` package, scripts/services.sh): its
    // wall clock, as every call in the process reads it, is 30 s ahead; its monotonic clock
    // (timers, timeouts) is left alone, as on a machine whose clock is merely set wrong.
    let c = Cluster::start(
        &["api,scheduler,worker"; 2],
        None,
        Some((1, skewed_clock("+30s"))),
    )
    .await;
    let said = c.nodes[1].date_header().await;
    let ahead = said.duration_since(Timestamp::now());
    assert!(
        ahead > SignedDuration::from_secs(25) && ahead < SignedDuration::from_secs(35),
        "n1's clock is not 30 s ahead (its Date header said {said}, {ahead} from ours): is libfaketime installed?"
    );
    let start = whole_second_after(Duration::from_secs(3));
    let jobs = c.every_second_jobs(40, start).await;
    tokio::time::sleep(Duration::from_secs(20)).await;
    let end = Timestamp::now() - SignedDuration::from_secs(3);
    let v = judge(&c, &jobs, start, end, Duration::from_secs(30)).await;
    let by_worker: BTreeMap<String, usize> = {
        let pool = pool(&c.url).await;
        let rows = sqlx::query("SELECT worker, count(*) AS n FROM executions WHERE namespace = 'f' AND worker IS NOT NULL GROUP BY worker")
            .fetch_all(&pool)
            .await
            .unwrap();
        pool.close().await;
        rows.iter()
            .map(|r| (r.get::<String, _>("worker"), r.get::<i64, _>("n") as usize))
            .collect()
    };
    summary(
        "f (node clock +30 s)",
        &v,
        &format!(", executions per worker {by_worker:?}"),
    );
    assert!(
        by_worker.get("n1").copied().unwrap_or(0) > 0,
        "the skewed node took part"
    );
    v.assert_exactly_once_on_time(SignedDuration::from_secs(1));
    c.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_cancel_through_one_process_stops_the_attempt_in_another_within_a_second() {
    let _serial = SERIAL.lock().await;
    let c = Cluster::start(&["api,scheduler", "worker"], None, None).await;
    c.nodes[0]
        .put_job(
            "f",
            "long",
            json!({
                "schedule": {"at": whole_second_after(Duration::from_secs(1)).to_string()},
                "target": {"type": "http", "url": c.receiver.url("slow")},
                "heartbeat_timeout": "30s"
            }),
        )
        .await;
    let running = c.nodes[0]
        .wait_for(Duration::from_secs(10), async || {
            c.nodes[0]
                .history("f", "long")
                .await
                .into_iter()
                .find(|e| e["state"] == "running")
        })
        .await;
    let id = running["id"].as_str().unwrap().to_owned();
    assert_eq!(running["worker"], "n1");
    c.nodes[0]
        .wait_for(Duration::from_secs(5), async || {
            (!c.receiver.for_path("slow").is_empty()).then_some(())
        })
        .await;
    let cancelled_at = Timestamp::now();
    let (status, _) = c.nodes[0]
        .request(
            reqwest::Method::POST,
            &format!("/v1/namespaces/f/executions/{id}/cancel"),
            None,
        )
        .await;
    assert_eq!(status, 200);
    let (_, hung_up_at) = c.nodes[0]
        .wait_for(Duration::from_secs(3), async || {
            c.receiver.abandoned().into_iter().find(|(x, _)| *x == id)
        })
        .await;
    let took = hung_up_at.duration_since(cancelled_at);
    println!(
        "scenario cancel across processes: the worker dropped the request {} ms after the cancel",
        took.as_millis()
    );
    assert!(took < SignedDuration::from_secs(1), "took {took}");
    c.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_rate_limited_namespace_dispatches_at_its_rate_across_workers_while_others_keep_their_lag()
 {
    let _serial = SERIAL.lock().await;
    let c = Cluster::start_configured(
        &["api,scheduler,worker", "worker"],
        None,
        None,
        Some("[namespaces.limited]\nmax_dispatch_per_second = 100\n"),
    )
    .await;
    let start = whole_second_after(Duration::from_secs(2));
    let steady = c.every_second_jobs(20, start).await;
    let at = whole_second_after(Duration::from_secs(3));
    let burst: Vec<serde_json::Value> = (0..1000)
        .map(|i| json!({"name": format!("l{i:04}"), "schedule": {"at": at.to_string()}, "target": {"type": "http", "url": c.receiver.url("limited")}}))
        .collect();
    c.apply_jobs("limited", burst).await;
    let delivered = c.nodes[0]
        .wait_for(Duration::from_secs(30), async || {
            let d = c.receiver.for_path("limited");
            (d.len() >= 1000).then_some(d)
        })
        .await;
    let first = delivered.iter().map(|d| d.received_at).min().unwrap();
    let last = delivered.iter().map(|d| d.received_at).max().unwrap();
    let span = last.duration_since(first);
    let in_first_second = delivered
        .iter()
        .filter(|d| d.received_at.duration_since(first) < SignedDuration::from_secs(1))
        .count();
    let v = judge(
        &c,
        &steady,
        start + SignedDuration::from_secs(1),
        at + SignedDuration::from_secs(9),
        Duration::from_secs(20),
    )
    .await;
    summary(
        "rate limit (100/s, 2 workers)",
        &v,
        &format!(
            ", 1000 limited executions started over {} ms, {in_first_second} in the first second",
            span.as_millis()
        ),
    );
    assert!(
        span >= SignedDuration::from_secs(9),
        "1000 at 100/s started within {span}"
    );
    assert!(
        in_first_second <= 115,
        "{in_first_second} started in the first second"
    );
    v.assert_exactly_once_on_time(SignedDuration::from_secs(1));
    c.finish().await;
}

/// A container run far longer than its heartbeat timeout: not retried while its worker lives
/// (the heartbeats keep the lease); on a worker killed mid-run, retried on another worker once
/// the lease lapses. (30 s runs with a 3 s heartbeat timeout keep the suite short; the ratio is
/// that of a 2-minute run with a 10 s timeout.)
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_long_container_run_is_kept_alive_by_heartbeats_and_retried_only_when_its_worker_dies() {
    if std::env::var("SUNDIAL_SKIP_CONTAINER_TESTS").is_ok_and(|v| v == "1") {
        eprintln!("SKIPPED: SUNDIAL_SKIP_CONTAINER_TESTS=1");
        return;
    }
    let _serial = SERIAL.lock().await;
    let mut c = Cluster::start_configured(
        &["api,scheduler", "worker", "worker"],
        None,
        None,
        Some(ENGINE_CONFIG),
    )
    .await;
    c.nodes[0]
        .put_job(
            "f",
            "box",
            json!({
                "schedule": {"at": "2199-01-01T00:00:00Z"},
                "target": {"type": "container", "connection": "engine", "image": "localhost/busybox:test", "command": ["sleep", "30"]},
                "heartbeat_timeout": "3s",
                "timeout": "2m",
                "retry": {"max_attempts": 3, "initial_interval": "500ms", "jitter": false}
            }),
        )
        .await;
    let run = async |c: &Cluster| -> String {
        let (status, e) = c.nodes[0]
            .request(
                reqwest::Method::POST,
                "/v1/namespaces/f/jobs/box/trigger",
                None,
            )
            .await;
        assert_eq!(status, 201, "{e}");
        e["id"].as_str().unwrap().to_owned()
    };
    let get = async |c: &Cluster, id: &str| {
        c.nodes[0]
            .get(&format!("/v1/namespaces/f/executions/{id}"))
            .await
    };

    // 1. The worker lives: one attempt, ~30 s, succeeded.
    let id = run(&c).await;
    let done = c.nodes[0]
        .wait_for(Duration::from_secs(60), async || {
            let e = get(&c, &id).await;
            (e["state"] == "succeeded").then_some(e)
        })
        .await;
    let attempts = done["attempts"].as_array().unwrap();
    assert_eq!(
        attempts.len(),
        1,
        "not retried while its worker lives: {done}"
    );
    assert!(attempts[0]["duration_ms"].as_i64().unwrap() >= 30_000);

    // 2. The worker dies mid-run: retried on the other worker after the lease lapses.
    let id = run(&c).await;
    let running = c.nodes[0]
        .wait_for(Duration::from_secs(20), async || {
            let e = get(&c, &id).await;
            (e["state"] == "running").then_some(e)
        })
        .await;
    let victim: usize = running["worker"]
        .as_str()
        .unwrap()
        .trim_start_matches('n')
        .parse()
        .unwrap();
    tokio::time::sleep(Duration::from_secs(3)).await;
    c.nodes[victim].kill9();
    let killed_at = Timestamp::now();
    let done = c.nodes[0]
        .wait_for(Duration::from_secs(90), async || {
            let e = get(&c, &id).await;
            (e["state"] == "succeeded").then_some(e)
        })
        .await;
    let attempts = done["attempts"].as_array().unwrap();
    assert_eq!(attempts.len(), 2, "{done}");
    assert_eq!(attempts[0]["outcome"], "lease_lapsed");
    assert_ne!(attempts[1]["worker"], attempts[0]["worker"]);
    let restarted = ts(&attempts[1]["started_at"]).duration_since(killed_at);
    println!(
        "scenario long container run: 30 s run with a 3 s heartbeat timeout kept 1 attempt; after SIGKILL of n{victim} attempt 2 started {} ms later on {}",
        restarted.as_millis(),
        attempts[1]["worker"]
    );
    assert!(
        restarted <= SignedDuration::from_secs(3 + 2 + 2),
        "retried {restarted} after the kill"
    );
    c.finish().await;
}

/// `replace` and cancel stop a running container for real: the container is removed.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn cancelling_a_container_run_removes_the_container() {
    if std::env::var("SUNDIAL_SKIP_CONTAINER_TESTS").is_ok_and(|v| v == "1") {
        eprintln!("SKIPPED: SUNDIAL_SKIP_CONTAINER_TESTS=1");
        return;
    }
    let _serial = SERIAL.lock().await;
    let c =
        Cluster::start_configured(&["api,scheduler,worker"], None, None, Some(ENGINE_CONFIG)).await;
    c.nodes[0]
        .put_job(
            "f",
            "boxed",
            json!({
                "schedule": {"at": "2199-01-01T00:00:00Z"},
                "target": {"type": "container", "connection": "engine", "image": "localhost/busybox:test", "command": ["sleep", "60"]},
                "concurrency_policy": "replace"
            }),
        )
        .await;
    let containers = || {
        let out = std::process::Command::new("podman")
            .args([
                "--url",
                "unix:///tmp/podman.sock",
                "ps",
                "-a",
                "--format",
                "{{.Names}}",
            ])
            .output()
            .expect("podman");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let start = async |c: &Cluster| -> String {
        let (_, e) = c.nodes[0]
            .request(
                reqwest::Method::POST,
                "/v1/namespaces/f/jobs/boxed/trigger",
                None,
            )
            .await;
        let id = e["id"].as_str().unwrap().to_owned();
        c.nodes[0]
            .wait_for(Duration::from_secs(20), async || {
                containers()
                    .contains(&format!("sundial-{id}"))
                    .then_some(())
            })
            .await;
        id
    };
    // Cancel through the API.
    let first = start(&c).await;
    c.nodes[0]
        .request(
            reqwest::Method::POST,
            &format!("/v1/namespaces/f/executions/{first}/cancel"),
            None,
        )
        .await;
    let t = std::time::Instant::now();
    c.nodes[0]
        .wait_for(Duration::from_secs(10), async || {
            (!containers().contains(&format!("sundial-{first}"))).then_some(())
        })
        .await;
    let cancel_ms = t.elapsed().as_millis();
    // Replace: a new run of the job stops the running one.
    let second = start(&c).await;
    let third = start(&c).await;
    let t = std::time::Instant::now();
    c.nodes[0]
        .wait_for(Duration::from_secs(10), async || {
            (!containers().contains(&format!("sundial-{second}"))).then_some(())
        })
        .await;
    let replace_ms = t.elapsed().as_millis();
    let e = c.nodes[0]
        .get(&format!("/v1/namespaces/f/executions/{second}"))
        .await;
    assert_eq!(e["state"], "cancelled");
    println!(
        "scenario container cancel: removed {cancel_ms} ms after the cancel; replaced run removed {replace_ms} ms after the new one started"
    );
    c.nodes[0]
        .request(
            reqwest::Method::POST,
            &format!("/v1/namespaces/f/executions/{third}/cancel"),
            None,
        )
        .await;
    c.finish().await;
}

/// PostgreSQL as production runs it (`scripts/patroni-cluster.sh`): etcd, two Patroni members
/// with synchronous replication, HAProxy on `127.0.0.1:5440` sending connections to the
/// primary. Every process is SIGKILLed when this is dropped.
struct Patroni {
    dir: tempfile::TempDir,
    /// `postgres://postgres@127.0.0.1:5440/sundial`, through HAProxy.
    url: String,
}

const PATRONI_SCRIPT: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../scripts/patroni-cluster.sh"
);

impl Patroni {
    async fn start() -> Patroni {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().to_owned();
        let out = tokio::task::spawn_blocking(move || {
            std::process::Command::new("bash")
                .arg(PATRONI_SCRIPT)
                .arg("start")
                .arg(&path)
                .output()
                .expect("run scripts/patroni-cluster.sh")
        })
        .await
        .unwrap();
        assert!(
            out.status.success(),
            "the Patroni cluster did not start: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let addr = String::from_utf8_lossy(&out.stdout).trim().to_owned();
        let admin = format!("postgres://postgres@{addr}/postgres");
        use sqlx::Connection as _;
        let mut conn = sqlx::PgConnection::connect(&admin).await.unwrap();
        sqlx::query("CREATE DATABASE sundial")
            .execute(&mut conn)
            .await
            .unwrap();
        conn.close().await.unwrap();
        Patroni {
            url: format!("postgres://postgres@{addr}/sundial"),
            dir,
        }
    }

    /// The members as Patroni sees them: (name, role).
    async fn members(&self) -> Vec<(String, String)> {
        for port in [8008, 8009] {
            let Ok(resp) = reqwest::get(format!("http://127.0.0.1:{port}/cluster")).await else {
                continue;
            };
            let Ok(text) = resp.text().await else {
                continue;
            };
            let Ok(body) = serde_json::from_str::<serde_json::Value>(&text) else {
                continue;
            };
            return body["members"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|m| {
                    (
                        m["name"].as_str().unwrap_or("").to_owned(),
                        m["role"].as_str().unwrap_or("").to_owned(),
                    )
                })
                .collect();
        }
        Vec::new()
    }

    /// SIGKILLs the leader's Patroni and its PostgreSQL, as when its machine dies; returns its
    /// name.
    async fn kill_leader(&self) -> String {
        let members = self.members().await;
        let leader = members
            .iter()
            .find(|(_, role)| role == "leader")
            .map(|(name, _)| name.clone())
            .unwrap_or_else(|| panic!("no leader among {members:?}"));
        let read = |file: std::path::PathBuf| -> String {
            std::fs::read_to_string(&file)
                .unwrap_or_else(|e| panic!("{}: {e}", file.display()))
                .lines()
                .next()
                .unwrap_or("")
                .trim()
                .to_owned()
        };
        let patroni = read(self.dir.path().join(format!("{leader}.pid")));
        let postmaster = read(self.dir.path().join(&leader).join("postmaster.pid"));
        let status = std::process::Command::new("kill")
            .args(["-9", &patroni, &postmaster])
            .status()
            .unwrap();
        assert!(status.success(), "kill -9 {patroni} {postmaster}");
        leader
    }
}

impl Drop for Patroni {
    fn drop(&mut self) {
        let _ = std::process::Command::new("bash")
            .arg(PATRONI_SCRIPT)
            .arg("stop")
            .arg(self.dir.path())
            .status();
    }
}

/// README.md, "A store that fails over": three nodes on PostgreSQL behind Patroni and HAProxy;
/// the primary dies (its Patroni and its PostgreSQL SIGKILLed) while every-second jobs fire;
/// Patroni promotes the synchronous standby and HAProxy moves the address to it. The nodes go
/// on against the new primary: no job lost, every slot of the window fired exactly once and
/// delivered, none early, the lateness of the slots due during the failover bounded.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_store_fails_over_to_its_promoted_standby_and_every_slot_fires_once() {
    let _serial = SERIAL.lock().await;
    let patroni = Patroni::start().await;
    let mut c =
        Cluster::start_on(&patroni.url, &["api,scheduler,worker"; 3], None, None, None).await;
    let start = whole_second_after(Duration::from_secs(3));
    let jobs = c.every_second_jobs(30, start).await;
    tokio::time::sleep(Duration::from_secs(10)).await;
    let killed = patroni.kill_leader().await;
    let died = std::time::Instant::now();
    // How long until a write through HAProxy succeeds again.
    let promoted = loop {
        use sqlx::Connection as _;
        let written = async {
            let mut conn = sqlx::PgConnection::connect(&patroni.url).await?;
            sqlx::query("CREATE TEMP TABLE probe (x int)")
                .execute(&mut conn)
                .await?;
            sqlx::query("SELECT 1 WHERE NOT pg_is_in_recovery()")
                .fetch_one(&mut conn)
                .await?;
            conn.close().await
        }
        .await;
        if written.is_ok() {
            break died.elapsed();
        }
        assert!(
            died.elapsed() < Duration::from_secs(60),
            "no primary 60 s after the leader died"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    tokio::time::sleep(Duration::from_secs(20)).await;
    for (i, n) in c.nodes.iter_mut().enumerate() {
        assert!(
            n.is_running(),
            "node n{i} exited across the failover:\n{}",
            n.log()
        );
    }
    let members = patroni.members().await;
    assert!(
        members
            .iter()
            .any(|(name, role)| *name != killed && role == "leader"),
        "the standby was not promoted: {members:?}"
    );
    // Every job acknowledged before the failover is still there.
    let listed = c.nodes[1].all_pages("/v1/namespaces/f/jobs").await;
    assert_eq!(listed.len(), jobs.len(), "jobs after the failover");
    let end = Timestamp::now() - SignedDuration::from_secs(3);
    let v = judge(&c, &jobs, start, end, Duration::from_secs(60)).await;
    summary(
        "failover (Patroni)",
        &v,
        &format!(", {killed} SIGKILLed, a writable primary again after {promoted:?}"),
    );
    // Late by at most the failover, the lease TTL and a renewal round.
    let bound = SignedDuration::try_from(promoted).unwrap() + failover_bound();
    v.assert_exactly_once_on_time(bound);
    // docs/guarantees.md, "Workers": the workers' leases outlived the outage (no reaper takes a lease over before
    // every live worker could renew it after the store's return), so nothing delivered
    // before or during it was delivered again (docs/guarantees.md, "Workers").
    assert_eq!(
        v.redeliveries, 0,
        "executions delivered twice across the failover"
    );
    c.finish().await;
}

/// `n` every-second jobs from `start` posting to `receiver`, with `heartbeat_timeout` and
/// otherwise the default policies (retry after 1 s, jittered): the bodies of `jobs:apply`.
fn default_jobs(
    receiver: &Receiver,
    n: usize,
    start: Timestamp,
    heartbeat_timeout: &str,
) -> (Vec<String>, Vec<serde_json::Value>) {
    let names: Vec<String> = (0..n).map(|i| format!("j{i:03}")).collect();
    let bodies = names
        .iter()
        .map(|name| {
            json!({
                "name": name,
                "schedule": {"every": "1s", "start_at": start.to_string()},
                "target": {"type": "http", "url": receiver.url(name)},
                "heartbeat_timeout": heartbeat_timeout,
            })
        })
        .collect();
    (names, bodies)
}

/// docs/guarantees.md, "Workers" (G4 for workers): three `scheduler,worker` processes, 60 every-second jobs with
/// `heartbeat_timeout`; one SIGKILLed and, at the same moment, one SIGSTOPped for 18 s (past
/// `lease_ttl`) then resumed. Every slot fires once, none early, the worst no later than
/// `lease_ttl` + 4 s whatever `heartbeat_timeout`: the dead and the paused workers' executions
/// (held for their fire time, or running) move once their worker leases lapse. The paused one
/// learns on its return that its lease was taken over, drops what it held and takes a new one.
async fn a_dead_and_a_paused_worker_lose_their_executions_within_the_lease(
    heartbeat_timeout: &str,
) {
    let _serial = SERIAL.lock().await;
    let mut c = Cluster::start(&["api,scheduler,worker"; 3], None, None).await;
    let start = whole_second_after(Duration::from_secs(3));
    let (jobs, bodies) = default_jobs(&c.receiver, 60, start, heartbeat_timeout);
    c.apply_jobs("f", bodies).await;
    tokio::time::sleep(
        (start + SignedDuration::from_secs(10))
            .duration_since(Timestamp::now())
            .unsigned_abs(),
    )
    .await;
    let hit_at = Timestamp::now();
    c.nodes[2].kill9();
    c.nodes[1].signal("STOP");
    tokio::time::sleep(Duration::from_secs(TTL_S as u64 + 8)).await;
    c.nodes[1].signal("CONT");
    tokio::time::sleep(Duration::from_secs(15)).await;
    let end = Timestamp::now() - SignedDuration::from_secs(3);
    let v = judge(&c, &jobs, start, end, Duration::from_secs(30)).await;
    let taken_over = c.nodes[1].log().matches("worker lease taken over").count();
    let view = c.nodes[0].get("/v1/cluster").await;
    summary(
        &format!("liveness (SIGKILL + SIGSTOP, heartbeat_timeout {heartbeat_timeout})"),
        &v,
        &format!(
            ", n2 killed and n1 stopped at {hit_at}, n1 found its lease taken over {taken_over}×"
        ),
    );
    v.assert_exactly_once_on_time(SignedDuration::from_secs(TTL_S + 4));
    assert!(
        taken_over >= 1,
        "n1 did not learn its lease was taken over:\n{}",
        c.nodes[1].log()
    );
    let n1 = view["nodes"]
        .as_array()
        .and_then(|n| n.iter().find(|n| n["id"] == "n1"))
        .cloned()
        .unwrap_or_default();
    assert_eq!(n1["worker_lease"]["live"], true, "n1's new lease: {view}");
    c.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_dead_and_a_paused_worker_lose_their_executions_within_the_lease_30s_heartbeat() {
    a_dead_and_a_paused_worker_lose_their_executions_within_the_lease("30s").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_dead_and_a_paused_worker_lose_their_executions_within_the_lease_5m_heartbeat() {
    a_dead_and_a_paused_worker_lose_their_executions_within_the_lease("5m").await;
}

/// docs/operations.md, "Stopping and rolling restarts", step 4: an attempt still running when
/// `shutdown_grace` ends is handed back, not lost. One embedded-store process with
/// `--shutdown-grace 1s` runs a job whose receiver holds its first attempt; SIGTERM makes it
/// exit 0 about a second later; started again, it retries the execution at once (the worker
/// lease was given up, so it does not wait for the lease to lapse), and the execution
/// succeeds on its second attempt.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_attempt_running_past_shutdown_grace_is_handed_back_and_retried() {
    let _serial = SERIAL.lock().await;
    let dir = tempfile::tempdir().unwrap();
    let receiver = Receiver::start().await;
    receiver.hold("held", 1);
    let mut server = Server::start_with(
        dir.path(),
        ServerOpts {
            node_id: Some("s0".into()),
            args: vec![
                "--lease-ttl".into(),
                format!("{TTL_S}s"),
                "--shutdown-grace".into(),
                "1s".into(),
            ],
            ..ServerOpts::default()
        },
    )
    .await;
    server
        .put_job(
            "f",
            "held",
            json!({
                "schedule": {"every": "1h"},
                "target": {"type": "http", "url": receiver.url("held")},
                "paused": true,
                "retry": {"max_attempts": 3, "initial_interval": "100ms"},
            }),
        )
        .await;
    let (status, execution) = server
        .request(
            reqwest::Method::POST,
            "/v1/namespaces/f/jobs/held/trigger",
            None,
        )
        .await;
    assert_eq!(status, 201, "{execution}");
    let id = execution["id"].as_str().unwrap().to_owned();
    server
        .wait_for(Duration::from_secs(10), async || {
            (!receiver.for_path("held").is_empty()).then_some(())
        })
        .await;
    let signalled = std::time::Instant::now();
    server.signal("TERM");
    let code = server.wait_exit(Duration::from_secs(20)).await;
    let stopped_in = signalled.elapsed();
    assert_eq!(code, Ok(Some(0)), "exits 0; log:\n{}", server.log());
    assert!(
        stopped_in >= Duration::from_millis(900) && stopped_in < Duration::from_secs(10),
        "waited shutdown_grace (1 s) for the attempt, then stopped: {stopped_in:?}"
    );
    server.restart().await;
    let done = server
        .wait_for(Duration::from_secs(20), async || {
            let e = server.execution("f", &id).await;
            (e["state"] == "succeeded").then_some(e)
        })
        .await;
    let attempts = done["attempts"].as_array().unwrap();
    assert_eq!(attempts.len(), 2, "{done}");
    assert_eq!(attempts[1]["outcome"], "succeeded", "{done}");
    receiver.release("held", 1);
    server.kill9();
}

/// docs/guarantees.md, "Workers", on the embedded store: one process, 60 every-second jobs with the default
/// `heartbeat_timeout` (30 s), SIGKILLed and started again at once. Every slot fires once,
/// none early, the worst no later than `lease_ttl` + 4 s: what the dead process held is
/// retried by the new one once the old worker lease lapses.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_embedded_store_process_killed_and_restarted_loses_no_slot_to_its_held_executions() {
    let _serial = SERIAL.lock().await;
    let dir = tempfile::tempdir().unwrap();
    let receiver = Receiver::start().await;
    let mut server = Server::start_with(
        dir.path(),
        ServerOpts {
            node_id: Some("s0".into()),
            args: vec!["--lease-ttl".into(), format!("{TTL_S}s")],
            ..ServerOpts::default()
        },
    )
    .await;
    let start = whole_second_after(Duration::from_secs(3));
    let (jobs, bodies) = default_jobs(&receiver, 60, start, "30s");
    let (status, body) = server
        .request(
            reqwest::Method::POST,
            "/v1/namespaces/f/jobs:apply",
            Some(json!({ "jobs": bodies })),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    tokio::time::sleep(
        (start + SignedDuration::from_secs(10))
            .duration_since(Timestamp::now())
            .unsigned_abs(),
    )
    .await;
    let killed_at = Timestamp::now();
    server.restart().await;
    tokio::time::sleep(Duration::from_secs(25)).await;
    let end = Timestamp::now() - SignedDuration::from_secs(3);
    let expected = slots(&jobs, start, end);
    wait_delivered(&receiver, &expected, Duration::from_secs(30)).await;
    let db = sqlx::SqlitePool::connect(&format!(
        "sqlite://{}?mode=ro",
        dir.path().join("sundial.db").display()
    ))
    .await
    .unwrap();
    let rows: Vec<(String, i64, i64)> = sqlx::query_as(
        "SELECT job, scheduled_at, count(*) FROM executions WHERE namespace = 'f' \
         AND scheduled_at BETWEEN ?1 AND ?2 GROUP BY job, scheduled_at",
    )
    .bind(start.as_millisecond())
    .bind(end.as_millisecond())
    .fetch_all(&db)
    .await
    .unwrap();
    db.close().await;
    let counts = rows
        .into_iter()
        .map(|(job, at, n)| ((job, Timestamp::from_millisecond(at).unwrap()), n))
        .collect();
    let v = verdict(&receiver, &expected, &counts);
    summary(
        "liveness (SQLite, SIGKILL and restart)",
        &v,
        &format!(", killed and restarted at {killed_at}"),
    );
    v.assert_exactly_once_on_time(SignedDuration::from_secs(TTL_S + 4));
    server.kill9();
}

/// The environment that runs a process under libfaketime with its wall clock shifted by
/// `offset` (`+30s`): `LD_PRELOAD` of the library (Debian's path), `FAKETIME`, and
/// `FAKETIME_DONT_FAKE_MONOTONIC` so that its timers run at the real pace.
fn skewed_clock(offset: &str) -> Vec<(String, String)> {
    const LIBFAKETIME: &str = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1";
    assert!(
        std::path::Path::new(LIBFAKETIME).exists(),
        "{LIBFAKETIME} is missing: scripts/services.sh installs Debian's faketime package"
    );
    vec![
        ("LD_PRELOAD".into(), LIBFAKETIME.into()),
        ("FAKETIME".into(), offset.into()),
        ("FAKETIME_DONT_FAKE_MONOTONIC".into(), "1".into()),
    ]
}
