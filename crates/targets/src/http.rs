//! The HTTP target (docs/failure-classes.md, "http"): one request per attempt, idempotency
//! headers, classified status.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use http_body::Body;
use http_body_util::{BodyExt, Full};
use jiff::Timestamp;
use reqwest::header::{
    ACCEPT, CONTENT_LENGTH, HOST, HeaderMap, HeaderName, HeaderValue, RETRY_AFTER, USER_AGENT,
};
use sundial_core::Dur;
use sundial_core::allow::{HostAllowList, Verdict};
use sundial_core::job::TargetSpec;
use sundial_core::validate::SUNDIAL_HEADERS;
use sundial_core::workflow::MAX_OUTPUT_BYTES;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::{Delivery, Error, Outcome, Target};

mod direct;
mod response;

#[cfg(test)]
use response::one_line;
use response::{body_snippet, retry_after};

/// The `User-Agent` a request says when its job's headers do not.
const SUNDIAL_USER_AGENT: &str = concat!("sundial/", env!("CARGO_PKG_VERSION"));

/// How a response status counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StatusClass {
    /// The attempt succeeded.
    Success,
    /// Retry: 408 Request Timeout, 425 Too Early, 429 Too Many Requests, any 5xx.
    Transient,
    /// Do not retry: every other status.
    Permanent,
}

/// Classifies an HTTP status. `success_codes`, when not empty, replaces "any 2xx" as success.
pub fn classify_http_status(status: u16, success_codes: &[u16]) -> StatusClass {
    let success = if success_codes.is_empty() {
        (200..300).contains(&status)
    } else {
        success_codes.contains(&status)
    };
    match status {
        _ if success => StatusClass::Success,
        408 | 425 | 429 | 500..=599 => StatusClass::Transient,
        _ => StatusClass::Permanent,
    }
}

/// Most target URLs an [`HttpTarget`] keeps parsed: 16,384. When a new URL would exceed it,
/// the whole set is dropped and refilled from the URLs in use; a set smaller than the URLs in
/// use only costs (a bench of 5,000 jobs, one URL each, parsed every URL again at 4,096).
pub const PARSED_URLS: usize = 16_384;

/// Longest target URL, in bytes, that an [`HttpTarget`] keeps parsed (512): with
/// [`PARSED_URLS`] it bounds the set at about 16 MiB whatever the URLs; a longer URL is
/// parsed for each attempt.
pub const PARSED_URL_MAX_LEN: usize = 512;

/// Requests one [`HttpTarget`] has in flight to one host at once by default, and so the
/// connections it keeps open to it (128): the `[http_targets] max_connections_per_host`
/// setting's default (docs/configuration.md).
///
/// HTTP/1.1 carries one exchange at a time on a connection, so without a cap a burst opens
/// as many connections to its receiver as attempts are in flight (`max_in_flight`, 1,024 by
/// default). Measured with `examples/delivery_ceiling.rs` (BENCHMARKS.md, "The delivery
/// ceiling"): 100,000 attempts into one loopback receiver ran at 29,000–37,000/s with 64 at
/// once against 22,000–29,000/s with 1,024, and a 10,000-slot burst in `sundial bench` had its
/// lag p99 cut by a quarter to a third with this limit, on both stores; a receiver spends less
/// on fewer connections too. It is the per-host limit Go's `MaxConnsPerHost`, Apache HttpClient's
/// per-route maximum and .NET's `MaxConnectionsPerServer` give.
pub const DEFAULT_MAX_CONNECTIONS_PER_HOST: usize = 128;

/// How an [`HttpTarget`] reaches hosts: `[http_targets]` (docs/configuration.md).
#[derive(Debug, Clone)]
pub struct HttpOptions {
    /// Hosts requests may go to (`allow`); `None`: any host.
    pub allow: Option<Arc<HostAllowList>>,
    /// Most requests in flight to one host (scheme, host and port) at once, and most
    /// connections kept open to it; an attempt past it waits, within its timeout, for one to
    /// finish. At least 1.
    pub max_connections_per_host: usize,
}

impl Default for HttpOptions {
    fn default() -> Self {
        HttpOptions {
            allow: None,
            max_connections_per_host: DEFAULT_MAX_CONNECTIONS_PER_HOST,
        }
    }
}

/// The HTTP target: redirects are not followed (a 3xx is the receiver's answer, and following
/// it could leave the configured host). A POST, PUT or PATCH without a body says
/// `Content-Length: 0`; a successful response's body is read off the attempt's path so that
/// its connection is reused (`DRAINED_BODY_MAX`).
///
/// Two ways to send: a plain `http://` URL without credentials, when the environment names no
/// proxy (or an allow list is set), goes on an HTTP/1.1 connection that the attempt's own task
/// drives (`http/direct.rs`: 1.2–1.7× the attempts a second of the pooled client in
/// `examples/delivery_ceiling.rs`, BENCHMARKS.md, "A client that drives its own
/// connections"); `https://`, credentials in the URL and proxies go through a pooled client
/// (reqwest), which has TLS, `Authorization: Basic` and the proxy rules. Both give a
/// connection 10 s to open (the name's resolution included) and close one idle for 30 s (the
/// direct path within 5 s more, at its next sweep).
///
/// Target URLs are parsed once and kept (up to `PARSED_URLS`): a job's every attempt goes to
/// the same URL, and parsing it (with the host's IDNA processing, UTS #46) was a sixth of
/// the client's CPU per request in a profile of `sundial bench steady` (BENCHMARKS.md).
///
/// At most `max_connections_per_host` requests to one host are in flight at once
/// ([`HttpOptions`]); an attempt past it waits its turn (first come, first served), and the
/// wait counts in its timeout. A request holds its place until its response's body has been
/// read, and a direct connection is back in its host's idle list before the place is given
/// up, so no more connections than the limit are open to a host. The pooled client takes a
/// connection back a moment after the body's end (hyper-util returns it from a task of its
/// own), so there a request sent in that moment can open one beyond the limit; that pool
/// keeps no more than the limit idle, so what stays open is bounded by it.
///
/// With an `[http_targets] allow` list, a request goes only to a host the list allows: by
/// name, or by address, in which case the client connects only to the resolved addresses
/// the list holds (resolution goes through [`AllowedAddresses`] or the same rule on the
/// direct path). A refused host fails the attempt as permanent. With a list, proxies named in
/// the environment (`HTTP_PROXY`, `HTTPS_PROXY`, `ALL_PROXY`) are not used: a proxy would
/// resolve and reach the host itself, past the list.
#[derive(Debug, Clone)]
pub struct HttpTarget {
    client: reqwest::Client,
    known: Arc<Mutex<Known>>,
    per_host: usize,
    allow: Option<Arc<HostAllowList>>,
    /// Plain `http://` URLs without credentials go through [`direct`]: false when the
    /// environment names a proxy the pooled client would use.
    direct: bool,
    /// Whether the task running [`direct::Idle::sweep`] over the hosts was started (by the
    /// first direct request: a runtime is running then).
    sweeping: Arc<AtomicBool>,
}

/// The parsed URLs an [`HttpTarget`] keeps, each with its host, and the hosts themselves.
#[derive(Debug, Default)]
struct Known {
    urls: HashMap<String, (reqwest::Url, Arc<Host>)>,
    /// By origin (`scheme://host:port`).
    hosts: HashMap<String, Arc<Host>>,
}

/// One origin's requests in flight and its idle direct connections.
#[derive(Debug)]
struct Host {
    /// A place per request in flight, `max_connections_per_host` in all.
    slots: Arc<Semaphore>,
    idle: Arc<direct::Idle>,
}

/// Environment variables naming a proxy that the pooled client uses for `http://` URLs.
const PROXY_VARIABLES: [&str; 4] = ["HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy"];

impl HttpTarget {
    /// A target with its own client, reaching any host.
    ///
    /// # Errors
    /// When the TLS backend cannot be initialised.
    pub fn new() -> Result<Self, reqwest::Error> {
        HttpTarget::with_options(HttpOptions::default())
    }

    /// A target with its own client, reaching only the hosts `options.allow` allows (any host
    /// when `None`), at most `options.max_connections_per_host` requests to a host at once (1
    /// when given 0).
    ///
    /// # Errors
    /// When the TLS backend cannot be initialised.
    pub fn with_options(options: HttpOptions) -> Result<Self, reqwest::Error> {
        let HttpOptions {
            allow,
            max_connections_per_host,
        } = options;
        let per_host = max_connections_per_host.max(1);
        let mut builder = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .connect_timeout(Duration::from_secs(10))
            .pool_idle_timeout(Duration::from_secs(30))
            // The pool hands a connection back a moment after its response's body has been
            // read, so a request sent in that moment may open one more; this keeps what
            // stays open to the limit.
            .pool_max_idle_per_host(per_host)
            .user_agent(SUNDIAL_USER_AGENT);
        if let Some(list) = &allow {
            builder = builder
                .no_proxy()
                .dns_resolver(Arc::new(AllowedAddresses(list.clone())));
        }
        // With an allow list the pooled client uses no proxy either.
        let proxied = allow.is_none()
            && PROXY_VARIABLES
                .iter()
                .any(|v| std::env::var_os(v).is_some_and(|v| !v.is_empty()));
        Ok(HttpTarget {
            client: builder.build()?,
            known: Arc::default(),
            per_host,
            allow,
            direct: !proxied,
            sweeping: Arc::default(),
        })
    }

    /// Starts, once, the task that closes the expired and receiver-closed idle connections
    /// of every host every [`direct::SWEEP_EVERY`]; it ends when the last clone of the
    /// target is dropped.
    fn start_sweeping(&self) {
        if self.sweeping.swap(true, Ordering::Relaxed) {
            return;
        }
        let known = Arc::downgrade(&self.known);
        tokio::spawn(async move {
            let mut every = tokio::time::interval(direct::SWEEP_EVERY);
            every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                every.tick().await;
                let Some(known) = known.upgrade() else { return };
                let hosts: Vec<Arc<Host>> = known
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .hosts
                    .values()
                    .cloned()
                    .collect();
                drop(known);
                for host in hosts {
                    host.idle.sweep();
                }
            }
        });
    }

    /// `url` parsed, with its host; from the set of parsed URLs when it is there.
    ///
    /// # Errors
    /// The URL parser's message when `url` is not an absolute URL (validation accepts only
    /// `http://` and `https://` URLs, so a stored job does not get here).
    fn parsed(&self, url: &str) -> Result<(reqwest::Url, Arc<Host>), String> {
        // A poisoned lock only means another dispatch panicked mid-insert; the maps are whole.
        let mut known = self.known.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(parsed) = known.urls.get(url) {
            return Ok(parsed.clone());
        }
        let parsed = reqwest::Url::parse(url).map_err(|e| format!("bad url {url}: {e}"))?;
        let origin = format!(
            "{}://{}:{}",
            parsed.scheme(),
            parsed.host_str().unwrap_or_default(),
            parsed.port_or_known_default().unwrap_or_default()
        );
        if known.hosts.len() >= PARSED_URLS {
            // Forget the hosts with nothing in flight; one in use keeps its count, or a new
            // one would let a second set of requests past the limit beside it. The parsed
            // URLs go too: a URL kept with a forgotten host's count would count apart from
            // the host's new one.
            let per_host = self.per_host;
            known
                .hosts
                .retain(|_, host| host.slots.available_permits() < per_host);
            known.urls.clear();
        }
        let host = known
            .hosts
            .entry(origin)
            .or_insert_with(|| {
                Arc::new(Host {
                    slots: Arc::new(Semaphore::new(self.per_host)),
                    idle: Arc::default(),
                })
            })
            .clone();
        if url.len() <= PARSED_URL_MAX_LEN {
            if known.urls.len() >= PARSED_URLS {
                known.urls.clear();
            }
            known
                .urls
                .insert(url.to_owned(), (parsed.clone(), host.clone()));
        }
        Ok((parsed, host))
    }
}

#[async_trait]
impl Target for HttpTarget {
    async fn dispatch(&self, d: &Delivery<'_>) -> Result<Outcome, Error> {
        let TargetSpec::Http(spec) = d.target else {
            return Err(Error::Permanent {
                status_code: None,
                message: format!("not an http target: {}", d.target.kind()),
            });
        };
        let permanent = |message: String| Error::Permanent {
            status_code: None,
            message,
        };
        let method = reqwest::Method::from_bytes(spec.method.as_bytes())
            .map_err(|_| permanent(format!("bad method {}", spec.method)))?;
        let (url, host) = self.parsed(&spec.url).map_err(permanent)?;
        if let Some(allow) = &self.allow {
            let host = url.host_str().unwrap_or_default();
            if allow.judge(host) == Verdict::Refused {
                return Err(permanent(format!(
                    "host '{host}' is not in the [http_targets] allow list ({})",
                    allow.describe()
                )));
            }
        }
        let mut headers = HeaderMap::with_capacity(spec.headers.len() + 4);
        for (k, v) in &spec.headers {
            let name = HeaderName::from_bytes(k.as_bytes())
                .map_err(|_| permanent(format!("bad header name {k}")))?;
            let value = HeaderValue::from_str(v)
                .map_err(|_| permanent(format!("bad value for header {k}")))?;
            headers.insert(name, value);
        }
        let id = HeaderValue::from_str(d.execution_id)
            .map_err(|_| permanent("bad execution id".into()))?;
        // The names validation keeps jobs from setting themselves.
        let [idempotency_key, execution_id, attempt, scheduled_at] = SUNDIAL_HEADERS;
        headers.insert(idempotency_key, id.clone());
        headers.insert(execution_id, id);
        headers.insert(attempt, HeaderValue::from(d.attempt));
        if let Ok(v) = HeaderValue::from_str(&d.scheduled_at.to_string()) {
            headers.insert(scheduled_at, v);
        }
        if let Ok(v) = HeaderValue::from_str(&crate::traceparent(d.execution_id, d.attempt)) {
            headers.insert("traceparent", v);
        }
        if let Some(signature) = d.signature {
            for (name, value) in signature.headers() {
                let value = HeaderValue::from_str(&value)
                    .map_err(|_| permanent(format!("bad value for header {name}")))?;
                headers.insert(name, value);
            }
        }
        // RFC 9110 §8.6: a request whose method gives content a meaning says how long it is;
        // some servers answer 411 Length Required to a POST without Content-Length.
        match &spec.body {
            Some(body) => {
                headers.insert(CONTENT_LENGTH, HeaderValue::from(body.len()));
            }
            None if matches!(spec.method.as_str(), "POST" | "PUT" | "PATCH") => {
                headers.insert(CONTENT_LENGTH, HeaderValue::from(0));
            }
            None => {}
        }
        let body = spec.body.clone().map(Bytes::from);
        // Nothing closes a host's semaphore; the error arm only keeps this from panicking.
        let place = host
            .slots
            .clone()
            .acquire_owned()
            .await
            .map_err(|_| Error::Retryable {
                after: None,
                status_code: None,
                message: "the HTTP client is shutting down".into(),
            })?;
        let credentials = !url.username().is_empty() || url.password().is_some();
        if self.direct && url.scheme() == "http" && !credentials {
            let (Some(name), Some(port)) = (url.host(), url.port_or_known_default()) else {
                return Err(permanent(format!("bad url {}: no host", spec.url)));
            };
            let authority = match url.port() {
                Some(port) => format!("{name}:{port}"),
                None => name.to_string(),
            };
            let authority = HeaderValue::from_str(&authority)
                .map_err(|_| permanent(format!("bad url {}: host", spec.url)))?;
            headers.entry(HOST).or_insert(authority);
            headers
                .entry(USER_AGENT)
                .or_insert(HeaderValue::from_static(SUNDIAL_USER_AGENT));
            // As the pooled client says by default.
            headers
                .entry(ACCEPT)
                .or_insert(HeaderValue::from_static("*/*"));
            self.start_sweeping();
            let path = &url[url::Position::BeforePath..url::Position::AfterQuery];
            let mut request = http::Request::new(Full::new(body.unwrap_or_default()));
            *request.method_mut() = method;
            *request.uri_mut() = http::Uri::try_from(path)
                .map_err(|e| permanent(format!("bad url {}: {e}", spec.url)))?;
            *request.headers_mut() = headers;
            let response = direct::send(&host.idle, &name, port, self.allow.as_deref(), request)
                .await
                .map_err(|e| match e {
                    direct::Failure::NotAllowed(e) => permanent(e.to_string()),
                    other => Error::Retryable {
                        after: None,
                        status_code: None,
                        message: other.to_string(),
                    },
                })?;
            return answer(response, place, &spec.success_codes, d).await;
        }
        // The builder moves credentials in the URL (`http://user:pass@host/`) into an
        // `Authorization: Basic` header and out of the URL, so they reach the receiver and
        // stay out of error messages.
        let mut request = self.client.request(method, url).headers(headers);
        if let Some(body) = body {
            request = request.body(body);
        }
        let response = request.send().await.map_err(|e| {
            let message = describe_send_error(&e);
            if source_is::<AddressNotAllowed>(&e) {
                permanent(message)
            } else {
                Error::Retryable {
                    after: None,
                    status_code: None,
                    message,
                }
            }
        })?;
        answer(response.into(), place, &spec.success_codes, d).await
    }
}

/// What an attempt's outcome is, from its response: the status classified by
/// `success_codes` (docs/failure-classes.md, "http"), the output when the delivery keeps it,
/// the body's first characters and `Retry-After` on a failure. `place` is the request's place
/// among its host's requests in flight: it is given up once the body has been read (and a
/// direct connection is back in its host's idle list), off the attempt's path for a success
/// whose body is not kept.
async fn answer<B>(
    response: http::Response<B>,
    place: OwnedSemaphorePermit,
    success_codes: &[u16],
    d: &Delivery<'_>,
) -> Result<Outcome, Error>
where
    B: Body<Data = Bytes> + Send + Unpin + 'static,
    B::Error: std::error::Error,
{
    let status = response.status();
    let code = Some(i64::from(status.as_u16()));
    match classify_http_status(status.as_u16(), success_codes) {
        StatusClass::Success if d.keep_output => {
            let output = read_output(response.into_body(), code).await;
            drop(place);
            Ok(Outcome {
                status_code: code,
                detail: None,
                output: Some(output?),
            })
        }
        StatusClass::Success => {
            let body = response.into_body();
            if body.is_end_stream() {
                // The connection goes back before the place does, so the next request to
                // the host finds it.
                drop(body);
                drop(place);
            } else {
                tokio::spawn(drain(body, place));
            }
            Ok(Outcome {
                status_code: code,
                detail: None,
                output: None,
            })
        }
        class => {
            let after = retry_after(response.headers(), d.now);
            let snippet = body_snippet(response.into_body()).await;
            drop(place);
            let message = format!("HTTP {status}{snippet}");
            Err(if class == StatusClass::Transient {
                Error::Retryable {
                    after,
                    status_code: code,
                    message,
                }
            } else {
                Error::Permanent {
                    status_code: code,
                    message,
                }
            })
        }
    }
}

/// Resolves host names for an [`HttpTarget`] with an allow list: every address of a name a
/// name pattern allows, and otherwise only the addresses an address pattern holds; a name
/// left with none fails with [`AddressNotAllowed`]. The client connects to what this
/// returns, so the addresses checked are the ones connected to (no second lookup that DNS
/// could answer differently).
#[derive(Debug)]
pub struct AllowedAddresses(Arc<HostAllowList>);

/// No resolved address of a host is in the `[http_targets] allow` list.
#[derive(Debug, thiserror::Error)]
#[error(
    "no address of '{host}' is in the [http_targets] allow list ({allowed}); it resolves to {resolved}"
)]
pub struct AddressNotAllowed {
    host: String,
    allowed: String,
    resolved: String,
}

impl reqwest::dns::Resolve for AllowedAddresses {
    fn resolve(&self, name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        let allow = self.0.clone();
        Box::pin(async move {
            match allowed_addresses(&allow, name.as_str(), 0).await {
                Ok(addrs) => Ok(Box::new(addrs.into_iter()) as reqwest::dns::Addrs),
                Err(Resolved::NotAllowed(e)) => {
                    Err(Box::new(e) as Box<dyn std::error::Error + Send + Sync>)
                }
                Err(Resolved::Failed(e)) => {
                    Err(Box::new(e) as Box<dyn std::error::Error + Send + Sync>)
                }
            }
        })
    }
}

/// Why [`allowed_addresses`] gave no address.
enum Resolved {
    /// The host has addresses, none of them allowed.
    NotAllowed(AddressNotAllowed),
    /// The lookup failed.
    Failed(std::io::Error),
}

/// The addresses (with `port`) of `host` that `allow` lets a request reach: every address of
/// a name a name pattern allows, and otherwise only the addresses an address pattern holds.
///
/// # Errors
/// [`Resolved::NotAllowed`] when none is left; [`Resolved::Failed`] when the lookup fails.
async fn allowed_addresses(
    allow: &HostAllowList,
    host: &str,
    port: u16,
) -> Result<Vec<std::net::SocketAddr>, Resolved> {
    let all: Vec<std::net::SocketAddr> = tokio::net::lookup_host((host, port))
        .await
        .map_err(Resolved::Failed)?
        .collect();
    if allow.allows_name(host) {
        return Ok(all);
    }
    let kept: Vec<_> = all
        .iter()
        .copied()
        .filter(|a| allow.allows_ip(a.ip()))
        .collect();
    if kept.is_empty() {
        let resolved: Vec<String> = all.iter().map(|a| a.ip().to_string()).collect();
        return Err(Resolved::NotAllowed(AddressNotAllowed {
            host: host.to_owned(),
            allowed: allow.describe(),
            resolved: resolved.join(", "),
        }));
    }
    Ok(kept)
}

/// Most bytes of a successful response's body read and dropped (1 MiB), so that its
/// connection can carry a later request: HTTP/1.1 reuses a connection only once the message
/// before has been read to its end (RFC 9112 §9.3). Past it, the connection is closed.
pub const DRAINED_BODY_MAX: usize = 1 << 20;

/// Longest time a successful response's body is read for reuse of its connection (10 s).
pub const DRAIN_TIMEOUT: Duration = Duration::from_secs(10);

/// Reads a successful response's body to its end, up to [`DRAINED_BODY_MAX`] bytes and
/// [`DRAIN_TIMEOUT`], off the attempt's path: the attempt's outcome is its status, and a body
/// that trickles must not turn a success into a timeout.
/// `place` is the request's place among its host's requests in flight, given up once the
/// connection is back in the pool.
async fn drain<B>(mut body: B, place: OwnedSemaphorePermit)
where
    B: Body<Data = Bytes> + Unpin,
{
    let reading = read_up_to(&mut body, DRAINED_BODY_MAX);
    let _ = tokio::time::timeout(DRAIN_TIMEOUT, reading).await;
    drop(body);
    drop(place);
}

/// Reads `body` until its end or until more than `max` bytes have come, whichever is first;
/// returns what was read (more than `max` bytes when the body is longer).
///
/// # Errors
/// The body's error when reading it fails.
async fn read_up_to<B>(body: &mut B, max: usize) -> Result<Vec<u8>, B::Error>
where
    B: Body<Data = Bytes> + Unpin,
{
    let mut read = Vec::new();
    while read.len() <= max {
        match body.frame().await {
            Some(Ok(frame)) => {
                if let Ok(data) = frame.into_data() {
                    read.extend_from_slice(&data);
                }
            }
            Some(Err(e)) => return Err(e),
            None => break,
        }
    }
    Ok(read)
}

/// Reads a successful response's body as a task's output (docs/workflows.md, "Outputs"): a
/// JSON value of at most [`MAX_OUTPUT_BYTES`]. A larger body, or one that is not JSON, fails
/// the attempt for good, saying why; a body cut off on the way is a transient failure.
async fn read_output<B>(mut body: B, code: Option<i64>) -> Result<String, Error>
where
    B: Body<Data = Bytes> + Unpin,
    B::Error: std::error::Error,
{
    let body = read_up_to(&mut body, MAX_OUTPUT_BYTES)
        .await
        .map_err(|e| Error::Retryable {
            after: None,
            status_code: code,
            message: format!("reading the response body: {}", chain(&e)),
        })?;
    if body.len() > MAX_OUTPUT_BYTES {
        return Err(Error::Permanent {
            status_code: code,
            message: format!(
                "output: the response body is larger than {MAX_OUTPUT_BYTES} bytes, the most a task keeps"
            ),
        });
    }
    match serde_json::from_slice::<serde_json::Value>(&body) {
        Ok(value) => Ok(value.to_string()),
        Err(e) => Err(Error::Permanent {
            status_code: code,
            message: format!("output: the response body is not JSON ({e})"),
        }),
    }
}

/// Whether `e` or any error in its chain of sources is an `E`.
fn source_is<E: std::error::Error + 'static>(e: &(dyn std::error::Error + 'static)) -> bool {
    let mut next = Some(e);
    while let Some(err) = next {
        if err.is::<E>() {
            return true;
        }
        next = err.source();
    }
    false
}

fn describe_send_error(e: &reqwest::Error) -> String {
    let kind = if e.is_connect() {
        "connection failed"
    } else if e.is_timeout() {
        "timed out"
    } else {
        "request failed"
    };
    format!("{kind}: {}", chain(e))
}

/// `e` and each error in its chain of sources, joined by ": ".
fn chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        text.push_str(&format!(": {s}"));
        source = s.source();
    }
    text
}

/// Longest a failed response's body is read for the error message (1 s): the status is the
/// outcome, and a body that stalls must not turn it into a timeout.
pub const SNIPPET_TIMEOUT: Duration = Duration::from_secs(1);

#[cfg(test)]
mod tests;
