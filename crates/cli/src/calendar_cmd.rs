//! `sundial calendar ...`: holiday calendars (docs/time.md, "Calendars") over the
//! HTTP API, with the conventions of `sundial job` (client.rs): `--server`, `--token`, `-n`,
//! `-o table|json`, exit status 2 for bad usage or a file refused as invalid.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Subcommand};
use reqwest::Method;
use serde_json::Value;

use crate::remote::{Api, ClientOpts, Format, FormatArg, input_error, print};

/// `sundial calendar ...`
#[derive(Debug, Args)]
pub struct CalendarArgs {
    #[command(subcommand)]
    command: CalendarCommand,
    #[command(flatten)]
    pub opts: ClientOpts,
    #[command(flatten)]
    format: FormatArg,
}

#[derive(Debug, Subcommand)]
enum CalendarCommand {
    /// Create or replace the calendars of a YAML or JSON file: one calendar, or several YAML
    /// documents, each with its `name` (and `namespace`, else `-n`), `timezone` and `exclude`.
    /// Each is written on its own; exit status 2 when one is refused as invalid.
    Apply {
        /// The file; `-` reads standard input
        #[arg(short = 'f', long = "file")]
        file: PathBuf,
    },
    /// Show one calendar: its exclusions, the jobs and workflows that name it, and its next
    /// excluded dates.
    Get {
        /// The calendar's name
        name: String,
    },
    /// List the namespace's calendars.
    List,
    /// Delete a calendar; refused while a job or workflow names it.
    Delete {
        /// The calendar's name
        name: String,
    },
}

/// Runs the command.
///
/// # Errors
/// An [`crate::remote::InputError`] for a file that cannot be read as calendars or is refused
/// as invalid; the API's other errors.
pub async fn run(args: CalendarArgs) -> anyhow::Result<ExitCode> {
    let format = args.format.output;
    let opts = ClientOpts {
        output: format,
        ..args.opts
    };
    for name in match &args.command {
        CalendarCommand::Get { name } | CalendarCommand::Delete { name } => vec![name],
        _ => Vec::new(),
    } {
        sundial_core::names::check_name(name)
            .map_err(|m| anyhow::anyhow!("calendar name '{name}': the name {m}"))?;
    }
    match args.command {
        CalendarCommand::Apply { file } => apply(&opts, &file, format).await,
        CalendarCommand::Get { name } => {
            let api = Api::new(opts);
            let v = api
                .call(Method::GET, &format!("/calendars/{name}"), None)
                .await?;
            print(format, &v, |v| {
                outln!("{}", serde_yaml_ng::to_string(v).unwrap_or_default())
            });
            Ok(ExitCode::SUCCESS)
        }
        CalendarCommand::List => {
            let api = Api::new(opts);
            let v = api.call(Method::GET, "/calendars", None).await?;
            print(format, &v, |v| {
                outln!(
                    "{:<24} {:<20} {:>9} {:>8}",
                    "NAME",
                    "TIMEZONE",
                    "EXCLUSIONS",
                    "VERSION"
                );
                for c in v["items"].as_array().map_or(&[][..], Vec::as_slice) {
                    outln!(
                        "{:<24} {:<20} {:>9} {:>8}",
                        c["name"].as_str().unwrap_or("?"),
                        c["timezone"].as_str().unwrap_or("?"),
                        c["exclude"].as_array().map_or(0, Vec::len),
                        c["version"]
                    );
                }
            });
            Ok(ExitCode::SUCCESS)
        }
        CalendarCommand::Delete { name } => {
            let api = Api::new(opts);
            api.call(Method::DELETE, &format!("/calendars/{name}"), None)
                .await?;
            if format == Format::Table {
                outln!("calendar {name} deleted");
            }
            Ok(ExitCode::SUCCESS)
        }
    }
}

/// Writes each calendar of the file with `PUT …/calendars/{name}`, in the file's order.
async fn apply(
    opts: &ClientOpts,
    file: &std::path::Path,
    format: Format,
) -> anyhow::Result<ExitCode> {
    let text = crate::client::read_file(file)?;
    let mut docs = Vec::new();
    for (i, doc) in serde_yaml_ng::Deserializer::from_str(&text).enumerate() {
        let value: Value = serde::Deserialize::deserialize(doc)
            .map_err(|e| input_error(format!("document {}: not YAML or JSON: {e}", i + 1)))?;
        if !value.is_null() {
            docs.push(value);
        }
    }
    if docs.is_empty() {
        return Err(input_error("the file holds no calendar"));
    }
    // Every document is checked for a name before anything is written, so a file with one
    // unnamed calendar writes none.
    let mut named = Vec::with_capacity(docs.len());
    for (i, mut doc) in docs.into_iter().enumerate() {
        let Some(obj) = doc.as_object_mut() else {
            return Err(input_error(format!(
                "document {}: not a calendar object; nothing was applied",
                i + 1
            )));
        };
        let Some(name) = obj
            .remove("name")
            .and_then(|n| n.as_str().map(str::to_owned))
        else {
            return Err(input_error(format!(
                "document {}: the calendar has no name; nothing was applied",
                i + 1
            )));
        };
        sundial_core::names::check_name(&name).map_err(|m| {
            input_error(format!(
                "document {}: calendar name '{name}': the name {m}; nothing was applied",
                i + 1
            ))
        })?;
        let ns = match obj.remove("namespace") {
            Some(Value::String(ns)) => ns,
            _ => opts.namespace.clone(),
        };
        named.push((ns, name, doc));
    }
    let mut refused = 0;
    for (ns, name, doc) in named {
        let api = Api::new(ClientOpts {
            namespace: ns.clone(),
            ..opts.clone()
        });
        let (status, v) = api
            .send(Method::PUT, &format!("/calendars/{name}"), Some(&doc))
            .await?;
        match status {
            200 | 201 => {
                if format == Format::Table {
                    outln!(
                        "calendar {ns}/{name} {} (version {})",
                        if status == 201 { "created" } else { "applied" },
                        v["version"]
                    );
                } else {
                    outln!("{}", serde_json::to_string_pretty(&v).unwrap_or_default());
                }
            }
            _ => {
                refused += 1;
                eprintln!("calendar {ns}/{name} refused, not written:");
                for e in v["errors"].as_array().map_or(&[][..], Vec::as_slice) {
                    eprintln!(
                        "  {}: {}",
                        e["field"].as_str().unwrap_or(""),
                        e["message"].as_str().unwrap_or("")
                    );
                }
                if v["errors"].as_array().is_none_or(Vec::is_empty) {
                    eprintln!(
                        "  {}",
                        v["detail"].as_str().unwrap_or("the server refused it")
                    );
                }
            }
        }
    }
    if refused > 0 {
        return Err(input_error(format!("{refused} calendar(s) not applied")));
    }
    Ok(ExitCode::SUCCESS)
}
