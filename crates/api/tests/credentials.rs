//! Plain-text credentials (docs/security.md, "Plain-text credentials"), in process: a job or
//! workflow whose target holds a password in its URL or an `authorization`, `cookie`, ...
//! header in plain text is stored as written (it keeps working) but every answer and page
//! shows `***` with a warning naming the field and the secret syntax; a masked answer written
//! back keeps the stored values; a secret reference is not masked.

use serde_json::{Value, json};

mod common;

use common::App;

fn job() -> Value {
    json!({"schedule": {"every": "1h"},
           "target": {"type": "http", "url": "https://bob:hunter2@example.internal/run",
                      "headers": {"Authorization": "Bearer plain-token", "cookie": "sid=abc",
                                  "x-api-key": "{{ secret.key }}", "content-type": "text/plain"}}})
}

/// A job's answer as a client writes it back: as read, read-only fields and `warnings`
/// included (they are ignored), but the path's name.
fn as_written(answer: &Value) -> Value {
    let mut body = answer.clone();
    if let Some(obj) = body.as_object_mut() {
        obj.remove("name");
    }
    body
}

#[tokio::test]
async fn answers_mask_plain_credentials_and_a_masked_write_keeps_them() {
    let app = App::new().await;
    let put = app
        .call(
            "PUT",
            "/v1/namespaces/creds/secrets/key",
            &[],
            Some(json!({"value": "v"})),
        )
        .await;
    assert_eq!(put.status.as_u16(), 201, "{}", put.body);
    let created = app
        .call("PUT", "/v1/namespaces/creds/jobs/j", &[], Some(job()))
        .await;
    assert_eq!(created.status.as_u16(), 201, "{}", created.body);
    let shown = app
        .call("GET", "/v1/namespaces/creds/jobs/j", &[], None)
        .await;
    let body = &shown.body;
    assert_eq!(
        body["target"]["url"],
        "https://bob:***@example.internal/run"
    );
    assert_eq!(body["target"]["headers"]["Authorization"], "***");
    assert_eq!(body["target"]["headers"]["cookie"], "***");
    assert_eq!(body["target"]["headers"]["x-api-key"], "{{ secret.key }}");
    assert_eq!(body["target"]["headers"]["content-type"], "text/plain");
    let text = body.to_string();
    assert!(
        !text.contains("hunter2") && !text.contains("plain-token") && !text.contains("sid=abc")
    );
    let fields: Vec<&str> = body["warnings"]
        .as_array()
        .expect("warnings")
        .iter()
        .map(|w| w["field"].as_str().unwrap())
        .collect();
    assert_eq!(
        fields,
        [
            "target.url",
            "target.headers.Authorization",
            "target.headers.cookie"
        ]
    );
    assert!(
        body["warnings"][0]["message"]
            .as_str()
            .unwrap()
            .contains("{{ secret.NAME }}"),
        "{body}"
    );
    assert_eq!(
        created.body["warnings"], body["warnings"],
        "the write warns too"
    );

    // The stored job is as written: its deliveries still carry the credentials.
    let stored = app.jobs_in("creds").await;
    let sundial_core::job::TargetSpec::Http(t) = &stored[0].spec.target else {
        panic!("http")
    };
    assert_eq!(t.url, "https://bob:hunter2@example.internal/run");
    assert_eq!(t.headers["Authorization"], "Bearer plain-token");

    // Written back as shown (read-only fields dropped), with one change: the credentials stay.
    let mut back = as_written(body);
    back["description"] = json!("changed");
    let replaced = app
        .call("PUT", "/v1/namespaces/creds/jobs/j", &[], Some(back))
        .await;
    assert_eq!(replaced.status.as_u16(), 200, "{}", replaced.body);
    let stored = app.jobs_in("creds").await;
    let sundial_core::job::TargetSpec::Http(t) = &stored[0].spec.target else {
        panic!("http")
    };
    assert_eq!(stored[0].spec.description, "changed");
    assert_eq!(t.url, "https://bob:hunter2@example.internal/run");
    assert_eq!(t.headers["Authorization"], "Bearer plain-token");
    assert_eq!(t.headers["cookie"], "sid=abc");

    // A mask with nothing stored to keep: a new job written from the masked answer.
    let copy = as_written(body);
    let refused = app
        .call("PUT", "/v1/namespaces/creds/jobs/copy", &[], Some(copy))
        .await;
    assert_eq!(refused.status.as_u16(), 422, "{}", refused.body);
    let fields: Vec<&str> = refused.body["errors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["field"].as_str().unwrap())
        .collect();
    assert_eq!(
        fields,
        [
            "target.url",
            "target.headers.Authorization",
            "target.headers.cookie"
        ]
    );
    assert_eq!(app.jobs_in("creds").await.len(), 1, "nothing written");

    // A plan of a new credential names the change and shows neither value.
    let mut changed = job();
    changed["name"] = json!("j");
    changed["target"]["headers"]["Authorization"] = json!("Bearer rotated-token");
    let plan = app
        .call(
            "POST",
            "/v1/namespaces/creds/jobs:plan",
            &[],
            Some(json!({"jobs": [changed]})),
        )
        .await;
    assert_eq!(plan.status.as_u16(), 200, "{}", plan.body);
    let text = plan.body.to_string();
    assert!(
        !text.contains("plain-token")
            && !text.contains("rotated-token")
            && !text.contains("hunter2"),
        "{text}"
    );
    let change = plan.body["items"][0]["changes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["field"] == "target.headers.Authorization")
        .cloned()
        .unwrap_or_else(|| panic!("no change named: {text}"));
    assert_eq!(
        (&change["before"], &change["after"]),
        (&json!("***"), &json!("***"))
    );

    // The UI's job page shows the mask too.
    use tower::ServiceExt as _;
    let page = app
        .router
        .clone()
        .oneshot(
            axum::http::Request::get("/ui/namespaces/creds/jobs/j")
                .body(axum::body::Body::empty())
                .unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(page.status().as_u16(), 200);
    let html = axum::body::to_bytes(page.into_body(), usize::MAX)
        .await
        .unwrap();
    let html = String::from_utf8_lossy(&html);
    assert!(html.contains("***"), "{html}");
    assert!(
        !html.contains("hunter2") && !html.contains("plain-token"),
        "{html}"
    );
}
