//! Durations as users write them: `500ms`, `30s`, `5m`, `2h`, `1d`, or compounds like `1h30m`.
//!
//! Parsing follows the `humantime` grammar; [`Dur`] keeps whole milliseconds and prints itself
//! in the canonical compound form (`90s` prints as `1m30s`), which parses back to the same value.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A non-negative duration in whole milliseconds, written as a string in JSON.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Dur {
    ms: u64,
}

/// Why a duration string was rejected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DurError {
    /// Not of the form `<number><unit>...`.
    #[error("'{0}' is not a duration (write e.g. 500ms, 30s, 5m, 2h, 1d)")]
    Syntax(String),
    /// Finer than a millisecond.
    #[error("'{0}' is finer than a millisecond")]
    SubMillisecond(String),
    /// Larger than 100 years.
    #[error("'{0}' is longer than 100 years")]
    TooLong(String),
}

const MAX_MS: u64 = 100 * 365 * 86_400_000;

impl Dur {
    /// Zero.
    pub const ZERO: Dur = Dur { ms: 0 };

    /// A duration of `ms` milliseconds.
    pub const fn from_millis(ms: u64) -> Self {
        Dur { ms }
    }

    /// A duration of `s` seconds.
    pub const fn from_secs(s: u64) -> Self {
        Dur { ms: s * 1000 }
    }

    /// Whole milliseconds.
    pub const fn as_millis(self) -> u64 {
        self.ms
    }

    /// Milliseconds as a signed number (always fits: durations are capped at 100 years).
    pub fn as_millis_i64(self) -> i64 {
        i64::try_from(self.ms).unwrap_or(i64::MAX)
    }

    /// As a [`std::time::Duration`].
    pub const fn as_std(self) -> std::time::Duration {
        std::time::Duration::from_millis(self.ms)
    }

    /// As a [`jiff::SignedDuration`].
    pub fn as_signed(self) -> jiff::SignedDuration {
        jiff::SignedDuration::from_millis(self.as_millis_i64())
    }

    /// True for zero.
    pub const fn is_zero(self) -> bool {
        self.ms == 0
    }
}

impl FromStr for Dur {
    type Err = DurError;

    /// Parses `500ms`, `30s`, `5m`, `2h`, `1d`, `1h30m`, ... (humantime's grammar).
    ///
    /// # Errors
    /// [`DurError`] for anything else, for sub-millisecond precision and beyond 100 years.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let text = s.trim();
        if text.is_empty() || !text.starts_with(|c: char| c.is_ascii_digit()) {
            return Err(DurError::Syntax(s.to_owned()));
        }
        let d = humantime::parse_duration(text).map_err(|_| DurError::Syntax(s.to_owned()))?;
        if d.subsec_nanos() % 1_000_000 != 0 {
            return Err(DurError::SubMillisecond(s.to_owned()));
        }
        let ms = u64::try_from(d.as_millis()).map_err(|_| DurError::TooLong(s.to_owned()))?;
        if ms > MAX_MS {
            return Err(DurError::TooLong(s.to_owned()));
        }
        Ok(Dur { ms })
    }
}

impl fmt::Display for Dur {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.ms == 0 {
            return f.write_str("0s");
        }
        let mut rest = self.ms;
        for (unit, size) in [
            ("d", 86_400_000),
            ("h", 3_600_000),
            ("m", 60_000),
            ("s", 1000),
            ("ms", 1),
        ] {
            if rest >= size {
                write!(f, "{}{unit}", rest / size)?;
                rest %= size;
            }
        }
        Ok(())
    }
}

impl Serialize for Dur {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Dur {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

impl utoipa::PartialSchema for Dur {
    /// A duration string (`500ms`, `30s`, `1h30m`; docs/configuration.md), at millisecond
    /// resolution.
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        utoipa::openapi::ObjectBuilder::new()
            .schema_type(utoipa::openapi::schema::Type::String)
            .pattern(Some(r"^([0-9]+(ms|s|m|h|d))+$"))
            .description(Some(
                "A duration: digits and a unit (ms, s, m, h, d), or several such, e.g. 1h30m",
            ))
            .examples([serde_json::json!("30s")])
            .into()
    }
}

impl utoipa::ToSchema for Dur {}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn parses_the_units_of_the_spec() {
        for (text, ms) in [
            ("500ms", 500),
            ("30s", 30_000),
            ("5m", 300_000),
            ("2h", 7_200_000),
            ("1d", 86_400_000),
            ("1h30m", 5_400_000),
        ] {
            assert_eq!(text.parse::<Dur>().unwrap().as_millis(), ms, "{text}");
        }
    }

    #[test]
    fn rejects_what_is_not_a_duration() {
        for text in ["", "5", "-5s", "s", "five seconds", "1x", "1ns", "1000y"] {
            assert!(text.parse::<Dur>().is_err(), "{text} should be rejected");
        }
    }

    proptest! {
        #[test]
        fn display_parses_back_to_the_same_value(ms in 0u64..MAX_MS) {
            let d = Dur::from_millis(ms);
            prop_assert_eq!(d.to_string().parse::<Dur>().unwrap(), d);
        }
    }
}
