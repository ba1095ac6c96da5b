//! Turning untrusted JSON into a [`JobSpec`], naming every bad field
//! (docs/guarantees.md#g7-bad-input).
//!
//! Validation walks the JSON value itself instead of deserializing into the spec types, so
//! that one request gets one error per bad field — all of them, not just the first — each with
//! the dotted path of the field (`schedule.cron`, `retry.max_attempts`, `target.headers.x`).
//!
//! Invariants: [`job_from_json`] either returns a spec whose schedule compiles and whose every
//! field is in range, or returns at least one [`FieldError`]; it never panics.

use std::collections::BTreeMap;

use jiff::Timestamp;
use serde_json::{Map, Value};

use crate::allow::HostAllowList;
mod schedule;
mod target;

pub use crate::allow::MAX_URL_LEN;
use crate::duration::Dur;
pub use crate::field_error::FieldError;
use crate::job::{
    AmqpTarget, ConcurrencyPolicy, ContainerTarget, DstFold, DstGap, DstSpec, HttpTarget, JobSpec,
    MisfirePolicy, NatsTarget, RedisTarget, ScheduleKind, ScheduleSpec, TargetSpec,
};
use crate::names::check_name;
use crate::retry::RetryPolicy;
use crate::schedule::Schedule;
pub use crate::walker::{JsonError, merge_patch, nul_characters, parse_json};
use crate::walker::{Walker, join, type_name};

/// What validation needs to know about the server.
#[derive(Debug, Clone, Default)]
pub struct Context {
    /// Named connections from server config: name → type (`nats`, `amqp`, `redis`, `container`).
    pub connections: BTreeMap<String, String>,
    /// The namespace from the request path.
    pub namespace: String,
    /// The job name from the request path (PUT, PATCH), if any.
    pub name: Option<String>,
    /// The server's `[http_targets] allow` list; `None`: HTTP targets may reach any host.
    pub http_allow: Option<std::sync::Arc<HostAllowList>>,
}

/// Most labels a job or a workflow may carry: 64.
pub const MAX_LABELS: usize = 64;

/// Longest label value, in bytes: 1,024 (keys: 1 to 128 bytes).
pub const MAX_LABEL_VALUE_LEN: usize = 1024;

/// Most headers a target may set: 64.
pub const MAX_HEADERS: usize = 64;

/// Longest header value a target may set, in bytes: 8,192, the size of a whole header
/// section that common servers accept by default (nginx's `large_client_header_buffers`
/// buffer, Apache's `LimitRequestFieldSize`); a longer one would fail every attempt at the
/// receiver, so it is refused when the job is written.
pub const MAX_HEADER_VALUE_LEN: usize = 8192;

/// Longest cron expression, in bytes: 1,024 (the longest meaningful one, every value of every
/// field listed, is shorter).
pub const MAX_CRON_LEN: usize = 1024;

/// Headers Sundial sets on every HTTP delivery (docs/failure-classes.md, "http"), in this
/// order: `Idempotency-Key`, `Sundial-Execution-Id`, `Sundial-Attempt`,
/// `Sundial-Scheduled-At`; the HTTP target sets them under these names, and a job may not set
/// them itself.
pub const SUNDIAL_HEADERS: [&str; 4] = [
    "idempotency-key",
    "sundial-execution-id",
    "sundial-attempt",
    "sundial-scheduled-at",
];

/// Headers that describe the message or the connection rather than the request, which the
/// HTTP client derives from the URL and the body: `Host` (RFC 9110 §7.2; a job's own would
/// send the request to one host under the name of another, past the `[http_targets]` allow
/// list), `Content-Length` and `Transfer-Encoding` (the framing, RFC 9112 §6), and the
/// connection options of RFC 9110 §7.6.1 and §7.8.
pub const MESSAGE_HEADERS: [&str; 8] = [
    "host",
    "content-length",
    "transfer-encoding",
    "connection",
    "keep-alive",
    "te",
    "trailer",
    "upgrade",
];

/// Read-only fields of the job resource: accepted on input (so a fetched job can be written
/// back as it is) and ignored.
pub const READ_ONLY_FIELDS: [&str; 9] = [
    "warnings",
    "state",
    "version",
    "created_at",
    "updated_at",
    "next_fire_at",
    "next_fire_times",
    "dst_preview",
    "last_execution",
];

const JOB_FIELDS: [&str; 14] = [
    "namespace",
    "name",
    "description",
    "labels",
    "schedule",
    "target",
    "retry",
    "timeout",
    "heartbeat_timeout",
    "concurrency_policy",
    "misfire_policy",
    "misfire_threshold",
    "jitter",
    "paused",
];

/// Validates a job body.
///
/// # Errors
/// Every bad field, each once, in document order: wrong types, unknown fields, bad names,
/// durations, instants, zones, cron expressions, targets, unknown connections, out-of-range
/// numbers, `end_at` not after `start_at`, a namespace or name that disagrees with the path.
pub fn job_from_json(body: &Value, ctx: &Context) -> Result<JobSpec, Vec<FieldError>> {
    let mut v = Walker::default();
    let Some(obj) = body.as_object() else {
        return Err(vec![FieldError::new("", "the body must be a JSON object")]);
    };
    v.unknown_fields(obj, "", &JOB_FIELDS, &READ_ONLY_FIELDS);

    let (namespace, name) = v.identity(obj, ctx);
    let (description, labels) = v.about(obj);
    let schedule = match obj.get("schedule") {
        Some(s) => v.schedule(s),
        None => {
            v.err("schedule", "is required");
            None
        }
    };
    let target = match obj.get("target") {
        // A job's target may reference secrets, rendered by the worker at send time
        // (docs/security.md, "Secrets"); no other template.
        Some(t) if t.to_string().contains("{{") => {
            let mut refs = Vec::new();
            let target = crate::workflow::validate::templated_target(&mut v, t, ctx, &mut refs);
            for (field, r) in refs {
                if !matches!(r, crate::workflow::template::Ref::Secret(_)) {
                    v.err(
                        field,
                        format!(
                            "{{{{ {r} }}}}: a job's target may reference only secrets ({{{{ secret.NAME }}}}); run and task templates are for workflows"
                        ),
                    );
                }
            }
            target.filter(|_| v.errors.is_empty())
        }
        Some(t) => v.target(t, ctx),
        None => {
            v.err("target", "is required");
            None
        }
    };
    let retry = v.retry(obj.get("retry"));
    let timeout = v.duration(obj, "timeout", "timeout", Dur::from_secs(300), true);
    let heartbeat_timeout = v.duration(
        obj,
        "heartbeat_timeout",
        "heartbeat_timeout",
        Dur::from_secs(30),
        true,
    );
    if heartbeat_timeout.as_millis() > 0 && heartbeat_timeout.as_millis() < 1000 {
        v.err("heartbeat_timeout", "must be at least 1s");
    }
    let Policies {
        concurrency_policy,
        misfire_policy,
        misfire_threshold,
        jitter,
    } = v.policies(obj, schedule.as_ref());
    let paused = v.opt_bool(obj, "paused", "paused").unwrap_or(false);

    match (schedule, target, v.errors.is_empty()) {
        (Some(schedule), Some(target), true) => Ok(JobSpec {
            namespace,
            name,
            description,
            labels,
            schedule,
            target,
            retry,
            timeout,
            heartbeat_timeout,
            concurrency_policy,
            misfire_policy,
            misfire_threshold,
            jitter,
            paused,
        }),
        _ => Err(v.errors),
    }
}

/// The shortest gap between consecutive slots of a recurring schedule: the interval of an
/// `every` schedule; for a cron schedule, the smallest gap among its first 16 slots after
/// 2026-01-01 (bounds ignored). `None` for a one-off schedule.
fn shortest_interval(spec: &ScheduleSpec) -> Option<Dur> {
    match &spec.kind {
        ScheduleKind::At { .. } => None,
        ScheduleKind::Every { every } => Some(*every),
        ScheduleKind::Cron { .. } => {
            let unbounded = ScheduleSpec {
                start_at: None,
                end_at: None,
                ..spec.clone()
            };
            let schedule = Schedule::compile(&unbounded).ok()?;
            let reference = Timestamp::from_second(1_767_225_600).ok()?; // 2026-01-01T00:00:00Z
            let slots = schedule.upcoming(reference, 16);
            slots
                .windows(2)
                .map(|w| w[1].as_millisecond() - w[0].as_millisecond())
                .min()
                .and_then(|ms| u64::try_from(ms).ok())
                .map(Dur::from_millis)
        }
    }
}

/// A target alone (an alert's, docs/configuration.md "alerts"), checked as a job's `target`
/// is: the same fields, URL and header rules, and named connections of `ctx`.
///
/// # Errors
/// Every bad field, each named from `target` (`target.url`, `target.connection`, ...).
pub fn target_from_json(value: &Value, ctx: &Context) -> Result<TargetSpec, Vec<FieldError>> {
    let mut v = Walker::default();
    let target = v.target(value, ctx);
    match target {
        Some(t) if v.errors.is_empty() => Ok(t),
        _ if v.errors.is_empty() => Err(vec![FieldError::new("target", "is not a valid target")]),
        _ => Err(v.errors),
    }
}

/// A DST policy object alone (`POST /v1/cron/next`'s `dst`), checked as a schedule's
/// `schedule.dst` is, its errors named from `path` (`dst.gap`, `dst.fold`).
///
/// # Errors
/// Every bad member: not an object, an unknown member, a value outside the named ones.
pub fn dst_from_json(value: &Value, path: &str) -> Result<DstSpec, Vec<FieldError>> {
    let mut v = Walker::default();
    match v.dst(value, path) {
        Some(spec) if v.errors.is_empty() => Ok(spec),
        _ => Err(v.errors),
    }
}

/// Walks untrusted JSON, collecting one [`FieldError`] per bad field; shared by the job and
/// workflow validators.
/// The policies a job and a workflow share, as validated.
pub(crate) struct Policies {
    pub(crate) concurrency_policy: ConcurrencyPolicy,
    pub(crate) misfire_policy: MisfirePolicy,
    pub(crate) misfire_threshold: Dur,
    pub(crate) jitter: Dur,
}

impl Walker {
    /// `namespace` and `name` of a job or workflow body, checked against the path
    /// (`ctx.namespace`, `ctx.name`) and the name pattern; the name is empty when missing.
    pub(crate) fn identity(&mut self, obj: &Map<String, Value>, ctx: &Context) -> (String, String) {
        let namespace = match self.opt_str(obj, "namespace", "namespace") {
            Some(ns) if ns != ctx.namespace => {
                self.err(
                    "namespace",
                    format!("'{ns}' differs from '{}' in the path", ctx.namespace),
                );
                ns
            }
            _ => ctx.namespace.clone(),
        };
        if let Err(m) = check_name(&namespace) {
            self.err("namespace", m);
        }
        // The name from the body or the path; an empty one is as bad as any other outside the
        // pattern, and one of the wrong type has been reported by `opt_str` already.
        let name = match (self.opt_str(obj, "name", "name"), &ctx.name) {
            (Some(n), Some(p)) if &n != p => {
                self.err("name", format!("'{n}' differs from '{p}' in the path"));
                Some(n)
            }
            (Some(n), _) => Some(n),
            (None, Some(p)) => Some(p.clone()),
            (None, None) => {
                if obj.get("name").is_none_or(|n| n.is_null()) {
                    self.err("name", "is required");
                }
                None
            }
        };
        if let Some(n) = &name
            && let Err(m) = check_name(n)
        {
            self.err("name", m);
        }
        (namespace, name.unwrap_or_default())
    }

    /// `description` (at most 4,096 bytes) and `labels` (at most [`MAX_LABELS`], keys 1 to
    /// 128 bytes, values at most [`MAX_LABEL_VALUE_LEN`] bytes).
    pub(crate) fn about(&mut self, obj: &Map<String, Value>) -> (String, BTreeMap<String, String>) {
        let description = self
            .opt_str(obj, "description", "description")
            .unwrap_or_default();
        if description.len() > 4096 {
            self.err("description", "is longer than 4096 bytes");
        }
        let labels = self.string_map(obj.get("labels"), "labels");
        if labels.len() > MAX_LABELS {
            self.err(
                "labels",
                format!(
                    "has {} labels; at most {MAX_LABELS} are allowed",
                    labels.len()
                ),
            );
        }
        for (key, value) in &labels {
            if key.is_empty() || key.len() > 128 {
                self.err(format!("labels.{key}"), "label keys must be 1 to 128 bytes");
            } else if value.len() > MAX_LABEL_VALUE_LEN {
                self.err(
                    format!("labels.{key}"),
                    format!("is longer than {MAX_LABEL_VALUE_LEN} bytes"),
                );
            }
        }
        (description, labels)
    }

    /// The policies a job and a workflow share: `concurrency_policy`, `misfire_policy`,
    /// `misfire_threshold` and `jitter`, which must be shorter than the schedule's interval.
    pub(crate) fn policies(
        &mut self,
        obj: &Map<String, Value>,
        schedule: Option<&ScheduleSpec>,
    ) -> Policies {
        let concurrency_policy = self.enumeration(
            obj,
            "concurrency_policy",
            &[
                ("allow", ConcurrencyPolicy::Allow),
                ("skip", ConcurrencyPolicy::Skip),
                ("replace", ConcurrencyPolicy::Replace),
            ],
            ConcurrencyPolicy::Allow,
        );
        let misfire_policy = self.enumeration(
            obj,
            "misfire_policy",
            &[
                ("run_once", MisfirePolicy::RunOnce),
                ("run_all", MisfirePolicy::RunAll),
                ("skip", MisfirePolicy::Skip),
            ],
            MisfirePolicy::RunOnce,
        );
        let misfire_threshold = self.duration(
            obj,
            "misfire_threshold",
            "misfire_threshold",
            Dur::from_secs(60),
            false,
        );
        let jitter = self.duration(obj, "jitter", "jitter", Dur::ZERO, false);
        if let Some(period) = schedule.and_then(shortest_interval)
            && !jitter.is_zero()
            && jitter >= period
        {
            self.err(
                "jitter",
                format!("{jitter} is not shorter than the schedule's interval of {period}; slots would fire out of order"),
            );
        }
        Policies {
            concurrency_policy,
            misfire_policy,
            misfire_threshold,
            jitter,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn ctx() -> Context {
        Context {
            connections: BTreeMap::from([("events".into(), "nats".into())]),
            namespace: "billing".into(),
            name: Some("nightly".into()),
            http_allow: None,
        }
    }

    fn valid() -> Value {
        json!({
            "schedule": {"cron": "0 2 * * *", "timezone": "Europe/Berlin"},
            "target": {"type": "http", "url": "http://127.0.0.1:9/run"}
        })
    }

    #[test]
    fn minimal_job_gets_the_spec_defaults() {
        let job = job_from_json(&valid(), &ctx()).unwrap();
        assert_eq!(job.name, "nightly");
        assert_eq!(job.retry, RetryPolicy::default());
        assert_eq!(job.timeout, Dur::from_secs(300));
        assert_eq!(job.misfire_policy, MisfirePolicy::RunOnce);
        let TargetSpec::Http(http) = &job.target else {
            panic!()
        };
        assert_eq!(http.method, "POST");
    }

    #[test]
    fn every_bad_field_is_named_once() {
        let body = json!({
            "name": "Bad Name",
            "schedule": {"cron": "61 * * * *", "timezone": "Nowhere/Town"},
            "target": {"type": "http", "url": "ftp://x"},
            "retry": {"max_attempts": 0},
            "timeout": "soon",
            "colour": "blue"
        });
        let errors = job_from_json(
            &body,
            &Context {
                name: None,
                ..ctx()
            },
        )
        .unwrap_err();
        let fields: Vec<_> = errors.iter().map(|e| e.field.as_str()).collect();
        for f in [
            "colour",
            "name",
            "schedule.cron",
            "target.url",
            "retry.max_attempts",
            "timeout",
        ] {
            assert!(fields.contains(&f), "{f} missing from {fields:?}");
        }
    }

    /// The fields `body` is refused for, sorted.
    fn bad_fields(body: &Value) -> Vec<String> {
        let mut fields: Vec<_> = job_from_json(body, &ctx())
            .unwrap_err()
            .into_iter()
            .map(|e| e.field)
            .collect();
        fields.sort();
        fields
    }

    #[test]
    fn a_nul_character_is_named_wherever_it_is() {
        let body = json!({
            "description": "a\u{0}b",
            "labels": {"team": "x\u{0}", "k\u{0}": "v"},
            "jobs": [{"target": {"body": "ok"}}, {"target": {"body": "\u{0}"}}],
            "clean": "no nul here"
        });
        let fields: Vec<(String, String)> = nul_characters(&body)
            .into_iter()
            .map(|e| (e.field, e.message))
            .collect();
        assert_eq!(
            fields,
            [
                (
                    "description".into(),
                    "must not contain the NUL character (U+0000)".into()
                ),
                (
                    "jobs.1.target.body".into(),
                    "must not contain the NUL character (U+0000)".into()
                ),
                (
                    "labels".into(),
                    "keys must not contain the NUL character (U+0000)".into()
                ),
                (
                    "labels.team".into(),
                    "must not contain the NUL character (U+0000)".into()
                ),
            ]
        );
        assert!(nul_characters(&valid()).is_empty());
    }

    #[test]
    fn labels_headers_and_cron_expressions_have_size_limits() {
        let mut body = valid();
        let many: Map<String, Value> = (0..=MAX_LABELS)
            .map(|i| (format!("k{i}"), json!("v")))
            .collect();
        body["labels"] = Value::Object(many);
        assert_eq!(bad_fields(&body), ["labels"]);
        body["labels"] = json!({"team": "x".repeat(MAX_LABEL_VALUE_LEN + 1), "ok": "x".repeat(MAX_LABEL_VALUE_LEN)});
        assert_eq!(bad_fields(&body), ["labels.team"]);
        let mut body = valid();
        let many: Map<String, Value> = (0..=MAX_HEADERS)
            .map(|i| (format!("x-h{i}"), json!("v")))
            .collect();
        body["target"] = json!({"type": "http", "url": "http://127.0.0.1:9/", "headers": many});
        assert_eq!(bad_fields(&body), ["target.headers"]);
        body["target"] = json!({"type": "nats", "connection": "events", "subject": "a.b",
            "headers": {"x-big": "v".repeat(MAX_HEADER_VALUE_LEN + 1), "x-ok": "v".repeat(MAX_HEADER_VALUE_LEN)}});
        assert_eq!(bad_fields(&body), ["target.headers.x-big"]);
        let mut body = valid();
        body["schedule"]["cron"] = json!(format!("*{}", ",1".repeat(MAX_CRON_LEN)));
        assert_eq!(bad_fields(&body), ["schedule.cron"]);
        body["schedule"]["cron"] = json!(format!("0 2 1{} * *", ",1".repeat(500)));
        assert!(job_from_json(&body, &ctx()).is_ok());
    }

    #[test]
    fn headers_sundial_or_the_http_client_sets_are_refused() {
        let mut body = valid();
        body["target"] = json!({"type": "http", "url": "http://127.0.0.1:9/", "headers": {
            "Host": "elsewhere", "content-length": "999", "Idempotency-Key": "x",
            "x-team": "billing", "Content-Type": "application/json"}});
        assert_eq!(
            bad_fields(&body),
            [
                "target.headers.Host",
                "target.headers.Idempotency-Key",
                "target.headers.content-length"
            ]
        );
    }

    #[test]
    fn a_target_url_longer_than_the_rfc_9110_minimum_is_refused_without_echoing_it() {
        let with_url = |url: String| {
            let mut body = valid();
            body["target"] = json!({"type": "http", "url": url});
            job_from_json(&body, &ctx())
        };
        let base = "http://127.0.0.1:9/";
        assert!(with_url(format!("{base}{}", "a".repeat(MAX_URL_LEN - base.len()))).is_ok());
        let errors = with_url(format!("{base}{}", "a".repeat(100_000))).unwrap_err();
        assert_eq!(errors.len(), 1, "{errors:?}");
        assert_eq!(errors[0].field, "target.url");
        assert!(errors[0].message.len() < 100, "{}", errors[0].message);
    }

    #[test]
    fn an_allow_list_refuses_hosts_it_cannot_allow_and_names_the_field() {
        let allow = HostAllowList::parse(&["*.internal", "192.0.2.0/24"]).unwrap();
        let ctx = Context {
            http_allow: Some(std::sync::Arc::new(allow)),
            ..ctx()
        };
        let with_url = |url: &str| {
            let mut body = valid();
            body["target"] = json!({"type": "http", "url": url});
            job_from_json(&body, &ctx)
        };
        for ok in [
            "http://billing.internal/run",
            "HTTPS://Billing.INTERNAL:8443/run",
            "http://192.0.2.9:8080/",
            // Only its resolved addresses can tell; the target checks them when it connects.
            "http://resolves-somewhere.example/",
        ] {
            assert!(with_url(ok).is_ok(), "{ok}");
        }
        let refused = HostAllowList::parse(&["*.internal"]).unwrap();
        let ctx = Context {
            http_allow: Some(std::sync::Arc::new(refused)),
            ..ctx
        };
        for bad in [
            "http://127.0.0.1:9/",
            "http://evil.example/",
            "http://[::1]/",
            "http://internal/",
        ] {
            let mut body = valid();
            body["target"] = json!({"type": "http", "url": bad});
            let errors = job_from_json(&body, &ctx).unwrap_err();
            assert_eq!(errors.len(), 1, "{bad}: {errors:?}");
            assert_eq!(errors[0].field, "target.url");
            assert!(
                errors[0].message.contains("allow list (*.internal)"),
                "{}",
                errors[0].message
            );
        }
    }

    #[test]
    fn an_instant_past_the_range_says_so() {
        let mut body = valid();
        body["schedule"]["start_at"] = json!("9999-12-31T23:59:59Z");
        let errors = job_from_json(&body, &ctx()).unwrap_err();
        assert_eq!(errors[0].field, "schedule.start_at");
        assert!(
            errors[0].message.contains("up to 9999-12-30T22:00:00Z"),
            "{}",
            errors[0].message
        );
    }

    #[test]
    fn the_url_scheme_is_case_insensitive_and_only_http_or_https() {
        let with_url = |url: &str| {
            let mut body = valid();
            body["target"] = json!({"type": "http", "url": url});
            body
        };
        for ok in [
            "HTTP://127.0.0.1:9/",
            "Https://example.com/x",
            "https://example.com",
        ] {
            assert!(job_from_json(&with_url(ok), &ctx()).is_ok(), "{ok}");
        }
        let long_label = format!("http://{}.example/", "a".repeat(64));
        let long_host = format!("http://{}example/", "a.".repeat(130));
        for bad in [
            long_label.as_str(),
            long_host.as_str(),
            "ftp://example.com/",
            "httpx://example.com/",
            "example.com/x",
            "http:/x",
        ] {
            assert_eq!(bad_fields(&with_url(bad)), ["target.url"], "{bad}");
        }
    }

    #[test]
    fn a_bad_zone_is_named_next_to_a_bad_or_missing_expression() {
        let fields = |schedule: Value| -> Vec<String> {
            let mut body = valid();
            body["schedule"] = schedule;
            bad_fields(&body)
        };
        assert_eq!(
            fields(json!({"cron": "61 * * * *", "timezone": "Mars/Olympus"})),
            ["schedule.cron", "schedule.timezone"]
        );
        assert_eq!(
            fields(json!({"cron": 5, "timezone": "Mars/Olympus"})),
            ["schedule.cron", "schedule.timezone"]
        );
        assert_eq!(
            fields(json!({"cron": "0 2 * * *", "timezone": "Mars/Olympus"})),
            ["schedule.timezone"]
        );
        assert_eq!(
            fields(json!({"cron": "61 * * * *", "timezone": "UTC"})),
            ["schedule.cron"]
        );
    }

    #[test]
    fn a_fetched_job_can_be_written_back() {
        let mut body = valid();
        body["version"] = json!(3);
        body["state"] = json!("active");
        assert!(job_from_json(&body, &ctx()).is_ok());
    }

    #[test]
    fn jitter_must_be_shorter_than_the_schedule_interval() {
        let mut body = valid();
        body["schedule"] = json!({"every": "5s"});
        body["jitter"] = json!("5s");
        assert_eq!(job_from_json(&body, &ctx()).unwrap_err()[0].field, "jitter");
        body["jitter"] = json!("4s");
        assert!(job_from_json(&body, &ctx()).is_ok());
        body["schedule"] = json!({"cron": "*/10 * * * * *"});
        body["jitter"] = json!("1m");
        assert_eq!(job_from_json(&body, &ctx()).unwrap_err()[0].field, "jitter");
        body["schedule"] = json!({"at": "2030-01-01T00:00:00Z"});
        assert!(
            job_from_json(&body, &ctx()).is_ok(),
            "a one-off slot has no interval"
        );
    }

    #[test]
    fn merge_patch_follows_rfc7396_examples() {
        let mut doc = json!({"a": "b", "c": {"d": "e", "f": "g"}});
        merge_patch(&mut doc, &json!({"a": "z", "c": {"f": null}}));
        assert_eq!(doc, json!({"a": "z", "c": {"d": "e"}}));
        let mut doc = json!({"a": [{"b": "c"}]});
        merge_patch(&mut doc, &json!({"a": [1]}));
        assert_eq!(doc, json!({"a": [1]}));
    }

    #[test]
    fn unknown_and_mistyped_connections_are_rejected() {
        let mut body = valid();
        body["target"] = json!({"type": "redis", "connection": "events", "stream": "s"});
        let errors = job_from_json(&body, &ctx()).unwrap_err();
        assert_eq!(errors[0].field, "target.connection");
        body["target"] = json!({"type": "nats", "connection": "nope", "subject": "a.b"});
        let errors = job_from_json(&body, &ctx()).unwrap_err();
        assert!(errors[0].message.contains("unknown connection 'nope'"));
    }
}
