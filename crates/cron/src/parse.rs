//! The parser: expression text to [`Schedule`].
//!
//! Grammar (see the module docs of the crate for the meaning):
//!
//! ```text
//! expr  := macro | f f f f f | f f f f f f | f f f f f f f     (fields split on spaces/tabs)
//! field := '?' | dom-special | dow-special | item (',' item)*
//! item  := base ('/' step)?
//! base  := '*' | value ('-' value)?
//! value := digits | name                                       (names: JAN-DEC, SUN-SAT)
//! dom-special := 'L' | 'L-' n | 'LW' | n 'W'                   (day-of-month only)
//! dow-special := value 'L' | value '#' k                       (day-of-week only)
//! ```

use crate::error::{Field, ParseError};
use crate::spec::{Bits, DayRule, Schedule, WeekdayRule, YearSet};

const MONTHS: [&str; 12] = [
    "JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC",
];
const WEEKDAYS: [&str; 7] = ["SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"];

/// The macros and their expansions (Vixie cron, `man 5 crontab`; `@reboot` is not a schedule).
const MACROS: [(&str, &str); 7] = [
    ("@yearly", "0 0 1 1 *"),
    ("@annually", "0 0 1 1 *"),
    ("@monthly", "0 0 1 * *"),
    ("@weekly", "0 0 * * 0"),
    ("@daily", "0 0 * * *"),
    ("@midnight", "0 0 * * *"),
    ("@hourly", "0 * * * *"),
];

/// The fields of a 7-field expression in order; 6 fields drop the year, 5 also the second.
const ALL_FIELDS: [Field; 7] = [
    Field::Second,
    Field::Minute,
    Field::Hour,
    Field::DayOfMonth,
    Field::Month,
    Field::DayOfWeek,
    Field::Year,
];

/// A token of the input with its 0-based character offset.
#[derive(Debug, Clone, Copy)]
struct Token<'a> {
    text: &'a str,
    pos: usize,
}

/// Trims the ends and splits on spaces and tabs, remembering character offsets.
fn tokenize(expr: &str) -> Vec<Token<'_>> {
    let body = expr.trim_start();
    let mut pos = expr[..expr.len() - body.len()].chars().count();
    let mut tokens = Vec::new();
    for text in body.trim_end().split([' ', '\t']) {
        if !text.is_empty() {
            tokens.push(Token { text, pos });
        }
        pos += text.chars().count() + 1;
    }
    tokens
}

/// Parses a whole expression.
pub(crate) fn parse(expr: &str) -> Result<Schedule, ParseError> {
    let tokens = tokenize(expr);
    if let Some(&first) = tokens.first()
        && first.text.starts_with('@')
    {
        return parse_macro(first, tokens.get(1).copied());
    }
    parse_fields(&tokens, expr.chars().count())
}

/// Expands a macro (`name`); `extra` is the token after it, if any, which is an error.
fn parse_macro(name: Token<'_>, extra: Option<Token<'_>>) -> Result<Schedule, ParseError> {
    let Some(&(_, expansion)) = MACROS
        .iter()
        .find(|(m, _)| m.eq_ignore_ascii_case(name.text))
    else {
        return Err(ParseError::new(
            None,
            name.pos,
            format!(
                "unknown macro {}, expected one of @yearly, @annually, @monthly, @weekly, @daily, @midnight, @hourly",
                name.text
            ),
        ));
    };
    if let Some(extra) = extra {
        return Err(ParseError::new(
            None,
            extra.pos,
            format!("macro {} takes no fields, found {}", name.text, extra.text),
        ));
    }
    let expanded = tokenize(expansion);
    parse_fields(&expanded, expansion.len())
}

fn parse_fields(tokens: &[Token<'_>], input_chars: usize) -> Result<Schedule, ParseError> {
    let layout: &[Field] = match tokens.len() {
        5 => &ALL_FIELDS[1..6],
        6 => &ALL_FIELDS[..6],
        7 => &ALL_FIELDS,
        n => {
            let position = tokens.get(7).map_or(input_chars, |t| t.pos);
            return Err(ParseError::new(
                None,
                position,
                format!("expected 5, 6 or 7 fields, found {n}"),
            ));
        }
    };

    let mut schedule = Schedule {
        seconds: Bits(1),
        minutes: Bits::default(),
        hours: Bits::default(),
        days: DayRule::Days(Bits::default()),
        months: Bits::default(),
        weekdays: WeekdayRule::Days(Bits::default()),
        years: YearSet::all(),
        dom_star: false,
        dow_star: false,
        fixed_time: true,
        has_seconds: tokens.len() >= 6,
        has_year: tokens.len() == 7,
    };
    for (&field, &token) in layout.iter().zip(tokens) {
        let star = token.text.starts_with('*');
        match field {
            Field::Second => schedule.seconds = parse_bits(field, token)?,
            Field::Minute => schedule.minutes = parse_bits(field, token)?,
            Field::Hour => schedule.hours = parse_bits(field, token)?,
            Field::Month => schedule.months = parse_bits(field, token)?,
            Field::DayOfMonth => {
                schedule.days = parse_day_of_month(token)?;
                schedule.dom_star = star || token.text == "?";
            }
            Field::DayOfWeek => {
                schedule.weekdays = parse_day_of_week(token)?;
                schedule.dow_star = star || token.text == "?";
            }
            Field::Year => schedule.years = parse_years(token)?,
        }
        if matches!(field, Field::Second | Field::Minute | Field::Hour) && star {
            schedule.fixed_time = false;
        }
    }
    Ok(schedule)
}

/// One list item as a stepped range: `lo, lo+step, ...` up to `hi`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Span {
    lo: u32,
    hi: u32,
    step: u32,
}

fn parse_bits(field: Field, token: Token<'_>) -> Result<Bits, ParseError> {
    let mut bits = Bits::default();
    for span in parse_list(field, token)? {
        bits.insert_step(span.lo, span.hi, span.step);
    }
    Ok(bits)
}

fn parse_years(token: Token<'_>) -> Result<YearSet, ParseError> {
    let mut years = YearSet::empty();
    for span in parse_list(Field::Year, token)? {
        years.insert_step(span.lo, span.hi, span.step);
    }
    Ok(years)
}

fn parse_day_of_month(token: Token<'_>) -> Result<DayRule, ParseError> {
    let field = Field::DayOfMonth;
    if token.text == "?" {
        return Ok(DayRule::Days(Bits::range(1, 31)));
    }
    let upper = token.text.to_ascii_uppercase();
    if !upper.contains(['L', 'W']) {
        return parse_bits(field, token).map(DayRule::Days);
    }
    special_alone(field, token, "L and W")?;
    let err = |pos: usize, msg: String| ParseError::new(Some(field), pos, msg);
    if upper == "L" {
        return Ok(DayRule::Last { before: 0 });
    }
    if upper == "LW" {
        return Ok(DayRule::LastWeekday);
    }
    if let Some(n) = upper.strip_prefix("L-") {
        let pos = token.pos + 2;
        let n = parse_small(n)
            .filter(|n| (1..=30).contains(n))
            .ok_or_else(|| err(pos, format!("L-{n}: the offset must be a number 1-30")))?;
        return Ok(DayRule::Last { before: n });
    }
    if let Some(n) = upper.strip_suffix('W') {
        let n = parse_small(n)
            .filter(|n| (1..=31).contains(n))
            .ok_or_else(|| {
                err(
                    token.pos,
                    format!("{}: W needs a day 1-31 before it, e.g. 15W", token.text),
                )
            })?;
        return Ok(DayRule::NearestWeekday(n));
    }
    Err(err(
        token.pos,
        format!(
            "{} is not a valid form, expected L, L-n, LW or nW (day-of-week uses dL)",
            token.text
        ),
    ))
}

fn parse_day_of_week(token: Token<'_>) -> Result<WeekdayRule, ParseError> {
    let field = Field::DayOfWeek;
    if token.text == "?" {
        return Ok(WeekdayRule::Days(Bits::range(0, 6)));
    }
    let upper = token.text.to_ascii_uppercase();
    let err = |pos: usize, msg: String| ParseError::new(Some(field), pos, msg);
    if let Some((day, nth)) = upper.split_once('#') {
        special_alone(field, token, "#")?;
        let weekday = parse_value(field, day, token.pos)?;
        let nth_pos = token.pos + day.chars().count() + 1;
        let nth = parse_small(nth)
            .filter(|k| (1..=5).contains(k))
            .ok_or_else(|| {
                err(
                    nth_pos,
                    format!("{}: # needs an occurrence 1-5", token.text),
                )
            })?;
        return Ok(WeekdayRule::Nth {
            weekday: (weekday % 7) as u8,
            nth,
        });
    }
    // No weekday name contains an L, so any L is the `dL` form.
    if upper.contains('L') {
        special_alone(field, token, "L")?;
        let Some(day) = upper.strip_suffix('L') else {
            return Err(err(
                token.pos,
                format!("{}: L must come last, as in 5L", token.text),
            ));
        };
        if day.is_empty() {
            return Err(err(
                token.pos,
                "L needs a weekday before it, e.g. 5L for the last Friday".to_string(),
            ));
        }
        let weekday = parse_value(field, day, token.pos)?;
        return Ok(WeekdayRule::Last((weekday % 7) as u8));
    }
    let mut bits = Bits::default();
    for span in parse_list(field, token)? {
        let mut v = span.lo;
        while v <= span.hi {
            bits.insert_step(v % 7, v % 7, 1);
            v = match v.checked_add(span.step) {
                Some(next) => next,
                None => break,
            };
        }
    }
    Ok(WeekdayRule::Days(bits))
}

/// Rejects a special form (`L`, `W`, `#`) that is part of a list or has a step.
fn special_alone(field: Field, token: Token<'_>, what: &str) -> Result<(), ParseError> {
    if let Some(i) = token.text.find([',', '/']) {
        let pos = token.pos + token.text[..i].chars().count();
        let kind = if token.text[i..].starts_with(',') {
            "be part of a list"
        } else {
            "take a step"
        };
        return Err(ParseError::new(
            Some(field),
            pos,
            format!(
                "{}: {what} must stand alone in the field and cannot {kind}",
                token.text
            ),
        ));
    }
    Ok(())
}

/// Parses a comma list of items into spans, checking ranges and syntax.
fn parse_list(field: Field, token: Token<'_>) -> Result<Vec<Span>, ParseError> {
    let (min, max) = field.bounds();
    let err = |pos: usize, msg: String| ParseError::new(Some(field), pos, msg);
    if token.text.contains('?') {
        let pos = token.pos
            + token.text[..token.text.find('?').unwrap_or(0)]
                .chars()
                .count();
        let msg = if matches!(field, Field::DayOfMonth | Field::DayOfWeek) {
            "? must be the whole field".to_string()
        } else {
            "? is only allowed in day-of-month and day-of-week".to_string()
        };
        return Err(err(pos, msg));
    }
    let mut spans = Vec::new();
    let mut pos = token.pos;
    for item in token.text.split(',') {
        let item_pos = pos;
        pos += item.chars().count() + 1;
        if item.is_empty() {
            return Err(err(item_pos, "empty list item".to_string()));
        }
        let (base, step) = match item.split_once('/') {
            None => (item, None),
            Some((base, step)) => (base, Some(step)),
        };
        let step_pos = item_pos + base.chars().count() + 1;
        let step = match step {
            None => None,
            Some("") => return Err(err(step_pos, format!("{item}: missing step after /"))),
            Some(s) if s.contains('/') => {
                return Err(err(step_pos, format!("{item}: only one step is allowed")));
            }
            Some(s) => match parse_number(s) {
                Some(0) => return Err(err(step_pos, format!("{item}: step must be at least 1"))),
                Some(n) => Some(n),
                None => {
                    return Err(err(
                        step_pos,
                        format!("{item}: step {s} is not a positive number"),
                    ));
                }
            },
        };
        let span = if base == "*" {
            // Day-of-week `*` covers 0-6; 7 would only repeat Sunday.
            let hi = if field == Field::DayOfWeek { 6 } else { max };
            Span {
                lo: min,
                hi,
                step: step.unwrap_or(1),
            }
        } else if base.is_empty() {
            return Err(err(item_pos, format!("{item}: missing value before /")));
        } else {
            let mut parts = base.split('-');
            let lo_text = parts.next().unwrap_or_default();
            let hi_text = parts.next();
            if parts.next().is_some() {
                return Err(err(
                    item_pos,
                    format!("{base}: a range has exactly one -, as in a-b"),
                ));
            }
            if lo_text.is_empty() {
                return Err(err(item_pos, format!("{base}: missing range start")));
            }
            let lo = parse_value(field, lo_text, item_pos)?;
            match hi_text {
                Some(hi_text) => {
                    let hi_pos = item_pos + lo_text.chars().count() + 1;
                    if hi_text.is_empty() {
                        return Err(err(hi_pos, format!("{base}: missing range end")));
                    }
                    let hi = parse_value(field, hi_text, hi_pos)?;
                    if lo > hi {
                        return Err(err(
                            item_pos,
                            format!("{base}: range is inverted ({lo} > {hi}), write it low-high"),
                        ));
                    }
                    Span {
                        lo,
                        hi,
                        step: step.unwrap_or(1),
                    }
                }
                // `n/s` runs from n to the field's maximum.
                None => Span {
                    lo,
                    hi: if step.is_some() { max } else { lo },
                    step: step.unwrap_or(1),
                },
            }
        };
        spans.push(span);
    }
    Ok(spans)
}

/// Parses a single value: a number in the field's range or a name the field accepts.
fn parse_value(field: Field, text: &str, pos: usize) -> Result<u32, ParseError> {
    let (min, max) = field.bounds();
    let err = |msg: String| ParseError::new(Some(field), pos, msg);
    if text.bytes().all(|b| b.is_ascii_digit()) && !text.is_empty() {
        return match parse_number(text) {
            Some(v) if (min..=max).contains(&v) => Ok(v),
            _ => Err(err(format!("{text} is out of range {min}-{max}"))),
        };
    }
    if text.bytes().all(|b| b.is_ascii_alphabetic()) && !text.is_empty() {
        let names: &[&str] = match field {
            Field::Month => &MONTHS,
            Field::DayOfWeek => &WEEKDAYS,
            _ => {
                return Err(err(format!(
                    "{text} is not a number; names are only allowed in month and day-of-week"
                )));
            }
        };
        return match names
            .iter()
            .zip(min..)
            .find(|(name, _)| name.eq_ignore_ascii_case(text))
        {
            Some((_, value)) => Ok(value),
            None => Err(err(format!(
                "unknown name {text}, expected one of {}",
                names.join(", ")
            ))),
        };
    }
    Err(err(format!(
        "{text} is not a number{}",
        if matches!(field, Field::Month | Field::DayOfWeek) {
            " or name"
        } else {
            ""
        }
    )))
}

/// Parses ASCII digits into a `u8`; `None` for anything else or values past 255.
fn parse_small(text: &str) -> Option<u8> {
    parse_number(text).and_then(|n| u8::try_from(n).ok())
}

/// Parses ASCII digits; `None` for anything else or values past `u32::MAX`.
fn parse_number(text: &str) -> Option<u32> {
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    text.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Parses `expr`, expecting an error; returns (field, position, Display text).
    fn reject(expr: &str) -> (Option<Field>, usize, String) {
        match parse(expr) {
            Ok(schedule) => panic!("{expr:?} parsed as {schedule:?}"),
            Err(e) => (e.field, e.position, e.to_string()),
        }
    }

    fn accept(expr: &str) -> Schedule {
        parse(expr).unwrap_or_else(|e| panic!("{expr:?}: {e}"))
    }

    #[test]
    fn wrong_field_count_has_no_field_prefix() {
        assert_eq!(
            reject("* * * *"),
            (None, 7, "expected 5, 6 or 7 fields, found 4".into())
        );
        assert_eq!(
            reject(""),
            (None, 0, "expected 5, 6 or 7 fields, found 0".into())
        );
        assert_eq!(
            reject("0 0 1 1 * 2030 x y"),
            (None, 17, "expected 5, 6 or 7 fields, found 8".into())
        );
    }

    #[test]
    fn unknown_macro_and_macro_with_fields_are_rejected() {
        let (field, pos, msg) = reject("@reboot");
        assert_eq!((field, pos), (None, 0));
        assert!(msg.starts_with("unknown macro @reboot"), "{msg}");
        assert_eq!(
            reject("  @daily 0"),
            (None, 9, "macro @daily takes no fields, found 0".into())
        );
    }

    #[test]
    fn out_of_range_values_name_the_field_and_range() {
        assert_eq!(
            reject("0 0 32 * *"),
            (
                Some(Field::DayOfMonth),
                4,
                "day-of-month: 32 is out of range 1-31".into()
            )
        );
        assert_eq!(
            reject("60 * * * * *"),
            (
                Some(Field::Second),
                0,
                "second: 60 is out of range 0-59".into()
            )
        );
        assert_eq!(
            reject("0 0-24 * * *"),
            (Some(Field::Hour), 4, "hour: 24 is out of range 0-23".into())
        );
        assert_eq!(
            reject("* * * 13 *"),
            (
                Some(Field::Month),
                6,
                "month: 13 is out of range 1-12".into()
            )
        );
        assert_eq!(
            reject("* * * * 8"),
            (
                Some(Field::DayOfWeek),
                8,
                "day-of-week: 8 is out of range 0-7".into()
            )
        );
        assert_eq!(
            reject("0 0 0 * * * 1969"),
            (
                Some(Field::Year),
                12,
                "year: 1969 is out of range 1970-2199".into()
            )
        );
        assert_eq!(
            reject("99999999999 * * * *").2,
            "minute: 99999999999 is out of range 0-59"
        );
    }

    #[test]
    fn inverted_ranges_are_rejected() {
        assert_eq!(
            reject("5-1 * * * *"),
            (
                Some(Field::Minute),
                0,
                "minute: 5-1: range is inverted (5 > 1), write it low-high".into()
            )
        );
        let (field, pos, _) = reject("0 0 * * FRI-SUN");
        assert_eq!((field, pos), (Some(Field::DayOfWeek), 8));
        // 7 is Sunday at the top of the range.
        accept("0 0 * * FRI-7");
    }

    #[test]
    fn list_and_range_syntax_errors_point_at_the_item() {
        assert_eq!(
            reject("1,,2 * * * *"),
            (Some(Field::Minute), 2, "minute: empty list item".into())
        );
        assert_eq!(reject("1, * * * *").1, 2);
        assert_eq!(
            reject("1-2-3 * * * *").2,
            "minute: 1-2-3: a range has exactly one -, as in a-b"
        );
        assert_eq!(reject("-1 * * * *").2, "minute: -1: missing range start");
        assert_eq!(reject("1- * * * *").2, "minute: 1-: missing range end");
        assert_eq!(reject("** * * * *").2, "minute: ** is not a number");
        assert_eq!(reject("*5 * * * *").2, "minute: *5 is not a number");
        assert_eq!(reject("1.5 * * * *").2, "minute: 1.5 is not a number");
        assert_eq!(
            reject("0 0 * 1-FOO *"),
            (
                Some(Field::Month),
                8,
                "month: unknown name FOO, expected one of JAN, FEB, MAR, APR, MAY, JUN, JUL, AUG, \
                 SEP, OCT, NOV, DEC"
                    .into()
            )
        );
        assert_eq!(
            reject("JAN * * * *").2,
            "minute: JAN is not a number; names are only allowed in month and day-of-week"
        );
        assert_eq!(reject("0 0 * * JAN").1, 8);
    }

    #[test]
    fn step_errors_are_specific() {
        assert_eq!(
            reject("*/0 * * * *"),
            (
                Some(Field::Minute),
                2,
                "minute: */0: step must be at least 1".into()
            )
        );
        assert_eq!(reject("*/ * * * *").2, "minute: */: missing step after /");
        assert_eq!(reject("/5 * * * *").2, "minute: /5: missing value before /");
        assert_eq!(
            reject("*/2/3 * * * *").2,
            "minute: */2/3: only one step is allowed"
        );
        assert_eq!(
            reject("*/a * * * *").2,
            "minute: */a: step a is not a positive number"
        );
        assert_eq!(
            reject("*/-1 * * * *").2,
            "minute: */-1: step -1 is not a positive number"
        );
    }

    #[test]
    fn question_mark_only_as_a_whole_day_field() {
        assert_eq!(
            reject("0 ? * * *"),
            (
                Some(Field::Hour),
                2,
                "hour: ? is only allowed in day-of-month and day-of-week".into()
            )
        );
        assert_eq!(
            reject("0 0 ?,1 * *"),
            (
                Some(Field::DayOfMonth),
                4,
                "day-of-month: ? must be the whole field".into()
            )
        );
        let s = accept("0 0 ? * ?");
        assert!(s.dom_star && s.dow_star);
    }

    #[test]
    fn special_day_forms_stand_alone_and_check_their_numbers() {
        assert_eq!(
            reject("0 0 L,15 * *"),
            (
                Some(Field::DayOfMonth),
                5,
                "day-of-month: L,15: L and W must stand alone in the field and cannot be part of \
                 a list"
                    .into()
            )
        );
        assert_eq!(
            reject("0 0 L/2 * *").2,
            "day-of-month: L/2: L and W must stand alone in the field and cannot take a step"
        );
        assert_eq!(
            reject("0 0 L-31 * *"),
            (
                Some(Field::DayOfMonth),
                6,
                "day-of-month: L-31: the offset must be a number 1-30".into()
            )
        );
        assert_eq!(
            reject("0 0 0W * *").2,
            "day-of-month: 0W: W needs a day 1-31 before it, e.g. 15W"
        );
        assert_eq!(
            reject("0 0 5L * *").2,
            "day-of-month: 5L is not a valid form, expected L, L-n, LW or nW (day-of-week uses dL)"
        );
        assert_eq!(
            reject("0 0 ? * 1#6"),
            (
                Some(Field::DayOfWeek),
                10,
                "day-of-week: 1#6: # needs an occurrence 1-5".into()
            )
        );
        assert_eq!(
            reject("0 0 ? * 1#2,3#2").2,
            "day-of-week: 1#2,3#2: # must stand alone in the field and cannot be part of a list"
        );
        assert_eq!(
            reject("0 0 * * 5L,1").2,
            "day-of-week: 5L,1: L must stand alone in the field and cannot be part of a list"
        );
        assert_eq!(
            reject("0 0 * * L").2,
            "day-of-week: L needs a weekday before it, e.g. 5L for the last Friday"
        );
        assert_eq!(
            reject("0 0 * * L5").2,
            "day-of-week: L5: L must come last, as in 5L"
        );
        assert_eq!(reject("0 0 ? * 8L").2, "day-of-week: 8 is out of range 0-7");
        assert_eq!(
            reject("0 0 * * 15W").2,
            "day-of-week: 15W is not a number or name"
        );
    }

    #[test]
    fn positions_count_characters_not_bytes() {
        // "é" is two bytes but one character.
        assert_eq!(reject("0 0 * * é").1, 8);
        assert_eq!(reject("\t0 0 * é *").1, 7);
    }

    #[test]
    fn special_forms_parse_case_insensitively() {
        assert_eq!(accept("0 0 l * *").days, DayRule::Last { before: 0 });
        assert_eq!(accept("0 0 L-3 * *").days, DayRule::Last { before: 3 });
        assert_eq!(accept("0 0 lw * *").days, DayRule::LastWeekday);
        assert_eq!(accept("0 0 15w * *").days, DayRule::NearestWeekday(15));
        assert_eq!(accept("0 0 ? * fril").weekdays, WeekdayRule::Last(5));
        assert_eq!(accept("0 0 ? * 7L").weekdays, WeekdayRule::Last(0));
        assert_eq!(
            accept("0 0 ? * sun#1").weekdays,
            WeekdayRule::Nth { weekday: 0, nth: 1 }
        );
        assert_eq!(accept("@MONTHLY"), accept("0 0 1 * *"));
    }

    #[test]
    fn steps_run_to_the_field_maximum() {
        // `n/s` runs to the maximum; day-of-week's maximum is 7 (Sunday).
        assert_eq!(
            accept("0 0 * * 1/2").weekdays,
            WeekdayRule::Days(Bits(0b0010_1011))
        );
        assert_eq!(
            accept("30/10 * * * *").minutes,
            Bits((1 << 30) | (1 << 40) | (1 << 50))
        );
        assert_eq!(accept("*/90 * * * *").minutes, Bits(1));
        assert_eq!(accept("5-5/3 * * * *").minutes, Bits(1 << 5));
        assert_eq!(
            accept("0 0 1 JAN/3 *").months,
            Bits((1 << 1) | (1 << 4) | (1 << 7) | (1 << 10))
        );
        assert_eq!(
            accept("0 0 * * 0-7").weekdays,
            WeekdayRule::Days(Bits(0x7f))
        );
    }

    #[test]
    fn star_and_fixed_time_flags_follow_the_text() {
        let s = accept("0 0 */2 * 5");
        assert!(s.dom_star && !s.dow_star && s.fixed_time);
        let s = accept("0 0 15,* * 1");
        assert!(!s.dom_star, "a list containing * does not start with *");
        assert!(!accept("*/15 2 * * *").fixed_time);
        assert!(!accept("*/10 30 2 * * *").fixed_time);
        assert!(accept("0-59 0-23 * * *").fixed_time);
        let s = accept("0 0 0 1 1 * 2030");
        assert!(s.has_seconds && s.has_year && s.years.contains(2030) && !s.years.contains(2031));
    }

    #[test]
    fn fields_split_on_spaces_and_tabs_with_ends_trimmed() {
        assert_eq!(accept(" 30 4 * * * "), accept("30\t4 * *  *"));
        assert_eq!(accept("0\t0  1 * *\n"), accept("0 0 1 * *"));
    }
}
