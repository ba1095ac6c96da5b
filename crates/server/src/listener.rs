//! The API's listener: TCP connections accepted up to a cap and each served over HTTP/1.1
//! with timeouts, so clients that connect and then say nothing, or trickle a header, cannot
//! hold the process's sockets (docs/configuration.md, "`[http]`").
//!
//! Invariants:
//! - At most [`HttpLimits::max_connections`] connections are served at once; past it the
//!   next connection waits in the kernel's accept queue until one closes.
//! - A connection that has not sent a whole request header within
//!   [`HttpLimits::header_read_timeout`] of the server starting to wait for it (after the
//!   accept, or after the previous response on a kept-alive connection) is closed: hyper's
//!   header-read timer.
//! - A connection with no request in flight that has received nothing for
//!   [`HttpLimits::keep_alive_timeout`] since it became idle is closed.
//! - A request body not received within [`HttpLimits::request_body_timeout`] of the request's
//!   start is answered `408 Request Timeout`.
//! - On shutdown the listener stops accepting and every connection finishes the request in
//!   flight, then closes.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use axum::Router;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::{Semaphore, watch};

/// The listener's limits (`[http]` in the configuration file).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HttpLimits {
    /// Longest wait for a request's whole header, from when the server starts waiting for
    /// it. Default 10 s.
    pub header_read_timeout: Duration,
    /// Longest wait for a request's whole body, from the request's start. Default 30 s.
    pub request_body_timeout: Duration,
    /// Longest an idle kept-alive connection waits for its next request (and never longer
    /// than `header_read_timeout`). Default 5 s.
    pub keep_alive_timeout: Duration,
    /// Most connections served at once. Default 10,000.
    pub max_connections: usize,
}

impl Default for HttpLimits {
    fn default() -> Self {
        HttpLimits {
            header_read_timeout: Duration::from_secs(10),
            request_body_timeout: Duration::from_secs(30),
            keep_alive_timeout: Duration::from_secs(5),
            max_connections: 10_000,
        }
    }
}

/// TLS settings of the listener (`tls_cert`, `tls_key`).
pub type Tls = Arc<tokio_rustls::rustls::ServerConfig>;

/// Serves `app` on `listener` within `limits`, over TLS with `tls`, until `shutdown` turns
/// true, then waits for the connections to finish their requests in flight.
pub async fn serve(
    listener: tokio::net::TcpListener,
    app: Router,
    limits: HttpLimits,
    tls: Option<Tls>,
    mut shutdown: watch::Receiver<bool>,
) {
    let acceptor = tls.map(tokio_rustls::TlsAcceptor::from);
    let app = app.layer(tower_http::timeout::RequestBodyTimeoutLayer::new(
        limits.request_body_timeout,
    ));
    let permits = Arc::new(Semaphore::new(limits.max_connections));
    let mut warned_full = false;
    loop {
        let permit = if let Ok(p) = permits.clone().try_acquire_owned() {
            p
        } else {
            if !warned_full {
                tracing::warn!(
                    max_connections = limits.max_connections,
                    "the API serves its maximum of connections; new ones wait until one closes"
                );
                warned_full = true;
            }
            tokio::select! {
                p = permits.clone().acquire_owned() => match p {
                    Ok(p) => p,
                    Err(_) => return,
                },
                () = stopped(&mut shutdown) => break,
            }
        };
        let accepted = tokio::select! {
            a = listener.accept() => a,
            () = stopped(&mut shutdown) => break,
        };
        let (stream, peer) = match accepted {
            Ok(a) => a,
            Err(e) => {
                // Out of descriptors, or a connection reset before it was accepted: go on
                // after a pause rather than spin.
                tracing::warn!(error = %e, "accepting a connection failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        let app = app.clone();
        let shutdown = shutdown.clone();
        let acceptor = acceptor.clone();
        tokio::spawn(async move {
            match acceptor {
                None => serve_connection(stream, peer, app, limits, shutdown).await,
                // The handshake counts against the header-read timeout: a client that opens
                // a connection and says nothing is closed all the same.
                Some(acceptor) => {
                    match tokio::time::timeout(limits.header_read_timeout, acceptor.accept(stream))
                        .await
                    {
                        Ok(Ok(tls)) => serve_connection(tls, peer, app, limits, shutdown).await,
                        Ok(Err(e)) => tracing::debug!(error = %e, "TLS handshake failed"),
                        Err(_) => tracing::debug!("TLS handshake timed out"),
                    }
                }
            }
            drop(permit);
        });
    }
    // Every connection holds a permit until it has closed.
    let all = u32::try_from(limits.max_connections).unwrap_or(u32::MAX);
    let _ = tokio::time::timeout(Duration::from_secs(30), permits.acquire_many(all)).await;
}

/// Returns once `shutdown` turns true (or its sender is gone).
async fn stopped(shutdown: &mut watch::Receiver<bool>) {
    let _ = shutdown.wait_for(|stop| *stop).await;
}

/// What a connection's watchdog reads: requests in flight, when the connection last became
/// idle (milliseconds since `epoch`), and whether it has received bytes since.
struct Activity {
    epoch: Instant,
    in_flight: AtomicUsize,
    idle_since_ms: AtomicU64,
    read_since_idle: AtomicBool,
}

impl Activity {
    fn now_ms(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_millis()).unwrap_or(u64::MAX)
    }
}

/// Serves the connection `stream` from `peer`, whose address every request carries as
/// axum's `ConnectInfo` (the audit log's `remote_addr`).
async fn serve_connection<S>(
    stream: S,
    peer: std::net::SocketAddr,
    app: Router,
    limits: HttpLimits,
    mut shutdown: watch::Receiver<bool>,
) where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let activity = Arc::new(Activity {
        epoch: Instant::now(),
        in_flight: AtomicUsize::new(0),
        idle_since_ms: AtomicU64::new(0),
        read_since_idle: AtomicBool::new(false),
    });
    let io = TokioIo::new(Tracked {
        inner: stream,
        activity: activity.clone(),
    });
    let service = {
        let activity = activity.clone();
        hyper::service::service_fn(move |mut request: hyper::Request<hyper::body::Incoming>| {
            request
                .extensions_mut()
                .insert(axum::extract::ConnectInfo(peer));
            let app = app.clone();
            let activity = activity.clone();
            activity.in_flight.fetch_add(1, Ordering::SeqCst);
            async move {
                let response = tower::ServiceExt::oneshot(app, request).await;
                activity
                    .idle_since_ms
                    .store(activity.now_ms(), Ordering::SeqCst);
                activity.read_since_idle.store(false, Ordering::SeqCst);
                activity.in_flight.fetch_sub(1, Ordering::SeqCst);
                response
            }
        })
    };
    let conn = hyper::server::conn::http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout)
        .serve_connection(io, service);
    tokio::pin!(conn);
    let keep_alive_ms = u64::try_from(limits.keep_alive_timeout.as_millis()).unwrap_or(u64::MAX);
    loop {
        // When the connection would have been idle for the keep-alive timeout, if nothing
        // arrives meanwhile.
        let idle_since = activity.idle_since_ms.load(Ordering::SeqCst);
        let check_at =
            activity.epoch + Duration::from_millis(idle_since.saturating_add(keep_alive_ms));
        tokio::select! {
            r = conn.as_mut() => {
                if let Err(e) = r {
                    tracing::debug!(error = %e, "connection closed with an error");
                }
                return;
            }
            _ = tokio::time::sleep_until(check_at.into()) => {
                let idle = activity.in_flight.load(Ordering::SeqCst) == 0
                    && !activity.read_since_idle.load(Ordering::SeqCst)
                    && activity
                        .now_ms()
                        .saturating_sub(activity.idle_since_ms.load(Ordering::SeqCst))
                        >= keep_alive_ms;
                if idle {
                    // Nothing in flight and nothing received: dropping the connection
                    // closes the socket.
                    return;
                }
            }
            () = stopped(&mut shutdown) => {
                conn.as_mut().graceful_shutdown();
                let _ = tokio::time::timeout(Duration::from_secs(30), conn.as_mut()).await;
                return;
            }
        }
    }
}

/// A stream that records that it received bytes.
struct Tracked<S> {
    inner: S,
    activity: Arc<Activity>,
}

impl<S: AsyncRead + Unpin> AsyncRead for Tracked<S> {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let polled = std::pin::Pin::new(&mut self.inner).poll_read(cx, buf);
        if buf.filled().len() > before {
            self.activity.read_since_idle.store(true, Ordering::SeqCst);
        }
        polled
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Tracked<S> {
    fn poll_write(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        std::pin::Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_flush(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.inner).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> std::task::Poll<std::io::Result<usize>> {
        std::pin::Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}
