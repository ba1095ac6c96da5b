//! `GET /v1/namespaces/{ns}/signing-keys` (docs/security.md, "Signed deliveries"): the keys
//! that sign a namespace's deliveries, so that a receiver knows which to trust.
//!
//! Invariants: an answer names each key's id and algorithm and, for an Ed25519 key, its public
//! half (`whpk_...`); never a secret (an HMAC key's only half is secret: it is listed without
//! one, and its receivers hold it from whoever configured the key).

use axum::Json;
use axum::extract::State;
use serde::Serialize;
use utoipa::ToSchema;

use crate::AppState;
use crate::error::ApiError;
use crate::jobs::check_path;
use crate::request::Path;

/// A signing key as the server's configuration gives it (`[[signing_keys]]`,
/// docs/configuration.md), without its secret.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, ToSchema)]
pub struct SigningKeyInfo {
    /// The key's id (`[[signing_keys]] id`).
    pub id: String,
    /// `hmac-sha256` (signatures `v1,...`) or `ed25519` (signatures `v1a,...`).
    pub algorithm: String,
    /// An Ed25519 key's public half, `whpk_<base64>`; `null` for an HMAC key.
    pub public_key: Option<String>,
    /// Of the namespaces it signs, `*` (every one) and the namespace asked about.
    pub namespaces: Vec<String>,
}

impl SigningKeyInfo {
    /// Whether this key signs `namespace`'s deliveries.
    pub fn covers(&self, namespace: &str) -> bool {
        self.namespaces.iter().any(|n| n == "*" || n == namespace)
    }

    /// The key as an answer about `namespace` shows it: of its namespaces only `*` and
    /// `namespace` (a token of one namespace learns no other's name).
    pub fn seen_from(&self, namespace: &str) -> SigningKeyInfo {
        SigningKeyInfo {
            namespaces: self
                .namespaces
                .iter()
                .filter(|n| *n == "*" || *n == namespace)
                .cloned()
                .collect(),
            ..self.clone()
        }
    }
}

/// The keys that sign a namespace's deliveries.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct SigningKeyList {
    /// In the configuration's order: each delivery carries one signature per key, in this
    /// order. Empty: the namespace's deliveries are not signed.
    pub items: Vec<SigningKeyInfo>,
}

#[utoipa::path(
    get,
    path = "/v1/namespaces/{ns}/signing-keys",
    tag = "namespaces",
    summary = "The keys that sign the namespace's deliveries (public halves only)",
    params(("ns" = String, Path, description = "Namespace")),
    responses((status = 200, description = "The keys, in the order of the signatures", body = SigningKeyList), crate::openapi::Problems)
)]
pub(crate) async fn list(
    State(state): State<AppState>,
    Path(ns): Path<String>,
) -> Result<Json<SigningKeyList>, ApiError> {
    check_path(&ns, None)?;
    let items = state
        .signing_keys
        .iter()
        .filter(|k| k.covers(&ns))
        .map(|k| k.seen_from(&ns))
        .collect();
    Ok(Json(SigningKeyList { items }))
}

#[utoipa::path(
    get,
    path = "/v1/namespaces/{ns}/signing-keys/{id}",
    tag = "namespaces",
    summary = "One key that signs the namespace's deliveries (its public half only)",
    params(("ns" = String, Path, description = "Namespace"), ("id" = String, Path, description = "The key's id")),
    responses((status = 200, description = "The key", body = SigningKeyInfo), crate::openapi::Problems)
)]
pub(crate) async fn get_one(
    State(state): State<AppState>,
    Path((ns, id)): Path<(String, String)>,
) -> Result<Json<SigningKeyInfo>, ApiError> {
    check_path(&ns, None)?;
    state
        .signing_keys
        .iter()
        .find(|k| k.id == id && k.covers(&ns))
        .map(|k| k.seen_from(&ns))
        .map(Json)
        .ok_or_else(|| {
            ApiError::new(
                axum::http::StatusCode::NOT_FOUND,
                "not found",
                format!(
                    "no signing key '{id}' signs namespace '{ns}' (GET /v1/namespaces/{ns}/signing-keys lists those that do)"
                ),
            )
        })
}
