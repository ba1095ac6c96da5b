//! Decoding rows into store records, and the conversions every query shares: the decoders of
//! `sundial_store::row_decoders!`, expanded for this backend's rows.

sundial_store::row_decoders!(
    sqlx::postgres::PgRow,
    sqlx::Postgres,
    sundial_store::errors::classify_postgres
);
