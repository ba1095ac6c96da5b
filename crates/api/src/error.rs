//! The one mapping from errors to HTTP responses: RFC 9457 `application/problem+json`.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use sundial_core::validate::FieldError;
use sundial_store::Error as StoreError;

/// An API failure, rendered as a problem document.
#[derive(Debug)]
pub struct ApiError {
    /// HTTP status.
    pub status: StatusCode,
    /// Short, fixed summary of the problem type.
    pub title: &'static str,
    /// This occurrence, in words.
    pub detail: String,
    /// Every offending field, for validation failures.
    pub errors: Vec<FieldError>,
}

impl ApiError {
    /// A problem without field errors.
    pub fn new(status: StatusCode, title: &'static str, detail: impl Into<String>) -> Self {
        ApiError {
            status,
            title,
            detail: detail.into(),
            errors: Vec::new(),
        }
    }

    /// 422: the body parsed but fields are invalid.
    pub fn invalid(errors: Vec<FieldError>) -> Self {
        let detail = match errors.as_slice() {
            [one] if one.field.is_empty() => one.message.clone(),
            [one] => format!("{}: {}", one.field, one.message),
            many => format!("{} fields are invalid", many.len()),
        };
        ApiError {
            status: StatusCode::UNPROCESSABLE_ENTITY,
            title: "invalid request",
            detail,
            errors,
        }
    }

    /// 400: a bad query parameter or malformed request.
    pub fn bad_request(field: &str, message: impl Into<String>) -> Self {
        let message = message.into();
        ApiError {
            status: StatusCode::BAD_REQUEST,
            title: "bad request",
            detail: format!("{field}: {message}"),
            errors: vec![FieldError::new(field, message)],
        }
    }

    /// 404.
    pub fn not_found(what: impl Into<String>) -> Self {
        ApiError::new(
            StatusCode::NOT_FOUND,
            "not found",
            format!("{} not found", what.into()),
        )
    }
}

impl From<StoreError> for ApiError {
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::NotFound(what) => ApiError::not_found(what),
            StoreError::Conflict(m) => ApiError::new(StatusCode::CONFLICT, "conflict", m),
            StoreError::StaleVersion { expected, actual } => ApiError::new(
                StatusCode::PRECONDITION_FAILED,
                "precondition failed",
                format!("If-Match names version {expected}, the current version is {actual}"),
            ),
            StoreError::StaleFence(m) => ApiError::new(StatusCode::CONFLICT, "conflict", m),
            StoreError::InUse(m) => {
                ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "store in use", m)
            }
            // The database's own text (SQL, constraint names) goes to the log, never into a
            // problem's detail.
            StoreError::Unavailable(source) => {
                tracing::error!(error = %source, "store unavailable");
                ApiError::new(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "store unavailable",
                    "the store is unavailable; retry later",
                )
            }
            StoreError::Contended(source) => {
                tracing::warn!(error = %source, "store contended");
                ApiError::new(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "store busy",
                    "a concurrent change got there first and nothing was written; retry",
                )
            }
            StoreError::CommitUnknown(source) => {
                tracing::error!(error = %source, "commit outcome unknown");
                ApiError::new(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "outcome unknown",
                    "the store lost the connection while committing: the change may or may not \
                     have been applied; read the resource before retrying",
                )
            }
            StoreError::Defect(source) => {
                tracing::error!(error = %source, "the store refused a statement");
                ApiError::new(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "internal error",
                    "the store refused the request; this is a defect of Sundial",
                )
            }
            StoreError::Corrupt(m) => {
                tracing::error!(error = %m, "corrupt record");
                ApiError::new(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "internal error",
                    "a stored record could not be read",
                )
            }
        }
    }
}

/// The problem document of RFC 9457 every error answers with (`application/problem+json`).
#[derive(Debug, Clone, serde::Serialize, utoipa::ToSchema)]
pub struct Problem {
    /// Always `about:blank`: the status and title say what kind of problem it is.
    #[serde(rename = "type")]
    pub kind: &'static str,
    /// A short, fixed summary of the problem type (`invalid request`, `not found`, …).
    pub title: &'static str,
    /// The HTTP status code.
    pub status: u16,
    /// This occurrence, in words.
    pub detail: String,
    /// Every offending field, for a request refused as invalid (400, 422).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub errors: Vec<FieldError>,
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = Problem {
            kind: "about:blank",
            title: self.title,
            status: self.status.as_u16(),
            detail: self.detail,
            errors: self.errors,
        };
        let text = serde_json::to_string(&body).unwrap_or_default();
        let mut response = (self.status, text).into_response();
        response.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/problem+json"),
        );
        response
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Database failures keep the driver's text (SQL, constraint names) out of the problem.
    #[test]
    fn no_database_text_reaches_a_problem_detail() {
        let sql = "duplicate key value violates unique constraint \"executions_slot\"";
        for (error, status) in [
            (StoreError::Contended(sql.into()), 503),
            (StoreError::Unavailable(sql.into()), 503),
            (StoreError::CommitUnknown(sql.into()), 503),
            (StoreError::Defect(sql.into()), 500),
        ] {
            let problem = ApiError::from(error);
            assert_eq!(problem.status.as_u16(), status);
            assert!(
                !problem.detail.contains("executions_slot")
                    && !problem.detail.contains("duplicate"),
                "{}",
                problem.detail
            );
        }
    }
}
