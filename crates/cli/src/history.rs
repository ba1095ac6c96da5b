//! `sundial history prune`: history retention run by hand against the store
//! (docs/configuration.md, "history_retention"), or counted with `--dry-run`.

use std::process::ExitCode;
use std::sync::Arc;

use clap::{Args, Subcommand};
use sundial_clock::SystemClock;
use sundial_store::{HistoryKind, HistoryPrune, HistoryPruned, Store};

use sundial_server::config::{DEFAULT_DATABASE_URL, parse_retention};
use sundial_server::open_store;

/// `sundial history`.
#[derive(Debug, Args)]
pub struct HistoryArgs {
    #[command(subcommand)]
    command: HistoryCommand,
}

#[derive(Debug, Subcommand)]
enum HistoryCommand {
    /// Delete the executions and workflow runs that finished more than RETENTION ago (each
    /// job's and workflow's newest kept), as the server's retention does; or count them.
    Prune(PruneArgs),
}

#[derive(Debug, Args)]
struct PruneArgs {
    /// Store URL [default: sqlite://sundial.db]
    #[arg(long, env = "SUNDIAL_DATABASE_URL")]
    database_url: Option<String>,
    /// Keep what finished within this long (a duration: 30d, 12h; at least 1m)
    #[arg(long, value_name = "DURATION", default_value = "30d")]
    retention: String,
    /// Count what would be deleted; delete nothing
    #[arg(long)]
    dry_run: bool,
}

/// Rows one call looks at when pruning by hand: the server's batch, paced as the server paces
/// it (`sundial_store::maintenance`), so a prune by hand beside a running server slows its
/// executions no more than the server's own retention does.
const BATCH: u32 = sundial_store::maintenance::RETENTION_BATCH;

/// Runs `sundial history …`.
///
/// # Errors
/// A bad `--retention` (exit 2), or the store's error.
pub async fn run(args: HistoryArgs) -> anyhow::Result<ExitCode> {
    let HistoryCommand::Prune(args) = args.command;
    let retention = parse_retention(Some(&args.retention))
        .map_err(|e| crate::remote::InputError(format!("--retention: {e:#}")))?;
    let url = args
        .database_url
        .unwrap_or_else(|| DEFAULT_DATABASE_URL.into());
    let sqlite = url
        .strip_prefix("sqlite://")
        .or_else(|| url.strip_prefix("sqlite:"));
    if sqlite.is_none() && !url.starts_with("postgres://") && !url.starts_with("postgresql://") {
        return Err(crate::remote::InputError(format!(
            "--database-url: '{url}' is not a sqlite: or postgres:// URL"
        ))
        .into());
    }
    // A dry run creates nothing: not a store file that is not there.
    if let Some(path) = sqlite.map(|p| p.split('?').next().unwrap_or(p))
        && (path.is_empty() || (args.dry_run && !std::path::Path::new(path).exists()))
    {
        return Err(crate::remote::InputError(format!(
            "--database-url: no SQLite store at '{path}'"
        ))
        .into());
    }
    let store = open_store(&url, Arc::new(SystemClock)).await?;
    let now = store.now().await?;
    let before = now
        .checked_sub(retention.as_signed())
        .unwrap_or(jiff::Timestamp::MIN);
    let executions = prune_all(&*store, HistoryKind::Executions, before, args.dry_run).await?;
    let runs = prune_all(&*store, HistoryKind::Runs, before, args.dry_run).await?;
    let verb = if args.dry_run {
        "would delete"
    } else {
        "deleted"
    };
    outln!(
        "{verb} {} executions and {} workflow runs ({} task executions) that finished before {before}",
        executions.deleted,
        runs.deleted,
        runs.task_executions
    );
    if args.dry_run {
        outln!("nothing was deleted (--dry-run)");
    }
    Ok(ExitCode::SUCCESS)
}

/// Walks `kind` to the cut-off (a dry run counts in one call).
async fn prune_all(
    store: &dyn Store,
    kind: HistoryKind,
    before: jiff::Timestamp,
    dry_run: bool,
) -> anyhow::Result<HistoryPruned> {
    let mut total = HistoryPruned::default();
    let mut after = None;
    loop {
        let started = std::time::Instant::now();
        let step = store
            .history_prune(&HistoryPrune {
                kind,
                before,
                limit: BATCH,
                after,
                dry_run,
            })
            .await?;
        total.deleted += step.deleted;
        total.task_executions += step.task_executions;
        match step.next {
            Some(next) => after = Some(next),
            None => return Ok(total),
        }
        tokio::time::sleep(started.elapsed() * sundial_store::maintenance::RETENTION_PAUSE_FACTOR)
            .await;
    }
}
