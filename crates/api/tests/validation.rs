//! The API's error contract (README.md "The API", docs/guarantees.md#g7-bad-input), in process: every kind of bad input gets the
//! right status and an `application/problem+json` document naming every offending field, and
//! nothing is written; plus the happy paths of the job routes and the cron preview.

use std::collections::BTreeSet;
use std::sync::Arc;

use axum::body::Body;
use axum::http::{Request, StatusCode, header};
use serde_json::{Value, json};

mod common;

use common::{App, Reply};

/// A valid job body: a cron schedule and an HTTP target.
fn job() -> Value {
    json!({
        "description": "a valid job",
        "labels": {"team": "payments"},
        "schedule": {"cron": "0 2 * * *", "timezone": "Europe/Berlin"},
        "target": {"type": "http", "method": "POST", "url": "https://example.internal/run",
                   "headers": {"content-type": "application/json"}, "body": "{}"},
        "retry": {"max_attempts": 5, "initial_interval": "1s", "multiplier": 2.0,
                  "max_interval": "10m", "jitter": true},
        "timeout": "5m"
    })
}

/// [`job`] with `edit` applied.
fn job_with(edit: impl FnOnce(&mut Value)) -> Value {
    let mut v = job();
    edit(&mut v);
    v
}

/// [`job`] with `pointer` (a JSON pointer into an existing object) set to `value`.
fn set(pointer: &str, value: Value) -> Value {
    job_with(|j| {
        let (parent, key) = pointer.rsplit_once('/').expect("pointer");
        j.pointer_mut(parent)
            .and_then(Value::as_object_mut)
            .unwrap_or_else(|| panic!("no object at {parent}"))
            .insert(key.to_owned(), value);
    })
}

/// [`job`] without the member at `pointer`.
fn without(pointer: &str) -> Value {
    job_with(|j| {
        let (parent, key) = pointer.rsplit_once('/').expect("pointer");
        j.pointer_mut(parent)
            .and_then(Value::as_object_mut)
            .unwrap_or_else(|| panic!("no object at {parent}"))
            .remove(key);
    })
}

/// One row of the bad-input table.
struct Row {
    what: &'static str,
    method: &'static str,
    path: String,
    headers: Vec<(&'static str, String)>,
    body: Option<Vec<u8>>,
    status: u16,
    fields: Vec<&'static str>,
}

impl Row {
    fn new(what: &'static str, method: &'static str, path: impl Into<String>) -> Row {
        Row {
            what,
            method,
            path: path.into(),
            headers: Vec::new(),
            body: None,
            status: 0,
            fields: Vec::new(),
        }
    }

    /// A JSON body, sent as `application/json`.
    fn json(mut self, body: Value) -> Row {
        self.headers
            .push(("content-type", "application/json".to_owned()));
        self.body = Some(body.to_string().into_bytes());
        self
    }

    /// Raw body bytes with the given content type.
    fn raw(mut self, content_type: &str, body: impl Into<Vec<u8>>) -> Row {
        self.headers.push(("content-type", content_type.to_owned()));
        self.body = Some(body.into());
        self
    }

    fn header(mut self, name: &'static str, value: &str) -> Row {
        self.headers.push((name, value.to_owned()));
        self
    }

    /// Expects `status` and exactly these `errors[].field` names (none when empty).
    fn expect(mut self, status: u16, fields: &[&'static str]) -> Row {
        self.status = status;
        self.fields = fields.to_vec();
        self
    }
}

const NS: &str = "bad-input";
const JOB: &str = "/v1/namespaces/bad-input/jobs/j";
const JOBS: &str = "/v1/namespaces/bad-input/jobs";
/// The namespace of the job the 412 rows are conditional on.
const GUARDED_NS: &str = "guarded";
const GUARDED: &str = "/v1/namespaces/guarded/jobs/kept";

#[allow(clippy::too_many_lines)]
fn rows() -> Vec<Row> {
    let long = "a".repeat(129);
    let oversized = {
        let mut body = job();
        body["description"] = json!("x".repeat(sundial_api::MAX_BODY_BYTES + 1));
        body.to_string().into_bytes()
    };
    let cron_next = "/v1/cron/next";
    vec![
        // Names in the path.
        Row::new(
            "namespace uppercase in path",
            "PUT",
            "/v1/namespaces/Billing/jobs/j",
        )
        .json(job())
        .expect(400, &["namespace"]),
        Row::new(
            "job name uppercase in path",
            "PUT",
            format!("{JOBS}/Nightly"),
        )
        .json(job())
        .expect(400, &["name"]),
        Row::new("job name > 128 in path", "PUT", format!("{JOBS}/{long}"))
            .json(job())
            .expect(400, &["name"]),
        Row::new("job name leading dash in path", "PUT", format!("{JOBS}/-j"))
            .json(job())
            .expect(400, &["name"]),
        Row::new(
            "job name with space in path",
            "PUT",
            format!("{JOBS}/a%20b"),
        )
        .json(job())
        .expect(400, &["name"]),
        Row::new(
            "namespace and name bad in path",
            "PUT",
            "/v1/namespaces/-x/jobs/Y",
        )
        .json(job())
        .expect(400, &["namespace", "name"]),
        Row::new(
            "namespace > 128 on POST",
            "POST",
            format!("/v1/namespaces/{long}/jobs"),
        )
        .json(set("/name", json!("j")))
        .expect(400, &["namespace"]),
        Row::new("path segment not UTF-8", "PUT", format!("{JOBS}/%FF"))
            .json(job())
            .expect(400, &[]),
        // Names in the body.
        Row::new("name uppercase in body", "POST", JOBS)
            .json(set("/name", json!("Nightly")))
            .expect(422, &["name"]),
        Row::new("name > 128 in body", "POST", JOBS)
            .json(set("/name", json!(long)))
            .expect(422, &["name"]),
        Row::new("name leading dash in body", "POST", JOBS)
            .json(set("/name", json!("-j")))
            .expect(422, &["name"]),
        Row::new("name with space in body", "POST", JOBS)
            .json(set("/name", json!("a b")))
            .expect(422, &["name"]),
        Row::new("name empty in body", "POST", JOBS)
            .json(set("/name", json!("")))
            .expect(422, &["name"]),
        Row::new("name empty in body of a PUT", "PUT", JOB)
            .json(set("/name", json!("")))
            .expect(422, &["name"]),
        Row::new("name missing on POST", "POST", JOBS)
            .json(job())
            .expect(422, &["name"]),
        Row::new("name in body differs from path", "PUT", JOB)
            .json(set("/name", json!("other")))
            .expect(422, &["name"]),
        Row::new("namespace in body differs from path", "PUT", JOB)
            .json(set("/namespace", json!("elsewhere")))
            .expect(422, &["namespace"]),
        Row::new("name as a number", "POST", JOBS)
            .json(set("/name", json!(7)))
            .expect(422, &["name"]),
        // Durations.
        Row::new("timeout 'soon'", "PUT", JOB)
            .json(set("/timeout", json!("soon")))
            .expect(422, &["timeout"]),
        Row::new("timeout negative", "PUT", JOB)
            .json(set("/timeout", json!("-5s")))
            .expect(422, &["timeout"]),
        Row::new("timeout without unit", "PUT", JOB)
            .json(set("/timeout", json!("5")))
            .expect(422, &["timeout"]),
        Row::new("timeout zero", "PUT", JOB)
            .json(set("/timeout", json!("0s")))
            .expect(422, &["timeout"]),
        Row::new("timeout as a number", "PUT", JOB)
            .json(set("/timeout", json!(300)))
            .expect(422, &["timeout"]),
        Row::new("heartbeat_timeout sub-millisecond", "PUT", JOB)
            .json(set("/heartbeat_timeout", json!("1ns")))
            .expect(422, &["heartbeat_timeout"]),
        Row::new("heartbeat_timeout under 1s", "PUT", JOB)
            .json(set("/heartbeat_timeout", json!("500ms")))
            .expect(422, &["heartbeat_timeout"]),
        Row::new("misfire_threshold beyond 100 years", "PUT", JOB)
            .json(set("/misfire_threshold", json!("1000y")))
            .expect(422, &["misfire_threshold"]),
        Row::new("jitter not a duration", "PUT", JOB)
            .json(set("/jitter", json!("a bit")))
            .expect(422, &["jitter"]),
        // Schedules.
        Row::new("unknown time zone", "PUT", JOB)
            .json(set("/schedule/timezone", json!("Mars/Olympus")))
            .expect(422, &["schedule.timezone"]),
        Row::new("cron minute 61", "PUT", JOB)
            .json(set("/schedule/cron", json!("61 * * * *")))
            .expect(422, &["schedule.cron"]),
        Row::new("cron with 4 fields", "PUT", JOB)
            .json(set("/schedule/cron", json!("0 2 * *")))
            .expect(422, &["schedule.cron"]),
        Row::new("cron inverted range FRI-SUN", "PUT", JOB)
            .json(set("/schedule/cron", json!("0 2 * * FRI-SUN")))
            .expect(422, &["schedule.cron"]),
        Row::new("cron empty", "PUT", JOB)
            .json(set("/schedule/cron", json!("  ")))
            .expect(422, &["schedule.cron"]),
        Row::new("bad cron and bad zone together", "PUT", JOB)
            .json(set(
                "/schedule",
                json!({"cron": "61 * * * *", "timezone": "Mars/Olympus"}),
            ))
            .expect(422, &["schedule.cron", "schedule.timezone"]),
        Row::new("every below 1s", "PUT", JOB)
            .json(set("/schedule", json!({"every": "500ms"})))
            .expect(422, &["schedule.every"]),
        Row::new("every zero", "PUT", JOB)
            .json(set("/schedule", json!({"every": "0s"})))
            .expect(422, &["schedule.every"]),
        Row::new("at not RFC 3339", "PUT", JOB)
            .json(set("/schedule", json!({"at": "tomorrow at noon"})))
            .expect(422, &["schedule.at"]),
        Row::new("at without offset", "PUT", JOB)
            .json(set("/schedule", json!({"at": "2026-03-28T10:00:00"})))
            .expect(422, &["schedule.at"]),
        Row::new("start_at not RFC 3339", "PUT", JOB)
            .json(set("/schedule/start_at", json!("2026-13-01T00:00:00Z")))
            .expect(422, &["schedule.start_at"]),
        Row::new("end_at before start_at", "PUT", JOB)
            .json(set(
                "/schedule",
                json!({"every": "1m", "start_at": "2026-05-01T00:00:00Z",
                       "end_at": "2026-04-01T00:00:00Z"}),
            ))
            .expect(422, &["schedule.end_at"]),
        Row::new("cron and every", "PUT", JOB)
            .json(set("/schedule/every", json!("5m")))
            .expect(422, &["schedule"]),
        Row::new("cron, at and every", "PUT", JOB)
            .json(set(
                "/schedule",
                json!({"cron": "* * * * *", "at": "2026-05-01T00:00:00Z", "every": "1m"}),
            ))
            .expect(422, &["schedule"]),
        Row::new("none of cron, at, every", "PUT", JOB)
            .json(set("/schedule", json!({"timezone": "UTC"})))
            .expect(422, &["schedule"]),
        Row::new("schedule missing", "PUT", JOB)
            .json(without("/schedule"))
            .expect(422, &["schedule"]),
        Row::new("timezone on an at schedule", "PUT", JOB)
            .json(set(
                "/schedule",
                json!({"at": "2026-05-01T00:00:00Z", "timezone": "UTC"}),
            ))
            .expect(422, &["schedule.timezone"]),
        // Unknown fields.
        Row::new("unknown top-level field", "PUT", JOB)
            .json(set("/colour", json!("blue")))
            .expect(422, &["colour"]),
        Row::new("unknown field in schedule", "PUT", JOB)
            .json(set("/schedule/tz", json!("UTC")))
            .expect(422, &["schedule.tz"]),
        Row::new("unknown field in target", "PUT", JOB)
            .json(set("/target/uri", json!("https://x")))
            .expect(422, &["target.uri"]),
        Row::new("unknown field in retry", "PUT", JOB)
            .json(set("/retry/max_retries", json!(3)))
            .expect(422, &["retry.max_retries"]),
        // Targets.
        Row::new("unknown target type", "PUT", JOB)
            .json(set("/target/type", json!("ftp")))
            .expect(422, &["target.type"]),
        Row::new("target type missing", "PUT", JOB)
            .json(without("/target/type"))
            .expect(422, &["target.type"]),
        Row::new("target missing", "PUT", JOB)
            .json(without("/target"))
            .expect(422, &["target"]),
        Row::new("target url missing", "PUT", JOB)
            .json(without("/target/url"))
            .expect(422, &["target.url"]),
        Row::new("target url not http", "PUT", JOB)
            .json(set("/target/url", json!("ftp://example.internal/run")))
            .expect(422, &["target.url"]),
        Row::new("target url relative", "PUT", JOB)
            .json(set("/target/url", json!("/run")))
            .expect(422, &["target.url"]),
        Row::new("target url without host", "PUT", JOB)
            .json(set("/target/url", json!("http:///run")))
            .expect(422, &["target.url"]),
        Row::new("target url bad port", "PUT", JOB)
            .json(set(
                "/target/url",
                json!("http://example.internal:99999/run"),
            ))
            .expect(422, &["target.url"]),
        Row::new("target method unknown", "PUT", JOB)
            .json(set("/target/method", json!("FETCH")))
            .expect(422, &["target.method"]),
        Row::new("header name with space", "PUT", JOB)
            .json(set("/target/headers", json!({"bad name": "v"})))
            .expect(422, &["target.headers.bad name"]),
        Row::new("header value with CRLF", "PUT", JOB)
            .json(set("/target/headers", json!({"x-a": "v\r\nX-Injected: 1"})))
            .expect(422, &["target.headers.x-a"]),
        Row::new("header value a number", "PUT", JOB)
            .json(set("/target/headers", json!({"x-a": 1})))
            .expect(422, &["target.headers.x-a"]),
        Row::new("success_codes out of range", "PUT", JOB)
            .json(set("/target/success_codes", json!([200, 99, 600])))
            .expect(422, &["target.success_codes.1", "target.success_codes.2"]),
        Row::new("success_codes not an array", "PUT", JOB)
            .json(set("/target/success_codes", json!("200")))
            .expect(422, &["target.success_codes"]),
        Row::new("unknown connection", "PUT", JOB)
            .json(set(
                "/target",
                json!({"type": "nats", "connection": "nope", "subject": "jobs.run"}),
            ))
            .expect(422, &["target.connection"]),
        Row::new("connection of the wrong type", "PUT", JOB)
            .json(set(
                "/target",
                json!({"type": "redis", "connection": "events", "stream": "s"}),
            ))
            .expect(422, &["target.connection"]),
        Row::new("nats connection missing", "PUT", JOB)
            .json(set(
                "/target",
                json!({"type": "nats", "subject": "jobs.run"}),
            ))
            .expect(422, &["target.connection"]),
        Row::new("nats wildcard subject", "PUT", JOB)
            .json(set(
                "/target",
                json!({"type": "nats", "connection": "events", "subject": "jobs.*"}),
            ))
            .expect(422, &["target.subject"]),
        Row::new("target as an array", "PUT", JOB)
            .json(set("/target", json!([])))
            .expect(422, &["target"]),
        // Retry.
        Row::new("max_attempts 0", "PUT", JOB)
            .json(set("/retry/max_attempts", json!(0)))
            .expect(422, &["retry.max_attempts"]),
        Row::new("max_attempts -1", "PUT", JOB)
            .json(set("/retry/max_attempts", json!(-1)))
            .expect(422, &["retry.max_attempts"]),
        Row::new("max_attempts 1.5", "PUT", JOB)
            .json(set("/retry/max_attempts", json!(1.5)))
            .expect(422, &["retry.max_attempts"]),
        Row::new("max_attempts \"3\"", "PUT", JOB)
            .json(set("/retry/max_attempts", json!("3")))
            .expect(422, &["retry.max_attempts"]),
        Row::new("multiplier below 1", "PUT", JOB)
            .json(set("/retry/multiplier", json!(0.5)))
            .expect(422, &["retry.multiplier"]),
        Row::new("max_interval below initial_interval", "PUT", JOB)
            .json(set(
                "/retry",
                json!({"initial_interval": "1m", "max_interval": "10s"}),
            ))
            .expect(422, &["retry.max_interval"]),
        Row::new("retry jitter not a boolean", "PUT", JOB)
            .json(set("/retry/jitter", json!("yes")))
            .expect(422, &["retry.jitter"]),
        Row::new("retry as a string", "PUT", JOB)
            .json(set("/retry", json!("5 times")))
            .expect(422, &["retry"]),
        // DST policy (docs/cron.md, "DST policy").
        Row::new("dst values not among the named", "PUT", JOB)
            .json(set(
                "/schedule/dst",
                json!({"gap": "jump", "fold": "twice", "extra": 1}),
            ))
            .expect(
                422,
                &[
                    "schedule.dst.gap",
                    "schedule.dst.fold",
                    "schedule.dst.extra",
                ],
            ),
        Row::new("dst not an object", "PUT", JOB)
            .json(set("/schedule/dst", json!("skip")))
            .expect(422, &["schedule.dst"]),
        Row::new("dst on an every schedule", "PUT", JOB)
            .json(set(
                "/schedule",
                json!({"every": "1h", "dst": {"gap": "skip"}}),
            ))
            .expect(422, &["schedule.dst"]),
        // Wrong JSON types.
        Row::new("schedule as a string", "PUT", JOB)
            .json(set("/schedule", json!("0 2 * * *")))
            .expect(422, &["schedule"]),
        Row::new("label values as numbers", "PUT", JOB)
            .json(set(
                "/labels",
                json!({"team": 5, "tier": 1.5, "ok": "fine"}),
            ))
            .expect(422, &["labels.team", "labels.tier"]),
        Row::new("labels as an array", "PUT", JOB)
            .json(set("/labels", json!(["team"])))
            .expect(422, &["labels"]),
        Row::new("paused \"yes\"", "PUT", JOB)
            .json(set("/paused", json!("yes")))
            .expect(422, &["paused"]),
        Row::new("description a number", "PUT", JOB)
            .json(set("/description", json!(5)))
            .expect(422, &["description"]),
        // Enumerations.
        Row::new("concurrency_policy unknown", "PUT", JOB)
            .json(set("/concurrency_policy", json!("sometimes")))
            .expect(422, &["concurrency_policy"]),
        Row::new("misfire_policy unknown", "PUT", JOB)
            .json(set("/misfire_policy", json!("never")))
            .expect(422, &["misfire_policy"]),
        // Bodies.
        Row::new("body not JSON", "PUT", JOB)
            .raw("application/json", "{\"schedule\": ")
            .expect(400, &[]),
        Row::new("a key given twice", "PUT", JOB)
            .raw(
                "application/json",
                "{\"name\": \"j\", \"schedule\": {\"cron\": \"* * * * *\", \"cron\": \"0 * * * *\"}}",
            )
            .expect(422, &["schedule.cron"]),
        Row::new("body JSON with trailing garbage", "PUT", JOB)
            .raw("application/json", "{} {}")
            .expect(400, &[]),
        Row::new("empty body", "PUT", JOB)
            .raw("application/json", "")
            .expect(400, &[]),
        Row::new("body a JSON array", "PUT", JOB)
            .json(json!([job()]))
            .expect(422, &[""]),
        Row::new("body a JSON string", "POST", JOBS)
            .json(json!("job"))
            .expect(422, &[""]),
        Row::new("body over 1 MiB", "PUT", JOB)
            .raw("application/json", oversized)
            .expect(413, &[]),
        Row::new("text/plain content type", "PUT", JOB)
            .raw("text/plain", job().to_string())
            .expect(415, &[]),
        Row::new("form content type on POST", "POST", JOBS)
            .raw("application/x-www-form-urlencoded", "name=j")
            .expect(415, &[]),
        // Query parameters.
        Row::new("limit=0", "GET", format!("{JOBS}?limit=0")).expect(400, &["limit"]),
        Row::new("limit=5000", "GET", format!("{JOBS}?limit=5000")).expect(400, &["limit"]),
        Row::new("limit=ten", "GET", format!("{JOBS}?limit=ten")).expect(400, &["limit"]),
        Row::new("paused=maybe", "GET", format!("{JOBS}?paused=maybe")).expect(400, &["paused"]),
        Row::new("label=novalue", "GET", format!("{JOBS}?label=novalue")).expect(400, &["label"]),
        Row::new("label without key", "GET", format!("{JOBS}?label==x")).expect(400, &["label"]),
        Row::new(
            "job list page_token not a token",
            "GET",
            format!("{JOBS}?page_token=Not%20A%20Token"),
        )
        .expect(400, &["page_token"]),
        Row::new(
            "execution page_token not a token",
            "GET",
            "/v1/namespaces/bad-input/executions?page_token=garbage",
        )
        .expect(400, &["page_token"]),
        Row::new(
            "execution state unknown",
            "GET",
            "/v1/namespaces/bad-input/executions?state=exploded",
        )
        .expect(400, &["state"]),
        Row::new(
            "execution job filter not a name",
            "GET",
            "/v1/namespaces/bad-input/executions?job=Foo",
        )
        .expect(400, &["job"]),
        Row::new(
            "job history with an unknown parameter",
            "GET",
            format!("{GUARDED}/executions?job=kept"),
        )
        .expect(400, &["job"]),
        Row::new(
            "job list with an unknown parameter",
            "GET",
            format!("{JOBS}?colour=blue"),
        )
        .expect(400, &["colour"]),
        Row::new(
            "job execution limit=5000",
            "GET",
            format!("{GUARDED}/executions?limit=5000"),
        )
        .expect(400, &["limit"]),
        Row::new(
            "job list in bad namespace",
            "GET",
            "/v1/namespaces/Bad/jobs",
        )
        .expect(400, &["namespace"]),
        // If-Match.
        Row::new("If-Match abc on PUT", "PUT", GUARDED)
            .json(job())
            .header("if-match", "abc")
            .expect(400, &["If-Match"]),
        Row::new("If-Match abc on DELETE", "DELETE", GUARDED)
            .header("if-match", "abc")
            .expect(400, &["If-Match"]),
        Row::new("stale If-Match on PUT", "PUT", GUARDED)
            .json(set("/description", json!("changed")))
            .header("if-match", "\"7\"")
            .expect(412, &[]),
        Row::new("stale If-Match on PATCH", "PATCH", GUARDED)
            .raw(
                "application/merge-patch+json",
                json!({"description": "changed"}).to_string(),
            )
            .header("if-match", "7")
            .expect(412, &[]),
        Row::new("stale If-Match on DELETE", "DELETE", GUARDED)
            .header("if-match", "W/\"7\"")
            .expect(412, &[]),
        Row::new(
            "stale If-Match on pause",
            "POST",
            format!("{GUARDED}/pause"),
        )
        .header("if-match", "7")
        .expect(412, &[]),
        Row::new("If-Match on a job that does not exist", "PUT", JOB)
            .json(job())
            .header("if-match", "1")
            .expect(412, &[]),
        // PATCH.
        Row::new("PATCH that makes the job invalid", "PATCH", GUARDED)
            .raw(
                "application/merge-patch+json",
                json!({"timeout": "soon", "schedule": {"every": "1m"}}).to_string(),
            )
            .expect(422, &["timeout", "schedule"]),
        Row::new("PATCH renaming the job", "PATCH", GUARDED)
            .json(json!({"name": "renamed"}))
            .expect(422, &["name"]),
        Row::new("PATCH removing the target", "PATCH", GUARDED)
            .json(json!({"target": null}))
            .expect(422, &["target"]),
        Row::new("PATCH body an array", "PATCH", GUARDED)
            .json(json!([]))
            .expect(422, &[""]),
        Row::new("PATCH text/plain", "PATCH", GUARDED)
            .raw("text/plain", "{}")
            .expect(415, &[]),
        Row::new("PATCH a job that does not exist", "PATCH", JOB)
            .json(json!({"description": "x"}))
            .expect(404, &[]),
        // Routes.
        Row::new("unknown route", "GET", "/v1/nope").expect(404, &[]),
        Row::new("unknown sub-route", "POST", format!("{GUARDED}/explode")).expect(404, &[]),
        Row::new("method not allowed", "DELETE", JOBS).expect(405, &[]),
        Row::new("GET a job that does not exist", "GET", JOB).expect(404, &[]),
        Row::new(
            "trigger a job that does not exist",
            "POST",
            format!("{JOB}/trigger"),
        )
        .expect(404, &[]),
        Row::new(
            "pause a job that does not exist",
            "POST",
            format!("{JOB}/pause"),
        )
        .expect(404, &[]),
        Row::new("DELETE a job that does not exist", "DELETE", JOB).expect(404, &[]),
        Row::new(
            "executions of a job that never existed",
            "GET",
            format!("{JOB}/executions"),
        )
        .expect(404, &[]),
        // Cron preview.
        Row::new("cron/next invalid cron", "POST", cron_next)
            .json(json!({"cron": "0 2 * *"}))
            .expect(422, &["cron"]),
        Row::new("cron/next everything wrong", "POST", cron_next)
            .json(json!({"cron": 5, "timezone": "Mars/Olympus", "from": "now",
                         "count": 0, "extra": true}))
            .expect(422, &["cron", "timezone", "from", "count", "extra"]),
        Row::new("cron/next bad dst", "POST", cron_next)
            .json(json!({"cron": "0 2 * * *", "dst": {"fold": "middle"}}))
            .expect(422, &["dst.fold"]),
        Row::new("cron/next not JSON", "POST", cron_next)
            .raw("application/json", "cron=* * * * *")
            .expect(400, &[]),
        // One body, many errors: every one of them is reported.
        Row::new("one body, every field wrong", "POST", JOBS)
            .json(json!({
                "namespace": "elsewhere",
                "name": "Bad Name",
                "colour": "blue",
                "description": 5,
                "labels": {"team": 5},
                "schedule": {"cron": "61 * * * *", "timezone": "Mars/Olympus",
                             "start_at": "yesterday", "bogus": 1},
                "target": {"type": "http", "url": "ftp://x", "method": "FETCH",
                           "headers": {"x-a": "a\r\nb"}, "success_codes": [600],
                           "extra": 1},
                "retry": {"max_attempts": 0, "multiplier": 0.5,
                          "initial_interval": "1m", "max_interval": "10s", "jitter": 1},
                "timeout": "soon",
                "heartbeat_timeout": "-5s",
                "misfire_threshold": "5",
                "jitter": "1ns",
                "concurrency_policy": "sometimes",
                "misfire_policy": "never",
                "paused": "yes"
            }))
            .expect(
                422,
                &[
                    "namespace",
                    "name",
                    "colour",
                    "description",
                    "labels.team",
                    "schedule.cron",
                    "schedule.timezone",
                    "schedule.start_at",
                    "schedule.bogus",
                    "target.url",
                    "target.method",
                    "target.headers.x-a",
                    "target.success_codes.0",
                    "target.extra",
                    "retry.max_attempts",
                    "retry.multiplier",
                    "retry.max_interval",
                    "retry.jitter",
                    "timeout",
                    "heartbeat_timeout",
                    "misfire_threshold",
                    "jitter",
                    "concurrency_policy",
                    "misfire_policy",
                    "paused",
                ],
            ),
        // Secrets (docs/security.md, "Secrets").
        Row::new("a job referencing a secret the namespace does not hold", "PUT", JOB)
            .json(set("/target/headers", json!({"authorization": "Bearer {{ secret.nope }}"})))
            .expect(422, &["target.headers.authorization"]),
        Row::new("a job's target with a template other than a secret", "PUT", JOB)
            .json(set("/target/body", json!("{{ run.id }}")))
            .expect(422, &["target.body"]),
        Row::new("a secret reference with the json filter", "PUT", JOB)
            .json(set("/target/body", json!("{{ secret.token | json }}")))
            .expect(422, &["target.body"]),
        Row::new("a secret reference with a bad name", "PUT", JOB)
            .json(set("/target/body", json!("{{ secret.Bad_Name }}")))
            .expect(422, &["target.body"]),
        Row::new("a secret name outside the name pattern", "PUT", format!("/v1/namespaces/{NS}/secrets/Bad_Name"))
            .json(json!({"value": "v"}))
            .expect(400, &["name"]),
        Row::new("a secret value over 64 KiB", "PUT", format!("/v1/namespaces/{NS}/secrets/big"))
            .json(json!({"value": "x".repeat(64 * 1024 + 1)}))
            .expect(422, &["value"]),
        Row::new("a secret value that is not a string", "PUT", format!("/v1/namespaces/{NS}/secrets/num"))
            .json(json!({"value": 42}))
            .expect(422, &["value"]),
        Row::new("a secret body without a value and with another field", "PUT", format!("/v1/namespaces/{NS}/secrets/other"))
            .json(json!({"valu": "v"}))
            .expect(422, &["valu", "value"]),
        Row::new("a secret deleted that does not exist", "DELETE", format!("/v1/namespaces/{NS}/secrets/absent"))
            .expect(404, &[]),
        Row::new("an unknown signing key id", "GET", format!("/v1/namespaces/{NS}/signing-keys/2099-01"))
            .expect(404, &[]),
    ]
}

/// Checks the problem document of an error reply; returns its `errors[].field` names.
fn problem_fields(what: &str, reply: &Reply) -> Vec<String> {
    let ct = reply
        .headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    assert_eq!(ct, "application/problem+json", "{what}: content type");
    let body = &reply.body;
    for key in ["type", "title", "detail"] {
        assert!(
            body[key].as_str().is_some_and(|s| !s.is_empty()),
            "{what}: `{key}` missing from {body}"
        );
    }
    assert_eq!(
        body["status"].as_u64(),
        Some(u64::from(reply.status.as_u16())),
        "{what}: `status` in {body}"
    );
    match &body["errors"] {
        Value::Null => Vec::new(),
        Value::Array(items) => items
            .iter()
            .map(|e| {
                assert!(
                    e["message"].as_str().is_some_and(|m| !m.is_empty()),
                    "{what}: error without a message in {body}"
                );
                e["field"]
                    .as_str()
                    .unwrap_or_else(|| panic!("{what}: error without a field in {body}"))
                    .to_owned()
            })
            .collect(),
        other => panic!("{what}: `errors` is not an array: {other}"),
    }
}

#[tokio::test]
async fn bad_input_is_rejected_with_every_field_named_and_writes_nothing() {
    let app = App::new().await;
    let created = app
        .call("PUT", GUARDED, &[], Some(set("/labels/team", json!("x"))))
        .await;
    assert_eq!(created.status, StatusCode::CREATED, "{}", created.body);
    let before = app.call("GET", GUARDED, &[], None).await.body;

    let rows = rows();
    let kinds: BTreeSet<&str> = rows.iter().map(|r| r.what).collect();
    assert_eq!(kinds.len(), rows.len(), "row descriptions are unique");
    assert!(rows.len() >= 30, "at least 30 kinds of bad input");

    let mut failures = Vec::new();
    let mut namespaces = BTreeSet::from([NS.to_owned(), GUARDED_NS.to_owned()]);
    for row in &rows {
        if let Some(ns) = row.path.strip_prefix("/v1/namespaces/") {
            namespaces.insert(ns.split(['/', '?']).next().unwrap_or("").to_owned());
        }
        let mut request = Request::builder().method(row.method).uri(&row.path);
        for (k, v) in &row.headers {
            request = request.header(*k, v);
        }
        let body = row.body.clone().map_or_else(Body::empty, Body::from);
        let reply = app.send(request.body(body).expect("request")).await;
        if reply.status.as_u16() != row.status {
            failures.push(format!(
                "{}: {} {} → {} (expected {}): {}",
                row.what,
                row.method,
                row.path.chars().take(80).collect::<String>(),
                reply.status,
                row.status,
                reply.body
            ));
            continue;
        }
        let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            problem_fields(row.what, &reply)
        }));
        match result {
            Err(e) => failures.push(
                e.downcast_ref::<String>()
                    .cloned()
                    .unwrap_or_else(|| format!("{}: bad problem document", row.what)),
            ),
            Ok(fields) => {
                let got: BTreeSet<&str> = fields.iter().map(String::as_str).collect();
                let want: BTreeSet<&str> = row.fields.iter().copied().collect();
                if got != want {
                    failures.push(format!(
                        "{}: fields {got:?}, expected {want:?}: {}",
                        row.what, reply.body
                    ));
                }
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} rows failed:\n{}",
        failures.len(),
        rows.len(),
        failures.join("\n")
    );

    // Nothing was written: no job anywhere but the guarded one, which is unchanged, and no
    // execution at all.
    for ns in &namespaces {
        let jobs = app.jobs_in(ns).await;
        let names: Vec<_> = jobs.iter().map(|j| j.spec.name.as_str()).collect();
        let expected: &[&str] = if ns == GUARDED_NS { &["kept"] } else { &[] };
        assert_eq!(names, expected, "jobs in namespace {ns}");
        assert_eq!(
            app.executions_in(ns).await,
            0,
            "executions in namespace {ns}"
        );
    }
    let after = app.call("GET", GUARDED, &[], None).await;
    assert_eq!(after.body["version"], json!(1));
    assert_eq!(after.body, before, "the guarded job is unchanged");
    assert_eq!(
        app.store.execution_next_due().await.expect("next due"),
        None,
        "no execution exists"
    );
}

fn etag(reply: &Reply) -> &str {
    reply
        .headers
        .get(header::ETAG)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
}

#[tokio::test]
async fn put_creates_then_replaces_and_honours_if_match() {
    let app = App::new().await;
    let path = "/v1/namespaces/happy/jobs/nightly";
    let first = app.call("PUT", path, &[], Some(job())).await;
    assert_eq!(first.status, StatusCode::CREATED, "{}", first.body);
    assert_eq!(etag(&first), "\"1\"");
    assert_eq!(first.body["version"], json!(1));
    assert_eq!(first.body["namespace"], json!("happy"));
    assert_eq!(first.body["name"], json!("nightly"));
    assert_eq!(first.body["state"], json!("active"));

    let second = app
        .call("PUT", path, &[], Some(set("/description", json!("again"))))
        .await;
    assert_eq!(second.status, StatusCode::OK, "{}", second.body);
    assert_eq!(etag(&second), "\"2\"");
    assert_eq!(second.body["version"], json!(2));
    assert_eq!(second.body["description"], json!("again"));
    assert_eq!(second.body["created_at"], first.body["created_at"]);

    let third = app
        .call(
            "PUT",
            path,
            &[("if-match", "\"2\"")],
            Some(set("/description", json!("conditional"))),
        )
        .await;
    assert_eq!(third.status, StatusCode::OK, "{}", third.body);
    assert_eq!(third.body["version"], json!(3));

    // A fetched job can be written back as it is; that changes nothing, not even the version.
    let fetched = app.call("GET", path, &[], None).await;
    let back = app
        .call("PUT", path, &[("if-match", "3")], Some(fetched.body))
        .await;
    assert_eq!(back.status, StatusCode::OK, "{}", back.body);
    assert_eq!(back.body["version"], json!(3));
    // If-Match: * names "any existing version": on a job that does not exist it fails.
    let absent = app
        .call(
            "PUT",
            "/v1/namespaces/happy/jobs/absent",
            &[("if-match", "*")],
            Some(fetched_body_for("absent")),
        )
        .await;
    assert_eq!(
        absent.status,
        StatusCode::PRECONDITION_FAILED,
        "{}",
        absent.body
    );
}

fn fetched_body_for(name: &str) -> Value {
    json!({"name": name, "schedule": {"every": "1h"}, "target": {"type": "http", "url": "http://127.0.0.1:9/"}})
}

#[tokio::test]
async fn post_creates_once_and_get_shows_five_fire_times() {
    let app = App::new().await;
    let jobs = "/v1/namespaces/happy/jobs";
    let created = app
        .call("POST", jobs, &[], Some(set("/name", json!("posted"))))
        .await;
    assert_eq!(created.status, StatusCode::CREATED, "{}", created.body);
    assert_eq!(etag(&created), "\"1\"");
    let again = app
        .call("POST", jobs, &[], Some(set("/name", json!("posted"))))
        .await;
    assert_eq!(again.status, StatusCode::CONFLICT, "{}", again.body);
    assert!(problem_fields("409", &again).is_empty());

    let got = app.call("GET", &format!("{jobs}/posted"), &[], None).await;
    assert_eq!(got.status, StatusCode::OK);
    assert_eq!(etag(&got), "\"1\"");
    let times: Vec<jiff::Timestamp> = got.body["next_fire_times"]
        .as_array()
        .expect("next_fire_times")
        .iter()
        .map(|t| t.as_str().expect("string").parse().expect("RFC 3339"))
        .collect();
    assert_eq!(times.len(), 5, "{}", got.body);
    assert!(times.windows(2).all(|w| w[0] < w[1]), "{times:?}");
    let berlin = jiff::tz::TimeZone::get("Europe/Berlin").expect("zone");
    for t in &times {
        let local = t.to_zoned(berlin.clone());
        // 02:00 every day; 03:00 on the day the clocks skip 02:00.
        assert!(
            matches!(local.hour(), 2 | 3) && local.minute() == 0,
            "{local}"
        );
    }
    let next: jiff::Timestamp = got.body["next_fire_at"]
        .as_str()
        .expect("next_fire_at")
        .parse()
        .expect("RFC 3339");
    assert_eq!(next, times[0]);

    // An `every` job's first slot is its creation instant: it is the first of its
    // next_fire_times too, although the read comes a moment after it.
    let every = app
        .call(
            "POST",
            jobs,
            &[],
            Some(json!({"name": "every", "schedule": {"every": "1h"},
                        "target": {"type": "http", "url": "http://127.0.0.1:9/"}})),
        )
        .await;
    assert_eq!(every.status, StatusCode::CREATED, "{}", every.body);
    assert_eq!(
        every.body["next_fire_times"][0], every.body["next_fire_at"],
        "{}",
        every.body
    );
    assert_eq!(
        every.body["next_fire_times"].as_array().map(Vec::len),
        Some(5)
    );
}

#[tokio::test]
async fn list_pages_filters_by_label_and_paused() {
    let app = App::new().await;
    let jobs = "/v1/namespaces/listing/jobs";
    for (name, team, paused) in [
        ("e", "x", false),
        ("a", "x", false),
        ("c", "y", true),
        ("b", "y", false),
        ("d", "x", true),
    ] {
        let body = job_with(|j| {
            j["name"] = json!(name);
            j["labels"] = json!({"team": team});
            j["paused"] = json!(paused);
        });
        let r = app.call("POST", jobs, &[], Some(body)).await;
        assert_eq!(r.status, StatusCode::CREATED, "{}", r.body);
    }

    let mut seen = Vec::new();
    let mut token: Option<String> = None;
    for _ in 0..10 {
        let path = match &token {
            None => format!("{jobs}?limit=2"),
            Some(t) => format!("{jobs}?limit=2&page_token={t}"),
        };
        let page = app.call("GET", &path, &[], None).await;
        assert_eq!(page.status, StatusCode::OK, "{}", page.body);
        let items = page.body["items"].as_array().expect("items");
        assert!(items.len() <= 2);
        seen.extend(items.iter().map(|j| j["name"].as_str().unwrap().to_owned()));
        match &page.body["next_page_token"] {
            Value::Null => {
                token = None;
                break;
            }
            Value::String(t) => token = Some(t.clone()),
            other => panic!("next_page_token {other}"),
        }
    }
    assert!(token.is_none(), "pagination ended");
    let mut sorted = seen.clone();
    sorted.sort();
    sorted.dedup();
    assert_eq!(sorted.len(), seen.len(), "no job twice: {seen:?}");
    assert_eq!(sorted, ["a", "b", "c", "d", "e"]);

    let names = |reply: &Reply| -> Vec<String> {
        reply.body["items"]
            .as_array()
            .expect("items")
            .iter()
            .map(|j| j["name"].as_str().unwrap().to_owned())
            .collect()
    };
    let by_label = app
        .call("GET", &format!("{jobs}?label=team=x"), &[], None)
        .await;
    assert_eq!(by_label.status, StatusCode::OK, "{}", by_label.body);
    assert_eq!(names(&by_label), ["a", "d", "e"]);
    let paused = app
        .call("GET", &format!("{jobs}?paused=true"), &[], None)
        .await;
    assert_eq!(names(&paused), ["c", "d"]);
    let both = app
        .call(
            "GET",
            &format!("{jobs}?paused=false&label=team%3Dx"),
            &[],
            None,
        )
        .await;
    assert_eq!(names(&both), ["a", "e"]);
}

#[tokio::test]
async fn patch_pause_resume_trigger_delete() {
    let app = App::new().await;
    let path = "/v1/namespaces/lifecycle/jobs/j";
    let created = app
        .call(
            "PUT",
            path,
            &[],
            Some(set("/labels", json!({"team": "x", "tier": "gold"}))),
        )
        .await;
    assert_eq!(created.status, StatusCode::CREATED, "{}", created.body);

    // RFC 7396: null removes a member, objects merge, scalars replace.
    let patched = app
        .send(
            Request::builder()
                .method("PATCH")
                .uri(path)
                .header("content-type", "application/merge-patch+json")
                .header("if-match", "\"1\"")
                .body(Body::from(
                    json!({"labels": {"tier": null, "owner": "ops"},
                           "retry": {"max_attempts": 2},
                           "description": "patched"})
                    .to_string(),
                ))
                .expect("request"),
        )
        .await;
    assert_eq!(patched.status, StatusCode::OK, "{}", patched.body);
    assert_eq!(patched.body["version"], json!(2));
    assert_eq!(patched.body["labels"], json!({"team": "x", "owner": "ops"}));
    assert_eq!(patched.body["description"], json!("patched"));
    assert_eq!(patched.body["retry"]["max_attempts"], json!(2));
    assert_eq!(patched.body["retry"]["max_interval"], json!("10m"));
    assert_eq!(patched.body["schedule"]["cron"], json!("0 2 * * *"));

    let paused = app.call("POST", &format!("{path}/pause"), &[], None).await;
    assert_eq!(paused.status, StatusCode::OK, "{}", paused.body);
    assert_eq!(paused.body["state"], json!("paused"));
    assert_eq!(paused.body["paused"], json!(true));
    assert_eq!(paused.body["next_fire_at"], Value::Null);

    let resumed = app.call("POST", &format!("{path}/resume"), &[], None).await;
    assert_eq!(resumed.status, StatusCode::OK, "{}", resumed.body);
    assert_eq!(resumed.body["state"], json!("active"));
    assert!(resumed.body["next_fire_at"].is_string(), "{}", resumed.body);

    let triggered = app
        .call("POST", &format!("{path}/trigger"), &[], None)
        .await;
    assert_eq!(triggered.status, StatusCode::CREATED, "{}", triggered.body);
    assert_eq!(triggered.body["trigger"], json!("manual"));
    assert_eq!(triggered.body["job"], json!("j"));
    assert_eq!(triggered.body["namespace"], json!("lifecycle"));
    let id = triggered.body["id"].as_str().expect("id").to_owned();
    let history = app
        .call("GET", &format!("{path}/executions"), &[], None)
        .await;
    assert_eq!(history.status, StatusCode::OK, "{}", history.body);
    assert_eq!(history.body["items"][0]["id"], json!(id));
    let one = app
        .call(
            "GET",
            &format!("/v1/namespaces/lifecycle/executions/{id}"),
            &[],
            None,
        )
        .await;
    assert_eq!(one.status, StatusCode::OK, "{}", one.body);

    let deleted = app.call("DELETE", path, &[], None).await;
    assert_eq!(deleted.status, StatusCode::NO_CONTENT);
    let gone = app.call("GET", path, &[], None).await;
    assert_eq!(gone.status, StatusCode::NOT_FOUND);
    assert!(problem_fields("404", &gone).is_empty());
    // History outlives the job, and the namespace's listing filters on it by name.
    let history = app
        .call("GET", &format!("{path}/executions"), &[], None)
        .await;
    assert_eq!(history.status, StatusCode::OK, "{}", history.body);
    for (job, expected) in [("j", json!([id])), ("other", json!([]))] {
        let listed = app
            .call(
                "GET",
                &format!("/v1/namespaces/lifecycle/executions?job={job}"),
                &[],
                None,
            )
            .await;
        assert_eq!(listed.status, StatusCode::OK, "{}", listed.body);
        let ids: Vec<Value> = listed.body["items"]
            .as_array()
            .expect("items")
            .iter()
            .map(|e| e["id"].clone())
            .collect();
        assert_eq!(Value::Array(ids), expected, "?job={job}");
    }
}

#[tokio::test]
async fn cron_next_gives_instants_with_offsets_across_dst() {
    let app = App::new().await;
    let reply = app
        .call(
            "POST",
            "/v1/cron/next",
            &[],
            Some(json!({"cron": "0 2 * * *", "timezone": "Europe/Berlin",
                        "from": "2026-03-28T00:00:00Z", "count": 3})),
        )
        .await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.body);
    // 2026-03-29 has no 02:00 in Berlin (02:00 CET → 03:00 CEST): a fixed-time job fires at
    // the first instant after the gap (cronie's rule, docs/cron.md).
    assert_eq!(
        reply.body,
        json!({"fire_times": [
            "2026-03-28T02:00:00+01:00",
            "2026-03-29T03:00:00+02:00",
            "2026-03-30T02:00:00+02:00"
        ]})
    );

    let invalid = app
        .call(
            "POST",
            "/v1/cron/next",
            &[],
            Some(json!({"cron": "61 * * * *", "timezone": "Europe/Berlin"})),
        )
        .await;
    assert_eq!(invalid.status, StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(problem_fields("cron/next", &invalid), ["cron"]);

    // The same expression under `gap: skip`: no slot on the day 02:00 does not exist.
    let skip = app
        .call(
            "POST",
            "/v1/cron/next",
            &[],
            Some(json!({"cron": "0 2 * * *", "timezone": "Europe/Berlin",
                        "from": "2026-03-28T00:00:00Z", "count": 2, "dst": {"gap": "skip"}})),
        )
        .await;
    assert_eq!(
        skip.body,
        json!({"fire_times": ["2026-03-28T02:00:00+01:00", "2026-03-30T02:00:00+02:00"]}),
        "{}",
        skip.body
    );
}

/// A job's DST policy is stored as written, changes its slots, and `GET` previews the next
/// two changes of its zone that touch them (docs/time.md, "DST policy").
#[tokio::test]
async fn a_dst_policy_changes_the_slots_and_get_previews_the_transitions() {
    let app = App::new().await;
    let path = "/v1/namespaces/dst/jobs/nightly";
    let body = json!({"schedule": {"cron": "30 2 * * *", "timezone": "Europe/Berlin",
                                   "dst": {"gap": "skip", "fold": "both"},
                                   "start_at": "2030-01-01T00:00:00Z"},
                      "target": {"type": "http", "url": "http://127.0.0.1:9/"}});
    let put = app.call("PUT", path, &[], Some(body)).await;
    assert_eq!(put.status, StatusCode::CREATED, "{}", put.body);
    assert_eq!(
        put.body["schedule"]["dst"],
        json!({"gap": "skip", "fold": "both"})
    );
    let got = app.call("GET", path, &[], None).await;
    let preview = got.body["dst_preview"].as_array().expect("dst_preview");
    assert_eq!(preview.len(), 2, "{}", got.body);
    // Before 2030 no slot exists (start_at), so the slots listed are those of 2030's changes
    // only: the March gap skips 02:30 (no slot on the 31st), the October fold fires it twice.
    let gap = preview.iter().find(|t| t["kind"] == "gap").expect("a gap");
    let fold = preview
        .iter()
        .find(|t| t["kind"] == "fold")
        .expect("a fold");
    assert_eq!(gap["at"], "2030-03-31T01:00:00Z", "{}", got.body);
    assert_eq!(gap["local_from"], "2030-03-31T02:00:00");
    assert_eq!(gap["local_to"], "2030-03-31T03:00:00");
    assert_eq!(
        gap["slots"],
        json!(["2030-03-30T01:30:00Z", "2030-04-01T00:30:00Z"])
    );
    assert_eq!(fold["at"], "2030-10-27T01:00:00Z");
    assert_eq!(
        fold["slots"],
        json!([
            "2030-10-26T00:30:00Z",
            "2030-10-27T00:30:00Z",
            "2030-10-27T01:30:00Z",
            "2030-10-28T01:30:00Z"
        ])
    );
    assert_eq!(fold["offset_before"], "+02:00", "{}", got.body);
    assert_eq!(fold["offset_after"], "+01:00");

    // A calendar's days are left out of the preview's slots too.
    let holiday = app
        .call(
            "PUT",
            "/v1/namespaces/dst/calendars/autumn",
            &[],
            Some(json!({"timezone": "Europe/Berlin", "exclude": [{"date": "2030-10-27"}]})),
        )
        .await;
    assert_eq!(holiday.status, StatusCode::CREATED, "{}", holiday.body);
    let mut excluding = got.body.clone();
    excluding["schedule"]["exclude_calendars"] = json!(["autumn"]);
    let put = app.call("PUT", path, &[], Some(excluding)).await;
    assert_eq!(put.status, StatusCode::OK, "{}", put.body);
    let got = app.call("GET", path, &[], None).await;
    let fold = got.body["dst_preview"]
        .as_array()
        .and_then(|p| p.iter().find(|t| t["kind"] == "fold"))
        .expect("a fold");
    assert_eq!(
        fold["slots"],
        json!(["2030-10-26T00:30:00Z", "2030-10-28T01:30:00Z"]),
        "{}",
        got.body
    );
    // The dialect's own rule written out is no policy: stored as none, the job unchanged.
    let plain = json!({"schedule": {"cron": "0 3 * * *", "timezone": "Europe/Berlin", "dst": {}},
                       "target": {"type": "http", "url": "http://127.0.0.1:9/"}});
    let put = app
        .call("PUT", "/v1/namespaces/dst/jobs/plain", &[], Some(plain))
        .await;
    assert_eq!(put.status, StatusCode::CREATED, "{}", put.body);
    assert!(put.body["schedule"].get("dst").is_none(), "{}", put.body);
}

/// Writes of one job at the same time without If-Match all succeed: a write that loses the race
/// between its read and its write reads again and is applied over the winner (a PUT that
/// raced a create of the same name replaces it), never answered 412 or 409 for a version the
/// client did not ask for.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_writes_without_if_match_all_apply() {
    let app = Arc::new(App::new().await);
    let mut puts = Vec::new();
    for i in 0..16 {
        let app = app.clone();
        puts.push(tokio::spawn(async move {
            let body = job_with(|j| j["description"] = json!(format!("writer {i}")));
            app.call("PUT", "/v1/namespaces/billing/jobs/same", &[], Some(body))
                .await
                .status
        }));
    }
    let mut statuses = Vec::new();
    for p in puts {
        statuses.push(p.await.expect("task").as_u16());
    }
    statuses.sort_unstable();
    assert_eq!(
        statuses.iter().filter(|s| **s == 201).count(),
        1,
        "{statuses:?}"
    );
    assert!(
        statuses.iter().all(|s| *s == 200 || *s == 201),
        "{statuses:?}"
    );
    let mut patches = Vec::new();
    for i in 0..16 {
        let app = app.clone();
        patches.push(tokio::spawn(async move {
            let path = if i % 2 == 0 {
                "/v1/namespaces/billing/jobs/same/pause"
            } else {
                "/v1/namespaces/billing/jobs/same/resume"
            };
            let (a, b) = tokio::join!(
                app.call(
                    "PATCH",
                    "/v1/namespaces/billing/jobs/same",
                    &[],
                    Some(json!({"description": format!("patch {i}")}))
                ),
                app.call("POST", path, &[], None)
            );
            (a.status.as_u16(), b.status.as_u16())
        }));
    }
    for p in patches {
        assert_eq!(p.await.expect("task"), (200, 200));
    }
}

/// A schedule that can never fire is refused as Quartz refuses such a trigger, naming the
/// field; a write that leaves a schedule alone is not judged, so a job whose `end_at` has
/// passed can still be edited; a one-off `at` in the past fires at once and is accepted.
#[tokio::test]
async fn a_schedule_that_can_never_fire_is_refused_naming_the_field() {
    let app = App::new().await;
    let never = app
        .call(
            "PUT",
            "/v1/namespaces/never/jobs/feb31",
            &[],
            Some(set("/schedule", json!({"cron": "0 0 31 2 *"}))),
        )
        .await;
    assert_eq!(
        never.status,
        StatusCode::UNPROCESSABLE_ENTITY,
        "{}",
        never.body
    );
    assert_eq!(
        never.body["errors"][0]["field"], "schedule.cron",
        "{}",
        never.body
    );
    let past = app
        .call(
            "PUT",
            "/v1/namespaces/never/jobs/over",
            &[],
            Some(set(
                "/schedule",
                json!({"every": "1h", "end_at": "2020-01-01T00:00:00Z"}),
            )),
        )
        .await;
    assert_eq!(
        past.status,
        StatusCode::UNPROCESSABLE_ENTITY,
        "{}",
        past.body
    );
    assert_eq!(
        past.body["errors"][0]["field"], "schedule.end_at",
        "{}",
        past.body
    );
    let batch = app
        .call(
            "POST",
            "/v1/namespaces/never/jobs:apply",
            &[],
            Some(json!({"jobs": [
                set("/name", json!("fine")),
                job_with(|j| {
                    j["name"] = json!("feb30");
                    j["schedule"] = json!({"cron": "0 0 30 2 *"});
                })
            ]})),
        )
        .await;
    assert_eq!(
        batch.status,
        StatusCode::UNPROCESSABLE_ENTITY,
        "{}",
        batch.body
    );
    assert_eq!(
        batch.body["errors"][0]["field"], "jobs.1.schedule.cron",
        "{}",
        batch.body
    );
    for name in ["feb31", "over", "fine", "feb30"] {
        let got = app
            .call(
                "GET",
                &format!("/v1/namespaces/never/jobs/{name}"),
                &[],
                None,
            )
            .await;
        assert_eq!(got.status, StatusCode::NOT_FOUND, "{name} was written");
    }
    // A one-off instant already past fires at once.
    let late = app
        .call(
            "PUT",
            "/v1/namespaces/never/jobs/late",
            &[],
            Some(set("/schedule", json!({"at": "2020-01-01T00:00:00Z"}))),
        )
        .await;
    assert_eq!(late.status, StatusCode::CREATED, "{}", late.body);
    // An end_at a moment away: written; once it has passed, other fields can still change.
    let soon = (jiff::Timestamp::now() + jiff::SignedDuration::from_millis(300)).to_string();
    let ending = app
        .call(
            "PUT",
            "/v1/namespaces/never/jobs/ending",
            &[],
            Some(set("/schedule", json!({"every": "1h", "end_at": soon}))),
        )
        .await;
    assert_eq!(ending.status, StatusCode::CREATED, "{}", ending.body);
    tokio::time::sleep(std::time::Duration::from_millis(400)).await;
    let edited = app
        .call(
            "PUT",
            "/v1/namespaces/never/jobs/ending",
            &[],
            Some(job_with(|j| {
                j["schedule"] = json!({"every": "1h", "end_at": soon});
                j["description"] = json!("edited after its end");
            })),
        )
        .await;
    assert_eq!(edited.status, StatusCode::OK, "{}", edited.body);
}

/// Holiday calendars through the API (docs/time.md, "Calendars"): put, read, bad input named
/// field by field, schedules that name them (and refusal of unknown names), the next fire
/// times without excluded days, the cron preview with them, and no delete while in use.
#[tokio::test]
async fn calendars_exclude_days_and_cannot_be_deleted_while_named() {
    let app = App::new().await;
    let cal = "/v1/namespaces/cal/calendars/weekends";
    let body = json!({"timezone": "Europe/Berlin", "exclude": [{"cron": "* * * * SAT,SUN"}],
                      "description": "no runs at the weekend"});
    let put = app.call("PUT", cal, &[], Some(body.clone())).await;
    assert_eq!(put.status, StatusCode::CREATED, "{}", put.body);
    assert_eq!(put.body["version"], 1);
    let again = app.call("PUT", cal, &[], Some(body)).await;
    assert_eq!(again.status, StatusCode::OK);
    assert_eq!(again.body["version"], 1, "the same spec keeps its version");
    let got = app.call("GET", cal, &[], None).await;
    assert_eq!(got.body["used_by"], json!([]), "{}", got.body);
    let dates = got.body["next_excluded_dates"].as_array().expect("dates");
    assert_eq!(dates.len(), 10);
    for d in dates {
        let date: jiff::civil::Date = d.as_str().expect("text").parse().expect("a date");
        assert!(matches!(
            date.weekday(),
            jiff::civil::Weekday::Saturday | jiff::civil::Weekday::Sunday
        ));
    }

    let bad = app
        .call(
            "PUT",
            "/v1/namespaces/cal/calendars/bad",
            &[],
            Some(json!({"timezone": "Mars/Olympus", "exclude": [{"date": "2026-02-30"}, {"cron": "* *"},
                         {"from": "2027-01-02", "to": "2027-01-01"}], "color": "red"})),
        )
        .await;
    assert_eq!(bad.status, StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(
        problem_fields("calendar", &bad),
        [
            "color",
            "timezone",
            "exclude.0.date",
            "exclude.1.cron",
            "exclude.2.to"
        ]
    );
    assert_eq!(
        app.call("GET", "/v1/namespaces/cal/calendars/bad", &[], None)
            .await
            .status,
        StatusCode::NOT_FOUND
    );

    // A job may only name calendars that exist.
    let job = |cals: Value| {
        json!({"schedule": {"cron": "0 9 * * *", "timezone": "Europe/Berlin", "exclude_calendars": cals},
               "target": {"type": "http", "url": "http://127.0.0.1:9/"}})
    };
    let refused = app
        .call(
            "PUT",
            "/v1/namespaces/cal/jobs/daily",
            &[],
            Some(job(json!(["weekends", "holidays"]))),
        )
        .await;
    assert_eq!(refused.status, StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(
        problem_fields("job", &refused),
        ["schedule.exclude_calendars.1"]
    );
    let created = app
        .call(
            "PUT",
            "/v1/namespaces/cal/jobs/daily",
            &[],
            Some(job(json!(["weekends"]))),
        )
        .await;
    assert_eq!(created.status, StatusCode::CREATED, "{}", created.body);
    let times = created.body["next_fire_times"]
        .as_array()
        .expect("times")
        .clone();
    assert_eq!(times.len(), 5);
    let berlin = jiff::tz::TimeZone::get("Europe/Berlin").expect("zone");
    for t in &times {
        let t: jiff::Timestamp = t.as_str().expect("text").parse().expect("instant");
        let weekday = t.to_zoned(berlin.clone()).weekday();
        assert!(
            !matches!(
                weekday,
                jiff::civil::Weekday::Saturday | jiff::civil::Weekday::Sunday
            ),
            "{t}"
        );
    }
    assert_eq!(created.body["next_fire_at"], times[0]);

    // The cron preview with the same calendar.
    let preview = app
        .call(
            "POST",
            "/v1/cron/next",
            &[],
            Some(json!({"cron": "0 9 * * *", "timezone": "Europe/Berlin", "from": "2027-01-01T00:00:00Z",
                        "count": 3, "namespace": "cal", "exclude_calendars": ["weekends"]})),
        )
        .await;
    assert_eq!(
        preview.body,
        json!({"fire_times": ["2027-01-01T09:00:00+01:00", "2027-01-04T09:00:00+01:00", "2027-01-05T09:00:00+01:00"]}),
    );
    let unknown = app
        .call(
            "POST",
            "/v1/cron/next",
            &[],
            Some(json!({"cron": "0 9 * * *", "exclude_calendars": ["weekends", "nope"]})),
        )
        .await;
    assert_eq!(problem_fields("cron/next", &unknown), ["namespace"]);

    // One answer names every bad field, unknown calendars too.
    let everything = app
        .call(
            "PUT",
            "/v1/namespaces/cal/jobs/other",
            &[],
            Some(json!({"schedule": {"every": "1h", "dst": {"gap": "skip"}, "exclude_calendars": ["nope"]},
                        "target": {"type": "http", "url": "http://127.0.0.1:9/"}})),
        )
        .await;
    assert_eq!(
        problem_fields("job", &everything),
        ["schedule.dst", "schedule.exclude_calendars.0"]
    );
    // The path names the calendar: a body naming another is refused.
    let elsewhere = app
        .call(
            "PUT",
            cal,
            &[],
            Some(json!({"name": "other", "exclude": []})),
        )
        .await;
    assert_eq!(problem_fields("calendar", &elsewhere), ["name"]);
    let twice = app
        .call(
            "POST",
            "/v1/cron/next",
            &[],
            Some(json!({"cron": "0 9 * * *", "namespace": "cal", "exclude_calendars": ["weekends", "weekends"]})),
        )
        .await;
    assert_eq!(problem_fields("cron/next", &twice), ["exclude_calendars.1"]);

    // In use: not deleted, the job named; once unused, deleted.
    let in_use = app.call("DELETE", cal, &[], None).await;
    assert_eq!(in_use.status, StatusCode::CONFLICT, "{}", in_use.body);
    assert!(
        in_use.body["detail"]
            .as_str()
            .unwrap_or("")
            .contains("job daily"),
        "{}",
        in_use.body
    );
    assert_eq!(
        app.call("GET", cal, &[], None).await.body["used_by"],
        json!(["job daily"])
    );
    let list = app
        .call("GET", "/v1/namespaces/cal/calendars", &[], None)
        .await;
    assert_eq!(list.body["items"][0]["name"], "weekends");
    assert_eq!(
        app.call("DELETE", "/v1/namespaces/cal/jobs/daily", &[], None)
            .await
            .status,
        StatusCode::NO_CONTENT
    );
    assert_eq!(
        app.call("DELETE", cal, &[], None).await.status,
        StatusCode::NO_CONTENT
    );
    assert_eq!(
        app.call("DELETE", cal, &[], None).await.status,
        StatusCode::NOT_FOUND
    );
}

/// A NUL character anywhere in a body or a query, and labels, headers and cron expressions
/// past their limits, are refused naming the field on both stores, and nothing is written
/// (PostgreSQL's `text` and `jsonb` cannot hold U+0000; it answered 500 before).
#[tokio::test]
async fn nul_characters_and_oversized_fields_are_refused_on_both_stores() {
    let ns = "nul";
    let job_path = format!("/v1/namespaces/{ns}/jobs/j");
    let many = |n: usize, prefix: &str| -> Value {
        Value::Object(
            (0..n)
                .map(|i| (format!("{prefix}{i}"), json!("v")))
                .collect(),
        )
    };
    // What, method, path, body, expected status, the one field named.
    type Case = (
        &'static str,
        &'static str,
        String,
        Option<Value>,
        u16,
        &'static str,
    );
    let cases: Vec<Case> = vec![
        (
            "NUL in description",
            "PUT",
            job_path.clone(),
            Some(set("/description", json!("a\u{0}b"))),
            422,
            "description",
        ),
        (
            "NUL in a target body",
            "PUT",
            job_path.clone(),
            Some(set("/target/body", json!("\u{0}"))),
            422,
            "target.body",
        ),
        (
            "NUL in a label value",
            "PUT",
            job_path.clone(),
            Some(set("/labels/team", json!("x\u{0}"))),
            422,
            "labels.team",
        ),
        (
            "NUL in a label key",
            "PUT",
            job_path.clone(),
            Some(set("/labels/k\u{0}", json!("v"))),
            422,
            "labels",
        ),
        (
            "NUL in a job of jobs:apply",
            "POST",
            format!("/v1/namespaces/{ns}/jobs:apply"),
            Some(
                json!({"jobs": [job_with(|j| { j["name"] = json!("a"); }), job_with(|j| { j["name"] = json!("b"); j["description"] = json!("\u{0}"); })]}),
            ),
            422,
            "jobs.1.description",
        ),
        (
            "NUL in a workflow's description",
            "PUT",
            format!("/v1/namespaces/{ns}/workflows/w"),
            Some(
                json!({"description": "\u{0}", "tasks": [{"name": "t", "target": {"type": "http", "url": "http://127.0.0.1:9/t"}}]}),
            ),
            422,
            "description",
        ),
        (
            "NUL in the label filter",
            "GET",
            format!("/v1/namespaces/{ns}/jobs?label=k%3Da%00b"),
            None,
            400,
            "label",
        ),
        (
            "65 labels",
            "PUT",
            job_path.clone(),
            Some(set("/labels", many(65, "k"))),
            422,
            "labels",
        ),
        (
            "a label value of 1025 bytes",
            "PUT",
            job_path.clone(),
            Some(set("/labels/team", json!("x".repeat(1025)))),
            422,
            "labels.team",
        ),
        (
            "65 headers",
            "PUT",
            job_path.clone(),
            Some(set("/target/headers", many(65, "x-h"))),
            422,
            "target.headers",
        ),
        (
            "a header value of 8193 bytes",
            "PUT",
            job_path.clone(),
            Some(set("/target/headers/x-big", json!("v".repeat(8193)))),
            422,
            "target.headers.x-big",
        ),
        (
            "a cron expression of 2001 bytes",
            "PUT",
            job_path.clone(),
            Some(set(
                "/schedule/cron",
                json!(format!("*{}", ",1".repeat(1000))),
            )),
            422,
            "schedule.cron",
        ),
    ];
    for (store, app) in [
        ("sqlite", App::new().await),
        ("postgres", App::on_postgres().await),
    ] {
        for (what, method, path, body, status, field) in &cases {
            let reply = app.call(method, path, &[], body.clone()).await;
            assert_eq!(
                reply.status.as_u16(),
                *status,
                "{store}, {what}: {}",
                reply.body
            );
            let fields = problem_fields(what, &reply);
            assert_eq!(fields, [*field], "{store}, {what}: {}", reply.body);
        }
        for path in [
            format!("/v1/namespaces/{ns}/executions/a%00b"),
            format!("/v1/namespaces/{ns}/workflows/w/runs/a%00b"),
        ] {
            let reply = app.call("GET", &path, &[], None).await;
            assert_eq!(
                reply.status,
                StatusCode::BAD_REQUEST,
                "{store}, {path}: {}",
                reply.body
            );
            assert!(problem_fields(&path, &reply).is_empty(), "{store}, {path}");
        }
        assert!(
            app.jobs_in(ns).await.is_empty(),
            "{store}: no job was written"
        );
        let workflows = app
            .call("GET", &format!("/v1/namespaces/{ns}/workflows"), &[], None)
            .await;
        assert_eq!(
            workflows.status,
            StatusCode::OK,
            "{store}: {}",
            workflows.body
        );
        assert_eq!(
            workflows.body["items"],
            json!([]),
            "{store}: no workflow was written"
        );
    }
}
