//! `sundial`: the one binary. Server roles (`server`, `migrate`: the `sundial-server` crate),
//! client commands (`job`, `exec`, `workflow`, `calendar`, `cron`, `history`: `sundial-cli`),
//! tools (`bench`, `demo`: `sundial-tools`). See docs/configuration.md for the command line
//! contract.
//!
//! Exit codes: 0 success; 1 a failure (server error, rejected request, unreachable server);
//! 2 bad usage, an invalid cron expression, or an `apply` file refused as invalid
//! ([`remote::InputError`]).

use std::process::ExitCode;

use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};
use sundial_cli::{audit_cmd, calendar_cmd, client, cron_cmd, history, remote, workflow_cmd};
use sundial_server::config;
use sundial_tools::{bench, demo};

/// mimalloc instead of the system allocator: the server's hot paths (row encoding and
/// decoding, HTTP deliveries) allocate and free many small buffers per execution, and glibc's
/// malloc took about a fifth of the server's CPU time at 10,000 triggers/s (BENCHMARKS.md).
/// Built with `no_thp`: mimalloc does not ask the kernel for transparent huge pages, whose
/// 2 MiB page zeroing on every first touch took a third of the process's samples in a
/// fan-out (BENCHMARKS.md, "The allocator and huge pages").
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Sundial: a distributed job scheduler — cron at scale.
#[derive(Debug, Parser)]
#[command(
    name = "sundial",
    version = concat!(env!("CARGO_PKG_VERSION"), " (commit ", env!("SUNDIAL_COMMIT"), ")"),
    about,
    propagate_version = true
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the server roles (api, scheduler, worker) in this process.
    Server(config::ServerArgs),
    /// Apply the store's schema migrations and exit.
    Migrate(config::MigrateArgs),
    /// Manage jobs through the API.
    Job(client::JobArgs),
    /// Inspect and steer executions through the API.
    Exec(client::ExecArgs),
    /// Manage workflows (DAGs of tasks) and their runs through the API.
    Workflow(workflow_cmd::WorkflowArgs),
    /// Manage holiday calendars schedules exclude days by, through the API.
    Calendar(calendar_cmd::CalendarArgs),
    /// Read a namespace's audit log, and verify its hash chain, through the API.
    Audit(audit_cmd::AuditArgs),
    /// Evaluate and explain cron expressions.
    Cron(cron_cmd::CronArgs),
    /// Start a server on an embedded store with a local HTTP receiver, apply
    /// examples/jobs.yaml and examples/workflows.yaml, and print each execution and workflow
    /// run as it ends.
    Demo(demo::DemoArgs),
    /// Measure trigger throughput and lag with a built-in load generator and HTTP sink.
    Bench(bench::BenchArgs),
    /// Prune the store's history by hand (the server's retention does it in the background).
    History(history::HistoryArgs),
    /// Make a key that signs deliveries, or show an Ed25519 key's public half.
    SigningKey(sundial_server::signing::SigningKeyArgs),
}

#[tokio::main]
async fn main() -> ExitCode {
    let matches = Cli::command().get_matches();
    let mut cli = Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
    if let Command::Job(client::JobArgs { opts, .. })
    | Command::Exec(client::ExecArgs { opts, .. })
    | Command::Workflow(workflow_cmd::WorkflowArgs { opts, .. })
    | Command::Calendar(calendar_cmd::CalendarArgs { opts, .. })
    | Command::Audit(audit_cmd::AuditArgs { opts, .. }) = &mut cli.command
    {
        opts.namespace_given = namespace_given(&matches);
    }
    let result = match cli.command {
        Command::Server(args) => sundial_server::run(args).await,
        Command::Migrate(args) => sundial_server::migrate(args).await,
        Command::Job(args) => client::job(args).await,
        Command::Exec(args) => client::exec(args).await,
        Command::Workflow(args) => workflow_cmd::run(args).await,
        Command::Calendar(args) => calendar_cmd::run(args).await,
        Command::Audit(args) => audit_cmd::run(args).await,
        Command::Cron(args) => return cron_cmd::run(args),
        Command::Demo(args) => demo::run(args).await,
        Command::Bench(args) => bench::run(args).await,
        Command::History(args) => history::run(args).await,
        Command::SigningKey(args) => sundial_server::signing::signing_key(args),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("sundial: error: {e:#}");
            if e.chain().any(|cause| cause.is::<remote::InputError>()) {
                ExitCode::from(2)
            } else {
                ExitCode::FAILURE
            }
        }
    }
}

/// True when `-n`/`--namespace` (or `SUNDIAL_NAMESPACE`) was given rather than defaulted, at
/// any level of the command.
fn namespace_given(matches: &clap::ArgMatches) -> bool {
    let mut level = Some(matches);
    while let Some(m) = level {
        if m.try_contains_id("namespace").is_ok()
            && matches!(
                m.value_source("namespace"),
                Some(
                    clap::parser::ValueSource::CommandLine | clap::parser::ValueSource::EnvVariable
                )
            )
        {
            return true;
        }
        level = m.subcommand().map(|(_, sub)| sub);
    }
    false
}
