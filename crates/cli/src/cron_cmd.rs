//! `sundial cron next|explain`: the cron engine from the command line.

use std::process::ExitCode;

use clap::{Args, Subcommand};
use jiff::Timestamp;
use jiff::tz::TimeZone;
use sundial_cron::{Cron, DstPolicy, TransitionKind};

/// `sundial cron ...`
#[derive(Debug, Args)]
pub struct CronArgs {
    #[command(subcommand)]
    command: CronCommand,
}

#[derive(Debug, Subcommand)]
enum CronCommand {
    /// Print the next fire times, one RFC 3339 instant per line with the zone's offset.
    Next {
        /// IANA time zone
        #[arg(long, default_value = "UTC")]
        tz: String,
        /// Start strictly after this RFC 3339 instant [default: now]
        #[arg(long)]
        from: Option<String>,
        /// How many
        #[arg(long, default_value_t = 5)]
        count: usize,
        #[command(flatten)]
        dst: DstArgs,
        /// The expression (put it after `--`)
        #[arg(required = true, num_args = 1..)]
        expr: Vec<String>,
    },
    /// Describe an expression in words, with its next fire time in the zone (or that it
    /// never fires).
    Explain {
        /// IANA time zone
        #[arg(long, default_value = "UTC")]
        tz: String,
        #[command(flatten)]
        dst: DstArgs,
        /// The expression (put it after `--`)
        #[arg(required = true, num_args = 1..)]
        expr: Vec<String>,
    },
}

/// A schedule's DST policy (docs/cron.md, "DST policy"): what a fixed-time expression does
/// with wall times a DST change skips or repeats.
#[derive(Debug, Args)]
struct DstArgs {
    /// A skipped wall time: `shift` fires it when the gap ends, `skip` does not
    #[arg(long, default_value = "shift", value_parser = ["shift", "skip"])]
    dst_gap: String,
    /// A repeated wall time: fire its `first` instant, its `last`, or `both`
    #[arg(long, default_value = "first", value_parser = ["first", "last", "both"])]
    dst_fold: String,
}

impl DstArgs {
    fn policy(&self) -> DstPolicy {
        DstPolicy {
            gap: self.dst_gap.parse().unwrap_or_default(),
            fold: self.dst_fold.parse().unwrap_or_default(),
        }
    }
}

/// The refusal of an expression given as `expr` (the words after `--`), with a hint to quote
/// it when a word of it names a file or folder here: the shell expanded an unquoted `*` into
/// the folder's entries (`sundial cron next 0 2 * * *`).
fn invalid_expression(expr: &[String], e: impl std::fmt::Display) -> ExitCode {
    let expanded = expr
        .iter()
        .any(|w| w.chars().any(|c| c.is_ascii_alphabetic()) && std::path::Path::new(w).exists());
    if expanded {
        fail(format!(
            "invalid cron expression: {e} (its words include file names: the shell expanded \
             an unquoted `*`; quote the expression: sundial cron next -- '0 2 * * *')"
        ))
    } else {
        fail(format!("invalid cron expression: {e}"))
    }
}

fn fail(message: String) -> ExitCode {
    eprintln!("sundial: error: {message}");
    ExitCode::from(2)
}

/// Runs the command; exit 2 with one line on stderr for bad input.
pub fn run(args: CronArgs) -> ExitCode {
    match args.command {
        CronCommand::Next {
            tz,
            from,
            count,
            dst,
            expr,
        } => {
            let cron = match Cron::parse(&expr.join(" ")) {
                Ok(c) => c,
                Err(e) => return invalid_expression(&expr, e),
            };
            let Ok(zone) = TimeZone::get(&tz) else {
                return fail(format!("--tz: '{tz}' is not a known IANA time zone"));
            };
            let from = match from {
                None => Timestamp::now(),
                Some(text) => match text.parse::<Timestamp>() {
                    Ok(t) => t,
                    Err(_) => return fail(format!("--from: '{text}' is not an RFC 3339 instant")),
                },
            };
            let mut printed = 0;
            for z in cron.iter_after_with(from, &zone, dst.policy()).take(count) {
                outln!("{}", z.strftime("%Y-%m-%dT%H:%M:%S%:z"));
                printed += 1;
            }
            if printed < count {
                eprintln!(
                    "sundial: the expression fires {printed} time(s) after {from} through local year 2199"
                );
            }
            ExitCode::SUCCESS
        }
        CronCommand::Explain { tz, dst, expr } => {
            let cron = match Cron::parse(&expr.join(" ")) {
                Ok(c) => c,
                Err(e) => return invalid_expression(&expr, e),
            };
            let Ok(zone) = TimeZone::get(&tz) else {
                return fail(format!("--tz: '{tz}' is not a known IANA time zone"));
            };
            outln!("{} ({tz})", cron.describe());
            let (now, policy) = (Timestamp::now(), dst.policy());
            match cron.iter_after_with(now, &zone, policy).next() {
                Some(next) => outln!("next fire: {}", next.strftime("%Y-%m-%dT%H:%M:%S%:z")),
                None => {
                    outln!("it never fires: no date matches it from now through local year 2199")
                }
            }
            for t in cron.dst_transitions(now, &zone, policy, 2) {
                let slots: Vec<String> = t
                    .slots
                    .iter()
                    .map(|s| {
                        s.to_zoned(zone.clone())
                            .strftime("%Y-%m-%dT%H:%M:%S%:z")
                            .to_string()
                    })
                    .collect();
                outln!(
                    "dst {} at {}: wall times {} to {} {}; fires {}",
                    t.kind.as_str(),
                    t.at,
                    t.local_from,
                    t.local_to,
                    match t.kind {
                        TransitionKind::Gap => "are skipped",
                        TransitionKind::Fold => "occur twice",
                    },
                    slots.join(", ")
                );
            }
            ExitCode::SUCCESS
        }
    }
}
