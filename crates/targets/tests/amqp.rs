//! The AMQP target against the real RabbitMQ (127.0.0.1:5672 guest/guest, or
//! `SUNDIAL_TEST_AMQP_URL`). Each test declares its own exchange and queue with unique names
//! and deletes them after.

mod common;

use std::collections::BTreeMap;

use common::{delivery, execution_id, unique};
use lapin::options::{
    BasicAckOptions, BasicGetOptions, ExchangeDeclareOptions, ExchangeDeleteOptions,
    QueueBindOptions, QueueDeclareOptions, QueueDeleteOptions,
};
use lapin::types::{AMQPValue, FieldTable};
use lapin::{Channel, Connection, ConnectionProperties, ExchangeKind};
use sundial_core::job::{AmqpTarget as AmqpSpec, TargetSpec};
use sundial_target::{AmqpTarget, Target};

fn amqp_url() -> String {
    common::url("AMQP", "amqp://guest:guest@127.0.0.1:5672/%2f")
}

/// A direct exchange and a queue bound to it with routing key `run`; deleted by `delete`.
struct Topology {
    _conn: Connection,
    channel: Channel,
    exchange: String,
    queue: String,
}

impl Topology {
    async fn declare(queue_args: FieldTable) -> Topology {
        let conn = Connection::connect(&amqp_url(), ConnectionProperties::default())
            .await
            .expect("RabbitMQ is up");
        let channel = conn.create_channel().await.unwrap();
        let exchange = unique("sundial-test-x");
        let queue = unique("sundial-test-q");
        channel
            .exchange_declare(
                exchange.as_str().into(),
                ExchangeKind::Direct,
                ExchangeDeclareOptions {
                    auto_delete: false,
                    ..Default::default()
                },
                FieldTable::default(),
            )
            .await
            .unwrap();
        channel
            .queue_declare(
                queue.as_str().into(),
                QueueDeclareOptions::default(),
                queue_args,
            )
            .await
            .unwrap();
        channel
            .queue_bind(
                queue.as_str().into(),
                exchange.as_str().into(),
                "run".into(),
                QueueBindOptions::default(),
                FieldTable::default(),
            )
            .await
            .unwrap();
        Topology {
            _conn: conn,
            channel,
            exchange,
            queue,
        }
    }

    async fn delete(self) {
        self.channel
            .queue_delete(self.queue.as_str().into(), QueueDeleteOptions::default())
            .await
            .unwrap();
        self.channel
            .exchange_delete(
                self.exchange.as_str().into(),
                ExchangeDeleteOptions::default(),
            )
            .await
            .unwrap();
    }
}

fn spec(exchange: &str, routing_key: &str) -> TargetSpec {
    TargetSpec::Amqp(AmqpSpec {
        connection: "rabbit".into(),
        exchange: exchange.into(),
        routing_key: routing_key.into(),
        payload: "{\"k\":1}".into(),
        properties: BTreeMap::from([("x-team".to_owned(), "payments".to_owned())]),
    })
}

#[tokio::test]
async fn a_confirmed_publish_arrives_with_the_execution_id_as_message_id() {
    let topology = Topology::declare(FieldTable::default()).await;
    let target = AmqpTarget::connect(&amqp_url())
        .await
        .expect("RabbitMQ is up");
    let spec = spec(&topology.exchange, "run");
    let id = execution_id();

    target.dispatch(&delivery(&id, 3, &spec)).await.unwrap();

    let got = topology
        .channel
        .basic_get(topology.queue.as_str().into(), BasicGetOptions::default())
        .await
        .unwrap()
        .expect("the message is in the queue");
    let props = &got.delivery.properties;
    assert_eq!(
        props.message_id().as_ref().map(|m| m.as_str()),
        Some(id.as_str())
    );
    assert_eq!(*props.delivery_mode(), Some(2));
    let headers = props.headers().clone().unwrap_or_default();
    let header = |k: &str| headers.inner().get(k).cloned();
    assert_eq!(header("sundial-attempt"), Some(AMQPValue::LongLongInt(3)));
    assert_eq!(
        header("traceparent"),
        Some(AMQPValue::LongString(
            sundial_target::traceparent(&id, 3).into()
        ))
    );
    assert_eq!(
        header("x-team"),
        Some(AMQPValue::LongString("payments".into()))
    );
    assert_eq!(got.delivery.data, b"{\"k\":1}");
    got.delivery.ack(BasicAckOptions::default()).await.unwrap();
    topology.delete().await;
}

#[tokio::test]
async fn an_unroutable_message_is_returned_and_is_a_transient_failure() {
    let topology = Topology::declare(FieldTable::default()).await;
    let target = AmqpTarget::connect(&amqp_url())
        .await
        .expect("RabbitMQ is up");
    let spec = spec(&topology.exchange, "no-queue-is-bound-to-this");
    let e = target
        .dispatch(&delivery(&execution_id(), 1, &spec))
        .await
        .unwrap_err();
    assert!(e.is_retryable(), "{e:?}");
    assert!(e.message().contains("unroutable"), "{e}");
    topology.delete().await;
}

#[tokio::test]
async fn a_nack_is_a_transient_failure() {
    // A queue that holds one message and rejects publishes beyond that: the broker nacks.
    let mut args = FieldTable::default();
    args.insert("x-max-length".into(), AMQPValue::LongLongInt(1));
    args.insert(
        "x-overflow".into(),
        AMQPValue::LongString("reject-publish".into()),
    );
    let topology = Topology::declare(args).await;
    let target = AmqpTarget::connect(&amqp_url())
        .await
        .expect("RabbitMQ is up");
    let spec = spec(&topology.exchange, "run");
    target
        .dispatch(&delivery(&execution_id(), 1, &spec))
        .await
        .unwrap();
    let e = target
        .dispatch(&delivery(&execution_id(), 1, &spec))
        .await
        .unwrap_err();
    assert!(e.is_retryable(), "{e:?}");
    assert!(e.message().contains("nack"), "{e}");
    topology.delete().await;
}

#[tokio::test]
async fn an_unknown_exchange_is_a_transient_failure_and_the_target_goes_on() {
    let topology = Topology::declare(FieldTable::default()).await;
    let target = AmqpTarget::connect(&amqp_url())
        .await
        .expect("RabbitMQ is up");
    let missing = spec(&unique("sundial-test-missing-x"), "run");
    let e = target
        .dispatch(&delivery(&execution_id(), 1, &missing))
        .await
        .unwrap_err();
    assert!(e.is_retryable(), "{e:?}");
    // The broker closed that attempt's channel, not the shared connection.
    let ok = spec(&topology.exchange, "run");
    target
        .dispatch(&delivery(&execution_id(), 1, &ok))
        .await
        .unwrap();
    topology.delete().await;
}

#[tokio::test]
async fn a_signed_message_carries_what_standard_webhooks_verifies() {
    let topology = Topology::declare(FieldTable::default()).await;
    let targets =
        common::signed_targets("rabbit", sundial_target::ConnectionKind::Amqp, &amqp_url()).await;
    let spec = spec(&topology.exchange, "run");
    let id = execution_id();
    targets
        .dispatch(&common::signed_delivery(&id, &spec))
        .await
        .unwrap();
    let got = topology
        .channel
        .basic_get(topology.queue.as_str().into(), BasicGetOptions::default())
        .await
        .unwrap()
        .expect("the message is in the queue");
    let headers = got
        .delivery
        .properties
        .headers()
        .clone()
        .unwrap_or_default();
    let text = |k: &str| match headers.inner().get(k) {
        Some(AMQPValue::LongString(s)) => s.to_string(),
        Some(AMQPValue::LongLongInt(n)) => n.to_string(),
        other => panic!("{k}: {other:?}"),
    };
    assert_eq!(text("webhook-id"), id);
    let signed: Vec<(&str, String)> = [
        "webhook-id",
        "webhook-timestamp",
        "webhook-signature",
        "sundial-lease-until",
        "sundial-signature",
        "sundial-attempt",
    ]
    .into_iter()
    .map(|k| (k, text(k)))
    .collect();
    let (_, secret) = common::signer();
    let body = std::str::from_utf8(&got.delivery.data).unwrap();
    common::verify_with_standardwebhooks(&secret, body, &signed);
    got.delivery.ack(BasicAckOptions::default()).await.unwrap();
    topology.delete().await;
}
