//! Backfill (docs/time.md, "Backfill"): which past slots of a schedule a backfill
//! walks, and which of them one step creates.
//!
//! A backfill walks the slots of its schedule in `[from, to)` oldest first, through a cursor:
//! every slot before the cursor has been dealt with (created, or found to have an execution or
//! run already). A step looks at the candidates from the cursor on, chooses the first free ones
//! up to what the rate allows, and moves the cursor just past what it dealt with.
//!
//! Instants are UTC [`Timestamp`]s at millisecond resolution; a cursor is a slot plus 1 ms.

//! Invariants of [`choose`]:
//! - The cursor never moves back, and never past a free candidate it did not choose.
//! - A chosen slot is free (not in `taken`) and at or after the old cursor; they are in slot
//!   order and at most `want`.
//! - `existing` counts exactly the taken candidates the cursor moved past.
//! - `done` only when no slot of the range is left at or after the new cursor.

use std::collections::HashSet;

use jiff::{SignedDuration, Timestamp};

use crate::schedule::Schedule;

/// The most slots one backfill may span (docs/time.md, "Backfill").
pub const MAX_SLOTS: usize = 100_000;

/// Slots created per second when a request names no rate (docs/time.md, "Backfill").
pub const DEFAULT_PER_SECOND: u32 = 10;

/// The highest `max_per_second` accepted: twice the rate docs/time.md ("Backfill") measures a backfill at.
pub const MAX_PER_SECOND: u32 = 10_000;

/// The slots of `schedule` in `[from, to)`, oldest first, at most `limit` (calendars and
/// `start_at`/`end_at` applied as the schedule carries them).
pub fn slots(schedule: &Schedule, from: Timestamp, to: Timestamp, limit: usize) -> Vec<Timestamp> {
    let mut out = Vec::new();
    let Some(mut after) = from.checked_sub(SignedDuration::from_millis(1)).ok() else {
        return out;
    };
    while out.len() < limit {
        match schedule.next_slot_after(after) {
            Some(slot) if slot < to => {
                out.push(slot);
                after = slot;
            }
            _ => break,
        }
    }
    out
}

/// What one step of a backfill does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Step {
    /// The slots to create, oldest first.
    pub chosen: Vec<Timestamp>,
    /// The new cursor: every slot before it is dealt with.
    pub cursor: Timestamp,
    /// Candidates before the new cursor that already had an execution or run.
    pub existing: u64,
    /// No slot of the range is left at or after the new cursor.
    pub done: bool,
}

/// Chooses a step over `candidates` (the slots from the cursor on, oldest first, as [`slots`]
/// gives them with its `limit`): the first `want` free ones, skipping those in `taken`.
/// `exhausted` says that `candidates` holds every slot left before `to` (fewer than the limit
/// came back). See the module invariants.
pub fn choose(
    candidates: &[Timestamp],
    taken: &HashSet<Timestamp>,
    want: usize,
    cursor: Timestamp,
    to: Timestamp,
    exhausted: bool,
) -> Step {
    let mut step = Step {
        chosen: Vec::new(),
        cursor,
        existing: 0,
        done: false,
    };
    let mut passed = 0;
    for slot in candidates {
        if step.chosen.len() >= want {
            break;
        }
        passed += 1;
        if taken.contains(slot) {
            step.existing += 1;
        } else {
            step.chosen.push(*slot);
        }
    }
    let all_passed = passed == candidates.len();
    step.cursor = match candidates[..passed].last() {
        _ if all_passed && exhausted => to.max(cursor),
        Some(last) => (*last + SignedDuration::from_millis(1)).max(cursor),
        None => cursor,
    };
    step.done = all_passed && exhausted;
    step
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::job::{ScheduleKind, ScheduleSpec};
    use proptest::prelude::*;

    fn at(ms: i64) -> Timestamp {
        Timestamp::from_millisecond(ms).expect("in range")
    }

    fn every_second() -> Schedule {
        Schedule::compile(&ScheduleSpec {
            kind: ScheduleKind::Every {
                every: crate::Dur::from_secs(1),
            },
            start_at: Some(at(0)),
            end_at: None,
            exclude_calendars: Vec::new(),
        })
        .expect("valid")
    }

    #[test]
    fn slots_are_those_of_the_half_open_range() {
        let s = every_second();
        assert_eq!(
            slots(&s, at(1000), at(4000), 10),
            [at(1000), at(2000), at(3000)]
        );
        assert_eq!(
            slots(&s, at(1001), at(4001), 10),
            [at(2000), at(3000), at(4000)]
        );
        assert_eq!(slots(&s, at(1000), at(4000), 2), [at(1000), at(2000)]);
        assert!(slots(&s, at(1000), at(1000), 10).is_empty());
    }

    #[test]
    fn a_step_skips_what_exists_and_stops_at_its_want() {
        let c = [at(1000), at(2000), at(3000), at(4000)];
        let taken: HashSet<Timestamp> = [at(1000), at(3000)].into();
        let step = choose(&c, &taken, 1, at(1000), at(9000), true);
        assert_eq!(step.chosen, [at(2000)]);
        assert_eq!(step.cursor, at(2001));
        assert_eq!(step.existing, 1);
        assert!(!step.done);
        let step = choose(&c[2..], &taken, 5, at(2001), at(9000), true);
        assert_eq!(step.chosen, [at(4000)]);
        assert_eq!((step.cursor, step.existing, step.done), (at(9000), 1, true));
        let step = choose(&c, &taken, 5, at(1000), at(9000), false);
        assert_eq!(
            step.cursor,
            at(4001),
            "more slots lie beyond the candidates"
        );
        assert!(!step.done);
        let none = choose(&[], &taken, 5, at(1000), at(9000), true);
        assert_eq!((none.cursor, none.done), (at(9000), true));
    }

    proptest! {
        /// Walking a range in steps of random sizes over a random set of taken slots creates
        /// every free slot once, in order, counts every taken one once, and ends.
        #[test]
        fn a_walk_creates_every_free_slot_once(
            n in 0usize..60,
            taken_bits in proptest::collection::vec(any::<bool>(), 60),
            wants in proptest::collection::vec(1usize..7, 1..200),
            limit in 1usize..9,
        ) {
            let s = every_second();
            let (from, to) = (at(0), at(i64::try_from(n).expect("small") * 1000));
            let all = slots(&s, from, to, usize::MAX);
            let taken: HashSet<Timestamp> = all.iter().zip(&taken_bits)
                .filter(|(_, t)| **t).map(|(s, _)| *s).collect();
            let (mut cursor, mut created, mut existing, mut done) = (from, Vec::new(), 0, false);
            for want in wants.iter().cycle().take(400) {
                if done { break; }
                let candidates = slots(&s, cursor, to, limit.max(*want));
                let exhausted = candidates.len() < limit.max(*want);
                let step = choose(&candidates, &taken, *want, cursor, to, exhausted);
                prop_assert!(step.cursor >= cursor);
                prop_assert!(step.chosen.len() <= *want);
                prop_assert!(step.chosen.iter().all(|c| *c >= cursor && *c < step.cursor));
                cursor = step.cursor;
                created.extend(step.chosen);
                existing += step.existing;
                done = step.done;
            }
            prop_assert!(done, "the walk ends");
            let free: Vec<Timestamp> = all.iter().copied().filter(|s| !taken.contains(s)).collect();
            prop_assert_eq!(created, free);
            prop_assert_eq!(existing, taken.len() as u64);
        }
    }
}
