//! The AMQP target (docs/failure-classes.md, "amqp"): one publish per attempt on a fresh
//! channel in confirm mode, `mandatory` set, `message_id` = the execution id, persistent
//! delivery mode; successful when the broker confirms a message it routed.
//!
//! ```text
//!   open channel ─▶ confirm.select ─▶ basic.publish (mandatory) ─▶ ack            → success
//!                                                                  ack + returned → transient (unroutable)
//!                                                                  nack           → transient
//!                                     channel closed by the broker (unknown exchange, ...) → transient
//! ```
//! A channel per attempt keeps one job's broker-side error (a 404 on an unknown exchange
//! closes the channel) from failing the deliveries of others.

use std::sync::Arc;

use async_trait::async_trait;
use lapin::options::{BasicPublishOptions, ConfirmSelectOptions};
use lapin::types::{AMQPValue, FieldTable, LongString, ShortString};
use lapin::{BasicProperties, Confirmation, Connection, ConnectionProperties};
use sundial_core::job::TargetSpec;
use tokio::sync::Mutex;

use crate::{BoxError, Delivery, Error, Outcome, Target, error_chain, redact};

/// The AMQP target: one shared connection, re-opened on the next delivery after it dropped.
#[derive(Clone)]
pub struct AmqpTarget {
    url: String,
    conn: Arc<Mutex<Arc<Connection>>>,
}

impl std::fmt::Debug for AmqpTarget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AmqpTarget")
            .field("url", &redact(&self.url))
            .finish_non_exhaustive()
    }
}

fn properties() -> ConnectionProperties {
    ConnectionProperties::default().with_connection_name("sundial".into())
}

impl AmqpTarget {
    /// Connects to `url` (`amqp://user:password@host:port/vhost`, the vhost URL-encoded:
    /// `%2f` for `/`).
    ///
    /// # Errors
    /// A malformed URL, a broker that cannot be reached, or refused credentials.
    pub async fn connect(url: &str) -> Result<Self, BoxError> {
        let conn = Connection::connect(url, properties()).await?;
        Ok(AmqpTarget {
            url: url.to_owned(),
            conn: Arc::new(Mutex::new(Arc::new(conn))),
        })
    }

    /// The shared connection, re-opened first when it is no longer connected.
    async fn connection(&self) -> Result<Arc<Connection>, lapin::Error> {
        let mut conn = self.conn.lock().await;
        if !conn.status().connected() {
            *conn = Arc::new(Connection::connect(&self.url, properties()).await?);
        }
        Ok(conn.clone())
    }
}

/// How a publisher confirmation counts (the module table in `lib.rs`): `Ok` only for an
/// ack of a routed message; `Err` carries the transient failure's message.
pub(crate) fn confirmation_result(c: &Confirmation) -> Result<(), String> {
    match c {
        Confirmation::Ack(None) => Ok(()),
        Confirmation::Ack(Some(returned)) | Confirmation::Nack(Some(returned)) => Err(format!(
            "message returned unroutable: {} {}",
            returned.reply_code,
            returned.reply_text.as_str()
        )),
        Confirmation::Nack(None) => Err("broker nacked the message".into()),
        Confirmation::NotRequested => Err("broker did not confirm the message".into()),
    }
}

#[async_trait]
impl Target for AmqpTarget {
    async fn dispatch(&self, d: &Delivery<'_>) -> Result<Outcome, Error> {
        let TargetSpec::Amqp(spec) = d.target else {
            return Err(Error::permanent(format!(
                "not an amqp target: {}",
                d.target.kind()
            )));
        };
        let fail = |what: &str, e: lapin::Error| {
            Error::transient(format!(
                "amqp {what} to exchange '{}' routing key '{}': {}",
                spec.exchange,
                spec.routing_key,
                error_chain(&e)
            ))
        };
        let conn = self.connection().await.map_err(|e| fail("connect", e))?;
        let channel = conn
            .create_channel()
            .await
            .map_err(|e| fail("open channel", e))?;
        let result = async {
            channel
                .confirm_select(ConfirmSelectOptions::default())
                .await
                .map_err(|e| fail("confirm.select", e))?;
            let mut headers = FieldTable::default();
            for (k, v) in &spec.properties {
                headers.insert(
                    ShortString::from(k.as_str()),
                    AMQPValue::LongString(LongString::from(v.as_str())),
                );
            }
            headers.insert(
                "sundial-attempt".into(),
                AMQPValue::LongLongInt(i64::from(d.attempt)),
            );
            headers.insert(
                "sundial-scheduled-at".into(),
                AMQPValue::LongString(LongString::from(d.scheduled_at.to_string())),
            );
            headers.insert(
                "traceparent".into(),
                AMQPValue::LongString(LongString::from(crate::traceparent(
                    d.execution_id,
                    d.attempt,
                ))),
            );
            if let Some(signature) = d.signature {
                for (name, value) in signature.headers() {
                    headers.insert(name.into(), AMQPValue::LongString(LongString::from(value)));
                }
            }
            let props = BasicProperties::default()
                .with_message_id(d.execution_id.into())
                .with_delivery_mode(2)
                .with_timestamp(u64::try_from(d.now.as_second()).unwrap_or(0))
                .with_headers(headers);
            let confirm = channel
                .basic_publish(
                    spec.exchange.as_str().into(),
                    spec.routing_key.as_str().into(),
                    BasicPublishOptions {
                        mandatory: true,
                        immediate: false,
                    },
                    spec.payload.as_bytes(),
                    props,
                )
                .await
                .map_err(|e| fail("publish", e))?
                .await
                .map_err(|e| fail("publish", e))?;
            confirmation_result(&confirm).map_err(|m| {
                Error::transient(format!(
                    "amqp publish to exchange '{}' routing key '{}': {m}",
                    spec.exchange, spec.routing_key
                ))
            })
        }
        .await;
        if channel.status().connected() {
            let _ = channel.close(200, "done".into()).await;
        }
        result.map(|()| Outcome::default())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_an_ack_without_return_succeeds() {
        assert_eq!(confirmation_result(&Confirmation::Ack(None)), Ok(()));
        assert!(confirmation_result(&Confirmation::Nack(None)).is_err());
        assert!(confirmation_result(&Confirmation::NotRequested).is_err());
    }
}
