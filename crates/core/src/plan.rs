//! Trigger planning: which executions a due job gets, decided in one place (ARCHITECTURE.md,
//! "Invariants and where they are kept": policies at trigger time), so every decision is recorded in history.
//!
//! Given a job's next slot, the current instant and the lookahead horizon, [`plan`] yields the
//! executions to insert — on-time slots as `scheduled`, a misfire episode per the job's
//! [`MisfirePolicy`] — and the slot to resume from next time.
//!
//! Invariants:
//! - Planned slots strictly increase and none is earlier than the job's next slot, so feeding
//!   [`Plan::next_slot`] back in never plans a slot twice.
//! - Every slot between the job's next slot and [`Plan::next_slot`] is planned exactly once,
//!   either to run or as a `missed` record — except beyond [`MAX_CATCHUP`] `missed` records
//!   in one episode, where the oldest are dropped (counted in [`Plan::dropped`]).
//! - No planned execution has a fire time later than the horizon.

use jiff::Timestamp;

use crate::duration::Dur;
use crate::execution::{ExecutionState, Trigger};
use crate::hash::fire_time;
use crate::job::{MAX_CATCHUP, MisfirePolicy};
use crate::schedule::Schedule;

/// One execution to create for a slot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlannedExecution {
    /// The slot.
    pub scheduled_at: Timestamp,
    /// Slot plus jitter: when it becomes due.
    pub fire_at: Timestamp,
    /// `schedule` or `misfire`.
    pub trigger: Trigger,
    /// `scheduled` to run, or `missed` for a slot the misfire policy drops.
    pub state: ExecutionState,
}

/// What to insert for one job and where its schedule continues.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    /// Executions to insert, slots strictly increasing.
    pub executions: Vec<PlannedExecution>,
    /// The slot to resume from; `None` when the schedule has ended (the job is `completed`).
    pub next_slot: Option<Timestamp>,
    /// Misfired slots neither run nor recorded because the episode exceeded the record bound.
    pub dropped: u64,
}

/// The inputs of [`plan`] that come from the job.
#[derive(Debug, Clone, Copy)]
pub struct JobTiming<'a> {
    /// The job's stable identity (jitter is a hash of it and the slot).
    pub uid: &'a str,
    /// Jitter bound.
    pub jitter: Dur,
    /// Misfire policy.
    pub misfire_policy: MisfirePolicy,
    /// A slot whose fire time is older than this when reached is a misfire.
    pub misfire_threshold: Dur,
}

/// Most slots one call plans to run on time (a bound on one trigger transaction's size).
pub const MAX_SLOTS_PER_PLAN: usize = 1000;

/// Longest misfire episode walked slot by slot; a longer one is cut short there (its slots past
/// this count are dropped and counted) so that planning stays bounded.
pub const MAX_EPISODE_WALK: usize = 1_000_000;

/// Plans the executions of one job whose next slot is `next_slot`, at `now`, for fire times up
/// to `horizon` (`now` + lookahead). See the module invariants.
pub fn plan(
    schedule: &Schedule,
    job: JobTiming<'_>,
    next_slot: Timestamp,
    now: Timestamp,
    horizon: Timestamp,
) -> Plan {
    let fire_at = |slot: Timestamp| fire_time(job.uid, slot, job.jitter);
    let threshold = job.misfire_threshold.as_signed();
    let mut executions = Vec::new();
    let mut dropped = 0u64;
    let mut cursor = Some(next_slot);

    // A misfire episode: the run of passed slots, when its oldest is later than the threshold.
    // One-off jobs always run when late.
    if !schedule.is_one_off() && fire_at(next_slot) + threshold < now {
        let mut episode = Vec::new();
        while let Some(slot) = cursor {
            if fire_at(slot) > now {
                break;
            }
            if episode.len() == MAX_EPISODE_WALK {
                dropped += 1;
            } else {
                episode.push(slot);
            }
            cursor = schedule.next_slot_after(slot);
            if dropped > 0 && dropped as usize >= MAX_EPISODE_WALK {
                break;
            }
        }
        dropped += plan_episode(&episode, job, now, &fire_at, &mut executions);
    }

    let mut on_time = 0;
    while let Some(slot) = cursor {
        let at = fire_at(slot);
        if at > horizon || on_time == MAX_SLOTS_PER_PLAN {
            break;
        }
        executions.push(PlannedExecution {
            scheduled_at: slot,
            fire_at: at,
            trigger: Trigger::Schedule,
            state: ExecutionState::Scheduled,
        });
        on_time += 1;
        cursor = schedule.next_slot_after(slot);
    }
    Plan {
        executions,
        next_slot: cursor,
        dropped,
    }
}

/// Applies the misfire policy to an episode (slots oldest first); returns how many slots were
/// dropped for exceeding [`MAX_CATCHUP`] records.
fn plan_episode(
    episode: &[Timestamp],
    job: JobTiming<'_>,
    now: Timestamp,
    fire_at: &dyn Fn(Timestamp) -> Timestamp,
    out: &mut Vec<PlannedExecution>,
) -> u64 {
    let record = |slot: Timestamp, trigger: Trigger, state: ExecutionState| PlannedExecution {
        scheduled_at: slot,
        fire_at: fire_at(slot),
        trigger,
        state,
    };
    let Some((latest, older)) = episode.split_last() else {
        return 0;
    };
    let threshold = job.misfire_threshold.as_signed();
    let (missed, run): (&[Timestamp], Vec<(Timestamp, Trigger)>) = match job.misfire_policy {
        MisfirePolicy::RunOnce => (older, vec![(*latest, Trigger::Misfire)]),
        MisfirePolicy::RunAll => {
            let keep = episode.len().min(MAX_CATCHUP);
            let (missed, run) = episode.split_at(episode.len() - keep);
            (missed, run.iter().map(|s| (*s, Trigger::Misfire)).collect())
        }
        MisfirePolicy::Skip => {
            let split = episode.partition_point(|s| fire_at(*s) + threshold < now);
            let (missed, run) = episode.split_at(split);
            (
                missed,
                run.iter().map(|s| (*s, Trigger::Schedule)).collect(),
            )
        }
    };
    let kept_missed = missed.len().min(MAX_CATCHUP);
    let dropped = missed.len() - kept_missed;
    out.extend(
        missed[dropped..]
            .iter()
            .map(|s| record(*s, Trigger::Misfire, ExecutionState::Missed)),
    );
    out.extend(
        run.into_iter()
            .map(|(s, t)| record(s, t, ExecutionState::Scheduled)),
    );
    dropped as u64
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::job::{ScheduleKind, ScheduleSpec};
    use jiff::SignedDuration;
    use proptest::prelude::*;

    fn ts(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    fn every_minute() -> Schedule {
        Schedule::compile(&ScheduleSpec {
            kind: ScheduleKind::Every {
                every: Dur::from_secs(60),
            },
            start_at: Some(ts("2026-01-01T00:00:00Z")),
            end_at: None,
            exclude_calendars: Vec::new(),
        })
        .unwrap()
    }

    fn timing(policy: MisfirePolicy) -> JobTiming<'static> {
        JobTiming {
            uid: "j",
            jitter: Dur::ZERO,
            misfire_policy: policy,
            misfire_threshold: Dur::from_secs(60),
        }
    }

    fn count(p: &Plan, state: ExecutionState) -> usize {
        p.executions.iter().filter(|e| e.state == state).count()
    }

    /// A scheduler stopped from 10:00:30 to 13:00:30 over an every-minute job.
    fn three_hour_outage(policy: MisfirePolicy) -> Plan {
        let now = ts("2026-01-01T13:00:30Z");
        plan(
            &every_minute(),
            timing(policy),
            ts("2026-01-01T10:01:00Z"),
            now,
            now + SignedDuration::from_secs(5),
        )
    }

    #[test]
    fn run_once_runs_the_latest_slot_and_records_the_rest_missed() {
        let p = three_hour_outage(MisfirePolicy::RunOnce);
        assert_eq!(count(&p, ExecutionState::Missed), 179);
        let run: Vec<_> = p
            .executions
            .iter()
            .filter(|e| e.state == ExecutionState::Scheduled)
            .collect();
        assert_eq!(run.len(), 1);
        assert_eq!(run[0].scheduled_at, ts("2026-01-01T13:00:00Z"));
        assert_eq!(run[0].trigger, Trigger::Misfire);
        assert_eq!(p.next_slot, Some(ts("2026-01-01T13:01:00Z")));
    }

    #[test]
    fn run_all_runs_every_slot_oldest_first() {
        let p = three_hour_outage(MisfirePolicy::RunAll);
        assert_eq!(count(&p, ExecutionState::Scheduled), 180);
        assert_eq!(p.executions[0].scheduled_at, ts("2026-01-01T10:01:00Z"));
    }

    #[test]
    fn skip_records_old_slots_missed_and_runs_young_ones_late() {
        let p = three_hour_outage(MisfirePolicy::Skip);
        assert_eq!(count(&p, ExecutionState::Missed), 179);
        let last = p.executions.last().unwrap();
        assert_eq!(
            (last.scheduled_at, last.trigger),
            (ts("2026-01-01T13:00:00Z"), Trigger::Schedule)
        );
    }

    #[test]
    fn run_all_caps_catch_up_at_max_catchup() {
        let now = ts("2026-01-03T00:00:30Z");
        let p = plan(
            &every_minute(),
            timing(MisfirePolicy::RunAll),
            ts("2026-01-01T00:00:00Z"),
            now,
            now,
        );
        assert_eq!(count(&p, ExecutionState::Scheduled), MAX_CATCHUP);
        assert_eq!(count(&p, ExecutionState::Missed), MAX_CATCHUP);
        assert_eq!(p.dropped, 2881 - 2 * MAX_CATCHUP as u64);
    }

    proptest! {
        #[test]
        fn every_slot_is_planned_once_and_slots_increase(
            late_min in 0i64..500, look in 0i64..600, policy in 0u8..3,
        ) {
            let policy = [MisfirePolicy::RunOnce, MisfirePolicy::RunAll, MisfirePolicy::Skip][policy as usize];
            let first = ts("2026-01-01T10:00:00Z");
            let now = first + SignedDuration::from_secs(late_min * 60 + 7);
            let horizon = now + SignedDuration::from_secs(look);
            let p = plan(&every_minute(), timing(policy), first, now, horizon);
            for w in p.executions.windows(2) {
                prop_assert!(w[0].scheduled_at < w[1].scheduled_at);
            }
            let expected = every_minute().upcoming(first - SignedDuration::from_secs(1), 10_000)
                .into_iter().take_while(|s| Some(*s) < p.next_slot).count();
            prop_assert_eq!(p.executions.len(), expected);
            prop_assert!(p.executions.iter().all(|e| e.fire_at <= horizon));
        }
    }
}
