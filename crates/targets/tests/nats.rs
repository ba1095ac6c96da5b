//! The NATS target against the real server with JetStream (127.0.0.1:4222, or
//! `SUNDIAL_TEST_NATS_URL`). Each test makes its own stream with a unique name and subject
//! and deletes it after, so test binaries may run in parallel.

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use async_nats::jetstream::{self, stream};
use common::{delivery, execution_id, unique};
use sundial_core::job::{NatsTarget as NatsSpec, TargetSpec};
use sundial_target::{NatsTarget, Target};

fn nats_url() -> String {
    common::url("NATS", "nats://127.0.0.1:4222")
}

/// A stream `<name>` over `<name>.>` with a 2-minute duplicate window; deleted on drop.
struct TestStream {
    js: jetstream::Context,
    name: String,
}

impl TestStream {
    async fn create(client: &async_nats::Client) -> TestStream {
        let js = jetstream::new(client.clone());
        let name = unique("sundial-test").replace('-', "_");
        js.create_stream(stream::Config {
            name: name.clone(),
            subjects: vec![format!("{name}.>")],
            duplicate_window: Duration::from_secs(120),
            storage: stream::StorageType::Memory,
            ..Default::default()
        })
        .await
        .expect("create the test stream");
        TestStream { js, name }
    }

    async fn delete(self) {
        self.js
            .delete_stream(&self.name)
            .await
            .expect("delete the test stream");
    }
}

fn spec(subject: String) -> TargetSpec {
    TargetSpec::Nats(NatsSpec {
        connection: "events".into(),
        subject,
        payload: "{\"k\":1}".into(),
        headers: BTreeMap::from([("x-team".to_owned(), "payments".to_owned())]),
    })
}

#[tokio::test]
async fn a_publish_succeeds_on_the_ack_and_carries_the_execution_id_as_msg_id() {
    let client = async_nats::connect(nats_url()).await.expect("NATS is up");
    let stream = TestStream::create(&client).await;
    let target = NatsTarget::from_client(client);
    let spec = spec(format!("{}.jobs.run", stream.name));
    let id = execution_id();

    let outcome = target.dispatch(&delivery(&id, 1, &spec)).await.unwrap();
    let detail = outcome.detail.unwrap();
    assert!(
        detail.contains(&stream.name) && !detail.contains("duplicate"),
        "{detail}"
    );

    let js_stream = stream.js.get_stream(&stream.name).await.unwrap();
    let message = js_stream.get_raw_message(1).await.unwrap();
    assert_eq!(message.payload.as_ref(), b"{\"k\":1}");
    let header = |k: &str| message.headers.get(k).map(|v| v.as_str().to_owned());
    assert_eq!(header("Nats-Msg-Id").as_deref(), Some(id.as_str()));
    assert_eq!(header("Sundial-Execution-Id").as_deref(), Some(id.as_str()));
    assert_eq!(header("Sundial-Attempt").as_deref(), Some("1"));
    assert_eq!(
        header("traceparent"),
        Some(sundial_target::traceparent(&id, 1))
    );
    assert_eq!(
        header("Sundial-Scheduled-At").as_deref(),
        Some(common::SCHEDULED_AT)
    );
    assert_eq!(header("x-team").as_deref(), Some("payments"));
    stream.delete().await;
}

#[tokio::test]
async fn a_redelivery_inside_the_duplicate_window_is_dropped_by_the_broker() {
    let client = async_nats::connect(nats_url()).await.expect("NATS is up");
    let stream = TestStream::create(&client).await;
    let target = NatsTarget::from_client(client);
    let spec = spec(format!("{}.jobs.run", stream.name));
    let id = execution_id();

    target.dispatch(&delivery(&id, 1, &spec)).await.unwrap();
    // The same execution again (a retry after a lost ack): a success that stores nothing.
    let again = target.dispatch(&delivery(&id, 2, &spec)).await.unwrap();
    assert!(again.detail.unwrap().contains("duplicate"));
    // Another execution is stored.
    target
        .dispatch(&delivery(&execution_id(), 1, &spec))
        .await
        .unwrap();

    let mut js_stream = stream.js.get_stream(&stream.name).await.unwrap();
    assert_eq!(js_stream.info().await.unwrap().state.messages, 2);
    stream.delete().await;
}

#[tokio::test]
async fn a_subject_without_a_stream_is_a_transient_failure() {
    let target = NatsTarget::connect(&nats_url()).await.expect("NATS is up");
    let spec = spec(format!("{}.nobody", unique("sundial-test-nostream")));
    let e = target
        .dispatch(&delivery(&execution_id(), 1, &spec))
        .await
        .unwrap_err();
    assert!(e.is_retryable(), "{e:?}");
}

#[tokio::test]
async fn a_message_over_max_payload_fails_for_good() {
    let client = async_nats::connect(nats_url()).await.expect("NATS is up");
    let max = client.server_info().max_payload;
    let stream = TestStream::create(&client).await;
    let target = NatsTarget::from_client(client);
    let TargetSpec::Nats(mut nats) = spec(format!("{}.big", stream.name)) else {
        unreachable!()
    };
    nats.payload = "x".repeat(max + 1);
    let spec = TargetSpec::Nats(nats);
    let e = target
        .dispatch(&delivery(&execution_id(), 1, &spec))
        .await
        .unwrap_err();
    assert!(!e.is_retryable(), "{e:?}");
    stream.delete().await;
}

#[tokio::test]
async fn a_signed_message_carries_what_standard_webhooks_verifies() {
    let client = async_nats::connect(nats_url()).await.expect("NATS is up");
    let stream = TestStream::create(&client).await;
    let targets =
        common::signed_targets("events", sundial_target::ConnectionKind::Nats, &nats_url()).await;
    let spec = spec(format!("{}.jobs.run", stream.name));
    let id = execution_id();
    targets
        .dispatch(&common::signed_delivery(&id, &spec))
        .await
        .unwrap();
    let js_stream = stream.js.get_stream(&stream.name).await.unwrap();
    let message = js_stream.get_raw_message(1).await.unwrap();
    let header = |k: &str| {
        message
            .headers
            .get(k)
            .map(|v| v.as_str().to_owned())
            .unwrap_or_else(|| panic!("no {k} header"))
    };
    assert_eq!(header("webhook-id"), id);
    let headers: Vec<(&str, String)> = [
        "webhook-id",
        "webhook-timestamp",
        "webhook-signature",
        "sundial-lease-until",
        "sundial-signature",
    ]
    .into_iter()
    .map(|k| (k, header(k)))
    .chain([("sundial-attempt", header("Sundial-Attempt"))])
    .collect();
    let (_, secret) = common::signer();
    let body = std::str::from_utf8(&message.payload).unwrap();
    common::verify_with_standardwebhooks(&secret, body, &headers);
    stream.delete().await;
}
