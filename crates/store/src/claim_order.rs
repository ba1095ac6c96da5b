//! The order a claim reads due executions in (docs/guarantees.md, "Claim order under a
//! backlog"), decided once for both stores.
//!
//! A claim normally reads the oldest due first: that serves a backlog in the order it formed
//! and keeps the oldest lateness as small as the capacity allows while the load exceeds it.
//! Once the backlog drains (the load fell below the capacity), oldest first would keep every
//! new slot waiting behind the whole backlog until it is gone; a claim *on time first* reads the
//! executions that came due within the last [`ON_TIME_WINDOW_MS`] before the older ones, so new
//! slots are on time again at once while the spare capacity drains the backlog. A worker
//! chooses the order from the backlog's trend ([`BacklogTrend`]): on time first while the
//! backlog shrinks, oldest first while it grows.
//!
//! Invariants:
//! - [`ClaimReads`] never asks for more than the claim's limit in all, and reads the ranges
//!   `(after, until]` of due times in the order the module doc gives; the ranges of one claim
//!   cover every due execution and every one within the claim-ahead window.
//! - On time first, the backlog still gets at least [`BACKLOG_SHARE`]-th of each claim when it
//!   has that many, so it cannot starve while on-time slots fill the claims.
//! - Executions within the claim-ahead window are read after every due one oldest first, and
//!   after every on-time one (before the rest of the backlog) on time first (docs/guarantees.md,
//!   "Claim ahead").

use std::collections::VecDeque;

/// How long after its due time an execution counts as on time for the claim order, in
/// milliseconds: executions due longer ago are the backlog.
pub const ON_TIME_WINDOW_MS: i64 = 1_000;

/// On time first, the backlog's share of each claim: at least `limit / BACKLOG_SHARE` (and at
/// least one) of a claim's executions are read from the backlog when it has them.
pub const BACKLOG_SHARE: u32 = 8;

/// How far apart the two backlog sizes [`BacklogTrend`] compares are, in milliseconds.
pub const TREND_SPAN_MS: i64 = 2_000;

/// How many executions the backlog must shrink by over [`TREND_SPAN_MS`] for claims to read on
/// time first: about what one round of claims takes at once, so that a backlog that holds
/// steady (its count moving with each round) is not read as draining and starved.
pub const SHRINK_MARGIN: u64 = 1_000;

/// One read of a claim: the due executions with `after < due_at <= until` (UTC milliseconds),
/// oldest due first, at most `limit`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Read {
    /// Exclusive lower bound of the due times read (`i64::MIN`: none).
    pub after: i64,
    /// Inclusive upper bound of the due times read.
    pub until: i64,
    /// Most rows to read.
    pub limit: u32,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    All,
    Backlog,
    OnTime,
    BacklogRest,
    Ahead,
}

/// The reads of one claim, in order: each [`ClaimReads::next`] is told how many rows the
/// previous read returned. Oldest first it is one read of everything due up to the claim-ahead
/// window. On time first it is: the backlog (due at or before `now - ON_TIME_WINDOW_MS`) up to
/// its share; the on-time executions (due within the window, up to `now`) up to what is left;
/// the claim-ahead window, so that new slots are held for their fire time rather than claimed
/// once late; then, when the first backlog read was full, the backlog again for what is still
/// left (the rows of the first backlog read come again and the caller drops them by id).
#[derive(Debug, Clone)]
pub struct ClaimReads {
    now: i64,
    ahead_ms: u32,
    limit: u32,
    got: u32,
    first_backlog: u32,
    stages: VecDeque<Kind>,
    last: Option<(Kind, Read)>,
}

impl ClaimReads {
    /// The reads of a claim of up to `limit` executions at `now` (the store's clock, UTC ms)
    /// with a claim-ahead window of `ahead_ms`, in the order `on_time_first` says.
    pub fn new(now: i64, ahead_ms: u32, limit: u32, on_time_first: bool) -> Self {
        let stages = if on_time_first {
            [Kind::Backlog, Kind::OnTime, Kind::Ahead, Kind::BacklogRest].into()
        } else {
            [Kind::All].into()
        };
        Self {
            now,
            ahead_ms,
            limit,
            got: 0,
            first_backlog: 0,
            stages,
            last: None,
        }
    }

    /// The backlog's share of this claim, on time first.
    fn share(&self) -> u32 {
        (self.limit / BACKLOG_SHARE).max(1)
    }

    /// The next read, given the rows the previous one returned (ignored for the first);
    /// `None` once the claim has what it asked for or nothing is left to read.
    pub fn next(&mut self, returned: usize) -> Option<Read> {
        if let Some((kind, read)) = self.last.take() {
            let rows = u32::try_from(returned).unwrap_or(u32::MAX).min(read.limit);
            let new = match kind {
                Kind::Backlog => {
                    self.first_backlog = rows;
                    rows
                }
                Kind::BacklogRest => rows.saturating_sub(self.first_backlog),
                _ => rows,
            };
            self.got = self.got.saturating_add(new);
        }
        let cut = self.now.saturating_sub(ON_TIME_WINDOW_MS);
        let ahead = self.now.saturating_add(i64::from(self.ahead_ms));
        loop {
            let left = self.limit.saturating_sub(self.got);
            if left == 0 {
                return None;
            }
            let kind = self.stages.pop_front()?;
            let (after, until, limit) = match kind {
                Kind::All => (i64::MIN, ahead, left),
                Kind::Backlog => (i64::MIN, cut, self.share().min(left)),
                Kind::OnTime => (cut, self.now, left),
                Kind::BacklogRest if self.first_backlog < self.share() => continue,
                Kind::BacklogRest => (i64::MIN, cut, left.saturating_add(self.first_backlog)),
                Kind::Ahead if self.ahead_ms == 0 => continue,
                Kind::Ahead => (self.now, ahead, left),
            };
            let read = Read {
                after,
                until,
                limit,
            };
            self.last = Some((kind, read));
            return Some(read);
        }
    }
}

/// The backlog's size sampled over time, and the claim order it calls for: on time first once
/// the backlog is smaller by at least [`SHRINK_MARGIN`] than it was [`TREND_SPAN_MS`] earlier, oldest first once it is larger or empty; otherwise the order stays. Instants are
/// UTC milliseconds.
#[derive(Debug, Clone, Default)]
pub struct BacklogTrend {
    samples: VecDeque<(i64, u64)>,
    on_time_first: bool,
}

impl BacklogTrend {
    /// Records that `backlog` executions were due at or before `at - ON_TIME_WINDOW_MS` at
    /// `at`, and returns whether claims should read on time first from now on.
    pub fn observe(&mut self, at: i64, backlog: u64) -> bool {
        let reference = self
            .samples
            .iter()
            .rev()
            .find(|(t, _)| *t <= at - TREND_SPAN_MS)
            .map(|(_, n)| *n);
        if backlog == 0 {
            self.on_time_first = false;
        } else if let Some(before) = reference {
            if backlog.saturating_add(SHRINK_MARGIN) <= before {
                self.on_time_first = true;
            } else if backlog > before {
                self.on_time_first = false;
            }
        }
        self.samples.push_back((at, backlog));
        // Keep one sample at least the span old, and none older.
        while self.samples.len() > 1 && self.samples[1].0 <= at - TREND_SPAN_MS {
            self.samples.pop_front();
        }
        self.on_time_first
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use proptest::prelude::*;

    use super::*;

    /// Runs a claim's reads over executions due at `due` (sorted), the store answering each
    /// read oldest due first; returns the indexes read, without repeats.
    fn claim(
        due: &[i64],
        now: i64,
        ahead_ms: u32,
        limit: u32,
        on_time_first: bool,
    ) -> BTreeSet<usize> {
        let mut reads = ClaimReads::new(now, ahead_ms, limit, on_time_first);
        let mut got = BTreeSet::new();
        let mut returned = 0;
        while let Some(r) = reads.next(returned) {
            let rows: Vec<usize> = (0..due.len())
                .filter(|&i| due[i] > r.after && due[i] <= r.until)
                .take(r.limit as usize)
                .collect();
            returned = rows.len();
            got.extend(rows);
        }
        got
    }

    #[test]
    fn oldest_first_reads_the_oldest_due_then_ahead() {
        let due = [100, 200, 5_000, 9_900, 10_000, 10_400];
        assert_eq!(
            claim(&due, 10_000, 500, 4, false),
            BTreeSet::from([0, 1, 2, 3])
        );
        assert_eq!(
            claim(&due, 10_000, 500, 9, false),
            BTreeSet::from([0, 1, 2, 3, 4, 5])
        );
    }

    #[test]
    fn on_time_first_gives_the_backlog_its_share_and_the_rest_to_on_time_slots() {
        // 20 backlog executions due long ago, 20 due within the last second.
        let mut due: Vec<i64> = (0..20).collect();
        due.extend((0..20).map(|i| 9_500 + i));
        let got = claim(&due, 10_000, 0, 16, true);
        let backlog = got.iter().filter(|&&i| i < 20).count();
        assert_eq!(backlog, 2, "16 / BACKLOG_SHARE from the backlog");
        assert_eq!(got.len(), 16);
        // With few on-time executions, the backlog fills the claim.
        let due: Vec<i64> = (0..20).chain([9_990]).collect();
        let got = claim(&due, 10_000, 0, 16, true);
        assert_eq!(got.len(), 16);
        assert!(got.contains(&20));
        assert_eq!(
            got.iter().filter(|&&i| i < 20).copied().collect::<Vec<_>>(),
            (0..15).collect::<Vec<_>>()
        );
    }

    #[test]
    fn the_backlog_trend_chooses_on_time_first_only_while_it_shrinks() {
        let mut t = BacklogTrend::default();
        assert!(!t.observe(0, 10_000));
        assert!(!t.observe(1_000, 20_000));
        assert!(!t.observe(2_000, 30_000), "growing");
        assert!(t.observe(4_000, 25_000), "smaller than two seconds before");
        assert!(t.observe(5_000, 25_000), "unchanged keeps the order");
        assert!(
            t.observe(6_500, 24_500),
            "shrinking by less than the margin keeps it"
        );
        assert!(!t.observe(8_000, 26_000), "growing again");
        assert!(!t.observe(9_000, 25_600), "still growing");
        assert!(
            !t.observe(10_500, 25_100),
            "shrinking by less than the margin keeps it"
        );
        assert!(!t.observe(12_500, 0), "empty");
    }

    proptest! {
        /// Whatever the order: never more than the limit; a claim handed less than its limit
        /// read everything due and within the window; executions ahead are read only after
        /// every due one; oldest first is exactly the oldest `limit`.
        #[test]
        fn the_reads_are_bounded_complete_and_ahead_last(
            mut due in proptest::collection::vec(0i64..20_000, 0..60),
            ahead_ms in prop_oneof![Just(0u32), 1u32..5_000],
            limit in 1u32..40,
            on_time_first in any::<bool>(),
        ) {
            due.sort_unstable();
            let now = 12_000;
            let got = claim(&due, now, ahead_ms, limit, on_time_first);
            let window: Vec<usize> = (0..due.len())
                .filter(|&i| due[i] <= now + i64::from(ahead_ms))
                .collect();
            prop_assert!(got.len() <= limit as usize);
            prop_assert_eq!(got.len(), window.len().min(limit as usize));
            let cut = now - ON_TIME_WINDOW_MS;
            let first = |lo: i64| window.iter().filter(|&&i| due[i] > lo && due[i] <= now).count();
            let got_of = |lo: i64| got.iter().filter(|&&i| due[i] > lo && due[i] <= now).count();
            if got.iter().any(|&i| due[i] > now) {
                // Ahead only once every due one (oldest first) or every on-time one was read.
                let lo = if on_time_first { cut } else { i64::MIN };
                prop_assert_eq!(got_of(lo), first(lo));
            }
            if !on_time_first {
                let oldest: BTreeSet<usize> = window.iter().take(limit as usize).copied().collect();
                prop_assert_eq!(&got, &oldest);
            } else {
                // The backlog gets its share when it has that many.
                let backlog = window.iter().filter(|&&i| due[i] <= cut).count();
                let share = ((limit / BACKLOG_SHARE).max(1) as usize).min(backlog);
                prop_assert!(got.iter().filter(|&&i| due[i] <= cut).count() >= share);
            }
        }

        /// The trend never chooses on time first with an empty backlog, nor right after the
        /// backlog grew over the span.
        #[test]
        fn the_trend_follows_the_backlog(samples in proptest::collection::vec((1i64..3_000, 0u64..5_000), 1..40)) {
            let mut t = BacklogTrend::default();
            let mut at = 0;
            let mut seen: Vec<(i64, u64)> = Vec::new();
            for (step, backlog) in samples {
                at += step;
                let chosen = t.observe(at, backlog);
                let before = seen.iter().rev().find(|(s, _)| *s <= at - TREND_SPAN_MS).map(|(_, n)| *n);
                if backlog == 0 || before.is_some_and(|b| backlog > b) {
                    prop_assert!(!chosen);
                }
                if backlog > 0 && before.is_some_and(|b| backlog + SHRINK_MARGIN <= b) {
                    prop_assert!(chosen);
                }
                seen.push((at, backlog));
            }
        }
    }
}
