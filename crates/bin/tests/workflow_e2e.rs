//! Workflows end to end (docs/workflows.md): the real binary on its embedded store delivers a
//! run's tasks to a real loopback receiver — an upstream's JSON output rendered into its
//! downstream's URL and body once, so a retry sends the same bytes; a failing task ends its
//! downstream `upstream_failed` and fires the `one_failed` alert; an output that is not JSON
//! fails its task for good.

mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, Uri};
use serde_json::{Value, json};

use common::Server;

/// One request the receiver got: path, attempt, body.
type Seen = Arc<Mutex<Vec<(String, u32, String)>>>;

async fn receive(
    State(seen): State<Seen>,
    uri: Uri,
    headers: HeaderMap,
    body: String,
) -> (StatusCode, String) {
    // The path as sent, not percent-decoded.
    let path = uri.path().trim_start_matches('/').to_owned();
    let attempt: u32 = headers
        .get("sundial-attempt")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    seen.lock()
        .expect("receiver log")
        .push((path.clone(), attempt, body));
    match path.as_str() {
        "extract" => (StatusCode::OK, r#"{"batch_id": "b 7", "rows": 3}"#.into()),
        p if p.starts_with("load") && attempt <= 1 => {
            (StatusCode::SERVICE_UNAVAILABLE, String::new())
        }
        "bad" => (StatusCode::BAD_REQUEST, "no such tenant".into()),
        "not-json" => (StatusCode::OK, "<html>".into()),
        _ => (StatusCode::OK, String::new()),
    }
}

async fn receiver() -> (String, Seen) {
    let seen: Seen = Arc::default();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let base = format!("http://{}", listener.local_addr().expect("addr"));
    let app = axum::Router::new()
        .fallback(receive)
        .with_state(seen.clone());
    tokio::spawn(async move { axum::serve(listener, app).await });
    (base, seen)
}

async fn finished_run(server: &Server, workflow: &str, run_id: &str) -> Value {
    let path = format!("/v1/namespaces/e2e/workflows/{workflow}/runs/{run_id}");
    server
        .wait_for(Duration::from_secs(30), async || {
            let run = server.get(&path).await;
            let state = run["state"].as_str().unwrap_or("");
            (!["scheduled", "running"].contains(&state)).then_some(run)
        })
        .await
}

fn task_states(run: &Value) -> Vec<(String, String)> {
    run["tasks"]
        .as_array()
        .map_or(&[][..], Vec::as_slice)
        .iter()
        .map(|t| {
            (
                t["name"].as_str().unwrap_or("").to_owned(),
                t["state"].as_str().unwrap_or("").to_owned(),
            )
        })
        .collect()
}

async fn put_and_trigger(server: &Server, name: &str, body: Value, params: Value) -> String {
    let (status, v) = server
        .request(
            reqwest::Method::PUT,
            &format!("/v1/namespaces/e2e/workflows/{name}"),
            Some(body),
        )
        .await;
    assert_eq!(status, 201, "PUT workflow {name}: {v}");
    let (status, run) = server
        .request(
            reqwest::Method::POST,
            &format!("/v1/namespaces/e2e/workflows/{name}/trigger"),
            Some(json!({"params": params})),
        )
        .await;
    assert_eq!(status, 201, "trigger {name}: {run}");
    run["id"].as_str().expect("run id").to_owned()
}

#[tokio::test]
async fn an_output_is_rendered_once_into_its_downstream_and_a_retry_sends_the_same_bytes() {
    let server = Server::start().await;
    let (base, seen) = receiver().await;
    let run_id = put_and_trigger(
        &server,
        "etl",
        json!({"defaults": {"retry": {"max_attempts": 3, "initial_interval": "100ms", "jitter": false}},
               "tasks": [
            {"name": "extract", "output": "json", "target": {"type": "http", "url": format!("{base}/extract")}},
            {"name": "load", "depends_on": ["extract"],
             "target": {"type": "http", "url": format!("{base}/load/{{{{ tasks.extract.output.batch_id }}}}"),
                        "body": "{\"region\": {{ run.params.region | json }}, \"rows\": {{ tasks.extract.output.rows }}}"}},
            {"name": "alert", "depends_on": ["extract", "load"], "trigger_rule": "one_failed",
             "target": {"type": "http", "url": format!("{base}/alert")}}
        ]}),
        json!({"region": "eu west"}),
    )
    .await;
    let run = finished_run(&server, "etl", &run_id).await;
    assert_eq!(run["state"], "succeeded", "{run}");
    assert_eq!(
        task_states(&run),
        vec![
            ("extract".into(), "succeeded".into()),
            ("load".into(), "succeeded".into()),
            ("alert".into(), "skipped".into())
        ]
    );
    assert_eq!(
        run["tasks"][0]["output"],
        json!({"batch_id": "b 7", "rows": 3})
    );
    let log = seen.lock().expect("log").clone();
    let loads: Vec<&(String, u32, String)> = log
        .iter()
        .filter(|(p, _, _)| p.starts_with("load"))
        .collect();
    assert_eq!(
        loads.len(),
        2,
        "attempt 1 refused, attempt 2 accepted: {log:?}"
    );
    assert_eq!(
        loads[0].0, "load/b%207",
        "the output's text, percent-encoded in the URL"
    );
    assert_eq!(loads[0].2, r#"{"region": "eu west", "rows": 3}"#);
    assert_eq!(
        (&loads[0].0, &loads[0].2),
        (&loads[1].0, &loads[1].2),
        "the retry sent the same bytes"
    );
    assert_eq!((loads[0].1, loads[1].1), (1, 2));
    assert!(
        log.iter().all(|(p, _, _)| p != "alert"),
        "the alert did not run"
    );
}

#[tokio::test]
async fn a_failure_ends_what_depends_on_it_and_fires_the_alert() {
    let server = Server::start().await;
    let (base, seen) = receiver().await;
    let run_id = put_and_trigger(
        &server,
        "tenant",
        json!({"tasks": [
            {"name": "sync", "target": {"type": "http", "url": format!("{base}/bad")}},
            {"name": "report", "depends_on": ["sync"], "target": {"type": "http", "url": format!("{base}/report")}},
            {"name": "parse", "output": "json", "target": {"type": "http", "url": format!("{base}/not-json")}},
            {"name": "alert", "depends_on": ["sync"], "trigger_rule": "one_failed",
             "target": {"type": "http", "url": format!("{base}/alert"), "body": "{{ run.id }}"}}
        ]}),
        json!({}),
    )
    .await;
    let run = finished_run(&server, "tenant", &run_id).await;
    assert_eq!(run["state"], "failed", "{run}");
    assert_eq!(
        task_states(&run),
        vec![
            ("sync".into(), "failed".into()),
            ("report".into(), "upstream_failed".into()),
            ("parse".into(), "failed".into()),
            ("alert".into(), "succeeded".into())
        ]
    );
    let log = seen.lock().expect("log").clone();
    let alerts: Vec<&(String, u32, String)> = log.iter().filter(|(p, _, _)| p == "alert").collect();
    assert_eq!(alerts.len(), 1);
    assert_eq!(alerts[0].2, run_id, "the alert's body is the run id");
    assert!(log.iter().all(|(p, _, _)| p != "report"));
    // The output that is not JSON failed its task for good, saying why.
    let parse = run["tasks"][2]["execution_id"].as_str().expect("id");
    let execution = server
        .get(&format!("/v1/namespaces/e2e/executions/{parse}"))
        .await;
    let error = execution["attempts"][0]["error"].as_str().unwrap_or("");
    assert!(error.contains("not JSON"), "{execution}");
    assert_eq!(execution["attempts"].as_array().map(Vec::len), Some(1));
}
