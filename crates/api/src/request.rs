//! Reading requests: bodies (size, content type, JSON), `If-Match`, pagination parameters.

use axum::body::{Body, Bytes};
use axum::http::{HeaderMap, StatusCode, header};
use serde_json::Value;

use crate::MAX_BODY_BYTES;
use crate::error::ApiError;

/// Reads a JSON body: 413 past [`MAX_BODY_BYTES`], 415 for a content type that is not JSON
/// (`application/json`, `application/merge-patch+json`, or any `+json`), 400 for text that is
/// not JSON.
pub async fn json_body(headers: &HeaderMap, body: Body) -> Result<Value, ApiError> {
    if let Some(ct) = headers.get(header::CONTENT_TYPE) {
        let ct = ct.to_str().unwrap_or("").to_ascii_lowercase();
        let essence = ct.split(';').next().unwrap_or("").trim();
        if essence != "application/json" && !essence.ends_with("+json") {
            return Err(ApiError::new(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "unsupported media type",
                format!("content type '{essence}' is not JSON; send application/json"),
            ));
        }
    }
    let bytes: Bytes = axum::body::to_bytes(body, MAX_BODY_BYTES)
        .await
        .map_err(|_| {
            ApiError::new(
                StatusCode::PAYLOAD_TOO_LARGE,
                "payload too large",
                format!("the body is larger than {MAX_BODY_BYTES} bytes"),
            )
        })?;
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            "bad request",
            "the body is empty; send a JSON object",
        ));
    }
    serde_json::from_slice(&bytes).map_err(|e| {
        ApiError::new(
            StatusCode::BAD_REQUEST,
            "bad request",
            format!("the body is not valid JSON: {e}"),
        )
    })
}

/// The version named by `If-Match` (`3`, `"3"` or `W/"3"`); `None` without the header.
///
/// # Errors
/// 400 naming `If-Match` when it is not a version number (`*` is accepted as "any").
pub fn if_match(headers: &HeaderMap) -> Result<Option<i64>, ApiError> {
    let Some(value) = headers.get(header::IF_MATCH) else {
        return Ok(None);
    };
    let text = value.to_str().unwrap_or("").trim();
    if text == "*" {
        return Ok(None);
    }
    let bare = text.trim_start_matches("W/").trim_matches('"');
    bare.parse::<i64>()
        .map(Some)
        .map_err(|_| ApiError::bad_request("If-Match", format!("'{text}' is not a job version")))
}

/// `?limit=`: 1 to 1000, default 100.
pub fn limit(raw: Option<&str>) -> Result<u32, ApiError> {
    match raw {
        None => Ok(100),
        Some(text) => match text.parse::<u32>() {
            Ok(n) if (1..=1000).contains(&n) => Ok(n),
            _ => Err(ApiError::bad_request(
                "limit",
                format!("'{text}' is not a whole number in 1-1000"),
            )),
        },
    }
}
