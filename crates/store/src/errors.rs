//! Database error codes by kind, for [`crate::Error`]: PostgreSQL's SQLSTATEs (five
//! characters, class first) and SQLite's result codes (decimal numbers, the primary code in the
//! low byte), one function each.
//!
//! Sources: PostgreSQL's "Appendix A. PostgreSQL Error Codes"; SQLite's "Result and Error
//! Codes" (`sqlite.org/rescode.html`).

use crate::Error;

/// The kind of a database failure.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Lost to a concurrent transaction; nothing written; retryable.
    Contended,
    /// The database could not be reached or answered; retryable.
    Unavailable,
    /// Anything else: a defect of the statement or the schema; not retryable.
    Defect,
}

impl Kind {
    /// The [`Error`] of this kind around `source`.
    pub fn error(self, source: Box<dyn std::error::Error + Send + Sync>) -> Error {
        match self {
            Kind::Contended => Error::Contended(source),
            Kind::Unavailable => Error::Unavailable(source),
            Kind::Defect => Error::Defect(source),
        }
    }
}

/// The kind of a PostgreSQL error by its SQLSTATE.
pub fn classify_postgres(code: &str) -> Kind {
    match code {
        // unique_violation, serialization_failure, deadlock_detected, lock_not_available
        "23505" | "40001" | "40P01" | "55P03" => Kind::Contended,
        // admin_shutdown, crash_shutdown, cannot_connect_now, too_many_connections
        "57P01" | "57P02" | "57P03" | "53300" => Kind::Unavailable,
        // connection_exception and its subclasses
        c if c.starts_with("08") => Kind::Unavailable,
        _ => Kind::Defect,
    }
}

/// The kind of a SQLite error by its primary or extended result code (as sqlx gives it, in
/// decimal); a code that is not a number is a defect.
pub fn classify_sqlite(code: &str) -> Kind {
    code.parse().map_or(Kind::Defect, sqlite_kind)
}

/// The kind of a SQLite primary or extended result code.
fn sqlite_kind(code: u32) -> Kind {
    const SQLITE_CONSTRAINT_PRIMARYKEY: u32 = 1555;
    const SQLITE_CONSTRAINT_UNIQUE: u32 = 2067;
    match code {
        SQLITE_CONSTRAINT_PRIMARYKEY | SQLITE_CONSTRAINT_UNIQUE => Kind::Contended,
        _ => match code & 0xff {
            // SQLITE_BUSY, SQLITE_LOCKED
            5 | 6 => Kind::Contended,
            // SQLITE_IOERR, SQLITE_FULL, SQLITE_CANTOPEN, SQLITE_PROTOCOL
            10 | 13 | 14 | 15 => Kind::Unavailable,
            _ => Kind::Defect,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_are_classified_by_kind() {
        for (code, kind) in [
            ("23505", Kind::Contended),
            ("40001", Kind::Contended),
            ("40P01", Kind::Contended),
            ("08006", Kind::Unavailable),
            ("57P01", Kind::Unavailable),
            ("42601", Kind::Defect),
            ("23503", Kind::Defect),
            ("", Kind::Defect),
        ] {
            assert_eq!(classify_postgres(code), kind, "{code}");
        }
        for (code, kind) in [
            ("5", Kind::Contended),
            ("517", Kind::Contended),
            ("2067", Kind::Contended),
            ("1555", Kind::Contended),
            ("787", Kind::Defect),
            ("1", Kind::Defect),
            ("266", Kind::Unavailable),
            ("x", Kind::Defect),
        ] {
            assert_eq!(classify_sqlite(code), kind, "{code}");
        }
    }

    #[test]
    fn a_lost_commit_is_of_unknown_outcome_and_the_rest_keep_their_kind() {
        let lost = Error::Unavailable("reset".into()).at_commit();
        assert!(lost.outcome_unknown() && !lost.is_retryable());
        let busy = Error::Contended("40001".into()).at_commit();
        assert!(busy.is_retryable() && !busy.outcome_unknown());
        assert!(!Error::Defect("42601".into()).is_retryable());
    }
}
