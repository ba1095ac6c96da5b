//! Plain `http://` exchanges on hyper's HTTP/1.1 connections, each driven by the attempt's own
//! task (docs/configuration.md, `[http_targets]`).
//!
//! A pooled client (reqwest over hyper-util) runs each connection in a task of its own and
//! hands every request to it and the response back over channels: several task wake-ups per
//! exchange, often across threads. Here a connection is taken from its host's idle list by the
//! attempt, which polls the connection beside its request and its response's body, and puts it
//! back once the body has been read to its end. Measured with `examples/delivery_ceiling.rs`
//! (BENCHMARKS.md, "A client that drives its own connections"): 1.2–1.7× the exchanges a
//! second of the pooled client on the same two cores.
//!
//! Invariants:
//! - A connection is in at most one place: an attempt (with its body) or its host's idle list.
//! - A connection goes back to the idle list only after its response's body was read to its
//!   end, so the next request on it starts a new message (RFC 9112 §9.3); a body dropped before
//!   its end closes the connection.
//! - An idle connection is checked before reuse: one that the receiver closed, one not ready
//!   for a request, or one idle longer than [`IDLE_TIMEOUT`], is dropped; [`Idle::sweep`] drops
//!   the closed and the expired ones of every host every [`SWEEP_EVERY`], so a host not used again
//!   keeps no socket open past [`IDLE_TIMEOUT`] and a little. A request that a reused
//!   connection refused before sending any of it is sent again on another connection. One sent
//!   on a reused connection that closed before any of the response came is sent once more on
//!   another (the receiver most likely closed it as idle as the request left; the request
//!   carries its `Idempotency-Key`); any other failure after sending fails the attempt as
//!   transient, and the attempt's retry policy decides.
//! - A connection's future is dropped as soon as it completes (the connection closed), so it
//!   is never polled again, and a request queued on it comes back unsent instead of waiting
//!   for an answer that cannot come.
//! - Name resolution with an allow list goes through [`super::allowed_addresses`], so the
//!   addresses connected to are the ones the list allowed.

use std::future::{Future, poll_fn};
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::client::conn::http1::{self, Connection, SendRequest};
use hyper_util::rt::TokioIo;
use sundial_core::allow::HostAllowList;
use tokio::net::TcpStream;

use super::AddressNotAllowed;

/// Longest a connection stays in its host's idle list before it is closed (30 s), as the
/// pooled client's `pool_idle_timeout`.
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(30);

/// How often [`Idle::sweep`] runs for every host (5 s): it closes the idle connections that
/// expired or that their receiver closed.
pub const SWEEP_EVERY: Duration = Duration::from_secs(5);

/// Longest the name's resolution and the TCP connects to its addresses may take together
/// (10 s), as the pooled client's `connect_timeout`.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// A connection's state machine, which only makes progress while polled.
type Io = Pin<Box<Connection<TokioIo<TcpStream>, Full<Bytes>>>>;

/// One HTTP/1.1 connection: the handle requests go through and the connection's state
/// machine.
pub(super) struct Conn {
    send: SendRequest<Full<Bytes>>,
    /// `None` once the connection's future completed (the connection is closed): dropping it
    /// hands a request still queued on it back unsent.
    io: Option<Io>,
    idle_since: Instant,
}

impl Conn {
    /// Lets the connection make progress; false once it is closed.
    fn poll_io(&mut self, cx: &mut Context<'_>) -> bool {
        if let Some(io) = &mut self.io
            && io.as_mut().poll(cx).is_ready()
        {
            self.io = None;
        }
        self.io.is_some()
    }

    /// Whether the connection is open and takes a request now, after letting it read what
    /// came while it sat idle (its end, when the receiver closed it).
    fn usable(&mut self, cx: &mut Context<'_>) -> bool {
        self.poll_io(cx) && self.send.is_ready()
    }
}

/// A host's connections not in use, most recently used last.
#[derive(Default)]
pub(super) struct Idle(Mutex<Vec<Conn>>);

impl std::fmt::Debug for Idle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let count = self.0.lock().map(|c| c.len()).unwrap_or_default();
        write!(f, "Idle({count} connections)")
    }
}

impl Idle {
    /// A connection ready for a new request, if one is idle: the most recently used that is
    /// [`Conn::usable`] and has not been idle longer than [`IDLE_TIMEOUT`]. The others are
    /// closed on the way.
    fn take(&self, cx: &mut Context<'_>) -> Option<Conn> {
        loop {
            let mut conn = self.lock().pop()?;
            // Outside the lock: polling reads from the socket, and dropping closes it.
            if conn.idle_since.elapsed() < IDLE_TIMEOUT && conn.usable(cx) {
                return Some(conn);
            }
        }
    }

    /// Closes the connections idle longer than [`IDLE_TIMEOUT`] and those the receiver
    /// closed (read with a waker that wakes nothing: nothing waits on an idle connection).
    pub(super) fn sweep(&self) {
        let mut cx = Context::from_waker(std::task::Waker::noop());
        let mut kept = std::mem::take(&mut *self.lock());
        kept.retain_mut(|c| c.idle_since.elapsed() < IDLE_TIMEOUT && c.poll_io(&mut cx));
        // Connections put back meanwhile stay, the most recently used last.
        let mut idle = self.lock();
        kept.append(&mut idle);
        *idle = kept;
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Conn>> {
        // A poisoned lock only means a task panicked while pushing or popping; the list is whole.
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn put(&self, mut conn: Conn) {
        conn.idle_since = Instant::now();
        self.lock().push(conn);
    }

    /// How many connections are idle.
    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.lock().len()
    }
}

/// Why a direct exchange failed.
#[derive(Debug, thiserror::Error)]
pub(super) enum Failure {
    /// Name resolution, the TCP connect or the HTTP handshake failed: nothing was sent.
    #[error("connection failed: {0}")]
    Connect(String),
    /// No resolved address of the host is in the allow list: nothing was sent.
    #[error(transparent)]
    NotAllowed(#[from] AddressNotAllowed),
    /// The exchange failed after the request may have been sent.
    #[error("request failed: {0}")]
    Exchange(String),
}

/// A response's body that keeps its connection going while it is read, and gives the
/// connection back to its host's idle list once read to its end.
pub(super) struct Driven {
    body: Incoming,
    conn: Option<Conn>,
    idle: Arc<Idle>,
    /// The body gave its last frame (an empty one says so from the start).
    ended: bool,
}

impl Body for Driven {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        let this = &mut *self;
        if let Some(conn) = &mut this.conn
            && !conn.poll_io(cx)
        {
            // Closed: the body has what it will get, and the connection goes with it.
            this.conn = None;
        }
        let frame = Pin::new(&mut this.body).poll_frame(cx);
        if let Poll::Ready(None) = frame {
            this.ended = true;
        }
        frame
    }

    fn is_end_stream(&self) -> bool {
        self.ended || self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

impl Drop for Driven {
    fn drop(&mut self) {
        if let Some(conn) = self.conn.take()
            && conn.io.is_some()
            && self.is_end_stream()
        {
            self.idle.put(conn);
        }
    }
}

/// Sends `request` (origin-form URI, `Host` set) to `host`:`port` on an idle connection of
/// `idle` or a new one, and returns the response with its body still to read.
///
/// # Errors
/// [`Failure::NotAllowed`] when `allow` is given and none of the host name's addresses is in
/// it; [`Failure::Connect`] when resolving, connecting (within [`CONNECT_TIMEOUT`]) or the
/// handshake fails; [`Failure::Exchange`] when the connection fails once the request may have
/// been sent.
pub(super) async fn send(
    idle: &Arc<Idle>,
    host: &url::Host<&str>,
    port: u16,
    allow: Option<&HostAllowList>,
    mut request: http::Request<Full<Bytes>>,
) -> Result<http::Response<Driven>, Failure> {
    let mut replayed = false;
    loop {
        let (mut conn, reused) = match poll_fn(|cx| Poll::Ready(idle.take(cx))).await {
            Some(conn) => (conn, true),
            None => (connect(host, port, allow).await?, false),
        };
        // Kept to send again if the receiver closes the reused connection before answering.
        let again = (reused && !replayed).then(|| copy(&request));
        match (exchange(&mut conn, request).await, again) {
            (Ok(response), _) => {
                let (head, body) = response.into_parts();
                return Ok(http::Response::from_parts(
                    head,
                    Driven {
                        body,
                        conn: Some(conn),
                        idle: idle.clone(),
                        ended: false,
                    },
                ));
            }
            // Not sent, on a reused connection the receiver closed as it was taken: another
            // connection gets it. On a new connection, the receiver refused it.
            (Err(Refused::Unsent(unsent, _)), _) if reused => request = *unsent,
            (Err(Refused::Unsent(_, why)), _) => return Err(Failure::Connect(why)),
            // Sent on a reused connection that the receiver closed before any answer: most
            // likely it closed the connection as idle just as the request left. Once more on
            // another connection: every request carries its `Idempotency-Key`, which is what
            // makes Go's net/http replay a request there (`Request.isReplayable`).
            (Err(Refused::Failed(_, true)), Some(again)) => {
                replayed = true;
                request = again;
            }
            (Err(Refused::Failed(why, _)), _) => return Err(Failure::Exchange(why)),
        }
    }
}

/// A copy of `request` (its body is shared, not copied).
fn copy(request: &http::Request<Full<Bytes>>) -> http::Request<Full<Bytes>> {
    let mut copy = http::Request::new(request.body().clone());
    *copy.method_mut() = request.method().clone();
    *copy.uri_mut() = request.uri().clone();
    *copy.version_mut() = request.version();
    *copy.headers_mut() = request.headers().clone();
    copy
}

/// How an exchange failed: before the request was sent (it comes back), or after; then
/// whether the connection closed before any of the response came.
enum Refused {
    Unsent(Box<http::Request<Full<Bytes>>>, String),
    Failed(String, bool),
}

/// Sends `request` on `conn` and reads the response's head, polling the connection meanwhile.
async fn exchange(
    conn: &mut Conn,
    request: http::Request<Full<Bytes>>,
) -> Result<http::Response<Incoming>, Refused> {
    let ready = poll_fn(|cx| {
        let open = conn.poll_io(cx);
        match conn.send.poll_ready(cx) {
            // A connection that ended cleanly can still say it wants a request.
            Poll::Ready(ready) => Poll::Ready(ready.is_ok() && open),
            Poll::Pending if open => Poll::Pending,
            Poll::Pending => Poll::Ready(false),
        }
    })
    .await;
    if !ready {
        return Err(Refused::Unsent(
            Box::new(request),
            "the connection closed before the request was sent".into(),
        ));
    }
    let mut answer = std::pin::pin!(conn.send.try_send_request(request));
    poll_fn(|cx| {
        // The request was queued for the connection, which wakes this task to write it; a
        // connection that ends meanwhile is dropped, and the request comes back unsent if
        // it was not taken.
        conn.poll_io(cx);
        answer.as_mut().poll(cx)
    })
    .await
    .map_err(|mut e| {
        let why = super::chain(e.error());
        let unanswered = e.error().is_incomplete_message();
        match e.take_message() {
            Some(request) => Refused::Unsent(Box::new(request), why),
            None => Refused::Failed(why, unanswered),
        }
    })
}

/// A new connection to `host`:`port`: each address the host resolves to (those `allow` holds,
/// when given) in turn until one connects, all within [`CONNECT_TIMEOUT`].
async fn connect(
    host: &url::Host<&str>,
    port: u16,
    allow: Option<&HostAllowList>,
) -> Result<Conn, Failure> {
    match tokio::time::timeout(CONNECT_TIMEOUT, connect_within(host, port, allow)).await {
        Ok(connected) => connected,
        Err(_) => Err(Failure::Connect(format!(
            "'{host}': timed out after {}s",
            CONNECT_TIMEOUT.as_secs()
        ))),
    }
}

async fn connect_within(
    host: &url::Host<&str>,
    port: u16,
    allow: Option<&HostAllowList>,
) -> Result<Conn, Failure> {
    let addrs: Vec<SocketAddr> =
        match host {
            url::Host::Ipv4(ip) => vec![SocketAddr::from((*ip, port))],
            url::Host::Ipv6(ip) => vec![SocketAddr::from((*ip, port))],
            url::Host::Domain(name) => match allow {
                Some(allow) => super::allowed_addresses(allow, name, port)
                    .await
                    .map_err(|e| match e {
                        super::Resolved::NotAllowed(e) => Failure::NotAllowed(e),
                        super::Resolved::Failed(e) => {
                            Failure::Connect(format!("resolving '{name}': {e}"))
                        }
                    })?,
                None => tokio::net::lookup_host((*name, port))
                    .await
                    .map_err(|e| Failure::Connect(format!("resolving '{name}': {e}")))?
                    .collect(),
            },
        };
    let mut last = format!("'{host}' resolves to no address");
    for addr in addrs {
        let opened = async {
            let stream = TcpStream::connect(addr).await?;
            // As the pooled client: a request's head and body go out without waiting.
            stream.set_nodelay(true)?;
            Ok::<_, std::io::Error>(stream)
        };
        match opened.await {
            Ok(stream) => {
                let (send, io) = http1::handshake(TokioIo::new(stream))
                    .await
                    .map_err(|e| Failure::Connect(format!("{addr}: {}", super::chain(&e))))?;
                return Ok(Conn {
                    send,
                    io: Some(Box::pin(io)),
                    idle_since: Instant::now(),
                });
            }
            Err(e) => last = format!("{addr}: {e}"),
        }
    }
    Err(Failure::Connect(last))
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// A receiver that answers one request per connection `200 OK` and closes the connection
    /// `close_after` later.
    async fn closing_receiver(close_after: Duration) -> SocketAddr {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            while let Ok((mut stream, _)) = listener.accept().await {
                tokio::spawn(async move {
                    let mut read = Vec::new();
                    let mut buf = [0u8; 1024];
                    while !read.windows(4).any(|w| w == b"\r\n\r\n") {
                        match stream.read(&mut buf).await {
                            Ok(n) if n > 0 => read.extend_from_slice(&buf[..n]),
                            _ => return,
                        }
                    }
                    let _ = stream
                        .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n")
                        .await;
                    tokio::time::sleep(close_after).await;
                });
            }
        });
        addr
    }

    fn request(addr: SocketAddr) -> http::Request<Full<Bytes>> {
        http::Request::get("/hook")
            .header("host", addr.to_string())
            .body(Full::new(Bytes::new()))
            .unwrap()
    }

    #[tokio::test]
    async fn a_request_on_a_connection_that_ended_comes_back_unsent_without_waiting() {
        let addr = closing_receiver(Duration::from_millis(20)).await;
        let host = url::Host::Ipv4(std::net::Ipv4Addr::LOCALHOST);
        let idle = Arc::new(Idle::default());
        let response = send(&idle, &host, addr.port(), None, request(addr))
            .await
            .unwrap();
        assert_eq!(response.status(), 200);
        drop(response);
        // Taken from the list without the check `take` makes, after the receiver closed it.
        let mut conn = idle.lock().pop().expect("back in the idle list");
        tokio::time::sleep(Duration::from_millis(100)).await;
        let sent = tokio::time::timeout(Duration::from_secs(5), exchange(&mut conn, request(addr)))
            .await
            .expect("answered at once, not left waiting");
        assert!(
            matches!(sent, Err(Refused::Unsent(..))),
            "handed back unsent"
        );
    }

    #[tokio::test]
    async fn a_request_a_reused_connection_closed_on_unanswered_is_sent_once_more() {
        // Answers the first request on each connection and closes it on the second, unread.
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let heads = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let seen = heads.clone();
        tokio::spawn(async move {
            while let Ok((mut stream, _)) = listener.accept().await {
                let seen = seen.clone();
                tokio::spawn(async move {
                    let mut read = Vec::new();
                    let mut buf = [0u8; 1024];
                    for answer in [true, false] {
                        while !read.windows(4).any(|w| w == b"\r\n\r\n") {
                            match stream.read(&mut buf).await {
                                Ok(n) if n > 0 => read.extend_from_slice(&buf[..n]),
                                _ => return,
                            }
                        }
                        read.clear();
                        seen.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                        if answer {
                            let ok = b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n";
                            if stream.write_all(ok).await.is_err() {
                                return;
                            }
                        }
                    }
                });
            }
        });
        let host = url::Host::Ipv4(std::net::Ipv4Addr::LOCALHOST);
        let idle = Arc::new(Idle::default());
        for attempt in 1..=2 {
            let response = send(&idle, &host, addr.port(), None, request(addr))
                .await
                .unwrap_or_else(|e| panic!("request {attempt}: {e}"));
            assert_eq!(response.status(), 200);
        }
        assert_eq!(
            heads.load(std::sync::atomic::Ordering::SeqCst),
            3,
            "the second request: closed unanswered once, answered on a new connection"
        );
    }

    #[tokio::test]
    async fn the_sweep_closes_what_the_receiver_closed_and_what_expired() {
        let addr = closing_receiver(Duration::from_millis(20)).await;
        let host = url::Host::Ipv4(std::net::Ipv4Addr::LOCALHOST);
        let idle = Arc::new(Idle::default());
        drop(
            send(&idle, &host, addr.port(), None, request(addr))
                .await
                .unwrap(),
        );
        assert_eq!(idle.len(), 1);
        tokio::time::sleep(Duration::from_millis(100)).await;
        idle.sweep();
        assert_eq!(idle.len(), 0, "the receiver closed it");

        let open = closing_receiver(Duration::from_secs(3600)).await;
        drop(
            send(&idle, &host, open.port(), None, request(open))
                .await
                .unwrap(),
        );
        idle.sweep();
        assert_eq!(idle.len(), 1, "open and fresh: kept");
        if let Some(conn) = idle.lock().last_mut() {
            conn.idle_since -= IDLE_TIMEOUT;
        }
        idle.sweep();
        assert_eq!(idle.len(), 0, "idle past IDLE_TIMEOUT");
    }
}
