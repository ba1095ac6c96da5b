//! Helpers shared by the worker's integration tests: a job whose target is an HTTP endpoint
//! of the test, and a wait on the wall clock for a condition.

#![allow(
    dead_code,
    reason = "each test binary compiles this module and uses a part of it"
)]

use std::time::Duration;

use sundial_core::job::{HttpTarget, TargetSpec};
use sundial_store::testkit::job_record;
use sundial_store::{JobRecord, JobWrite, PendingExecutions, Store};

/// Job `name` in namespace `ns` whose target POSTs to `url`, not yet written.
pub fn http_job_record(name: &str, url: String) -> JobRecord {
    let mut job = job_record("ns", name);
    job.spec.target = TargetSpec::Http(HttpTarget {
        method: "POST".into(),
        url,
        headers: Default::default(),
        body: None,
        success_codes: Vec::new(),
    });
    job
}

/// Creates `job`; panics if the store refuses it.
pub async fn write_job(store: &dyn Store, job: JobRecord) -> JobRecord {
    store
        .job_write(&JobWrite {
            record: job,
            expected_version: None,
            pending: PendingExecutions::Keep,
        })
        .await
        .expect("create job")
}

/// Creates job `name` in namespace `ns` whose target POSTs to `url`; panics if the store
/// refuses it.
pub async fn http_job(store: &dyn Store, name: &str, url: String) -> JobRecord {
    write_job(store, http_job_record(name, url)).await
}

/// The executions of namespace `ns`, newest first, up to 1,000; panics if the store fails.
pub async fn executions(store: &dyn Store) -> Vec<sundial_store::ExecutionRecord> {
    store
        .execution_list(&sundial_store::ExecutionListQuery {
            namespace: "ns".into(),
            limit: 1000,
            ..Default::default()
        })
        .await
        .expect("list")
}

/// Polls `check` every 20 ms of wall time (a test clock may stand still) for up to 10 s;
/// panics naming `what` if it never holds.
pub async fn eventually(what: &str, mut check: impl AsyncFnMut() -> bool) {
    let waited = tokio::time::timeout(Duration::from_secs(10), async {
        while !check().await {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    assert!(waited.is_ok(), "{what} within 10 s");
}

/// The embedded store in a file of `dir`, on `clock`; panics if it cannot be opened.
pub async fn embedded_store(
    dir: &std::path::Path,
    clock: std::sync::Arc<sundial_clock::ManualClock>,
) -> std::sync::Arc<dyn Store> {
    std::sync::Arc::new(
        sundial_store_sqlite::SqliteStore::open(
            &format!("sqlite://{}", dir.join("w.db").display()),
            clock,
        )
        .await
        .expect("open"),
    )
}

/// Starts a worker on `store` and `clock` with `config` and real targets; returns the sender
/// that stops it (send `true`) and its task, which ends once it has stopped.
pub fn run_worker(
    store: std::sync::Arc<dyn Store>,
    clock: std::sync::Arc<sundial_clock::ManualClock>,
    config: sundial_worker::WorkerConfig,
) -> (
    tokio::sync::watch::Sender<bool>,
    tokio::task::JoinHandle<()>,
) {
    let worker = sundial_worker::Worker::new(
        store,
        clock,
        std::sync::Arc::new(sundial_target::Targets::new().expect("targets")),
        config,
        std::sync::Arc::new(tokio::sync::Notify::new()),
    );
    let (stop, stopped) = tokio::sync::watch::channel(false);
    (stop, tokio::spawn(worker.run(stopped)))
}

/// [`http_job`] with one execution of it at `fire` (its slot and fire time).
pub async fn http_job_firing_at(
    store: &dyn Store,
    name: &str,
    url: String,
    fire: jiff::Timestamp,
) -> JobRecord {
    write_firing_at(store, http_job_record(name, url), fire).await
}

/// Creates `job` and one execution of it firing at `fire`; panics if the store refuses
/// either.
pub async fn write_firing_at(
    store: &dyn Store,
    job: JobRecord,
    fire: jiff::Timestamp,
) -> JobRecord {
    let job = write_job(store, job).await;
    store
        .execution_insert(&sundial_store::testkit::execution(&job, fire))
        .await
        .expect("insert execution");
    job
}

/// Each delivery's path with the test clock's reading when it arrived.
pub type Received = std::sync::Arc<std::sync::Mutex<Vec<(String, jiff::Timestamp)>>>;

/// A loopback HTTP receiver that records each delivery's path with `clock`'s reading when it
/// arrived.
pub async fn receiver(
    clock: std::sync::Arc<sundial_clock::ManualClock>,
) -> (std::net::SocketAddr, Received) {
    let received: Received = std::sync::Arc::default();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    let app = {
        let received = received.clone();
        axum::Router::new().route(
            "/{job}",
            axum::routing::post(
                move |axum::extract::Path(job): axum::extract::Path<String>| async move {
                    received
                        .lock()
                        .expect("lock")
                        .push((job, sundial_clock::Clock::now(&*clock)));
                    "ok"
                },
            ),
        )
    };
    tokio::spawn(async move { axum::serve(listener, app).await });
    (addr, received)
}
