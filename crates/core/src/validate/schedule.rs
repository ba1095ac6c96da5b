//! The job rules for `schedule` (its kind, cron, time zone, DST policy, calendars) and for
//! `retry`, as methods of the validation walker; each bad field is one error at its path.

use super::*;

impl Walker {
    /// `schedule.exclude_calendars`: names of calendars, each once, at most
    /// [`crate::calendar::MAX_CALENDARS_PER_SCHEDULE`].
    pub(crate) fn calendar_names(&mut self, schedule: &Map<String, Value>) -> Vec<String> {
        let path = "schedule.exclude_calendars";
        let items = match schedule.get("exclude_calendars") {
            None | Some(Value::Null) => return Vec::new(),
            Some(Value::Array(items)) => items,
            Some(other) => {
                self.err(
                    path,
                    format!(
                        "must be an array of calendar names, not {}",
                        type_name(other)
                    ),
                );
                return Vec::new();
            }
        };
        if items.len() > crate::calendar::MAX_CALENDARS_PER_SCHEDULE {
            self.err(
                path,
                format!(
                    "names {} calendars; at most {}",
                    items.len(),
                    crate::calendar::MAX_CALENDARS_PER_SCHEDULE
                ),
            );
            return Vec::new();
        }
        let mut names: Vec<String> = Vec::with_capacity(items.len());
        for (i, item) in items.iter().enumerate() {
            let field = format!("{path}.{i}");
            match item {
                Value::String(name) => match check_name(name) {
                    Err(m) => self.err(field, format!("'{name}': the name {m}")),
                    Ok(()) if names.contains(name) => {
                        self.err(field, format!("'{name}' is named twice"));
                    }
                    Ok(()) => names.push(name.clone()),
                },
                other => self.err(field, format!("must be a string, not {}", type_name(other))),
            }
        }
        names
    }

    /// A DST policy object at `path` (docs/cron.md, "DST policy"): `{"gap"?, "fold"?}`.
    pub(crate) fn dst(&mut self, value: &Value, path: &str) -> Option<DstSpec> {
        let obj = self.object(value, path)?;
        self.unknown_fields(obj, path, &["gap", "fold"], &[]);
        let mut spec = DstSpec::default();
        let gap_path = join(path, "gap");
        if let Some(text) = self.opt_str(obj, "gap", &gap_path) {
            match text.as_str() {
                "shift" => spec.gap = DstGap::Shift,
                "skip" => spec.gap = DstGap::Skip,
                _ => self.err(gap_path, format!("'{text}' is not one of shift, skip")),
            }
        }
        let fold_path = join(path, "fold");
        if let Some(text) = self.opt_str(obj, "fold", &fold_path) {
            match text.as_str() {
                "first" => spec.fold = DstFold::First,
                "last" => spec.fold = DstFold::Last,
                "both" => spec.fold = DstFold::Both,
                _ => self.err(
                    fold_path,
                    format!("'{text}' is not one of first, last, both"),
                ),
            }
        }
        Some(spec)
    }

    pub(crate) fn schedule(&mut self, value: &Value) -> Option<ScheduleSpec> {
        let obj = self.object(value, "schedule")?;
        self.unknown_fields(
            obj,
            "schedule",
            &[
                "cron",
                "timezone",
                "dst",
                "at",
                "every",
                "start_at",
                "end_at",
                "exclude_calendars",
            ],
            &[],
        );
        let start_at = self.instant(obj, "start_at", "schedule.start_at");
        let end_at = self.instant(obj, "end_at", "schedule.end_at");
        if let (Some(s), Some(e)) = (start_at, end_at)
            && e <= s
        {
            self.err("schedule.end_at", "must be later than schedule.start_at");
        }
        let kinds: Vec<&str> = ["cron", "at", "every"]
            .into_iter()
            .filter(|k| obj.get(*k).is_some_and(|v| !v.is_null()))
            .collect();
        let kind = match kinds.as_slice() {
            ["cron"] => {
                let cron = self.req_str(obj, "cron", "schedule.cron");
                if cron.as_ref().is_some_and(|c| c.len() > MAX_CRON_LEN) {
                    self.err(
                        "schedule.cron",
                        format!("is longer than {MAX_CRON_LEN} bytes"),
                    );
                    return None;
                }
                let timezone = self
                    .opt_str(obj, "timezone", "schedule.timezone")
                    .unwrap_or_else(|| "UTC".into());
                // Checked here, not left to `Schedule::compile`: compiling stops at the first
                // problem, and a bad zone must be named next to a bad or missing expression.
                if jiff::tz::TimeZone::get(&timezone).is_err() {
                    self.err(
                        "schedule.timezone",
                        format!("'{timezone}' is not a known IANA time zone"),
                    );
                    if let Some(Err(e)) = cron.as_deref().map(sundial_cron::Cron::parse) {
                        self.err("schedule.cron", e.to_string());
                    }
                    return None;
                }
                // The dialect's own rule is stored as no policy, so writing it out changes
                // nothing.
                let dst = obj
                    .get("dst")
                    .filter(|v| !v.is_null())
                    .and_then(|v| self.dst(v, "schedule.dst"))
                    .filter(|d| *d != DstSpec::default());
                cron.map(|cron| ScheduleKind::Cron {
                    cron,
                    timezone,
                    dst,
                })
            }
            ["at"] => {
                for key in ["timezone", "dst"] {
                    if obj.contains_key(key) {
                        self.err(join("schedule", key), "only applies to cron schedules");
                    }
                }
                self.instant(obj, "at", "schedule.at")
                    .map(|at| ScheduleKind::At { at })
            }
            ["every"] => {
                for key in ["timezone", "dst"] {
                    if obj.contains_key(key) {
                        self.err(join("schedule", key), "only applies to cron schedules");
                    }
                }
                let every = self.duration(obj, "every", "schedule.every", Dur::ZERO, true);
                (!every.is_zero()).then_some(ScheduleKind::Every { every })
            }
            [] => {
                self.err("schedule", "needs one of cron, at or every");
                None
            }
            many => {
                self.err(
                    "schedule",
                    format!(
                        "has {}; give exactly one of cron, at or every",
                        many.join(" and ")
                    ),
                );
                None
            }
        }?;
        let exclude_calendars = self.calendar_names(obj);
        let spec = ScheduleSpec {
            kind,
            start_at,
            end_at,
            exclude_calendars,
        };
        match Schedule::compile(&spec) {
            Ok(_) => Some(spec),
            Err(e) => {
                self.err(format!("schedule.{}", e.field), e.message);
                None
            }
        }
    }

    pub(crate) fn retry(&mut self, value: Option<&Value>) -> RetryPolicy {
        let default = RetryPolicy::default();
        let Some(value) = value.filter(|v| !v.is_null()) else {
            return default;
        };
        let Some(obj) = self.object(value, "retry") else {
            return default;
        };
        self.unknown_fields(
            obj,
            "retry",
            &[
                "max_attempts",
                "initial_interval",
                "multiplier",
                "max_interval",
                "jitter",
            ],
            &[],
        );
        let max_attempts = match obj.get("max_attempts") {
            None | Some(Value::Null) => default.max_attempts,
            Some(v) => match v.as_i64() {
                Some(n) if (1..=1000).contains(&n) => u32::try_from(n).unwrap_or(1),
                Some(n) => {
                    self.err("retry.max_attempts", format!("{n} is out of range 1-1000"));
                    default.max_attempts
                }
                None => {
                    self.err(
                        "retry.max_attempts",
                        format!("must be a whole number, not {v}"),
                    );
                    default.max_attempts
                }
            },
        };
        let multiplier = match obj.get("multiplier") {
            None | Some(Value::Null) => default.multiplier,
            Some(v) => match v.as_f64() {
                Some(m) if (1.0..=100.0).contains(&m) => m,
                _ => {
                    self.err(
                        "retry.multiplier",
                        format!("{v} is not a number in 1.0-100.0"),
                    );
                    default.multiplier
                }
            },
        };
        let initial_interval = self.duration(
            obj,
            "initial_interval",
            "retry.initial_interval",
            default.initial_interval,
            true,
        );
        let max_interval = self.duration(
            obj,
            "max_interval",
            "retry.max_interval",
            default.max_interval,
            true,
        );
        if max_interval < initial_interval {
            self.err(
                "retry.max_interval",
                "must not be shorter than retry.initial_interval",
            );
        }
        let jitter = self
            .opt_bool(obj, "jitter", "retry.jitter")
            .unwrap_or(default.jitter);
        RetryPolicy {
            max_attempts,
            initial_interval,
            multiplier,
            max_interval,
            jitter,
        }
    }
}
