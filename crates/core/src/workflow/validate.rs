//! Turning untrusted JSON into a [`WorkflowSpec`], naming every bad field
//! (docs/guarantees.md#g7-bad-input, docs/workflows.md).
//!
//! Fields of tasks are named with their index, as docs/workflows.md spells them:
//! `tasks[1].depends_on[0]`, `tasks[2].target.url`. Besides what a job's fields are checked
//! for (the same walker checks a task's target, retry and durations), a workflow is refused
//! for: no tasks or more than [`MAX_TASKS`], two tasks with one name, a `depends_on` naming no
//! task or one task twice, a cycle (the error spells it: `cycle load → extract → load`), an
//! unknown trigger rule, `output` on a target that gives none, and a template that is
//! malformed or refers to a task that is unknown, not upstream, or keeps no output.
//!
//! Invariants: [`workflow_from_json`] never panics; what it returns satisfies the module
//! invariants of [`crate::workflow`].

use std::collections::{BTreeMap, HashMap};

use serde_json::{Map, Value};

use crate::duration::Dur;
use crate::job::TargetSpec;
use crate::names::check_name;
use crate::validate::{Context, FieldError, Policies};
use crate::walker::{Walker, type_name};
use crate::workflow::dag::{Dag, find_cycles};
use crate::workflow::release::TriggerRule;
use crate::workflow::spec::{OutputKind, RetryOverrides, TaskDefaults, TaskSpec, WorkflowSpec};
use crate::workflow::template::{self, Ref, map_target_strings};
use crate::workflow::{MAX_OUTPUT_BYTES, MAX_TASKS};

/// Read-only fields of the workflow resource: accepted on input (so a fetched workflow can be
/// written back as it is) and ignored.
pub const READ_ONLY_FIELDS: [&str; 10] = [
    "warnings",
    "state",
    "version",
    "created_at",
    "updated_at",
    "next_fire_at",
    "next_fire_times",
    "dst_preview",
    "last_run",
    "graph",
];

const WORKFLOW_FIELDS: [&str; 14] = [
    "namespace",
    "name",
    "description",
    "labels",
    "schedule",
    "params",
    "concurrency_policy",
    "misfire_policy",
    "misfire_threshold",
    "jitter",
    "run_timeout",
    "paused",
    "defaults",
    "tasks",
];

const TASK_FIELDS: [&str; 8] = [
    "name",
    "depends_on",
    "trigger_rule",
    "output",
    "target",
    "retry",
    "timeout",
    "heartbeat_timeout",
];

/// The largest `params` object, in bytes of its JSON text (the same bound as an output).
pub const MAX_PARAMS_BYTES: usize = MAX_OUTPUT_BYTES;

/// Validates a workflow body. `ctx.name` is the workflow name from the path, if any.
///
/// # Errors
/// Every bad field, each once: those [`crate::validate::job_from_json`] names for the fields
/// a workflow shares with a job, and the workflow's own (module docs).
pub fn workflow_from_json(body: &Value, ctx: &Context) -> Result<WorkflowSpec, Vec<FieldError>> {
    let mut v = Walker::default();
    let Some(obj) = body.as_object() else {
        return Err(vec![FieldError::new("", "the body must be a JSON object")]);
    };
    v.unknown_fields(obj, "", &WORKFLOW_FIELDS, &READ_ONLY_FIELDS);
    let (namespace, name) = v.identity(obj, ctx);
    let (description, labels) = v.about(obj);
    let schedule = obj
        .get("schedule")
        .filter(|s| !s.is_null())
        .and_then(|s| v.schedule(s));
    let params = params(&mut v, obj.get("params"), "params");
    let Policies {
        concurrency_policy,
        misfire_policy,
        misfire_threshold,
        jitter,
    } = v.policies(obj, schedule.as_ref());
    let run_timeout = obj
        .get("run_timeout")
        .filter(|t| !t.is_null())
        .map(|_| v.duration(obj, "run_timeout", "run_timeout", Dur::ZERO, false))
        .filter(|d| !d.is_zero());
    let paused = v.opt_bool(obj, "paused", "paused").unwrap_or(false);
    let defaults = match obj.get("defaults").filter(|d| !d.is_null()) {
        Some(d) => v.nested("defaults", |w| task_defaults(w, d)),
        None => TaskDefaults::default(),
    };
    let tasks = tasks(&mut v, obj.get("tasks"), &defaults, ctx);

    if !v.errors.is_empty() {
        return Err(v.errors);
    }
    Ok(WorkflowSpec {
        namespace,
        name,
        description,
        labels,
        schedule,
        params,
        concurrency_policy,
        misfire_policy,
        misfire_threshold,
        jitter,
        run_timeout,
        paused,
        defaults,
        tasks,
    })
}

/// `params` of a workflow or of a manual trigger: a JSON object of at most
/// [`MAX_PARAMS_BYTES`]; errors name `path`.
pub(crate) fn params(v: &mut Walker, value: Option<&Value>, path: &str) -> Map<String, Value> {
    match value {
        None | Some(Value::Null) => Map::new(),
        Some(Value::Object(o)) => {
            let size = Value::Object(o.clone()).to_string().len();
            if size > MAX_PARAMS_BYTES {
                v.err(
                    path,
                    format!("is {size} bytes of JSON; at most {MAX_PARAMS_BYTES} are allowed"),
                );
            }
            o.clone()
        }
        Some(other) => {
            v.err(path, format!("must be an object, not {}", type_name(other)));
            Map::new()
        }
    }
}

/// Validates the `params` of a manual trigger (`POST .../workflows/{name}/trigger`).
///
/// # Errors
/// `params` when it is not an object or is larger than [`MAX_PARAMS_BYTES`].
pub fn trigger_params(body: &Value) -> Result<Map<String, Value>, Vec<FieldError>> {
    let mut v = Walker::default();
    let obj = match body {
        Value::Null => return Ok(Map::new()),
        Value::Object(o) => o,
        other => {
            return Err(vec![FieldError::new(
                "",
                format!("the body must be a JSON object, not {}", type_name(other)),
            )]);
        }
    };
    v.unknown_fields(obj, "", &["params"], &[]);
    let params = params(&mut v, obj.get("params"), "params");
    if v.errors.is_empty() {
        Ok(params)
    } else {
        Err(v.errors)
    }
}

fn task_defaults(v: &mut Walker, value: &Value) -> TaskDefaults {
    let Some(obj) = v.object(value, "") else {
        return TaskDefaults::default();
    };
    v.unknown_fields(obj, "", &["retry", "timeout", "heartbeat_timeout"], &[]);
    TaskDefaults {
        retry: retry_overrides(v, obj.get("retry")),
        timeout: opt_duration(v, obj, "timeout"),
        heartbeat_timeout: opt_duration(v, obj, "heartbeat_timeout"),
    }
}

fn opt_duration(v: &mut Walker, obj: &Map<String, Value>, key: &str) -> Option<Dur> {
    obj.get(key).filter(|d| !d.is_null())?;
    let d = v.duration(obj, key, key, Dur::ZERO, true);
    if key == "heartbeat_timeout" && !d.is_zero() && d.as_millis() < 1000 {
        v.err(key, "must be at least 1s");
    }
    (!d.is_zero()).then_some(d)
}

fn retry_overrides(v: &mut Walker, value: Option<&Value>) -> RetryOverrides {
    let Some(value) = value.filter(|r| !r.is_null()) else {
        return RetryOverrides::default();
    };
    let Some(obj) = v.object(value, "retry") else {
        return RetryOverrides::default();
    };
    // The full policy's checks (ranges, types, unknown fields) apply to what is given; only
    // the fields present are kept as overrides.
    let policy = v.retry(Some(value));
    let has = |k: &str| obj.get(k).is_some_and(|x| !x.is_null());
    RetryOverrides {
        max_attempts: has("max_attempts").then_some(policy.max_attempts),
        initial_interval: has("initial_interval").then_some(policy.initial_interval),
        multiplier: has("multiplier").then_some(policy.multiplier),
        max_interval: has("max_interval").then_some(policy.max_interval),
        jitter: has("jitter").then_some(policy.jitter),
    }
}

/// A task as read, before the checks that need every task.
struct Draft {
    name: Option<String>,
    depends_on: Vec<(usize, String)>,
    templates: Vec<(String, Ref)>,
    spec: Option<TaskSpec>,
}

fn tasks(
    v: &mut Walker,
    value: Option<&Value>,
    defaults: &TaskDefaults,
    ctx: &Context,
) -> Vec<TaskSpec> {
    let items = match value {
        None | Some(Value::Null) => {
            v.err("tasks", "is required");
            return Vec::new();
        }
        Some(Value::Array(items)) => items,
        Some(other) => {
            v.err(
                "tasks",
                format!("must be an array, not {}", type_name(other)),
            );
            return Vec::new();
        }
    };
    if items.is_empty() || items.len() > MAX_TASKS {
        v.err(
            "tasks",
            format!("has {} tasks; a workflow has 1 to {MAX_TASKS}", items.len()),
        );
        if items.len() > MAX_TASKS {
            return Vec::new();
        }
    }
    let drafts: Vec<Draft> = items
        .iter()
        .enumerate()
        .map(|(i, item)| v.nested(&format!("tasks[{i}]"), |w| task(w, item, defaults, ctx)))
        .collect();

    let mut index: HashMap<&str, usize> = HashMap::new();
    for (i, d) in drafts.iter().enumerate() {
        if let Some(n) = &d.name {
            if let Some(first) = index.get(n.as_str()) {
                v.err(
                    format!("tasks[{i}].name"),
                    format!("'{n}' is also the name of tasks[{first}]"),
                );
            } else {
                index.insert(n, i);
            }
        }
    }
    let mut edges: Vec<Vec<(usize, usize)>> = vec![Vec::new(); drafts.len()];
    for (i, d) in drafts.iter().enumerate() {
        for (pos, up) in &d.depends_on {
            let field = format!("tasks[{i}].depends_on[{pos}]");
            match index.get(up.as_str()) {
                None => v.err(field, format!("'{up}' is not a task of this workflow")),
                Some(&u) if edges[i].iter().any(|&(_, x)| x == u) => {
                    v.err(field, format!("'{up}' is listed twice"));
                }
                Some(&u) => edges[i].push((*pos, u)),
            }
        }
    }
    let cycles = find_cycles(&edges);
    let name_of = |t: usize| drafts[t].name.as_deref().unwrap_or("?");
    for c in &cycles {
        let spelled: Vec<&str> = c.path.iter().map(|&t| name_of(t)).collect();
        v.err(
            format!("tasks[{}].depends_on[{}]", c.task, c.position),
            format!("cycle {}", spelled.join(" → ")),
        );
    }
    let dag = Dag::from_parts(
        edges
            .iter()
            .map(|e| e.iter().map(|&(_, u)| u).collect())
            .collect(),
        Vec::new(),
    );
    for (i, d) in drafts.iter().enumerate() {
        for (field, reference) in &d.templates {
            let Ref::TaskOutput { task, .. } = reference else {
                continue;
            };
            let field = format!("tasks[{i}].{field}");
            let message = match index.get(task.as_str()) {
                None => format!(
                    "{{{{ {reference} }}}} refers to '{task}', which is not a task of this workflow"
                ),
                Some(_) if !cycles.is_empty() => continue,
                Some(&u) if !dag.ancestors(i)[u] => format!(
                    "{{{{ {reference} }}}} refers to '{task}', which is not upstream of '{}'; add it to depends_on",
                    name_of(i)
                ),
                Some(&u) if drafts[u].spec.as_ref().is_some_and(|t| t.output.is_none()) => format!(
                    "{{{{ {reference} }}}} refers to the output of '{task}', which keeps none; set output: json on it"
                ),
                Some(_) => continue,
            };
            v.err(field, message);
        }
    }
    drafts.into_iter().filter_map(|d| d.spec).collect()
}

fn task(v: &mut Walker, item: &Value, defaults: &TaskDefaults, ctx: &Context) -> Draft {
    let mut draft = Draft {
        name: None,
        depends_on: Vec::new(),
        templates: Vec::new(),
        spec: None,
    };
    let Some(obj) = v.object(item, "") else {
        return draft;
    };
    v.unknown_fields(obj, "", &TASK_FIELDS, &[]);
    draft.name = v.req_str(obj, "name", "name");
    if let Some(n) = &draft.name
        && let Err(m) = check_name(n)
    {
        v.err("name", m);
    }
    match obj.get("depends_on") {
        None | Some(Value::Null) => {}
        Some(Value::Array(ups)) => {
            for (pos, up) in ups.iter().enumerate() {
                match up {
                    Value::String(s) => draft.depends_on.push((pos, s.clone())),
                    other => v.err(
                        format!("depends_on[{pos}]"),
                        format!("must be a task name, not {}", type_name(other)),
                    ),
                }
            }
        }
        Some(other) => v.err(
            "depends_on",
            format!("must be an array of task names, not {}", type_name(other)),
        ),
    }
    let trigger_rule = v.enumeration(
        obj,
        "trigger_rule",
        &TriggerRule::ALL.map(|r| (r.as_str(), r)),
        TriggerRule::AllSuccess,
    );
    let output = v
        .opt_str(obj, "output", "output")
        .and_then(|o| match o.as_str() {
            "json" => Some(OutputKind::Json),
            other => {
                v.err(
                    "output",
                    format!("'{other}' is not json, the only output kind"),
                );
                None
            }
        });
    let target = match obj.get("target") {
        Some(t) => templated_target(v, t, ctx, &mut draft.templates),
        None => {
            v.err("target", "is required");
            None
        }
    };
    // Judged by the target's written type, so that it is named beside the target's own
    // errors, whatever they are.
    let kind = obj
        .get("target")
        .and_then(|t| t.get("type"))
        .and_then(Value::as_str);
    if output.is_some()
        && let Some(kind) = kind
        && kind != "http"
    {
        v.err(
            "output",
            format!("a {kind} target gives no output; only http targets do"),
        );
    }
    let retry = retry_overrides(v, obj.get("retry"));
    let timeout = opt_duration(v, obj, "timeout");
    let heartbeat_timeout = opt_duration(v, obj, "heartbeat_timeout");
    let effective = retry.over(defaults.retry.over(Default::default()));
    if effective.max_interval < effective.initial_interval {
        v.err(
            "retry.max_interval",
            format!(
                "{} is shorter than the initial_interval of {} (with the workflow's defaults)",
                effective.max_interval, effective.initial_interval
            ),
        );
    }
    draft.spec = match (&draft.name, target) {
        (Some(name), Some(target)) => Some(TaskSpec {
            name: name.clone(),
            depends_on: draft.depends_on.iter().map(|(_, n)| n.clone()).collect(),
            trigger_rule,
            output,
            target,
            retry,
            timeout,
            heartbeat_timeout,
        }),
        _ => None,
    };
    draft
}

/// Checks a task's target whose strings may hold templates: each template is parsed (errors
/// name `target.<field>`), replaced by a plain placeholder while the target is checked as a
/// job's would be, and put back in the spec. The references found go to `refs`.
pub(crate) fn templated_target(
    v: &mut Walker,
    value: &Value,
    ctx: &Context,
    refs: &mut Vec<(String, Ref)>,
) -> Option<TargetSpec> {
    // A placeholder made of lowercase letters and digits survives every check (a URL's host
    // and path, a header value) unchanged; its stem is one the target's text does not hold.
    let text = value.to_string();
    let mut stem = String::from("sundialtpl");
    while text.contains(&stem) {
        stem.push('x');
    }
    let mut originals: BTreeMap<String, String> = BTreeMap::new();
    let before = v.errors.len();
    let probe = substitute(value, "target", &stem, &mut originals, refs, v);
    if v.errors.len() > before {
        return None;
    }
    let restore = |s: &str| {
        let mut out = s.to_owned();
        for (placeholder, original) in &originals {
            // A check may have upper-cased the text (an HTTP method).
            for form in [placeholder.clone(), placeholder.to_ascii_uppercase()] {
                if out.contains(form.as_str()) {
                    out = out.replace(form.as_str(), original);
                }
            }
        }
        out
    };
    let target = v.target(&probe, ctx);
    // Messages quote what the user wrote, templates and all, not the placeholders.
    for e in &mut v.errors[before..] {
        e.message = restore(&e.message);
    }
    let target = target?;
    if originals.is_empty() {
        return Some(target);
    }
    Some(map_target_strings(&target, |_, s| restore(s)))
}

/// `value` with each template in its strings replaced by a placeholder; parse errors go to
/// `v` under `path`.
fn substitute(
    value: &Value,
    path: &str,
    stem: &str,
    originals: &mut BTreeMap<String, String>,
    refs: &mut Vec<(String, Ref)>,
    v: &mut Walker,
) -> Value {
    match value {
        Value::String(s) if s.contains("{{") => match template::parse(s) {
            Err(m) => {
                v.err(path, m);
                value.clone()
            }
            Ok(t) => {
                let mut out = String::new();
                for piece in &t.pieces {
                    match piece {
                        template::Piece::Text(text) => out.push_str(text),
                        template::Piece::Ref { target, json } => {
                            let placeholder = format!("{stem}{}z", originals.len());
                            let filter = if *json { " | json" } else { "" };
                            originals
                                .insert(placeholder.clone(), format!("{{{{ {target}{filter} }}}}"));
                            refs.push((path.to_owned(), target.clone()));
                            out.push_str(&placeholder);
                        }
                    }
                }
                Value::String(out)
            }
        },
        Value::Object(o) => Value::Object(
            o.iter()
                .map(|(k, x)| {
                    let sub = format!("{path}.{k}");
                    (k.clone(), substitute(x, &sub, stem, originals, refs, v))
                })
                .collect(),
        ),
        Value::Array(a) => Value::Array(
            a.iter()
                .enumerate()
                .map(|(i, x)| {
                    let sub = format!("{path}.{i}");
                    substitute(x, &sub, stem, originals, refs, v)
                })
                .collect(),
        ),
        other => other.clone(),
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
            name: Some("nightly-etl".into()),
            http_allow: None,
        }
    }

    /// the example workflow of docs/workflows.md.
    fn etl() -> Value {
        json!({
            "schedule": {"cron": "0 2 * * *", "timezone": "Europe/Berlin"},
            "params": {"region": "eu"},
            "concurrency_policy": "skip", "run_timeout": "2h",
            "defaults": {"retry": {"max_attempts": 3, "initial_interval": "5s"}, "timeout": "5m"},
            "tasks": [
                {"name": "extract", "output": "json",
                 "target": {"type": "http", "method": "POST", "url": "https://etl.internal/extract",
                            "body": "{\"region\": {{ run.params.region | json }}}"}},
                {"name": "load", "depends_on": ["extract"], "retry": {"max_attempts": 5},
                 "target": {"type": "http", "method": "POST",
                            "url": "https://etl.internal/load/{{ tasks.extract.output.batch_id }}"}},
                {"name": "alert", "depends_on": ["extract", "load"], "trigger_rule": "one_failed",
                 "target": {"type": "nats", "connection": "events", "subject": "etl.failed",
                            "payload": "{{ run.id }}"}}
            ]
        })
    }

    fn bad_fields(body: &Value) -> Vec<(String, String)> {
        workflow_from_json(body, &ctx())
            .expect_err("refused")
            .into_iter()
            .map(|e| (e.field, e.message))
            .collect()
    }

    #[test]
    fn the_spec_example_is_accepted_with_its_templates_kept() {
        let wf = workflow_from_json(&etl(), &ctx()).unwrap();
        assert_eq!(wf.tasks.len(), 3);
        let TargetSpec::Http(load) = &wf.tasks[1].target else {
            panic!("http")
        };
        assert_eq!(
            load.url,
            "https://etl.internal/load/{{ tasks.extract.output.batch_id }}"
        );
        let TargetSpec::Http(extract) = &wf.tasks[0].target else {
            panic!("http")
        };
        assert_eq!(
            extract.body.as_deref(),
            Some("{\"region\": {{ run.params.region | json }}}")
        );
        let retry = wf.tasks[1].retry_policy(&wf.defaults);
        assert_eq!(retry.max_attempts, 5);
        assert_eq!(retry.initial_interval, Dur::from_secs(5));
        assert_eq!(wf.tasks[0].retry_policy(&wf.defaults).max_attempts, 3);
        assert_eq!(wf.tasks[2].trigger_rule, TriggerRule::OneFailed);
        // What is stored reads back as the same spec.
        let again = workflow_from_json(&serde_json::to_value(&wf).unwrap(), &ctx()).unwrap();
        assert_eq!(again, wf);
    }

    #[test]
    fn a_cycle_is_spelled_at_the_edge_that_closes_it() {
        let mut body = etl();
        body["tasks"][0]["depends_on"] = json!(["load"]);
        let errors = bad_fields(&body);
        assert!(
            errors.contains(&(
                "tasks[1].depends_on[0]".into(),
                "cycle load → extract → load".into()
            )),
            "{errors:?}"
        );
    }

    #[test]
    fn every_bad_task_field_is_named() {
        let body = json!({"tasks": [
            {"name": "a", "target": {"type": "http", "url": "http://h/{{ tasks.b.output.x }}"}},
            {"name": "a", "depends_on": ["zz", 3], "trigger_rule": "sometimes",
             "target": {"type": "nats", "connection": "events", "subject": "s"}, "output": "json"},
            {"name": "c", "depends_on": ["a", "a"],
             "target": {"type": "http", "url": "http://h/{{ tasks.a.output.x }}",
                        "body": "{{ run.nope }} {{ tasks.ghost.output }}"}},
            {"name": "d", "depends_on": ["c"],
             "target": {"type": "http", "url": "http://h/{{ run.id"}}
        ]});
        let fields: Vec<String> = bad_fields(&body).into_iter().map(|(f, _)| f).collect();
        for want in [
            "tasks[1].name",
            "tasks[1].depends_on[0]",
            "tasks[1].depends_on[1]",
            "tasks[1].trigger_rule",
            "tasks[1].output",
            "tasks[2].depends_on[1]",
            "tasks[2].target.body",
            "tasks[3].target.url",
            "tasks[0].target.url",
        ] {
            assert!(
                fields.contains(&want.to_string()),
                "{want} missing from {fields:?}"
            );
        }
    }

    #[test]
    fn a_template_must_refer_to_an_upstream_task_that_keeps_an_output() {
        let body = json!({"tasks": [
            {"name": "a", "target": {"type": "http", "url": "http://h/a"}},
            {"name": "b", "output": "json", "target": {"type": "http", "url": "http://h/b"}},
            {"name": "c", "depends_on": ["a"],
             "target": {"type": "http", "url": "http://h/{{ tasks.a.output.x }}",
                        "body": "{{ tasks.b.output }}"}}
        ]});
        let errors = bad_fields(&body);
        assert_eq!(errors.len(), 2, "{errors:?}");
        let message = |field: &str| &errors.iter().find(|(f, _)| f == field).expect(field).1;
        assert!(
            message("tasks[2].target.url").contains("keeps none"),
            "{errors:?}"
        );
        assert!(
            message("tasks[2].target.body").contains("not upstream of 'c'"),
            "{errors:?}"
        );
    }

    #[test]
    fn a_refused_field_is_quoted_with_its_template_not_a_placeholder() {
        let body = json!({"tasks": [
            {"name": "a", "target": {"type": "http", "method": "{{ run.params.m }}", "url": "{{ run.params.u }}"}}
        ]});
        let errors = bad_fields(&body);
        assert_eq!(errors.len(), 2, "{errors:?}");
        for (field, message) in &errors {
            assert!(
                !message.to_lowercase().contains("sundialtpl"),
                "{field}: {message}"
            );
            assert!(message.contains("{{ run.params."), "{field}: {message}");
        }
    }

    #[test]
    fn too_many_or_no_tasks_are_refused() {
        let many: Vec<Value> = (0..=MAX_TASKS)
            .map(|i| json!({"name": format!("t{i}"), "target": {"type": "http", "url": "http://h/"}}))
            .collect();
        assert_eq!(bad_fields(&json!({"tasks": many}))[0].0, "tasks");
        assert_eq!(bad_fields(&json!({"tasks": []}))[0].0, "tasks");
        assert_eq!(bad_fields(&json!({}))[0].0, "tasks");
    }

    #[test]
    fn a_chain_of_the_most_tasks_is_accepted() {
        let chain: Vec<Value> = (0..MAX_TASKS)
            .map(|i| {
                let mut t = json!({"name": format!("t{i}"), "target": {"type": "http", "url": "http://h/"}});
                if i > 0 {
                    t["depends_on"] = json!([format!("t{}", i - 1)]);
                }
                t
            })
            .collect();
        let wf = workflow_from_json(&json!({"tasks": chain}), &ctx()).unwrap();
        assert_eq!(wf.tasks.len(), MAX_TASKS);
    }

    #[test]
    fn output_on_a_target_that_gives_none_is_named_beside_the_targets_own_errors() {
        let body = json!({"tasks": [{"name": "a", "output": "json",
            "target": {"type": "nats", "connection": "nowhere", "subject": "s"}}]});
        let fields: Vec<String> = bad_fields(&body).into_iter().map(|(f, _)| f).collect();
        assert!(
            fields.contains(&"tasks[0].output".to_string()),
            "{fields:?}"
        );
        assert!(
            fields.contains(&"tasks[0].target.connection".to_string()),
            "{fields:?}"
        );
    }

    #[test]
    fn a_run_timeout_of_zero_is_no_limit() {
        let mut body = etl();
        body["run_timeout"] = json!("0s");
        assert_eq!(workflow_from_json(&body, &ctx()).unwrap().run_timeout, None);
    }

    #[test]
    fn trigger_params_must_be_an_object() {
        assert_eq!(
            trigger_params(&json!({"params": {"a": 1}})).unwrap()["a"],
            json!(1)
        );
        assert_eq!(
            trigger_params(&json!({"params": [1]})).unwrap_err()[0].field,
            "params"
        );
        assert_eq!(trigger_params(&json!({"x": 1})).unwrap_err()[0].field, "x");
    }
}
