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
        b"POST /v1/namespaces/default/jobs HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"name\":",
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

/// `sundial server --listen LISTEN --database-url DB` with `--config CONFIG` when given; its
/// standard output dropped.
fn server_command(listen: &str, db: &str, config: Option<&Path>) -> std::process::Command {
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_sundial"));
    cmd.args(["server", "--listen", listen, "--database-url", db])
        .stdout(std::process::Stdio::null());
    if let Some(config) = config {
        cmd.arg("--config").arg(config);
    }
    cmd
}

#[test]
fn a_taken_listen_address_stops_the_start_before_the_store_is_opened() {
    let dir = tempfile::tempdir().unwrap();
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let db = dir.path().join("sundial.db");
    let out = server_command(&addr, &format!("sqlite://{}", db.display()), None)
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
        let db = format!("sqlite://{}", dir.path().join("x.db").display());
        let out = server_command("127.0.0.1:0", &db, Some(&config))
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_ne!(out.status.code(), Some(0), "{http}: {stderr}");
        assert!(stderr.contains(named), "{http}: {stderr}");
    }
}

/// The SHA-256 of `tls-test-token`, as `[[tokens]]` stores it.
const TOKEN_SHA256: &str = "141f36a48baa07f36c2dbcfdadaa6bdb9e814d82ad40faaed40945f46ae273eb";

/// A self-signed certificate for 127.0.0.1 and its key, made by `openssl` in `dir`.
fn self_signed(dir: &Path) -> (std::path::PathBuf, std::path::PathBuf) {
    let (cert, key) = (dir.join("cert.pem"), dir.join("key.pem"));
    let out = std::process::Command::new("openssl")
        .args([
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
        ])
        .args(["-nodes", "-days", "2", "-subj", "/CN=sundial-test"])
        .args(["-addext", "subjectAltName=IP:127.0.0.1"])
        // An end-entity certificate (a CA certificate is refused as a server's own).
        .args(["-addext", "basicConstraints=critical,CA:FALSE"])
        .arg("-keyout")
        .arg(&key)
        .arg("-out")
        .arg(&cert)
        .output()
        .expect("openssl runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    (cert, key)
}

/// A child process killed when dropped, so a failing test leaves no server behind.
struct Killed(std::process::Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn sundial(args: &[&str]) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_sundial"))
        .args(args)
        .output()
        .unwrap()
}

#[tokio::test]
async fn with_tls_the_api_speaks_https_and_the_cli_trusts_a_given_ca() {
    let dir = tempfile::tempdir().unwrap();
    let (cert, key) = self_signed(dir.path());
    let config = dir.path().join("sundial.toml");
    std::fs::write(
        &config,
        format!(
            "tls_cert = '{}'\ntls_key = '{}'\n[[tokens]]\ntoken_sha256 = '{TOKEN_SHA256}'\nrole = 'admin'\nnamespaces = ['*']\n",
            cert.display(),
            key.display()
        ),
    )
    .unwrap();
    let addr = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let db = format!("sqlite://{}", dir.path().join("s.db").display());
    let _server = Killed(
        server_command(&addr.to_string(), &db, Some(&config))
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap(),
    );
    let pem = std::fs::read(&cert).unwrap();
    let trusting = reqwest::Client::builder()
        .add_root_certificate(reqwest::Certificate::from_pem(&pem).unwrap())
        .build()
        .unwrap();
    let url = format!("https://{addr}");
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Ok(r) = trusting.get(format!("{url}/readyz")).send().await
            && r.status().is_success()
        {
            break;
        }
        assert!(Instant::now() < deadline, "the server did not become ready");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let ca = cert.display().to_string();
    let ok = sundial(&[
        "job",
        "list",
        "--server",
        &url,
        "--token",
        "tls-test-token",
        "--ca-cert",
        &ca,
    ]);
    assert!(
        ok.status.success(),
        "{}",
        String::from_utf8_lossy(&ok.stderr)
    );
    // Without the CA the certificate is not trusted, and plain HTTP gets no answer.
    let untrusted = sundial(&["job", "list", "--server", &url, "--token", "tls-test-token"]);
    assert_eq!(untrusted.status.code(), Some(1));
    let plain = reqwest::get(format!("http://{addr}/readyz")).await;
    assert!(plain.is_err(), "plain HTTP was answered: {plain:?}");
    let missing = sundial(&[
        "job",
        "list",
        "--server",
        &url,
        "--ca-cert",
        "/nonexistent.pem",
    ]);
    assert_eq!(missing.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&missing.stderr)
            .contains("--ca-cert: cannot read /nonexistent.pem"),
        "{}",
        String::from_utf8_lossy(&missing.stderr)
    );
}

#[test]
fn tokens_off_loopback_without_tls_refuse_to_start_unless_insecure_http_is_set() {
    let dir = tempfile::tempdir().unwrap();
    let tokens = format!(
        "[[tokens]]\ntoken_sha256 = '{TOKEN_SHA256}'\nrole = 'admin'\nnamespaces = ['*']\n"
    );
    let config = dir.path().join("plain.toml");
    std::fs::write(&config, &tokens).unwrap();
    let db = format!("sqlite://{}", dir.path().join("p.db").display());
    let refused = server_command("0.0.0.0:0", &db, Some(&config))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert_eq!(refused.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("insecure_http = true"), "{stderr}");
    assert!(stderr.contains("tls_cert"), "{stderr}");
    // Half a TLS setting is named too.
    std::fs::write(&config, format!("tls_cert = 'c.pem'\n{tokens}")).unwrap();
    let half = server_command("127.0.0.1:0", &db, Some(&config))
        .output()
        .unwrap();
    assert!(
        String::from_utf8_lossy(&half.stderr).contains("tls_key: missing"),
        "{}",
        String::from_utf8_lossy(&half.stderr)
    );
    // With insecure_http = true (a proxy in front terminates TLS) it starts.
    std::fs::write(&config, format!("insecure_http = true\n{tokens}")).unwrap();
    let mut started = Killed(
        server_command("0.0.0.0:0", &db, Some(&config))
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let stderr = started.0.stderr.take().unwrap();
    let listening = std::io::BufRead::lines(std::io::BufReader::new(stderr))
        .map_while(Result::ok)
        .find(|l| l.contains("listening on"));
    assert!(listening.is_some(), "the server did not start");
}
