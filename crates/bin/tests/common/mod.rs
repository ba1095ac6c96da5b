//! Test fixtures shared by the binary's integration suites: a real `sundial server` process on
//! a temp SQLite file, and a real loopback HTTP receiver that records every delivery.

#![allow(dead_code)]

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::extract::{Path as UrlPath, State};
use axum::http::{HeaderMap, StatusCode};
use jiff::Timestamp;
use serde_json::Value;

/// One request the receiver got.
#[derive(Debug, Clone)]
pub struct Delivery {
    pub path: String,
    pub execution_id: String,
    pub attempt: u32,
    pub scheduled_at: Timestamp,
    pub received_at: Timestamp,
}

/// A loopback HTTP receiver. Paths: `/fail-once` answers 503 to attempt 1 and 200 after;
/// `/slow…` waits 5 s then answers 200; `/missing` answers 404; `/unavailable` answers 503;
/// anything else 200.
#[derive(Clone, Default)]
pub struct Receiver {
    pub addr: Option<SocketAddr>,
    deliveries: Arc<Mutex<Vec<Delivery>>>,
    /// Requests to `/slow` whose caller hung up before the answer: (execution id, when).
    abandoned: Arc<Mutex<Vec<(String, Timestamp)>>>,
}

/// Records, when dropped before `done`, that the caller hung up.
struct HangUp {
    id: String,
    done: bool,
    log: Arc<Mutex<Vec<(String, Timestamp)>>>,
}

impl Drop for HangUp {
    fn drop(&mut self) {
        if !self.done {
            self.log
                .lock()
                .unwrap()
                .push((self.id.clone(), Timestamp::now()));
        }
    }
}

async fn receive(
    State(r): State<Receiver>,
    UrlPath(path): UrlPath<String>,
    headers: HeaderMap,
) -> StatusCode {
    let header = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_owned()
    };
    let attempt: u32 = header("sundial-attempt").parse().unwrap_or(0);
    let delivery = Delivery {
        path: path.clone(),
        execution_id: header("idempotency-key"),
        attempt,
        scheduled_at: header("sundial-scheduled-at")
            .parse()
            .unwrap_or(Timestamp::UNIX_EPOCH),
        received_at: Timestamp::now(),
    };
    assert_eq!(delivery.execution_id, header("sundial-execution-id"));
    r.deliveries.lock().unwrap().push(delivery);
    match path.as_str() {
        "ok" => StatusCode::OK,
        "fail-once" if attempt <= 1 => StatusCode::SERVICE_UNAVAILABLE,
        "fail-once" => StatusCode::OK,
        p if p.starts_with("slow") => {
            let mut guard = HangUp {
                id: header("idempotency-key"),
                done: false,
                log: r.abandoned.clone(),
            };
            tokio::time::sleep(Duration::from_secs(5)).await;
            guard.done = true;
            StatusCode::OK
        }
        "missing" => StatusCode::NOT_FOUND,
        "unavailable" => StatusCode::SERVICE_UNAVAILABLE,
        _ => StatusCode::OK,
    }
}

impl Receiver {
    pub async fn start() -> Receiver {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let mut r = Receiver {
            addr: Some(listener.local_addr().unwrap()),
            ..Default::default()
        };
        let app = axum::Router::new()
            .route("/{path}", axum::routing::any(receive))
            .with_state(r.clone());
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        r.addr = Some(r.addr.unwrap());
        r
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}/{path}", self.addr.unwrap())
    }

    pub fn deliveries(&self) -> Vec<Delivery> {
        self.deliveries.lock().unwrap().clone()
    }

    /// Requests to `/slow` abandoned by the caller: (execution id, when).
    pub fn abandoned(&self) -> Vec<(String, Timestamp)> {
        self.abandoned.lock().unwrap().clone()
    }

    pub fn for_path(&self, path: &str) -> Vec<Delivery> {
        self.deliveries()
            .into_iter()
            .filter(|d| d.path == path)
            .collect()
    }
}

/// How to start a server process.
#[derive(Debug, Clone, Default)]
pub struct ServerOpts {
    /// Store URL; default: `sqlite://<dir>/sundial.db`.
    pub database_url: Option<String>,
    /// Node id; default `test`.
    pub node_id: Option<String>,
    /// Extra arguments (`--roles ...`, `--lease-ttl ...`).
    pub args: Vec<String>,
    /// Extra environment.
    pub env: Vec<(String, String)>,
}

/// A `sundial server` child process.
pub struct Server {
    pub dir: PathBuf,
    pub addr: SocketAddr,
    pub opts: ServerOpts,
    child: Option<Child>,
    http: reqwest::Client,
    /// The temporary directory this server made for itself ([`Server::start`]), removed
    /// with it.
    temp: Option<tempfile::TempDir>,
}

fn free_port() -> SocketAddr {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap()
}

impl Server {
    /// Starts a server on a fresh SQLite file in a new temp directory.
    pub async fn start() -> Server {
        let temp = tempfile::tempdir().unwrap();
        let mut server = Server::start_in(temp.path()).await;
        server.temp = Some(temp);
        server
    }

    /// Starts a server on the SQLite file in `dir` (made by an earlier server, or new).
    pub async fn start_in(dir: &Path) -> Server {
        Server::start_with(dir, ServerOpts::default()).await
    }

    /// Starts a server with options, logging to `<dir>/<node id>.log`.
    pub async fn start_with(dir: &Path, opts: ServerOpts) -> Server {
        let addr = free_port();
        let mut s = Server {
            dir: dir.to_owned(),
            addr,
            opts,
            child: None,
            http: reqwest::Client::new(),
            temp: None,
        };
        s.spawn();
        s.wait_ready().await;
        s
    }

    fn log_path(&self) -> PathBuf {
        match &self.opts.node_id {
            Some(id) => self.dir.join(format!("{id}.log")),
            None => self.dir.join("server.log"),
        }
    }

    fn spawn(&mut self) {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.log_path())
            .unwrap();
        let url = self
            .opts
            .database_url
            .clone()
            .unwrap_or_else(|| format!("sqlite://{}", self.dir.join("sundial.db").display()));
        let node = self.opts.node_id.clone().unwrap_or_else(|| "test".into());
        let child = Command::new(env!("CARGO_BIN_EXE_sundial"))
            .args([
                "server",
                "--node-id",
                &node,
                "--listen",
                &self.addr.to_string(),
                "--database-url",
                &url,
            ])
            .args(&self.opts.args)
            .envs(self.opts.env.iter().cloned())
            .env("RUST_LOG", "info,sqlx=warn")
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap();
        self.child = Some(child);
    }

    /// The process id, while running.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// True while the process has not exited.
    pub fn is_running(&mut self) -> bool {
        self.child
            .as_mut()
            .is_some_and(|c| c.try_wait().ok().flatten().is_none())
    }

    /// Sends a signal (`STOP`, `CONT`, ...) with kill(1).
    pub fn signal(&self, sig: &str) {
        let pid = self.pid().expect("running").to_string();
        let ok = Command::new("kill")
            .args([&format!("-{sig}"), &pid])
            .status()
            .unwrap()
            .success();
        assert!(ok, "kill -{sig} {pid} failed");
    }

    async fn wait_ready(&self) {
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline {
            if let Ok(r) = self
                .http
                .get(format!("http://{}/readyz", self.addr))
                .send()
                .await
                && r.status().is_success()
            {
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!("server did not become ready; log:\n{}", self.log());
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.log_path()).unwrap_or_default()
    }

    /// SIGKILL, and wait for the process to be gone.
    pub fn kill9(&mut self) {
        if let Some(mut child) = self.child.take() {
            child.kill().unwrap();
            child.wait().unwrap();
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    pub async fn request(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<Value>,
    ) -> (u16, Value) {
        let mut req = self.http.request(method, self.url(path));
        if let Some(b) = body {
            req = req
                .header("content-type", "application/json")
                .body(b.to_string());
        }
        let resp = req.send().await.unwrap();
        let status = resp.status().as_u16();
        let text = resp.text().await.unwrap();
        (status, serde_json::from_str(&text).unwrap_or(Value::Null))
    }

    pub async fn put_job(&self, ns: &str, name: &str, body: Value) -> Value {
        let (status, v) = self
            .request(
                reqwest::Method::PUT,
                &format!("/v1/namespaces/{ns}/jobs/{name}"),
                Some(body),
            )
            .await;
        assert!(
            status == 200 || status == 201,
            "PUT job {name}: {status} {v}"
        );
        v
    }

    pub async fn get(&self, path: &str) -> Value {
        let (status, v) = self.request(reqwest::Method::GET, path, None).await;
        assert_eq!(status, 200, "GET {path}: {v}");
        v
    }

    /// Every execution of a job, following pages.
    pub async fn history(&self, ns: &str, job: &str) -> Vec<Value> {
        let mut all = Vec::new();
        let mut token: Option<String> = None;
        loop {
            let mut path = format!("/v1/namespaces/{ns}/jobs/{job}/executions?limit=1000");
            if let Some(t) = &token {
                path.push_str(&format!("&page_token={t}"));
            }
            let page = self.get(&path).await;
            all.extend(page["items"].as_array().unwrap().iter().cloned());
            match page["next_page_token"].as_str() {
                Some(t) => token = Some(t.to_owned()),
                None => return all,
            }
        }
    }

    /// Polls `check` every 100 ms until it returns Some, for at most `limit`.
    pub async fn wait_for<T>(
        &self,
        limit: Duration,
        mut check: impl AsyncFnMut() -> Option<T>,
    ) -> T {
        let deadline = Instant::now() + limit;
        loop {
            if let Some(v) = check().await {
                return v;
            }
            assert!(
                Instant::now() < deadline,
                "condition not met within {limit:?}; log:\n{}",
                self.log()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.kill9();
        // The directory (`temp`) goes after the process that wrote in it.
        self.temp.take();
    }
}

pub fn ts(v: &Value) -> Timestamp {
    v.as_str()
        .unwrap_or_else(|| panic!("not an instant: {v}"))
        .parse()
        .unwrap()
}

/// The next whole second at least `ahead` from now.
pub fn whole_second_after(ahead: Duration) -> Timestamp {
    let t = Timestamp::now() + jiff::SignedDuration::try_from(ahead).unwrap();
    Timestamp::from_second(t.as_second() + 1).unwrap()
}
