//! Reading requests: path and query parameters, bodies (size, content type, JSON),
//! `If-Match`, pagination parameters. Every rejection is an [`ApiError`], so that no request
//! gets axum's plain-text rejections instead of a problem document.

use axum::body::{Body, Bytes};
use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use axum::http::{HeaderMap, StatusCode, header};
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::MAX_BODY_BYTES;
use crate::error::ApiError;

/// Path parameters, like [`axum::extract::Path`] but rejected (e.g. a segment that is not
/// UTF-8 once percent-decoded, or one holding the NUL character, `%00`, which no store keeps
/// the same way) with a 400 problem document.
#[derive(Debug)]
pub struct Path<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned + Send> FromRequestParts<S> for Path<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        if parts.uri.path().to_ascii_lowercase().contains("%00") {
            return Err(ApiError::new(
                StatusCode::BAD_REQUEST,
                "bad request",
                "the path must not contain the NUL character (%00)",
            ));
        }
        match axum::extract::Path::<T>::from_request_parts(parts, state).await {
            Ok(axum::extract::Path(value)) => Ok(Path(value)),
            Err(rejection) => Err(ApiError::new(
                StatusCode::BAD_REQUEST,
                "bad request",
                rejection.body_text(),
            )),
        }
    }
}

/// Query parameters, like [`axum::extract::Query`] but rejected with a 400 problem document,
/// also (naming the parameter) when one holds the NUL character (`%00`), which no store keeps
/// the same way ([`sundial_core::validate::nul_characters`]).
#[derive(Debug)]
pub struct Query<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequestParts<S> for Query<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        if let Some(pair) = parts
            .uri
            .query()
            .unwrap_or("")
            .split('&')
            .find(|pair| pair.to_ascii_lowercase().contains("%00"))
        {
            let name = pair.split('=').next().unwrap_or("");
            return Err(ApiError::bad_request(
                name,
                "must not contain the NUL character (%00)",
            ));
        }
        match axum::extract::Query::<T>::from_request_parts(parts, state).await {
            Ok(axum::extract::Query(value)) => Ok(Query(value)),
            Err(rejection) => Err(ApiError::new(
                StatusCode::BAD_REQUEST,
                "bad request",
                rejection.body_text(),
            )),
        }
    }
}

/// Reads a JSON body: 413 past [`MAX_BODY_BYTES`], 415 for a content type that is not JSON
/// (`application/json`, `application/merge-patch+json`, or any `+json`), 400 for text that is
/// not JSON, 422 naming a key an object holds twice ([`sundial_core::validate::parse_json`]) and
/// each string or key that holds the NUL character ([`sundial_core::validate::nul_characters`]).
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
    let bytes = read_body(body).await?;
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            "bad request",
            "the body is empty; send a JSON object",
        ));
    }
    let value = match sundial_core::validate::parse_json(&bytes) {
        Ok(value) => value,
        Err(sundial_core::validate::JsonError::Syntax(e)) => {
            return Err(ApiError::new(
                StatusCode::BAD_REQUEST,
                "bad request",
                format!("the body is not valid JSON: {e}"),
            ));
        }
        Err(sundial_core::validate::JsonError::DuplicateKey(field)) => {
            return Err(ApiError::invalid(vec![field]));
        }
    };
    let nul = sundial_core::validate::nul_characters(&value);
    if !nul.is_empty() {
        return Err(ApiError::invalid(nul));
    }
    Ok(value)
}

/// Reads a whole body of at most [`MAX_BODY_BYTES`].
///
/// # Errors
/// 408 when the body did not arrive within the listener's `request_body_timeout`
/// (docs/configuration.md, "`[http]`"), 413 when it is longer than the limit (or broke off).
async fn read_body(body: Body) -> Result<Bytes, ApiError> {
    axum::body::to_bytes(body, MAX_BODY_BYTES)
        .await
        .map_err(|e| {
            let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(&e);
            while let Some(c) = cause {
                if c.is::<tower_http::timeout::TimeoutError>() {
                    return ApiError::new(
                        StatusCode::REQUEST_TIMEOUT,
                        "request timeout",
                        "the body did not arrive within the server's request_body_timeout",
                    );
                }
                cause = c.source();
            }
            ApiError::new(
                StatusCode::PAYLOAD_TOO_LARGE,
                "payload too large",
                format!("the body is larger than {MAX_BODY_BYTES} bytes"),
            )
        })
}

/// Reads a JSON body that may be left out: `null` for an empty body, otherwise as
/// [`json_body`] (a workflow trigger without params, a run retry without task names).
///
/// # Errors
/// Those of [`json_body`] but the empty body's.
pub async fn optional_json_body(headers: &HeaderMap, body: Body) -> Result<Value, ApiError> {
    let bytes = read_body(body).await?;
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Ok(Value::Null);
    }
    json_body(headers, Body::from(bytes)).await
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
        .map_err(|_| ApiError::bad_request("If-Match", format!("'{text}' is not a version number")))
}

/// True for `If-Match: *` ("any current version": the job must exist).
pub fn if_match_any(headers: &HeaderMap) -> bool {
    headers
        .get(header::IF_MATCH)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.trim() == "*")
}

/// The filters of a job or workflow list.
#[derive(Debug, Clone, Default)]
pub struct ListFilters {
    /// `?paused=true|false`.
    pub paused: Option<bool>,
    /// `?label=key=value`.
    pub label: Option<(String, String)>,
}

/// The filters of a job or workflow list: `?paused=true|false` and `?label=key=value`.
///
/// # Errors
/// 400 naming `paused` or `label` when it is not of that form.
pub fn list_filters(
    q: &std::collections::HashMap<String, String>,
) -> Result<ListFilters, ApiError> {
    let paused = match q.get("paused").map(String::as_str) {
        None => None,
        Some("true") => Some(true),
        Some("false") => Some(false),
        Some(other) => {
            return Err(ApiError::bad_request(
                "paused",
                format!("'{other}' is not true or false"),
            ));
        }
    };
    let label = match q.get("label") {
        None => None,
        Some(text) => match text.split_once('=') {
            Some((k, v)) if !k.is_empty() => Some((k.to_owned(), v.to_owned())),
            _ => {
                return Err(ApiError::bad_request(
                    "label",
                    format!("'{text}' is not of the form key=value"),
                ));
            }
        },
    };
    Ok(ListFilters { paused, label })
}

/// Refuses a query parameter that is not in `known`, as a body's unknown field is refused
/// (docs/guarantees.md, "G7 Bad input"): a misspelt or unsupported filter (`?job=` where
/// there is none) would otherwise be ignored and answer with everything.
///
/// # Errors
/// 400 naming the first unknown parameter (in name order) and listing those `known`.
pub fn known_params(
    q: &std::collections::HashMap<String, String>,
    known: &[&str],
) -> Result<(), ApiError> {
    let mut unknown: Vec<&String> = q.keys().filter(|k| !known.contains(&k.as_str())).collect();
    unknown.sort();
    match unknown.first() {
        Some(name) => Err(ApiError::bad_request(
            name,
            format!(
                "is not a parameter of this request; it takes {}",
                known.join(", ")
            ),
        )),
        None => Ok(()),
    }
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

/// `?page_token=` of a job list: the name of the last job of the previous page.
///
/// # Errors
/// 400 naming `page_token` when it is not a job name, so it cannot be one this API issued.
pub fn job_page_token(raw: Option<&str>) -> Result<Option<String>, ApiError> {
    match raw {
        None => Ok(None),
        Some(text) => match sundial_core::names::check_name(text) {
            Ok(()) => Ok(Some(text.to_owned())),
            Err(_) => Err(ApiError::bad_request(
                "page_token",
                format!("'{text}' is not a page token from this API"),
            )),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::Router;
    use axum::http::Request;
    use axum::routing::get;
    use tower::ServiceExt;

    #[test]
    fn job_page_tokens_are_job_names() {
        assert_eq!(job_page_token(None).unwrap(), None);
        assert_eq!(
            job_page_token(Some("nightly-1")).unwrap(),
            Some("nightly-1".to_owned())
        );
        for bad in ["", "Not A Token", "-x", "a/b"] {
            let e = job_page_token(Some(bad)).unwrap_err();
            assert_eq!(e.status, StatusCode::BAD_REQUEST);
            assert_eq!(e.errors[0].field, "page_token");
        }
    }

    #[tokio::test]
    async fn a_path_that_is_not_utf8_is_a_problem_document() {
        let app = Router::new().route(
            "/{name}",
            get(|Path(name): Path<String>| async move { name }),
        );
        let response = app
            .oneshot(Request::get("/%FF").body(Body::empty()).unwrap())
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::BAD_REQUEST);
        assert_eq!(
            response.headers()[header::CONTENT_TYPE],
            "application/problem+json"
        );
    }
}
