//! `sundial bench`: the built-in load generator's command line (README.md "Sizing with sundial
//! bench"). Each workload runs in a module of its own: bursts and steady loads in
//! `bench_load.rs`, the capacity search and the delivery ceiling in
//! `bench_capacity.rs`, workflow runs in `bench_workflow.rs`.

use std::process::ExitCode;

use clap::{Args, Subcommand};

use crate::bench_load::{Common, Load, measure};
use crate::bench_report::print_report;

/// `sundial bench ...`
#[derive(Debug, Args)]
pub struct BenchArgs {
    #[command(subcommand)]
    workload: Workload,
}

#[derive(Debug, Subcommand)]
pub(crate) enum Workload {
    /// N one-off jobs all due at the same instant.
    Burst {
        /// Jobs in the burst
        #[arg(long, default_value_t = 10_000)]
        jobs: u32,
        #[command(flatten)]
        common: Common,
    },
    /// R every-second jobs (R triggers per second) for a duration. Their slots are spread
    /// evenly over each second (job i at i/R s past it), a constant arrival rate; with
    /// `--aligned` they all fall on the second boundary, a burst of R every second.
    Steady {
        /// Triggers per second
        #[arg(long, default_value_t = 100)]
        rate: u32,
        /// How long to measure, e.g. 60s or 5m
        #[arg(long, default_value = "60s")]
        duration: String,
        /// Fire every job on the whole second instead of spreading them over it
        #[arg(long)]
        aligned: bool,
        /// Halve the load after this long (e.g. 60s): every other job ends then, and the
        /// report says how many seconds later the lag p99 was back under 100 ms for good
        #[arg(long)]
        half_after: Option<String>,
        #[command(flatten)]
        common: Common,
    },
    /// The highest steady rate this machine holds: the delivery ceiling first, then 60 s
    /// steady runs at rates found by bisection, each judged by `lag p99 < 1 s` with the lag not
    /// growing over its last 20 s (README.md, "Sizing with sundial bench").
    Capacity {
        /// Each probe's length, e.g. 60s
        #[arg(long, default_value = "60s")]
        duration: String,
        /// Most steady runs to make
        #[arg(long, default_value_t = 6)]
        probes: u32,
        /// The first rate to try [default: a quarter of the delivery ceiling]
        #[arg(long)]
        start_rate: Option<u32>,
        #[command(flatten)]
        common: Common,
    },
    /// The time of `jobs:apply` of a batch of jobs: each round creates the batch in a
    /// namespace of its own, then replaces every job of it (one audit entry per job each).
    Apply {
        /// Jobs per apply (1 to 1,000)
        #[arg(long, default_value_t = 1000)]
        jobs: u32,
        /// Rounds (a creation and a replacement each)
        #[arg(long, default_value_t = 20)]
        rounds: u32,
        #[command(flatten)]
        common: Common,
    },
    /// The delivery ceiling: HTTP attempts per second through Sundial's HTTP target into a
    /// loopback sink in a process of its own, with no store, scheduler or worker around them.
    Ceiling {
        /// Attempts to make
        #[arg(long, default_value_t = 100_000)]
        attempts: u32,
        /// Attempts in flight at once (the worker's default `max_in_flight`)
        #[arg(long, default_value_t = 1024)]
        in_flight: u32,
    },
    /// The ceiling's sink (started by `ceiling` in a process of its own)
    #[command(hide = true)]
    CeilingSink,
    /// Workflow runs due at one instant: release lag (a task's attempt start − its
    /// upstream's completion commit), tasks/s, lost and duplicated task deliveries
    /// (docs/workflows.md, "Performance").
    Workflow {
        /// `chain`: each task depends on the one before; `fanout`: one root, the rest behind it
        #[arg(long, value_enum, default_value = "chain")]
        shape: crate::bench_workflow::Shape,
        /// Runs (one workflow each, all due at the same instant)
        #[arg(long, default_value_t = 1000)]
        runs: u32,
        /// Tasks per chain, or tasks behind the root of a fan-out
        #[arg(long, default_value_t = 3)]
        tasks: u32,
        #[command(flatten)]
        common: Common,
    },
}

/// Runs a workload.
pub async fn run(args: BenchArgs) -> anyhow::Result<ExitCode> {
    let load = match &args.workload {
        Workload::Workflow {
            shape,
            runs,
            tasks,
            common,
        } => return crate::bench_workflow::run(*shape, *runs, *tasks, common).await,
        Workload::Capacity {
            duration,
            probes,
            start_rate,
            common,
        } => {
            return crate::bench_capacity::run(duration, *probes, *start_rate, common).await;
        }
        Workload::Ceiling {
            attempts,
            in_flight,
        } => {
            let ceiling = crate::bench_capacity::ceiling(*attempts, *in_flight).await?;
            outln!("{ceiling}");
            return Ok(ExitCode::SUCCESS);
        }
        Workload::CeilingSink => return crate::bench_capacity::serve_ceiling_sink().await,
        Workload::Apply {
            jobs,
            rounds,
            common,
        } => return crate::bench_apply::run(*jobs, *rounds, common).await,
        Workload::Burst { jobs, common } => Load::Burst {
            jobs: *jobs,
            common: common.clone(),
        },
        Workload::Steady {
            rate,
            duration,
            aligned,
            half_after,
            common,
        } => Load::Steady {
            rate: *rate,
            duration: duration.clone(),
            aligned: *aligned,
            half_after: half_after.clone(),
            common: common.clone(),
        },
    };
    let report = measure(&load).await?;
    print_report(&report);
    Ok(
        if report["lost"].as_u64() == Some(0) && report["duplicates"].as_u64() == Some(0) {
            ExitCode::SUCCESS
        } else {
            ExitCode::FAILURE
        },
    )
}
