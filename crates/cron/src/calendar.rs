//! Holiday calendars: local days a schedule does not fire on (docs/time.md, "Calendars")
//!
//! A [`Calendar`] is a set of excluded local dates in its own zone, given as single dates,
//! inclusive date ranges and cron expressions (a day is excluded when the expression's year,
//! month and day fields match it, whatever its time fields say).
//!
//! Invariants:
//! - No search walks day by day: [`Calendar::next_included`] takes each month's excluded days
//!   as one bit mask (ranges and cron day masks OR-ed), so it costs a few operations per month
//!   it visits; [`Cron::next_after_excluding`] jumps from an excluded slot straight to the start
//!   of the next included day.
//! - An excluded slot is never returned; an included one is never passed over.
//! - The search ends with the cron engine's horizon (local date 2199-12-31).

use jiff::civil::Date;
use jiff::tz::TimeZone;
use jiff::{Timestamp, Zoned};

use crate::spec::{MAX_YEAR, days_in_month};
use crate::{Cron, DstPolicy};

/// One kind of exclusion of a [`Calendar`].
#[derive(Debug, Clone, PartialEq)]
pub enum Exclusion {
    /// One local date.
    Date(Date),
    /// Every local date from `from` through `to`, both included.
    Range {
        /// First excluded date.
        from: Date,
        /// Last excluded date (inclusive).
        to: Date,
    },
    /// Every local date whose year, month and day the expression matches (its time fields
    /// are ignored): `* * * * SAT,SUN` excludes weekends.
    Cron(Box<Cron>),
}

/// A set of excluded local dates in one zone.
#[derive(Debug, Clone)]
pub struct Calendar {
    tz: TimeZone,
    /// Excluded date ranges, inclusive, sorted by start and merged (no two overlap or touch).
    ranges: Vec<(Date, Date)>,
    crons: Vec<Cron>,
}

impl Calendar {
    /// A calendar of `exclusions` in `tz` (dates are local days in `tz`). A range whose `to`
    /// is before its `from` excludes nothing.
    pub fn new(tz: TimeZone, exclusions: impl IntoIterator<Item = Exclusion>) -> Calendar {
        let mut ranges = Vec::new();
        let mut crons = Vec::new();
        for e in exclusions {
            match e {
                Exclusion::Date(d) => ranges.push((d, d)),
                Exclusion::Range { from, to } if from <= to => ranges.push((from, to)),
                Exclusion::Range { .. } => {}
                Exclusion::Cron(c) => crons.push(*c),
            }
        }
        ranges.sort();
        let mut merged: Vec<(Date, Date)> = Vec::with_capacity(ranges.len());
        for (from, to) in ranges {
            match merged.last_mut() {
                Some(last) if from <= last.1.tomorrow().unwrap_or(last.1) => {
                    last.1 = last.1.max(to);
                }
                _ => merged.push((from, to)),
            }
        }
        Calendar {
            tz,
            ranges: merged,
            crons,
        }
    }

    /// The calendar's zone.
    pub fn time_zone(&self) -> &TimeZone {
        &self.tz
    }

    /// Whether the local date `date` is excluded.
    pub fn excludes(&self, date: Date) -> bool {
        self.excluded_mask(i32::from(date.year()), date.month().unsigned_abs().into())
            & (1 << date.day().unsigned_abs())
            != 0
    }

    /// The first local date at or after `from` that is not excluded; `None` past 2199-12-31.
    /// Costs a few operations per month visited.
    pub fn next_included(&self, from: Date) -> Option<Date> {
        let (mut year, mut month, mut day) = (
            i32::from(from.year()),
            u32::from(from.month().unsigned_abs()),
            u32::from(from.day().unsigned_abs()),
        );
        while year <= MAX_YEAR {
            let dim = days_in_month(year, month);
            // Bits 1..=dim: the month's days; a set bit of `free` is an included day >= `day`.
            let all = ((1u64 << (dim + 1)) - 2) as u32;
            let free = all & !self.excluded_mask(year, month) & !((1u32 << day) - 1);
            if free != 0 {
                let d = free.trailing_zeros();
                return Date::new(
                    i16::try_from(year).ok()?,
                    i8::try_from(month).ok()?,
                    i8::try_from(d).ok()?,
                )
                .ok();
            }
            (year, month, day) = if month == 12 {
                (year + 1, 1, 1)
            } else {
                (year, month + 1, 1)
            };
        }
        None
    }

    /// Whether `instant` falls on a date this calendar excludes (read in its zone): `None` when
    /// it does not; otherwise the first instant of the next date it includes, from which a
    /// search for the next slot may resume (every instant before it is excluded too), or
    /// [`Timestamp::MAX`] when it includes no date through 2199-12-31.
    pub fn excluded_until(&self, instant: Timestamp) -> Option<Timestamp> {
        let date = instant.to_zoned(self.tz.clone()).date();
        if !self.excludes(date) {
            return None;
        }
        let start = date
            .tomorrow()
            .ok()
            .and_then(|d| self.next_included(d))
            .and_then(|d| d.to_zoned(self.tz.clone()).ok())
            .and_then(|z| z.start_of_day().ok())
            .map_or(Timestamp::MAX, |z| z.timestamp());
        Some(start)
    }

    /// The excluded days of `month` (1-12) of `year`: bit `d` for day `d`.
    fn excluded_mask(&self, year: i32, month: u32) -> u32 {
        let mut mask = 0u32;
        for cron in &self.crons {
            let s = &cron.schedule;
            if s.years.contains(year) && s.months.contains(month) {
                mask |= s.day_mask(year, month);
            }
        }
        let (Ok(y), Ok(m)) = (i16::try_from(year), i8::try_from(month)) else {
            return mask;
        };
        let (Ok(first), Ok(last)) = (
            Date::new(y, m, 1),
            Date::new(y, m, i8::try_from(days_in_month(year, month)).unwrap_or(28)),
        ) else {
            return mask;
        };
        // The first range that ends on or after the month's first day, and those after it
        // that start within the month.
        let start = self.ranges.partition_point(|(_, to)| *to < first);
        for (from, to) in &self.ranges[start..] {
            if *from > last {
                break;
            }
            let lo = if *from < first {
                1
            } else {
                from.day().unsigned_abs()
            };
            let hi = if *to > last {
                last.day().unsigned_abs()
            } else {
                to.day().unsigned_abs()
            };
            for d in lo..=hi {
                mask |= 1 << d;
            }
        }
        mask
    }
}

/// [`Calendar::excluded_until`] over several calendars: `None` when none excludes `instant`,
/// else the latest of the excluding calendars' resume instants (every instant before it is
/// excluded by one of them).
pub fn excluded_until(calendars: &[Calendar], instant: Timestamp) -> Option<Timestamp> {
    calendars
        .iter()
        .filter_map(|c| c.excluded_until(instant))
        .max()
}

impl Cron {
    /// [`next_after_with`](Cron::next_after_with), passing over every slot that falls on a
    /// date one of `calendars` excludes (each read in its own zone): the first fire instant
    /// strictly after `after` that no calendar excludes (docs/time.md, "Calendars"). From an
    /// excluded slot the search jumps to the start of the day its calendar next includes.
    pub fn next_after_excluding(
        &self,
        after: Timestamp,
        tz: &TimeZone,
        policy: DstPolicy,
        calendars: &[Calendar],
    ) -> Option<Zoned> {
        let mut cursor = after;
        loop {
            let slot = self.next_after_with(cursor, tz, policy)?;
            let mut resume: Option<Timestamp> = None;
            for cal in calendars {
                let date = slot.timestamp().to_zoned(cal.tz.clone()).date();
                if !cal.excludes(date) {
                    continue;
                }
                let next = cal.next_included(date.tomorrow().ok()?)?;
                let start = next.to_zoned(cal.tz.clone()).ok()?.start_of_day().ok()?;
                let start = start.timestamp();
                resume = Some(resume.map_or(start, |r: Timestamp| r.max(start)));
            }
            match resume {
                None => return Some(slot),
                // Strictly after `start - 1 ns`: a slot at the day's first instant counts.
                Some(start) => {
                    cursor = start
                        .checked_sub(jiff::SignedDuration::from_nanos(1))
                        .ok()?;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use jiff::civil::date;

    fn cal(exclusions: Vec<Exclusion>) -> Calendar {
        Calendar::new(TimeZone::get("Europe/Berlin").expect("zone"), exclusions)
    }

    #[test]
    fn dates_ranges_and_cron_days_are_excluded_and_nothing_else() {
        let c = cal(vec![
            Exclusion::Date(date(2026, 12, 25)),
            Exclusion::Range {
                from: date(2026, 12, 30),
                to: date(2027, 1, 2),
            },
            Exclusion::Cron(Box::new(Cron::parse("* * * * SAT,SUN").expect("valid"))),
        ]);
        assert!(c.excludes(date(2026, 12, 25)));
        assert!(c.excludes(date(2026, 12, 31)));
        assert!(c.excludes(date(2027, 1, 2)));
        assert!(c.excludes(date(2026, 12, 26))); // a Saturday
        assert!(!c.excludes(date(2026, 12, 24))); // a Thursday
        assert!(!c.excludes(date(2026, 12, 29)));
        // After 2027-01-02 (Sat) comes Sunday 3rd, then Monday the 4th.
        assert_eq!(c.next_included(date(2026, 12, 30)), Some(date(2027, 1, 4)));
        assert_eq!(
            c.next_included(date(2026, 12, 24)),
            Some(date(2026, 12, 24))
        );
    }

    #[test]
    fn overlapping_and_touching_ranges_merge_and_an_inverted_one_excludes_nothing() {
        let c = cal(vec![
            Exclusion::Range {
                from: date(2026, 1, 10),
                to: date(2026, 1, 12),
            },
            Exclusion::Range {
                from: date(2026, 1, 13),
                to: date(2026, 1, 14),
            },
            Exclusion::Range {
                from: date(2026, 1, 11),
                to: date(2026, 1, 20),
            },
            Exclusion::Range {
                from: date(2026, 3, 5),
                to: date(2026, 3, 1),
            },
        ]);
        assert_eq!(c.ranges, [(date(2026, 1, 10), date(2026, 1, 20))]);
        assert!(!c.excludes(date(2026, 3, 3)));
    }

    #[test]
    fn a_calendar_that_excludes_everything_ends_the_search() {
        let c = cal(vec![Exclusion::Cron(Box::new(
            Cron::parse("* * * * *").expect("valid"),
        ))]);
        assert_eq!(c.next_included(date(2026, 1, 1)), None);
        let daily = Cron::parse("0 9 * * *").expect("valid");
        let tz = TimeZone::get("Europe/Berlin").expect("zone");
        let from: Timestamp = "2026-01-01T00:00:00Z".parse().expect("instant");
        assert_eq!(
            daily.next_after_excluding(from, &tz, DstPolicy::default(), &[c]),
            None
        );
    }

    #[test]
    fn excluded_slots_are_passed_over_in_the_calendars_own_zone() {
        // Weekdays only, in Berlin; the job runs at 23:30 UTC, which is already the next day
        // in Berlin: Friday 23:30 UTC is Saturday 00:30 there, so it is excluded.
        let weekends = Calendar::new(
            TimeZone::get("Europe/Berlin").expect("zone"),
            vec![Exclusion::Cron(Box::new(
                Cron::parse("* * * * SAT,SUN").expect("valid"),
            ))],
        );
        let job = Cron::parse("30 23 * * *").expect("valid");
        let from: Timestamp = "2026-01-01T00:00:00Z".parse().expect("instant"); // a Thursday
        let slots: Vec<String> = std::iter::successors(
            job.next_after_excluding(
                from,
                &TimeZone::UTC,
                DstPolicy::default(),
                std::slice::from_ref(&weekends),
            ),
            |z| {
                job.next_after_excluding(
                    z.timestamp(),
                    &TimeZone::UTC,
                    DstPolicy::default(),
                    std::slice::from_ref(&weekends),
                )
            },
        )
        .take(4)
        .map(|z| z.timestamp().to_string())
        .collect();
        // Thu 1st 23:30Z = Fri 00:30 Berlin: fires. Fri 2nd = Sat: no. Sat 3rd = Sun: no.
        // Sun 4th 23:30Z = Mon 00:30: fires.
        assert_eq!(
            slots,
            [
                "2026-01-01T23:30:00Z",
                "2026-01-04T23:30:00Z",
                "2026-01-05T23:30:00Z",
                "2026-01-06T23:30:00Z"
            ]
        );
    }
}
