//! Alert events: the store's outbox of alerts (docs/configuration.md, "alerts").
//!
//! Invariants every backend keeps:
//! - An event is written by the transaction that ends the execution or the run (a trigger on
//!   the state column, so no path that ends one can skip it), and only for a state some
//!   process registered with [`crate::MaintenanceStore::alert_states_add`]: with no `[[alerts]]` nothing
//!   is written.
//! - An event is held by at most one dispatcher at a time, under a lease by the store's clock;
//!   one whose lease lapsed is claimed again (delivery is at least once).
//! - A settle applies only for the claim it answers (`round`): a dispatcher whose lease
//!   lapsed and whose event was claimed again changes nothing.

use jiff::Timestamp;
use serde::Serialize;

/// The states an alert may name in `on` (docs/configuration.md, "`[[alerts]]`"): an execution ending `failed`, `dead` or
/// `cancelled`, a workflow run ending `failed` or `cancelled`.
pub const ALERT_STATES: [&str; 5] = ["failed", "dead", "cancelled", "run_failed", "run_cancelled"];

/// What an alert event is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum AlertSubject {
    /// An execution (of a job, or a workflow task).
    Execution,
    /// A workflow run.
    Run,
}

impl AlertSubject {
    /// The stored name: `execution` or `run`.
    pub fn as_str(self) -> &'static str {
        match self {
            AlertSubject::Execution => "execution",
            AlertSubject::Run => "run",
        }
    }
}

/// One alert event as a dispatcher claims it, with what its message says.
#[derive(Debug, Clone, PartialEq)]
pub struct AlertEvent {
    /// The event's sequence number (its key in the outbox).
    pub seq: i64,
    /// The delivery round this claim is, from 1; [`crate::MaintenanceStore::alert_settle`] names it.
    pub round: u32,
    /// Execution or run.
    pub subject: AlertSubject,
    /// The execution or run id.
    pub id: String,
    /// The state as alerts name it: `failed`, `dead`, `cancelled`, `run_failed`,
    /// `run_cancelled`.
    pub state: String,
    /// Namespace.
    pub namespace: String,
    /// The job's name; the workflow's for a run or a workflow task.
    pub name: String,
    /// The task's name, for a workflow task's execution.
    pub task: Option<String>,
    /// The run a workflow task's execution belongs to.
    pub run_id: Option<String>,
    /// The execution's last attempt number (0 for a run, or an execution that never ran).
    pub attempt: u32,
    /// The last attempt's error text, if any (for a run: the first failed task's).
    pub error: Option<String>,
    /// When the execution or run ended, by the store's clock.
    pub finished_at: Option<Timestamp>,
    /// The alerts (by name) that already took this event in an earlier round.
    pub delivered: Vec<String>,
}

/// How a claimed event is settled.
#[derive(Debug, Clone, PartialEq)]
pub enum AlertSettle {
    /// Every matching alert took it: the event is deleted.
    Done,
    /// Some did not: the event comes back at `due_at` (UTC), with `delivered` (alert names)
    /// remembered so the next round sends only to the others.
    Retry {
        /// The alerts that took it so far.
        delivered: Vec<String>,
        /// When to try again.
        due_at: Timestamp,
    },
}

/// Rows counted per namespace (`sundial_dead_letters{namespace}`, the queue-depth gauge).
pub type NamespaceCounts = std::collections::BTreeMap<String, u64>;

/// Counts per namespace from `(namespace, count)` rows as SQL returns them (a negative count,
/// which SQL never gives, reads 0).
pub fn namespace_counts(rows: Vec<(String, i64)>) -> NamespaceCounts {
    rows.into_iter()
        .map(|(ns, n)| (ns, u64::try_from(n).unwrap_or(0)))
        .collect()
}

/// Checks states for [`crate::MaintenanceStore::alert_states_add`].
///
/// # Errors
/// [`crate::Error::Defect`] naming the first state outside [`ALERT_STATES`].
pub fn check_states(states: &[String]) -> crate::Result<()> {
    match states.iter().find(|s| !ALERT_STATES.contains(&s.as_str())) {
        Some(bad) => Err(crate::Error::Defect(
            format!("'{bad}' is not an alert state").into(),
        )),
        None => Ok(()),
    }
}

/// A claimed outbox row as both backends read it: seq, round, kind (`execution` or `run`), id,
/// state, namespace, delivered (JSON array of alert names).
pub type AlertRow = (i64, i64, String, String, String, String, String);

/// What an event's message says of its execution or run: id, name, task, run id, attempt,
/// `finished_at`, last error.
pub type AlertDetailsRow = (
    String,
    String,
    Option<String>,
    Option<String>,
    i64,
    Option<i64>,
    Option<String>,
);

/// The stored form of `delivered`: a JSON array of alert names.
pub fn delivered_json(delivered: &[String]) -> crate::Result<String> {
    serde_json::to_string(delivered).map_err(|e| crate::Error::Defect(e.into()))
}

/// Joins claimed rows with their details; returns the events and the sequence numbers of
/// those whose execution or run is gone.
pub fn events_of(
    claimed: Vec<AlertRow>,
    executions: &[AlertDetailsRow],
    runs: &[AlertDetailsRow],
) -> crate::Result<(Vec<AlertEvent>, Vec<i64>)> {
    let (mut events, mut gone) = (Vec::with_capacity(claimed.len()), Vec::new());
    for (seq, round, kind, id, state, namespace, delivered) in claimed {
        let (subject, pool) = match kind.as_str() {
            "run" => (AlertSubject::Run, runs),
            _ => (AlertSubject::Execution, executions),
        };
        let Some(d) = pool.iter().find(|d| d.0 == id) else {
            gone.push(seq);
            continue;
        };
        events.push(AlertEvent {
            seq,
            round: u32::try_from(round).unwrap_or(u32::MAX),
            subject,
            id,
            state,
            namespace,
            name: d.1.clone(),
            task: d.2.clone(),
            run_id: d.3.clone(),
            attempt: u32::try_from(d.4).unwrap_or(0),
            error: d.6.clone(),
            finished_at: d
                .5
                .map(|t| {
                    Timestamp::from_millisecond(t)
                        .map_err(|e| crate::Error::Corrupt(format!("alert finished_at: {e}")))
                })
                .transpose()?,
            delivered: serde_json::from_str(&delivered)
                .map_err(|e| crate::Error::Corrupt(format!("alert_events.delivered: {e}")))?,
        });
    }
    Ok((events, gone))
}
