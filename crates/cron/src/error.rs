//! Parse errors and the names of the expression's fields.

use std::fmt;

/// One field of a cron expression, in the order a 7-field expression lists them.
///
/// Its `Display` form is the name used in error messages: `second`, `minute`, `hour`,
/// `day-of-month`, `month`, `day-of-week`, `year`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Field {
    /// Seconds, 0-59; only in 6- and 7-field expressions (the first field).
    Second,
    /// Minutes, 0-59.
    Minute,
    /// Hours, 0-23.
    Hour,
    /// Day of the month, 1-31, plus `L`, `L-n`, `LW`, `nW` and `?`.
    DayOfMonth,
    /// Month, 1-12 or `JAN`-`DEC`.
    Month,
    /// Day of the week, 0-7 or `SUN`-`SAT` (0 and 7 are Sunday), plus `dL`, `d#k` and `?`.
    DayOfWeek,
    /// Year, 1970-2199; only in 7-field expressions (the last field).
    Year,
}

impl Field {
    /// The field's name as used in error messages, e.g. `"day-of-month"`.
    pub fn name(self) -> &'static str {
        match self {
            Field::Second => "second",
            Field::Minute => "minute",
            Field::Hour => "hour",
            Field::DayOfMonth => "day-of-month",
            Field::Month => "month",
            Field::DayOfWeek => "day-of-week",
            Field::Year => "year",
        }
    }

    /// The inclusive range of numeric values the field accepts (day-of-week accepts 7 for Sunday).
    pub(crate) fn bounds(self) -> (u32, u32) {
        match self {
            Field::Second | Field::Minute => (0, 59),
            Field::Hour => (0, 23),
            Field::DayOfMonth => (1, 31),
            Field::Month => (1, 12),
            Field::DayOfWeek => (0, 7),
            Field::Year => (1970, 2199),
        }
    }
}

impl fmt::Display for Field {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Why an expression was rejected, and where.
///
/// Its `Display` form is `"<field>: <reason>"`, e.g. `day-of-month: 32 is out of range 1-31`, or
/// just the reason for problems with the expression as a whole (wrong number of fields, unknown
/// macro), e.g. `expected 5, 6 or 7 fields, found 4`. Messages are lowercase without a final period.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct ParseError {
    /// The field the offending text belongs to; `None` for whole-expression problems.
    pub field: Option<Field>,
    /// 0-based offset, in characters (not bytes), of the offending token in the input; for too few
    /// fields it is the length of the input in characters.
    pub position: usize,
    /// The reason, without the field prefix.
    pub message: String,
}

impl ParseError {
    pub(crate) fn new(field: Option<Field>, position: usize, message: impl Into<String>) -> Self {
        ParseError {
            field,
            position,
            message: message.into(),
        }
    }
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.field {
            Some(field) => write!(f, "{field}: {}", self.message),
            None => f.write_str(&self.message),
        }
    }
}
