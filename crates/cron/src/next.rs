//! The search for the next fire instant.
//!
//! Two layers:
//!
//! 1. [`Schedule::next_civil`] finds the first matching *civil* (wall-clock) time in a half-open
//!    civil range, jumping field by field: to the next matching year, then month, then day
//!    (from a per-month bit mask that applies `L`, `W`, `#` and the day rule), hour, minute,
//!    second, carrying into the next larger unit when a field has no match left. It never
//!    steps minute by minute; its loop runs a handful of times per month it visits.
//! 2. Mapping civil times to instants in the job's zone, under cronie's DST convention
//!    (`cron(8)`, "Daylight Saving Time and other time changes"; see the crate docs):
//!    - *fixed-time* jobs map each matching civil time to one instant: the instant itself when
//!      unambiguous, the earlier one in a fold (repeated hour), the transition instant in a gap
//!      (skipped hour). That mapping never decreases along civil time, so the answer is the
//!      first civil match whose instant is after the start. A schedule's DST policy
//!      (docs/cron.md, "DST policy") swaps in another such mapping — the later instant of a
//!      fold (`last`), no instant for a gap (`skip`) — and `both` is the earlier answer of the
//!      `first` and `last` mappings, the union of their instants.
//!    - *wildcard* jobs fire at every instant whose local wall time matches: the timeline is cut
//!      into spans of constant UTC offset at the zone's transitions, and each span is searched
//!      in civil time with its own offset, so skipped times never fire and repeated ones fire
//!      twice.

use jiff::civil::DateTime;
use jiff::tz::{AmbiguousOffset, Offset, TimeZone};
use jiff::{Timestamp, Zoned};

use crate::civil::Civil;
use crate::dst::{DstPolicy, Fold, Gap};
use crate::spec::{Schedule, days_in_month};

impl Schedule {
    /// The first matching civil time `c` with `start <= c < end`.
    ///
    /// Each pass of the loop either returns or moves one field to its next candidate (resetting
    /// the smaller fields), so a search costs a few passes per visited month, at most
    /// `12 × 230` months.
    pub(crate) fn next_civil(&self, start: Civil, end: Civil) -> Option<Civil> {
        let end = end.min(Civil::END);
        let mut c = start;
        // Day mask of the month last computed, keyed by (year, month).
        let mut cached: Option<(i32, u32, u32)> = None;
        loop {
            if c >= end {
                return None;
            }
            let year = self.years.next_from(c.year)?;
            if year != c.year {
                c = Civil::midnight(year, 1, 1);
                continue;
            }
            match self.months.next_from(c.month) {
                Some(month) if month == c.month => {}
                Some(month) => {
                    c = Civil::midnight(c.year, month, 1);
                    continue;
                }
                None => {
                    c = Civil::midnight(c.year + 1, 1, 1);
                    continue;
                }
            }
            let mask = match cached {
                Some((y, m, mask)) if y == c.year && m == c.month => mask,
                _ => {
                    let mask = self.day_mask(c.year, c.month);
                    cached = Some((c.year, c.month, mask));
                    mask
                }
            };
            let rest = if c.day < 32 { mask >> c.day } else { 0 };
            if rest == 0 {
                c = next_month(c);
                continue;
            }
            let day = c.day + rest.trailing_zeros();
            if day != c.day {
                c = Civil::midnight(c.year, c.month, day);
            }
            match self.hours.next_from(c.hour) {
                Some(hour) if hour == c.hour => {}
                Some(hour) => {
                    c.hour = hour;
                    c.minute = 0;
                    c.second = 0;
                }
                None => {
                    c = next_day(c);
                    continue;
                }
            }
            match self.minutes.next_from(c.minute) {
                Some(minute) if minute == c.minute => {}
                Some(minute) => {
                    c.minute = minute;
                    c.second = 0;
                }
                None => {
                    c.hour += 1;
                    c.minute = 0;
                    c.second = 0;
                    if c.hour == 24 {
                        c = next_day(c);
                    }
                    continue;
                }
            }
            match self.seconds.next_from(c.second) {
                Some(second) => c.second = second,
                None => {
                    c.minute += 1;
                    c.second = 0;
                    if c.minute == 60 {
                        c.minute = 0;
                        c.hour += 1;
                        if c.hour == 24 {
                            c = next_day(c);
                        }
                    }
                    continue;
                }
            }
            return (c < end).then_some(c);
        }
    }

    /// The first fire instant strictly after `after` in `tz` under `policy` (see the module
    /// docs), as a [`Zoned`] in `tz`.
    pub(crate) fn next_after(
        &self,
        after: Timestamp,
        tz: &TimeZone,
        policy: DstPolicy,
    ) -> Option<Zoned> {
        Some(self.next_instant(after, tz, policy)?.to_zoned(tz.clone()))
    }

    /// The first fire instant strictly after `after` in `tz` under `policy`.
    pub(crate) fn next_instant(
        &self,
        after: Timestamp,
        tz: &TimeZone,
        policy: DstPolicy,
    ) -> Option<Timestamp> {
        if !self.fixed_time {
            return self.next_wildcard(after, tz);
        }
        match policy.fold {
            Fold::First => self.next_fixed(after, tz, policy.gap, Fold::First),
            Fold::Last => self.next_fixed(after, tz, policy.gap, Fold::Last),
            // Every instant of `both` is an instant of `first` or of `last`, and each of those
            // is one of `both`'s: the next of `both` is the earlier of the two.
            Fold::Both => {
                let first = self.next_fixed(after, tz, policy.gap, Fold::First);
                let last = self.next_fixed(after, tz, policy.gap, Fold::Last);
                match (first, last) {
                    (Some(a), Some(b)) => Some(a.min(b)),
                    (a, b) => a.or(b),
                }
            }
        }
    }

    /// Fixed-time jobs: the first civil match whose instant is after `after`, where a civil
    /// time maps to one instant: itself when unambiguous, the earlier (`pass` = `First`) or
    /// later (`Last`) instant in a fold, and in a gap the instant the gap ends (`Gap::Shift`)
    /// or none (`Gap::Skip`). Each mapping never decreases along civil time, so the first
    /// civil match past a start that no earlier civil time can beat is the answer.
    fn next_fixed(
        &self,
        after: Timestamp,
        tz: &TimeZone,
        gap: Gap,
        pass: Fold,
    ) -> Option<Timestamp> {
        let offset = tz.to_offset(after);
        let local = Civil::floor(offset.to_datetime(after));
        // Civil times up to `local` map to instants at or before `after`: start past it.
        let mut start = local.succ();
        if pass == Fold::First {
            // In the second pass of a repeated hour, the repeated civil times already fired (at
            // their earlier instant): start where the fold ends.
            if let Some(dt) = local.to_datetime()
                && let AmbiguousOffset::Fold {
                    before,
                    after: later,
                } = tz.to_ambiguous_timestamp(dt).offset()
                && offset == later
                && let Ok(earlier) = before.to_timestamp(dt)
                && let Some(transition) = tz.following(earlier).next()
            {
                start = start.max(Civil::ceil(before.to_datetime(transition.timestamp())));
            }
        } else if let Some(transition) = tz.following(after).next() {
            // In the first pass of a repeated hour, the repeated civil times up to `local` fire
            // again, later: start from `after` read with the offset that follows the fold.
            let later = transition.offset();
            if later < offset
                && after.as_second() + i64::from(offset.seconds() - later.seconds())
                    >= transition.timestamp().as_second()
            {
                start = Civil::floor(later.to_datetime(after)).succ();
            }
        }
        loop {
            let c = self.next_civil(start, Civil::END)?;
            let dt = c.to_datetime()?;
            let instant = match tz.to_ambiguous_timestamp(dt).offset() {
                AmbiguousOffset::Unambiguous { offset } => offset.to_timestamp(dt).ok(),
                AmbiguousOffset::Fold {
                    before,
                    after: later,
                } => match pass {
                    Fold::Last => later.to_timestamp(dt).ok(),
                    Fold::First | Fold::Both => before.to_timestamp(dt).ok(),
                },
                AmbiguousOffset::Gap {
                    before,
                    after: later,
                } => match gap {
                    Gap::Shift => Some(gap_end(tz, dt, before, later)?),
                    Gap::Skip => None,
                },
            };
            if let Some(instant) = instant
                && instant > after
            {
                return Some(instant);
            }
            start = c.succ();
        }
    }

    /// Wildcard jobs: search each span of constant offset in turn.
    fn next_wildcard(&self, after: Timestamp, tz: &TimeZone) -> Option<Timestamp> {
        let mut span_start = after;
        let mut inclusive = false;
        loop {
            let offset = tz.to_offset(span_start);
            let local = offset.to_datetime(span_start);
            let start = if inclusive {
                Civil::ceil(local)
            } else {
                Civil::floor(local).succ()
            };
            if start >= Civil::END {
                return None;
            }
            let transition = tz.following(span_start).next().map(|t| t.timestamp());
            let end = transition.map_or(Civil::END, |t| Civil::ceil(offset.to_datetime(t)));
            if let Some(c) = self.next_civil(start, end) {
                return offset.to_timestamp(c.to_datetime()?).ok();
            }
            span_start = transition?;
            inclusive = true;
        }
    }
}

/// The instant a gap ends: the transition that skipped the civil time `dt`.
fn gap_end(tz: &TimeZone, dt: DateTime, before: Offset, after: Offset) -> Option<Timestamp> {
    // With the later offset `dt` reads as an instant just before the transition.
    let probe = after.to_timestamp(dt).ok()?;
    match tz.following(probe).next() {
        Some(transition) => Some(transition.timestamp()),
        None => before.to_timestamp(dt).ok(),
    }
}

fn next_day(c: Civil) -> Civil {
    let day = c.day + 1;
    if day > days_in_month(c.year, c.month) {
        next_month(c)
    } else {
        Civil::midnight(c.year, c.month, day)
    }
}

fn next_month(c: Civil) -> Civil {
    if c.month >= 12 {
        Civil::midnight(c.year + 1, 1, 1)
    } else {
        Civil::midnight(c.year, c.month + 1, 1)
    }
}
