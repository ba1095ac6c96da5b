//! `sundial job backfill` and `sundial workflow backfill` (docs/time.md, "Backfill"): start a
//! backfill over past slots (or count it with `--dry-run`), follow it with `--wait`, list a
//! job's backfills, show or cancel one.

use std::time::Duration;

use reqwest::Method;
use serde_json::{Value, json};

use crate::remote::{Api, Format, print};

/// The options of `job backfill NAME` / `workflow backfill NAME`.
#[derive(Debug, clap::Args)]
pub struct BackfillArgs {
    /// The job's (or workflow's) name
    pub name: String,
    /// First instant of the range, inclusive (RFC 3339, e.g. 2026-11-01T00:00:00Z)
    #[arg(long, required_unless_present_any = ["list", "status", "cancel"])]
    from: Option<String>,
    /// End of the range, exclusive (RFC 3339), not later than now
    #[arg(long, required_unless_present_any = ["list", "status", "cancel"])]
    to: Option<String>,
    /// Slots created per second at most, 1-10000 (the server's default: 10)
    #[arg(long, conflicts_with_all = ["list", "status", "cancel"])]
    rate: Option<u32>,
    /// Count the slots it would create and name the first and last, writing nothing
    #[arg(long, conflicts_with_all = ["list", "status", "cancel"])]
    dry_run: bool,
    /// Follow it, printing its progress each second, until it ends
    #[arg(long, conflicts_with = "dry_run")]
    wait: bool,
    /// List the backfills of the job (or workflow), newest first, instead
    #[arg(long, conflicts_with_all = ["from", "to", "status", "cancel"])]
    list: bool,
    /// Show the backfill with this id instead (with --wait: follow it)
    #[arg(long, value_name = "ID", conflicts_with_all = ["from", "to", "cancel"])]
    status: Option<String>,
    /// Cancel the backfill with this id instead: it creates nothing more; what it created stays
    #[arg(long, value_name = "ID", conflicts_with_all = ["from", "to"])]
    cancel: Option<String>,
}

fn progress(b: &Value) -> String {
    let mut line = format!(
        "backfill {} {}: {} created, {} found done already, {} remaining of {} slots",
        b["id"].as_str().unwrap_or("?"),
        b["state"].as_str().unwrap_or("?"),
        b["created"],
        b["existing"],
        b["remaining"],
        b["slots"],
    );
    if let Some(reason) = b["reason"].as_str() {
        line.push_str(&format!(" ({reason})"));
    }
    line
}

/// Runs `job backfill` (`kind` "job") or `workflow backfill` (`kind` "workflow").
///
/// # Errors
/// An unreachable server or an error status (a refused request is an input error, exit 2).
pub async fn run(api: &Api, format: Format, kind: &str, args: BackfillArgs) -> anyhow::Result<()> {
    let base = format!("/{kind}s/{}", args.name);
    if args.list {
        let v = api
            .call(Method::GET, &format!("{base}/backfills"), None)
            .await?;
        print(format, &v, |v| {
            let items = v["items"].as_array().map_or(&[][..], Vec::as_slice);
            if items.is_empty() {
                outln!("no backfills of {kind} {}", args.name);
            }
            for b in items {
                outln!(
                    "{}  [{} .. {})  {} a second",
                    progress(b),
                    b["from"].as_str().unwrap_or("?"),
                    b["to"].as_str().unwrap_or("?"),
                    b["max_per_second"]
                );
            }
        });
        return Ok(());
    }
    if let Some(id) = &args.cancel {
        let v = api
            .call(Method::POST, &format!("{base}/backfills/{id}/cancel"), None)
            .await?;
        print(format, &v, |v| outln!("{}", progress(v)));
        return Ok(());
    }
    let mut current = if let Some(id) = &args.status {
        api.call(Method::GET, &format!("{base}/backfills/{id}"), None)
            .await?
    } else {
        let mut body = json!({"from": args.from, "to": args.to});
        if let Some(rate) = args.rate {
            body["max_per_second"] = json!(rate);
        }
        if args.dry_run {
            body["dry_run"] = json!(true);
        }
        let v = api
            .call(Method::POST, &format!("{base}/backfill"), Some(&body))
            .await?;
        if args.dry_run {
            print(format, &v, |v| {
                outln!(
                    "would create {} of {} slots ({} done already){}",
                    v["count"],
                    v["slots"],
                    v["existing"],
                    match (
                        v["first"].as_str(),
                        v["last"].as_str(),
                        v["reason"].as_str()
                    ) {
                        (Some(first), Some(last), _) => format!(": first {first}, last {last}"),
                        (_, _, Some(reason)) => format!(": {reason}"),
                        _ => String::new(),
                    }
                )
            });
            return Ok(());
        }
        v
    };
    if !args.wait {
        print(format, &current, |v| outln!("{}", progress(v)));
        return Ok(());
    }
    let id = current["id"].as_str().unwrap_or_default().to_owned();
    loop {
        if format == Format::Table {
            outln!("{}", progress(&current));
        }
        if current["state"] != "running" {
            break;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
        current = api
            .call(Method::GET, &format!("{base}/backfills/{id}"), None)
            .await?;
    }
    if format == Format::Json {
        print(format, &current, |_| {});
    }
    Ok(())
}
