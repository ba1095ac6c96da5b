//! Test fixtures shared by the binary's integration suites: a real `sundial server` process on
//! a temp SQLite file, and a real loopback HTTP receiver that records every delivery; the
//! failure suites' cluster of processes on PostgreSQL is in [`cluster`].

#![allow(dead_code)]

pub mod cluster;

use std::collections::HashMap;
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
    /// The request body.
    pub body: String,
    /// Its W3C `traceparent` header.
    pub traceparent: String,
    /// Every header, names lower-case, in the order received.
    pub headers: Vec<(String, String)>,
}

/// A loopback HTTP receiver. Paths: `/fail-once` answers 503 to attempt 1 and 200 after;
/// `/slow…` waits 5 s then answers 200; `/missing` answers 404; `/unavailable` answers 503;
/// anything else 200. The test may also hold an attempt's request until it releases it
/// ([`Receiver::hold`]) or delay the answers to a family of paths ([`Receiver::delay`]).
#[derive(Clone, Default)]
pub struct Receiver {
    pub addr: Option<SocketAddr>,
    deliveries: Arc<Mutex<Vec<Delivery>>>,
    /// Requests answered late (`/slow`, held, delayed) whose caller hung up before the
    /// answer: (execution id, when).
    abandoned: Arc<Mutex<Vec<(String, Timestamp)>>>,
    holds: Holds,
    /// (path prefix, how long) for [`Receiver::delay`].
    delays: Arc<Mutex<Vec<(String, Duration)>>>,
}

/// (path, attempt) → open? Requests held by [`Receiver::hold`] wait while it reads false.
type Holds = Arc<Mutex<HashMap<(String, u32), tokio::sync::watch::Sender<bool>>>>;

/// What a request waits for before it is answered.
enum Wait {
    Released(tokio::sync::watch::Receiver<bool>),
    Sleep(Duration),
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
    body: String,
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
        body,
        traceparent: header("traceparent"),
        headers: headers
            .iter()
            .map(|(k, v)| (k.as_str().to_owned(), v.to_str().unwrap_or("").to_owned()))
            .collect(),
    };
    assert_eq!(delivery.execution_id, header("sundial-execution-id"));
    r.deliveries.lock().unwrap().push(delivery);
    if let Some(wait) = r.wait_of(&path, attempt) {
        let mut guard = HangUp {
            id: header("idempotency-key"),
            done: false,
            log: r.abandoned.clone(),
        };
        match wait {
            Wait::Released(mut open) => {
                let _ = open.wait_for(|open| *open).await;
            }
            Wait::Sleep(d) => tokio::time::sleep(d).await,
        }
        guard.done = true;
    }
    match path.as_str() {
        "ok" => StatusCode::OK,
        "fail-once" if attempt <= 1 => StatusCode::SERVICE_UNAVAILABLE,
        "fail-once" => StatusCode::OK,
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

    /// Requests answered late (`/slow`, held, delayed) abandoned by the caller: (execution
    /// id, when).
    pub fn abandoned(&self) -> Vec<(String, Timestamp)> {
        self.abandoned.lock().unwrap().clone()
    }

    /// Holds the requests to `/{path}` of attempt `attempt` (received and recorded at once)
    /// unanswered until [`Receiver::release`] or until their caller hangs up.
    pub fn hold(&self, path: &str, attempt: u32) {
        let (open, _) = tokio::sync::watch::channel(false);
        self.holds
            .lock()
            .unwrap()
            .insert((path.to_owned(), attempt), open);
    }

    /// Answers the held requests to `/{path}` of attempt `attempt`, and those still to come;
    /// returns when.
    pub fn release(&self, path: &str, attempt: u32) -> Timestamp {
        if let Some(open) = self.holds.lock().unwrap().get(&(path.to_owned(), attempt)) {
            open.send_replace(true);
        }
        Timestamp::now()
    }

    /// Answers the requests to paths starting with `prefix` after `d`.
    pub fn delay(&self, prefix: &str, d: Duration) {
        self.delays.lock().unwrap().push((prefix.to_owned(), d));
    }

    /// What a request to `/{path}` of `attempt` waits for: a hold, a delay, or `/slow`'s 5 s.
    fn wait_of(&self, path: &str, attempt: u32) -> Option<Wait> {
        if let Some(open) = self.holds.lock().unwrap().get(&(path.to_owned(), attempt)) {
            return Some(Wait::Released(open.subscribe()));
        }
        let delayed = self
            .delays
            .lock()
            .unwrap()
            .iter()
            .find(|(prefix, _)| path.starts_with(prefix.as_str()))
            .map(|(_, d)| *d);
        delayed
            .or_else(|| path.starts_with("slow").then_some(Duration::from_secs(5)))
            .map(Wait::Sleep)
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

    /// Waits up to `limit` for the process to exit on its own (after a SIGTERM, say): its
    /// exit code (`None` when a signal ended it), or `Err` when it still runs at the limit.
    /// After it, [`Server::restart`] starts it again.
    pub async fn wait_exit(&mut self, limit: Duration) -> Result<Option<i32>, ()> {
        let deadline = Instant::now() + limit;
        loop {
            let Some(child) = self.child.as_mut() else {
                return Err(());
            };
            if let Ok(Some(status)) = child.try_wait() {
                self.child = None;
                return Ok(status.code());
            }
            if Instant::now() > deadline {
                return Err(());
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// SIGKILL, and wait for the process to be gone.
    pub fn kill9(&mut self) {
        if let Some(mut child) = self.child.take() {
            child.kill().unwrap();
            child.wait().unwrap();
        }
    }

    /// Starts the process again after [`Server::kill9`] (killing it first if it runs), with
    /// the same options, address and log, and waits until it is ready.
    pub async fn restart(&mut self) {
        self.kill9();
        self.spawn();
        self.wait_ready().await;
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    /// This process's wall clock as its HTTP server reports it: the `Date` header of a
    /// `/healthz` answer (whole seconds, RFC 9110 §6.6.1).
    pub async fn date_header(&self) -> Timestamp {
        let resp = self.http.get(self.url("/healthz")).send().await.unwrap();
        let date = resp.headers()["date"].to_str().unwrap().to_owned();
        jiff::fmt::rfc2822::DateTimeParser::new()
            .parse_timestamp(&date)
            .unwrap_or_else(|e| panic!("Date header {date:?}: {e}"))
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
        self.put(&format!("/v1/namespaces/{ns}/jobs/{name}"), body)
            .await
    }

    pub async fn put_workflow(&self, ns: &str, name: &str, body: Value) -> Value {
        self.put(&format!("/v1/namespaces/{ns}/workflows/{name}"), body)
            .await
    }

    /// A PUT that must create (201) or replace (200) the resource at `path`.
    async fn put(&self, path: &str, body: Value) -> Value {
        let (status, v) = self.request(reqwest::Method::PUT, path, Some(body)).await;
        assert!(status == 200 || status == 201, "PUT {path}: {status} {v}");
        v
    }

    pub async fn get(&self, path: &str) -> Value {
        self.try_get(path)
            .await
            .unwrap_or_else(|(status, v)| panic!("GET {path}: {status} {v}"))
    }

    /// A GET that answered 200, or its status and body (a store briefly unavailable).
    pub async fn try_get(&self, path: &str) -> Result<Value, (u16, Value)> {
        match self.request(reqwest::Method::GET, path, None).await {
            (200, v) => Ok(v),
            other => Err(other),
        }
    }

    /// Every item of a paged listing (`path` with its query, `limit` included), following
    /// `next_page_token`.
    pub async fn all_pages(&self, path: &str) -> Vec<Value> {
        self.try_all_pages(path)
            .await
            .unwrap_or_else(|(status, v)| panic!("GET {path}: {status} {v}"))
    }

    /// [`Server::all_pages`], or the status and body of the first page that did not answer 200.
    pub async fn try_all_pages(&self, path: &str) -> Result<Vec<Value>, (u16, Value)> {
        let mut all = Vec::new();
        let mut token: Option<String> = None;
        loop {
            let page = match &token {
                Some(t) => self.try_get(&format!("{path}&page_token={t}")).await?,
                None => self.try_get(path).await?,
            };
            all.extend(page["items"].as_array().unwrap().iter().cloned());
            match page["next_page_token"].as_str() {
                Some(t) => token = Some(t.to_owned()),
                None => return Ok(all),
            }
        }
    }

    /// Every execution of a job, following pages.
    pub async fn history(&self, ns: &str, job: &str) -> Vec<Value> {
        self.all_pages(&format!(
            "/v1/namespaces/{ns}/jobs/{job}/executions?limit=1000"
        ))
        .await
    }

    /// One execution with its attempts.
    pub async fn execution(&self, ns: &str, id: &str) -> Value {
        self.get(&format!("/v1/namespaces/{ns}/executions/{id}"))
            .await
    }

    /// A manual run of a workflow (the run, as the API returned it).
    pub async fn trigger_workflow(&self, ns: &str, name: &str) -> Value {
        let (status, v) = self
            .request(
                reqwest::Method::POST,
                &format!("/v1/namespaces/{ns}/workflows/{name}/trigger"),
                None,
            )
            .await;
        assert_eq!(status, 201, "trigger workflow {name}: {v}");
        v
    }

    /// Every run of a workflow (without tasks), newest first, following pages.
    pub async fn runs(&self, ns: &str, workflow: &str) -> Vec<Value> {
        self.all_pages(&format!(
            "/v1/namespaces/{ns}/workflows/{workflow}/runs?limit=1000"
        ))
        .await
    }

    /// One run with its tasks.
    pub async fn run(&self, ns: &str, workflow: &str, id: &str) -> Value {
        self.get(&format!(
            "/v1/namespaces/{ns}/workflows/{workflow}/runs/{id}"
        ))
        .await
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

/// Runs `sundial server --roles ROLES --config FILE` with `config` (TOML) on a fresh SQLite
/// file and waits for it to exit: whether it exited 0, and its standard error. For settings
/// that must stop the server at start.
pub fn server_with(config: &str, roles: &str) -> (bool, String) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("sundial.toml");
    std::fs::write(&path, config).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_sundial"))
        .args(["server", "--roles", roles, "--listen", "127.0.0.1:0"])
        .arg("--database-url")
        .arg(format!(
            "sqlite://{}",
            dir.path().join("db.sqlite").display()
        ))
        .arg("--config")
        .arg(&path)
        .env_remove("SUNDIAL_CONFIG")
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}
