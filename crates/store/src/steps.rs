//! Store steps written once: each step's fetch → decide → apply loop, generic over the typed
//! statements a dialect provides (ARCHITECTURE.md, "Code map": the SQL text and binds stay in
//! each store, the loop and the decision it applies live here). A store implements a step's
//! statements trait on a wrapper of its open transaction and calls the step, monomorphised:
//! nothing on these paths is boxed.
//!
//! Invariants: a step reads what it decides from inside the caller's transaction and writes
//! what it decided in the same transaction, one statement a kind of write whatever the number
//! of rows; a step never commits (the caller does, with the rest of its transaction).

pub mod audit;
pub mod backfill;
pub mod calendars;
pub mod claim;
pub mod complete;
pub mod executions;
pub mod jobs;
pub mod late;
pub mod listings;
pub mod liveness;
pub mod nodes;
pub mod release;
pub mod retention;
pub mod run_create;
pub mod runs;
pub mod secrets;
pub mod trigger;
pub mod workflow_writes;

/// The instant of `ms` (UTC milliseconds since the epoch), a reading of the store's clock or a
/// stored slot, as a step's records carry it.
///
/// # Errors
/// [`crate::Error::Corrupt`] naming `ms` when it is no instant (out of jiff's range).
pub(crate) fn instant(ms: i64) -> crate::Result<jiff::Timestamp> {
    jiff::Timestamp::from_millisecond(ms)
        .map_err(|e| crate::Error::Corrupt(format!("instant {ms}: {e}")))
}

/// The end of a delete that a resource's users block (a calendar named in
/// `exclude_calendars`, a secret referenced as `{{ secret.NAME }}`): given the users the
/// transaction found and the rows its delete removed, `Ok` when nothing blocked it and a row
/// went.
///
/// # Errors
/// [`crate::Error::Conflict`] `"{what} is {used_as} {users, comma-separated}"` when there are
/// users (the caller deletes nothing then: pass `deleted` 0); [`crate::Error::NotFound`]
/// `"{what}"` when no row went.
pub(crate) fn unless_used(
    what: &str,
    used_as: &str,
    users: &[String],
    deleted: u64,
) -> crate::Result<()> {
    if !users.is_empty() {
        return Err(crate::Error::Conflict(format!(
            "{what} is {used_as} {}",
            users.join(", ")
        )));
    }
    if deleted == 0 {
        return Err(crate::Error::NotFound(what.to_owned()));
    }
    Ok(())
}
