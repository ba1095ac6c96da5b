//! The job resource (docs/policies.md): what a user writes, after validation.
//!
//! A [`JobSpec`] is only built by [`crate::validate::job_from_json`] (untrusted input) or by
//! deserializing what a store wrote (trusted). Its JSON form is the writable half of the API's
//! job resource; the read-only half (`state`, `version`, timestamps, `next_fire_at`) lives with
//! the store's record of the job.

use std::collections::BTreeMap;

use jiff::Timestamp;
use serde::{Deserialize, Serialize};

use crate::duration::Dur;
use crate::retry::RetryPolicy;

/// A validated job definition. Field meanings and defaults are those of docs/policies.md.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct JobSpec {
    /// Tenant; a name matching [`crate::names::check_name`].
    pub namespace: String,
    /// Job name, unique in its namespace.
    pub name: String,
    /// Free text.
    #[serde(default)]
    pub description: String,
    /// Free-form labels, filterable with `?label=k=v`.
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    /// When the job fires.
    pub schedule: ScheduleSpec,
    /// What a run does.
    pub target: TargetSpec,
    /// Attempts and backoff.
    pub retry: RetryPolicy,
    /// Per-attempt timeout; a timed-out attempt is a transient failure. Default `5m`.
    pub timeout: Dur,
    /// A worker renews its attempt lease at least every third of this. Default `30s`.
    pub heartbeat_timeout: Dur,
    /// What happens when runs overlap. Default `allow`.
    pub concurrency_policy: ConcurrencyPolicy,
    /// What happens to slots that passed while no scheduler could fire them. Default `run_once`.
    pub misfire_policy: MisfirePolicy,
    /// A slot later than this when the scheduler reaches it is a misfire. Default `60s`.
    pub misfire_threshold: Dur,
    /// Each slot's fire time is offset by a deterministic value in `[0, jitter)`. Default `0s`.
    pub jitter: Dur,
    /// A paused job fires nothing; slots passing meanwhile are not fired.
    #[serde(default)]
    pub paused: bool,
}

/// A schedule and its bounds. JSON: `{"cron": EXPR, "timezone": TZ}` | `{"at": INSTANT}` |
/// `{"every": DURATION}`, each with optional `start_at` / `end_at`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ScheduleSpec {
    /// The rule that yields slots.
    #[serde(flatten)]
    pub kind: ScheduleKind,
    /// No slot before this instant; for `every`, the anchor of the slot grid.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_at: Option<Timestamp>,
    /// No slot after this instant; past it the job is `completed`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub end_at: Option<Timestamp>,
    /// Holiday calendars of the namespace (docs/time.md, "Calendars"): a slot on a date one of
    /// them excludes, read in that calendar's zone, is not fired and not recorded. At most 16.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub exclude_calendars: Vec<String>,
}

/// The rule that yields slots.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(untagged)]
pub enum ScheduleKind {
    /// A cron expression (docs/cron.md) in an IANA time zone.
    Cron {
        /// The expression text.
        cron: String,
        /// IANA zone name; `UTC` by default.
        timezone: String,
        /// What a fixed-time expression does with wall times a DST change skips or repeats;
        /// absent: the dialect's rule (`gap: shift`, `fold: first`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        dst: Option<DstSpec>,
    },
    /// One instant.
    At {
        /// The slot.
        at: Timestamp,
    },
    /// A fixed rate: slots at `start_at + k·every`, `k ≥ 0`. At least `1s`.
    Every {
        /// The interval.
        every: Dur,
    },
}

/// A cron schedule's DST policy (docs/cron.md, "DST policy"). JSON:
/// `{"gap": "shift" | "skip", "fold": "first" | "last" | "both"}`, each member optional
/// (`shift` and `first` by default). It changes only fixed-time expressions: one whose second,
/// minute and hour fields do not start with `*`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct DstSpec {
    /// A wall time the clock skips: `shift` fires it when the gap ends, `skip` does not.
    #[serde(default)]
    pub gap: DstGap,
    /// A wall time the clock repeats: `first` fires its first instant, `last` its second,
    /// `both` each.
    #[serde(default)]
    pub fold: DstFold,
}

/// The `gap` member of [`DstSpec`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum DstGap {
    /// Fire at the first instant after the gap (the default).
    #[default]
    Shift,
    /// Do not fire.
    Skip,
}

/// The `fold` member of [`DstSpec`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum DstFold {
    /// The first of the two instants (the default).
    #[default]
    First,
    /// The second.
    Last,
    /// Each of them: two slots.
    Both,
}

impl From<DstSpec> for sundial_cron::DstPolicy {
    fn from(spec: DstSpec) -> Self {
        sundial_cron::DstPolicy {
            gap: match spec.gap {
                DstGap::Shift => sundial_cron::Gap::Shift,
                DstGap::Skip => sundial_cron::Gap::Skip,
            },
            fold: match spec.fold {
                DstFold::First => sundial_cron::Fold::First,
                DstFold::Last => sundial_cron::Fold::Last,
                DstFold::Both => sundial_cron::Fold::Both,
            },
        }
    }
}

/// What a run of the job does (docs/failure-classes.md). JSON is internally tagged by `type`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum TargetSpec {
    /// An HTTP request.
    Http(HttpTarget),
    /// A JetStream publish.
    Nats(NatsTarget),
    /// An AMQP publish with publisher confirms.
    Amqp(AmqpTarget),
    /// An `XADD` to a Redis stream.
    Redis(RedisTarget),
    /// A container run through the Docker Engine API.
    Container(ContainerTarget),
}

impl TargetSpec {
    /// The `type` tag: `http`, `nats`, `amqp`, `redis` or `container`.
    pub fn kind(&self) -> &'static str {
        match self {
            TargetSpec::Http(_) => "http",
            TargetSpec::Nats(_) => "nats",
            TargetSpec::Amqp(_) => "amqp",
            TargetSpec::Redis(_) => "redis",
            TargetSpec::Container(_) => "container",
        }
    }

    /// The named connection from server config the target uses; `None` for HTTP.
    pub fn connection(&self) -> Option<&str> {
        match self {
            TargetSpec::Http(_) => None,
            TargetSpec::Nats(t) => Some(&t.connection),
            TargetSpec::Amqp(t) => Some(&t.connection),
            TargetSpec::Redis(t) => Some(&t.connection),
            TargetSpec::Container(t) => Some(&t.connection),
        }
    }
}

/// `{"type":"http", "method", "url", "headers", "body", "success_codes"}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct HttpTarget {
    /// Upper-case HTTP method; default `POST`.
    pub method: String,
    /// Absolute `http` or `https` URL.
    pub url: String,
    /// Extra request headers.
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    /// Request body.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub body: Option<String>,
    /// Statuses that count as success; empty means any 2xx.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub success_codes: Vec<u16>,
}

/// `{"type":"nats", "connection", "subject", "payload", "headers"}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct NatsTarget {
    /// Named connection of type `nats`.
    pub connection: String,
    /// Subject to publish on.
    pub subject: String,
    /// Message payload.
    #[serde(default)]
    pub payload: String,
    /// Message headers.
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
}

/// `{"type":"amqp", "connection", "exchange", "routing_key", "payload", "properties"}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct AmqpTarget {
    /// Named connection of type `amqp`.
    pub connection: String,
    /// Exchange name (empty for the default exchange).
    #[serde(default)]
    pub exchange: String,
    /// Routing key.
    pub routing_key: String,
    /// Message body.
    #[serde(default)]
    pub payload: String,
    /// Message properties (headers).
    #[serde(default)]
    pub properties: BTreeMap<String, String>,
}

/// `{"type":"redis", "connection", "stream", "fields"}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct RedisTarget {
    /// Named connection of type `redis`.
    pub connection: String,
    /// Stream key.
    pub stream: String,
    /// Entry fields; `execution_id` is added.
    #[serde(default)]
    pub fields: BTreeMap<String, String>,
}

/// `{"type":"container", "connection", "image", "command", "env", "permanent_exit_codes"}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ContainerTarget {
    /// Named connection of type `container`.
    pub connection: String,
    /// Image reference.
    pub image: String,
    /// Command and arguments.
    #[serde(default)]
    pub command: Vec<String>,
    /// Environment; `SUNDIAL_*` variables are added.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// Exit codes that fail the execution for good.
    #[serde(default)]
    pub permanent_exit_codes: Vec<i64>,
}

/// What happens when a slot comes due while an earlier execution of the job is not finished.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum ConcurrencyPolicy {
    /// Runs may overlap (the default).
    #[default]
    Allow,
    /// A slot that comes due while an execution of the job is running or queued is recorded
    /// as `skipped` and not run.
    Skip,
    /// The running execution is cancelled and the new one starts.
    Replace,
}

/// What happens to the slots of a misfire episode (docs/policies.md, "misfire_policy").
///
/// Timeline for an every-minute job whose scheduler was down from 10:00:30 to 10:03:30 with a
/// `60s` threshold — the episode is the slots 10:01, 10:02 and 10:03:
/// - `run_once`: 10:03 runs once (`trigger: misfire`); 10:01 and 10:02 are `missed`.
/// - `run_all`: 10:01, 10:02, 10:03 all run, oldest first (at most `max_catchup` = 1000).
/// - `skip`: 10:01 and 10:02 (older than the threshold) are `missed`; 10:03 runs as a late slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum MisfirePolicy {
    /// One outage, one run: the latest slot of the episode runs (the default).
    #[default]
    RunOnce,
    /// Every slot of the episode runs, oldest first, at most [`MAX_CATCHUP`].
    RunAll,
    /// Slots older than the threshold are `missed`; younger ones run late.
    Skip,
}

/// Most slots of one misfire episode that `run_all` runs; older ones are `missed`.
pub const MAX_CATCHUP: usize = 1000;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schedule_json_is_flat_as_in_the_spec() {
        let s: ScheduleSpec =
            serde_json::from_str(r#"{"cron":"0 2 * * *","timezone":"Europe/Berlin"}"#).unwrap();
        assert!(matches!(s.kind, ScheduleKind::Cron { .. }));
        let s: ScheduleSpec = serde_json::from_str(r#"{"every":"30s"}"#).unwrap();
        assert_eq!(
            s.kind,
            ScheduleKind::Every {
                every: Dur::from_secs(30)
            }
        );
        let back = serde_json::to_value(&s).unwrap();
        assert_eq!(back, serde_json::json!({"every": "30s"}));
    }
}
