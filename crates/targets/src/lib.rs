//! Targets: what one attempt of an execution runs (ARCHITECTURE.md, "The shape").
//!
//! [`Target::dispatch`] returns an [`Outcome`] on success or an [`Error`] that says itself
//! whether a retry may help ([`Error::Retryable`]) or not ([`Error::Permanent`]); callers never
//! infer retryability by inspecting messages.
//!
//! Invariants:
//! - Targets never touch the store; they only deliver.
//! - Every delivery carries the execution id as its idempotency key, so a retried or
//!   re-delivered attempt can be recognised by the receiver
//!   (docs/guarantees.md#g2-at-least-once): the HTTP `Idempotency-Key` header, the NATS
//!   `Nats-Msg-Id` header, the AMQP `message_id` property, the Redis stream field
//!   `execution_id`, the container's `SUNDIAL_EXECUTION_ID`.
//! - Every HTTP, NATS, AMQP and Redis delivery carries a W3C `traceparent` ([`traceparent`]):
//!   a header (HTTP, NATS, AMQP) or a stream field (Redis), set after the target's own, so a
//!   job cannot make its deliveries claim another trace.
//! - Brokers and engines are *named connections* from the server's config
//!   (docs/configuration.md, `[connections.NAME]`), one shared client per name per worker
//!   process, built by [`Targets::connect`]; jobs carry only the name, never a host or a
//!   credential.
//! - Dropping a `dispatch` future cancels the delivery (the HTTP request is dropped, a
//!   container being run is removed in the background): per-attempt timeouts and
//!   cancellation are the caller's `select!`, not the target's.
//!
//! Failure classification, one table for every target. Each row has a test: the HTTP rows in
//! `http.rs`, the pure rows in each module's unit tests, the rows that need a broker or an
//! engine in `tests/<target>.rs` against the real service.
//!
//! | target | success | transient (retried) | permanent (fails at once) |
//! |---|---|---|---|
//! | http | 2xx, or `success_codes` | connection error, timeout, 408, 425, 429, 5xx | other 4xx, 1xx/3xx (redirects are not followed), a bad method or header |
//! | nats | the JetStream ack, also one saying *duplicate* (the broker already holds this `Nats-Msg-Id` within the stream's duplicate window: delivered before) | no stream bound to the subject, no ack in time, connection lost, any other publish error | payload over the server's `max_payload`; a bad header |
//! | amqp | the broker's publisher-confirm ack for a routed message | a nack, a message returned unroutable (`mandatory`), a channel closed by the broker (e.g. unknown exchange), connection error | — |
//! | redis | `XADD` returns the entry id | connection error, timeout, `LOADING`, `BUSY`, `OOM`, `READONLY`, `TRYAGAIN`, any other server error | `WRONGTYPE` (the key holds no stream), `NOPERM` |
//! | container | exit code 0 | exit code not in `permanent_exit_codes`, engine unreachable or failing, container killed | exit code in `permanent_exit_codes`, image not found on the engine (nothing is pulled), the engine refusing the container definition (400) |
//! | any | | | a connection removed from the config since the job was accepted, or now of another type; a target type this server does not run |
//!
//! The container target puts the last 4 KiB of the container's output into
//! [`Outcome::detail`] on success and into the error message on failure.

#![warn(missing_docs)]

mod amqp;
mod container;
mod http;
mod nats;
mod redis;
pub mod signing;

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use jiff::Timestamp;
use sundial_core::Dur;
use sundial_core::job::TargetSpec;

pub use amqp::AmqpTarget;
pub use container::{ContainerTarget, LOG_TAIL_BYTES};
pub use http::{
    AddressNotAllowed, AllowedAddresses, DEFAULT_MAX_CONNECTIONS_PER_HOST, HttpOptions, HttpTarget,
    StatusClass, classify_http_status,
};
pub use nats::NatsTarget;
pub use redis::RedisTarget;

/// One delivery of one attempt.
#[derive(Debug, Clone)]
pub struct Delivery<'a> {
    /// Execution id: the idempotency key.
    pub execution_id: &'a str,
    /// The execution's namespace: which signing keys sign it ([`signing`]).
    pub namespace: &'a str,
    /// Attempt number, from 1.
    pub attempt: u32,
    /// The attempt's lease end (UTC), signed beside the attempt number so that a receiver can
    /// refuse an attempt no longer current (docs/security.md); `None`: no attempt fence is
    /// sent (an alert).
    pub lease_until: Option<Timestamp>,
    /// The signature headers to send, set by [`Targets`] from its [`signing::Signer`]; `None`
    /// sends none. Callers leave it `None`.
    pub signature: Option<&'a signing::Signature>,
    /// The slot.
    pub scheduled_at: Timestamp,
    /// The instant the attempt started (for `Retry-After` dates).
    pub now: Timestamp,
    /// What to deliver.
    pub target: &'a TargetSpec,
    /// Keep a successful response's body as the output (an HTTP workflow task with
    /// `output: json`): it must be a JSON value of at most
    /// [`sundial_core::workflow::MAX_OUTPUT_BYTES`], or the attempt fails for good.
    pub keep_output: bool,
}

/// A successful delivery.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Outcome {
    /// HTTP status, exit code, ... when there is one.
    pub status_code: Option<i64>,
    /// What the receiver answered, for the attempt's record: the container's last
    /// [`LOG_TAIL_BYTES`] of output, the stream and sequence of a JetStream ack, the id of a
    /// Redis stream entry. `None` when there is nothing to say (HTTP, AMQP).
    pub detail: Option<String>,
    /// The response body kept as the output (JSON text), when the delivery asked for it.
    pub output: Option<String>,
}

/// A failed delivery, classified.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// A retry may succeed; `after` is a delay the target asked for (HTTP `Retry-After`).
    #[error("{message}")]
    Retryable {
        /// Delay asked for by the target.
        after: Option<Dur>,
        /// HTTP status, exit code, ...
        status_code: Option<i64>,
        /// What happened (for a container: the exit code and the output's last 4 KiB).
        message: String,
    },
    /// Retrying cannot help.
    #[error("{message}")]
    Permanent {
        /// HTTP status, exit code, ...
        status_code: Option<i64>,
        /// What happened (for a container: the exit code and the output's last 4 KiB).
        message: String,
    },
}

impl Error {
    /// The status code carried, if any.
    pub fn status_code(&self) -> Option<i64> {
        match self {
            Error::Retryable { status_code, .. } | Error::Permanent { status_code, .. } => {
                *status_code
            }
        }
    }

    /// True for [`Error::Retryable`].
    pub fn is_retryable(&self) -> bool {
        matches!(self, Error::Retryable { .. })
    }

    /// The message, whichever the class.
    pub fn message(&self) -> &str {
        match self {
            Error::Retryable { message, .. } | Error::Permanent { message, .. } => message,
        }
    }

    /// A retryable error without a status code or delay.
    pub(crate) fn transient(message: impl Into<String>) -> Self {
        Error::Retryable {
            after: None,
            status_code: None,
            message: message.into(),
        }
    }

    /// A permanent error without a status code.
    pub(crate) fn permanent(message: impl Into<String>) -> Self {
        Error::Permanent {
            status_code: None,
            message: message.into(),
        }
    }
}

/// Something an attempt can run.
#[async_trait]
pub trait Target: Send + Sync {
    /// Delivers once.
    ///
    /// # Errors
    /// [`Error::Retryable`] or [`Error::Permanent`] per the module's classification table.
    ///
    /// # Cancel safety
    /// Dropping the future abandons the delivery; whether the receiver saw it is unknown.
    async fn dispatch(&self, delivery: &Delivery<'_>) -> Result<Outcome, Error>;
}

/// The type of a named connection (`type` in `[connections.NAME]`, docs/configuration.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ConnectionKind {
    /// NATS with JetStream: `nats://` or `tls://` URL.
    Nats,
    /// An AMQP 0-9-1 broker (RabbitMQ): `amqp://` (`amqps://` is not built in).
    Amqp,
    /// Redis: `redis://` or `rediss://` URL (TLS is not built in).
    Redis,
    /// A Docker Engine API endpoint (Docker or Podman): `unix://`, `http://` or `tcp://`.
    Container,
}

impl ConnectionKind {
    /// Every kind, in the order the config documents them.
    pub const ALL: [ConnectionKind; 4] = [
        ConnectionKind::Nats,
        ConnectionKind::Amqp,
        ConnectionKind::Redis,
        ConnectionKind::Container,
    ];

    /// The config's spelling: `nats`, `amqp`, `redis`, `container`; also the target `type`
    /// that uses a connection of this kind.
    pub fn as_str(self) -> &'static str {
        match self {
            ConnectionKind::Nats => "nats",
            ConnectionKind::Amqp => "amqp",
            ConnectionKind::Redis => "redis",
            ConnectionKind::Container => "container",
        }
    }

    /// The URL schemes a connection of this kind accepts, with `://`.
    pub fn schemes(self) -> &'static [&'static str] {
        match self {
            ConnectionKind::Nats => &["nats://", "tls://"],
            ConnectionKind::Amqp => &["amqp://", "amqps://"],
            ConnectionKind::Redis => &["redis://", "rediss://"],
            ConnectionKind::Container => &["unix://", "http://", "tcp://"],
        }
    }

    /// True when `url` starts with one of [`ConnectionKind::schemes`].
    pub fn accepts_url(self, url: &str) -> bool {
        self.schemes().iter().any(|s| url.starts_with(s))
    }
}

impl fmt::Display for ConnectionKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for ConnectionKind {
    type Err = String;

    /// Parses the config's spelling.
    ///
    /// # Errors
    /// A message listing the known kinds.
    fn from_str(s: &str) -> Result<Self, String> {
        ConnectionKind::ALL
            .into_iter()
            .find(|k| k.as_str() == s)
            .ok_or_else(|| format!("'{s}' is not one of nats, amqp, redis, container"))
    }
}

/// A named connection's definition: its kind and URL (credentials may be in the URL).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoint {
    /// What is at the other end.
    pub kind: ConnectionKind,
    /// Where it is; see [`ConnectionKind::schemes`].
    pub url: String,
}

/// A named connection that could not be established by [`Targets::connect`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("connections.{name}: cannot connect to {kind} at {url}: {reason}")]
pub struct ConnectError {
    /// The connection's name in the config.
    pub name: String,
    /// Its type.
    pub kind: ConnectionKind,
    /// Its URL with any password replaced by `***`.
    pub url: String,
    /// What went wrong, with the driver's error chain.
    pub reason: String,
}

/// How long [`Targets::connect`] waits for each connection by default.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// One shared client per named connection.
#[derive(Debug, Clone)]
enum Client {
    Nats(NatsTarget),
    Amqp(AmqpTarget),
    Redis(RedisTarget),
    Container(ContainerTarget),
}

impl Client {
    fn kind(&self) -> ConnectionKind {
        match self {
            Client::Nats(_) => ConnectionKind::Nats,
            Client::Amqp(_) => ConnectionKind::Amqp,
            Client::Redis(_) => ConnectionKind::Redis,
            Client::Container(_) => ConnectionKind::Container,
        }
    }

    fn target(&self) -> &dyn Target {
        match self {
            Client::Nats(t) => t,
            Client::Amqp(t) => t,
            Client::Redis(t) => t,
            Client::Container(t) => t,
        }
    }
}

/// Every target this server runs, chosen by the delivery's target type and, for queue and
/// container targets, by the named connection the target names.
#[derive(Debug, Clone)]
pub struct Targets {
    http: HttpTarget,
    connections: Arc<BTreeMap<String, Client>>,
    signer: signing::Signer,
}

impl Targets {
    /// The targets of a server without named connections: HTTP only; every queue or
    /// container delivery fails permanently (its connection is not configured).
    ///
    /// # Errors
    /// When the HTTP client cannot be built (no TLS backend).
    pub fn new() -> Result<Self, reqwest::Error> {
        Ok(Targets {
            http: HttpTarget::new()?,
            connections: Arc::default(),
            signer: signing::Signer::default(),
        })
    }

    /// The targets of a worker process: HTTP (reaching only the hosts `http.allow` allows,
    /// any host when `None`, at most `http.max_connections_per_host` requests to a host at
    /// once; see [`HttpTarget`]), and one shared client per named connection,
    /// each connected now (concurrently, each within `timeout`; a container engine is
    /// pinged and its API version negotiated).
    ///
    /// A broker that goes away later is not fatal: the clients reconnect, and deliveries
    /// meanwhile fail as transient.
    ///
    /// # Errors
    /// The first connection (by name) that could not be established, as a [`ConnectError`]
    /// naming `connections.NAME`; or the HTTP client failing to build, reported under the
    /// name `http`.
    pub async fn connect(
        endpoints: &BTreeMap<String, Endpoint>,
        http: HttpOptions,
        timeout: Duration,
    ) -> Result<Self, ConnectError> {
        let http = HttpTarget::with_options(http).map_err(|e| ConnectError {
            name: "http".into(),
            kind: ConnectionKind::Container,
            url: String::new(),
            reason: error_chain(&e),
        })?;
        let attempts = endpoints.iter().map(|(name, ep)| async move {
            let connecting = async {
                Ok::<_, BoxError>(match ep.kind {
                    ConnectionKind::Nats => Client::Nats(NatsTarget::connect(&ep.url).await?),
                    ConnectionKind::Amqp => Client::Amqp(AmqpTarget::connect(&ep.url).await?),
                    ConnectionKind::Redis => Client::Redis(RedisTarget::connect(&ep.url).await?),
                    ConnectionKind::Container => {
                        Client::Container(ContainerTarget::connect(&ep.url).await?)
                    }
                })
            };
            let result = match tokio::time::timeout(timeout, connecting).await {
                Ok(Ok(client)) => Ok(client),
                Ok(Err(e)) => Err(error_chain(&*e)),
                Err(_) => Err(format!("no answer within {}s", timeout.as_secs_f64())),
            };
            result
                .map(|client| (name.clone(), client))
                .map_err(|reason| ConnectError {
                    name: name.clone(),
                    kind: ep.kind,
                    url: redact(&ep.url),
                    reason,
                })
        });
        let mut connections = BTreeMap::new();
        for result in futures_util::future::join_all(attempts).await {
            let (name, client) = result?;
            connections.insert(name, client);
        }
        Ok(Targets {
            http,
            connections: Arc::new(connections),
            signer: signing::Signer::default(),
        })
    }

    /// These targets signing every delivery of a namespace that `signer` has keys for
    /// (docs/security.md, "Signed deliveries"): HTTP, NATS, AMQP and Redis; containers are not
    /// signed.
    pub fn with_signer(mut self, signer: signing::Signer) -> Self {
        self.signer = signer;
        self
    }

    /// The names of the connections this value holds, in order.
    pub fn connection_names(&self) -> impl Iterator<Item = &str> {
        self.connections.keys().map(String::as_str)
    }
}

#[async_trait]
impl Target for Targets {
    async fn dispatch(&self, delivery: &Delivery<'_>) -> Result<Outcome, Error> {
        if !self.signer.is_empty()
            && delivery.signature.is_none()
            && let Some(body) = signing::signed_body(delivery.target)
            && let Some(signature) = self.signer.sign(
                delivery.namespace,
                delivery.execution_id,
                delivery.now,
                &body,
                delivery.lease_until.map(|until| (delivery.attempt, until)),
            )
        {
            let signed = Delivery {
                signature: Some(&signature),
                ..delivery.clone()
            };
            return self.route(&signed).await;
        }
        self.route(delivery).await
    }
}

impl Targets {
    /// Hands `delivery` to the target its type and connection name.
    async fn route(&self, delivery: &Delivery<'_>) -> Result<Outcome, Error> {
        let spec = delivery.target;
        let Some(name) = spec.connection() else {
            return self.http.dispatch(delivery).await;
        };
        let Some(client) = self.connections.get(name) else {
            return Err(Error::permanent(format!(
                "connection '{name}' for {} targets is not configured on this worker",
                spec.kind()
            )));
        };
        if client.kind().as_str() != spec.kind() {
            return Err(Error::permanent(format!(
                "connection '{name}' is of type {} on this worker, not {}",
                client.kind(),
                spec.kind()
            )));
        }
        client.target().dispatch(delivery).await
    }
}

/// The W3C `traceparent` of one delivery: the execution's trace, the attempt's span
/// (docs/operations.md#traces).
pub use sundial_trace::traceparent;

/// A boxed driver error.
pub(crate) type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// An error and its sources, joined with `: `, without repeating a source whose text the
/// previous message already contains.
pub(crate) fn error_chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        let part = s.to_string();
        if !text.contains(&part) {
            text.push_str(": ");
            text.push_str(&part);
        }
        source = s.source();
    }
    text
}

/// A URL with any password replaced by `***`, for messages and logs.
pub fn redact(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(scheme), Some(at)) if at > scheme => {
            let userinfo = &url[scheme + 3..at];
            match userinfo.split_once(':') {
                Some((user, _)) => format!("{}{user}:***{}", &url[..scheme + 3], &url[at..]),
                None => url.to_owned(),
            }
        }
        _ => url.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sundial_core::job::{NatsTarget as NatsSpec, RedisTarget as RedisSpec};

    fn delivery(target: &TargetSpec) -> Delivery<'_> {
        Delivery {
            execution_id: "0193a5c4-0000-7000-8000-000000000001",
            namespace: "default",
            attempt: 1,
            lease_until: None,
            signature: None,
            scheduled_at: Timestamp::UNIX_EPOCH,
            now: Timestamp::UNIX_EPOCH,
            target,
            keep_output: false,
        }
    }

    #[test]
    fn connection_kinds_parse_and_check_their_url_schemes() {
        for kind in ConnectionKind::ALL {
            assert_eq!(kind.as_str().parse::<ConnectionKind>(), Ok(kind));
            assert!(kind.accepts_url(&format!("{}x", kind.schemes()[0])));
        }
        assert!("kafka".parse::<ConnectionKind>().is_err());
        assert!(!ConnectionKind::Redis.accepts_url("nats://127.0.0.1:4222"));
        assert!(ConnectionKind::Container.accepts_url("unix:///tmp/podman.sock"));
    }

    #[test]
    fn redact_hides_passwords_only() {
        assert_eq!(
            redact("amqp://guest:secret@127.0.0.1:5672/%2f"),
            "amqp://guest:***@127.0.0.1:5672/%2f"
        );
        assert_eq!(redact("redis://127.0.0.1:6379"), "redis://127.0.0.1:6379");
    }

    #[tokio::test]
    async fn a_connection_removed_from_the_config_fails_for_good() {
        let targets = Targets::connect(
            &BTreeMap::new(),
            HttpOptions::default(),
            DEFAULT_CONNECT_TIMEOUT,
        )
        .await
        .unwrap();
        let spec = TargetSpec::Nats(NatsSpec {
            connection: "events".into(),
            subject: "a.b".into(),
            payload: String::new(),
            headers: BTreeMap::new(),
        });
        let e = targets.dispatch(&delivery(&spec)).await.unwrap_err();
        assert!(!e.is_retryable(), "{e:?}");
        assert!(e.message().contains("'events'"), "{e}");
    }

    #[tokio::test]
    async fn a_connection_now_of_another_type_fails_for_good() {
        let container = ContainerTarget::for_tests("unix:///nonexistent/docker.sock");
        let targets = Targets {
            http: HttpTarget::new().unwrap(),
            connections: Arc::new(BTreeMap::from([(
                "cache".to_owned(),
                Client::Container(container),
            )])),
            signer: signing::Signer::default(),
        };
        let spec = TargetSpec::Redis(RedisSpec {
            connection: "cache".into(),
            stream: "s".into(),
            fields: BTreeMap::new(),
        });
        let e = targets.dispatch(&delivery(&spec)).await.unwrap_err();
        assert!(!e.is_retryable(), "{e:?}");
        assert!(e.message().contains("of type container"), "{e}");
    }

    #[tokio::test]
    async fn a_connection_that_cannot_be_established_names_itself() {
        let endpoints = BTreeMap::from([(
            "cache".to_owned(),
            Endpoint {
                kind: ConnectionKind::Redis,
                // Port 1 on loopback: nothing listens there.
                url: "redis://user:pw@127.0.0.1:1".into(),
            },
        )]);
        let e = Targets::connect(&endpoints, HttpOptions::default(), Duration::from_secs(5))
            .await
            .unwrap_err();
        assert_eq!(e.name, "cache");
        let text = e.to_string();
        assert!(
            text.starts_with(
                "connections.cache: cannot connect to redis at redis://user:***@127.0.0.1:1: "
            ),
            "{text}"
        );
    }
}
