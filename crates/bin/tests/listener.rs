//! The API listener on an open network, with real sockets against a real server process
//! (docs/configuration.md, "`[http]`"): half-sent headers, idle and kept-alive connections,
//! a body that never comes, the connection cap, and a taken `--listen` address.

mod common;

use std::net::SocketAddr;
use std::path::Path;
use std::time::{Duration, Instant};

use common::{Server, ServerOpts};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// A server whose configuration file holds `http` as its `[http]` section.
async fn server_with(dir: &Path, http: &str) -> Server {
    let config = dir.join("sundial.toml");
    std::fs::write(&config, format!("[http]\n{http}\n")).unwrap();
    Server::start_with(
        dir,
        ServerOpts {
            args: vec!["--config".into(), config.display().to_string()],
            ..Default::default()
        },
    )
    .await
}

/// Reads until the server closes the connection or `within` passes; returns what was read
/// and whether the connection was closed.
async fn read_until_closed(s: &mut TcpStream, within: Duration) -> (String, bool) {
    let deadline = Instant::now() + within;
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match tokio::time::timeout(left, s.read(&mut buf)).await {
            Ok(Ok(0)) | Ok(Err(_)) => return (String::from_utf8_lossy(&got).into_owned(), true),
            Ok(Ok(n)) => got.extend_from_slice(&buf[..n]),
            Err(_) => return (String::from_utf8_lossy(&got).into_owned(), false),
        }
    }
}

async fn healthz(addr: SocketAddr) -> reqwest::StatusCode {
    reqwest::get(format!("http://{addr}/healthz"))
        .await
        .expect("the server answers")
        .status()
}

#[tokio::test]
async fn slow_and_idle_connections_are_closed_and_the_server_goes_on() {
    let dir = tempfile::tempdir().unwrap();
    let server = server_with(
        dir.path(),
        "header_read_timeout = \"1s\"\nkeep_alive_timeout = \"1s\"\nrequest_body_timeout = \"1s\"",
    )
    .await;
    let addr = server.addr;

    // 500 connections that send half a request header and stop (slowloris).
    let mut half = Vec::new();
    for _ in 0..500 {
        let mut s = TcpStream::connect(addr).await.unwrap();
        s.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: ")
            .await
            .unwrap();
        half.push(s);
    }
    // One that connects and says nothing.
    let mut silent = TcpStream::connect(addr).await.unwrap();
    // One kept alive after a whole request.
    let mut kept = TcpStream::connect(addr).await.unwrap();
    kept.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    // One that promises a body and sends a tenth of it.
    let mut body = TcpStream::connect(addr).await.unwrap();
    body.write_all(
        b"POST /v1/namespaces/default/jobs HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"name\":",
    )
    .await
    .unwrap();

    let started = Instant::now();
    let mut closed = 0;
    for s in &mut half {
        if read_until_closed(s, Duration::from_secs(6)).await.1 {
            closed += 1;
        }
    }
    assert_eq!(
        closed, 500,
        "every half-sent header is closed by the header-read timeout"
    );
    assert!(
        started.elapsed() < Duration::from_secs(6),
        "closed after {:?}",
        started.elapsed()
    );
    let (got, was_closed) = read_until_closed(&mut silent, Duration::from_secs(4)).await;
    assert!(
        was_closed && got.is_empty(),
        "a silent connection is closed: {got:?}"
    );
    let (got, was_closed) = read_until_closed(&mut kept, Duration::from_secs(4)).await;
    assert!(got.starts_with("HTTP/1.1 200"), "{got}");
    assert!(was_closed, "an idle kept-alive connection is closed");
    let (got, _) = read_until_closed(&mut body, Duration::from_secs(4)).await;
    assert!(
        got.starts_with("HTTP/1.1 408"),
        "a body that never comes is answered 408: {got}"
    );

    // Nothing of it stopped the server, and nothing was written.
    assert_eq!(healthz(addr).await, reqwest::StatusCode::OK);
    let jobs: serde_json::Value = serde_json::from_str(
        &reqwest::get(format!("http://{addr}/v1/namespaces/default/jobs"))
            .await
            .unwrap()
            .text()
            .await
            .unwrap(),
    )
    .unwrap();
    assert_eq!(jobs["items"], serde_json::json!([]));
}

#[tokio::test]
async fn connections_past_the_cap_wait_until_one_closes() {
    let dir = tempfile::tempdir().unwrap();
    let server = server_with(
        dir.path(),
        "max_connections = 3\nheader_read_timeout = \"30s\"\nkeep_alive_timeout = \"1s\"",
    )
    .await;
    let addr = server.addr;
    // The readiness probe's kept-alive connection closes after the keep-alive timeout.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    // Three connections in the middle of a header hold the three places.
    let mut held = Vec::new();
    for _ in 0..3 {
        let mut s = TcpStream::connect(addr).await.unwrap();
        s.write_all(b"GET /healthz HTTP/1.1\r\n").await.unwrap();
        held.push(s);
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let mut fourth = TcpStream::connect(addr).await.unwrap();
    fourth
        .write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    let (got, _) = read_until_closed(&mut fourth, Duration::from_millis(700)).await;
    assert!(
        got.is_empty(),
        "a fourth connection was served past the cap of 3: {got}"
    );
    drop(held.pop());
    let (got, _) = read_until_closed(&mut fourth, Duration::from_secs(5)).await;
    assert!(
        got.starts_with("HTTP/1.1 200"),
        "served once a connection closed: {got}"
    );
}

#[test]
fn a_taken_listen_address_stops_the_start_before_the_store_is_opened() {
    let dir = tempfile::tempdir().unwrap();
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let db = dir.path().join("sundial.db");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_sundial"))
        .args([
            "server",
            "--listen",
            &addr,
            "--database-url",
            &format!("sqlite://{}", db.display()),
        ])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains(&format!("--listen: cannot listen on {addr}")),
        "{stderr}"
    );
    assert!(!db.exists(), "the store was opened: {}", db.display());
}

#[test]
fn a_bad_http_section_names_the_key() {
    let dir = tempfile::tempdir().unwrap();
    for (http, named) in [
        ("header_read_timeout = \"soon\"", "http.header_read_timeout"),
        ("keep_alive_timeout = \"10ms\"", "http.keep_alive_timeout"),
        ("max_connections = 0", "http.max_connections"),
        ("idle = \"1s\"", "idle"),
    ] {
        let config = dir.path().join("bad.toml");
        std::fs::write(&config, format!("[http]\n{http}\n")).unwrap();
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_sundial"))
            .args([
                "server",
                "--listen",
                "127.0.0.1:0",
                "--config",
                &config.display().to_string(),
                "--database-url",
                &format!("sqlite://{}", dir.path().join("x.db").display()),
            ])
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_ne!(out.status.code(), Some(0), "{http}: {stderr}");
        assert!(stderr.contains(named), "{http}: {stderr}");
    }
}
