//! Secrets (docs/security.md, "Secrets"), end to end on both stores: a secret is written, a
//! job and a workflow task that reference it fire, and its value is then searched for in the
//! whole database (the SQLite files; a `pg_dump` of the PostgreSQL database), the server's
//! log, every API answer and every UI page that shows the job, its executions and the run:
//! it is found only at the receiver. An unknown reference is refused naming the field, a
//! secret in use cannot be deleted (409 naming its users), and the default key is made
//! beside the SQLite database with mode 0600.

mod common;

use std::time::Duration;

use common::{Receiver, Server, ServerOpts};
use serde_json::json;

/// Every API answer and UI page a user would read after the deliveries.
async fn everything_shown(server: &Server, ns: &str) -> String {
    let mut shown = String::new();
    let mut paths = vec![
        format!("/v1/namespaces/{ns}/jobs/with-secret"),
        format!("/v1/namespaces/{ns}/jobs"),
        format!("/v1/namespaces/{ns}/jobs/with-secret/executions"),
        format!("/v1/namespaces/{ns}/executions"),
        format!("/v1/namespaces/{ns}/workflows/with-secret"),
        format!("/v1/namespaces/{ns}/workflows/with-secret/runs"),
        format!("/v1/namespaces/{ns}/secrets"),
        format!("/v1/namespaces/{ns}/audit"),
        format!("/ui/namespaces/{ns}/audit"),
        "/v1/openapi.json".to_owned(),
        "/ui/".to_owned(),
        format!("/ui/namespaces/{ns}/jobs"),
        format!("/ui/namespaces/{ns}/jobs/with-secret"),
        format!("/ui/namespaces/{ns}/workflows/with-secret"),
        format!("/ui/namespaces/{ns}/dead-letters"),
        "/metrics".to_owned(),
    ];
    for e in server
        .all_pages(&format!("/v1/namespaces/{ns}/executions"))
        .await
    {
        let id = e["id"].as_str().unwrap().to_owned();
        paths.push(format!("/v1/namespaces/{ns}/executions/{id}"));
        paths.push(format!("/ui/namespaces/{ns}/executions/{id}"));
    }
    for r in server.runs(ns, "with-secret").await {
        let id = r["id"].as_str().unwrap().to_owned();
        paths.push(format!(
            "/v1/namespaces/{ns}/workflows/with-secret/runs/{id}"
        ));
        paths.push(format!("/ui/namespaces/{ns}/runs/{id}"));
    }
    let http = reqwest::Client::new();
    for path in paths {
        let resp = http.get(server.url(&path)).send().await.unwrap();
        assert!(resp.status().is_success(), "GET {path}: {}", resp.status());
        shown.push_str(&resp.text().await.unwrap());
    }
    shown
}

async fn a_secret_is_found_only_at_the_receiver(
    server: &Server,
    receiver: &Receiver,
    ns: &str,
) -> String {
    let value = format!("s3cr3t-{}", uuid::Uuid::now_v7().simple());
    let (status, put) = server
        .request(
            reqwest::Method::PUT,
            &format!("/v1/namespaces/{ns}/secrets/api-token"),
            Some(json!({"value": value})),
        )
        .await;
    assert_eq!(status, 201, "{put}");
    assert_eq!(put["version"], 1, "{put}");
    assert!(!put.to_string().contains(&value));

    // An unknown reference is refused, naming the field; nothing is written.
    let at = common::whole_second_after(Duration::from_secs(2));
    let (status, refused) = server
        .request(
            reqwest::Method::PUT,
            &format!("/v1/namespaces/{ns}/jobs/unknown-secret"),
            Some(json!({"schedule": {"at": at.to_string()},
                   "target": {"type": "http", "url": receiver.url("secret"),
                              "headers": {"authorization": "Bearer {{ secret.nope }}"}}})),
        )
        .await;
    assert_eq!(status, 422, "{refused}");
    assert_eq!(
        refused["errors"][0]["field"], "target.headers.authorization",
        "{refused}"
    );
    assert!(
        refused["errors"][0]["message"]
            .as_str()
            .unwrap()
            .contains("'nope'"),
        "{refused}"
    );

    server
        .put_job(
            ns,
            "with-secret",
            json!({"schedule": {"at": at.to_string()},
                   "target": {"type": "http", "method": "POST",
                              "url": format!("{}?key={{{{ secret.api-token }}}}", receiver.url("secret")),
                              "headers": {"authorization": "Bearer {{ secret.api-token }}"},
                              "body": "{\"token\": \"{{ secret.api-token }}\"}"}}),
        )
        .await;
    server
        .put_workflow(
            ns,
            "with-secret",
            json!({"tasks": [
                {"name": "first", "target": {"type": "http", "url": receiver.url("wf-first")}},
                {"name": "second", "depends_on": ["first"],
                 "target": {"type": "http", "url": receiver.url("wf-second"),
                            "headers": {"x-api-key": "{{ secret.api-token }}"}}}]}),
        )
        .await;
    server.trigger_workflow(ns, "with-secret").await;
    let deliveries = server
        .wait_for(Duration::from_secs(30), async || {
            let job = receiver.for_path("secret");
            let task = receiver.for_path("wf-second");
            (!job.is_empty() && !task.is_empty()).then_some((job, task))
        })
        .await;
    let (job, task) = deliveries;
    let header = |d: &common::Delivery, name: &str| {
        d.headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.clone())
            .unwrap_or_default()
    };
    assert_eq!(header(&job[0], "authorization"), format!("Bearer {value}"));
    assert_eq!(job[0].body, format!("{{\"token\": \"{value}\"}}"));
    assert_eq!(header(&task[0], "x-api-key"), value);

    // In use: 409 naming its users, and it stays.
    let (status, conflict) = server
        .request(
            reqwest::Method::DELETE,
            &format!("/v1/namespaces/{ns}/secrets/api-token"),
            None,
        )
        .await;
    assert_eq!(status, 409, "{conflict}");
    let detail = conflict["detail"].as_str().unwrap_or_default();
    assert!(
        detail.contains("job with-secret") && detail.contains("workflow with-secret"),
        "{conflict}"
    );

    // Wait for the executions to be written as they ended, then look everywhere.
    server
        .wait_for(Duration::from_secs(30), async || {
            let runs = server.runs(ns, "with-secret").await;
            let done = runs.iter().all(|r| r["state"] == "succeeded");
            let history = server.history(ns, "with-secret").await;
            (done && history.iter().all(|e| e["state"] == "succeeded")).then_some(())
        })
        .await;
    let shown = everything_shown(server, ns).await;
    assert!(
        !shown.contains(&value),
        "an API answer or UI page shows the value"
    );
    assert!(
        shown.contains("{{ secret.api-token }}"),
        "the job shows the reference"
    );
    let log = server.log();
    assert!(!log.contains(&value), "the server's log holds the value");
    value
}

/// Every file in `dir` whose bytes hold `value`.
fn files_holding(dir: &std::path::Path, value: &str) -> Vec<String> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_file() {
            let bytes = std::fs::read(&path).unwrap();
            if bytes.windows(value.len()).any(|w| w == value.as_bytes()) {
                found.push(path.display().to_string());
            }
        }
    }
    found
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_sqlite_the_value_reaches_the_receiver_and_nothing_else() {
    let receiver = Receiver::start().await;
    let server = Server::start().await;
    let key = server.dir.join("sundial.db.secrets-key");
    let mode = std::os::unix::fs::PermissionsExt::mode(
        &std::fs::metadata(&key)
            .expect("the default key beside the database")
            .permissions(),
    );
    assert_eq!(mode & 0o777, 0o600);
    let value = a_secret_is_found_only_at_the_receiver(&server, &receiver, "billing").await;
    let holding = files_holding(&server.dir, &value);
    assert!(holding.is_empty(), "files holding the value: {holding:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_postgresql_the_value_reaches_the_receiver_and_nothing_else() {
    let db = sundial_store_postgres::testing::TestDatabase::create("sundial_secrets").await;
    let dir = tempfile::tempdir().unwrap();
    let key = dir.path().join("secrets.key");
    std::fs::write(&key, sundial_core::secrets::SecretsKey::generate()).unwrap();
    let config = dir.path().join("sundial.toml");
    std::fs::write(
        &config,
        format!("secrets_key_file = \"{}\"\n", key.display()),
    )
    .unwrap();
    let receiver = Receiver::start().await;
    let server = Server::start_with(
        dir.path(),
        ServerOpts {
            database_url: Some(db.url().to_owned()),
            args: vec!["--config".into(), config.display().to_string()],
            ..ServerOpts::default()
        },
    )
    .await;
    let value = a_secret_is_found_only_at_the_receiver(&server, &receiver, "billing").await;
    let dump = std::process::Command::new("pg_dump")
        .args(["--data-only", db.url()])
        .output()
        .unwrap();
    assert!(dump.status.success(), "{dump:?}");
    let dump = String::from_utf8_lossy(&dump.stdout);
    assert!(
        dump.contains("api-token"),
        "the dump holds the secrets table"
    );
    assert!(!dump.contains(&value), "the database holds the value");
}
