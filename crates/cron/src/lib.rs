//! Cron expressions for Sundial: parsing, matching, describing, and the next fire instant in an
//! IANA time zone.
//!
//! # Dialect
//!
//! The contract is docs/cron.md, checked against the conformance corpus in `tests/corpus/`;
//! in short:
//!
//! - **Fields.** 5 fields `minute hour day-of-month month day-of-week` (second 0), 6 with a
//!   leading `second`, 7 with a trailing `year`; separated by spaces or tabs, ends trimmed.
//!   Ranges: second and minute 0-59, hour 0-23, day-of-month 1-31, month 1-12 or `JAN`-`DEC`,
//!   day-of-week 0-7 or `SUN`-`SAT` (0 and 7 are Sunday), year 1970-2199.
//! - **Items.** `*`, `n`, `a-b` (`a <= b`; inverted ranges such as `FRI-SUN` are rejected),
//!   `*/s`, `a-b/s`, `n/s` (from `n` to the field's maximum; day-of-week's maximum is 7, so
//!   `1/2` is Mon, Wed, Fri, Sun), comma lists. Steps are >= 1 and may exceed the span. `?`
//!   means `*` and is allowed only as the whole day-of-month or day-of-week field.
//! - **Day-of-month extras** (Quartz): `L` last day, `L-n` (n 1-30) n days before it, `LW`
//!   last weekday, `nW` (n 1-31) the weekday nearest day n within the month.
//!   **Day-of-week extras** (Quartz): `dL` last weekday d of the month, `d#k` (k 1-5) its k-th
//!   occurrence. Each extra stands alone in its field.
//! - **Macros** (Vixie cron): `@yearly`/`@annually` = `0 0 1 1 *`, `@monthly` = `0 0 1 * *`,
//!   `@weekly` = `0 0 * * 0`, `@daily`/`@midnight` = `0 0 * * *`, `@hourly` = `0 * * * *`.
//! - Case-insensitive throughout (names, `L`, `W`, macros).
//! - **Day rule** (Vixie cron, `man 5 crontab`): a day field is a *star* when its text starts
//!   with `*` or is `?`. If either is a star, a day must match month AND day-of-month AND
//!   day-of-week; otherwise month AND (day-of-month OR day-of-week). The year must match.
//!
//! # Time zones and DST (cronie's convention)
//!
//! A job is *wildcard* when its second (if given), minute or hour text starts with `*`, else
//! *fixed-time*. The convention is cronie's (man page `cron(8)`, "Daylight Saving Time and
//! other time changes", implemented in cronie's `src/cron.c` and inherited from ISC/Vixie
//! cron), as stated by docs/cron.md and `tests/corpus/README.md`:
//!
//! - fixed-time: each matching wall time of a matching local date fires once — a repeated wall
//!   time at its first instant, a skipped one at the transition (the first instant after the
//!   gap), so `30 2 * * *` still fires on the night clocks jump from 02:00 to 03:00;
//! - wildcard: an instant fires when its local wall time matches — skipped wall times never
//!   fire, repeated ones fire twice.
//!
//! Unlike cronie, which treats only clock changes under three hours this way, the rule applies
//! to every transition of the zone, however large (a whole skipped day in `Pacific/Apia` fires
//! its fixed-time jobs when the day ends).
//!
//! Equal instants fire once.
//!
//! # Units
//!
//! Instants going in are UTC [`jiff::Timestamp`]s (any sub-second part is allowed); fire
//! instants coming out are [`jiff::Zoned`] values in the job's zone, on whole seconds, carrying
//! the zone's UTC offset at that instant. Wall times ([`Cron::matches`]) are
//! [`jiff::civil::DateTime`]s at seconds precision. Zone rules come from the
//! [`TimeZone`] passed in — in Sundial, jiff's bundled tz database.
//!
//! # Invariants
//!
//! - Results of [`Cron::next_after`] are strictly after the given instant, so
//!   [`Cron::iter_after`] yields strictly increasing instants.
//! - The search never scans minute by minute: it jumps field by field (year, month, day from a
//!   per-month mask that applies `L`, `W`, `#` and the day rule, hour, minute, second), and
//!   per zone transition for wildcard jobs. The rarest schedule costs well under a millisecond.
//! - The search stops after local date 2199-12-31.
//! - Pure: no I/O, no clock reads, no panics on any input.
//!
//! # Example
//!
//! ```
//! use sundial_cron::Cron;
//!
//! let cron: Cron = "30 2 * * *".parse()?;
//! let tz = jiff::tz::TimeZone::get("America/New_York")?;
//! let after: jiff::Timestamp = "2026-03-08T05:00:00Z".parse()?;
//! // 02:30 does not exist on 2026-03-08: a fixed-time job fires when the gap ends.
//! let next = cron.next_after(after, &tz).expect("fires again");
//! assert_eq!(next.timestamp().to_string(), "2026-03-08T07:00:00Z");
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
#![warn(missing_docs)]

mod calendar;
mod civil;
mod describe;
mod dst;
mod error;
mod next;
mod parse;
mod spec;

use std::fmt;
use std::str::FromStr;

use jiff::civil::DateTime;
use jiff::tz::TimeZone;
use jiff::{Timestamp, Zoned};

pub use calendar::{Calendar, Exclusion, excluded_until};
pub use dst::{
    DstPolicy, Fold, Gap, PREVIEW_HORIZON_TRANSITIONS, PREVIEW_SLOTS_WITHIN, Transition,
    TransitionKind,
};
pub use error::{Field, ParseError};

use spec::Schedule;

/// A parsed cron expression of the Sundial dialect (see the [crate docs](crate)).
///
/// Two values are equal when their text and their meaning are equal.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Cron {
    text: String,
    schedule: Schedule,
}

impl Cron {
    /// Parses an expression of the dialect: 5, 6 or 7 fields, or a macro; case-insensitive.
    ///
    /// # Errors
    ///
    /// A [`ParseError`] naming the field (if the problem lies in one), the 0-based character
    /// offset of the offending token, and the reason — for a wrong number of fields, an unknown
    /// macro, a value out of range, an inverted range, a bad step, an unknown name, a misplaced
    /// `?`, `L`, `W` or `#`, or any other character.
    ///
    /// # Example
    ///
    /// ```
    /// use sundial_cron::{Cron, Field};
    ///
    /// let err = Cron::parse("0 0 32 * *").unwrap_err();
    /// assert_eq!(err.field, Some(Field::DayOfMonth));
    /// assert_eq!(err.position, 4);
    /// assert_eq!(err.to_string(), "day-of-month: 32 is out of range 1-31");
    /// ```
    pub fn parse(expr: &str) -> Result<Cron, ParseError> {
        let schedule = parse::parse(expr)?;
        Ok(Cron {
            text: expr.to_string(),
            schedule,
        })
    }

    /// The first fire instant strictly after `after` (a UTC instant), with wall times evaluated
    /// in `tz` under the dialect's DST rules (fixed-time vs wildcard, cronie's convention).
    ///
    /// The result is a [`Zoned`] in `tz`, carrying the zone's UTC offset at that instant.
    /// Returns `None` when no instant exists through local date 2199-12-31 (e.g. `0 0 30 2 *`,
    /// or a year field wholly in the past). Cost: a few field jumps per month visited, never a
    /// scan over minutes.
    ///
    /// # Example
    ///
    /// ```
    /// use sundial_cron::Cron;
    ///
    /// let cron = Cron::parse("0 1-3 * * *")?;
    /// let tz = jiff::tz::TimeZone::get("America/New_York")?;
    /// let from: jiff::Timestamp = "2026-03-08T05:00:00Z".parse()?;
    /// let fires: Vec<String> = cron
    ///     .iter_after(from, &tz)
    ///     .take(2)
    ///     .map(|z| z.timestamp().to_string())
    ///     .collect();
    /// // 02:00 is skipped and maps onto 03:00, which fires once.
    /// assert_eq!(fires, ["2026-03-08T06:00:00Z", "2026-03-08T07:00:00Z"]);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn next_after(&self, after: Timestamp, tz: &TimeZone) -> Option<Zoned> {
        self.schedule.next_after(after, tz, DstPolicy::default())
    }

    /// [`next_after`](Self::next_after) under a schedule's own DST policy (docs/cron.md, "DST
    /// policy"). The policy changes only fixed-time expressions; under
    /// [`DstPolicy::default`] the result is `next_after`'s.
    ///
    /// # Example
    ///
    /// ```
    /// use sundial_cron::{Cron, DstPolicy, Fold, Gap};
    ///
    /// let cron = Cron::parse("30 1 * * *")?;
    /// let tz = jiff::tz::TimeZone::get("America/New_York")?;
    /// let from: jiff::Timestamp = "2026-11-01T04:00:00Z".parse()?;
    /// // 01:30 occurs twice on 2026-11-01: `both` fires at each.
    /// let both = DstPolicy { gap: Gap::Shift, fold: Fold::Both };
    /// let first = cron.next_after_with(from, &tz, both).expect("fires");
    /// let second = cron.next_after_with(first.timestamp(), &tz, both).expect("fires");
    /// assert_eq!(first.timestamp().to_string(), "2026-11-01T05:30:00Z");
    /// assert_eq!(second.timestamp().to_string(), "2026-11-01T06:30:00Z");
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn next_after_with(
        &self,
        after: Timestamp,
        tz: &TimeZone,
        policy: DstPolicy,
    ) -> Option<Zoned> {
        self.schedule.next_after(after, tz, policy)
    }

    /// The next `count` offset changes of `tz` after `after` (UTC) that touch this
    /// expression's wall times — some wall time it matches is skipped or repeated — each with
    /// the fire instants around it under `policy`: the last before the change's window, those
    /// inside it (at most [`PREVIEW_SLOTS_WITHIN`]) and the first after. Looks at most
    /// [`PREVIEW_HORIZON_TRANSITIONS`] changes ahead. This is a job's `dst_preview` (docs/time.md, "DST policy").
    ///
    /// # Example
    ///
    /// ```
    /// use sundial_cron::{Cron, DstPolicy, TransitionKind};
    ///
    /// let cron = Cron::parse("30 2 * * *")?;
    /// let tz = jiff::tz::TimeZone::get("America/New_York")?;
    /// let from: jiff::Timestamp = "2026-01-01T00:00:00Z".parse()?;
    /// let next = cron.dst_transitions(from, &tz, DstPolicy::default(), 1);
    /// // The November fold repeats 01:00-02:00, which 02:30 is not in: only March's gap counts.
    /// assert_eq!(next[0].kind, TransitionKind::Gap);
    /// assert_eq!(next[0].at.to_string(), "2026-03-08T07:00:00Z");
    /// let slots: Vec<String> = next[0].slots.iter().map(|t| t.to_string()).collect();
    /// assert_eq!(slots, ["2026-03-07T07:30:00Z", "2026-03-08T07:00:00Z", "2026-03-09T06:30:00Z"]);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn dst_transitions(
        &self,
        after: Timestamp,
        tz: &TimeZone,
        policy: DstPolicy,
        count: usize,
    ) -> Vec<Transition> {
        dst::transitions_touching(&self.schedule, after, tz, policy, count)
    }

    /// The successive fire instants strictly after `after` (UTC), as [`Zoned`] values in `tz`,
    /// in strictly increasing order; each is [`next_after`](Self::next_after) of the previous.
    ///
    /// The iterator owns what it needs (it borrows neither `self` nor `tz`) and ends after
    /// local date 2199-12-31.
    pub fn iter_after(
        &self,
        after: Timestamp,
        tz: &TimeZone,
    ) -> impl Iterator<Item = Zoned> + use<> {
        self.iter_after_with(after, tz, DstPolicy::default())
    }

    /// [`iter_after`](Self::iter_after) under a DST policy (see
    /// [`next_after_with`](Self::next_after_with)).
    pub fn iter_after_with(
        &self,
        after: Timestamp,
        tz: &TimeZone,
        policy: DstPolicy,
    ) -> impl Iterator<Item = Zoned> + use<> {
        let schedule = self.schedule;
        let tz = tz.clone();
        let mut cursor = Some(after);
        std::iter::from_fn(move || {
            let next = schedule.next_after(cursor?, &tz, policy);
            cursor = next.as_ref().map(Zoned::timestamp);
            next
        })
    }

    /// Whether a local civil date-time (wall clock; sub-second digits are ignored) matches
    /// every field and the day rule.
    ///
    /// This is the pure field test: it knows nothing of time zones, so a wall time inside a
    /// DST gap can match even though it never occurs.
    ///
    /// # Example
    ///
    /// ```
    /// use jiff::civil::date;
    /// use sundial_cron::Cron;
    ///
    /// // Vixie day rule: both day fields restricted, so the 13th OR a Friday.
    /// let cron = Cron::parse("0 0 13 * FRI")?;
    /// assert!(cron.matches(date(2026, 1, 13).at(0, 0, 0, 0))); // a Tuesday
    /// assert!(cron.matches(date(2026, 1, 16).at(0, 0, 0, 0))); // a Friday
    /// assert!(!cron.matches(date(2026, 1, 14).at(0, 0, 0, 0)));
    /// # Ok::<(), sundial_cron::ParseError>(())
    /// ```
    pub fn matches(&self, civil: DateTime) -> bool {
        let to_u32 = |v: i8| u32::from(v.unsigned_abs());
        self.schedule.matches(
            i32::from(civil.year()),
            to_u32(civil.month()),
            to_u32(civil.day()),
            (
                to_u32(civil.hour()),
                to_u32(civil.minute()),
                to_u32(civil.second()),
            ),
        )
    }

    /// A description in English, e.g. `"at 02:00, every day"` or
    /// `"every 5 minutes between 09:00 and 17:59, Monday through Friday"`.
    ///
    /// Built from the parsed value sets, so equivalent expressions read the same; times are
    /// wall-clock times in the job's zone.
    ///
    /// # Example
    ///
    /// ```
    /// use sundial_cron::Cron;
    ///
    /// assert_eq!(Cron::parse("0 0 ? * 5L")?.describe(), "at 00:00, on the last Friday of the month");
    /// assert_eq!(Cron::parse("@yearly")?.describe(), "at 00:00, on January 1");
    /// # Ok::<(), sundial_cron::ParseError>(())
    /// ```
    pub fn describe(&self) -> String {
        describe::describe(&self.schedule)
    }

    /// The original expression text, exactly as given to [`parse`](Self::parse).
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// True when the expression has a seconds field (6 or 7 fields); macros and 5-field
    /// expressions fire at second 0.
    pub fn has_seconds(&self) -> bool {
        self.schedule.has_seconds
    }
}

impl FromStr for Cron {
    type Err = ParseError;

    /// Same as [`Cron::parse`].
    fn from_str(s: &str) -> Result<Cron, ParseError> {
        Cron::parse(s)
    }
}

impl fmt::Display for Cron {
    /// Writes the original expression text.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The next `n` fire instants as RFC 3339 strings with the zone's offset.
    fn fires(expr: &str, zone: &str, from: &str, n: usize) -> Vec<String> {
        let cron = Cron::parse(expr).unwrap_or_else(|e| panic!("{expr}: {e}"));
        let tz = TimeZone::get(zone).unwrap_or_else(|e| panic!("{zone}: {e}"));
        let from: Timestamp = from.parse().unwrap_or_else(|e| panic!("{from}: {e}"));
        cron.iter_after(from, &tz)
            .take(n)
            .map(|z| z.timestamp().display_with_offset(z.offset()).to_string())
            .collect()
    }

    const NY: &str = "America/New_York";

    #[test]
    fn readme_1_fixed_time_in_a_gap_fires_when_the_gap_ends() {
        assert_eq!(
            fires("30 2 * * *", NY, "2026-03-07T00:00:00Z", 3),
            [
                "2026-03-07T02:30:00-05:00",
                "2026-03-08T03:00:00-04:00",
                "2026-03-09T02:30:00-04:00"
            ]
        );
    }

    #[test]
    fn readme_2_a_skipped_hour_merges_with_the_next_one() {
        assert_eq!(
            fires("0 1-3 * * *", NY, "2026-03-08T05:00:00Z", 2),
            ["2026-03-08T01:00:00-05:00", "2026-03-08T03:00:00-04:00"]
        );
    }

    #[test]
    fn readme_3_fixed_time_in_a_fold_fires_once() {
        assert_eq!(
            fires("30 1 * * *", NY, "2026-10-31T12:00:00Z", 2),
            ["2026-11-01T01:30:00-04:00", "2026-11-02T01:30:00-05:00"]
        );
        // Starting between the two 01:30s changes nothing.
        assert_eq!(
            fires("30 1 * * *", NY, "2026-11-01T05:45:00Z", 1),
            ["2026-11-02T01:30:00-05:00"]
        );
        assert_eq!(
            fires("30 1 * * *", NY, "2026-11-01T06:15:00Z", 1),
            ["2026-11-02T01:30:00-05:00"]
        );
    }

    #[test]
    fn readme_4_wildcard_in_a_fold_fires_twice() {
        assert_eq!(
            fires("30 * * * *", NY, "2026-11-01T04:00:00Z", 4),
            [
                "2026-11-01T00:30:00-04:00",
                "2026-11-01T01:30:00-04:00",
                "2026-11-01T01:30:00-05:00",
                "2026-11-01T02:30:00-05:00"
            ]
        );
    }

    #[test]
    fn readme_5_wildcard_in_a_gap_never_fires() {
        assert_eq!(
            fires("*/15 * * * *", NY, "2026-03-08T06:40:00Z", 3),
            [
                "2026-03-08T01:45:00-05:00",
                "2026-03-08T03:00:00-04:00",
                "2026-03-08T03:15:00-04:00"
            ]
        );
    }

    #[test]
    fn readme_6_midnight_in_a_gap_fires_at_one() {
        assert_eq!(
            fires("0 0 * * *", "America/Santiago", "2026-09-05T12:00:00Z", 2),
            ["2026-09-06T01:00:00-03:00", "2026-09-07T00:00:00-03:00"]
        );
    }

    #[test]
    fn readme_7_a_skipped_day_fires_when_it_ends() {
        assert_eq!(
            fires("0 12 * * *", "Pacific/Apia", "2011-12-29T00:00:00Z", 3),
            [
                "2011-12-29T12:00:00-10:00",
                "2011-12-31T00:00:00+14:00",
                "2011-12-31T12:00:00+14:00"
            ]
        );
    }

    #[test]
    fn readme_8_vixie_day_rule() {
        // Both restricted: the 13th OR a Friday. 2026-02-13 is a Friday.
        assert_eq!(
            fires("0 0 13 * 5", "UTC", "2026-02-01T00:00:00Z", 3),
            [
                "2026-02-06T00:00:00+00:00",
                "2026-02-13T00:00:00+00:00",
                "2026-02-20T00:00:00+00:00"
            ]
        );
        // Day-of-month starts with `*`: odd days AND Fridays.
        assert_eq!(
            fires("0 0 */2 * 5", "UTC", "2026-02-01T00:00:00Z", 2),
            ["2026-02-13T00:00:00+00:00", "2026-02-27T00:00:00+00:00"]
        );
    }

    #[test]
    fn search_ends_after_2199() {
        assert!(fires("0 0 30 2 *", "UTC", "2026-01-01T00:00:00Z", 1).is_empty());
        assert_eq!(
            fires("59 23 31 12 *", "UTC", "2199-06-01T00:00:00Z", 2),
            ["2199-12-31T23:59:00+00:00"]
        );
        assert!(fires("* * * * *", "UTC", "2200-01-01T00:00:00Z", 1).is_empty());
        assert!(fires("* * * * *", "UTC", "9999-01-01T00:00:00Z", 1).is_empty());
    }

    #[test]
    fn extreme_start_instants_do_not_panic() {
        for expr in ["* * * * *", "0 2 * * *", "0 0 0 1 1 * 2199", "0 0 ? 2 4#5"] {
            let cron = Cron::parse(expr).expect("valid");
            for zone in ["UTC", NY, "Pacific/Apia", "Australia/Lord_Howe"] {
                let tz = TimeZone::get(zone).expect("bundled zone");
                assert!(
                    cron.next_after(Timestamp::MIN, &tz).is_some(),
                    "{expr} {zone}"
                );
                assert_eq!(cron.next_after(Timestamp::MAX, &tz), None, "{expr} {zone}");
            }
        }
    }

    #[test]
    fn starts_before_1970_find_the_first_valid_year() {
        assert_eq!(
            fires("0 0 1 1 *", "UTC", "1900-06-01T00:00:00Z", 1),
            ["1970-01-01T00:00:00+00:00"]
        );
    }

    #[test]
    fn results_are_strictly_after_the_start_even_with_fractional_seconds() {
        assert_eq!(
            fires("* * * * * *", "UTC", "2026-01-01T00:00:00.5Z", 2),
            ["2026-01-01T00:00:01+00:00", "2026-01-01T00:00:02+00:00"]
        );
        assert_eq!(
            fires("0 0 * * *", "UTC", "2026-01-01T00:00:00Z", 1),
            ["2026-01-02T00:00:00+00:00"]
        );
    }

    #[test]
    fn matches_tests_fields_and_day_rule_on_wall_time() {
        let cron = Cron::parse("30 2 * * *").expect("valid");
        assert!(cron.matches(jiff::civil::date(2026, 3, 8).at(2, 30, 0, 0)));
        assert!(!cron.matches(jiff::civil::date(2026, 3, 8).at(2, 30, 1, 0)));
        let cron = Cron::parse("0 0 ? * 5L").expect("valid");
        assert!(cron.matches(jiff::civil::date(2026, 2, 27).at(0, 0, 0, 0)));
        assert!(!cron.matches(jiff::civil::date(2026, 2, 20).at(0, 0, 0, 0)));
        let cron = Cron::parse("0 0 0 1 1 * 2030").expect("valid");
        assert!(!cron.matches(jiff::civil::date(2031, 1, 1).at(0, 0, 0, 0)));
        assert!(!cron.matches(jiff::civil::date(1969, 1, 1).at(0, 0, 0, 0)));
    }

    #[test]
    fn text_accessors_keep_the_original_expression() {
        let cron: Cron = " @Daily ".parse().expect("valid");
        assert_eq!(cron.as_str(), " @Daily ");
        assert_eq!(cron.to_string(), " @Daily ");
        assert!(!cron.has_seconds());
        assert!(Cron::parse("0 0 0 * * *").expect("valid").has_seconds());
        assert_ne!(cron, Cron::parse("0 0 * * *").expect("valid"));
    }

    #[test]
    fn describe_reads_as_english() {
        let cases = [
            ("0 2 * * *", "at 02:00, every day"),
            (
                "*/5 9-17 * * MON-FRI",
                "every 5 minutes between 09:00 and 17:59, Monday through Friday",
            ),
            ("@hourly", "at minute 0 of every hour, every day"),
            ("0 6,18 * * *", "at 06:00 and 18:00, every day"),
            ("*/15 * * * * *", "every 15 seconds, every day"),
            (
                "0 0 13 * 5",
                "at 00:00, on day 13 of the month, and also on Friday",
            ),
            (
                "0 0 */2 * 5",
                "at 00:00, on odd days of the month, if it is a Friday",
            ),
            (
                "0 0 L-3 * *",
                "at 00:00, on the last day of the month minus 3 days",
            ),
            (
                "0 0 15W * *",
                "at 00:00, on the weekday nearest day 15 of the month",
            ),
            ("0 0 ? * 1#2", "at 00:00, on the 2nd Monday of the month"),
            ("0 0 ? * 5L", "at 00:00, on the last Friday of the month"),
            ("@yearly", "at 00:00, on January 1"),
            ("0 0 0 1 1 * 2030", "at 00:00, on January 1, in 2030"),
            (
                "0 0 1 3-5 *",
                "at 00:00, on day 1 of the month, from March through May",
            ),
        ];
        for (expr, want) in cases {
            let cron = Cron::parse(expr).expect("valid");
            assert_eq!(cron.describe(), want, "{expr}");
        }
    }
}
