//! The slots a schedule yields (docs/cron.md; docs/policies.md, "start_at and end_at").
//!
//! Invariants:
//! - [`Schedule::next_slot_after`] returns a slot strictly later than its argument, so a
//!   trigger loop that feeds each result back in makes progress and never yields a slot twice.
//! - No slot is earlier than `start_at` or later than `end_at`.
//! - Every slot is a whole millisecond (cron slots are whole seconds).

use jiff::tz::TimeZone;
use jiff::{SignedDuration, Timestamp};
use sundial_cron::{Calendar, Cron, DstPolicy, Transition};

use crate::job::{ScheduleKind, ScheduleSpec};

/// A schedule compiled for evaluation: the cron expression parsed and its zone resolved.
#[derive(Debug, Clone)]
pub struct Schedule {
    rule: Rule,
    start_at: Option<Timestamp>,
    end_at: Option<Timestamp>,
    /// Holiday calendars whose excluded days yield no slot ([`Schedule::with_calendars`]).
    calendars: Vec<Calendar>,
}

#[derive(Debug, Clone)]
enum Rule {
    Cron(Box<Cron>, TimeZone, DstPolicy),
    At(Timestamp),
    Every { every_ms: i64, anchor: Timestamp },
}

/// Why a schedule could not be compiled; `field` is relative to the schedule object.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {message}")]
pub struct ScheduleError {
    /// `cron`, `timezone` or `every`.
    pub field: &'static str,
    /// What is wrong.
    pub message: String,
}

impl Schedule {
    /// Compiles a schedule spec. An `every` schedule without `start_at` is anchored at the
    /// Unix epoch; writers fill `start_at` with the creation time before storing
    /// (docs/policies.md, "start_at and end_at").
    ///
    /// # Errors
    /// [`ScheduleError`] for an invalid cron expression, an unknown time zone, or an `every`
    /// shorter than one second.
    pub fn compile(spec: &ScheduleSpec) -> Result<Self, ScheduleError> {
        let rule = match &spec.kind {
            ScheduleKind::Cron {
                cron,
                timezone,
                dst,
            } => {
                let parsed = Cron::parse(cron).map_err(|e| ScheduleError {
                    field: "cron",
                    message: e.to_string(),
                })?;
                let tz = TimeZone::get(timezone).map_err(|_| ScheduleError {
                    field: "timezone",
                    message: format!("'{timezone}' is not a known IANA time zone"),
                })?;
                Rule::Cron(
                    Box::new(parsed),
                    tz,
                    dst.map(Into::into).unwrap_or_default(),
                )
            }
            ScheduleKind::At { at } => Rule::At(*at),
            ScheduleKind::Every { every } => {
                if every.as_millis() < 1000 {
                    return Err(ScheduleError {
                        field: "every",
                        message: format!("{every} is shorter than the minimum of 1s"),
                    });
                }
                Rule::Every {
                    every_ms: every.as_millis_i64(),
                    anchor: spec.start_at.unwrap_or(Timestamp::UNIX_EPOCH),
                }
            }
        };
        Ok(Schedule {
            rule,
            start_at: spec.start_at,
            end_at: spec.end_at,
            calendars: Vec::new(),
        })
    }

    /// This schedule with holiday calendars applied (docs/time.md, "Calendars"): no slot falls
    /// on a date one of them excludes, each read in its own zone. The scheduler does not use
    /// this form to advance a job (a calendar changed later must take effect for every slot
    /// not yet triggered); it checks each planned slot with [`Schedule::excludes`] instead.
    #[must_use]
    pub fn with_calendars(mut self, calendars: Vec<Calendar>) -> Self {
        self.calendars = calendars;
        self
    }

    /// Whether one of the schedule's calendars excludes `slot`'s date.
    pub fn excludes(&self, slot: Timestamp) -> bool {
        sundial_cron::excluded_until(&self.calendars, slot).is_some()
    }

    /// Why the schedule has no slot in `[from, to)`, in words for the answer of a backfill
    /// that finds none (docs/time.md, "Backfill"): the bounds that keep its slots out of the
    /// range (`start_at`, which writers set to an `every` job's creation time when none is
    /// given; `end_at`), the one instant of an `at` schedule, or else the rule itself (a
    /// calendar excluding every day, a cron expression with no match in the range). One
    /// sentence naming the instants in RFC 3339 UTC; the same words serve a job's schedule and
    /// a workflow's.
    pub fn why_no_slot_in(&self, from: Timestamp, to: Timestamp) -> String {
        let range = format!("[{from}, {to})");
        if let Rule::At(at) = self.rule
            && (at < from || at >= to)
        {
            return format!("it runs once, at {at}, outside {range}");
        }
        match (self.start_at, self.end_at) {
            (Some(start), _) if start >= to => {
                let every = if matches!(self.rule, Rule::Every { .. }) {
                    " (an `every` schedule starts when it was created unless start_at is given)"
                } else {
                    ""
                };
                format!(
                    "the schedule's slots begin at its start_at, {start}, not before {to}{every}"
                )
            }
            (_, Some(end)) if end < from => {
                format!("the schedule's slots end at its end_at, {end}, before {from}")
            }
            _ if !self.calendars.is_empty() => {
                format!("the schedule has no slot in {range} that its calendars do not exclude")
            }
            _ => format!("the schedule has no slot in {range}"),
        }
    }

    /// True for a one-off (`at`) schedule.
    pub fn is_one_off(&self) -> bool {
        matches!(self.rule, Rule::At(_))
    }

    /// The first slot at or after `from`; for `at`, the instant itself even when it is earlier
    /// than `from` (a one-off job whose instant has passed fires now). `None` when the schedule
    /// yields nothing more within its bounds.
    pub fn first_slot(&self, from: Timestamp) -> Option<Timestamp> {
        let from = self.start_at.map_or(from, |s| s.max(from));
        let slot = match &self.rule {
            Rule::At(at) => Some(*at).filter(|at| !self.excludes(*at)),
            _ => self.slot_after(from - SignedDuration::from_millis(1)),
        };
        slot.filter(|s| self.in_bounds(*s))
    }

    /// The first slot strictly after `after`, within the bounds; `None` past `end_at`, after a
    /// one-off slot, or past the cron engine's horizon (local year 2199).
    pub fn next_slot_after(&self, after: Timestamp) -> Option<Timestamp> {
        let after = match self.start_at {
            Some(s) if s > after => s - SignedDuration::from_millis(1),
            _ => after,
        };
        match &self.rule {
            Rule::At(at) => Some(*at).filter(|at| *at > after && !self.excludes(*at)),
            _ => self.slot_after(after),
        }
        .filter(|s| self.in_bounds(*s))
    }

    /// The first slot strictly after `after` on a date no calendar excludes.
    fn slot_after(&self, after: Timestamp) -> Option<Timestamp> {
        if self.calendars.is_empty() {
            return self.plain_slot_after(after);
        }
        if let Rule::Cron(cron, tz, dst) = &self.rule {
            return cron
                .next_after_excluding(after, tz, *dst, &self.calendars)
                .map(|z| z.timestamp());
        }
        let mut cursor = after;
        loop {
            let slot = self.plain_slot_after(cursor)?;
            match sundial_cron::excluded_until(&self.calendars, slot) {
                None => return Some(slot),
                Some(resume) if resume == Timestamp::MAX => return None,
                Some(resume) => cursor = resume.checked_sub(SignedDuration::from_nanos(1)).ok()?,
            }
        }
    }

    fn plain_slot_after(&self, after: Timestamp) -> Option<Timestamp> {
        match &self.rule {
            Rule::Cron(cron, tz, dst) => {
                cron.next_after_with(after, tz, *dst).map(|z| z.timestamp())
            }
            Rule::At(at) => Some(*at).filter(|at| *at > after),
            Rule::Every { every_ms, anchor } => {
                let since = after.as_millisecond() - anchor.as_millisecond();
                let k = if since < 0 { 0 } else { since / every_ms + 1 };
                let ms = anchor
                    .as_millisecond()
                    .checked_add(k.checked_mul(*every_ms)?)?;
                Timestamp::from_millisecond(ms).ok()
            }
        }
    }

    fn in_bounds(&self, slot: Timestamp) -> bool {
        self.start_at.is_none_or(|s| slot >= s) && self.end_at.is_none_or(|e| slot <= e)
    }

    /// The next `count` offset changes of a cron schedule's zone after `after` (UTC) that
    /// touch its wall times, each with the slots around it under the schedule's DST policy
    /// (docs/time.md, "DST policy", `dst_preview`; [`Cron::dst_transitions`]). The search starts at
    /// `start_at` when that is later; changes after `end_at`, slots outside
    /// `start_at`..`end_at` and slots on days its calendars exclude are left out. Empty for
    /// `at` and `every` schedules.
    pub fn dst_preview(&self, after: Timestamp, count: usize) -> Vec<Transition> {
        let Rule::Cron(cron, tz, dst) = &self.rule else {
            return Vec::new();
        };
        let after = self.start_at.map_or(after, |s| s.max(after));
        let mut preview = cron.dst_transitions(after, tz, *dst, count);
        preview.retain(|t| self.end_at.is_none_or(|end| t.at <= end));
        for t in &mut preview {
            t.slots.retain(|s| self.in_bounds(*s) && !self.excludes(*s));
        }
        preview
    }

    /// The next `count` slots strictly after `after`.
    pub fn upcoming(&self, after: Timestamp, count: usize) -> Vec<Timestamp> {
        let mut out = Vec::with_capacity(count);
        let mut cursor = after;
        while out.len() < count {
            match self.next_slot_after(cursor) {
                Some(s) => {
                    out.push(s);
                    cursor = s;
                }
                None => break,
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::duration::Dur;
    use proptest::prelude::*;

    fn ts(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    fn every(secs: u64, start: Option<&str>, end: Option<&str>) -> Schedule {
        Schedule::compile(&ScheduleSpec {
            kind: ScheduleKind::Every {
                every: Dur::from_secs(secs),
            },
            start_at: start.map(ts),
            end_at: end.map(ts),
            exclude_calendars: Vec::new(),
        })
        .unwrap()
    }

    #[test]
    fn a_range_without_slots_is_explained_by_the_bound_that_keeps_them_out() {
        let created = every(60, Some("2026-01-02T00:00:00Z"), None);
        let why = created.why_no_slot_in(ts("2026-01-01T00:00:00Z"), ts("2026-01-02T00:00:00Z"));
        assert!(
            why.contains("begin at its start_at, 2026-01-02T00:00:00Z") && why.contains("`every`"),
            "{why}"
        );
        let ended = every(60, None, Some("2025-12-31T00:00:00Z"));
        let why = ended.why_no_slot_in(ts("2026-01-01T00:00:00Z"), ts("2026-01-02T00:00:00Z"));
        assert!(
            why.contains("end at its end_at, 2025-12-31T00:00:00Z"),
            "{why}"
        );
        let once = Schedule::compile(&ScheduleSpec {
            kind: ScheduleKind::At {
                at: ts("2026-03-01T00:00:00Z"),
            },
            start_at: None,
            end_at: None,
            exclude_calendars: Vec::new(),
        })
        .unwrap();
        let why = once.why_no_slot_in(ts("2026-01-01T00:00:00Z"), ts("2026-01-02T00:00:00Z"));
        assert!(why.contains("runs once, at 2026-03-01T00:00:00Z"), "{why}");
    }

    #[test]
    fn every_slots_sit_on_the_anchor_grid() {
        let s = every(10, Some("2026-01-01T00:00:05Z"), None);
        assert_eq!(
            s.first_slot(ts("2026-01-01T00:00:00Z")),
            Some(ts("2026-01-01T00:00:05Z"))
        );
        assert_eq!(
            s.first_slot(ts("2026-01-01T00:00:05Z")),
            Some(ts("2026-01-01T00:00:05Z"))
        );
        assert_eq!(
            s.first_slot(ts("2026-01-01T00:00:06Z")),
            Some(ts("2026-01-01T00:00:15Z"))
        );
        assert_eq!(
            s.next_slot_after(ts("2026-01-01T00:00:15Z")),
            Some(ts("2026-01-01T00:00:25Z"))
        );
    }

    #[test]
    fn end_at_stops_the_schedule() {
        let s = every(
            10,
            Some("2026-01-01T00:00:00Z"),
            Some("2026-01-01T00:00:20Z"),
        );
        assert_eq!(s.upcoming(ts("2025-12-31T00:00:00Z"), 10).len(), 3);
    }

    #[test]
    fn a_past_one_off_slot_is_still_its_first_slot() {
        let s = Schedule::compile(&ScheduleSpec {
            kind: ScheduleKind::At {
                at: ts("2020-01-01T00:00:00Z"),
            },
            start_at: None,
            end_at: None,
            exclude_calendars: Vec::new(),
        })
        .unwrap();
        assert_eq!(
            s.first_slot(ts("2026-01-01T00:00:00Z")),
            Some(ts("2020-01-01T00:00:00Z"))
        );
        assert_eq!(s.next_slot_after(ts("2020-01-01T00:00:00Z")), None);
    }

    #[test]
    fn cron_in_a_zone_and_start_at_bound() {
        let s = Schedule::compile(&ScheduleSpec {
            kind: ScheduleKind::Cron {
                cron: "0 2 * * *".into(),
                timezone: "Europe/Berlin".into(),
                dst: None,
            },
            start_at: Some(ts("2026-06-10T00:00:01Z")),
            end_at: None,
            exclude_calendars: Vec::new(),
        })
        .unwrap();
        assert_eq!(
            s.first_slot(ts("2026-06-01T00:00:00Z")),
            Some(ts("2026-06-11T00:00:00Z"))
        );
    }

    #[test]
    fn bad_zone_and_short_every_name_their_field() {
        let e = Schedule::compile(&ScheduleSpec {
            kind: ScheduleKind::Cron {
                cron: "* * * * *".into(),
                timezone: "Mars/Base".into(),
                dst: None,
            },
            start_at: None,
            end_at: None,
            exclude_calendars: Vec::new(),
        })
        .unwrap_err();
        assert_eq!(e.field, "timezone");
        let e = Schedule::compile(&ScheduleSpec {
            kind: ScheduleKind::Every {
                every: Dur::from_millis(500),
            },
            start_at: None,
            end_at: None,
            exclude_calendars: Vec::new(),
        })
        .unwrap_err();
        assert_eq!(e.field, "every");
    }

    proptest! {
        #[test]
        fn every_slots_strictly_increase(secs in 1u64..100_000, start in 0i64..2_000_000_000_000, from in 0i64..2_000_000_000_000) {
            let s = every(secs, None, None);
            let s = Schedule { start_at: None, rule: Rule::Every { every_ms: (secs * 1000) as i64, anchor: Timestamp::from_millisecond(start).unwrap() }, ..s };
            let slots = s.upcoming(Timestamp::from_millisecond(from).unwrap(), 5);
            prop_assert_eq!(slots.len(), 5);
            for w in slots.windows(2) {
                prop_assert!(w[0] < w[1]);
                prop_assert_eq!((w[1].as_millisecond() - start) % (secs as i64 * 1000), 0);
            }
        }
    }
}
