//! A workflow's task graph for people: as lines of text or as Graphviz `dot`
//! (`sundial workflow graph NAME [-o text|dot]`, docs/workflows.md).
//!
//! Both renderings list the tasks in a topological order ([`Dag::topological_order`]): every
//! task comes after all its direct upstream. A spec with a cycle (which
//! [`super::validate::workflow_from_json`] never returns) is rendered in the order written.
//! A task's trigger rule is shown only when it is not the default, `all_success`.
//!
//! Invariants: pure functions of the spec; every task appears exactly once as a line or node,
//! and every `depends_on` entry that names a task of the workflow appears exactly once, as an
//! `← upstream` name or an edge.

use crate::workflow::dag::Dag;
use crate::workflow::release::TriggerRule;
use crate::workflow::spec::WorkflowSpec;

/// The task indices of `spec` in a topological order, or in the order written for a spec
/// with a cycle.
fn order(dag: &Dag) -> Vec<usize> {
    dag.topological_order()
        .unwrap_or_else(|| (0..dag.len()).collect())
}

/// Renders the task graph as text: one line per task in topological order, its name, then
/// `← ` and its direct upstream (in `depends_on` order, comma-separated) if it has any, then
/// its trigger rule in parentheses unless it is `all_success`. Names are padded to one width
/// so the arrows line up; lines carry no trailing spaces and are joined by `\n`, without a
/// final newline.
///
/// # Example
/// ```
/// # use sundial_core::validate::Context;
/// # use sundial_core::workflow::{graph, validate::workflow_from_json};
/// let spec = workflow_from_json(
///     &serde_json::json!({"name": "etl", "tasks": [
///         {"name": "extract", "target": {"type": "http", "url": "https://etl.internal/e"}},
///         {"name": "load", "depends_on": ["extract"],
///          "target": {"type": "http", "url": "https://etl.internal/l"}},
///         {"name": "alert", "depends_on": ["extract", "load"], "trigger_rule": "one_failed",
///          "target": {"type": "http", "url": "https://etl.internal/a"}},
///     ]}),
///     &Context { namespace: "default".into(), ..Default::default() },
/// )
/// .unwrap();
/// assert_eq!(
///     graph::text(&spec),
///     "extract\n\
///      load     ← extract\n\
///      alert    ← extract, load  (one_failed)"
/// );
/// ```
pub fn text(spec: &WorkflowSpec) -> String {
    let dag = Dag::of(spec);
    let width = spec
        .tasks
        .iter()
        .map(|t| t.name.chars().count())
        .max()
        .unwrap_or(0);
    let mut lines = Vec::with_capacity(dag.len());
    for i in order(&dag) {
        let task = &spec.tasks[i];
        let mut line = format!("{:<width$}", task.name);
        let upstream: Vec<&str> = dag
            .upstream(i)
            .iter()
            .map(|&u| spec.tasks[u].name.as_str())
            .collect();
        if !upstream.is_empty() {
            line.push_str("  ← ");
            line.push_str(&upstream.join(", "));
        }
        if task.trigger_rule != TriggerRule::AllSuccess {
            line.push_str("  (");
            line.push_str(task.trigger_rule.as_str());
            line.push(')');
        }
        lines.push(line.trim_end().to_owned());
    }
    lines.join("\n")
}

/// Renders the task graph as a Graphviz `digraph` named after the workflow, laid out left to
/// right: one node statement per task in topological order, then one edge `upstream -> task`
/// per dependency, labelled with the task's trigger rule unless it is `all_success`. Every
/// name is a quoted ID ([`quote`]). Lines are joined by `\n`, without a final newline; pipe
/// the output to `dot -Tsvg`.
///
/// # Example
/// ```
/// # use sundial_core::validate::Context;
/// # use sundial_core::workflow::{graph, validate::workflow_from_json};
/// let spec = workflow_from_json(
///     &serde_json::json!({"name": "etl", "tasks": [
///         {"name": "extract", "target": {"type": "http", "url": "https://etl.internal/e"}},
///         {"name": "alert", "depends_on": ["extract"], "trigger_rule": "one_failed",
///          "target": {"type": "http", "url": "https://etl.internal/a"}},
///     ]}),
///     &Context { namespace: "default".into(), ..Default::default() },
/// )
/// .unwrap();
/// assert_eq!(
///     graph::dot(&spec),
///     "digraph \"etl\" {\n  rankdir=LR;\n  \"extract\";\n  \"alert\";\n  \
///      \"extract\" -> \"alert\" [label=\"one_failed\"];\n}"
/// );
/// ```
pub fn dot(spec: &WorkflowSpec) -> String {
    let dag = Dag::of(spec);
    let order = order(&dag);
    let mut lines = vec![
        format!("digraph {} {{", quote(&spec.name)),
        "  rankdir=LR;".to_owned(),
    ];
    for &i in &order {
        lines.push(format!("  {};", quote(&spec.tasks[i].name)));
    }
    for &i in &order {
        let task = &spec.tasks[i];
        let label = match task.trigger_rule {
            TriggerRule::AllSuccess => String::new(),
            rule => format!(" [label={}]", quote(rule.as_str())),
        };
        for &u in dag.upstream(i) {
            lines.push(format!(
                "  {} -> {}{label};",
                quote(&spec.tasks[u].name),
                quote(&task.name)
            ));
        }
    }
    lines.push("}".to_owned());
    lines.join("\n")
}

/// `text` as a Graphviz quoted ID: in double quotes, with `"` and `\` escaped by a backslash
/// and a line break written `\n`, so that any text is one ID and reads back as itself in a
/// label.
///
/// # Example
/// ```
/// assert_eq!(sundial_core::workflow::graph::quote(r#"a"b"#), r#""a\"b""#);
/// ```
pub fn quote(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 2);
    out.push('"');
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::validate::Context;
    use crate::workflow::validate::workflow_from_json;
    use proptest::prelude::*;
    use serde_json::{Value, json};

    fn ctx() -> Context {
        Context {
            namespace: "billing".into(),
            ..Default::default()
        }
    }

    fn task(name: &str, depends_on: &[&str], rule: Option<&str>) -> Value {
        let mut t = json!({
            "name": name,
            "depends_on": depends_on,
            "target": {"type": "http", "url": "https://etl.internal/x"},
        });
        if let Some(r) = rule {
            t["trigger_rule"] = json!(r);
        }
        t
    }

    fn spec(tasks: Vec<Value>) -> WorkflowSpec {
        workflow_from_json(&json!({"name": "nightly-etl", "tasks": tasks}), &ctx())
            .expect("a valid workflow")
    }

    /// the example of docs/workflows.md, written downstream first.
    fn etl() -> WorkflowSpec {
        spec(vec![
            task("alert", &["extract", "load"], Some("one_failed")),
            task("load", &["extract"], None),
            task("extract", &[], None),
        ])
    }

    #[test]
    fn text_lists_each_task_after_its_upstream_with_arrows_and_non_default_rules() {
        assert_eq!(
            text(&etl()),
            "extract\n\
             load     ← extract\n\
             alert    ← extract, load  (one_failed)"
        );
    }

    #[test]
    fn text_shows_a_root_task_s_non_default_rule_and_pads_to_the_longest_name() {
        let s = spec(vec![
            task("a", &[], Some("all_done")),
            task("longer-name", &["a"], None),
        ]);
        assert_eq!(text(&s), "a            (all_done)\nlonger-name  ← a");
    }

    #[test]
    fn dot_has_one_node_per_task_and_one_labelled_edge_per_dependency() {
        assert_eq!(
            dot(&etl()),
            "digraph \"nightly-etl\" {\n  rankdir=LR;\n  \"extract\";\n  \"load\";\n  \"alert\";\n  \
             \"extract\" -> \"load\";\n  \
             \"extract\" -> \"alert\" [label=\"one_failed\"];\n  \
             \"load\" -> \"alert\" [label=\"one_failed\"];\n}"
        );
    }

    #[test]
    fn quote_escapes_quotes_backslashes_and_line_breaks() {
        assert_eq!(quote("plain"), "\"plain\"");
        assert_eq!(quote("a\"b\\c\nd"), "\"a\\\"b\\\\c\\nd\"");
        assert_eq!(quote(""), "\"\"");
    }

    #[test]
    fn a_spec_with_a_cycle_renders_in_the_order_written() {
        // Only a spec deserialized without validation can hold one.
        let mut s = etl();
        s.tasks[2].depends_on = vec!["alert".into()];
        let lines: Vec<String> = text(&s).lines().map(|l| l.to_owned()).collect();
        assert_eq!(lines.len(), 3);
        assert!(lines[0].starts_with("alert"), "{lines:?}");
        assert!(dot(&s).contains("\"alert\" -> \"extract\";"));
    }

    /// A random DAG of up to 12 tasks: task `i` may depend on any task before it, and the
    /// tasks are then written in a shuffled order, so the order written is rarely
    /// topological.
    fn random_dag() -> impl Strategy<Value = WorkflowSpec> {
        (1usize..12)
            .prop_flat_map(|n| {
                let deps = (0..n)
                    .map(|i| proptest::collection::vec(any::<bool>(), i))
                    .collect::<Vec<_>>();
                let rules = proptest::collection::vec(0usize..4, n);
                (deps, rules, Just((0..n).collect::<Vec<_>>()).prop_shuffle())
            })
            .prop_map(|(deps, rules, order)| {
                let tasks = order
                    .iter()
                    .map(|&i| {
                        let names: Vec<String> = deps[i]
                            .iter()
                            .enumerate()
                            .filter(|(_, on)| **on)
                            .map(|(u, _)| format!("t{u}"))
                            .collect();
                        let names: Vec<&str> = names.iter().map(String::as_str).collect();
                        task(
                            &format!("t{i}"),
                            &names,
                            Some(TriggerRule::ALL[rules[i]].as_str()),
                        )
                    })
                    .collect();
                spec(tasks)
            })
    }

    proptest! {
        #[test]
        fn every_task_is_rendered_once_after_its_upstream_with_every_edge(s in random_dag()) {
            let text = text(&s);
            let lines: Vec<&str> = text.lines().collect();
            prop_assert_eq!(lines.len(), s.tasks.len());
            let position = |name: &str| {
                lines.iter().position(|l| l.split_whitespace().next() == Some(name))
            };
            for t in &s.tasks {
                let at = position(&t.name);
                prop_assert!(at.is_some(), "{} missing from\n{}", t.name, text);
                for up in &t.depends_on {
                    prop_assert!(position(up) < at, "{} before {} in\n{}", t.name, up, text);
                }
            }

            let dot = dot(&s);
            let edges = s.tasks.iter().map(|t| t.depends_on.len()).sum::<usize>();
            prop_assert_eq!(dot.matches(" -> ").count(), edges);
            for t in &s.tasks {
                let node = format!("\n  {};\n", quote(&t.name));
                prop_assert_eq!(dot.matches(&node).count(), 1);
                for up in &t.depends_on {
                    let edge = format!("\n  {} -> {}", quote(up), quote(&t.name));
                    prop_assert_eq!(dot.matches(&edge).count(), 1);
                }
            }
        }
    }
}
