//! The failure suite for backfills (docs/time.md, "Backfill"): real `sundial`
//! processes on one PostgreSQL (`common::cluster`), a real loopback receiver recording every
//! delivery, a real SIGKILL of the scheduler driving a backfill. The scenario judges from the
//! records — the executions table, the backfill's progress, the receiver's log — that the
//! backfill resumed on another scheduler: every slot of its range has exactly one execution
//! (G1 with backfill in the mix), each was delivered, none was created faster than its rate,
//! and prints a summary.

mod common;

use std::collections::{BTreeMap, HashSet};
use std::time::{Duration, Instant};

use common::cluster::{Cluster, SERIAL, pool};
use jiff::{SignedDuration, Timestamp};
use serde_json::{Value, json};
use sqlx::Row;

const NS: &str = "bf";

async fn post(c: &Cluster, path: &str, body: Value) -> Value {
    let (status, v) = c.nodes[0]
        .request(reqwest::Method::POST, path, Some(body))
        .await;
    assert!((200..300).contains(&status), "POST {path}: {status} {v}");
    v
}

/// Polls the backfill until `done` holds for it, for at most `limit`; returns it.
async fn wait_backfill(
    c: &Cluster,
    id: &str,
    limit: Duration,
    done: impl Fn(&Value) -> bool,
) -> Value {
    let path = format!("/v1/namespaces/{NS}/jobs/nightly/backfills/{id}");
    c.nodes[0]
        .wait_for(limit, async || {
            let b = c.nodes[0].get(&path).await;
            done(&b).then_some(b)
        })
        .await
}

/// A scheduler SIGKILLed while it drives a backfill: the shard's next holder resumes it from
/// its stored cursor. Every second of a 1,000-slot range then has exactly one execution (the
/// 100 that an earlier backfill made are left alone), each delivered, and the backfill took no
/// less time than its rate allows.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_scheduler_killed_mid_backfill_leaves_every_slot_once() {
    let _serial = SERIAL.lock().await;
    let mut c = Cluster::start(
        &["api,worker", "scheduler,worker", "scheduler,worker"],
        None,
        None,
    )
    .await;
    c.nodes[0]
        .put_job(
            NS,
            "nightly",
            json!({
                "schedule": {"cron": "* * * * * *"},
                "target": {"type": "http", "url": c.receiver.url("nightly")},
                "heartbeat_timeout": "3s",
                "retry": {"max_attempts": 5, "initial_interval": "200ms", "max_interval": "1s"}
            }),
        )
        .await;
    let now = Timestamp::now().as_second();
    let from = Timestamp::from_second(now - 1_200).expect("an instant");
    let to = Timestamp::from_second(now - 200).expect("an instant");
    let path = format!("/v1/namespaces/{NS}/jobs/nightly/backfill");

    // An earlier backfill of the first 100 seconds: slots the big one must leave alone.
    let first = post(
        &c,
        &path,
        json!({"from": from, "to": from + SignedDuration::from_secs(100), "max_per_second": 1000}),
    )
    .await;
    let first = wait_backfill(
        &c,
        first["id"].as_str().expect("an id"),
        Duration::from_secs(60),
        |b| b["state"] == "done",
    )
    .await;
    assert_eq!(first["created"], 100, "{first}");

    let dry = post(&c, &path, json!({"from": from, "to": to, "dry_run": true})).await;
    assert_eq!(
        (dry["count"].clone(), dry["existing"].clone()),
        (json!(900), json!(100)),
        "{dry}"
    );
    const RATE: u64 = 60;
    let started = Instant::now();
    let b = post(
        &c,
        &path,
        json!({"from": from, "to": to, "max_per_second": RATE}),
    )
    .await;
    let id = b["id"].as_str().expect("an id").to_owned();

    // Kill the scheduler that holds the job's shard once a fifth of the slots are made.
    let db = pool(&c.url).await;
    wait_backfill(&c, &id, Duration::from_secs(60), |b| {
        b["created"].as_u64().is_some_and(|n| n >= 180)
    })
    .await;
    let owner: String = sqlx::query_scalar(
        "SELECT l.owner FROM shard_leases l JOIN jobs j ON j.shard = l.shard \
         WHERE j.namespace = $1 AND j.name = 'nightly'",
    )
    .bind(NS)
    .fetch_one(&db)
    .await
    .expect("the shard's holder");
    let victim = Cluster::node_index(&owner);
    assert!(victim >= 1, "a scheduler holds the shard: {owner}");
    let at_kill = c.nodes[0]
        .get(&format!("/v1/namespaces/{NS}/jobs/nightly/backfills/{id}"))
        .await;
    c.nodes[victim].kill9();
    let killed_at = Timestamp::now();

    let done = wait_backfill(&c, &id, Duration::from_secs(120), |b| {
        b["state"] != "running"
    })
    .await;
    let took = started.elapsed();
    assert_eq!(done["state"], "done", "{done}");
    assert_eq!(
        (
            done["created"].clone(),
            done["existing"].clone(),
            done["remaining"].clone()
        ),
        (json!(900), json!(100), json!(0)),
        "{done}"
    );

    // The executions table: one execution per slot of the range, each `backfill`.
    let rows = sqlx::query(
        "SELECT scheduled_at, trigger, id FROM executions WHERE namespace = $1 AND job = 'nightly' \
         AND scheduled_at >= $2 AND scheduled_at < $3",
    )
    .bind(NS)
    .bind(from.as_millisecond())
    .bind(to.as_millisecond())
    .fetch_all(&db)
    .await
    .expect("read the executions");
    let mut per_slot: BTreeMap<i64, u32> = BTreeMap::new();
    let mut ids = HashSet::new();
    for r in &rows {
        let slot: i64 = r.get("scheduled_at");
        let trigger: String = r.get("trigger");
        assert_eq!(trigger, "backfill", "slot {slot}");
        *per_slot.entry(slot).or_default() += 1;
        ids.insert(r.get::<String, _>("id"));
    }
    let expected: Vec<i64> = (0..1_000)
        .map(|i| from.as_millisecond() + i * 1000)
        .collect();
    let missing: Vec<&i64> = expected
        .iter()
        .filter(|s| !per_slot.contains_key(s))
        .collect();
    let doubled: Vec<(&i64, &u32)> = per_slot.iter().filter(|(_, n)| **n > 1).collect();
    assert!(
        missing.is_empty(),
        "slots without an execution: {missing:?}"
    );
    assert!(doubled.is_empty(), "slots with two: {doubled:?}");
    assert_eq!(per_slot.len(), 1_000);

    // Every execution delivered (at least once: a killed worker's attempt is retried).
    let delivered = || -> HashSet<String> {
        c.receiver
            .for_path("nightly")
            .into_iter()
            .filter(|d| d.scheduled_at < to)
            .map(|d| d.execution_id)
            .collect()
    };
    c.nodes[0]
        .wait_for(Duration::from_secs(60), async || {
            ids.is_subset(&delivered()).then_some(())
        })
        .await;
    let delivered = delivered();
    // The rate: 900 slots at 60 a second take at least 15 s, whatever the kill.
    let least = Duration::from_secs(900 / RATE);
    assert!(
        took + Duration::from_secs(1) >= least,
        "took {took:?}, less than {least:?}"
    );
    println!(
        "backfill SIGKILL: 1,000 slots from {from} to {to}, 100 done before; killed {owner} at \
         {killed_at} with {} created; done after {:.1} s ({} created, {} left alone); one \
         execution per slot, none missing, every one delivered ({} delivered when done)",
        at_kill["created"],
        took.as_secs_f64(),
        done["created"],
        done["existing"],
        delivered.len()
    );
    c.finish().await;
}
