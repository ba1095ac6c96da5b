//! `sundial workflow ...`: workflows (DAGs of tasks, docs/workflows.md) and their
//! runs over the HTTP API.
//!
//! The conventions are those of `sundial job` (client.rs): the same `--server`, `--token` and
//! `-n` flags, `-o table|json`, tables for people, errors as one `sundial: error: ...` line on
//! standard error, exit status 1 for a failure and 2 for bad usage or an `apply` file refused
//! as invalid. `workflow graph` alone prints `-o text` (its default) or `-o dot`.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context as _;
use clap::{Args, Subcommand, ValueEnum};
use reqwest::Method;
use serde_json::{Map, Value, json};
use sundial_core::workflow::{WorkflowSpec, graph};

use crate::client::{Bulk, apply_file};
use crate::output::{print_run_tasks, print_runs, print_workflows};
use crate::remote::{Api, ClientOpts, Format, input_error, print, set_paused};

/// Workflows: `POST …/workflows:apply` with `{"workflows": [...]}`, at most the API's batch.
const WORKFLOWS: Bulk = Bulk {
    noun: "workflow",
    plural: "workflows",
    batch: sundial_api::workflows::MAX_BATCH,
};

/// `-o` of the workflow commands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum WorkflowFormat {
    /// Aligned columns for people (the default but for `graph`).
    Table,
    /// The API's JSON.
    Json,
    /// `graph` only: one line per task, in topological order (its default).
    Text,
    /// `graph` only: a Graphviz digraph (`| dot -Tsvg`).
    Dot,
}

/// `sundial workflow ...`
#[derive(Debug, Args)]
pub struct WorkflowArgs {
    #[command(subcommand)]
    command: WorkflowCommand,
    #[command(flatten)]
    pub opts: ClientOpts,
    /// Output format: table (the default) or json; for `graph`, text (the default) or dot
    #[arg(short = 'o', long, global = true, value_enum)]
    output: Option<WorkflowFormat>,
}

#[derive(Debug, Subcommand)]
enum WorkflowCommand {
    /// Create or replace the workflows in a YAML or JSON file (one workflow, a list, an object
    /// with a `workflows` list, or several YAML documents); exit status 2 when the file is
    /// refused as invalid.
    Apply {
        /// The file; `-` reads standard input
        #[arg(short = 'f', long = "file")]
        file: PathBuf,
    },
    /// List the namespace's workflows.
    List {
        /// Only paused (true) or unpaused (false) workflows
        #[arg(long)]
        paused: Option<bool>,
        /// Only workflows with this label, as key=value
        #[arg(long)]
        label: Option<String>,
        /// List the workflows of every namespace (the token may see), with a NAMESPACE column
        #[arg(short = 'A', long)]
        all_namespaces: bool,
    },
    /// Show one workflow with its next fire times.
    Get { name: String },
    /// Pause a workflow: no new runs; started runs finish.
    Pause { name: String },
    /// Resume a paused workflow.
    Resume { name: String },
    /// Start a run now.
    Trigger {
        name: String,
        /// A run parameter, merged over the workflow's `params` (repeatable; the last of a
        /// key wins). VALUE is read as JSON when it parses (`3`, `true`, `"x"`, `{"a": 1}`),
        /// else as a string
        #[arg(long = "param", value_name = "KEY=VALUE", value_parser = parse_param)]
        params: Vec<(String, Value)>,
    },
    /// Backfill the workflow's past slots in [--from, --to) that have no run (trigger:
    /// backfill), at --rate a second, under its concurrency policy; or, with --list, --status
    /// ID or --cancel ID, its backfills.
    Backfill(crate::backfill_cmd::BackfillArgs),
    /// Delete a workflow (its unfinished runs are cancelled; history is kept).
    Delete { name: String },
    /// A workflow's runs, newest first.
    Runs {
        name: String,
        /// Only runs in this state
        #[arg(long)]
        state: Option<String>,
        /// At most this many
        #[arg(long, default_value_t = 20)]
        limit: u32,
    },
    /// Show, cancel or re-run one run; each takes the run id and its workflow's name
    /// (`-w/--workflow NAME`, required).
    Run {
        #[command(subcommand)]
        command: RunCommand,
    },
    /// Print a workflow's task graph: as text, one task per line in topological order with
    /// its upstream (`← extract, load`) and its trigger rule unless all_success; with
    /// `-o dot`, as a Graphviz digraph.
    Graph { name: String },
}

/// A run, by its id and its workflow (the API addresses runs under their workflow).
#[derive(Debug, Args)]
struct RunRef {
    /// The run's id
    run_id: String,
    /// The run's workflow (required)
    #[arg(short = 'w', long, value_name = "NAME")]
    workflow: String,
}

#[derive(Debug, Subcommand)]
enum RunCommand {
    /// Show one run with its tasks.
    Get {
        #[command(flatten)]
        run: RunRef,
    },
    /// Cancel a run that has not finished: its waiting tasks are cancelled, its running
    /// attempts stopped.
    Cancel {
        #[command(flatten)]
        run: RunRef,
    },
    /// Re-run a finished run from failure: every task that ended failed, dead, cancelled or
    /// upstream_failed and every task downstream of one; with `--task`, those tasks and every
    /// task downstream of them.
    Retry {
        #[command(flatten)]
        run: RunRef,
        /// A task to run again, whatever its state (repeatable)
        #[arg(long = "task", value_name = "NAME")]
        tasks: Vec<String>,
    },
}

/// `KEY=VALUE`, VALUE as JSON when it parses, else as a string.
fn parse_param(text: &str) -> Result<(String, Value), String> {
    let Some((key, value)) = text.split_once('=') else {
        return Err(format!("'{text}' is not KEY=VALUE"));
    };
    if key.is_empty() {
        return Err(format!("'{text}' has no KEY before '='"));
    }
    let value = serde_json::from_str(value).unwrap_or_else(|_| Value::String(value.to_owned()));
    Ok((key.to_owned(), value))
}

/// The format of every command but `graph`.
fn table_or_json(output: Option<WorkflowFormat>) -> anyhow::Result<Format> {
    match output {
        None | Some(WorkflowFormat::Table) => Ok(Format::Table),
        Some(WorkflowFormat::Json) => Ok(Format::Json),
        Some(WorkflowFormat::Text) => Err(input_error(
            "-o text: only `workflow graph` prints text; use table or json",
        )),
        Some(WorkflowFormat::Dot) => Err(input_error(
            "-o dot: only `workflow graph` prints dot; use table or json",
        )),
    }
}

fn check_name(name: &str) -> anyhow::Result<()> {
    sundial_core::names::check_name(name)
        .map_err(|m| anyhow::anyhow!("workflow name '{name}': the name {m}"))
}

/// Prints a run (the answer of run get, cancel and retry) as one row, then its tasks.
fn print_run(format: Format, v: &Value) {
    print(format, v, |v| {
        print_runs(std::slice::from_ref(v));
        if let Some(tasks) = v["tasks"].as_array().filter(|t| !t.is_empty()) {
            outln!();
            print_run_tasks(tasks);
        }
    });
}

/// Runs `sundial workflow ...`.
///
/// # Errors
/// As the `job` commands: a bad name or `-o`, an unreadable or invalid file, an unreachable
/// server, or an error status (its problem's text).
pub async fn run(args: WorkflowArgs) -> anyhow::Result<ExitCode> {
    let WorkflowArgs {
        command,
        opts,
        output,
    } = args;
    match &command {
        WorkflowCommand::Get { name }
        | WorkflowCommand::Pause { name }
        | WorkflowCommand::Resume { name }
        | WorkflowCommand::Trigger { name, .. }
        | WorkflowCommand::Delete { name }
        | WorkflowCommand::Runs { name, .. }
        | WorkflowCommand::Graph { name }
        | WorkflowCommand::Backfill(crate::backfill_cmd::BackfillArgs { name, .. }) => {
            check_name(name)?
        }
        WorkflowCommand::Run { command } => match command {
            RunCommand::Get { run }
            | RunCommand::Cancel { run }
            | RunCommand::Retry { run, .. } => check_name(&run.workflow)?,
        },
        WorkflowCommand::Apply { .. } | WorkflowCommand::List { .. } => {}
    }
    let api = Api::new(opts);
    if let WorkflowCommand::Graph { name } = &command {
        let dot = match output {
            None | Some(WorkflowFormat::Text) => false,
            Some(WorkflowFormat::Dot) => true,
            Some(WorkflowFormat::Table | WorkflowFormat::Json) => {
                return Err(input_error(
                    "`workflow graph` prints -o text (the default) or -o dot",
                ));
            }
        };
        let v = api
            .call(Method::GET, &format!("/workflows/{name}"), None)
            .await?;
        let spec: WorkflowSpec = serde_json::from_value(v)
            .with_context(|| format!("the server's workflow {name} cannot be read"))?;
        outln!(
            "{}",
            if dot {
                graph::dot(&spec)
            } else {
                graph::text(&spec)
            }
        );
        return Ok(ExitCode::SUCCESS);
    }
    let format = table_or_json(output)?;
    match command {
        WorkflowCommand::Apply { file } => return apply_file(&api, &file, &WORKFLOWS).await,
        WorkflowCommand::List {
            paused,
            label,
            all_namespaces,
        } => {
            let mut query = vec!["limit=1000".to_owned()];
            if let Some(p) = paused {
                query.push(format!("paused={p}"));
            }
            if let Some(l) = label {
                query.push(format!("label={l}"));
            }
            let v = api
                .list_across(&format!("/workflows?{}", query.join("&")), all_namespaces)
                .await?;
            let items = v["items"].as_array().map_or(&[][..], Vec::as_slice);
            print(format, &v, |_| print_workflows(items, all_namespaces));
            if format == Format::Table && items.is_empty() && !all_namespaces {
                api.hint_other_namespaces("workflows").await;
            }
        }
        WorkflowCommand::Get { name } => {
            let v = api
                .call(Method::GET, &format!("/workflows/{name}"), None)
                .await?;
            print(format, &v, |v| {
                outln!("{}", serde_yaml_ng::to_string(v).unwrap_or_default())
            });
        }
        WorkflowCommand::Pause { name } => {
            set_paused(&api, format, "workflow", &name, true).await?
        }
        WorkflowCommand::Resume { name } => {
            set_paused(&api, format, "workflow", &name, false).await?
        }
        WorkflowCommand::Trigger { name, params } => {
            let body = (!params.is_empty())
                .then(|| json!({ "params": params.into_iter().collect::<Map<_, _>>() }));
            let v = api
                .call(
                    Method::POST,
                    &format!("/workflows/{name}/trigger"),
                    body.as_ref(),
                )
                .await?;
            print(format, &v, |v| {
                outln!(
                    "run {} {}",
                    v["id"].as_str().unwrap_or("?"),
                    v["state"].as_str().unwrap_or("?")
                )
            });
        }
        WorkflowCommand::Backfill(backfill) => {
            crate::backfill_cmd::run(&api, format, "workflow", backfill).await?
        }
        WorkflowCommand::Delete { name } => {
            api.call(Method::DELETE, &format!("/workflows/{name}"), None)
                .await?;
            if format == Format::Table {
                outln!("workflow {name} deleted");
            }
        }
        WorkflowCommand::Runs { name, state, limit } => {
            let mut path = format!("/workflows/{name}/runs?limit={limit}");
            if let Some(s) = state {
                path.push_str(&format!("&state={s}"));
            }
            let v = api.call(Method::GET, &path, None).await?;
            print(format, &v, |v| {
                print_runs(v["items"].as_array().map_or(&[][..], Vec::as_slice))
            });
        }
        WorkflowCommand::Run { command } => {
            let (method, path, body) = match command {
                RunCommand::Get { run } => (
                    Method::GET,
                    format!("/workflows/{}/runs/{}", run.workflow, run.run_id),
                    None,
                ),
                RunCommand::Cancel { run } => (
                    Method::POST,
                    format!("/workflows/{}/runs/{}/cancel", run.workflow, run.run_id),
                    None,
                ),
                RunCommand::Retry { run, tasks } => (
                    Method::POST,
                    format!("/workflows/{}/runs/{}/retry", run.workflow, run.run_id),
                    (!tasks.is_empty()).then(|| json!({ "tasks": tasks })),
                ),
            };
            let v = api.call(method, &path, body.as_ref()).await?;
            print_run(format, &v);
        }
        WorkflowCommand::Graph { .. } => {}
    }
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_param_value_is_json_when_it_parses_and_a_string_otherwise() {
        let p = |t: &str| parse_param(t).expect("a KEY=VALUE");
        assert_eq!(p("n=3"), ("n".into(), json!(3)));
        assert_eq!(p("ok=true"), ("ok".into(), json!(true)));
        assert_eq!(p(r#"o={"a":[1]}"#), ("o".into(), json!({"a": [1]})));
        assert_eq!(p(r#"q="3""#), ("q".into(), json!("3")));
        assert_eq!(p("region=eu"), ("region".into(), json!("eu")));
        assert_eq!(p("empty="), ("empty".into(), json!("")));
        assert_eq!(p("eq=a=b"), ("eq".into(), json!("a=b")));
        assert!(parse_param("novalue").is_err());
        assert!(parse_param("=3").is_err());
    }

    #[test]
    fn text_and_dot_are_refused_outside_graph() {
        assert_eq!(table_or_json(None).ok(), Some(Format::Table));
        assert_eq!(
            table_or_json(Some(WorkflowFormat::Json)).ok(),
            Some(Format::Json)
        );
        for f in [WorkflowFormat::Text, WorkflowFormat::Dot] {
            let e = table_or_json(Some(f)).expect_err("refused");
            assert!(e.is::<crate::remote::InputError>());
        }
    }
}
