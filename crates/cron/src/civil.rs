//! Civil (wall-clock) date-times at seconds precision, the unit the next-fire search steps
//! through before it maps a match to an instant in the schedule's zone (docs/cron.md).
//! Invariant: the derived ordering is chronological (fields in order of significance).

use jiff::civil::DateTime;

use crate::spec::{MAX_YEAR, days_in_month};

/// A civil date-time at seconds precision. Field order makes the derived ordering chronological.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Civil {
    pub(crate) year: i32,
    pub(crate) month: u32,
    pub(crate) day: u32,
    pub(crate) hour: u32,
    pub(crate) minute: u32,
    pub(crate) second: u32,
}

impl Civil {
    /// The first civil second past the search horizon (local date `MAX_YEAR-12-31`).
    pub(crate) const END: Civil = Civil::midnight(MAX_YEAR + 1, 1, 1);

    pub(crate) const fn midnight(year: i32, month: u32, day: u32) -> Civil {
        Civil {
            year,
            month,
            day,
            hour: 0,
            minute: 0,
            second: 0,
        }
    }

    /// `dt` truncated to the second.
    pub(crate) fn floor(dt: DateTime) -> Civil {
        Civil {
            year: i32::from(dt.year()),
            month: dt.month().unsigned_abs().into(),
            day: dt.day().unsigned_abs().into(),
            hour: dt.hour().unsigned_abs().into(),
            minute: dt.minute().unsigned_abs().into(),
            second: dt.second().unsigned_abs().into(),
        }
    }

    /// `dt` rounded up to the second.
    pub(crate) fn ceil(dt: DateTime) -> Civil {
        let floor = Civil::floor(dt);
        if dt.subsec_nanosecond() == 0 {
            floor
        } else {
            floor.succ()
        }
    }

    /// The next civil second.
    pub(crate) fn succ(self) -> Civil {
        let mut c = self;
        c.second += 1;
        if c.second == 60 {
            c.second = 0;
            c.minute += 1;
        }
        if c.minute == 60 {
            c.minute = 0;
            c.hour += 1;
        }
        if c.hour == 24 {
            c.hour = 0;
            c.day += 1;
        }
        if c.day > days_in_month(c.year, c.month) {
            c.day = 1;
            c.month += 1;
        }
        if c.month > 12 {
            c.month = 1;
            c.year += 1;
        }
        c
    }

    /// The jiff form; `None` only for values jiff cannot represent (never for search results).
    pub(crate) fn to_datetime(self) -> Option<DateTime> {
        DateTime::new(
            i16::try_from(self.year).ok()?,
            i8::try_from(self.month).ok()?,
            i8::try_from(self.day).ok()?,
            i8::try_from(self.hour).ok()?,
            i8::try_from(self.minute).ok()?,
            i8::try_from(self.second).ok()?,
            0,
        )
        .ok()
    }
}
