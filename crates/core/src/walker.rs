//! The toolkit every validation of a JSON body walks with: a [`Walker`] gathers one
//! [`FieldError`] per bad field (its dotted path and the reason) instead of stopping at the
//! first, and reads typed values (strings, booleans, maps, lists, durations, instants, enums)
//! from objects, naming the field of each refusal. The job rules (`validate.rs`) and the
//! workflow rules (`workflow/validate.rs`) are written with it.
//!
//! Invariant: a read that fails records exactly one error, at the path of the field it read,
//! and returns `None` (or the empty value); it never panics on any JSON.

use std::collections::BTreeMap;

use jiff::Timestamp;
use serde_json::{Map, Value};

use crate::duration::Dur;
use crate::field_error::FieldError;

/// The errors found so far by one walk over a body.
#[derive(Default)]
pub(crate) struct Walker {
    pub(crate) errors: Vec<FieldError>,
}

pub(crate) fn join(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_owned()
    } else {
        format!("{path}.{key}")
    }
}

pub(crate) fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

impl Walker {
    /// Runs `f` on a fresh walker and keeps its errors with their fields under `prefix`
    /// (`tasks[2]` + `target.url` → `tasks[2].target.url`).
    pub(crate) fn nested<T>(&mut self, prefix: &str, f: impl FnOnce(&mut Walker) -> T) -> T {
        let mut inner = Walker::default();
        let out = f(&mut inner);
        self.errors.extend(
            inner
                .errors
                .into_iter()
                .map(|e| FieldError::new(join(prefix, &e.field), e.message)),
        );
        out
    }
    pub(crate) fn err(&mut self, field: impl Into<String>, message: impl Into<String>) {
        self.errors.push(FieldError::new(field, message));
    }

    pub(crate) fn unknown_fields(
        &mut self,
        obj: &Map<String, Value>,
        path: &str,
        known: &[&str],
        ignored: &[&str],
    ) {
        for key in obj.keys() {
            if !known.contains(&key.as_str()) && !ignored.contains(&key.as_str()) {
                self.err(
                    join(path, key),
                    format!("unknown field; expected one of {}", known.join(", ")),
                );
            }
        }
    }

    pub(crate) fn object<'a>(
        &mut self,
        value: &'a Value,
        path: &str,
    ) -> Option<&'a Map<String, Value>> {
        match value {
            Value::Object(o) => Some(o),
            other => {
                self.err(path, format!("must be an object, not {}", type_name(other)));
                None
            }
        }
    }

    pub(crate) fn opt_str(
        &mut self,
        obj: &Map<String, Value>,
        key: &str,
        path: &str,
    ) -> Option<String> {
        match obj.get(key)? {
            Value::String(s) => Some(s.clone()),
            Value::Null => None,
            other => {
                self.err(path, format!("must be a string, not {}", type_name(other)));
                None
            }
        }
    }

    pub(crate) fn req_str(
        &mut self,
        obj: &Map<String, Value>,
        key: &str,
        path: &str,
    ) -> Option<String> {
        if !obj.contains_key(key) || obj.get(key).is_some_and(Value::is_null) {
            self.err(path, "is required");
            return None;
        }
        let s = self.opt_str(obj, key, path)?;
        if s.trim().is_empty() {
            self.err(path, "must not be empty");
            return None;
        }
        Some(s)
    }

    pub(crate) fn opt_bool(
        &mut self,
        obj: &Map<String, Value>,
        key: &str,
        path: &str,
    ) -> Option<bool> {
        match obj.get(key)? {
            Value::Bool(b) => Some(*b),
            Value::Null => None,
            other => {
                self.err(path, format!("must be a boolean, not {}", type_name(other)));
                None
            }
        }
    }

    pub(crate) fn string_map(
        &mut self,
        value: Option<&Value>,
        path: &str,
    ) -> BTreeMap<String, String> {
        let mut out = BTreeMap::new();
        let Some(value) = value.filter(|v| !v.is_null()) else {
            return out;
        };
        let Some(obj) = self.object(value, path) else {
            return out;
        };
        for (k, v) in obj {
            match v {
                Value::String(s) => {
                    out.insert(k.clone(), s.clone());
                }
                other => self.err(
                    join(path, k),
                    format!("must be a string, not {}", type_name(other)),
                ),
            }
        }
        out
    }

    pub(crate) fn duration(
        &mut self,
        obj: &Map<String, Value>,
        key: &str,
        path: &str,
        default: Dur,
        positive: bool,
    ) -> Dur {
        let Some(text) = self.opt_str(obj, key, path) else {
            return default;
        };
        match text.parse::<Dur>() {
            Ok(d) if positive && d.is_zero() => {
                self.err(path, "must be greater than zero");
                default
            }
            Ok(d) => d,
            Err(e) => {
                self.err(path, e.to_string());
                default
            }
        }
    }

    pub(crate) fn instant(
        &mut self,
        obj: &Map<String, Value>,
        key: &str,
        path: &str,
    ) -> Option<Timestamp> {
        let text = self.opt_str(obj, key, path)?;
        match text.parse::<Timestamp>() {
            Ok(t) => Some(crate::truncate_ms(t)),
            Err(e) => {
                self.err(
                    path,
                    format!(
                        "'{text}' is not an RFC 3339 instant in the range Sundial keeps, up to 9999-12-30T22:00:00Z (e.g. 2026-11-30T10:00:00Z): {e}"
                    ),
                );
                None
            }
        }
    }

    pub(crate) fn enumeration<T: Copy>(
        &mut self,
        obj: &Map<String, Value>,
        key: &str,
        options: &[(&str, T)],
        default: T,
    ) -> T {
        let Some(text) = self.opt_str(obj, key, key) else {
            return default;
        };
        match options.iter().find(|(name, _)| *name == text) {
            Some((_, value)) => *value,
            None => {
                let names: Vec<_> = options.iter().map(|(n, _)| *n).collect();
                self.err(key, format!("'{text}' is not one of {}", names.join(", ")));
                default
            }
        }
    }

    pub(crate) fn string_list(&mut self, value: Option<&Value>, path: &str) -> Vec<String> {
        match value {
            None | Some(Value::Null) => Vec::new(),
            Some(Value::Array(items)) => items
                .iter()
                .enumerate()
                .filter_map(|(i, v)| match v {
                    Value::String(s) => Some(s.clone()),
                    other => {
                        self.err(
                            format!("{path}.{i}"),
                            format!("must be a string, not {}", type_name(other)),
                        );
                        None
                    }
                })
                .collect(),
            Some(other) => {
                self.err(
                    path,
                    format!("must be an array of strings, not {}", type_name(other)),
                );
                Vec::new()
            }
        }
    }
}

/// Applies a JSON merge patch (RFC 7396) to `target` in place: objects merge recursively,
/// `null` removes a member, anything else replaces.
pub fn merge_patch(target: &mut Value, patch: &Value) {
    let Value::Object(patch) = patch else {
        *target = patch.clone();
        return;
    };
    if !target.is_object() {
        *target = Value::Object(Map::new());
    }
    if let Value::Object(obj) = target {
        for (key, value) in patch {
            if value.is_null() {
                obj.remove(key);
            } else {
                merge_patch(obj.entry(key.clone()).or_insert(Value::Null), value);
            }
        }
    }
}

/// Every string or object key in `body` that holds the NUL character (U+0000), as a field
/// error naming its dotted path (`description`, `jobs.2.labels.team`, as `jobs:apply` names
/// the fields of its jobs): no store keeps it the same
/// way (PostgreSQL's `text` and `jsonb` refuse it, SQLite keeps it), and no target can carry
/// it in a header or a subject, so a body holding one is refused whole, before any other
/// check, and nothing is written. At most 10 are named.
pub fn nul_characters(body: &Value) -> Vec<FieldError> {
    fn walk(v: &Value, path: &str, out: &mut Vec<FieldError>) {
        if out.len() >= 10 {
            return;
        }
        match v {
            Value::String(s) if s.contains('\0') => {
                out.push(FieldError::new(
                    path,
                    "must not contain the NUL character (U+0000)",
                ));
            }
            Value::Array(items) => {
                for (i, item) in items.iter().enumerate() {
                    walk(item, &join(path, &i.to_string()), out);
                }
            }
            Value::Object(obj) => {
                for (k, item) in obj {
                    if k.contains('\0') {
                        out.push(FieldError::new(
                            path,
                            "keys must not contain the NUL character (U+0000)",
                        ));
                    } else {
                        walk(item, &join(path, k), out);
                    }
                }
            }
            _ => {}
        }
    }
    let mut out = Vec::new();
    walk(body, "", &mut out);
    out
}
