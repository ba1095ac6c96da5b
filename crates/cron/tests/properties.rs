//! Property tests of the search against a brute-force oracle of the dialect's semantics.
//!
//! The oracle decides, instant by instant, whether a job fires (README "Dialect"):
//! - wildcard job: the instant's local wall time matches;
//! - fixed-time job: the wall time matches and the instant is its first occurrence (not the
//!   second pass of a repeated hour), or the instant ends a gap in which some wall time matches
//!   (a skipped wall time fires at the transition).
//!
//! Windows are chosen around real transitions of zones with unusual DST (a 30-minute shift at
//! Lord Howe, a skipped day in Apia, midnight gaps in Santiago), stepped by the minute for
//! 5-field expressions and by the second for 6-field ones.

use jiff::tz::{AmbiguousOffset, TimeZone};
use jiff::{SignedDuration, Timestamp, Zoned};
use proptest::prelude::*;
use sundial_cron::{Cron, DstPolicy, Fold, Gap};

const ZONES: &[&str] = &[
    "America/New_York",
    "Europe/Berlin",
    "Australia/Lord_Howe",
    "UTC",
    "America/Santiago",
    "Pacific/Apia",
];

/// A random expression and whether it is fixed-time.
#[derive(Debug, Clone)]
struct Expr {
    text: String,
    fixed_time: bool,
    seconds: bool,
}

fn time_item(max: u32) -> BoxedStrategy<String> {
    prop_oneof![
        Just("*".to_string()),
        (2..=max / 2).prop_map(|s| format!("*/{s}")),
        (0..=max).prop_map(|v| v.to_string()),
        (0..=max, 0..=max).prop_map(|(a, b)| format!("{}-{}", a.min(b), a.max(b))),
        (0..=max, 1..=max).prop_map(|(a, s)| format!("{a}/{s}")),
        proptest::collection::btree_set(0..=max, 2..4)
            .prop_map(|set| { set.iter().map(u32::to_string).collect::<Vec<_>>().join(",") }),
    ]
    .boxed()
}

fn dom_item() -> BoxedStrategy<String> {
    prop_oneof![
        4 => Just("*".to_string()),
        1 => Just("?".to_string()),
        1 => (1..=31u32).prop_map(|d| d.to_string()),
        1 => (1..=28u32, 1..=3u32).prop_map(|(a, n)| format!("{a}-{}", a + n)),
        1 => (2..=9u32).prop_map(|s| format!("*/{s}")),
        1 => Just("L".to_string()),
        1 => (1..=5u32).prop_map(|n| format!("L-{n}")),
        1 => Just("LW".to_string()),
        1 => (1..=31u32).prop_map(|n| format!("{n}W")),
    ]
    .boxed()
}

fn dow_item() -> BoxedStrategy<String> {
    prop_oneof![
        4 => Just("*".to_string()),
        1 => Just("?".to_string()),
        1 => (0..=7u32).prop_map(|d| d.to_string()),
        1 => Just("MON-FRI".to_string()),
        1 => (0..=6u32, 1..=3u32).prop_map(|(d, s)| format!("{d}/{s}")),
        1 => (0..=7u32).prop_map(|d| format!("{d}L")),
        1 => (0..=6u32, 1..=5u32).prop_map(|(d, k)| format!("{d}#{k}")),
    ]
    .boxed()
}

fn month_item() -> BoxedStrategy<String> {
    prop_oneof![
        6 => Just("*".to_string()),
        1 => (1..=12u32).prop_map(|m| m.to_string()),
        1 => Just("MAR-NOV".to_string()),
    ]
    .boxed()
}

fn expr(seconds: bool) -> impl Strategy<Value = Expr> {
    let sec = if seconds {
        time_item(59).prop_map(Some).boxed()
    } else {
        Just(None).boxed()
    };
    (
        sec,
        time_item(59),
        time_item(23),
        dom_item(),
        month_item(),
        dow_item(),
    )
        .prop_map(|(sec, min, hour, dom, month, dow)| {
            let wildcard = sec.as_deref().is_some_and(|s| s.starts_with('*'))
                || min.starts_with('*')
                || hour.starts_with('*');
            let text = match &sec {
                Some(sec) => format!("{sec} {min} {hour} {dom} {month} {dow}"),
                None => format!("{min} {hour} {dom} {month} {dow}"),
            };
            Expr {
                text,
                fixed_time: !wildcard,
                seconds: sec.is_some(),
            }
        })
}

/// A zone and one of its transitions (or a plain instant, for zones without one).
fn transition() -> impl Strategy<Value = (&'static str, Timestamp)> {
    (proptest::sample::select(ZONES), 2010i16..2035, 0usize..2).prop_map(|(zone, year, nth)| {
        let tz = TimeZone::get(zone).expect("bundled zone");
        let base = jiff::civil::date(year, 1, 1)
            .to_zoned(TimeZone::UTC)
            .expect("valid date")
            .timestamp();
        let at = tz.following(base).nth(nth).map_or(base, |t| t.timestamp());
        (zone, at)
    })
}

fn dst_policy() -> impl Strategy<Value = DstPolicy> {
    (
        proptest::sample::select(&[Gap::Shift, Gap::Skip][..]),
        proptest::sample::select(&[Fold::First, Fold::Last, Fold::Both][..]),
    )
        .prop_map(|(gap, fold)| DstPolicy { gap, fold })
}

fn shifted(t: Timestamp, secs: i64) -> Timestamp {
    t.checked_add(SignedDuration::from_secs(secs))
        .expect("in range")
}

/// The oracle: whether a job fires at instant `t` (whole seconds) under `policy`
/// (docs/cron.md, "DST policy": a fixed-time job fires a repeated wall time at its first
/// instant, its second or both; a skipped one at the gap's end or not at all).
fn fires_at(
    cron: &Cron,
    fixed_time: bool,
    tz: &TimeZone,
    t: Timestamp,
    seconds: bool,
    policy: DstPolicy,
) -> bool {
    let local = tz.to_datetime(t);
    let matches = cron.matches(local);
    if !fixed_time {
        return matches;
    }
    let fires_this_pass = match tz.to_ambiguous_timestamp(local).offset() {
        AmbiguousOffset::Fold { after, .. } if tz.to_offset(t) == after => {
            matches!(policy.fold, Fold::Last | Fold::Both)
        }
        AmbiguousOffset::Fold { .. } => matches!(policy.fold, Fold::First | Fold::Both),
        _ => true,
    };
    if matches && fires_this_pass {
        return true;
    }
    if policy.gap == Gap::Skip {
        return false;
    }
    // A gap ends at `t`: does any skipped wall time match?
    let Ok(before_t) = t.checked_sub(SignedDuration::from_secs(1)) else {
        return false;
    };
    let (old, new) = (tz.to_offset(before_t), tz.to_offset(t));
    if new.seconds() <= old.seconds() {
        return false;
    }
    let step = if seconds { 1 } else { 60 };
    let gap = i64::from(new.seconds() - old.seconds());
    // The skipped wall times are [local - gap, local).
    (1..=gap / step).any(|k| {
        local
            .checked_sub(SignedDuration::from_secs(k * step))
            .is_ok_and(|dt| cron.matches(dt))
    })
}

fn step_of(seconds: bool) -> SignedDuration {
    SignedDuration::from_secs(if seconds { 1 } else { 60 })
}

/// The oracle's fire instants in `(from, until]`.
fn brute_force(
    cron: &Cron,
    e: &Expr,
    tz: &TimeZone,
    from: Timestamp,
    until: Timestamp,
    policy: DstPolicy,
) -> Vec<Timestamp> {
    let step = step_of(e.seconds);
    // The first whole step strictly after `from`.
    let unit = step.as_secs();
    let mut t =
        Timestamp::from_second(from.as_second().div_euclid(unit) * unit + unit).expect("in range");
    let mut out = Vec::new();
    while t <= until {
        if fires_at(cron, e.fixed_time, tz, t, e.seconds, policy) {
            out.push(t);
        }
        t = t.checked_add(step).expect("in range");
    }
    out
}

fn check_against_oracle(
    e: &Expr,
    zone: &str,
    start: Timestamp,
    horizon: SignedDuration,
    policy: DstPolicy,
) -> Result<(), TestCaseError> {
    let cron =
        Cron::parse(&e.text).map_err(|err| TestCaseError::fail(format!("{}: {err}", e.text)))?;
    let tz = TimeZone::get(zone).expect("bundled zone");
    let until = start.checked_add(horizon).expect("in range");
    let got: Vec<Timestamp> = cron
        .iter_after_with(start, &tz, policy)
        .map(|z| z.timestamp())
        .take_while(|t| *t <= until)
        .collect();
    // Strictly increasing, all after the start.
    prop_assert!(got.first().is_none_or(|t| *t > start));
    prop_assert!(
        got.windows(2).all(|w| w[0] < w[1]),
        "not increasing: {got:?}"
    );
    // Each result is a fire of the oracle (for a wall time that matches, or a gap's end).
    for t in &got {
        prop_assert!(
            fires_at(&cron, e.fixed_time, &tz, *t, e.seconds, policy),
            "{} in {zone}: {t} is not a fire instant",
            e.text
        );
    }
    // Nothing the oracle fires at is skipped.
    let want = brute_force(&cron, e, &tz, start, until, policy);
    prop_assert_eq!(
        &got,
        &want,
        "{} in {} from {} under {:?}",
        e.text,
        zone,
        start,
        policy
    );
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]

    /// 5-field expressions over 3 days spanning a transition, minute by minute.
    #[test]
    fn five_field_results_equal_the_minute_by_minute_oracle(
        e in expr(false),
        (zone, at) in transition(),
        lead in 0i64..60 * 3600,
    ) {
        check_against_oracle(&e, zone, shifted(at, -lead), SignedDuration::from_hours(72), DstPolicy::default())?;
    }

    /// 5-field expressions under every DST policy, over 3 days spanning a transition.
    #[test]
    fn every_dst_policy_equals_the_minute_by_minute_oracle(
        e in expr(false),
        (zone, at) in transition(),
        lead in 0i64..60 * 3600,
        policy in dst_policy(),
    ) {
        check_against_oracle(&e, zone, shifted(at, -lead), SignedDuration::from_hours(72), policy)?;
    }

    /// 6-field expressions over 4 hours spanning a transition, second by second.
    #[test]
    fn six_field_results_equal_the_second_by_second_oracle(
        e in expr(true),
        (zone, at) in transition(),
        lead in 0i64..3 * 3600,
    ) {
        check_against_oracle(&e, zone, shifted(at, -lead), SignedDuration::from_hours(4), DstPolicy::default())?;
    }

    /// Restarting the search anywhere between two results (inside a gap's neighbourhood or a
    /// repeated hour included) yields the rest of the same sequence.
    #[test]
    fn restarting_anywhere_gives_the_same_results(
        e in expr(false),
        (zone, at) in transition(),
        lead in 0i64..24 * 3600,
        offsets in proptest::collection::vec(0i64..48 * 3600, 1..6),
    ) {
        let cron = Cron::parse(&e.text).expect("generated expressions are valid");
        let tz = TimeZone::get(zone).expect("bundled zone");
        let start = shifted(at, -lead);
        let all: Vec<Timestamp> = cron.iter_after(start, &tz).take(200).map(|z| z.timestamp()).collect();
        for secs in offsets {
            let restart = shifted(start, secs);
            let Some(last) = all.last() else { break };
            if restart >= *last {
                continue;
            }
            let expected: Vec<Timestamp> = all.iter().copied().filter(|t| *t > restart).take(20).collect();
            let got: Vec<Timestamp> = cron.iter_after(restart, &tz).take(expected.len()).map(|z| z.timestamp()).collect();
            prop_assert_eq!(got, expected, "{} in {} restarted at {}", e.text, zone, restart);
        }
    }

    /// Every start from an hour before to an hour after a transition (so inside both passes
    /// of a repeated hour, and on both sides of a gap) gives the oracle's first fire after it,
    /// under every DST policy.
    #[test]
    fn any_start_around_a_transition_agrees_with_the_oracle(
        e in expr(false),
        (zone, at) in transition(),
        policy in dst_policy(),
    ) {
        let cron = Cron::parse(&e.text).expect("generated expressions are valid");
        let tz = TimeZone::get(zone).expect("bundled zone");
        let first = shifted(at, -2 * 3600);
        let oracle = brute_force(&cron, &e, &tz, first, shifted(at, 48 * 3600), policy);
        for k in 0..18 {
            let from = shifted(at, (7 * k - 60) * 60 + 13);
            let got = cron.next_after_with(from, &tz, policy).map(|z| z.timestamp());
            match oracle.iter().copied().find(|t| *t > from) {
                Some(expected) => prop_assert_eq!(got, Some(expected), "{} in {} from {} under {:?}", e.text, zone, from, policy),
                None => prop_assert!(got.is_none_or(|t| t > shifted(at, 48 * 3600))),
            }
        }
    }

    /// `parse` never panics, whatever the input; accepted expressions never panic in the search
    /// or in `describe`.
    #[test]
    fn arbitrary_text_never_panics(text in "[0-9*/,?LW#@a-zA-Z \\t-]{0,30}", secs in -5_000_000_000i64..8_000_000_000, zone in proptest::sample::select(ZONES)) {
        if let Ok(cron) = Cron::parse(&text) {
            let tz = TimeZone::get(zone).expect("bundled zone");
            let from = Timestamp::from_second(secs).expect("in range");
            let _: Vec<Zoned> = cron.iter_after(from, &tz).take(3).collect();
            let _ = cron.describe();
        }
    }

    #[test]
    fn arbitrary_unicode_never_panics(text in "\\PC{0,40}") {
        let _ = Cron::parse(&text);
    }

    /// Near-valid expressions: random items in each of 5-7 fields.
    #[test]
    fn near_valid_expressions_never_panic(
        fields in proptest::collection::vec("[0-9]{0,3}([-/#][0-9]{0,3})?[LW]?|\\*|\\?|L-[0-9]{1,2}|[A-Za-z]{3}", 5..=7),
        secs in 0i64..7_000_000_000,
        zone in proptest::sample::select(ZONES),
    ) {
        let text = fields.join(" ");
        if let Ok(cron) = Cron::parse(&text) {
            let tz = TimeZone::get(zone).expect("bundled zone");
            let from = Timestamp::from_second(secs).expect("in range");
            let _: Vec<Zoned> = cron.iter_after(from, &tz).take(3).collect();
            let _ = cron.describe();
        }
    }
}

/// A random holiday calendar: dates and ranges in the first 120 days of 2026, perhaps a cron
/// day rule, in one of the test zones.
fn calendar() -> impl Strategy<Value = (Vec<sundial_cron::Exclusion>, &'static str)> {
    let day = |k: i64| {
        jiff::civil::date(2026, 1, 1)
            .checked_add(SignedDuration::from_hours(24 * k))
            .expect("in range")
    };
    (
        proptest::collection::vec(0i64..120, 0..6),
        proptest::collection::vec((0i64..120, 0i64..12), 0..3),
        proptest::option::of(proptest::sample::select(
            &[
                "* * * * SAT,SUN",
                "* * 1-7 * *",
                "* * * * 0,2-6",
                "* * L * *",
                "* * */3 * *",
            ][..],
        )),
        proptest::sample::select(ZONES),
    )
        .prop_map(move |(dates, ranges, cron, zone)| {
            let mut out: Vec<sundial_cron::Exclusion> = dates
                .into_iter()
                .map(|k| sundial_cron::Exclusion::Date(day(k)))
                .collect();
            out.extend(
                ranges
                    .into_iter()
                    .map(|(k, len)| sundial_cron::Exclusion::Range {
                        from: day(k),
                        to: day(k + len),
                    }),
            );
            out.extend(
                cron.map(|c| {
                    sundial_cron::Exclusion::Cron(Box::new(Cron::parse(c).expect("valid")))
                }),
            );
            (out, zone)
        })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]

    /// With a calendar, the fire instants are exactly those without it whose date, in the
    /// calendar's zone, the calendar does not exclude: none excluded is fired, none included is
    /// passed over.
    #[test]
    fn a_calendar_removes_exactly_the_slots_on_its_excluded_days(
        e in expr(false),
        job_zone in proptest::sample::select(ZONES),
        (exclusions, cal_zone) in calendar(),
        lead in 0i64..30 * 86_400,
        policy in dst_policy(),
    ) {
        let cron = Cron::parse(&e.text).expect("generated expressions are valid");
        let tz = TimeZone::get(job_zone).expect("bundled zone");
        let cal = sundial_cron::Calendar::new(TimeZone::get(cal_zone).expect("bundled zone"), exclusions);
        let start = shifted(Timestamp::from_second(1_767_225_600).expect("2026-01-01"), lead);
        let until = shifted(start, 100 * 86_400);
        let want: Vec<Timestamp> = cron
            .iter_after_with(start, &tz, policy)
            .map(|z| z.timestamp())
            .take_while(|t| *t <= until)
            .filter(|t| !cal.excludes(t.to_zoned(cal.time_zone().clone()).date()))
            .take(50)
            .collect();
        let mut got = Vec::new();
        let mut cursor = start;
        while got.len() < want.len().max(1) {
            match cron.next_after_excluding(cursor, &tz, policy, std::slice::from_ref(&cal)) {
                Some(z) if z.timestamp() <= until => {
                    cursor = z.timestamp();
                    got.push(cursor);
                }
                _ => break,
            }
        }
        prop_assert_eq!(got, want, "{} in {} with a calendar in {}", e.text, job_zone, cal_zone);
    }
}
