//! The workflow routes in process (docs/workflows.md): every kind of bad workflow is refused
//! with 422 naming its field and nothing is written (docs/guarantees.md#g7-bad-input), and the
//! verbs — create, read, patch with If-Match, list, trigger with params, runs, one run,
//! cancel, retry, delete — answer as docs/workflows.md says.

mod common;

use serde_json::{Value, json};
use sundial_store::WorkflowListQuery;

use common::App;

fn http(path: &str) -> Value {
    json!({"type": "http", "url": format!("http://127.0.0.1:9/{path}")})
}

/// the example workflow of docs/workflows.md, without its schedule.
fn etl() -> Value {
    json!({
        "params": {"region": "eu"},
        "run_timeout": "2h",
        "defaults": {"retry": {"max_attempts": 3, "initial_interval": "5s"}, "timeout": "5m"},
        "tasks": [
            {"name": "extract", "output": "json",
             "target": {"type": "http", "method": "POST", "url": "http://127.0.0.1:9/extract",
                        "body": "{\"region\": {{ run.params.region | json }}}"}},
            {"name": "load", "depends_on": ["extract"], "retry": {"max_attempts": 5},
             "target": {"type": "http", "method": "POST",
                        "url": "http://127.0.0.1:9/load/{{ tasks.extract.output.batch_id }}"}},
            {"name": "alert", "depends_on": ["extract", "load"], "trigger_rule": "one_failed",
             "target": {"type": "nats", "connection": "events", "subject": "etl.failed",
                        "payload": "{{ run.id }}"}}
        ]
    })
}

async fn workflows_in(app: &App, ns: &str) -> usize {
    app.store
        .workflow_list(&WorkflowListQuery {
            namespace: ns.into(),
            limit: 1000,
            ..Default::default()
        })
        .await
        .expect("workflow_list")
        .len()
}

fn fields(body: &Value) -> Vec<String> {
    body["errors"]
        .as_array()
        .map_or(&[][..], Vec::as_slice)
        .iter()
        .filter_map(|e| e["field"].as_str().map(str::to_owned))
        .collect()
}

#[tokio::test]
async fn every_bad_workflow_is_refused_naming_its_field_and_nothing_is_written() {
    let app = App::new().await;
    let with = |edit: &dyn Fn(&mut Value)| {
        let mut body = etl();
        edit(&mut body);
        body
    };
    let many: Vec<Value> = (0..501)
        .map(|i| json!({"name": format!("t{i}"), "target": http("x")}))
        .collect();
    let cases: Vec<(&str, Value, &str, Option<&str>)> = vec![
        (
            "duplicate task names",
            with(&|b| b["tasks"][1]["name"] = json!("extract")),
            "tasks[1].name",
            Some("also the name of tasks[0]"),
        ),
        (
            "an unknown upstream",
            with(&|b| b["tasks"][1]["depends_on"] = json!(["nope"])),
            "tasks[1].depends_on[0]",
            Some("not a task"),
        ),
        (
            "a cycle",
            with(&|b| b["tasks"][0]["depends_on"] = json!(["load"])),
            "tasks[1].depends_on[0]",
            Some("cycle load → extract → load"),
        ),
        (
            "more than 500 tasks",
            json!({"tasks": many}),
            "tasks",
            Some("1 to 500"),
        ),
        ("no tasks", json!({"tasks": []}), "tasks", None),
        (
            "a template naming an unknown task",
            with(&|b| {
                b["tasks"][1]["target"]["url"] = json!("http://h/{{ tasks.ghost.output.x }}")
            }),
            "tasks[1].target.url",
            Some("'ghost'"),
        ),
        (
            "a template naming a task that is not upstream",
            with(&|b| {
                b["tasks"][0]["target"]["body"] = json!("{{ tasks.load.output }}");
            }),
            "tasks[0].target.body",
            Some("not upstream"),
        ),
        (
            "a malformed template",
            with(&|b| b["tasks"][1]["target"]["url"] = json!("http://h/{{ run.id")),
            "tasks[1].target.url",
            Some("no closing"),
        ),
        (
            "output on a target that gives none",
            with(&|b| b["tasks"][2]["output"] = json!("json")),
            "tasks[2].output",
            Some("only http targets"),
        ),
        (
            "an unknown trigger rule",
            with(&|b| b["tasks"][2]["trigger_rule"] = json!("sometimes")),
            "tasks[2].trigger_rule",
            Some("all_success"),
        ),
        (
            "an unknown connection",
            with(&|b| b["tasks"][2]["target"]["connection"] = json!("nowhere")),
            "tasks[2].target.connection",
            None,
        ),
        (
            "a bad run_timeout",
            with(&|b| b["run_timeout"] = json!("soon")),
            "run_timeout",
            None,
        ),
        (
            "params that are not an object",
            with(&|b| b["params"] = json!([1])),
            "params",
            None,
        ),
        (
            "a header that is not allowed",
            with(&|b| b["tasks"][0]["target"]["headers"] = json!({"Host": "x"})),
            "tasks[0].target.headers.Host",
            None,
        ),
    ];
    for (what, body, field, says) in cases {
        let reply = app
            .call(
                "PUT",
                "/v1/namespaces/billing/workflows/etl",
                &[],
                Some(body),
            )
            .await;
        assert_eq!(reply.status.as_u16(), 422, "{what}: {:?}", reply.body);
        assert_eq!(
            reply.headers["content-type"], "application/problem+json",
            "{what}"
        );
        assert!(
            fields(&reply.body).contains(&field.to_string()),
            "{what}: {field} not named in {:?}",
            reply.body
        );
        if let Some(says) = says {
            let message = reply.body["errors"]
                .as_array()
                .and_then(|e| e.iter().find(|e| e["field"] == field))
                .and_then(|e| e["message"].as_str())
                .unwrap_or_default();
            assert!(message.contains(says), "{what}: '{message}' lacks '{says}'");
        }
    }
    assert_eq!(
        workflows_in(&app, "billing").await,
        0,
        "nothing was written"
    );
}

#[tokio::test]
async fn a_workflow_is_written_read_patched_triggered_and_its_runs_cancelled_and_retried() {
    let app = App::new().await;
    let path = "/v1/namespaces/billing/workflows/etl";
    let created = app.call("PUT", path, &[], Some(etl())).await;
    assert_eq!(created.status.as_u16(), 201, "{:?}", created.body);
    assert_eq!(created.headers["etag"], "\"1\"");
    assert_eq!(created.body["state"], "active");
    assert_eq!(created.body["tasks"].as_array().map(Vec::len), Some(3));
    // Written back as read: unchanged.
    let again = app.call("PUT", path, &[], Some(created.body.clone())).await;
    assert_eq!(
        (again.status.as_u16(), again.body["version"].clone()),
        (200, json!(1))
    );
    let stale = app
        .call(
            "PATCH",
            path,
            &[("if-match", "\"7\"")],
            Some(json!({"description": "nightly"})),
        )
        .await;
    assert_eq!(stale.status.as_u16(), 412, "{:?}", stale.body);
    let patched = app
        .call(
            "PATCH",
            path,
            &[("if-match", "\"1\"")],
            Some(json!({"description": "nightly"})),
        )
        .await;
    assert_eq!(patched.status.as_u16(), 200, "{:?}", patched.body);
    assert_eq!(patched.body["version"], 2);
    let listed = app
        .call("GET", "/v1/namespaces/billing/workflows", &[], None)
        .await;
    assert_eq!(listed.body["items"][0]["name"], "etl");

    let bad_params = app
        .call(
            "POST",
            &format!("{path}/trigger"),
            &[],
            Some(json!({"params": "eu"})),
        )
        .await;
    assert_eq!(bad_params.status.as_u16(), 422);
    assert_eq!(fields(&bad_params.body), vec!["params"]);
    let run = app
        .call(
            "POST",
            &format!("{path}/trigger"),
            &[],
            Some(json!({"params": {"region": "us"}})),
        )
        .await;
    assert_eq!(run.status.as_u16(), 201, "{:?}", run.body);
    assert_eq!(run.body["trigger"], "manual");
    assert_eq!(run.body["state"], "running");
    assert_eq!(run.body["params"], json!({"region": "us"}));
    assert_eq!(run.body["workflow_version"], 2);
    let states: Vec<&str> = run.body["tasks"]
        .as_array()
        .map_or(&[][..], Vec::as_slice)
        .iter()
        .filter_map(|t| t["state"].as_str())
        .collect();
    assert_eq!(states, vec!["queued", "pending", "pending"]);
    let id = run.body["id"].as_str().expect("run id").to_owned();
    let execution = run.body["tasks"][0]["execution_id"].as_str().expect("id");
    let task = app
        .call(
            "GET",
            &format!("/v1/namespaces/billing/executions/{execution}"),
            &[],
            None,
        )
        .await;
    assert_eq!(task.body["run_id"], json!(id));
    assert_eq!(task.body["task"], "extract");
    assert_eq!(task.body["trigger"], "workflow");
    // A trigger without a body runs with the workflow's params.
    let plain = app
        .call("POST", &format!("{path}/trigger"), &[], None)
        .await;
    assert_eq!(plain.status.as_u16(), 201, "{:?}", plain.body);
    assert_eq!(plain.body["params"], json!({"region": "eu"}));

    let runs = app.call("GET", &format!("{path}/runs"), &[], None).await;
    assert_eq!(runs.body["items"].as_array().map(Vec::len), Some(2));
    let one = app
        .call("GET", &format!("{path}/runs/{id}"), &[], None)
        .await;
    assert_eq!(one.body["id"], json!(id));
    let elsewhere = app
        .call(
            "GET",
            &format!("/v1/namespaces/billing/workflows/other/runs/{id}"),
            &[],
            None,
        )
        .await;
    assert_eq!(elsewhere.status.as_u16(), 404);
    let early_retry = app
        .call("POST", &format!("{path}/runs/{id}/retry"), &[], None)
        .await;
    assert_eq!(early_retry.status.as_u16(), 409, "{:?}", early_retry.body);
    let cancelled = app
        .call("POST", &format!("{path}/runs/{id}/cancel"), &[], None)
        .await;
    assert_eq!(cancelled.status.as_u16(), 200, "{:?}", cancelled.body);
    assert_eq!(cancelled.body["state"], "cancelled");
    let twice = app
        .call("POST", &format!("{path}/runs/{id}/cancel"), &[], None)
        .await;
    assert_eq!(twice.status.as_u16(), 409);
    let bad_retry = app
        .call(
            "POST",
            &format!("{path}/runs/{id}/retry"),
            &[],
            Some(json!({"tasks": "load"})),
        )
        .await;
    assert_eq!(bad_retry.status.as_u16(), 422);
    assert_eq!(fields(&bad_retry.body), vec!["tasks"]);
    let unknown_task = app
        .call(
            "POST",
            &format!("{path}/runs/{id}/retry"),
            &[],
            Some(json!({"tasks": ["nope"]})),
        )
        .await;
    assert_eq!(unknown_task.status.as_u16(), 404, "{:?}", unknown_task.body);
    let retried = app
        .call("POST", &format!("{path}/runs/{id}/retry"), &[], None)
        .await;
    assert_eq!(retried.status.as_u16(), 200, "{:?}", retried.body);
    assert_eq!(retried.body["state"], "running");
    assert_eq!(retried.body["tasks"][0]["state"], "queued");

    let paused = app.call("POST", &format!("{path}/pause"), &[], None).await;
    assert_eq!(paused.body["state"], "paused");
    let deleted = app.call("DELETE", path, &[], None).await;
    assert_eq!(deleted.status.as_u16(), 204);
    assert_eq!(app.call("GET", path, &[], None).await.status.as_u16(), 404);
    let after = app
        .call("GET", &format!("{path}/runs/{id}"), &[], None)
        .await;
    assert_eq!(
        after.body["state"], "cancelled",
        "a delete cancels unfinished runs"
    );
    let gone = app
        .call("POST", &format!("{path}/trigger"), &[], None)
        .await;
    assert_eq!(gone.status.as_u16(), 404);
}

#[tokio::test]
async fn apply_writes_several_workflows_all_or_none() {
    let app = App::new().await;
    let url = "/v1/namespaces/billing/workflows:apply";
    let mut bad = etl();
    bad["name"] = json!("second");
    bad["tasks"][1]["depends_on"] = json!(["ghost"]);
    let mut good = etl();
    good["name"] = json!("first");
    let refused = app
        .call(
            "POST",
            url,
            &[],
            Some(json!({"workflows": [good.clone(), bad]})),
        )
        .await;
    assert_eq!(refused.status.as_u16(), 422);
    // The unknown upstream, and the template that no longer names an upstream task.
    assert_eq!(
        fields(&refused.body),
        vec![
            "workflows.1.tasks[1].depends_on[0]",
            "workflows.1.tasks[1].target.url"
        ]
    );
    assert_eq!(workflows_in(&app, "billing").await, 0);
    let mut other = etl();
    other["name"] = json!("second");
    let applied = app
        .call("POST", url, &[], Some(json!({"workflows": [good, other]})))
        .await;
    assert_eq!(applied.status.as_u16(), 200, "{:?}", applied.body);
    assert_eq!(applied.body["created"], 2);
    assert_eq!(workflows_in(&app, "billing").await, 2);
}
