//! The NATS target (docs/failure-classes.md, "nats"): one JetStream publish per attempt with
//! `Nats-Msg-Id` = the execution id, successful on the stream's ack.
//!
//! The broker drops a second message with the same `Nats-Msg-Id` inside the stream's
//! duplicate window (`duplicate_window`, two minutes by default) and answers it with an ack
//! that says `duplicate`: a re-delivered attempt is then a success that stored nothing new.
//! Outside the window the receiver must de-duplicate by the header itself.

use std::time::Duration;

use async_nats::HeaderMap;
use async_nats::jetstream::{self, context::PublishErrorKind};
use async_trait::async_trait;
use sundial_core::job::TargetSpec;

use crate::{BoxError, Delivery, Error, Outcome, Target};

/// How long a publish waits for the stream's ack.
pub(crate) const ACK_TIMEOUT: Duration = Duration::from_secs(10);

/// The NATS target: one shared client (it reconnects by itself) and its JetStream context.
#[derive(Debug, Clone)]
pub struct NatsTarget {
    js: jetstream::Context,
}

impl NatsTarget {
    /// Connects to the server at `url` (`nats://host:port`, credentials in the URL if any).
    ///
    /// # Errors
    /// The server cannot be reached or refuses the connection (one try; no retry loop).
    pub async fn connect(url: &str) -> Result<Self, BoxError> {
        let client = async_nats::ConnectOptions::new()
            .name("sundial")
            .connection_timeout(Duration::from_secs(5))
            .connect(url)
            .await?;
        Ok(Self::from_client(client))
    }

    /// A target over an existing client.
    pub fn from_client(client: async_nats::Client) -> Self {
        let mut js = jetstream::new(client);
        js.set_timeout(ACK_TIMEOUT);
        NatsTarget { js }
    }
}

/// How a JetStream publish error counts (the module table in `lib.rs`): only a message
/// that can never fit is permanent; a missing stream may be created, a lost ack retried.
pub(crate) fn publish_error_is_permanent(kind: &PublishErrorKind) -> bool {
    matches!(kind, PublishErrorKind::MaxPayloadExceeded)
}

#[async_trait]
impl Target for NatsTarget {
    async fn dispatch(&self, d: &Delivery<'_>) -> Result<Outcome, Error> {
        let TargetSpec::Nats(spec) = d.target else {
            return Err(Error::permanent(format!(
                "not a nats target: {}",
                d.target.kind()
            )));
        };
        let mut headers = HeaderMap::new();
        for (k, v) in &spec.headers {
            if k.is_empty() || k.contains([':', ' ', '\r', '\n']) || v.contains(['\r', '\n']) {
                return Err(Error::permanent(format!("bad header {k}")));
            }
            headers.insert(k.as_str(), v.as_str());
        }
        headers.insert("Nats-Msg-Id", d.execution_id);
        headers.insert("Sundial-Execution-Id", d.execution_id);
        headers.insert("Sundial-Attempt", d.attempt.to_string().as_str());
        headers.insert("Sundial-Scheduled-At", d.scheduled_at.to_string().as_str());
        headers.insert(
            "traceparent",
            crate::traceparent(d.execution_id, d.attempt).as_str(),
        );
        if let Some(signature) = d.signature {
            for (name, value) in signature.headers() {
                headers.insert(name, value.as_str());
            }
        }
        let classify = |e: jetstream::context::PublishError| {
            let message = format!("jetstream publish to {}: {}", spec.subject, e);
            if publish_error_is_permanent(&e.kind()) {
                Error::permanent(message)
            } else {
                Error::transient(message)
            }
        };
        let ack = self
            .js
            .publish_with_headers(
                spec.subject.clone(),
                headers,
                spec.payload.clone().into_bytes().into(),
            )
            .await
            .map_err(classify)?
            .await
            .map_err(classify)?;
        let detail = if ack.duplicate {
            format!(
                "stream {} sequence {} (duplicate: already stored)",
                ack.stream, ack.sequence
            )
        } else {
            format!("stream {} sequence {}", ack.stream, ack.sequence)
        };
        Ok(Outcome {
            output: None,
            status_code: None,
            detail: Some(detail),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_an_oversized_message_fails_for_good() {
        use PublishErrorKind::*;
        assert!(publish_error_is_permanent(&MaxPayloadExceeded));
        for kind in [
            StreamNotFound,
            TimedOut,
            BrokenPipe,
            MaxAckPending,
            WrongLastMessageId,
            WrongLastSequence,
            Other,
        ] {
            assert!(!publish_error_is_permanent(&kind), "{kind:?}");
        }
    }
}
