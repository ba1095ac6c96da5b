//! Traces of executions (docs/operations.md#traces): one trace per execution, whose id is
//! the execution's UUID; a `trigger` span when the scheduler (or a manual trigger) creates the
//! execution for its slot, and an `attempt` span, the trigger's child, for every attempt a
//! worker makes. With `OTEL_EXPORTER_OTLP_ENDPOINT` (or `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`)
//! set, [`layer`] exports these spans over OTLP/HTTP (protobuf) through `tracing-opentelemetry`
//! and the OpenTelemetry SDK's batch processor (its `OTEL_BSP_*` variables apply).
//!
//! Invariants this module keeps:
//! - **Every id is derived, none is stored or sent between processes.** The trace id is the
//!   execution's UUID ([`trace_id`]); the trigger span's id is [`span_id`]`(id, 0)` and attempt
//!   n's is [`span_id`]`(id, n)`. So the scheduler that fired a slot and the worker that runs
//!   its third attempt, in different processes, put their spans in one trace with the right
//!   parent, and the `traceparent` a delivery carries ([`traceparent`]) names exactly the
//!   attempt span that is exported, so the receiver's own spans become its children.
//! - **Nothing is built per execution unless exporting is on**: [`enabled`] is one atomic
//!   load, and the span helpers return [`tracing::Span::none`] when it is false. Exporting
//!   never blocks an execution: spans go to a bounded queue that a background thread drains,
//!   and a full queue drops spans, never waits.
//! - Only spans of the target [`TARGET`] reach the exporter; logs do not.

use std::cell::Cell;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, Ordering};

use jiff::Timestamp;
use opentelemetry::trace::{
    SpanContext, SpanId, TraceContextExt, TraceFlags, TraceId, TraceState, TracerProvider,
};
use opentelemetry_sdk::trace::{IdGenerator, RandomIdGenerator, SdkTracerProvider};
use tracing_opentelemetry::OpenTelemetrySpanExt as _;
use tracing_subscriber::Layer;
use tracing_subscriber::registry::LookupSpan;

/// The `tracing` target of the spans this module makes; the exporting layer sees no other.
pub const TARGET: &str = "sundial::trace";

/// The environment variables of the OTLP exporter's endpoint (OpenTelemetry's "OTLP Exporter
/// Configuration"): either turns exporting on.
pub const ENDPOINT_VARS: [&str; 2] = [
    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
    "OTEL_EXPORTER_OTLP_ENDPOINT",
];

static ENABLED: AtomicBool = AtomicBool::new(false);
static PROVIDER: OnceLock<SdkTracerProvider> = OnceLock::new();

/// The OTLP endpoint configured, as (variable, value): `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`
/// when set and not empty, else `OTEL_EXPORTER_OTLP_ENDPOINT`; `None` when neither is.
pub fn endpoint() -> Option<(&'static str, String)> {
    ENDPOINT_VARS.iter().find_map(|v| {
        std::env::var(v)
            .ok()
            .map(|s| s.trim().to_owned())
            .filter(|s| !s.is_empty())
            .map(|s| (*v, s))
    })
}

/// True when spans are exported (after [`layer`] returned a layer): the span helpers build
/// nothing otherwise.
pub fn enabled() -> bool {
    ENABLED.load(Ordering::Relaxed)
}

/// The trace id of the execution `key`, as 128 bits: its UUID's (`0190…`, hyphens or not). A
/// key that is not a UUID, such as an alert's `<id>:<state>`, gets two 64-bit FNV-1a hashes of
/// itself. Never zero (W3C Trace Context §3.2.2.3 forbids the all-zero id).
pub fn trace_id(key: &str) -> u128 {
    let hex: String = key.chars().filter(|c| *c != '-').collect();
    let id = if hex.len() == 32 && hex.chars().all(|c| c.is_ascii_hexdigit()) {
        u128::from_str_radix(&hex, 16).ok()
    } else {
        None
    };
    let id = id.unwrap_or_else(|| {
        let a = sundial_core::hash::fnv1a(key.as_bytes());
        let b = sundial_core::hash::fnv1a(format!("trace:{key}").as_bytes());
        (u128::from(a) << 64) | u128::from(b)
    });
    id.max(1)
}

/// The span id of attempt `attempt` of the execution `key` (the FNV-1a hash of
/// `<key>/<attempt>`), and of its trigger span with `attempt` 0. Never zero (§3.2.2.4).
pub fn span_id(key: &str, attempt: u32) -> u64 {
    sundial_core::hash::fnv1a(format!("{key}/{attempt}").as_bytes()).max(1)
}

/// The W3C `traceparent` of one delivery (Trace Context §3.2 "traceparent Header"): version
/// `00`, [`trace_id`] of the execution, [`span_id`] of this attempt, flags `01` (sampled).
/// Every attempt of one execution is in one trace, and the same attempt always carries the same
/// span id, so a receiver can join a retry to its earlier attempts.
pub fn traceparent(key: &str, attempt: u32) -> String {
    format!(
        "00-{:032x}-{:016x}-01",
        trace_id(key),
        span_id(key, attempt)
    )
}

thread_local! {
    /// The ids [`ExecutionIds`] hands out for the next span created on this thread.
    static NEXT_TRACE: Cell<Option<u128>> = const { Cell::new(None) };
    static NEXT_SPAN: Cell<Option<u64>> = const { Cell::new(None) };
}

/// Starts `span` (made by `make`) as an OpenTelemetry span with the trace and span ids given,
/// under `parent` when there is one, so that ids derived from the execution reach the exported
/// span. `tracing-opentelemetry` starts a span lazily; asking for its context starts it here,
/// on this thread, where [`ExecutionIds`] finds the ids.
fn started(
    trace: u128,
    span: u64,
    parent: Option<SpanContext>,
    make: impl FnOnce() -> tracing::Span,
) -> tracing::Span {
    let made = make();
    if let Some(parent) = parent {
        let parent = opentelemetry::Context::new().with_remote_span_context(parent);
        // An error means the exporting layer does not see the span: nothing to start.
        let _ = made.set_parent(parent);
    }
    NEXT_TRACE.with(|c| c.set(Some(trace)));
    NEXT_SPAN.with(|c| c.set(Some(span)));
    let _ = made.context();
    NEXT_TRACE.with(|c| c.set(None));
    NEXT_SPAN.with(|c| c.set(None));
    made
}

/// The SDK's id generator for Sundial's spans: the ids set (by this module's span helpers) for the span being
/// created on this thread, random ones otherwise.
#[derive(Debug, Default)]
pub struct ExecutionIds(RandomIdGenerator);

impl IdGenerator for ExecutionIds {
    fn new_trace_id(&self) -> TraceId {
        NEXT_TRACE
            .with(Cell::take)
            .map_or_else(|| self.0.new_trace_id(), TraceId::from)
    }

    fn new_span_id(&self) -> SpanId {
        NEXT_SPAN
            .with(Cell::take)
            .map_or_else(|| self.0.new_span_id(), SpanId::from)
    }
}

/// How an execution came to be, for the trigger span's `sundial.trigger` attribute.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Origin {
    /// Its slot of the schedule.
    Schedule,
    /// A manual trigger (`POST …/trigger`).
    Manual,
}

/// One execution as its trigger span describes it.
#[derive(Debug, Clone, Copy)]
pub struct Triggered<'a> {
    /// The execution's id (UUID text).
    pub execution_id: &'a str,
    /// Its namespace.
    pub namespace: &'a str,
    /// Its job.
    pub job: &'a str,
    /// Its slot (UTC).
    pub scheduled_at: Timestamp,
    /// Its fire time (UTC): the slot plus the job's jitter.
    pub fire_at: Timestamp,
    /// Why it exists.
    pub origin: Origin,
    /// The node that created it.
    pub node: &'a str,
}

/// Records the trigger span of one execution just created (it starts and ends now: the
/// moment the execution was written). Does nothing unless [`enabled`].
pub fn trigger(t: &Triggered<'_>) {
    if !enabled() {
        return;
    }
    let span = started(
        trace_id(t.execution_id),
        span_id(t.execution_id, 0),
        None,
        || {
            tracing::trace_span!(
                target: TARGET,
                parent: None,
                "trigger",
                otel.name = "trigger",
                otel.kind = "producer",
                sundial.namespace = t.namespace,
                sundial.job = t.job,
                sundial.execution_id = t.execution_id,
                sundial.slot = %t.scheduled_at,
                sundial.fire_time = %t.fire_at,
                sundial.trigger = match t.origin {
                    Origin::Schedule => "schedule",
                    Origin::Manual => "manual",
                },
                sundial.node = t.node,
            )
        },
    );
    drop(span);
}

/// One attempt as its span describes it.
#[derive(Debug, Clone, Copy)]
pub struct Attempt<'a> {
    /// The execution's id (UUID text).
    pub execution_id: &'a str,
    /// The attempt number, from 1.
    pub attempt: u32,
    /// Its namespace.
    pub namespace: &'a str,
    /// Its job (for a workflow task, the execution's job name).
    pub job: &'a str,
    /// Its slot (UTC).
    pub scheduled_at: Timestamp,
    /// Its fire time (UTC).
    pub fire_at: Timestamp,
    /// The node that runs it.
    pub node: &'a str,
}

/// The span of one attempt, the child of its execution's trigger span; open it around the
/// delivery and end it with [`attempt_ended`]. [`tracing::Span::none`] unless [`enabled`].
pub fn attempt(a: &Attempt<'_>) -> tracing::Span {
    if !enabled() {
        return tracing::Span::none();
    }
    let trace = trace_id(a.execution_id);
    let trigger = SpanContext::new(
        TraceId::from(trace),
        SpanId::from(span_id(a.execution_id, 0)),
        TraceFlags::SAMPLED,
        true,
        TraceState::default(),
    );
    started(
        trace,
        span_id(a.execution_id, a.attempt),
        Some(trigger),
        || {
            tracing::trace_span!(
                target: TARGET,
                parent: None,
                "attempt",
                otel.name = "attempt",
                otel.kind = "client",
                sundial.namespace = a.namespace,
                sundial.job = a.job,
                sundial.execution_id = a.execution_id,
                sundial.attempt = a.attempt,
                sundial.slot = %a.scheduled_at,
                sundial.fire_time = %a.fire_at,
                sundial.outcome = tracing::field::Empty,
                sundial.node = a.node,
            )
        },
    )
}

/// Ends an attempt's span with its outcome: `outcome` is what became of the attempt
/// (`succeeded`, `retrying`, `failed`, `dead`, `timed_out`, …); `error`, when given, marks the
/// span's status as an error with that message.
pub fn attempt_ended(span: &tracing::Span, outcome: &str, error: Option<&str>) {
    if span.is_none() {
        return;
    }
    span.record("sundial.outcome", outcome);
    span.set_status(match error {
        Some(message) => opentelemetry::trace::Status::error(message.to_owned()),
        None => opentelemetry::trace::Status::Ok,
    });
}

/// An error setting up the exporter.
#[derive(Debug, thiserror::Error)]
#[error("setting up the OTLP trace exporter: {0}")]
pub struct SetupError(String);

/// The layer that exports Sundial's spans over OTLP/HTTP, when one of [`ENDPOINT_VARS`] is
/// set and `OTEL_SDK_DISABLED` is not `true`; `None` otherwise. The protocol is always
/// OTLP/HTTP with protobuf (port 4318 on a collector, not gRPC's 4317); the endpoint, headers
/// and timeout come from the standard `OTEL_EXPORTER_OTLP_*` variables, the service name from
/// `OTEL_SERVICE_NAME` (default `sundial`), batching from `OTEL_BSP_*`. Call [`shutdown`]
/// before the process exits so that the spans still queued are sent.
///
/// # Errors
/// [`SetupError`] naming the variable, when the endpoint is not an `http://` or `https://`
/// URL, or `OTEL_EXPORTER_OTLP_PROTOCOL` asks for another protocol than `http/protobuf`.
pub fn layer<S>() -> Result<Option<impl Layer<S>>, SetupError>
where
    S: tracing::Subscriber + for<'span> LookupSpan<'span>,
{
    let disabled = std::env::var("OTEL_SDK_DISABLED").is_ok_and(|v| v.eq_ignore_ascii_case("true"));
    let Some((var, url)) = endpoint().filter(|_| !disabled) else {
        return Ok(None);
    };
    let scheme = url.split_once("://").map(|(s, _)| s.to_ascii_lowercase());
    if !matches!(scheme.as_deref(), Some("http" | "https")) || url.len() <= "http://".len() {
        return Err(SetupError(format!(
            "{var}='{url}': not an http:// or https:// URL"
        )));
    }
    for var in [
        "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
        "OTEL_EXPORTER_OTLP_PROTOCOL",
    ] {
        if let Ok(protocol) = std::env::var(var)
            && !protocol.trim().eq_ignore_ascii_case("http/protobuf")
        {
            return Err(SetupError(format!(
                "{var}={protocol}: Sundial exports over http/protobuf only (a collector's port 4318)"
            )));
        }
    }
    // The blocking HTTP client must be built (and later dropped) outside the async runtime.
    let provider = std::thread::spawn(build_provider)
        .join()
        .map_err(|_| SetupError("the exporter's set-up panicked".into()))?
        .map_err(|e| SetupError(format!("OTEL_EXPORTER_OTLP_ENDPOINT: {}", e.0)))?;
    let tracer = provider.tracer("sundial");
    let _ = PROVIDER.set(provider);
    ENABLED.store(true, Ordering::Relaxed);
    let layer = tracing_opentelemetry::layer()
        .with_tracer(tracer)
        .with_tracked_inactivity(false)
        .with_location(false)
        .with_threads(false)
        .with_filter(tracing_subscriber::filter::filter_fn(|m| {
            m.target() == TARGET
        }));
    Ok(Some(layer))
}

fn build_provider() -> Result<SdkTracerProvider, SetupError> {
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .build()
        .map_err(|e| SetupError(e.to_string()))?;
    let service = std::env::var("OTEL_SERVICE_NAME").unwrap_or_else(|_| "sundial".into());
    Ok(SdkTracerProvider::builder()
        .with_id_generator(ExecutionIds::default())
        .with_resource(
            opentelemetry_sdk::Resource::builder()
                .with_service_name(service)
                .build(),
        )
        .with_batch_exporter(exporter)
        .build())
}

/// Sends the spans still queued and stops the exporter (waits at most the exporter's
/// timeout). Does nothing when nothing is exported.
pub fn shutdown() {
    if let Some(provider) = PROVIDER.get() {
        ENABLED.store(false, Ordering::Relaxed);
        let provider = provider.clone();
        // The blocking client's runtime may not be dropped on an async thread.
        let _ = std::thread::spawn(move || provider.shutdown()).join();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_traceparent_names_the_execution_s_trace_and_the_attempt_s_span() {
        let id = "0190c3a2-7b4e-7c3d-9f00-0123456789ab";
        let first = traceparent(id, 1);
        assert_eq!(first.len(), 55, "{first}");
        assert!(
            first.starts_with("00-0190c3a27b4e7c3d9f000123456789ab-"),
            "{first}"
        );
        assert!(first.ends_with("-01"));
        assert_eq!(first, traceparent(id, 1), "the same attempt, the same span");
        let second = traceparent(id, 2);
        assert_eq!(first[..36], second[..36], "one trace for every attempt");
        assert_ne!(first[36..52], second[36..52], "a span per attempt");
        let alert = traceparent(&format!("{id}:dead"), 1);
        assert_eq!(
            alert.len(),
            55,
            "a key that is not a UUID still gives a valid id: {alert}"
        );
        assert_eq!(
            traceparent("00000000-0000-0000-0000-000000000000", 1)[3..35],
            format!("{:032x}", 1),
            "never the all-zero trace id"
        );
    }

    #[test]
    fn the_trigger_span_is_attempt_zero_and_differs_from_every_attempt() {
        let id = "0190c3a2-7b4e-7c3d-9f00-0123456789ab";
        let trigger = span_id(id, 0);
        assert!((1..=10).all(|n| span_id(id, n) != trigger));
        assert_eq!(trace_id(id), 0x0190c3a2_7b4e_7c3d_9f00_0123456789ab);
        assert_eq!(trace_id("0190C3A27B4E7C3D9F000123456789AB"), trace_id(id));
    }

    #[test]
    fn nothing_is_built_while_exporting_is_off() {
        assert!(!enabled());
        let span = attempt(&Attempt {
            execution_id: "0190c3a2-7b4e-7c3d-9f00-0123456789ab",
            attempt: 1,
            namespace: "default",
            job: "j",
            scheduled_at: Timestamp::UNIX_EPOCH,
            fire_at: Timestamp::UNIX_EPOCH,
            node: "n",
        });
        assert!(span.is_none());
    }
}
