//! Helpers shared by the target integration tests: deliveries and unique names.

#![allow(dead_code)]

use std::sync::atomic::{AtomicU32, Ordering};

use jiff::Timestamp;
use sundial_core::job::TargetSpec;
use sundial_target::Delivery;

/// A name unique to this test process and call: `<prefix>-<pid>-<nanos>-<n>`, usable as a
/// stream, queue, subject token or container name.
pub fn unique(prefix: &str) -> String {
    static N: AtomicU32 = AtomicU32::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    format!(
        "{prefix}-{}-{nanos}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}

/// A fresh execution id (UUID-shaped, unique per call).
pub fn execution_id() -> String {
    static N: AtomicU32 = AtomicU32::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    format!(
        "0193a5c4-{:04x}-7{:03x}-8000-{:012x}",
        std::process::id() & 0xffff,
        N.fetch_add(1, Ordering::Relaxed) & 0xfff,
        nanos & 0xffff_ffff_ffff
    )
}

/// The slot every test delivery carries.
pub const SCHEDULED_AT: &str = "2026-12-01T02:00:00Z";

/// A delivery of attempt `attempt` of `execution_id`.
pub fn delivery<'a>(execution_id: &'a str, attempt: u32, target: &'a TargetSpec) -> Delivery<'a> {
    Delivery {
        execution_id,
        attempt,
        scheduled_at: SCHEDULED_AT.parse::<Timestamp>().unwrap(),
        now: Timestamp::UNIX_EPOCH,
        target,
        keep_output: false,
    }
}

/// `SUNDIAL_TEST_<NAME>_URL`, or the machine's default.
pub fn url(name: &str, default: &str) -> String {
    std::env::var(format!("SUNDIAL_TEST_{name}_URL")).unwrap_or_else(|_| default.to_owned())
}
