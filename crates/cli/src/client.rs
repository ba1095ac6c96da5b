//! Client commands: `job ...` and `exec ...` over the HTTP API (docs/configuration.md, "Client
//! commands"), and reading and applying a file of resources ([`apply_file`]), which `workflow`
//! and `calendar` share. The HTTP client itself is [`crate::remote`].

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context;
use clap::{Args, Subcommand};
use serde::Deserialize as _;
use serde_json::Value;

use crate::output::{print_executions, print_jobs};
use crate::remote::{Api, ClientOpts, Format, FormatArg, input_error, print, set_paused};

/// `sundial job ...`
#[derive(Debug, Args)]
pub struct JobArgs {
    #[command(subcommand)]
    command: JobCommand,
    #[command(flatten)]
    pub opts: ClientOpts,
    #[command(flatten)]
    format: FormatArg,
}

#[derive(Debug, Subcommand)]
enum JobCommand {
    /// Create or replace the jobs in a YAML or JSON file (one job, a list, an object with a
    /// `jobs` list, or several YAML documents); exit status 2 when the file is refused as invalid.
    Apply {
        /// The file; `-` reads standard input
        #[arg(short = 'f', long = "file")]
        file: PathBuf,
        /// Show what applying would do (as `job plan` does) and ask before writing
        #[arg(long)]
        plan: bool,
    },
    /// Show what applying a file of jobs would do, writing nothing: per job created, changed
    /// (each field before and after) or unchanged, the next fire times before and after, the
    /// not-started executions it would cancel, and slots it would skip or fire late.
    Plan {
        /// The file; `-` reads standard input
        #[arg(short = 'f', long = "file")]
        file: PathBuf,
    },
    /// List the namespace's jobs.
    List {
        /// Only paused (true) or unpaused (false) jobs
        #[arg(long)]
        paused: Option<bool>,
        /// Only jobs with this label, as key=value
        #[arg(long)]
        label: Option<String>,
        /// List the jobs of every namespace (the token may see), with a NAMESPACE column
        #[arg(short = 'A', long)]
        all_namespaces: bool,
    },
    /// Show one job with its next fire times.
    Get {
        /// The job's name
        name: String,
    },
    /// Pause a job.
    Pause {
        /// The job's name
        name: String,
    },
    /// Resume a paused job.
    Resume {
        /// The job's name
        name: String,
    },
    /// Run a job now.
    Trigger {
        /// The job's name
        name: String,
    },
    /// Backfill the job's past slots in [--from, --to) that have no execution (trigger:
    /// backfill), at --rate a second, under its concurrency policy; or, with --list, --status
    /// ID or --cancel ID, its backfills.
    Backfill(crate::backfill_cmd::BackfillArgs),
    /// Delete a job (its history is kept).
    Delete {
        /// The job's name
        name: String,
    },
    /// A job's executions, newest first, then its upcoming slots apart.
    History {
        /// The job's name
        name: String,
        /// Only executions in this state
        #[arg(long)]
        state: Option<String>,
        /// At most this many
        #[arg(long, default_value_t = 20)]
        limit: u32,
    },
}

/// `sundial exec ...`
#[derive(Debug, Args)]
pub struct ExecArgs {
    #[command(subcommand)]
    command: ExecCommand,
    #[command(flatten)]
    pub opts: ClientOpts,
    #[command(flatten)]
    format: FormatArg,
}

#[derive(Debug, Subcommand)]
enum ExecCommand {
    /// Show one execution with its attempts.
    Get {
        /// The execution's id
        id: String,
    },
    /// Cancel an execution that has not finished.
    Cancel {
        /// The execution's id
        id: String,
    },
    /// Re-drive a dead or failed execution.
    Retry {
        /// The execution's id
        id: String,
    },
    /// The namespace's executions, newest first (`--state dead` is the dead-letter listing).
    List {
        /// Only executions in this state
        #[arg(long)]
        state: Option<String>,
        /// Only this job's executions (its history outlives it)
        #[arg(long)]
        job: Option<String>,
        /// At most this many
        #[arg(long, default_value_t = 20)]
        limit: u32,
    },
}

/// A kind of resource that `apply` writes in bulk: its name in messages, the key of its list
/// in a file and in the `…:apply` body, and the most one request may hold.
#[derive(Debug, Clone, Copy)]
pub struct Bulk {
    /// One of them, in messages: `job`.
    pub noun: &'static str,
    /// The list's key and the route's collection: `jobs` (`POST …/jobs:apply`).
    pub plural: &'static str,
    /// The most items one `…:apply` request may hold.
    pub batch: usize,
}

/// Jobs: `POST …/jobs:apply` with `{"jobs": [...]}`, at most 1,000 per request.
pub const JOBS: Bulk = Bulk {
    noun: "job",
    plural: "jobs",
    batch: 1000,
};

/// Reads one or many jobs from YAML or JSON text: a job object, a list of jobs, an object
/// with a `jobs` list, or several YAML documents.
///
/// # Errors
/// Text that is neither, naming the document.
pub fn parse_jobs(text: &str) -> anyhow::Result<Vec<Value>> {
    parse_items(text, &JOBS)
}

/// Reads one or many items of a kind from YAML or JSON text: an item object, a list of
/// items, an object with a list under the kind's plural (`{"workflows": [...]}`), or several
/// YAML documents, each of which may be any of these.
///
/// # Errors
/// An [`crate::remote::InputError`] for text that is neither, naming the document, and for text that holds
/// no item.
pub fn parse_items(text: &str, kind: &Bulk) -> anyhow::Result<Vec<Value>> {
    let mut docs = Vec::new();
    if let Ok(v) = serde_json::from_str::<Value>(text) {
        docs.push(v);
    } else {
        for (i, doc) in serde_yaml_ng::Deserializer::from_str(text).enumerate() {
            let yaml = serde_yaml_ng::Value::deserialize(doc)
                .map_err(|e| input_error(format!("document {} is not valid YAML: {e}", i + 1)))?;
            if let Some(path) = non_finite(&yaml, String::new()) {
                return Err(input_error(format!(
                    "document {}: {path}: .inf and .nan are not numbers a {} can hold",
                    i + 1,
                    kind.noun
                )));
            }
            let v = serde_json::to_value(&yaml).map_err(|e| {
                input_error(format!("document {} cannot be read as JSON: {e}", i + 1))
            })?;
            if !v.is_null() {
                docs.push(v);
            }
        }
    }
    let mut items = Vec::new();
    for doc in docs {
        match doc {
            Value::Array(list) => items.extend(list),
            Value::Object(mut obj) if obj.get(kind.plural).is_some_and(Value::is_array) => {
                if let Some(Value::Array(list)) = obj.remove(kind.plural) {
                    items.extend(list);
                }
            }
            other => items.push(other),
        }
    }
    if items.is_empty() {
        return Err(input_error(format!("the file holds no {}", kind.noun)));
    }
    Ok(items)
}

/// The path of the first infinite or NaN number in a YAML value (JSON has neither, and would
/// silently turn them into null).
fn non_finite(v: &serde_yaml_ng::Value, path: String) -> Option<String> {
    use serde_yaml_ng::Value as Y;
    let join = |key: String| {
        if path.is_empty() {
            key
        } else {
            format!("{path}.{key}")
        }
    };
    match v {
        Y::Number(n) if n.as_f64().is_some_and(|f| !f.is_finite()) => Some(if path.is_empty() {
            "value".into()
        } else {
            path
        }),
        Y::Sequence(items) => items
            .iter()
            .enumerate()
            .find_map(|(i, x)| non_finite(x, join(i.to_string()))),
        Y::Mapping(m) => m.iter().find_map(|(k, x)| {
            let key = k.as_str().map_or_else(|| format!("{k:?}"), str::to_owned);
            non_finite(x, join(key))
        }),
        Y::Tagged(t) => non_finite(&t.value, path),
        _ => None,
    }
}

/// `sundial job ...`
pub async fn job(args: JobArgs) -> anyhow::Result<ExitCode> {
    let opts = args.format.apply_to(args.opts);
    let format = opts.output;
    let api = Api::new(opts);
    use reqwest::Method;
    if let JobCommand::Get { name }
    | JobCommand::Pause { name }
    | JobCommand::Resume { name }
    | JobCommand::Trigger { name }
    | JobCommand::Delete { name }
    | JobCommand::History { name, .. }
    | JobCommand::Backfill(crate::backfill_cmd::BackfillArgs { name, .. }) = &args.command
    {
        sundial_core::names::check_name(name)
            .map_err(|m| anyhow::anyhow!("job name '{name}': the name {m}"))?;
    }
    match args.command {
        JobCommand::Apply { file, plan: false } => return apply_file(&api, &file, &JOBS).await,
        JobCommand::Apply { file, plan: true } => {
            if file.as_os_str() == "-" {
                return Err(input_error(
                    "--plan asks before writing, on standard input: give the jobs in a file, \
                     not with -f -"
                        .to_owned(),
                ));
            }
            let text = read_file(&file)?;
            if !plan(&api, &text, format).await? {
                return Ok(ExitCode::SUCCESS);
            }
            eprint!("Apply these changes? Only 'yes' applies: ");
            let mut answer = String::new();
            std::io::stdin()
                .read_line(&mut answer)
                .context("reading the answer")?;
            if answer.trim() != "yes" {
                eprintln!("Nothing applied.");
                return Ok(ExitCode::from(1));
            }
            return apply(&api, &text, &JOBS).await;
        }
        JobCommand::Plan { file } => {
            plan(&api, &read_file(&file)?, format).await?;
        }
        JobCommand::List {
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
                .list_across(&format!("/jobs?{}", query.join("&")), all_namespaces)
                .await?;
            let items = v["items"].as_array().map_or(&[][..], Vec::as_slice);
            print(format, &v, |_| print_jobs(items, all_namespaces));
            if format == Format::Table && items.is_empty() && !all_namespaces {
                api.hint_other_namespaces("jobs").await;
            }
        }
        JobCommand::Get { name } => {
            let v = api
                .call(Method::GET, &format!("/jobs/{name}"), None)
                .await?;
            print(format, &v, |v| {
                outln!("{}", serde_yaml_ng::to_string(v).unwrap_or_default())
            });
        }
        JobCommand::Pause { name } => set_paused(&api, format, "job", &name, true).await?,
        JobCommand::Resume { name } => set_paused(&api, format, "job", &name, false).await?,
        JobCommand::Trigger { name } => {
            let v = api
                .call(Method::POST, &format!("/jobs/{name}/trigger"), None)
                .await?;
            print(format, &v, |v| {
                outln!("execution {} queued", v["id"].as_str().unwrap_or("?"))
            });
        }
        JobCommand::Backfill(backfill) => {
            crate::backfill_cmd::run(&api, format, "job", backfill).await?
        }
        JobCommand::Delete { name } => {
            api.call(Method::DELETE, &format!("/jobs/{name}"), None)
                .await?;
            if format == Format::Table {
                outln!("job {name} deleted");
            }
        }
        JobCommand::History { name, state, limit } => {
            let mut path = format!("/jobs/{name}/executions?limit={limit}");
            if let Some(s) = state {
                path.push_str(&format!("&state={s}"));
            }
            let v = api.call(Method::GET, &path, None).await?;
            print(format, &v, |v| {
                let items = v["items"].as_array().map_or(&[][..], Vec::as_slice);
                // Slots written ahead (`scheduled`, not yet due) are what will happen, not
                // what happened: listed apart, after the history.
                let (upcoming, past): (Vec<Value>, Vec<Value>) = items
                    .iter()
                    .cloned()
                    .partition(|e| e["state"] == "scheduled");
                if past.is_empty() {
                    outln!("no executions yet");
                } else {
                    print_executions(&past);
                }
                if !upcoming.is_empty() {
                    outln!("\nupcoming (written ahead, not yet due):");
                    let mut upcoming = upcoming;
                    upcoming.reverse();
                    print_executions(&upcoming);
                }
            });
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// Applies every item of a kind in `file` (`-` reads standard input): see [`apply`].
///
/// # Errors
/// A file that cannot be read; otherwise those of [`apply`].
pub async fn apply_file(api: &Api, file: &Path, kind: &Bulk) -> anyhow::Result<ExitCode> {
    apply(api, &read_file(file)?, kind).await
}

/// The text of `-f FILE`; `-` reads standard input.
///
/// # Errors
/// The file cannot be read (the message names it).
pub(crate) fn read_file(file: &Path) -> anyhow::Result<String> {
    if file.as_os_str() == "-" {
        std::io::read_to_string(std::io::stdin()).context("reading standard input")
    } else {
        std::fs::read_to_string(file).with_context(|| format!("-f: cannot read {}", file.display()))
    }
}

/// The items of `text` by namespace (an item's own `namespace`, else `-n`), as [`apply`]
/// sends them.
///
/// # Errors
/// An [`crate::remote::InputError`] when an item names a namespace other than `-n` gives, or a name appears
/// twice in one namespace.
fn by_namespace<'a>(
    api: &Api,
    items: &'a [Value],
    noun: &str,
) -> anyhow::Result<std::collections::BTreeMap<String, Vec<&'a Value>>> {
    let mut by_namespace: std::collections::BTreeMap<String, Vec<&Value>> = Default::default();
    let given = api.opts.namespace_given;
    for item in items {
        let named = item.get("namespace").and_then(Value::as_str);
        if given
            && let Some(named) = named
            && named != api.opts.namespace
        {
            return Err(input_error(format!(
                "{noun} {}: the file names namespace '{named}' but -n/--namespace (or \
                 SUNDIAL_NAMESPACE) names '{}'; remove one of them. Nothing was applied",
                item["name"].as_str().unwrap_or("?"),
                api.opts.namespace
            )));
        }
        let ns = named.unwrap_or(&api.opts.namespace);
        by_namespace.entry(ns.to_owned()).or_default().push(item);
    }
    for (ns, items) in &by_namespace {
        let mut seen = std::collections::HashSet::new();
        for item in items {
            if let Some(name) = item["name"].as_str()
                && !seen.insert(name)
            {
                return Err(input_error(format!(
                    "{noun} {ns}/{name} appears twice in the file; nothing was applied"
                )));
            }
        }
    }
    Ok(by_namespace)
}

/// Prints what applying the jobs of `text` would do (`POST …/jobs:plan` per namespace and
/// batch, writing nothing): as a diff for people, or the plans as JSON. Returns whether
/// anything would change.
///
/// # Errors
/// An [`crate::remote::InputError`] when the file cannot be read as jobs or the server refuses a batch as
/// invalid (each field error printed, as `apply` prints them); the API's other errors.
pub async fn plan(api: &Api, text: &str, format: Format) -> anyhow::Result<bool> {
    let items = parse_items(text, &JOBS)?;
    let grouped = by_namespace(api, &items, "job")?;
    let (mut counts, mut plans, mut at) = ([0usize; 3], Vec::new(), Value::Null);
    for (ns, items) in grouped {
        let scoped = Api::new(ClientOpts {
            namespace: ns.clone(),
            ..api.opts.clone()
        });
        for chunk in items.chunks(JOBS.batch) {
            let body = serde_json::json!({"jobs": chunk});
            let (status, v) = scoped
                .send(reqwest::Method::POST, "/jobs:plan", Some(&body))
                .await?;
            if status != 200 {
                for e in v["errors"].as_array().map_or(&[][..], Vec::as_slice) {
                    eprintln!(
                        "  {}: {}",
                        e["field"].as_str().unwrap_or(""),
                        e["message"].as_str().unwrap_or("")
                    );
                }
                let detail = v["detail"]
                    .as_str()
                    .unwrap_or("the server refused the plan");
                return Err(if matches!(status, 400 | 413 | 422) {
                    input_error(format!("{ns}: {detail}"))
                } else {
                    anyhow::anyhow!("{ns}: {detail} ({status})")
                });
            }
            if at.is_null() {
                at = v["at"].clone();
            }
            for item in v["items"].as_array().map_or(&[][..], Vec::as_slice) {
                let slot = match item["action"].as_str() {
                    Some("created") => 0,
                    Some("changed") => 1,
                    _ => 2,
                };
                counts[slot] += 1;
                if format == Format::Table {
                    print_plan(&ns, item);
                }
                plans.push(item.clone());
            }
        }
    }
    match format {
        Format::Table => outln!(
            "Plan: {} to create, {} to change, {} unchanged.",
            counts[0],
            counts[1],
            counts[2]
        ),
        Format::Json => outln!(
            "{}",
            serde_json::to_string_pretty(&serde_json::json!({"at": at, "items": plans}))
                .unwrap_or_default()
        ),
    }
    Ok(counts[0] + counts[1] > 0)
}

/// One job's plan as a diff: `+` created, `~` changed, `=` unchanged.
fn print_plan(ns: &str, item: &Value) {
    let name = cell_str(&item["name"]);
    let times = |key: &str| -> String {
        let list: Vec<&str> = item[key]
            .as_array()
            .map_or(&[][..], Vec::as_slice)
            .iter()
            .filter_map(Value::as_str)
            .collect();
        if list.is_empty() {
            "none".to_owned()
        } else {
            list.join(", ")
        }
    };
    match item["action"].as_str() {
        Some("created") => {
            outln!("+ job {ns}/{name} will be created");
            outln!("    next fire times: {}", times("next_fire_times_after"));
        }
        Some("changed") => {
            outln!("~ job {ns}/{name} will be changed");
            for c in item["changes"].as_array().map_or(&[][..], Vec::as_slice) {
                outln!(
                    "    {}: {} → {}",
                    cell_str(&c["field"]),
                    c["before"],
                    c["after"]
                );
            }
            outln!(
                "    next fire times before: {}",
                times("next_fire_times_before")
            );
            outln!(
                "    next fire times after:  {}",
                times("next_fire_times_after")
            );
            let cancels = item["cancels"].as_array().map_or(&[][..], Vec::as_slice);
            if !cancels.is_empty() {
                let cancelled = cancels.iter().filter(|c| c["ends"] == "cancelled").count();
                outln!(
                    "    ends {} not-started execution(s): {cancelled} cancelled (due), {} removed (ahead of their slot)",
                    cancels.len(),
                    cancels.len() - cancelled
                );
            }
            if let Some(n) = item["rewrites"].as_u64().filter(|n| *n > 0) {
                outln!("    rewrites {n} not-started execution(s) with the new definition");
            }
        }
        _ => outln!("= job {ns}/{name} unchanged"),
    }
    let skipped = times("skipped_slots");
    if skipped != "none" {
        outln!("    ! skips slot(s): {skipped}");
    }
    for late in item["late_slots"].as_array().map_or(&[][..], Vec::as_slice) {
        outln!(
            "    ! fires slot {} late, by {} ms",
            cell_str(&late["slot"]),
            late["late_by_ms"]
        );
    }
}

/// Applies every item of a kind in a file's text ([`parse_items`]) through the bulk endpoint
/// (`…/jobs:apply`, `…/workflows:apply`), per namespace (an item's own `namespace`, else
/// `-n`) in batches of at most [`Bulk::batch`], each all or none (a file of at most that many
/// items in one namespace is one batch); reports each item on standard output, and each
/// rejected batch with its field errors, the item named, on standard error. A name given
/// twice in one namespace of the file is refused before anything is sent.
///
/// # Errors
/// An [`crate::remote::InputError`] (exit status 2) when the file cannot be read as items, names one twice,
/// or every batch that was rejected was refused as invalid input (400, 413 or 422); any other
/// error (exit status 1) when a batch was rejected for another reason or the server could not
/// be reached.
pub async fn apply(api: &Api, text: &str, kind: &Bulk) -> anyhow::Result<ExitCode> {
    let Bulk {
        noun,
        plural,
        batch,
    } = *kind;
    let items = parse_items(text, kind)?;
    let by_namespace = by_namespace(api, &items, noun)?;
    let batches: usize = by_namespace.values().map(|j| j.len().div_ceil(batch)).sum();
    let (mut rejected, mut refused_as_invalid) = (0, true);
    for (ns, items) in by_namespace {
        let scoped = Api::new(ClientOpts {
            namespace: ns.clone(),
            ..api.opts.clone()
        });
        for chunk in items.chunks(batch) {
            let body = Value::Object(serde_json::Map::from_iter([(
                plural.to_owned(),
                Value::from_iter(chunk.iter().map(|&item| item.clone())),
            )]));
            let (status, v) = scoped
                .send(
                    reqwest::Method::POST,
                    &format!("/{plural}:apply"),
                    Some(&body),
                )
                .await?;
            if status == 200 {
                let created = v["created"].as_u64().unwrap_or(0);
                for item in v["items"].as_array().map_or(&[][..], Vec::as_slice) {
                    outln!(
                        "{noun} {ns}/{} applied (version {}, next fire at {})",
                        cell_str(&item["name"]),
                        item["version"],
                        cell_str(&item["next_fire_at"])
                    );
                }
                outln!(
                    "{ns}: {created} created, {} updated, {} unchanged",
                    v["updated"].as_u64().unwrap_or(0),
                    v["unchanged"].as_u64().unwrap_or(0)
                );
                continue;
            }
            rejected += chunk.len();
            refused_as_invalid &= matches!(status, 400 | 413 | 422);
            if batches > 1 {
                eprintln!(
                    "{ns}: a batch of {} {plural} was rejected and none of it written (the file \
                     is applied in {batches} batches of at most {batch}, each all or none)",
                    chunk.len()
                );
            } else {
                let what = if chunk.len() == 1 { noun } else { plural };
                eprintln!("{ns}: {} {what} rejected, none written", chunk.len());
            }
            let errors = v["errors"].as_array().map_or(&[][..], Vec::as_slice);
            if errors.is_empty() {
                eprintln!(
                    "  {}",
                    v["detail"]
                        .as_str()
                        .unwrap_or("the server refused the batch")
                );
            }
            for e in errors {
                let field = e["field"].as_str().unwrap_or("");
                // `<plural>.<i>.<field>`: name the item by its name where the file gives one.
                let mut parts = field.splitn(3, '.');
                let label = match (
                    parts.next(),
                    parts.next().and_then(|i| i.parse::<usize>().ok()),
                    parts.next(),
                ) {
                    (Some(list), Some(i), rest) if list == plural => {
                        let name = chunk
                            .get(i)
                            .and_then(|j| j["name"].as_str())
                            .map_or(format!("#{}", i + 1), str::to_owned);
                        // An error about the item as a whole (`jobs.0`) names no field.
                        match rest.filter(|r| !r.is_empty()) {
                            Some(rest) => format!("{noun} {name}: {rest}"),
                            None => format!("{noun} {name}"),
                        }
                    }
                    _ => field.to_owned(),
                };
                eprintln!("  {label}: {}", e["message"].as_str().unwrap_or(""));
            }
        }
    }
    if rejected > 0 {
        let message = format!(
            "{rejected} of {} {} not applied",
            items.len(),
            if items.len() == 1 { noun } else { plural }
        );
        return Err(if refused_as_invalid {
            input_error(message)
        } else {
            anyhow::anyhow!(message)
        });
    }
    Ok(ExitCode::SUCCESS)
}

fn cell_str(v: &Value) -> String {
    v.as_str().map_or_else(|| "-".to_owned(), str::to_owned)
}

/// `sundial exec ...`
pub async fn exec(args: ExecArgs) -> anyhow::Result<ExitCode> {
    let opts = args.format.apply_to(args.opts);
    let format = opts.output;
    let api = Api::new(opts);
    use reqwest::Method;
    let (method, path) = match &args.command {
        ExecCommand::Get { id } => (Method::GET, format!("/executions/{id}")),
        ExecCommand::Cancel { id } => (Method::POST, format!("/executions/{id}/cancel")),
        ExecCommand::Retry { id } => (Method::POST, format!("/executions/{id}/retry")),
        ExecCommand::List { state, job, limit } => {
            let mut path = format!("/executions?limit={limit}");
            if let Some(s) = state {
                path.push_str(&format!("&state={s}"));
            }
            if let Some(j) = job {
                sundial_core::names::check_name(j)
                    .map_err(|m| input_error(format!("--job: '{j}': the name {m}")))?;
                path.push_str(&format!("&job={j}"));
            }
            let v = api.call(Method::GET, &path, None).await?;
            print(format, &v, |v| {
                print_executions(v["items"].as_array().map_or(&[][..], Vec::as_slice))
            });
            return Ok(ExitCode::SUCCESS);
        }
    };
    let v = api.call(method, &path, None).await?;
    print(format, &v, |v| {
        print_executions(std::slice::from_ref(v));
        if let Some(attempts) = v["attempts"].as_array().filter(|a| !a.is_empty()) {
            outln!();
            crate::output::print_attempts(attempts);
        }
    });
    Ok(ExitCode::SUCCESS)
}
