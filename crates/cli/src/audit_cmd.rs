//! `sundial audit ...`: the namespace's audit log (docs/security.md, "Audit log") over the
//! HTTP API, with the conventions of `sundial job` (client.rs): `--server`, `--token`, `-n`,
//! `-o table|json`.
//!
//! `verify` exits 0 when the chain is whole and 1 naming the first bad entry's id; the API
//! recomputes the chain from the store, so the CLI trusts nothing it holds itself.

use std::process::ExitCode;

use clap::{Args, Subcommand};
use reqwest::Method;
use serde_json::Value;

use crate::remote::{Api, ClientOpts, Format, FormatArg, print};

/// `sundial audit ...`
#[derive(Debug, Args)]
pub struct AuditArgs {
    #[command(subcommand)]
    command: AuditCommand,
    #[command(flatten)]
    pub opts: ClientOpts,
    #[command(flatten)]
    format: FormatArg,
}

#[derive(Debug, Subcommand)]
enum AuditCommand {
    /// List the namespace's audit log, newest first, following pages up to --limit entries.
    List {
        /// Only entries of this kind (job, workflow, calendar, secret, execution, run,
        /// backfill, namespace)
        #[arg(long)]
        resource: Option<String>,
        /// Only entries of resources of this name (an execution's, run's or backfill's id)
        #[arg(long)]
        name: Option<String>,
        /// Only entries by this token name, or anonymous
        #[arg(long)]
        actor: Option<String>,
        /// Only entries at or after this RFC 3339 instant
        #[arg(long)]
        since: Option<String>,
        /// At most this many entries (at least 1)
        #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u32).range(1..))]
        limit: u32,
    },
    /// Recompute the namespace's hash chain: exit 0 when whole, 1 naming the first bad entry.
    Verify,
}

/// Runs the command.
///
/// # Errors
/// The API's errors (a bad filter is answered 400 naming it).
pub async fn run(args: AuditArgs) -> anyhow::Result<ExitCode> {
    let format = args.format.output;
    let opts = ClientOpts {
        output: format,
        ..args.opts
    };
    let api = Api::new(opts);
    match args.command {
        AuditCommand::List {
            resource,
            name,
            actor,
            since,
            limit,
        } => {
            let filters = [
                ("resource", resource),
                ("name", name),
                ("actor", actor),
                ("since", since),
            ];
            let mut items: Vec<Value> = Vec::new();
            let mut token: Option<String> = None;
            let limit = limit as usize;
            while items.len() < limit {
                let mut query = url::form_urlencoded::Serializer::new(String::new());
                for (key, value) in &filters {
                    if let Some(v) = value {
                        query.append_pair(key, v);
                    }
                }
                query.append_pair("limit", &(limit - items.len()).min(1000).to_string());
                if let Some(t) = &token {
                    query.append_pair("page_token", t);
                }
                let v = api
                    .call(Method::GET, &format!("/audit?{}", query.finish()), None)
                    .await?;
                items.extend(v["items"].as_array().cloned().unwrap_or_default());
                token = v["next_page_token"].as_str().map(str::to_owned);
                if token.is_none() {
                    break;
                }
            }
            let all = Value::Array(items);
            print(format, &all, |v| {
                outln!(
                    "{:>6}  {:<24} {:<16} {:<9} {:<10} {:<24} {:>7}  REQUEST",
                    "ID",
                    "AT",
                    "ACTOR",
                    "ACTION",
                    "RESOURCE",
                    "NAME",
                    "VERSION"
                );
                for e in v.as_array().map_or(&[][..], Vec::as_slice) {
                    let actor = match &e["actor"] {
                        Value::String(s) => s.clone(),
                        a => a["token"].as_str().unwrap_or("?").to_owned(),
                    };
                    let version = match (e["version_before"].as_i64(), e["version_after"].as_i64())
                    {
                        (Some(b), Some(a)) if a != b => format!("{b}→{a}"),
                        (_, Some(a)) => a.to_string(),
                        (Some(b), None) => format!("{b}→"),
                        (None, None) => "-".to_owned(),
                    };
                    outln!(
                        "{:>6}  {:<24} {:<16} {:<9} {:<10} {:<24} {:>7}  {}",
                        e["id"].as_i64().unwrap_or_default(),
                        e["at"].as_str().unwrap_or("?"),
                        actor,
                        e["action"].as_str().unwrap_or("?"),
                        e["resource"].as_str().unwrap_or("?"),
                        e["name"].as_str().unwrap_or("?"),
                        version,
                        e["request_id"].as_str().unwrap_or("?")
                    );
                }
            });
            Ok(ExitCode::SUCCESS)
        }
        AuditCommand::Verify => {
            let v = api.call(Method::GET, "/audit:verify", None).await?;
            let ok = v["ok"].as_bool() == Some(true);
            if format == Format::Json {
                outln!("{}", serde_json::to_string_pretty(&v).unwrap_or_default());
            } else if ok {
                outln!(
                    "the audit chain is whole: {} entries verified",
                    v["entries"]
                );
            } else {
                let bad = &v["first_bad"];
                outln!(
                    "the audit chain is broken at entry {}: {} (entries verified before it: {})",
                    bad["id"],
                    bad["reason"].as_str().unwrap_or("?"),
                    v["entries"]
                );
            }
            Ok(if ok {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(1)
            })
        }
    }
}
