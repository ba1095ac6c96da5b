//! Secret routes (docs/security.md, "Secrets"): put a value, list names, delete one no job or
//! workflow references.
//!
//! Invariants: a value is sealed ([`sundial_core::secrets::SecretsKey::seal`]) before it
//! reaches the store and no answer ever holds one (the resource has no value field); a body
//! is accepted whole or refused whole (`value` a string of at most 64 KiB, no other field);
//! a viewer token reaches none of these routes (`auth`); without a secrets key every route
//! answers 409 naming the setting and nothing is written.

use axum::Json;
use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use jiff::Timestamp;
use serde::Serialize;
use sundial_core::secrets::{MAX_VALUE_BYTES, SecretsKey};
use sundial_core::validate::FieldError;
use sundial_store::SealedSecret;
use utoipa::ToSchema;

use crate::AppState;
use crate::error::ApiError;
use crate::jobs::check_path;
use crate::request::{Path, json_body};

/// A secret as the API shows it: never its value.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct SecretResource {
    /// Namespace.
    pub namespace: String,
    /// Name (a name as for jobs).
    pub name: String,
    /// 1 on creation, incremented by every put.
    pub version: i64,
    /// When it was created (UTC).
    pub created_at: Timestamp,
    /// When its value last changed (UTC).
    pub updated_at: Timestamp,
}

/// The namespace's secrets, by name.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct SecretList {
    /// Names, versions and times; never values.
    pub items: Vec<SecretResource>,
}

/// `PUT` body: `{"value": "..."}`.
#[derive(Debug, Clone, ToSchema)]
#[allow(dead_code)]
pub struct SecretPut {
    /// The value, at most 64 KiB of UTF-8.
    pub value: String,
}

fn resource(r: sundial_store::SecretRecord) -> SecretResource {
    SecretResource {
        namespace: r.namespace,
        name: r.name,
        version: r.version,
        created_at: r.created_at,
        updated_at: r.updated_at,
    }
}

/// The key, or 409 naming the setting that would give one.
fn key(state: &AppState) -> Result<&SecretsKey, ApiError> {
    state.secrets_key.as_deref().ok_or_else(|| {
        ApiError::new(
            StatusCode::CONFLICT,
            "no secrets key",
            "this server has no secrets key: set secrets_key_file (docs/configuration.md, secrets_key_file)",
        )
    })
}

#[utoipa::path(
    put,
    path = "/v1/namespaces/{ns}/secrets/{name}",
    tag = "secrets",
    summary = "Create or replace a secret's value (encrypted at rest, never shown again)",
    params(("ns" = String, Path, description = "Namespace"), ("name" = String, Path, description = "Secret name")),
    request_body = SecretPut,
    responses((status = 200, description = "Replaced", body = SecretResource), (status = 201, description = "Created", body = SecretResource), crate::openapi::Problems)
)]
pub(crate) async fn put(
    State(state): State<AppState>,
    Path((ns, name)): Path<(String, String)>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    check_path(&ns, Some(&name))?;
    let key = key(&state)?;
    let body = json_body(&headers, body).await?;
    let mut errors = Vec::new();
    let Some(obj) = body.as_object() else {
        return Err(ApiError::invalid(vec![FieldError::new(
            "",
            "must be an object {\"value\": \"...\"}",
        )]));
    };
    for k in obj.keys().filter(|k| *k != "value") {
        errors.push(FieldError::new(
            k,
            "unknown field; a secret's body holds only value",
        ));
    }
    let value = match obj.get("value") {
        Some(serde_json::Value::String(s)) if s.len() > MAX_VALUE_BYTES => {
            errors.push(FieldError::new(
                "value",
                format!(
                    "is {} bytes; at most {MAX_VALUE_BYTES} are allowed",
                    s.len()
                ),
            ));
            None
        }
        Some(serde_json::Value::String(s)) => Some(s.as_str()),
        Some(_) => {
            errors.push(FieldError::new("value", "must be a string"));
            None
        }
        None => {
            errors.push(FieldError::new("value", "is required"));
            None
        }
    };
    let Some(value) = value.filter(|_| errors.is_empty()) else {
        return Err(ApiError::invalid(errors));
    };
    let (nonce, ciphertext) = key.seal(&ns, &name, value);
    let (record, created) = state
        .store
        .secret_put(&ns, &name, &SealedSecret { nonce, ciphertext })
        .await?;
    let status = if created {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    Ok((status, Json(resource(record))).into_response())
}

#[utoipa::path(
    get,
    path = "/v1/namespaces/{ns}/secrets",
    tag = "secrets",
    summary = "The namespace's secrets: names, versions and times, never values",
    params(("ns" = String, Path, description = "Namespace")),
    responses((status = 200, description = "The secrets, by name", body = SecretList), crate::openapi::Problems)
)]
pub(crate) async fn list(
    State(state): State<AppState>,
    Path(ns): Path<String>,
) -> Result<Json<SecretList>, ApiError> {
    check_path(&ns, None)?;
    let items = state
        .store
        .secret_list(&ns)
        .await?
        .into_iter()
        .map(resource)
        .collect();
    Ok(Json(SecretList { items }))
}

#[utoipa::path(
    delete,
    path = "/v1/namespaces/{ns}/secrets/{name}",
    tag = "secrets",
    summary = "Delete a secret no job or workflow references (409 naming its users)",
    params(("ns" = String, Path, description = "Namespace"), ("name" = String, Path, description = "Secret name")),
    responses((status = 204, description = "Deleted"), crate::openapi::Problems)
)]
pub(crate) async fn delete(
    State(state): State<AppState>,
    Path((ns, name)): Path<(String, String)>,
) -> Result<Response, ApiError> {
    check_path(&ns, Some(&name))?;
    state.store.secret_delete(&ns, &name).await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

/// Refuses jobs or workflows whose targets reference a secret the namespace does not hold:
/// 422 naming each field, `prefix` + the target's own path (`target.headers.authorization`,
/// as [`sundial_core::secrets::target_references`] names it). Reads the namespace's secrets
/// only when some target references one.
pub(crate) async fn refuse_unknown_secrets<'a>(
    state: &AppState,
    ns: &str,
    targets: impl IntoIterator<Item = (String, &'a sundial_core::job::TargetSpec)>,
) -> Result<(), ApiError> {
    let refs: Vec<(String, String)> = targets
        .into_iter()
        .flat_map(|(prefix, target)| {
            sundial_core::secrets::target_references(target)
                .into_iter()
                .map(move |(name, field)| (name, format!("{prefix}{field}")))
        })
        .collect();
    if refs.is_empty() {
        return Ok(());
    }
    let known: std::collections::BTreeSet<String> = state
        .store
        .secret_list(ns)
        .await?
        .into_iter()
        .map(|s| s.name)
        .collect();
    let errors: Vec<FieldError> = refs
        .iter()
        .filter(|(name, _)| !known.contains(name))
        .map(|(name, field)| {
            FieldError::new(
                field,
                format!(
                    "references secret '{name}', which namespace '{ns}' does not hold; create it with PUT /v1/namespaces/{ns}/secrets/{name}"
                ),
            )
        })
        .collect();
    if errors.is_empty() {
        Ok(())
    } else {
        Err(ApiError::invalid(errors))
    }
}
