//! `GET /v1/openapi.json` (README.md, "The API"): an OpenAPI 3.1 document generated from the routes,
//! naming every `/v1` route of README.md, "The API", and docs/workflows.md with the schemas of its resources and the
//! problem document. The list below is the contract: a route missing from the document (or
//! one the document names that the list does not) fails the test.

mod common;

use std::collections::BTreeSet;

use axum::http::StatusCode;
use common::App;
use serde_json::Value;

/// Every `/v1` route of README.md, "The API" (jobs, executions, the cron preview, the cluster), docs/workflows.md
/// (workflows and runs) and §10 (the document itself), with `GET /v1/namespaces` and
/// docs/security.md (the signing keys and secrets).
const ROUTES: &[(&str, &str)] = &[
    ("get", "/v1/openapi.json"),
    ("get", "/v1/cluster"),
    ("get", "/v1/namespaces"),
    ("get", "/v1/namespaces/{ns}/signing-keys"),
    ("get", "/v1/namespaces/{ns}/signing-keys/{id}"),
    ("get", "/v1/namespaces/{ns}/audit"),
    ("get", "/v1/namespaces/{ns}/audit:verify"),
    ("get", "/v1/namespaces/{ns}/secrets"),
    ("put", "/v1/namespaces/{ns}/secrets/{name}"),
    ("delete", "/v1/namespaces/{ns}/secrets/{name}"),
    ("post", "/v1/cron/next"),
    ("get", "/v1/namespaces/{ns}/jobs"),
    ("post", "/v1/namespaces/{ns}/jobs"),
    ("post", "/v1/namespaces/{ns}/jobs:apply"),
    ("post", "/v1/namespaces/{ns}/jobs:plan"),
    ("get", "/v1/namespaces/{ns}/calendars"),
    ("get", "/v1/namespaces/{ns}/calendars/{name}"),
    ("put", "/v1/namespaces/{ns}/calendars/{name}"),
    ("delete", "/v1/namespaces/{ns}/calendars/{name}"),
    ("get", "/v1/namespaces/{ns}/jobs/{name}"),
    ("put", "/v1/namespaces/{ns}/jobs/{name}"),
    ("patch", "/v1/namespaces/{ns}/jobs/{name}"),
    ("delete", "/v1/namespaces/{ns}/jobs/{name}"),
    ("post", "/v1/namespaces/{ns}/jobs/{name}/pause"),
    ("post", "/v1/namespaces/{ns}/jobs/{name}/resume"),
    ("post", "/v1/namespaces/{ns}/jobs/{name}/trigger"),
    ("post", "/v1/namespaces/{ns}/jobs/{name}/backfill"),
    ("get", "/v1/namespaces/{ns}/jobs/{name}/backfills"),
    ("get", "/v1/namespaces/{ns}/jobs/{name}/backfills/{id}"),
    (
        "post",
        "/v1/namespaces/{ns}/jobs/{name}/backfills/{id}/cancel",
    ),
    ("get", "/v1/namespaces/{ns}/jobs/{name}/executions"),
    ("get", "/v1/namespaces/{ns}/executions"),
    ("get", "/v1/namespaces/{ns}/executions/{id}"),
    ("post", "/v1/namespaces/{ns}/executions/{id}/cancel"),
    ("post", "/v1/namespaces/{ns}/executions/{id}/retry"),
    ("get", "/v1/namespaces/{ns}/workflows"),
    ("post", "/v1/namespaces/{ns}/workflows"),
    ("post", "/v1/namespaces/{ns}/workflows:apply"),
    ("get", "/v1/namespaces/{ns}/workflows/{name}"),
    ("put", "/v1/namespaces/{ns}/workflows/{name}"),
    ("patch", "/v1/namespaces/{ns}/workflows/{name}"),
    ("delete", "/v1/namespaces/{ns}/workflows/{name}"),
    ("post", "/v1/namespaces/{ns}/workflows/{name}/pause"),
    ("post", "/v1/namespaces/{ns}/workflows/{name}/resume"),
    ("post", "/v1/namespaces/{ns}/workflows/{name}/trigger"),
    ("post", "/v1/namespaces/{ns}/workflows/{name}/backfill"),
    ("get", "/v1/namespaces/{ns}/workflows/{name}/backfills"),
    ("get", "/v1/namespaces/{ns}/workflows/{name}/backfills/{id}"),
    (
        "post",
        "/v1/namespaces/{ns}/workflows/{name}/backfills/{id}/cancel",
    ),
    ("get", "/v1/namespaces/{ns}/workflows/{name}/runs"),
    ("get", "/v1/namespaces/{ns}/workflows/{name}/runs/{run_id}"),
    (
        "post",
        "/v1/namespaces/{ns}/workflows/{name}/runs/{run_id}/cancel",
    ),
    (
        "post",
        "/v1/namespaces/{ns}/workflows/{name}/runs/{run_id}/retry",
    ),
];

async fn document() -> Value {
    let app = App::new().await;
    let reply = app.call("GET", "/v1/openapi.json", &[], None).await;
    assert_eq!(reply.status, StatusCode::OK);
    reply.body
}

#[tokio::test]
async fn the_document_is_openapi_3_1_and_names_every_route_of_the_spec() {
    let doc = document().await;
    assert!(
        doc["openapi"].as_str().unwrap_or("").starts_with("3.1"),
        "{}",
        doc["openapi"]
    );
    let mut documented = BTreeSet::new();
    for (path, item) in doc["paths"].as_object().expect("paths") {
        for method in ["get", "put", "post", "patch", "delete"] {
            if item.get(method).is_some() {
                documented.insert((method.to_owned(), path.clone()));
            }
        }
    }
    let expected: BTreeSet<(String, String)> = ROUTES
        .iter()
        .map(|(m, p)| ((*m).to_owned(), (*p).to_owned()))
        .collect();
    let missing: Vec<_> = expected.difference(&documented).collect();
    let extra: Vec<_> = documented.difference(&expected).collect();
    assert!(
        missing.is_empty(),
        "routes missing from the document: {missing:?}"
    );
    assert!(extra.is_empty(), "routes the list does not name: {extra:?}");
}

#[tokio::test]
async fn every_documented_route_is_served_and_answers_errors_as_problems() {
    let app = App::new().await;
    for (method, path) in ROUTES {
        let concrete = path
            .replace("{ns}", "ns")
            .replace("{name}", "nothing-here")
            .replace("{id}", "0193a5c4-0000-7000-8000-000000000001")
            .replace("{run_id}", "0193a5c4-0000-7000-8000-000000000002");
        let reply = app.call(&method.to_uppercase(), &concrete, &[], None).await;
        assert!(
            reply.status != StatusCode::METHOD_NOT_ALLOWED
                && !(reply.status == StatusCode::NOT_FOUND
                    && reply.body["detail"] == "no such route"),
            "{method} {concrete} is not served: {} {}",
            reply.status,
            reply.body
        );
        assert!(
            reply.status.as_u16() < 500,
            "{method} {concrete}: {}",
            reply.body
        );
    }
}

#[tokio::test]
async fn the_resources_and_the_problem_document_have_schemas() {
    let doc = document().await;
    let schemas = doc["components"]["schemas"].as_object().expect("schemas");
    for name in [
        "Problem",
        "FieldError",
        "JobResource",
        "JobSpec",
        "TargetSpec",
        "ExecutionResource",
        "AttemptRecord",
        "WorkflowResource",
        "WorkflowSpec",
        "TaskSpec",
        "RunResource",
        "TaskRecord",
    ] {
        assert!(schemas.contains_key(name), "no schema {name}");
    }
    let put = &doc["paths"]["/v1/namespaces/{ns}/jobs/{name}"]["put"];
    assert_eq!(
        put["responses"]["422"]["content"]["application/problem+json"]["schema"]["$ref"],
        "#/components/schemas/Problem"
    );
    assert_eq!(
        put["responses"]["201"]["content"]["application/json"]["schema"]["$ref"],
        "#/components/schemas/JobResource"
    );
}
