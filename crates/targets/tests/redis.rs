//! The Redis target against the real server (127.0.0.1:6379, or `SUNDIAL_TEST_REDIS_URL`).
//! Each test writes to its own stream key and deletes it after.

mod common;

use std::collections::BTreeMap;

use common::{delivery, execution_id, unique};
use redis::AsyncCommands;
use sundial_core::job::{RedisTarget as RedisSpec, TargetSpec};
use sundial_target::{RedisTarget, Target};

fn redis_url() -> String {
    common::url("REDIS", "redis://127.0.0.1:6379")
}

async fn admin() -> redis::aio::MultiplexedConnection {
    redis::Client::open(redis_url())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .expect("Redis is up")
}

fn spec(stream: &str, fields: &[(&str, &str)]) -> TargetSpec {
    TargetSpec::Redis(RedisSpec {
        connection: "cache".into(),
        stream: stream.into(),
        fields: fields
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect(),
    })
}

#[tokio::test]
async fn xadd_writes_the_fields_and_the_execution_id() {
    let target = RedisTarget::connect(&redis_url())
        .await
        .expect("Redis is up");
    let key = unique("sundial-test-stream");
    // A job field named execution_id cannot override the real one.
    let spec = spec(&key, &[("kind", "invoice"), ("execution_id", "forged")]);
    let id = execution_id();

    let outcome = target.dispatch(&delivery(&id, 1, &spec)).await.unwrap();
    let detail = outcome.detail.unwrap();

    let mut conn = admin().await;
    let entries: Vec<(String, Vec<(String, String)>)> = redis::cmd("XRANGE")
        .arg(&key)
        .arg("-")
        .arg("+")
        .query_async(&mut conn)
        .await
        .unwrap();
    let _: () = conn.del(&key).await.unwrap();
    assert_eq!(entries.len(), 1);
    let (entry_id, fields) = &entries[0];
    assert!(
        detail.ends_with(entry_id.as_str()),
        "{detail} vs {entry_id}"
    );
    let fields: BTreeMap<_, _> = fields.iter().cloned().collect();
    assert_eq!(
        fields,
        BTreeMap::from([
            ("kind".to_owned(), "invoice".to_owned()),
            ("execution_id".to_owned(), id.clone()),
            (
                "traceparent".to_owned(),
                sundial_target::traceparent(&id, 1)
            ),
        ])
    );
}

#[tokio::test]
async fn a_key_of_another_type_fails_for_good() {
    let target = RedisTarget::connect(&redis_url())
        .await
        .expect("Redis is up");
    let key = unique("sundial-test-string");
    let mut conn = admin().await;
    let _: () = conn.set(&key, "not a stream").await.unwrap();
    let spec = spec(&key, &[("k", "v")]);
    let result = target.dispatch(&delivery(&execution_id(), 1, &spec)).await;
    let _: () = conn.del(&key).await.unwrap();
    let e = result.unwrap_err();
    assert!(!e.is_retryable(), "{e:?}");
    assert!(e.message().contains("WRONGTYPE"), "{e}");
}

#[tokio::test]
async fn a_signed_entry_carries_what_standard_webhooks_verifies() {
    let targets =
        common::signed_targets("cache", sundial_target::ConnectionKind::Redis, &redis_url()).await;
    let key = unique("sundial-test-stream");
    // A job's own field of a reserved name is dropped, and not signed.
    let spec = spec(
        &key,
        &[
            ("kind", "invoice"),
            ("amount", "42"),
            ("webhook-id", "forged"),
        ],
    );
    let id = execution_id();
    targets
        .dispatch(&common::signed_delivery(&id, &spec))
        .await
        .unwrap();
    let mut conn = admin().await;
    let entries: Vec<(String, Vec<(String, String)>)> = redis::cmd("XRANGE")
        .arg(&key)
        .arg("-")
        .arg("+")
        .query_async(&mut conn)
        .await
        .unwrap();
    let _: () = conn.del(&key).await.unwrap();
    let fields: BTreeMap<String, String> = entries[0].1.iter().cloned().collect();
    assert_eq!(fields["webhook-id"], id);
    assert_eq!(fields["sundial-attempt"], "2");
    let headers: Vec<(&str, String)> = [
        "webhook-id",
        "webhook-timestamp",
        "webhook-signature",
        "sundial-lease-until",
        "sundial-signature",
        "sundial-attempt",
    ]
    .into_iter()
    .map(|k| (k, fields[k].clone()))
    .collect();
    // The signed body: the job's fields as one JSON object, names sorted, no spaces.
    let body = r#"{"amount":"42","kind":"invoice"}"#;
    let (_, secret) = common::signer();
    common::verify_with_standardwebhooks(&secret, body, &headers);
}
