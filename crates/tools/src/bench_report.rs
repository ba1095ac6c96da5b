//! The report of a `sundial bench burst|steady` run (README.md "Sizing with sundial bench"):
//! printed as a table and one JSON line, and the lag of a steady run second by second with
//! its trend, which `sundial bench capacity` judges a run by.

use std::collections::HashMap;

use jiff::Timestamp;
use serde_json::Value;

/// Prints the report of a burst or steady load (the JSON `bench_load::measure` returns) as a
/// table, then as one JSON line.
pub(crate) fn print_report(r: &Value) {
    let f = |v: &Value| v.as_f64().unwrap_or(0.0);
    outln!(
        "workload         {}{} ({}, {} node(s))",
        r["workload"].as_str().unwrap_or(""),
        r["arrivals"]
            .as_str()
            .map(|a| format!(", {a} arrivals"))
            .unwrap_or_default(),
        r["store"].as_str().unwrap_or(""),
        r["nodes"]
    );
    outln!("slots expected   {}", r["slots"]);
    outln!(
        "delivered        {} (missed {}, lost {}, duplicates {})",
        r["delivered"],
        r["missed"],
        r["lost"],
        r["duplicates"]
    );
    outln!(
        "leases lapsed    {} attempts, {} worker leases taken over",
        r["lease_lapsed"],
        r["worker_leases_lost"]
    );
    if let Some(states) = r["executions"].as_object().filter(|m| !m.is_empty()) {
        outln!(
            "executions left  {}",
            states
                .iter()
                .map(|(state, n)| format!("{state} {n}"))
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    outln!(
        "drain            {:.3} s   triggers/s {:.0}",
        f(&r["drain_s"]),
        f(&r["triggers_per_s"])
    );
    let lag = &r["lag_ms"];
    outln!(
        "lag ms           p50 {}  p90 {}  p99 {}  max {}",
        lag["p50"],
        lag["p90"],
        lag["p99"],
        lag["max"]
    );
    if let Some(by_second) = r["lag_p99_ms_by_second"].as_array() {
        let shown: Vec<String> = by_second
            .iter()
            .step_by(by_second.len().div_ceil(12).max(1))
            .map(|v| format!("{v}"))
            .collect();
        outln!(
            "lag p99 by s    {}   (ms, every {} s of fire times; trend over the last 20 s {} ms/s)",
            shown.join(" "),
            by_second.len().div_ceil(12).max(1),
            r["lag_trend_ms_per_s"]
        );
    }
    if let Some(h) = r["halved_after_s"].as_u64() {
        outln!(
            "recovery         {}   (seconds after the load halved at second {h} until every later second's lag p99 was under {LATE_MS} ms)",
            r["recovery_s"]
                .as_u64()
                .map_or("never".to_owned(), |s| format!("{s} s"))
        );
    }
    let start = &r["start_lag_ms"];
    outln!(
        "start lag ms     p50 {}  p99 {}  max {}   (attempt start - fire time, from the records)",
        start["p50"],
        start["p99"],
        start["max"]
    );
    if let Some(late) = r["late_seconds"].as_array().filter(|l| !l.is_empty()) {
        outln!(
            "late seconds     {}   (second since the first slot: slots later than {LATE_MS} ms)",
            late.iter()
                .map(|l| format!("{}: {}", l["second"], l["slots"]))
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    outln!("peak RSS         {:.1} MB", f(&r["peak_rss_mb"]));
    let rss = &r["rss_mb"];
    if rss["at_1min"].is_number() {
        outln!(
            "RSS              {:.1} MB at 1 min (at most {:.1} MB in the 30 s before), at most {:.1} MB after, {:.1} MB at the end",
            f(&rss["at_1min"]),
            f(&rss["peak_30s_to_1min"]),
            f(&rss["peak_after_1min"]),
            f(&rss["end"])
        );
    }
    let b = &r["backfill"];
    if b.is_object() {
        outln!(
            "backfill         {} slots at {}/s: {} created, {} when measured, {} delivered, {} s from start to its last step",
            b["slots"],
            b["max_per_second"],
            b["created"],
            b["state"],
            b["delivered"],
            b["seconds"]
        );
        outln!(
            "lag ms, during   p50 {}  p99 {}  max {}   (the {} ordinary slots fired while it created executions)",
            b["lag_ms_during"]["p50"],
            b["lag_ms_during"]["p99"],
            b["lag_ms_during"]["max"],
            b["slots_during"]
        );
    }
    let e = &r["expired"];
    if e.is_object() {
        outln!(
            "expired history  {} loaded, {} left after the run; database {:.0} MB before, {:.0} MB after",
            e["loaded"],
            e["left"],
            f(&e["db_bytes_before"]) / 1e6,
            f(&e["db_bytes_after"]) / 1e6
        );
    }
    outln!("{r}");
}

/// The lag p99 (ms) of the slots whose fire time falls in each second of a steady run of
/// `seconds` seconds from `first_slot` (second 0 first); a second none of whose slots was
/// delivered reads 0.
pub(crate) fn lag_p99_by_second(
    seen: &HashMap<(String, i64), Vec<Timestamp>>,
    first_slot: Timestamp,
    seconds: usize,
) -> Vec<f64> {
    let mut by: Vec<Vec<f64>> = vec![Vec::new(); seconds];
    for ((_, slot_ms), receipts) in seen {
        let second = (slot_ms - first_slot.as_millisecond()).div_euclid(1000);
        if let (Ok(k), Some(first)) = (usize::try_from(second), receipts.iter().min())
            && let Some(lags) = by.get_mut(k)
        {
            lags.push((first.as_millisecond() - slot_ms) as f64);
        }
    }
    by.into_iter()
        .map(|mut lags| {
            lags.sort_by(f64::total_cmp);
            percentile(&lags, 99.0)
        })
        .collect()
}

/// How many seconds after second `from` of `by_second` (each second's lag p99, ms) the lag
/// p99 fell under `on_time_ms` and stayed there to the end of the run, or `None` if it never
/// did: how long a run took to be on time again once its load halved.
pub(crate) fn recovery(by_second: &[f64], from: usize, on_time_ms: f64) -> Option<usize> {
    let late_until = by_second
        .iter()
        .enumerate()
        .skip(from)
        .rev()
        .find(|(_, p99)| **p99 >= on_time_ms)
        .map_or(from, |(k, _)| k + 1);
    (late_until < by_second.len()).then_some(late_until - from)
}

/// How many seconds at the end of a steady run [`lag_trend`] looks at (20).
pub(crate) const TREND_SECONDS: usize = 20;

/// How fast the lag grew over the last [`TREND_SECONDS`] of a steady run, in ms of lag per
/// second of fire time: the least-squares slope of `by_second` (each second's lag p99) over
/// them (all of them when fewer). A run that keeps up reads about 0; one that falls behind by
/// a fraction x of each second reads about 1000·x.
pub(crate) fn lag_trend(by_second: &[f64]) -> f64 {
    let tail = &by_second[by_second.len().saturating_sub(TREND_SECONDS)..];
    let n = tail.len() as f64;
    if tail.len() < 2 {
        return 0.0;
    }
    let mean_x = (n - 1.0) / 2.0;
    let mean_y = tail.iter().sum::<f64>() / n;
    let (mut num, mut den) = (0.0, 0.0);
    for (i, y) in tail.iter().enumerate() {
        let dx = i as f64 - mean_x;
        num += dx * (y - mean_y);
        den += dx * dx;
    }
    num / den
}

/// A slot delivered more than this many milliseconds after its fire time counts in the report's
/// `late_seconds` (100 ms: BENCHMARKS.md's steady-load aim).
pub(crate) const LATE_MS: i64 = 100;

/// The nearest-rank `p`-th percentile of `sorted`; 0 when empty.
pub(crate) fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recovery_counts_the_seconds_until_the_lag_stays_on_time() {
        let lags = [5.0, 900.0, 4000.0, 3000.0, 150.0, 40.0, 200.0, 30.0, 20.0];
        // Halved at second 2: late until second 6 inclusive, on time from 7: 5 s.
        assert_eq!(recovery(&lags, 2, 100.0), Some(5));
        // On time from the halving on: 0 s.
        assert_eq!(recovery(&lags, 7, 100.0), Some(0));
        // Late to the end: never.
        assert_eq!(recovery(&[10.0, 500.0, 600.0], 1, 100.0), None);
    }

    #[test]
    fn the_lag_trend_is_the_slope_of_the_last_twenty_seconds() {
        // Keeping up: flat, whatever came before.
        let mut lags: Vec<f64> = (0..40).map(|s| if s < 20 { 5000.0 } else { 8.0 }).collect();
        assert_eq!(lag_trend(&lags), 0.0);
        // Falling behind by a fifth of each second: 200 ms of lag a second.
        lags = (0..60).map(|s| f64::from(s) * 200.0).collect();
        assert!((lag_trend(&lags) - 200.0).abs() < 1e-9);
        // Catching up reads negative; too short a run reads 0.
        lags = (0..30).map(|s| 3000.0 - f64::from(s) * 100.0).collect();
        assert!(lag_trend(&lags) < 0.0);
        assert_eq!(lag_trend(&[7.0]), 0.0);
    }

    #[test]
    fn each_second_of_fire_times_gets_its_own_p99() {
        let first: Timestamp = "2026-12-01T00:00:00Z".parse().unwrap();
        let ms = first.as_millisecond();
        let at = |ms: i64| Timestamp::from_millisecond(ms).unwrap();
        let mut seen = HashMap::new();
        seen.insert(("a".to_owned(), ms), vec![at(ms + 5)]);
        seen.insert(
            ("b".to_owned(), ms + 1500),
            vec![at(ms + 1900), at(ms + 1600)],
        );
        seen.insert(("c".to_owned(), ms + 9000), vec![at(ms + 9001)]);
        assert_eq!(lag_p99_by_second(&seen, first, 3), vec![5.0, 100.0, 0.0]);
    }
}
