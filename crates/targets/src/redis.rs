//! The Redis target (docs/failure-classes.md, "redis"): one
//! `XADD <stream> * <fields...> execution_id <id>` per attempt, successful when Redis returns
//! the new entry's id.
//!
//! Redis streams do not de-duplicate: a re-delivered attempt adds a second entry with the
//! same `execution_id`, by which consumers recognise it.

use std::time::Duration;

use async_trait::async_trait;
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::{ErrorKind, RedisError, ServerErrorKind};
use sundial_core::job::TargetSpec;

use crate::{BoxError, Delivery, Error, Outcome, Target};

/// The Redis target: one multiplexed connection, re-established by itself after a drop.
#[derive(Clone)]
pub struct RedisTarget {
    conn: ConnectionManager,
}

impl std::fmt::Debug for RedisTarget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisTarget").finish_non_exhaustive()
    }
}

impl RedisTarget {
    /// Connects to `url` (`redis://[user:password@]host:port[/db]`).
    ///
    /// # Errors
    /// A malformed URL, or a server that cannot be reached or refuses the credentials.
    pub async fn connect(url: &str) -> Result<Self, BoxError> {
        let client = redis::Client::open(url)?;
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(Duration::from_secs(5)))
            .set_number_of_retries(1);
        let conn = ConnectionManager::new_with_config(client, config).await?;
        Ok(RedisTarget { conn })
    }
}

/// How a Redis error counts (the module table in `lib.rs`): the key holding another type and
/// a missing permission are permanent; everything else (I/O, timeouts, `LOADING`, `BUSY`,
/// `OOM`, `READONLY`, cluster redirections, other server errors) is transient.
pub(crate) fn error_is_permanent(e: &RedisError) -> bool {
    matches!(e.code(), Some("WRONGTYPE" | "NOPERM"))
        || matches!(e.kind(), ErrorKind::Server(ServerErrorKind::NoPerm))
}

#[async_trait]
impl Target for RedisTarget {
    async fn dispatch(&self, d: &Delivery<'_>) -> Result<Outcome, Error> {
        let TargetSpec::Redis(spec) = d.target else {
            return Err(Error::permanent(format!(
                "not a redis target: {}",
                d.target.kind()
            )));
        };
        let mut cmd = redis::cmd("XADD");
        cmd.arg(&spec.stream).arg("*");
        for (k, v) in sent_fields(&spec.fields) {
            cmd.arg(k).arg(v);
        }
        cmd.arg("execution_id").arg(d.execution_id);
        cmd.arg("traceparent")
            .arg(crate::traceparent(d.execution_id, d.attempt));
        if let Some(signature) = d.signature {
            cmd.arg("sundial-attempt").arg(d.attempt);
            for (name, value) in signature.headers() {
                cmd.arg(name).arg(value);
            }
        }
        let mut conn = self.conn.clone();
        match cmd.query_async::<String>(&mut conn).await {
            Ok(id) => Ok(Outcome {
                output: None,
                status_code: None,
                detail: Some(format!("stream {} entry {id}", spec.stream)),
            }),
            Err(e) => {
                let message = format!("XADD {}: {e}", spec.stream);
                Err(if error_is_permanent(&e) {
                    Error::permanent(message)
                } else {
                    Error::transient(message)
                })
            }
        }
    }
}

/// The fields Sundial writes itself into every entry (a job's own of these names are dropped):
/// the execution id, the trace, and, when signed, the attempt and the signature fields.
pub(crate) const RESERVED_FIELDS: [&str; 8] = [
    "execution_id",
    "traceparent",
    "sundial-attempt",
    "webhook-id",
    "webhook-timestamp",
    "webhook-signature",
    "sundial-lease-until",
    "sundial-signature",
];

/// A job's fields as an entry carries them: without [`RESERVED_FIELDS`], sorted by name.
pub(crate) fn sent_fields(
    fields: &std::collections::BTreeMap<String, String>,
) -> impl Iterator<Item = (&String, &String)> {
    fields
        .iter()
        .filter(|(k, _)| !RESERVED_FIELDS.contains(&k.as_str()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn io_errors_are_transient() {
        let io = std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "refused");
        assert!(!error_is_permanent(&RedisError::from(io)));
        let timeout = std::io::Error::new(std::io::ErrorKind::TimedOut, "timed out");
        assert!(!error_is_permanent(&RedisError::from(timeout)));
    }
}
