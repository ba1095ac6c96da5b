//! `sundial cron next|explain`: the cron engine from the command line.

use std::process::ExitCode;

use clap::{Args, Subcommand};
use jiff::Timestamp;
use jiff::tz::TimeZone;
use sundial_cron::Cron;

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
        /// The expression (put it after `--`)
        #[arg(required = true, num_args = 1..)]
        expr: Vec<String>,
    },
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
            expr,
        } => {
            let cron = match Cron::parse(&expr.join(" ")) {
                Ok(c) => c,
                Err(e) => return fail(format!("invalid cron expression: {e}")),
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
            for z in cron.iter_after(from, &zone).take(count) {
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
        CronCommand::Explain { tz, expr } => {
            let cron = match Cron::parse(&expr.join(" ")) {
                Ok(c) => c,
                Err(e) => return fail(format!("invalid cron expression: {e}")),
            };
            let Ok(zone) = TimeZone::get(&tz) else {
                return fail(format!("--tz: '{tz}' is not a known IANA time zone"));
            };
            outln!("{} ({tz})", cron.describe());
            match cron.iter_after(Timestamp::now(), &zone).next() {
                Some(next) => outln!("next fire: {}", next.strftime("%Y-%m-%dT%H:%M:%S%:z")),
                None => {
                    outln!("it never fires: no date matches it from now through local year 2199")
                }
            }
            ExitCode::SUCCESS
        }
    }
}
