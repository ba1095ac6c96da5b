//! Templates in a task's target strings (docs/workflows.md, "Outputs and templates").
//!
//! A template is text with references in double braces: `{{ run.id }}`,
//! `{{ run.scheduled_at }}`, `{{ run.params.PATH }}`, `{{ tasks.NAME.output.PATH }}`, each
//! optionally followed by `| json`. PATH is zero or more dot-separated keys; a key made of
//! digits also indexes an array. `{{ ref }}` inserts a string as its text and any other value
//! as compact JSON; `{{ ref | json }}` always inserts the JSON encoding.
//!
//! Templates are parsed when a workflow is written ([`parse`], errors name the field) and
//! rendered once, when the task becomes `queued` ([`render_target`]): in a URL the inserted
//! text is percent-encoded; a header value that would hold CR, LF or NUL, or a path missing
//! from the run's params or an upstream's output, fails the task for good, naming it.
//!
//! Invariants: [`parse`] never panics and accepts exactly what [`render`] can evaluate; text
//! outside `{{ … }}` is copied byte for byte.

use std::collections::BTreeMap;

use jiff::Timestamp;
use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, utf8_percent_encode};
use serde_json::Value;

use crate::job::TargetSpec;
use crate::validate::MAX_URL_LEN;

/// What a reference names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ref {
    /// `run.id`: the run's id.
    RunId,
    /// `run.scheduled_at`: the run's slot, RFC 3339 UTC.
    RunScheduledAt,
    /// `run.params.PATH`: a value of the run's params (the whole object for an empty path).
    RunParams(Vec<String>),
    /// `secret.NAME`: a secret of the namespace (docs/security.md, "Secrets"), rendered only
    /// by the worker at send time ([`crate::secrets::render_target`]): [`render`] leaves it
    /// as it is.
    Secret(String),
    /// `tasks.NAME.output.PATH`: a value of an upstream task's output.
    TaskOutput {
        /// The upstream task's name.
        task: String,
        /// Keys into its output.
        path: Vec<String>,
    },
}

impl std::fmt::Display for Ref {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let with_path = |f: &mut std::fmt::Formatter<'_>, head: &str, path: &[String]| {
            f.write_str(head)?;
            for key in path {
                write!(f, ".{key}")?;
            }
            Ok(())
        };
        match self {
            Ref::RunId => f.write_str("run.id"),
            Ref::RunScheduledAt => f.write_str("run.scheduled_at"),
            Ref::RunParams(path) => with_path(f, "run.params", path),
            Ref::Secret(name) => write!(f, "secret.{name}"),
            Ref::TaskOutput { task, path } => with_path(f, &format!("tasks.{task}.output"), path),
        }
    }
}

/// One piece of a parsed template.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Piece {
    /// Text copied as it is.
    Text(String),
    /// A reference, and whether `| json` follows it.
    Ref {
        /// What it names.
        target: Ref,
        /// `| json`: always insert the JSON encoding.
        json: bool,
    },
}

/// A parsed template.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Template {
    /// Its pieces in order.
    pub pieces: Vec<Piece>,
}

impl Template {
    /// The references it holds, in order.
    pub fn refs(&self) -> impl Iterator<Item = &Ref> {
        self.pieces.iter().filter_map(|p| match p {
            Piece::Ref { target, .. } => Some(target),
            Piece::Text(_) => None,
        })
    }
}

/// Parses a template.
///
/// # Errors
/// A lowercase message for a `{{` without its `}}`, an empty reference, an unknown root
/// (anything but `run.id`, `run.scheduled_at`, `run.params…`, `tasks.NAME.output…`), an
/// empty key, or a filter other than `json`.
pub fn parse(text: &str) -> Result<Template, String> {
    let mut pieces = Vec::new();
    let mut rest = text;
    while let Some(open) = rest.find("{{") {
        if open > 0 {
            pieces.push(Piece::Text(rest[..open].to_owned()));
        }
        let after = &rest[open + 2..];
        let Some(close) = after.find("}}") else {
            return Err(format!(
                "'{{{{' at byte {} has no closing '}}}}'",
                text.len() - rest.len() + open
            ));
        };
        let inner = after[..close].trim();
        let (reference, json) = match inner.split_once('|') {
            Some((r, filter)) => match filter.trim() {
                "json" => (r.trim(), true),
                other => {
                    return Err(format!(
                        "unknown filter '{other}' in '{{{{ {inner} }}}}'; the only filter is json"
                    ));
                }
            },
            None => (inner, false),
        };
        let target = parse_ref(reference)?;
        if json && matches!(target, Ref::Secret(_)) {
            return Err(format!(
                "'{{{{ {inner} }}}}': the json filter does not apply to secrets; a secret is inserted as its text"
            ));
        }
        pieces.push(Piece::Ref { target, json });
        rest = &after[close + 2..];
    }
    if !rest.is_empty() {
        pieces.push(Piece::Text(rest.to_owned()));
    }
    Ok(Template { pieces })
}

fn parse_ref(text: &str) -> Result<Ref, String> {
    if text.is_empty() {
        return Err("empty reference '{{ }}'".into());
    }
    let keys: Vec<&str> = text.split('.').collect();
    if let Some(bad) = keys
        .iter()
        .find(|k| k.is_empty() || k.contains(|c: char| c.is_whitespace() || c == '{'))
    {
        return Err(format!(
            "'{text}' has an empty or malformed key '{bad}'; keys are separated by single dots"
        ));
    }
    let path = |from: usize| keys[from..].iter().map(|k| (*k).to_owned()).collect();
    match keys.as_slice() {
        ["run", "id"] => Ok(Ref::RunId),
        ["run", "scheduled_at"] => Ok(Ref::RunScheduledAt),
        ["run", "params", ..] => Ok(Ref::RunParams(path(2))),
        ["secret", name] => crate::names::check_name(name)
            .map(|()| Ref::Secret((*name).to_owned()))
            .map_err(|m| format!("'{text}': the secret's name {m}")),
        ["tasks", task, "output", ..] => Ok(Ref::TaskOutput {
            task: (*task).to_owned(),
            path: path(3),
        }),
        _ => Err(format!(
            "unknown reference '{text}'; expected run.id, run.scheduled_at, run.params.PATH, tasks.NAME.output.PATH or secret.NAME"
        )),
    }
}

/// Where a rendered string goes, which decides how inserted text is escaped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Place {
    /// A body, payload or other free text: inserted as it is.
    Text,
    /// A URL: inserted text is percent-encoded (all but `A-Z a-z 0-9 - . _ ~`, RFC 3986 §2.3).
    Url,
    /// A header value, subject, key or other single-line field: CR, LF and NUL are refused.
    Line,
}

/// What a template is rendered with.
#[derive(Debug, Clone, Copy)]
pub struct Context<'a> {
    /// The run's id.
    pub run_id: &'a str,
    /// The run's slot.
    pub scheduled_at: Timestamp,
    /// The run's params.
    pub params: &'a serde_json::Map<String, Value>,
    /// Outputs of the run's tasks that kept one, by task name.
    pub outputs: &'a BTreeMap<String, Value>,
}

/// Why a render failed; the task fails for good with this message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RenderError {
    /// A template did not parse (only from stored data written before a rule changed).
    #[error("{field}: {message}")]
    Malformed {
        /// The target field, e.g. `target.url`.
        field: String,
        /// What is wrong.
        message: String,
    },
    /// A referenced path is not in the params or the output.
    #[error("{field}: {path} is missing")]
    Missing {
        /// The target field.
        field: String,
        /// The reference, e.g. `tasks.extract.output.batch_id`.
        path: String,
    },
    /// A single-line field would hold CR, LF or NUL.
    #[error("{field}: the rendered value holds CR, LF or NUL")]
    ControlCharacter {
        /// The target field.
        field: String,
    },
    /// The rendered field would be longer than [`max_len`] allows.
    #[error("{field}: the rendered value is longer than {max} bytes")]
    TooLarge {
        /// The target field.
        field: String,
        /// The most allowed, in bytes.
        max: usize,
    },
    /// A URL would receive nothing, `.` or `..` where a reference stands, which would move
    /// the request to another host or path.
    #[error("{field}: {path} is '{value}', which a URL cannot carry in its place")]
    UrlPart {
        /// The target field.
        field: String,
        /// The reference.
        path: String,
        /// What it held.
        value: String,
    },
}

/// Renders one template string for the field `field` (named in errors).
///
/// # Errors
/// [`RenderError`] naming the field and the missing path or the bad character.
pub fn render(
    text: &str,
    field: &str,
    place: Place,
    ctx: &Context<'_>,
) -> Result<String, RenderError> {
    if !text.contains("{{") {
        return check_line(text.to_owned(), field, place);
    }
    let template = parse(text).map_err(|message| RenderError::Malformed {
        field: field.to_owned(),
        message,
    })?;
    let mut out = String::with_capacity(text.len());
    for piece in &template.pieces {
        match piece {
            Piece::Text(t) => out.push_str(t),
            Piece::Ref {
                target: Ref::Secret(name),
                ..
            } => {
                // Rendered by the worker at send time, never written rendered.
                out.push_str(&format!("{{{{ secret.{name} }}}}"));
            }
            Piece::Ref { target, json } => {
                let value = lookup(target, ctx).ok_or_else(|| RenderError::Missing {
                    field: field.to_owned(),
                    path: target.to_string(),
                })?;
                let inserted = match (&value, json) {
                    (Value::String(s), false) => s.clone(),
                    _ => value.to_string(),
                };
                match place {
                    Place::Url => {
                        // A segment of dots alone would move the path (`..` climbs it), and
                        // nothing at all where a host or a segment is expected moves the
                        // request elsewhere: neither is text the URL can carry.
                        if matches!(inserted.as_str(), "" | "." | "..") {
                            return Err(RenderError::UrlPart {
                                field: field.to_owned(),
                                path: target.to_string(),
                                value: inserted,
                            });
                        }
                        out.extend(utf8_percent_encode(&inserted, URL_ESCAPED));
                    }
                    Place::Text | Place::Line => out.push_str(&inserted),
                }
                if out.len() > max_len(place) {
                    return Err(RenderError::TooLarge {
                        field: field.to_owned(),
                        max: max_len(place),
                    });
                }
            }
        }
    }
    check_line(out, field, place)
}

/// The longest rendered string, in bytes, for a place: a URL [`MAX_URL_LEN`] (8,000), any
/// other field [`MAX_FIELD_LEN`] (256 KiB, a job's largest body). Checked while rendering,
/// so a template that would grow past it stops there.
pub fn max_len(place: Place) -> usize {
    match place {
        Place::Url => MAX_URL_LEN,
        Place::Text | Place::Line => MAX_FIELD_LEN,
    }
}

/// The longest rendered field that is not a URL, in bytes: 256 KiB, as a job's body.
pub const MAX_FIELD_LEN: usize = 256 * 1024;

/// Everything but RFC 3986's unreserved characters.
const URL_ESCAPED: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

fn check_line(text: String, field: &str, place: Place) -> Result<String, RenderError> {
    if place == Place::Line && text.contains(['\r', '\n', '\0']) {
        return Err(RenderError::ControlCharacter {
            field: field.to_owned(),
        });
    }
    Ok(text)
}

fn lookup(target: &Ref, ctx: &Context<'_>) -> Option<Value> {
    let (root, path) = match target {
        Ref::RunId => return Some(Value::String(ctx.run_id.to_owned())),
        Ref::RunScheduledAt => return Some(Value::String(ctx.scheduled_at.to_string())),
        Ref::RunParams(path) => (Value::Object(ctx.params.clone()), path),
        Ref::TaskOutput { task, path } => (ctx.outputs.get(task)?.clone(), path),
        // Never looked up here: the worker renders secrets at send time.
        Ref::Secret(_) => return None,
    };
    let mut at = &root;
    for key in path {
        at = match at {
            Value::Object(o) => o.get(key)?,
            Value::Array(a) => a.get(key.parse::<usize>().ok()?)?,
            _ => return None,
        };
    }
    Some(at.clone())
}

/// Every string of a target that may hold templates, with its field path (as
/// [`crate::validate`] names target fields) and where it goes.
pub fn target_strings(target: &TargetSpec) -> Vec<(String, &str, Place)> {
    fn map<'a>(
        out: &mut Vec<(String, &'a str, Place)>,
        prefix: &str,
        m: &'a BTreeMap<String, String>,
        place: Place,
    ) {
        out.extend(
            m.iter()
                .map(|(k, v)| (format!("{prefix}.{k}"), v.as_str(), place)),
        );
    }
    let mut out: Vec<(String, &str, Place)> = Vec::new();
    match target {
        TargetSpec::Http(t) => {
            out.push(("target.url".into(), &t.url, Place::Url));
            map(&mut out, "target.headers", &t.headers, Place::Line);
            if let Some(b) = &t.body {
                out.push(("target.body".into(), b, Place::Text));
            }
        }
        TargetSpec::Nats(t) => {
            out.push(("target.subject".into(), &t.subject, Place::Line));
            out.push(("target.payload".into(), &t.payload, Place::Text));
            map(&mut out, "target.headers", &t.headers, Place::Line);
        }
        TargetSpec::Amqp(t) => {
            out.push(("target.exchange".into(), &t.exchange, Place::Line));
            out.push(("target.routing_key".into(), &t.routing_key, Place::Line));
            out.push(("target.payload".into(), &t.payload, Place::Text));
            map(&mut out, "target.properties", &t.properties, Place::Line);
        }
        TargetSpec::Redis(t) => {
            out.push(("target.stream".into(), &t.stream, Place::Line));
            map(&mut out, "target.fields", &t.fields, Place::Text);
        }
        TargetSpec::Container(t) => {
            out.push(("target.image".into(), &t.image, Place::Line));
            for (i, c) in t.command.iter().enumerate() {
                out.push((format!("target.command.{i}"), c, Place::Text));
            }
            map(&mut out, "target.env", &t.env, Place::Text);
        }
    }
    out
}

/// The target with every template string rendered (fields as [`target_strings`] lists them).
///
/// # Errors
/// The first [`RenderError`], naming its field.
pub fn render_target(target: &TargetSpec, ctx: &Context<'_>) -> Result<TargetSpec, RenderError> {
    let mut rendered = BTreeMap::new();
    for (field, text, place) in target_strings(target) {
        if text.contains("{{") {
            rendered.insert(field.clone(), render(text, &field, place, ctx)?);
        } else {
            check_line(text.to_owned(), &field, place)?;
        }
    }
    if rendered.is_empty() {
        return Ok(target.clone());
    }
    Ok(map_target_strings(target, |field, text| {
        rendered.remove(field).unwrap_or_else(|| text.to_owned())
    }))
}

/// The target with each string (fields as [`target_strings`] lists them) replaced by `f`.
pub fn map_target_strings(
    target: &TargetSpec,
    mut f: impl FnMut(&str, &str) -> String,
) -> TargetSpec {
    let mut map = |prefix: &str, m: &BTreeMap<String, String>| -> BTreeMap<String, String> {
        m.iter()
            .map(|(k, v)| (k.clone(), f(&format!("{prefix}.{k}"), v)))
            .collect()
    };
    let mut t = target.clone();
    match &mut t {
        TargetSpec::Http(h) => {
            h.headers = map("target.headers", &h.headers);
            h.url = f("target.url", &h.url);
            h.body = h.body.as_deref().map(|b| f("target.body", b));
        }
        TargetSpec::Nats(n) => {
            n.headers = map("target.headers", &n.headers);
            n.subject = f("target.subject", &n.subject);
            n.payload = f("target.payload", &n.payload);
        }
        TargetSpec::Amqp(a) => {
            a.properties = map("target.properties", &a.properties);
            a.exchange = f("target.exchange", &a.exchange);
            a.routing_key = f("target.routing_key", &a.routing_key);
            a.payload = f("target.payload", &a.payload);
        }
        TargetSpec::Redis(r) => {
            r.fields = map("target.fields", &r.fields);
            r.stream = f("target.stream", &r.stream);
        }
        TargetSpec::Container(c) => {
            c.env = map("target.env", &c.env);
            c.image = f("target.image", &c.image);
            c.command = c
                .command
                .iter()
                .enumerate()
                .map(|(i, s)| f(&format!("target.command.{i}"), s))
                .collect();
        }
    }
    t
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn ctx_with<'a>(
        params: &'a serde_json::Map<String, Value>,
        outputs: &'a BTreeMap<String, Value>,
    ) -> Context<'a> {
        Context {
            run_id: "r-1",
            scheduled_at: "2026-12-01T02:00:00Z".parse().unwrap(),
            params,
            outputs,
        }
    }

    #[test]
    fn references_parse_with_and_without_the_json_filter() {
        let t = parse("a {{run.id}} b {{ tasks.extract.output.batch.0 | json }}").unwrap();
        assert_eq!(
            t.pieces,
            vec![
                Piece::Text("a ".into()),
                Piece::Ref {
                    target: Ref::RunId,
                    json: false
                },
                Piece::Text(" b ".into()),
                Piece::Ref {
                    target: Ref::TaskOutput {
                        task: "extract".into(),
                        path: vec!["batch".into(), "0".into()]
                    },
                    json: true
                },
            ]
        );
    }

    #[test]
    fn malformed_templates_say_why() {
        for (text, needle) in [
            ("{{ run.id", "no closing"),
            ("{{ }}", "empty reference"),
            ("{{ run.name }}", "unknown reference"),
            ("{{ run.params..x }}", "empty or malformed key"),
            ("{{ run.id | upper }}", "unknown filter 'upper'"),
            ("{{ tasks.x }}", "unknown reference"),
        ] {
            let e = parse(text).unwrap_err();
            assert!(e.contains(needle), "{text}: {e}");
        }
    }

    #[test]
    fn strings_insert_as_text_and_other_values_as_json() {
        let params = json!({"region": "eu", "n": 3, "tags": ["a", "b"]});
        let params = params.as_object().unwrap().clone();
        let outputs = BTreeMap::new();
        let ctx = ctx_with(&params, &outputs);
        let r = |t| render(t, "target.body", Place::Text, &ctx).unwrap();
        assert_eq!(r("{{ run.params.region }}"), "eu");
        assert_eq!(r("{{ run.params.region | json }}"), "\"eu\"");
        assert_eq!(r("{{ run.params.n }}"), "3");
        assert_eq!(r("{{ run.params.tags }}"), "[\"a\",\"b\"]");
        assert_eq!(r("{{ run.params.tags.1 }}"), "b");
        assert_eq!(
            r("{{ run.scheduled_at }}/{{ run.id }}"),
            "2026-12-01T02:00:00Z/r-1"
        );
    }

    #[test]
    fn url_insertions_are_percent_encoded_and_lines_refuse_cr_lf() {
        let params = json!({"q": "a b/c?d&e", "evil": "x\r\nHost: y"});
        let params = params.as_object().unwrap().clone();
        let outputs = BTreeMap::new();
        let ctx = ctx_with(&params, &outputs);
        assert_eq!(
            render(
                "https://h/x/{{ run.params.q }}",
                "target.url",
                Place::Url,
                &ctx
            )
            .unwrap(),
            "https://h/x/a%20b%2Fc%3Fd%26e"
        );
        assert_eq!(
            render(
                "{{ run.params.evil }}",
                "target.headers.x",
                Place::Line,
                &ctx
            ),
            Err(RenderError::ControlCharacter {
                field: "target.headers.x".into()
            })
        );
    }

    #[test]
    fn a_url_refuses_empty_and_dot_segments_and_everything_stops_at_its_limit() {
        let params = json!({"empty": "", "up": "..", "big": "x".repeat(10_000)});
        let params = params.as_object().unwrap().clone();
        let outputs = BTreeMap::new();
        let ctx = ctx_with(&params, &outputs);
        for p in ["empty", "up"] {
            let e = render(
                &format!("http://{{{{ run.params.{p} }}}}/x"),
                "target.url",
                Place::Url,
                &ctx,
            )
            .unwrap_err();
            assert!(matches!(e, RenderError::UrlPart { .. }), "{p}: {e}");
        }
        let e = render(
            "http://h/{{ run.params.big }}",
            "target.url",
            Place::Url,
            &ctx,
        )
        .unwrap_err();
        assert!(matches!(e, RenderError::TooLarge { max: 8_000, .. }), "{e}");
        let many = "{{ run.params.big }}".repeat(30);
        let e = render(&many, "target.body", Place::Text, &ctx).unwrap_err();
        assert_eq!(
            e.to_string(),
            "target.body: the rendered value is longer than 262144 bytes"
        );
    }

    #[test]
    fn a_missing_path_names_itself() {
        let params = serde_json::Map::new();
        let outputs = BTreeMap::from([("extract".to_string(), json!({"rows": 3}))]);
        let ctx = ctx_with(&params, &outputs);
        let e = render(
            "{{ tasks.extract.output.batch_id }}",
            "target.url",
            Place::Url,
            &ctx,
        )
        .unwrap_err();
        assert_eq!(
            e.to_string(),
            "target.url: tasks.extract.output.batch_id is missing"
        );
    }

    #[test]
    fn a_target_renders_every_templated_string_once() {
        let target: TargetSpec = serde_json::from_value(json!({
            "type": "http", "method": "POST",
            "url": "https://etl.internal/load/{{ tasks.extract.output.batch_id }}",
            "headers": {"x-region": "{{ run.params.region }}"},
            "body": "{\"region\": {{ run.params.region | json }}}"
        }))
        .unwrap();
        let params = json!({"region": "eu"}).as_object().unwrap().clone();
        let outputs = BTreeMap::from([("extract".to_string(), json!({"batch_id": "b 7"}))]);
        let TargetSpec::Http(h) = render_target(&target, &ctx_with(&params, &outputs)).unwrap()
        else {
            panic!("http")
        };
        assert_eq!(h.url, "https://etl.internal/load/b%207");
        assert_eq!(h.headers["x-region"], "eu");
        assert_eq!(h.body.as_deref(), Some("{\"region\": \"eu\"}"));
    }
}
