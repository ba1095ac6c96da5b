//! Runs the shared cron conformance corpus (`shared/conformance/cron/`), read at test time.
//!
//! Every case of `cases.jsonl` must produce exactly its expected instants (RFC 3339 with the
//! zone's offset) and every expression of `invalid.jsonl` must be rejected. Pass counts are
//! printed per category; any miss fails the test with its id, expected and actual output.

use std::collections::BTreeMap;

use jiff::Timestamp;
use jiff::tz::TimeZone;
use serde::Deserialize;
use sundial_cron::Cron;

const CORPUS: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../../shared/conformance/cron"
);

#[derive(Deserialize)]
struct Case {
    id: String,
    cat: String,
    expr: String,
    tz: String,
    from: String,
    count: usize,
    expect: Vec<String>,
}

#[derive(Deserialize)]
struct Invalid {
    id: String,
    cat: String,
    expr: String,
}

fn read_lines<T: for<'de> Deserialize<'de>>(name: &str) -> Vec<T> {
    let path = format!("{CORPUS}/{name}");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("reading {path}: {e}"));
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{path}: {e}: {l}")))
        .collect()
}

/// RFC 3339 with the zone's offset, `+00:00` for UTC.
fn rfc3339(z: &jiff::Zoned) -> String {
    z.timestamp().display_with_offset(z.offset()).to_string()
}

fn run_case(case: &Case) -> Result<(), String> {
    let cron = Cron::parse(&case.expr).map_err(|e| format!("parse error: {e}"))?;
    let tz = TimeZone::get(&case.tz).map_err(|e| format!("zone: {e}"))?;
    let from: Timestamp = case.from.parse().map_err(|e| format!("from: {e}"))?;
    let got: Vec<String> = cron
        .iter_after(from, &tz)
        .take(case.count)
        .map(|z| rfc3339(&z))
        .collect();
    if got == case.expect {
        Ok(())
    } else {
        Err(format!(
            "expected {:?}\n        got      {:?}",
            case.expect, got
        ))
    }
}

#[derive(Default)]
struct Tally {
    pass: usize,
    total: usize,
}

fn report(title: &str, tallies: &BTreeMap<String, Tally>) -> String {
    let parts: Vec<String> = tallies
        .iter()
        .map(|(cat, t)| format!("{cat} {}/{}", t.pass, t.total))
        .collect();
    let pass: usize = tallies.values().map(|t| t.pass).sum();
    let total: usize = tallies.values().map(|t| t.total).sum();
    format!("{title}: {pass}/{total} passed ({})", parts.join(", "))
}

#[test]
fn every_conformance_case_yields_exactly_the_expected_instants() {
    let cases: Vec<Case> = read_lines("cases.jsonl");
    assert!(!cases.is_empty(), "empty corpus");
    let mut tallies: BTreeMap<String, Tally> = BTreeMap::new();
    let mut failures = Vec::new();
    for case in &cases {
        let tally = tallies.entry(case.cat.clone()).or_default();
        tally.total += 1;
        match run_case(case) {
            Ok(()) => tally.pass += 1,
            Err(why) => failures.push(format!(
                "{} [{}] {:?} in {} from {}:\n        {why}",
                case.id, case.cat, case.expr, case.tz, case.from
            )),
        }
    }
    println!("{}", report("cases", &tallies));
    assert!(
        failures.is_empty(),
        "{} case(s) failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[test]
fn every_invalid_expression_is_rejected() {
    let cases: Vec<Invalid> = read_lines("invalid.jsonl");
    assert!(!cases.is_empty(), "empty corpus");
    let mut tallies: BTreeMap<String, Tally> = BTreeMap::new();
    let mut failures = Vec::new();
    for case in &cases {
        let tally = tallies.entry(case.cat.clone()).or_default();
        tally.total += 1;
        match Cron::parse(&case.expr) {
            Err(e) => {
                tally.pass += 1;
                println!("  {} {:?} -> {e} (at {})", case.id, case.expr, e.position);
            }
            Ok(_) => failures.push(format!(
                "{} [{}] {:?}: expected a rejection, got Ok",
                case.id, case.cat, case.expr
            )),
        }
    }
    println!("{}", report("invalid", &tallies));
    assert!(
        failures.is_empty(),
        "{} expression(s) accepted:\n{}",
        failures.len(),
        failures.join("\n")
    );
}
