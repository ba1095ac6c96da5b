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
use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
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

/// What [`parse_json`] refuses.
#[derive(Debug)]
pub enum JsonError {
    /// Not JSON, or JSON followed by more text: the parser's message, with line and column.
    Syntax(String),
    /// An object holds a key twice: which one and where (its dotted path), since only one of
    /// the two values could be kept and the writer cannot know which (RFC 8259, section 4:
    /// "The names within an object SHOULD be unique").
    DuplicateKey(FieldError),
}

/// Parses a request body as one JSON value, refusing an object that holds a key twice (which
/// `serde_json` would read as the last of them, silently dropping the first).
///
/// # Errors
/// [`JsonError::Syntax`] for text that is not one JSON value; [`JsonError::DuplicateKey`]
/// naming the path of the first key found twice.
pub fn parse_json(bytes: &[u8]) -> Result<Value, JsonError> {
    let mut de = serde_json::Deserializer::from_slice(bytes);
    let mut duplicate = None;
    let seed = Unique {
        path: String::new(),
        duplicate: &mut duplicate,
    };
    let value = match seed.deserialize(&mut de) {
        Ok(v) => v,
        Err(e) => {
            return Err(match duplicate {
                Some(field) => JsonError::DuplicateKey(field),
                None => JsonError::Syntax(e.to_string()),
            });
        }
    };
    de.end().map_err(|e| JsonError::Syntax(e.to_string()))?;
    Ok(value)
}

/// A JSON value read at `path`, recording the first key found twice in `duplicate`.
struct Unique<'a> {
    path: String,
    duplicate: &'a mut Option<FieldError>,
}

impl<'de> DeserializeSeed<'de> for Unique<'_> {
    type Value = Value;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Value, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Unique<'_> {
    type Value = Value;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }

    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(Value::from(v))
    }

    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(Value::from(v))
    }

    fn visit_f64<E>(self, v: f64) -> Result<Value, E> {
        Ok(serde_json::Number::from_f64(v).map_or(Value::Null, Value::Number))
    }

    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_owned()))
    }

    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }

    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_none<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut items = Vec::new();
        while let Some(item) = seq.next_element_seed(Unique {
            path: join(&self.path, &items.len().to_string()),
            duplicate: &mut *self.duplicate,
        })? {
            items.push(item);
        }
        Ok(Value::Array(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut object = Map::new();
        while let Some(key) = map.next_key::<String>()? {
            let path = join(&self.path, &key);
            if object.contains_key(&key) {
                *self.duplicate = Some(FieldError::new(
                    &path,
                    "is given twice in one object; give each key once",
                ));
                return Err(de::Error::custom(format!("duplicate key '{path}'")));
            }
            let value = map.next_value_seed(Unique {
                path,
                duplicate: &mut *self.duplicate,
            })?;
            object.insert(key, value);
        }
        Ok(Value::Object(object))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_body_parses_as_serde_json_reads_it() {
        let text =
            r#"{"a": [1, -2, 18446744073709551615, 1.5, "x", null, true, {"b": {}}], "c": "é"}"#;
        let ours = parse_json(text.as_bytes()).expect("parses");
        let theirs: Value = serde_json::from_str(text).expect("parses");
        assert_eq!(ours, theirs);
    }

    #[test]
    fn a_key_given_twice_is_named_by_its_path() {
        let cases = [
            (r#"{"a": 1, "a": 2}"#, "a"),
            (r#"{"s": {"cron": "x", "cron": "y"}}"#, "s.cron"),
            (r#"[{"k": 1}, {"k": 1, "k": 1}]"#, "1.k"),
            (r#"{"t": {"h": [{"x": {"y": 1, "y": 1}}]}}"#, "t.h.0.x.y"),
        ];
        for (text, path) in cases {
            match parse_json(text.as_bytes()) {
                Err(JsonError::DuplicateKey(field)) => assert_eq!(field.field, path, "{text}"),
                other => panic!("{text}: {other:?}"),
            }
        }
    }

    #[test]
    fn text_that_is_not_one_json_value_is_a_syntax_error() {
        for text in ["", "{", "{} {}", "{\"a\": }", "nul", "[1,]"] {
            assert!(
                matches!(parse_json(text.as_bytes()), Err(JsonError::Syntax(_))),
                "{text}"
            );
        }
    }

    #[test]
    fn the_same_key_in_two_objects_is_no_duplicate() {
        let value = parse_json(br#"{"a": {"k": 1}, "b": {"k": 2}, "k": 3}"#).expect("parses");
        assert_eq!(value["b"]["k"], 2);
    }
}
