//! Decoding rows into store records, and the conversions every query shares: the decoders of
//! `sundial_store::row_decoders!`, expanded for this backend's rows.

sundial_store::row_decoders!(
    sqlx::postgres::PgRow,
    sqlx::Postgres,
    sundial_store::errors::classify_postgres
);

/// `value` as JSON text.
///
/// # Errors
/// [`Error::Corrupt`] when it does not serialise.
pub(crate) fn to_json<T: serde::Serialize>(value: &T) -> Result<String> {
    serde_json::to_string(value).map_err(|e| Error::Corrupt(e.to_string()))
}
