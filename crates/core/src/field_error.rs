//! The error of one field of a request body, as every validation reports it and the API's
//! problem+json `errors` list carries it (README.md, "The API").

use serde::Serialize;

/// One bad field: its dotted path and what is wrong with it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct FieldError {
    /// Dotted path, e.g. `schedule.cron`; empty for the body as a whole.
    pub field: String,
    /// Lowercase reason.
    pub message: String,
}

impl FieldError {
    /// A field error.
    pub fn new(field: impl Into<String>, message: impl Into<String>) -> Self {
        FieldError {
            field: field.into(),
            message: message.into(),
        }
    }
}
