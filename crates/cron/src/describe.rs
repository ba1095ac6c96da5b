//! English descriptions of schedules, built from the parsed value sets (not the text), so
//! equivalent expressions read the same.
//!
//! Shape: `<time>, <days>[, <months>][, <years>]`, e.g. `at 02:00, every day` or
//! `every 5 minutes between 09:00 and 17:59, Monday through Friday`.

use crate::spec::{Bits, DayRule, MAX_YEAR, MIN_YEAR, Schedule, WeekdayRule};

const WEEKDAY_NAMES: [&str; 7] = [
    "Sunday",
    "Monday",
    "Tuesday",
    "Wednesday",
    "Thursday",
    "Friday",
    "Saturday",
];
const MONTH_NAMES: [&str; 12] = [
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
];

/// The most wall times listed one by one (`at 06:00, 12:00 and 18:00`).
const MAX_LISTED_TIMES: u32 = 6;

/// The shape of a set of values within a field's domain `lo..=hi`.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Shape {
    /// Every value of the domain.
    All,
    /// One value.
    One(u32),
    /// `a..=b`, at least two values.
    Range(u32, u32),
    /// `first, first+step, ..., last`, at least three values, step > 1; `whole` when it starts
    /// at the domain's minimum and runs to its end (`*/step`).
    Step {
        first: u32,
        step: u32,
        last: u32,
        whole: bool,
    },
    /// Anything else (also the empty set).
    List(Vec<u32>),
}

fn shape(values: &[u32], lo: u32, hi: u32) -> Shape {
    let n = values.len();
    match values {
        [] => Shape::List(Vec::new()),
        [v] if lo == hi && *v == lo => Shape::All,
        [v] => Shape::One(*v),
        [first, second, ..] => {
            let (first, second) = (*first, *second);
            let last = values[n - 1];
            if first == lo && last == hi && u32::try_from(n).ok() == Some(hi - lo + 1) {
                return Shape::All;
            }
            let step = second - first;
            let arithmetic = values.windows(2).all(|w| w[1] - w[0] == step);
            if arithmetic && step == 1 {
                Shape::Range(first, last)
            } else if arithmetic && n >= 3 {
                Shape::Step {
                    first,
                    step,
                    last,
                    whole: first == lo && last + step > hi,
                }
            } else {
                Shape::List(values.to_vec())
            }
        }
    }
}

fn bits_shape(bits: Bits, lo: u32, hi: u32) -> Shape {
    let values: Vec<u32> = bits.iter().filter(|v| (lo..=hi).contains(v)).collect();
    shape(&values, lo, hi)
}

/// `a`, `a and b`, `a, b and c`.
fn join_and<S: AsRef<str>>(items: &[S]) -> String {
    match items {
        [] => String::new(),
        [one] => one.as_ref().to_string(),
        [init @ .., last] => {
            let init: Vec<&str> = init.iter().map(AsRef::as_ref).collect();
            format!("{} and {}", init.join(", "), last.as_ref())
        }
    }
}

fn ordinal(n: u32) -> String {
    let suffix = match (n % 10, n % 100) {
        (_, 11..=13) => "th",
        (1, _) => "st",
        (2, _) => "nd",
        (3, _) => "rd",
        _ => "th",
    };
    format!("{n}{suffix}")
}

fn plural(n: u32, unit: &str) -> String {
    if n == 1 {
        format!("every {unit}")
    } else {
        format!("every {n} {unit}s")
    }
}

pub(crate) fn describe(s: &Schedule) -> String {
    let mut parts = vec![time_phrase(s)];
    // "on January 1" reads better than "on day 1 of the month, in January".
    match (s.days, bits_shape(s.months, 1, 12), dow_phrase(s.weekdays)) {
        (DayRule::Days(days), Shape::One(month), None)
            if days.len() == 1 && bits_shape(days, 1, 31) != Shape::All =>
        {
            let day = days.iter().next().unwrap_or(1);
            parts.push(format!(
                "on {} {day}",
                MONTH_NAMES[(month.clamp(1, 12) - 1) as usize]
            ));
        }
        _ => {
            parts.push(day_phrase(s));
            parts.extend(month_phrase(s.months));
        }
    }
    if let Some(years) = year_phrase(s) {
        parts.push(years);
    }
    parts.join(", ")
}

fn time_phrase(s: &Schedule) -> String {
    let seconds = bits_shape(s.seconds, 0, 59);
    let minutes = bits_shape(s.minutes, 0, 59);
    let hours = bits_shape(s.hours, 0, 23);
    let show_seconds = s.seconds != Bits(1);
    let clock = |h: u32, m: u32, sec: u32| {
        if show_seconds {
            format!("{h:02}:{m:02}:{sec:02}")
        } else {
            format!("{h:02}:{m:02}")
        }
    };

    // A few exact wall times: "at 06:00 and 18:00".
    if let (Shape::One(sec), Shape::One(m)) = (&seconds, &minutes)
        && s.hours.len() <= MAX_LISTED_TIMES
        && hours != Shape::All
    {
        let times: Vec<String> = s.hours.iter().map(|h| clock(h, *m, *sec)).collect();
        return format!("at {}", join_and(&times));
    }

    let mut phrase = Vec::new();
    if show_seconds {
        phrase.push(unit_phrase(&seconds, "second"));
    }
    let minute_phrase = match (&minutes, show_seconds) {
        (Shape::All, true) => None,
        _ => Some(unit_phrase(&minutes, "minute")),
    };
    phrase.extend(minute_phrase);
    match &hours {
        Shape::All => {
            if matches!(minutes, Shape::One(_) | Shape::Range(..) | Shape::List(_)) {
                phrase.push("of every hour".to_string());
            }
        }
        Shape::One(h) => phrase.push(format!("between {h:02}:00 and {h:02}:59")),
        Shape::Range(a, b) => phrase.push(format!("between {a:02}:00 and {b:02}:59")),
        Shape::Step {
            first,
            step,
            last,
            whole,
        } => {
            if *whole {
                phrase.push(format!("of every {} hour", ordinal(*step)));
            } else {
                phrase.push(format!(
                    "of every {} hour from {first:02}:00 through {last:02}:59",
                    ordinal(*step)
                ));
            }
        }
        Shape::List(list) => {
            let hours: Vec<String> = list.iter().map(|h| format!("{h:02}:00")).collect();
            phrase.push(format!("in the hours starting {}", join_and(&hours)));
        }
    }
    phrase.join(" ")
}

/// "every 5 minutes", "at minute 30", "at minutes 0 through 15", "at minutes 0, 20 and 45".
fn unit_phrase(shape: &Shape, unit: &str) -> String {
    match shape {
        Shape::All => format!("every {unit}"),
        Shape::One(v) => format!("at {unit} {v}"),
        Shape::Range(a, b) => format!("at {unit}s {a} through {b}"),
        Shape::Step {
            first,
            step,
            last,
            whole,
        } => {
            if *whole {
                plural(*step, unit)
            } else {
                format!("{} from {unit} {first} through {last}", plural(*step, unit))
            }
        }
        Shape::List(list) => {
            let values: Vec<String> = list.iter().map(u32::to_string).collect();
            format!("at {unit}s {}", join_and(&values))
        }
    }
}

fn day_phrase(s: &Schedule) -> String {
    let dom = dom_phrase(s.days);
    let dow = dow_phrase(s.weekdays);
    match (dom, dow) {
        (None, None) => "every day".to_string(),
        (Some(dom), None) => dom,
        (None, Some(dow)) => dow,
        (Some(dom), Some(_)) if s.dom_star || s.dow_star => {
            format!("{dom}, if it is {}", dow_condition(s.weekdays))
        }
        (Some(dom), Some(dow)) => format!("{dom}, and also {dow}"),
    }
}

/// `None` for every day of the month.
fn dom_phrase(rule: DayRule) -> Option<String> {
    Some(match rule {
        DayRule::Days(bits) => match bits_shape(bits, 1, 31) {
            Shape::All => return None,
            Shape::One(d) => format!("on day {d} of the month"),
            Shape::Range(a, b) => format!("on days {a} through {b} of the month"),
            Shape::Step {
                first,
                step,
                last,
                whole,
            } => {
                if whole && step == 2 {
                    "on odd days of the month".to_string()
                } else {
                    format!("every {step} days from day {first} through {last} of the month")
                }
            }
            Shape::List(list) => {
                let days: Vec<String> = list.iter().map(u32::to_string).collect();
                format!("on days {} of the month", join_and(&days))
            }
        },
        DayRule::Last { before: 0 } => "on the last day of the month".to_string(),
        DayRule::Last { before } => {
            let unit = if before == 1 { "day" } else { "days" };
            format!("on the last day of the month minus {before} {unit}")
        }
        DayRule::LastWeekday => "on the last weekday of the month".to_string(),
        DayRule::NearestWeekday(n) => {
            format!("on the weekday nearest day {n} of the month")
        }
    })
}

/// `None` for every day of the week.
fn dow_phrase(rule: WeekdayRule) -> Option<String> {
    let name = |w: u32| WEEKDAY_NAMES[(w % 7) as usize];
    Some(match rule {
        WeekdayRule::Days(bits) => match bits_shape(bits, 0, 6) {
            Shape::All => return None,
            Shape::One(w) => format!("on {}", name(w)),
            Shape::Range(a, b) => format!("{} through {}", name(a), name(b)),
            Shape::Step { .. } | Shape::List(_) => {
                let days: Vec<&str> = bits.iter().map(name).collect();
                format!("on {}", join_and(&days))
            }
        },
        WeekdayRule::Last(w) => format!("on the last {} of the month", name(w.into())),
        WeekdayRule::Nth { weekday, nth } => format!(
            "on the {} {} of the month",
            ordinal(nth.into()),
            name(weekday.into())
        ),
    })
}

/// The day-of-week test as a condition on a day: "a Friday", "a Monday or a Friday", "the
/// last Friday of the month".
fn dow_condition(rule: WeekdayRule) -> String {
    match rule {
        WeekdayRule::Days(bits) => {
            let days: Vec<String> = bits
                .iter()
                .map(|w| format!("a {}", WEEKDAY_NAMES[(w % 7) as usize]))
                .collect();
            match days.as_slice() {
                [init @ .., last] if !init.is_empty() => format!("{} or {last}", init.join(", ")),
                _ => days.concat(),
            }
        }
        WeekdayRule::Last(w) => format!(
            "the last {} of the month",
            WEEKDAY_NAMES[usize::from(w % 7)]
        ),
        WeekdayRule::Nth { weekday, nth } => format!(
            "the {} {} of the month",
            ordinal(nth.into()),
            WEEKDAY_NAMES[usize::from(weekday % 7)]
        ),
    }
}

fn month_phrase(months: Bits) -> Option<String> {
    let name = |m: u32| MONTH_NAMES[(m.clamp(1, 12) - 1) as usize];
    Some(match bits_shape(months, 1, 12) {
        Shape::All => return None,
        Shape::One(m) => format!("in {}", name(m)),
        Shape::Range(a, b) => format!("from {} through {}", name(a), name(b)),
        Shape::Step { .. } | Shape::List(_) => {
            let list: Vec<&str> = months.iter().map(name).collect();
            format!("in {}", join_and(&list))
        }
    })
}

fn year_phrase(s: &Schedule) -> Option<String> {
    if !s.has_year {
        return None;
    }
    let values: Vec<u32> = s.years.iter().map(|y| y.unsigned_abs()).collect();
    Some(
        match shape(&values, MIN_YEAR.unsigned_abs(), MAX_YEAR.unsigned_abs()) {
            Shape::All => return None,
            Shape::One(y) => format!("in {y}"),
            Shape::Range(a, b) => format!("in {a} through {b}"),
            Shape::Step {
                first, step, last, ..
            } => format!("every {step} years from {first} through {last}"),
            Shape::List(list) if list.is_empty() => "in no year".to_string(),
            Shape::List(list) => {
                let years: Vec<String> = list.iter().map(u32::to_string).collect();
                format!("in {}", join_and(&years))
            }
        },
    )
}
