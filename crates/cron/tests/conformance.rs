//! Runs the cron conformance corpus kept in `tests/corpus/` (a copy of the project's shared
//! corpus, see `tests/corpus/SOURCE.md`), read at test time.
//!
//! Every case of `cases.jsonl` must produce exactly its expected instants (RFC 3339 with the
//! zone's offset) and every expression of `invalid.jsonl` must be rejected. Pass counts are
//! printed per category; any miss fails the test with its id, expected and actual output.

use std::collections::BTreeMap;

use jiff::Timestamp;
use jiff::tz::TimeZone;
use serde::Deserialize;
use sundial_cron::Cron;

const CORPUS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/corpus");

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

/// The tzdata release the corpus was generated with (README: "Zone data: tzdata 2025b").
const CORPUS_TZDATA: &str = "2025b";
/// Where a system tzdata lives; used when it is the corpus's release.
const SYSTEM_ZONEINFO: &str = "/usr/share/zoneinfo";

/// Where zones come from for one run of the corpus.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Zones {
    /// jiff's bundled tzdb: the data Sundial ships with.
    Bundled,
    /// The system's TZif files, which are the corpus's tzdata release.
    CorpusRelease,
}

impl Zones {
    fn get(self, name: &str) -> Result<TimeZone, String> {
        match self {
            Zones::Bundled => TimeZone::get(name).map_err(|e| format!("zone: {e}")),
            Zones::CorpusRelease => {
                let path = format!("{SYSTEM_ZONEINFO}/{name}");
                let data = std::fs::read(&path).map_err(|e| format!("{path}: {e}"))?;
                TimeZone::tzif(name, &data).map_err(|e| format!("{path}: {e}"))
            }
        }
    }
}

/// Whether the system tzdata is the corpus's release (`# version 2025b` in `tzdata.zi`).
fn system_has_corpus_release() -> bool {
    std::fs::read_to_string(format!("{SYSTEM_ZONEINFO}/tzdata.zi"))
        .ok()
        .and_then(|text| text.lines().next().map(str::to_string))
        .is_some_and(|line| line.trim() == format!("# version {CORPUS_TZDATA}"))
}

fn run_case(case: &Case, zones: Zones) -> Result<(), String> {
    let cron = Cron::parse(&case.expr).map_err(|e| format!("parse error: {e}"))?;
    let tz = zones.get(&case.tz)?;
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

/// Whether the corpus expects, at one of its instants, a UTC offset that jiff's bundled tzdb
/// does not give there: the case then tests zone data that changed after the corpus's release,
/// not the engine.
fn bundled_offsets_disagree(case: &Case) -> bool {
    let Ok(tz) = TimeZone::get(&case.tz) else {
        return false;
    };
    case.expect.iter().any(
        |text| match (text.parse::<Timestamp>(), offset_suffix(text)) {
            (Ok(instant), Some(expected)) => tz.to_offset(instant) != expected,
            _ => false,
        },
    )
}

/// The `±HH:MM` suffix of an RFC 3339 string as an offset.
fn offset_suffix(text: &str) -> Option<jiff::tz::Offset> {
    let suffix = text.get(text.len().checked_sub(6)?..)?;
    let sign = match suffix.as_bytes().first()? {
        b'+' => 1,
        b'-' => -1,
        _ => return None,
    };
    let hours: i32 = suffix.get(1..3)?.parse().ok()?;
    let minutes: i32 = suffix.get(4..6)?.parse().ok()?;
    jiff::tz::Offset::from_seconds(sign * (hours * 3600 + minutes * 60)).ok()
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

fn describe_failure(case: &Case, why: &str) -> String {
    format!(
        "{} [{}] {:?} in {} from {}:\n        {why}",
        case.id, case.cat, case.expr, case.tz, case.from
    )
}

/// The contract run: the corpus against its own tzdata release must pass every case.
#[test]
fn every_conformance_case_passes_with_the_corpus_tzdata() {
    if !system_has_corpus_release() {
        println!(
            "skipped: {SYSTEM_ZONEINFO} is not tzdata {CORPUS_TZDATA}; \
             the bundled-tzdb run still checks every case whose zone data did not change"
        );
        return;
    }
    let cases: Vec<Case> = read_lines("cases.jsonl");
    assert!(!cases.is_empty(), "empty corpus");
    let mut tallies: BTreeMap<String, Tally> = BTreeMap::new();
    let mut failures = Vec::new();
    for case in &cases {
        let tally = tallies.entry(case.cat.clone()).or_default();
        tally.total += 1;
        match run_case(case, Zones::CorpusRelease) {
            Ok(()) => tally.pass += 1,
            Err(why) => failures.push(describe_failure(case, &why)),
        }
    }
    println!(
        "{}",
        report(&format!("cases, tzdata {CORPUS_TZDATA}"), &tallies)
    );
    assert!(
        failures.is_empty(),
        "{} case(s) failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

/// The shipping run: jiff's bundled tzdb. A case may differ only when the corpus expects an
/// offset the bundled data does not have (a rule change after 2025b); those are listed.
#[test]
fn every_conformance_case_passes_with_the_bundled_tzdb_unless_zone_data_changed() {
    let cases: Vec<Case> = read_lines("cases.jsonl");
    assert!(!cases.is_empty(), "empty corpus");
    let mut tallies: BTreeMap<String, Tally> = BTreeMap::new();
    let mut failures = Vec::new();
    let mut changed_data = Vec::new();
    for case in &cases {
        let tally = tallies.entry(case.cat.clone()).or_default();
        tally.total += 1;
        match run_case(case, Zones::Bundled) {
            Ok(()) => tally.pass += 1,
            Err(_) if bundled_offsets_disagree(case) => {
                changed_data.push(format!("{} ({})", case.id, case.tz));
            }
            Err(why) => failures.push(describe_failure(case, &why)),
        }
    }
    println!("{}", report("cases, bundled tzdb", &tallies));
    if !changed_data.is_empty() {
        println!(
            "  zone data differs from tzdata {CORPUS_TZDATA} (offsets the corpus expects are not \
             in the bundled tzdb): {}",
            changed_data.join(", ")
        );
    }
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

/// A case of `calendar_cases.jsonl`: an expression with one holiday calendar.
#[derive(Deserialize)]
struct CalendarCase {
    id: String,
    expr: String,
    tz: String,
    calendar: CalendarJson,
    from: String,
    count: usize,
    expect: Vec<String>,
}

#[derive(Deserialize)]
struct CalendarJson {
    timezone: String,
    exclude: Vec<serde_json::Value>,
}

/// Every case of `calendar_cases.jsonl` (Sundial's own; `tests/corpus/SOURCE.md`) gives its
/// expected instants through `next_after_excluding`.
#[test]
fn calendar_cases_fire_exactly_their_expected_instants() {
    let cases: Vec<CalendarCase> = read_lines("calendar_cases.jsonl");
    assert!(cases.len() >= 7);
    let date = |v: &serde_json::Value| -> jiff::civil::Date {
        v.as_str().expect("a date string").parse().expect("a date")
    };
    let mut misses = Vec::new();
    for c in &cases {
        let exclusions = c.calendar.exclude.iter().map(|e| {
            if let Some(d) = e.get("date") {
                sundial_cron::Exclusion::Date(date(d))
            } else if let Some(cron) = e.get("cron") {
                sundial_cron::Exclusion::Cron(Box::new(
                    Cron::parse(cron.as_str().expect("text")).expect("valid"),
                ))
            } else {
                sundial_cron::Exclusion::Range {
                    from: date(&e["from"]),
                    to: date(&e["to"]),
                }
            }
        });
        let calendar = sundial_cron::Calendar::new(
            TimeZone::get(&c.calendar.timezone).expect("zone"),
            exclusions,
        );
        let cron = Cron::parse(&c.expr).expect("valid");
        let tz = TimeZone::get(&c.tz).expect("zone");
        let mut cursor: Timestamp = c.from.parse().expect("instant");
        let mut got = Vec::new();
        while got.len() < c.count {
            let Some(z) = cron.next_after_excluding(
                cursor,
                &tz,
                sundial_cron::DstPolicy::default(),
                std::slice::from_ref(&calendar),
            ) else {
                break;
            };
            cursor = z.timestamp();
            got.push(rfc3339(&z));
        }
        if got != c.expect {
            misses.push(format!("{}: expected {:?}, got {:?}", c.id, c.expect, got));
        }
    }
    assert!(misses.is_empty(), "{misses:#?}");
}
