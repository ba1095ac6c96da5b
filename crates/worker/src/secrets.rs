//! Secrets rendered at send time (docs/security.md, "Secrets"): an attempt whose authored
//! target references `{{ secret.NAME }}` (`RunSpec::secrets`) has its target rendered with the
//! opened values just before its delivery, and its outcome's texts scrubbed of them after.
//!
//! Invariants: a value lives only in the rendered target handed to the target and in this
//! attempt's memory; it is never logged, traced, written to the store or put in an error (a
//! failure names the secret, and any message, detail or kept output that quotes a value shows
//! `***` instead); an attempt that cannot have its secrets (no key, a secret gone, a value
//! that does not open) fails for good without a delivery.

use std::collections::BTreeMap;

use sundial_core::job::TargetSpec;
use sundial_target::Outcome;

use super::*;

/// A target rendered with its secrets, and the values it holds (for [`scrub`]).
pub(crate) struct Rendered {
    pub(crate) target: TargetSpec,
    pub(crate) values: BTreeMap<String, String>,
}

impl Worker {
    /// Opens the secrets `e`'s target references and renders them into it.
    ///
    /// # Errors
    /// A permanent [`TargetError`] naming the secret when this worker has no secrets key, the
    /// store does not hold it, its value does not open, or it cannot go where it is
    /// referenced; a transient one when the store cannot be read.
    pub(crate) async fn render_secrets(
        &self,
        e: &ClaimedExecution,
    ) -> Result<Rendered, TargetError> {
        let permanent = |message: String| TargetError::Permanent {
            status_code: None,
            message,
        };
        let Some(key) = self.config.secrets_key.as_deref() else {
            return Err(permanent(format!(
                "the target references secret '{}', and this worker has no secrets key (secrets_key_file)",
                e.run.secrets.join("', '")
            )));
        };
        let sealed = self
            .store
            .secret_values(&e.namespace, &e.run.secrets)
            .await
            .map_err(|err| TargetError::Retryable {
                after: None,
                status_code: None,
                message: format!("cannot read the target's secrets: {err}"),
            })?;
        let mut values = BTreeMap::new();
        for (name, value) in sealed {
            let opened = key
                .open(&e.namespace, &name, &value.nonce, &value.ciphertext)
                .map_err(|err| permanent(err.to_string()))?;
            values.insert(name, opened);
        }
        let target = sundial_core::secrets::render_target(&e.run.target, &e.run.secrets, &values)
            .map_err(|err| permanent(err.to_string()))?;
        Ok(Rendered { target, values })
    }
}

/// `result` with every value of `values` replaced by `***` in its error message, detail and
/// kept output.
pub(crate) fn scrub(
    result: Result<Outcome, TargetError>,
    values: &BTreeMap<String, String>,
) -> Result<Outcome, TargetError> {
    use sundial_core::secrets::scrub as hide;
    match result {
        Ok(mut o) => {
            o.detail = o.detail.map(|d| hide(&d, values));
            o.output = o.output.map(|d| hide(&d, values));
            Ok(o)
        }
        Err(TargetError::Retryable {
            after,
            status_code,
            message,
        }) => Err(TargetError::Retryable {
            after,
            status_code,
            message: hide(&message, values),
        }),
        Err(TargetError::Permanent {
            status_code,
            message,
        }) => Err(TargetError::Permanent {
            status_code,
            message: hide(&message, values),
        }),
    }
}
