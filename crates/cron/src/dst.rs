//! A schedule's DST policy and the preview of the transitions that touch its slots
//! (docs/cron.md, "DST policy").
//!
//! Invariants:
//! - The policy changes only *fixed-time* schedules (no seconds, minute or hour field starting
//!   with `*`); wildcard schedules follow the real clock whatever the policy: skipped wall times
//!   never fire, repeated ones fire twice.
//! - [`DstPolicy::default`] is the dialect's own rule (cronie's convention): `gap: shift`,
//!   `fold: first`. Every result under it equals the result of the policy-free search.
//! - Under `fold: first` or `last` a wall time fires at most once; under `both` a repeated wall
//!   time fires at each of its two instants; no policy ever fires a slot before its wall time
//!   occurs (a shifted slot fires at the instant the gap ends).

use jiff::Timestamp;
use jiff::civil::DateTime;
use jiff::tz::{Offset, TimeZone};

use crate::civil::Civil;
use crate::spec::Schedule;

/// What a fixed-time schedule does when one of its wall times falls in a DST gap (a skipped
/// hour).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum Gap {
    /// Fire at the first instant after the gap (cronie's rule; the default).
    #[default]
    Shift,
    /// Do not fire: the wall time never occurs that day.
    Skip,
}

/// What a fixed-time schedule does when one of its wall times occurs twice (a DST fold, a
/// repeated hour).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum Fold {
    /// Fire at the first of the two instants (cronie's rule; the default).
    #[default]
    First,
    /// Fire at the second of the two instants.
    Last,
    /// Fire at each of the two instants: two slots.
    Both,
}

/// A schedule's DST policy: one rule for gaps, one for folds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct DstPolicy {
    /// Wall times a transition skips.
    pub gap: Gap,
    /// Wall times a transition repeats.
    pub fold: Fold,
}

impl Gap {
    /// `shift` or `skip`, as docs/cron.md, "DST policy", spells them.
    pub fn as_str(self) -> &'static str {
        match self {
            Gap::Shift => "shift",
            Gap::Skip => "skip",
        }
    }
}

impl Fold {
    /// `first`, `last` or `both`, as docs/cron.md, "DST policy", spells them.
    pub fn as_str(self) -> &'static str {
        match self {
            Fold::First => "first",
            Fold::Last => "last",
            Fold::Both => "both",
        }
    }
}

impl std::str::FromStr for Gap {
    type Err = String;

    /// Parses `shift` or `skip`; the error says what is accepted.
    fn from_str(s: &str) -> Result<Gap, String> {
        match s {
            "shift" => Ok(Gap::Shift),
            "skip" => Ok(Gap::Skip),
            _ => Err(format!("'{s}' is not one of shift, skip")),
        }
    }
}

impl std::str::FromStr for Fold {
    type Err = String;

    /// Parses `first`, `last` or `both`; the error says what is accepted.
    fn from_str(s: &str) -> Result<Fold, String> {
        match s {
            "first" => Ok(Fold::First),
            "last" => Ok(Fold::Last),
            "both" => Ok(Fold::Both),
            _ => Err(format!("'{s}' is not one of first, last, both")),
        }
    }
}

/// Whether a transition skips wall times or repeats them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TransitionKind {
    /// The clock jumps forward: the wall times of [`Transition::local_from`] up to
    /// [`Transition::local_to`] do not occur.
    Gap,
    /// The clock goes back: the wall times of [`Transition::local_from`] up to
    /// [`Transition::local_to`] occur twice.
    Fold,
}

impl TransitionKind {
    /// `gap` or `fold`.
    pub fn as_str(self) -> &'static str {
        match self {
            TransitionKind::Gap => "gap",
            TransitionKind::Fold => "fold",
        }
    }
}

/// One offset change of a zone that touches a schedule: some wall time of the schedule falls
/// in the wall-clock window the change skips or repeats.
#[derive(Debug, Clone, PartialEq)]
pub struct Transition {
    /// The instant the offset changes (UTC).
    pub at: Timestamp,
    /// Gap or fold.
    pub kind: TransitionKind,
    /// The zone's UTC offset just before `at`.
    pub offset_before: Offset,
    /// The zone's UTC offset from `at` on.
    pub offset_after: Offset,
    /// First wall time of the skipped or repeated window (inclusive).
    pub local_from: DateTime,
    /// End of the window (exclusive).
    pub local_to: DateTime,
    /// The schedule's fire instants around the change under the policy asked about: the last
    /// one before the window, every one inside it (at most [`PREVIEW_SLOTS_WITHIN`]), and the
    /// first one after it. UTC.
    pub slots: Vec<Timestamp>,
}

/// Most fire instants a [`Transition`] lists inside its window (a wildcard schedule may fire
/// every second of a repeated hour).
pub const PREVIEW_SLOTS_WITHIN: usize = 8;

/// How far [`Cron::dst_transitions`](crate::Cron::dst_transitions) looks: this many of the zone's offset changes (about 25
/// years of twice-yearly DST), so a schedule no change touches costs a bounded search.
pub const PREVIEW_HORIZON_TRANSITIONS: usize = 50;

/// The next `count` offset changes of `tz` after `after` that touch `schedule`'s wall times,
/// each with the fire instants around it under `policy`.
pub(crate) fn transitions_touching(
    schedule: &Schedule,
    after: Timestamp,
    tz: &TimeZone,
    policy: DstPolicy,
    count: usize,
) -> Vec<Transition> {
    let mut out = Vec::new();
    for change in tz.following(after).take(PREVIEW_HORIZON_TRANSITIONS) {
        if out.len() >= count {
            break;
        }
        let at = change.timestamp();
        let offset_after = change.offset();
        let offset_before = tz.to_offset(seconds_from(at, -1));
        if offset_before == offset_after {
            continue; // an abbreviation or DST-flag change only: no wall time moves
        }
        let early = offset_before.to_datetime(at);
        let late = offset_after.to_datetime(at);
        let (kind, local_from, local_to) = if late > early {
            (TransitionKind::Gap, early, late)
        } else {
            (TransitionKind::Fold, late, early)
        };
        if schedule
            .next_civil(Civil::floor(local_from), Civil::ceil(local_to))
            .is_none()
        {
            continue;
        }
        // The window in instants: the wall-clock window's length on either side of `at`.
        let span = i64::from((offset_after.seconds() - offset_before.seconds()).abs());
        let (window_start, window_end) = (seconds_from(at, -span), seconds_from(at, span));
        let mut slots = Vec::new();
        slots.extend(last_fire_before(schedule, window_start, tz, policy));
        let (mut cursor, mut within) = (seconds_from(window_start, -1), 0);
        while let Some(next) = schedule.next_instant(cursor, tz, policy) {
            if next >= window_end {
                slots.push(next);
                break;
            }
            if within == PREVIEW_SLOTS_WITHIN {
                slots.extend(schedule.next_instant(seconds_from(window_end, -1), tz, policy));
                break;
            }
            slots.push(next);
            (cursor, within) = (next, within + 1);
        }
        out.push(Transition {
            at,
            kind,
            offset_before,
            offset_after,
            local_from,
            local_to,
            slots,
        });
    }
    out
}

/// How far back [`last_fire_before`] looks: one leap year.
const LOOKBACK_SECONDS: i64 = 366 * 86_400;

/// The last fire instant strictly before `end`, within [`LOOKBACK_SECONDS`] of it.
///
/// The search only goes forward, so this bisects the start: "the next fire after `t` is before
/// `end`" holds for every `t` below the last fire and for none at or past it. About 25
/// forward searches.
fn last_fire_before(
    schedule: &Schedule,
    end: Timestamp,
    tz: &TimeZone,
    policy: DstPolicy,
) -> Option<Timestamp> {
    let fires_before_end = |t: i64| {
        schedule
            .next_instant(seconds_from(end, t), tz, policy)
            .is_some_and(|n| n < end)
    };
    // Offsets from `end`, in seconds: `lo` satisfies the test, `hi` does not.
    let (mut lo, mut hi) = (-LOOKBACK_SECONDS, -1);
    if !fires_before_end(lo) {
        return None;
    }
    while hi - lo > 1 {
        let mid = lo + (hi - lo) / 2;
        if fires_before_end(mid) {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    schedule.next_instant(seconds_from(end, lo), tz, policy)
}

/// `t` moved by `seconds` (whole seconds; sub-second digits dropped), saturating at jiff's
/// range.
fn seconds_from(t: Timestamp, seconds: i64) -> Timestamp {
    let s = t.as_second().saturating_add(seconds);
    Timestamp::new(s, 0).unwrap_or(if seconds < 0 {
        Timestamp::MIN
    } else {
        Timestamp::MAX
    })
}
