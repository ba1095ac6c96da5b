//! The holiday calendar resource (docs/time.md, "Calendars"): its JSON, its
//! validation naming every bad field, and its compiled form for the cron engine.
//!
//! Invariants: [`calendar_from_json`] either returns a spec that [`CalendarSpec::compile`]
//! turns into a [`sundial_cron::Calendar`] without error, or at least one [`FieldError`];
//! it never panics.

use jiff::civil::Date;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::field_error::FieldError;

/// Most exclusion items one calendar may hold.
pub const MAX_EXCLUSIONS: usize = 1000;

/// Most calendars one schedule may name in `exclude_calendars`.
pub const MAX_CALENDARS_PER_SCHEDULE: usize = 16;

/// A calendar as written. JSON: `{"timezone": TZ, "exclude": [ITEM, ...], "description"?}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct CalendarSpec {
    /// IANA zone its dates are local days of; `UTC` by default.
    #[serde(default = "utc")]
    pub timezone: String,
    /// What it excludes, at most [`MAX_EXCLUSIONS`] items.
    pub exclude: Vec<ExclusionSpec>,
    /// Free text for people.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub description: String,
}

fn utc() -> String {
    "UTC".to_owned()
}

/// One exclusion item. JSON: `{"date": "2026-12-25"}` | `{"from": DATE, "to": DATE}`
/// (both days included) | `{"cron": EXPR}` (every day whose year, month and day the expression
/// matches; its time fields are ignored).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(untagged)]
pub enum ExclusionSpec {
    /// One local date.
    Date {
        /// The date, `YYYY-MM-DD`.
        #[schema(value_type = String)]
        date: Date,
    },
    /// A range of local dates, both ends included.
    Range {
        /// First excluded date.
        #[schema(value_type = String)]
        from: Date,
        /// Last excluded date.
        #[schema(value_type = String)]
        to: Date,
    },
    /// The days a cron expression matches.
    Cron {
        /// The expression (docs/cron.md).
        cron: String,
    },
}

impl CalendarSpec {
    /// The engine's form.
    ///
    /// # Errors
    /// A message for an unknown zone or an invalid expression; [`calendar_from_json`] refuses
    /// both first, so a stored calendar compiles.
    pub fn compile(&self) -> Result<sundial_cron::Calendar, String> {
        let tz = jiff::tz::TimeZone::get(&self.timezone)
            .map_err(|_| format!("'{}' is not a known IANA time zone", self.timezone))?;
        let mut items = Vec::with_capacity(self.exclude.len());
        for e in &self.exclude {
            items.push(match e {
                ExclusionSpec::Date { date } => sundial_cron::Exclusion::Date(*date),
                ExclusionSpec::Range { from, to } => sundial_cron::Exclusion::Range {
                    from: *from,
                    to: *to,
                },
                ExclusionSpec::Cron { cron } => sundial_cron::Exclusion::Cron(Box::new(
                    sundial_cron::Cron::parse(cron).map_err(|e| e.to_string())?,
                )),
            });
        }
        Ok(sundial_cron::Calendar::new(tz, items))
    }
}

/// Turns untrusted JSON into a [`CalendarSpec`], naming every bad field (`timezone`,
/// `exclude.3.date`, `exclude.5.cron`, ...) (docs/guarantees.md#g7-bad-input).
///
/// # Errors
/// Every bad field: not an object, an unknown member, an unknown zone, a missing or oversized
/// `exclude`, an item with no or several of `date` / `from`+`to` / `cron`, a date that is not
/// `YYYY-MM-DD`, a range whose `to` is before its `from`, an invalid expression.
pub fn calendar_from_json(body: &Value) -> Result<CalendarSpec, Vec<FieldError>> {
    let mut errors = Vec::new();
    let Some(obj) = body.as_object() else {
        return Err(vec![FieldError::new("", "the body must be a JSON object")]);
    };
    const KNOWN: [&str; 3] = ["timezone", "exclude", "description"];
    const READ_ONLY: [&str; 6] = [
        "namespace",
        "name",
        "version",
        "created_at",
        "updated_at",
        "used_by",
    ];
    for key in obj.keys() {
        if !KNOWN.contains(&key.as_str()) && !READ_ONLY.contains(&key.as_str()) {
            errors.push(FieldError::new(
                key.clone(),
                format!("unknown field; expected one of {}", KNOWN.join(", ")),
            ));
        }
    }
    let timezone = match obj.get("timezone") {
        None | Some(Value::Null) => "UTC".to_owned(),
        Some(Value::String(s)) => {
            if jiff::tz::TimeZone::get(s).is_err() {
                errors.push(FieldError::new(
                    "timezone",
                    format!("'{s}' is not a known IANA time zone"),
                ));
            }
            s.clone()
        }
        Some(_) => {
            errors.push(FieldError::new("timezone", "must be a string"));
            String::new()
        }
    };
    let description = match obj.get("description") {
        None | Some(Value::Null) => String::new(),
        Some(Value::String(s)) if s.len() <= 4096 => s.clone(),
        Some(Value::String(_)) => {
            errors.push(FieldError::new("description", "is longer than 4096 bytes"));
            String::new()
        }
        Some(_) => {
            errors.push(FieldError::new("description", "must be a string"));
            String::new()
        }
    };
    let mut exclude = Vec::new();
    match obj.get("exclude") {
        Some(Value::Array(items)) if items.len() > MAX_EXCLUSIONS => errors.push(FieldError::new(
            "exclude",
            format!("holds {} items; at most {MAX_EXCLUSIONS}", items.len()),
        )),
        Some(Value::Array(items)) => {
            for (i, item) in items.iter().enumerate() {
                if let Some(e) = exclusion(item, &format!("exclude.{i}"), &mut errors) {
                    exclude.push(e);
                }
            }
        }
        None | Some(Value::Null) => errors.push(FieldError::new(
            "exclude",
            "is required: an array of exclusions",
        )),
        Some(_) => errors.push(FieldError::new("exclude", "must be an array")),
    }
    if errors.is_empty() {
        Ok(CalendarSpec {
            timezone,
            exclude,
            description,
        })
    } else {
        Err(errors)
    }
}

fn exclusion(item: &Value, path: &str, errors: &mut Vec<FieldError>) -> Option<ExclusionSpec> {
    let Some(obj) = item.as_object() else {
        errors.push(FieldError::new(
            path,
            "must be an object: {\"date\"}, {\"from\", \"to\"} or {\"cron\"}",
        ));
        return None;
    };
    for key in obj.keys() {
        if !["date", "from", "to", "cron"].contains(&key.as_str()) {
            errors.push(FieldError::new(
                format!("{path}.{key}"),
                "unknown field; expected date, from and to, or cron",
            ));
        }
    }
    let date = |key: &str, errors: &mut Vec<FieldError>| -> Option<Date> {
        match obj.get(key)? {
            Value::String(s) => match s.parse::<Date>() {
                Ok(d) if s.len() == 10 => Some(d),
                _ => {
                    errors.push(FieldError::new(
                        format!("{path}.{key}"),
                        format!("'{s}' is not a date YYYY-MM-DD"),
                    ));
                    None
                }
            },
            _ => {
                errors.push(FieldError::new(
                    format!("{path}.{key}"),
                    "must be a date string YYYY-MM-DD",
                ));
                None
            }
        }
    };
    let kinds = [
        obj.contains_key("date"),
        obj.contains_key("from") || obj.contains_key("to"),
        obj.contains_key("cron"),
    ];
    if kinds.iter().filter(|k| **k).count() != 1 {
        errors.push(FieldError::new(
            path,
            "give exactly one of date, from and to, or cron",
        ));
        return None;
    }
    if kinds[0] {
        return date("date", errors).map(|date| ExclusionSpec::Date { date });
    }
    if kinds[1] {
        let (from, to) = (date("from", errors), date("to", errors));
        if !obj.contains_key("from") {
            errors.push(FieldError::new(
                format!("{path}.from"),
                "is required with to",
            ));
        }
        if !obj.contains_key("to") {
            errors.push(FieldError::new(
                format!("{path}.to"),
                "is required with from",
            ));
        }
        let (from, to) = (from?, to?);
        if to < from {
            errors.push(FieldError::new(
                format!("{path}.to"),
                format!("{to} is before from {from}"),
            ));
            return None;
        }
        return Some(ExclusionSpec::Range { from, to });
    }
    match obj.get("cron") {
        Some(Value::String(text)) => match sundial_cron::Cron::parse(text) {
            Ok(_) => Some(ExclusionSpec::Cron { cron: text.clone() }),
            Err(e) => {
                errors.push(FieldError::new(format!("{path}.cron"), e.to_string()));
                None
            }
        },
        _ => {
            errors.push(FieldError::new(format!("{path}.cron"), "must be a string"));
            None
        }
    }
}

/// A namespace's calendars, compiled, by name (docs/time.md, "Calendars").
pub type NsCalendars = std::collections::HashMap<String, sundial_cron::Calendar>;

/// The calendars of `calendars` that `schedule` names, in its order (a name with no calendar
/// is left out: it excludes nothing, as the scheduler treats it).
pub fn named_calendars(
    schedule: &crate::job::ScheduleSpec,
    calendars: &NsCalendars,
) -> Vec<sundial_cron::Calendar> {
    schedule
        .exclude_calendars
        .iter()
        .filter_map(|n| calendars.get(n).cloned())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_valid_calendar_round_trips_and_compiles() {
        let v = json!({"timezone": "Europe/Berlin", "exclude": [
            {"date": "2026-12-25"}, {"from": "2026-12-24", "to": "2027-01-02"}, {"cron": "* * * * SAT,SUN"}]});
        let spec = calendar_from_json(&v).expect("valid");
        assert_eq!(serde_json::to_value(&spec).expect("serializes"), v);
        let cal = spec.compile().expect("compiles");
        assert!(cal.excludes(jiff::civil::date(2026, 12, 31)));
    }

    #[test]
    fn every_bad_field_is_named() {
        let v = json!({"timezone": "Mars/Olympus", "colour": 1, "exclude": [
            {"date": "2026-13-01"}, {"from": "2026-02-01", "to": "2026-01-01"}, {"cron": "61 * * * *"},
            {"date": "2026-01-01", "cron": "* * * * *"}, {"from": "2026-01-01"}, "x", {"when": "x"}]});
        let fields: Vec<String> = calendar_from_json(&v)
            .expect_err("invalid")
            .into_iter()
            .map(|e| e.field)
            .collect();
        assert_eq!(
            fields,
            [
                "colour",
                "timezone",
                "exclude.0.date",
                "exclude.1.to",
                "exclude.2.cron",
                "exclude.3",
                "exclude.4.to",
                "exclude.5",
                "exclude.6.when",
                "exclude.6"
            ]
        );
        assert_eq!(
            calendar_from_json(&json!({})).expect_err("no exclude")[0].field,
            "exclude"
        );
    }
}
