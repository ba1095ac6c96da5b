//! Alerts end to end below the server: a real embedded store whose state trigger writes the
//! alert event, the dispatcher, and real receivers — a loopback HTTP server, NATS JetStream,
//! RabbitMQ and Redis (the services scripts/services.sh starts; `SUNDIAL_TEST_{NATS,AMQP,REDIS}_URL`
//! override their addresses). Each test uses its own stream, queue and key names.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_nats::jetstream::{self, stream};
use axum::http::{HeaderMap, StatusCode};
use jiff::SignedDuration;
use lapin::options::{BasicGetOptions, QueueDeclareOptions, QueueDeleteOptions};
use lapin::types::FieldTable;
use serde_json::Value;
use sundial_clock::ManualClock;
use sundial_core::Dur;
use sundial_core::execution::AttemptOutcome;
use sundial_core::job::{AmqpTarget, HttpTarget, NatsTarget, RedisTarget, TargetSpec};
use sundial_store::testkit::{execution, job_record, t0};
use sundial_store::{
    AttemptComplete, AttemptRef, ExecutionClaim, JobWrite, NextStep, PendingExecutions, Store,
};
use sundial_store_sqlite::SqliteStore;
use sundial_target::{ConnectionKind, Endpoint, Targets};
use sundial_worker::{AlertDispatcher, AlertRule};

fn url(service: &str, default: &str) -> String {
    std::env::var(format!("SUNDIAL_TEST_{service}_URL")).unwrap_or_else(|_| default.into())
}

fn unique(prefix: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    format!("{prefix}_{}_{nanos}", std::process::id())
}

/// What the loopback webhook received: the idempotency key and the JSON body of each
/// request, and the statuses it answers with in turn (200 once they run out).
#[derive(Default)]
struct Webhook {
    received: Mutex<Vec<(String, Value)>>,
    answers: Mutex<Vec<StatusCode>>,
}

async fn receive(
    axum::extract::State(w): axum::extract::State<Arc<Webhook>>,
    headers: HeaderMap,
    body: String,
) -> StatusCode {
    let key = headers
        .get("idempotency-key")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_owned();
    let json = serde_json::from_str(&body).unwrap_or(Value::Null);
    w.received.lock().unwrap().push((key, json));
    let mut answers = w.answers.lock().unwrap();
    if answers.is_empty() {
        StatusCode::OK
    } else {
        answers.remove(0)
    }
}

async fn webhook(answers: Vec<StatusCode>) -> (Arc<Webhook>, String) {
    let hook = Arc::new(Webhook {
        answers: Mutex::new(answers),
        ..Default::default()
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    let app = axum::Router::new()
        .route("/hook", axum::routing::post(receive))
        .with_state(hook.clone());
    tokio::spawn(async move { axum::serve(listener, app).await });
    (hook, format!("http://{addr}/hook"))
}

fn http_rule(name: &str, url: &str) -> AlertRule {
    AlertRule {
        name: name.into(),
        on: vec!["dead".into()],
        namespaces: vec!["*".into()],
        target: TargetSpec::Http(HttpTarget {
            method: "POST".into(),
            url: url.into(),
            headers: Default::default(),
            body: None,
            success_codes: Vec::new(),
        }),
    }
}

/// A store with the `dead` alert state registered, and the id of an execution of job
/// `nightly` in namespace `billing` that then died (HTTP 503 on its only attempt).
async fn a_dead_letter(
    dir: &tempfile::TempDir,
    clock: Arc<ManualClock>,
) -> (Arc<dyn Store>, String) {
    let store: Arc<dyn Store> = Arc::new(
        SqliteStore::open(
            &format!("sqlite://{}", dir.path().join("a.db").display()),
            clock,
        )
        .await
        .expect("open"),
    );
    store
        .alert_states_add(&["dead".into()])
        .await
        .expect("register");
    let job = store
        .job_write(&JobWrite {
            record: job_record("billing", "nightly"),
            expected_version: None,
            pending: PendingExecutions::Keep,
        })
        .await
        .expect("job");
    store
        .execution_insert(&execution(&job, t0()))
        .await
        .expect("execution");
    let e = store
        .execution_claim(&ExecutionClaim {
            worker: "w".into(),
            limit: 1,
            rate_limits: Default::default(),
            ahead_ms: 0,
            epoch: None,
            on_time_first: false,
        })
        .await
        .expect("claim")
        .remove(0);
    store
        .attempt_complete(&AttemptComplete {
            attempt: AttemptRef {
                id: e.id.clone(),
                attempt: e.attempt,
            },
            outcome: AttemptOutcome::TransientFailure,
            status_code: Some(503),
            error: Some("HTTP 503: <script>alert(1)</script>".into()),
            detail: None,
            next: NextStep::Dead,
            only_if_lapsed: false,
            output: None,
        })
        .await
        .expect("dead");
    (store, e.id)
}

fn dispatcher(store: &Arc<dyn Store>, targets: Targets, rules: Vec<AlertRule>) -> AlertDispatcher {
    AlertDispatcher::new(
        store.clone(),
        Arc::new(targets),
        rules,
        "https://sundial.example".into(),
        Dur::from_secs(1),
    )
}

#[tokio::test]
async fn a_dead_letter_reaches_http_nats_amqp_and_redis_once_with_its_key() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = Arc::new(ManualClock::new(t0()));
    let (store, id) = a_dead_letter(&dir, clock.clone()).await;
    let key = format!("{id}:dead");
    let (hook, hook_url) = webhook(Vec::new()).await;

    let nats = async_nats::connect(url("NATS", "nats://127.0.0.1:4222"))
        .await
        .expect("NATS is up");
    let js = jetstream::new(nats.clone());
    let stream_name = unique("sundial_alerts");
    js.create_stream(stream::Config {
        name: stream_name.clone(),
        subjects: vec![format!("{stream_name}.>")],
        storage: stream::StorageType::Memory,
        ..Default::default()
    })
    .await
    .expect("stream");
    let amqp_url = url("AMQP", "amqp://guest:guest@127.0.0.1:5672/%2f");
    let amqp = lapin::Connection::connect(&amqp_url, lapin::ConnectionProperties::default())
        .await
        .expect("RabbitMQ is up");
    let channel = amqp.create_channel().await.expect("channel");
    let queue = unique("sundial-alerts");
    channel
        .queue_declare(
            queue.as_str().into(),
            QueueDeclareOptions::default(),
            FieldTable::default(),
        )
        .await
        .expect("queue");
    let redis_url = url("REDIS", "redis://127.0.0.1:6379");
    let redis_key = unique("sundial-alerts");

    let endpoints = BTreeMap::from([
        (
            "events".to_string(),
            Endpoint {
                kind: ConnectionKind::Nats,
                url: url("NATS", "nats://127.0.0.1:4222"),
            },
        ),
        (
            "rabbit".to_string(),
            Endpoint {
                kind: ConnectionKind::Amqp,
                url: amqp_url.clone(),
            },
        ),
        (
            "cache".to_string(),
            Endpoint {
                kind: ConnectionKind::Redis,
                url: redis_url.clone(),
            },
        ),
    ]);
    let targets = Targets::connect(
        &endpoints,
        sundial_target::HttpOptions::default(),
        Duration::from_secs(10),
    )
    .await
    .expect("connect");
    let rule = |name: &str, target: TargetSpec| AlertRule {
        name: name.into(),
        on: vec!["dead".into(), "failed".into()],
        namespaces: vec!["billing".into()],
        target,
    };
    let rules = vec![
        http_rule("hook", &hook_url),
        rule(
            "nats",
            TargetSpec::Nats(NatsTarget {
                connection: "events".into(),
                subject: format!("{stream_name}.alerts"),
                payload: String::new(),
                headers: Default::default(),
            }),
        ),
        rule(
            "amqp",
            TargetSpec::Amqp(AmqpTarget {
                connection: "rabbit".into(),
                exchange: String::new(),
                routing_key: queue.clone(),
                payload: String::new(),
                properties: Default::default(),
            }),
        ),
        rule(
            "redis",
            TargetSpec::Redis(RedisTarget {
                connection: "cache".into(),
                stream: redis_key.clone(),
                fields: BTreeMap::from([("source".to_string(), "sundial".to_string())]),
            }),
        ),
        // Another namespace's alert takes nothing.
        AlertRule {
            namespaces: vec!["other".into()],
            ..http_rule("elsewhere", &hook_url)
        },
    ];
    let alerts = dispatcher(&store, targets, rules);
    assert_eq!(alerts.dispatch_once().await.expect("pass"), 1);
    clock.advance(SignedDuration::from_secs(120));
    assert_eq!(
        alerts.dispatch_once().await.expect("pass"),
        0,
        "nothing twice"
    );

    let received = hook.received.lock().unwrap().clone();
    assert_eq!(received.len(), 1, "{received:?}");
    let (got_key, body) = &received[0];
    assert_eq!(got_key, &key);
    assert_eq!(body["alert"], "hook");
    assert_eq!(body["job"], "nightly");
    assert_eq!(body["namespace"], "billing");
    assert_eq!(body["execution_id"], id.as_str());
    assert_eq!(body["state"], "dead");
    assert_eq!(body["attempt"], 1);
    assert_eq!(body["error"], "HTTP 503: <script>alert(1)</script>");
    assert_eq!(
        body["url"],
        format!("https://sundial.example/ui/namespaces/billing/executions/{id}").as_str()
    );

    let message = js
        .get_stream(&stream_name)
        .await
        .expect("stream")
        .get_raw_message(1)
        .await
        .expect("the alert is in the stream");
    assert_eq!(
        message.headers.get("Nats-Msg-Id").map(|v| v.as_str()),
        Some(key.as_str())
    );
    let payload: Value = serde_json::from_slice(&message.payload).expect("JSON");
    assert_eq!(
        (payload["alert"].as_str(), payload["state"].as_str()),
        (Some("nats"), Some("dead"))
    );
    js.delete_stream(&stream_name).await.expect("delete stream");

    let got = channel
        .basic_get(queue.as_str().into(), BasicGetOptions { no_ack: true })
        .await
        .expect("get")
        .expect("the alert is in the queue");
    assert_eq!(
        got.delivery
            .properties
            .message_id()
            .as_ref()
            .map(|m| m.as_str()),
        Some(key.as_str())
    );
    let payload: Value = serde_json::from_slice(&got.delivery.data).expect("JSON");
    assert_eq!(payload["alert"], "amqp");
    channel
        .queue_delete(queue.as_str().into(), QueueDeleteOptions::default())
        .await
        .expect("delete queue");

    let mut conn = redis::Client::open(redis_url)
        .expect("url")
        .get_multiplexed_async_connection()
        .await
        .expect("Redis is up");
    let entries: Vec<(String, Vec<(String, String)>)> = redis::cmd("XRANGE")
        .arg(&redis_key)
        .arg("-")
        .arg("+")
        .query_async(&mut conn)
        .await
        .expect("xrange");
    let _: i64 = redis::cmd("DEL")
        .arg(&redis_key)
        .query_async(&mut conn)
        .await
        .expect("del");
    assert_eq!(entries.len(), 1);
    let fields: BTreeMap<String, String> = entries[0].1.iter().cloned().collect();
    assert_eq!(fields.get("execution_id"), Some(&key));
    assert_eq!(fields.get("source").map(String::as_str), Some("sundial"));
    let payload: Value = serde_json::from_str(&fields["alert"]).expect("JSON");
    assert_eq!(payload["alert"], "redis");
}

#[tokio::test]
async fn a_failed_round_comes_back_after_its_backoff_for_the_alert_that_failed_only() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = Arc::new(ManualClock::new(t0()));
    let (store, id) = a_dead_letter(&dir, clock.clone()).await;
    let (steady, steady_url) = webhook(Vec::new()).await;
    let (flaky, flaky_url) = webhook(vec![StatusCode::SERVICE_UNAVAILABLE]).await;
    let (gone, gone_url) = webhook(vec![StatusCode::NOT_FOUND]).await;
    let alerts = dispatcher(
        &store,
        Targets::new().expect("http"),
        vec![
            http_rule("steady", &steady_url),
            http_rule("flaky", &flaky_url),
            http_rule("gone", &gone_url),
        ],
    );
    assert_eq!(
        alerts.dispatch_once().await.expect("pass"),
        0,
        "one came back"
    );
    assert_eq!(
        alerts.dispatch_once().await.expect("pass"),
        0,
        "not before its backoff"
    );
    clock.advance(SignedDuration::from_secs(1));
    assert_eq!(alerts.dispatch_once().await.expect("pass"), 1);
    clock.advance(SignedDuration::from_secs(600));
    assert_eq!(alerts.dispatch_once().await.expect("pass"), 0);

    let keys = |w: &Webhook| -> Vec<String> {
        w.received
            .lock()
            .unwrap()
            .iter()
            .map(|r| r.0.clone())
            .collect()
    };
    let key = format!("{id}:dead");
    assert_eq!(keys(&steady), vec![key.clone()], "taken once, not resent");
    assert_eq!(
        keys(&flaky),
        vec![key.clone(), key.clone()],
        "503, then taken"
    );
    assert_eq!(keys(&gone), vec![key], "a 404 is given up at once");
}
