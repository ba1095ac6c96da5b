//! Every DST policy at every offset change of every zone of the bundled tz database, 2020-2040
//! (docs/cron.md, "DST policy").
//!
//! For each change that moves the wall clock, a fixed-time expression names one wall time
//! inside the skipped or repeated window (a 7-field expression with that date and year, so it
//! has no other slot), and each policy must fire exactly what it promises:
//! - a gap: `shift` fires once, at the instant the gap ends; `skip` never fires;
//! - a fold: `first` fires once, at the wall time's first instant; `last` once, at its second;
//!   `both` twice, at each;
//! - none fires before its wall time occurs (a shifted slot's own wall time is at or past the
//!   named one).
//!
//! A wildcard expression (`* * * * *` restricted to the same hour) fires the same instants
//! under every policy.

use jiff::civil::DateTime;
use jiff::tz::TimeZone;
use jiff::{SignedDuration, Timestamp};
use sundial_cron::{Cron, DstPolicy, Fold, Gap, TransitionKind};

const POLICIES: [DstPolicy; 6] = [
    DstPolicy {
        gap: Gap::Shift,
        fold: Fold::First,
    },
    DstPolicy {
        gap: Gap::Shift,
        fold: Fold::Last,
    },
    DstPolicy {
        gap: Gap::Shift,
        fold: Fold::Both,
    },
    DstPolicy {
        gap: Gap::Skip,
        fold: Fold::First,
    },
    DstPolicy {
        gap: Gap::Skip,
        fold: Fold::Last,
    },
    DstPolicy {
        gap: Gap::Skip,
        fold: Fold::Both,
    },
];

fn at(s: &str) -> Timestamp {
    s.parse().expect("valid instant")
}

/// Every fire instant of `cron` under `policy` in `(from, until]`.
fn fires(
    cron: &Cron,
    tz: &TimeZone,
    policy: DstPolicy,
    from: Timestamp,
    until: Timestamp,
) -> Vec<Timestamp> {
    cron.iter_after_with(from, tz, policy)
        .map(|z| z.timestamp())
        .take_while(|t| *t <= until)
        .take(1000)
        .collect()
}

/// A whole minute inside `[from, to)`: the window's middle, floored to the minute, or `None`
/// for a window shorter than a minute.
fn minute_inside(from: DateTime, to: DateTime) -> Option<DateTime> {
    let len = from.duration_until(to);
    let mid = from.checked_add(len / 2).ok()?;
    let floored = mid.with().second(0).subsec_nanosecond(0).build().ok()?;
    let floored = if floored < from {
        floored.checked_add(SignedDuration::from_mins(1)).ok()?
    } else {
        floored
    };
    (floored >= from && floored < to).then_some(floored)
}

#[test]
fn every_policy_fires_what_it_promises_in_every_zone_2020_to_2040() {
    let (start, end) = (at("2020-01-01T00:00:00Z"), at("2041-01-01T00:00:00Z"));
    let mut checked = (0usize, 0usize); // (gaps, folds)
    let mut failures = Vec::new();
    for name in jiff::tz::db().available() {
        let name = name.as_str();
        let tz = TimeZone::get(name).expect("listed zones load");
        for change in tz.following(start).take_while(|c| c.timestamp() < end) {
            let t = change.timestamp();
            let before = tz.to_offset(t - SignedDuration::from_secs(1));
            let after = change.offset();
            if before == after {
                continue;
            }
            let (early, late) = (before.to_datetime(t), after.to_datetime(t));
            let gap = late > early;
            let (from, to) = if gap { (early, late) } else { (late, early) };
            let Some(wall) = minute_inside(from, to) else {
                continue;
            };
            let expr = format!(
                "0 {} {} {} {} ? {}",
                wall.minute(),
                wall.hour(),
                wall.day(),
                wall.month(),
                wall.year()
            );
            let cron = Cron::parse(&expr).expect("generated expressions are valid");
            let window = (
                t - SignedDuration::from_hours(48),
                t + SignedDuration::from_hours(48),
            );
            for policy in POLICIES {
                let got = fires(&cron, &tz, policy, window.0, window.1);
                let want: Vec<Timestamp> = if gap {
                    match policy.gap {
                        Gap::Shift => vec![t],
                        Gap::Skip => vec![],
                    }
                } else {
                    let first = before.to_timestamp(wall).expect("in range");
                    let second = after.to_timestamp(wall).expect("in range");
                    match policy.fold {
                        Fold::First => vec![first],
                        Fold::Last => vec![second],
                        Fold::Both => vec![first, second],
                    }
                };
                if got != want {
                    failures.push(format!(
                        "{name} at {t}: `{expr}` under {policy:?}: got {got:?}, want {want:?}"
                    ));
                }
                // Never early: each slot's own wall time is at or past the named one.
                for slot in &got {
                    if tz.to_datetime(*slot) < wall {
                        failures.push(format!(
                            "{name}: `{expr}` under {policy:?} fired early at {slot}"
                        ));
                    }
                }
            }
            // Wildcard expressions ignore the policy.
            let wildcard = Cron::parse(&format!(
                "0 */15 {} {} {} ? {}",
                wall.hour(),
                wall.day(),
                wall.month(),
                wall.year()
            ))
            .expect("valid");
            let reference = fires(&wildcard, &tz, DstPolicy::default(), window.0, window.1);
            for policy in POLICIES {
                let got = fires(&wildcard, &tz, policy, window.0, window.1);
                if got != reference {
                    failures.push(format!(
                        "{name} at {t}: a wildcard expression changed under {policy:?}"
                    ));
                }
            }
            if gap {
                checked.0 += 1;
            } else {
                checked.1 += 1;
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} failures, the first: {:#?}",
        failures.len(),
        &failures[..failures.len().min(10)]
    );
    // The bundled database holds thousands of such changes in these years.
    assert!(checked.0 > 1000 && checked.1 > 1000, "checked {checked:?}");
}

#[test]
fn the_preview_lists_the_changes_that_touch_a_schedule_with_their_slots() {
    let tz = TimeZone::get("Europe/Berlin").expect("bundled zone");
    let from = at("2026-01-01T00:00:00Z");
    // 02:30 is skipped in March and not repeated in October (02:00-03:00 repeats, 02:30 is in
    // it): both touch.
    let cron = Cron::parse("30 2 * * *").expect("valid");
    let both = DstPolicy {
        gap: Gap::Skip,
        fold: Fold::Both,
    };
    let preview = cron.dst_transitions(from, &tz, both, 2);
    assert_eq!(preview.len(), 2);
    assert_eq!(preview[0].kind, TransitionKind::Gap);
    assert_eq!(preview[0].at, at("2026-03-29T01:00:00Z"));
    // Skipped on the 29th: the slots around it are the 28th's and the 30th's.
    assert_eq!(
        preview[0].slots,
        [at("2026-03-28T01:30:00Z"), at("2026-03-30T00:30:00Z")]
    );
    assert_eq!(preview[1].kind, TransitionKind::Fold);
    assert_eq!(preview[1].at, at("2026-10-25T01:00:00Z"));
    assert_eq!(
        preview[1].slots,
        [
            at("2026-10-24T00:30:00Z"),
            at("2026-10-25T00:30:00Z"),
            at("2026-10-25T01:30:00Z"),
            at("2026-10-26T01:30:00Z"),
        ]
    );
    // A schedule no change touches: none within the horizon, and a zone without DST.
    let noon = Cron::parse("0 12 * * *").expect("valid");
    assert!(noon.dst_transitions(from, &tz, both, 2).is_empty());
    assert!(
        cron.dst_transitions(from, &TimeZone::UTC, both, 2)
            .is_empty()
    );
}
