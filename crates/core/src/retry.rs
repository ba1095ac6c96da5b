//! Retry policy and backoff (docs/policies.md, "retry").
//!
//! Delay before attempt `n + 1` after attempt `n` failed:
//! `min(max_interval, initial_interval · multiplier^(n-1))`; with `jitter`, "full jitter" —
//! uniform in `[0, delay]` (Brooker, "Exponential Backoff And Jitter", AWS Architecture Blog,
//! 2015). An HTTP `Retry-After` replaces the computed delay, capped at `max_interval`.
//! The computation saturates: it never overflows, whatever the attempt number.

use serde::{Deserialize, Serialize};

use crate::duration::Dur;

/// How often and how patiently an execution is retried.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct RetryPolicy {
    /// Attempts in all, the first included; at least 1. Default 3.
    pub max_attempts: u32,
    /// Delay after the first failed attempt. Default `1s`.
    pub initial_interval: Dur,
    /// Growth factor per attempt, at least 1.0. Default 2.0.
    pub multiplier: f64,
    /// Cap on any delay. Default `10m`.
    pub max_interval: Dur,
    /// Full jitter on each delay. Default true.
    pub jitter: bool,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            max_attempts: 3,
            initial_interval: Dur::from_secs(1),
            multiplier: 2.0,
            max_interval: Dur::from_secs(600),
            jitter: true,
        }
    }
}

impl RetryPolicy {
    /// The delay before the attempt after `failed_attempt` (numbered from 1).
    ///
    /// `unit` is a random number in `[0, 1)` used for full jitter (ignored without jitter);
    /// `retry_after` is a delay the target asked for, which wins over the computed one but is
    /// capped at `max_interval`.
    pub fn delay(&self, failed_attempt: u32, unit: f64, retry_after: Option<Dur>) -> Dur {
        let cap = self.max_interval.as_millis();
        if let Some(asked) = retry_after {
            return Dur::from_millis(asked.as_millis().min(cap));
        }
        let exponent = failed_attempt.saturating_sub(1).min(1024);
        let grown = self.initial_interval.as_millis() as f64
            * self
                .multiplier
                .powi(i32::try_from(exponent).unwrap_or(i32::MAX));
        let base = if grown.is_finite() && grown < cap as f64 {
            grown as u64
        } else {
            cap
        };
        if self.jitter {
            let unit = unit.clamp(0.0, 1.0);
            Dur::from_millis((base as f64 * unit).round() as u64)
        } else {
            Dur::from_millis(base)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn policy(jitter: bool) -> RetryPolicy {
        RetryPolicy {
            jitter,
            ..RetryPolicy::default()
        }
    }

    #[test]
    fn delay_doubles_then_caps() {
        let p = policy(false);
        let secs: Vec<u64> = (1..=12)
            .map(|n| p.delay(n, 0.0, None).as_millis() / 1000)
            .collect();
        assert_eq!(secs, [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 600, 600]);
    }

    #[test]
    fn retry_after_wins_but_is_capped() {
        let p = policy(true);
        assert_eq!(p.delay(1, 0.5, Some(Dur::from_secs(7))), Dur::from_secs(7));
        assert_eq!(
            p.delay(1, 0.5, Some(Dur::from_secs(7200))),
            Dur::from_secs(600)
        );
    }

    proptest! {
        #[test]
        fn backoff_never_overflows_and_stays_within_cap(
            n in 0u32..u32::MAX, unit in 0.0f64..1.0, mult in 1.0f64..1000.0, init in 0u64..10_000_000,
        ) {
            let p = RetryPolicy { multiplier: mult, initial_interval: Dur::from_millis(init), ..policy(true) };
            prop_assert!(p.delay(n, unit, None) <= p.max_interval);
        }
    }
}
