//! Cost of one `Cron::next_after` call.
//!
//! Targets (crates/cron/BENCHMARKS.md): common schedules under 2 µs per call, the rarest valid
//! corpus schedules (which must jump over decades) under 1 ms.

use std::hint::black_box;

use criterion::{Criterion, criterion_group, criterion_main};
use jiff::tz::TimeZone;
use jiff::{SignedDuration, Timestamp};
use sundial_cron::{Calendar, Cron, DstPolicy, Exclusion};

/// 64 start instants spread over 2026 (every ~5.7 days plus an odd number of seconds), so a
/// benchmark is not one lucky start.
fn starts() -> Vec<Timestamp> {
    let base: Timestamp = "2026-01-01T00:00:00Z".parse().expect("valid instant");
    (0..64)
        .map(|i| {
            base.checked_add(SignedDuration::from_secs(i * 493_117))
                .expect("in range")
        })
        .collect()
}

fn bench(c: &mut Criterion, name: &str, expr: &str, zone: &str) {
    let cron = Cron::parse(expr).expect("valid expression");
    let tz = TimeZone::get(zone).expect("bundled zone");
    let starts = starts();
    let mut i = 0;
    c.bench_function(&format!("{name}: `{expr}` in {zone}"), |b| {
        b.iter(|| {
            i = (i + 1) % starts.len();
            cron.next_after(black_box(starts[i]), &tz)
        })
    });
}

fn common(c: &mut Criterion) {
    bench(c, "common", "0 2 * * *", "Europe/Berlin");
    bench(c, "common", "*/5 9-17 * * MON-FRI", "America/New_York");
}

fn rare(c: &mut Criterion) {
    // Corpus C0210: a 7-field schedule whose only year is 2199.
    bench(c, "rare", "0 0 0 1 1 * 2199", "UTC");
    // Corpus C0211: the 5th Thursday of February, i.e. Feb 29 on a Thursday (every 28-40 years).
    bench(c, "rare", "0 0 ? 2 4#5", "UTC");
    // Corpus C0216: Feb 29 AND a Sunday (`*/7` starts with `*`, so both must match).
    bench(c, "rare", "0 0 29 2 */7", "America/New_York");
    // Corpus C0207: never fires; the search runs to 2199-12-31 and returns None.
    bench(c, "rare", "0 0 30 2 *", "UTC");
    // Not in the corpus: a rare wildcard job in a DST zone, searched span by span between
    // transitions (about 350 spans to 2199).
    bench(c, "rare", "*/5 * 29 2 */7", "Europe/Berlin");
}

/// `next_after_excluding` with a calendar against the same expression without one (docs/time.md's
/// aim: within 10×).
fn calendars(c: &mut Criterion) {
    let berlin = TimeZone::get("Europe/Berlin").expect("bundled zone");
    let weekday_but_one = Calendar::new(
        berlin.clone(),
        [Exclusion::Cron(Box::new(
            Cron::parse("* * * * 0,2-6").expect("valid"),
        ))],
    );
    // A year of holidays: 60 single dates spread over 2026 and the two weeks around new year,
    // plus every weekend.
    let mut holidays: Vec<Exclusion> = (0..60)
        .map(|k| {
            Exclusion::Date(
                jiff::civil::date(2026, 1, 2)
                    .checked_add(SignedDuration::from_hours(24 * 6 * k))
                    .expect("in range"),
            )
        })
        .collect();
    holidays.push(Exclusion::Range {
        from: jiff::civil::date(2026, 12, 20),
        to: jiff::civil::date(2027, 1, 3),
    });
    holidays.push(Exclusion::Cron(Box::new(
        Cron::parse("* * * * SAT,SUN").expect("valid"),
    )));
    let year_of_holidays = Calendar::new(berlin.clone(), holidays);
    let starts = starts();
    for (name, expr, calendar) in [
        ("every weekday but one", "0 2 * * *", weekday_but_one),
        ("a year of holidays", "0 2 * * *", year_of_holidays),
        (
            "none excluded",
            "0 2 * * *",
            Calendar::new(berlin.clone(), []),
        ),
    ] {
        let cron = Cron::parse(expr).expect("valid expression");
        let calendars = [calendar];
        let mut i = 0;
        c.bench_function(
            &format!("calendar, {name}: `{expr}` in Europe/Berlin"),
            |b| {
                b.iter(|| {
                    i = (i + 1) % starts.len();
                    cron.next_after_excluding(
                        black_box(starts[i]),
                        &berlin,
                        DstPolicy::default(),
                        &calendars,
                    )
                })
            },
        );
    }
}

criterion_group!(benches, common, rare, calendars);
criterion_main!(benches);
