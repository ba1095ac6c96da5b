//! Targets: what one attempt of an execution runs (DESIGN.md decision 7).
//!
//! [`Target::dispatch`] returns an [`Outcome`] on success or an [`Error`] that says itself
//! whether a retry may help ([`Error::Retryable`]) or not ([`Error::Permanent`]); callers never
//! infer retryability by inspecting messages (STYLE.md §2).
//!
//! Invariants:
//! - Targets never touch the store; they only deliver.
//! - Every delivery carries the execution id as its idempotency key, so a retried or
//!   re-delivered attempt can be recognised by the receiver (SPEC §2).
//! - Dropping a `dispatch` future cancels the delivery (the HTTP request is dropped): per-attempt
//!   timeouts and cancellation are the caller's `select!`, not the target's.
//!
//! Failure classification, one table for every target ([`classify_http_status`] for HTTP):
//!
//! | target | success | transient (retried) | permanent (fails at once) |
//! |---|---|---|---|
//! | http | 2xx, or `success_codes` | connection error, timeout, 408, 425, 429, 5xx | other 4xx, 1xx/3xx not followed |
//! | any | | | a connection removed from the config, a target type this server does not run |

#![warn(missing_docs)]

mod http;

use async_trait::async_trait;
use jiff::Timestamp;
use sundial_core::Dur;
use sundial_core::job::TargetSpec;

pub use http::{HttpTarget, classify_http_status};

/// One delivery of one attempt.
#[derive(Debug, Clone)]
pub struct Delivery<'a> {
    /// Execution id: the idempotency key.
    pub execution_id: &'a str,
    /// Attempt number, from 1.
    pub attempt: u32,
    /// The slot.
    pub scheduled_at: Timestamp,
    /// The instant the attempt started (for `Retry-After` dates).
    pub now: Timestamp,
    /// What to deliver.
    pub target: &'a TargetSpec,
}

/// A successful delivery.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome {
    /// HTTP status, exit code, ... when there is one.
    pub status_code: Option<i64>,
}

/// A failed delivery, classified.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// A retry may succeed; `after` is a delay the target asked for (HTTP `Retry-After`).
    #[error("{message}")]
    Retryable {
        /// Delay asked for by the target.
        after: Option<Dur>,
        /// HTTP status, exit code, ...
        status_code: Option<i64>,
        /// What happened.
        message: String,
    },
    /// Retrying cannot help.
    #[error("{message}")]
    Permanent {
        /// HTTP status, exit code, ...
        status_code: Option<i64>,
        /// What happened.
        message: String,
    },
}

impl Error {
    /// The status code carried, if any.
    pub fn status_code(&self) -> Option<i64> {
        match self {
            Error::Retryable { status_code, .. } | Error::Permanent { status_code, .. } => {
                *status_code
            }
        }
    }
}

/// Something an attempt can run.
#[async_trait]
pub trait Target: Send + Sync {
    /// Delivers once.
    ///
    /// # Errors
    /// [`Error::Retryable`] or [`Error::Permanent`] per the module's classification table.
    ///
    /// # Cancel safety
    /// Dropping the future abandons the delivery; whether the receiver saw it is unknown.
    async fn dispatch(&self, delivery: &Delivery<'_>) -> Result<Outcome, Error>;
}

/// Every target this server runs, chosen by the delivery's target type.
#[derive(Debug, Clone)]
pub struct Targets {
    http: HttpTarget,
}

impl Targets {
    /// The targets of a server: HTTP always; queue and container targets come with their
    /// named connections.
    ///
    /// # Errors
    /// When the HTTP client cannot be built (no TLS backend).
    pub fn new() -> Result<Self, reqwest::Error> {
        Ok(Targets {
            http: HttpTarget::new()?,
        })
    }
}

#[async_trait]
impl Target for Targets {
    async fn dispatch(&self, delivery: &Delivery<'_>) -> Result<Outcome, Error> {
        match delivery.target {
            TargetSpec::Http(_) => self.http.dispatch(delivery).await,
            other => Err(Error::Permanent {
                status_code: None,
                message: format!(
                    "connection '{}' for {} targets is not configured on this worker",
                    other.connection().unwrap_or_default(),
                    other.kind()
                ),
            }),
        }
    }
}
