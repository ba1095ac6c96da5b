//! Alerts (docs/configuration.md, "`[[alerts]]`"): the dispatcher that takes alert
//! events from the store's outbox (`sundial_store::alerts`) and sends one message per
//! matching `[[alerts]]` entry through the ordinary targets.
//!
//! It is a maintenance service ([`AlertDispatcher`], `sundial_store::maintenance`): each pass
//! claims up to [`ALERT_BATCH`] due events under a lease, delivers them concurrently, and
//! settles each. Nothing of it runs on the trigger, claim or completion paths: those only
//! write the event row (a trigger of the store, in their own transaction).
//!
//! Invariants:
//! - At least once: an event leaves the outbox only when every alert that matches it took
//!   it, gave up on it (a permanent error, or [`ALERT_MAX_ROUNDS`] rounds), or no longer
//!   exists in this process's config. A dispatcher that dies mid-pass leaves its events to
//!   the next claim once their lease ([`ALERT_LEASE`]) lapses.
//! - An alert that took an event is not sent it again by a later round of the same event
//!   (the outbox remembers the names); a receiver recognises a repeat (a dispatcher that
//!   died before settling) by the idempotency key `<execution or run id>:<state>`.
//! - Each delivery is bounded by [`ALERT_DELIVERY_TIMEOUT`]; a round that failed comes back
//!   after 1, 2, 4, … seconds, at most [`ALERT_MAX_BACKOFF`].
//! - Metrics: `sundial_alerts_total{alert, outcome}`, outcome `delivered`, `retried` (a
//!   round failed and the event comes back) or `failed` (given up).

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use jiff::{SignedDuration, Timestamp};
use serde_json::json;
use sundial_core::Dur;
use sundial_core::job::TargetSpec;
use sundial_store::maintenance::Service;
use sundial_store::{AlertEvent, AlertSettle, AlertSubject, MaintenanceStore};
use sundial_target::{Delivery, Error as TargetError, Target, Targets};

/// Most events one pass claims (100).
pub const ALERT_BATCH: u32 = 100;
/// How long a claimed event is held before another dispatcher may take it (60 s): longer than
/// a pass can take ([`ALERT_DELIVERY_TIMEOUT`] per delivery, all of a pass's concurrent).
pub const ALERT_LEASE: Duration = Duration::from_secs(60);
/// Longest one alert delivery may take (10 s); longer counts as a failed round.
pub const ALERT_DELIVERY_TIMEOUT: Duration = Duration::from_secs(10);
/// Longest wait between two rounds of one event (5 minutes).
pub const ALERT_MAX_BACKOFF: Duration = Duration::from_secs(300);
/// Rounds after which an alert gives an event up (20: about an hour of retries).
pub const ALERT_MAX_ROUNDS: u32 = 20;
/// Default period of the dispatcher's passes: 1 s (`maintenance.alerts_every`).
pub const ALERTS_EVERY_DEFAULT: Dur = Dur::from_secs(1);

/// One `[[alerts]]` entry, checked (the server's config names a bad one `alerts[i].FIELD`).
#[derive(Debug, Clone, PartialEq)]
pub struct AlertRule {
    /// Its name (`sundial_alerts_total{alert}`), unique in the config.
    pub name: String,
    /// The states it fires on, of [`sundial_store::ALERT_STATES`].
    pub on: Vec<String>,
    /// The namespaces it watches; `*` is every namespace.
    pub namespaces: Vec<String>,
    /// Where the message goes: an HTTP, NATS, AMQP or Redis target. Its body (payload, or
    /// the Redis field `alert`) is replaced by the message.
    pub target: TargetSpec,
}

impl AlertRule {
    /// True when this alert fires for `event`.
    pub fn matches(&self, event: &AlertEvent) -> bool {
        self.on.contains(&event.state)
            && self
                .namespaces
                .iter()
                .any(|n| n == "*" || *n == event.namespace)
    }
}

/// The alert dispatcher of one process (see the module invariants).
#[derive(Debug)]
pub struct AlertDispatcher {
    store: Arc<dyn MaintenanceStore>,
    targets: Arc<Targets>,
    rules: Vec<AlertRule>,
    public_url: String,
    every: Dur,
}

impl AlertDispatcher {
    /// A dispatcher of `rules` through `targets`, a pass every `every`; its messages link to
    /// the UI under `public_url` (e.g. `https://sundial.example.com`, no trailing slash).
    pub fn new(
        store: Arc<dyn MaintenanceStore>,
        targets: Arc<Targets>,
        rules: Vec<AlertRule>,
        public_url: String,
        every: Dur,
    ) -> Self {
        AlertDispatcher {
            store,
            targets,
            rules,
            public_url: public_url.trim_end_matches('/').to_owned(),
            every,
        }
    }

    /// The states the rules fire on, each once, to register with
    /// [`MaintenanceStore::alert_states_add`] before the first pass.
    pub fn states(&self) -> Vec<String> {
        let mut states: Vec<String> = self.rules.iter().flat_map(|r| r.on.clone()).collect();
        states.sort();
        states.dedup();
        states
    }

    /// One pass: claims due events, delivers each to its matching alerts, settles them.
    /// Returns how many events it settled for good.
    ///
    /// # Errors
    /// The store's, when claiming fails; a failed settle is logged and left to the lease.
    pub async fn dispatch_once(&self) -> sundial_store::Result<u64> {
        let events = self.store.alert_claim(ALERT_BATCH, ALERT_LEASE).await?;
        let now = self.store.now().await?;
        let settled =
            futures_util::future::join_all(events.iter().map(|e| self.handle(e, now))).await;
        Ok(settled.into_iter().filter(|done| *done).count() as u64)
    }

    /// Delivers `event` to every matching alert that has not taken it; settles it. True when
    /// the event left the outbox.
    async fn handle(&self, event: &AlertEvent, now: Timestamp) -> bool {
        let pending: Vec<&AlertRule> = self
            .rules
            .iter()
            .filter(|r| r.matches(event) && !event.delivered.contains(&r.name))
            .collect();
        let results = futures_util::future::join_all(
            pending.iter().map(|rule| self.deliver(rule, event, now)),
        )
        .await;
        let mut delivered = event.delivered.clone();
        let mut retry = false;
        for (rule, result) in pending.iter().zip(results) {
            let outcome = match result {
                Ok(()) => {
                    delivered.push(rule.name.clone());
                    "delivered"
                }
                Err(e) if e.is_retryable() && event.round < ALERT_MAX_ROUNDS => {
                    retry = true;
                    tracing::warn!(alert = %rule.name, id = %event.id, state = %event.state, round = event.round, error = %e.message(), "alert not delivered; retrying");
                    "retried"
                }
                Err(e) => {
                    // Given up: a permanent error, or the last round. It counts as taken so
                    // the other alerts' retries do not send it again.
                    delivered.push(rule.name.clone());
                    tracing::error!(alert = %rule.name, id = %event.id, state = %event.state, round = event.round, error = %e.message(), "alert given up");
                    "failed"
                }
            };
            metrics::counter!("sundial_alerts_total", "alert" => rule.name.clone(), "outcome" => outcome)
                .increment(1);
        }
        let settle = if retry {
            AlertSettle::Retry {
                delivered,
                due_at: now + backoff(event.round),
            }
        } else {
            AlertSettle::Done
        };
        match self
            .store
            .alert_settle(event.seq, event.round, &settle)
            .await
        {
            Ok(applied) => applied && settle == AlertSettle::Done,
            Err(e) => {
                tracing::warn!(id = %event.id, error = %e, "alert event not settled; its lease will lapse");
                false
            }
        }
    }

    async fn deliver(
        &self,
        rule: &AlertRule,
        event: &AlertEvent,
        now: Timestamp,
    ) -> Result<(), TargetError> {
        let message = message(rule, event, &self.public_url).to_string();
        let target = with_body(&rule.target, message);
        let key = format!("{}:{}", event.id, event.state);
        let delivery = Delivery {
            execution_id: &key,
            namespace: &event.namespace,
            attempt: event.round,
            lease_until: None,
            signature: None,
            scheduled_at: event.finished_at.unwrap_or(now),
            now,
            target: &target,
            keep_output: false,
        };
        match tokio::time::timeout(ALERT_DELIVERY_TIMEOUT, self.targets.dispatch(&delivery)).await {
            Ok(result) => result.map(|_| ()),
            Err(_) => Err(TargetError::Retryable {
                after: None,
                status_code: None,
                message: format!("no answer within {}s", ALERT_DELIVERY_TIMEOUT.as_secs()),
            }),
        }
    }
}

/// The wait after failed round `round` (from 1): 1 s, 2 s, 4 s, … at most
/// [`ALERT_MAX_BACKOFF`].
pub fn backoff(round: u32) -> SignedDuration {
    let secs = 1u64
        .checked_shl(round.saturating_sub(1))
        .unwrap_or(u64::MAX)
        .min(ALERT_MAX_BACKOFF.as_secs());
    SignedDuration::from_secs(i64::try_from(secs).unwrap_or(i64::MAX))
}

/// The alert's JSON message (docs/configuration.md, "`[[alerts]]`"): which alert, what ended (namespace, job or workflow,
/// task, execution or run id), its state, attempt, last error, when, the idempotency key
/// and the UI link.
pub fn message(rule: &AlertRule, event: &AlertEvent, public_url: &str) -> serde_json::Value {
    let ns = &event.namespace;
    let (kind, link) = match event.subject {
        AlertSubject::Execution => (
            "execution",
            format!("{public_url}/ui/namespaces/{ns}/executions/{}", event.id),
        ),
        AlertSubject::Run => (
            "run",
            format!("{public_url}/ui/namespaces/{ns}/runs/{}", event.id),
        ),
    };
    let mut body = json!({
        "alert": rule.name,
        "kind": kind,
        "namespace": ns,
        "state": event.state,
        "attempt": event.attempt,
        "error": event.error,
        "finished_at": event.finished_at,
        "idempotency_key": format!("{}:{}", event.id, event.state),
        "url": link,
    });
    if let Some(obj) = body.as_object_mut() {
        match event.subject {
            AlertSubject::Execution if event.run_id.is_some() => {
                obj.insert("workflow".into(), json!(event.name));
                obj.insert("task".into(), json!(event.task));
                obj.insert("run_id".into(), json!(event.run_id));
                obj.insert("execution_id".into(), json!(event.id));
            }
            AlertSubject::Execution => {
                obj.insert("job".into(), json!(event.name));
                obj.insert("execution_id".into(), json!(event.id));
            }
            AlertSubject::Run => {
                obj.insert("workflow".into(), json!(event.name));
                obj.insert("run_id".into(), json!(event.id));
            }
        }
    }
    body
}

/// `target` carrying `message`: an HTTP body (JSON unless the alert set a content type), a
/// NATS or AMQP payload, the Redis field `alert`.
fn with_body(target: &TargetSpec, message: String) -> TargetSpec {
    let mut target = target.clone();
    match &mut target {
        TargetSpec::Http(t) => {
            if !t
                .headers
                .keys()
                .any(|k| k.eq_ignore_ascii_case("content-type"))
            {
                t.headers
                    .insert("Content-Type".into(), "application/json".into());
            }
            t.body = Some(message);
        }
        TargetSpec::Nats(t) => t.payload = message,
        TargetSpec::Amqp(t) => t.payload = message,
        TargetSpec::Redis(t) => {
            t.fields.insert("alert".into(), message);
        }
        // The config refuses a container alert; nothing to carry a message in.
        TargetSpec::Container(_) => {}
    }
    target
}

#[async_trait]
impl Service for AlertDispatcher {
    fn name(&self) -> &'static str {
        "alerts"
    }

    fn every(&self) -> Dur {
        self.every
    }

    /// One [`AlertDispatcher::dispatch_once`].
    ///
    /// # Errors
    /// The store's.
    async fn run_once(&self) -> sundial_store::Result<u64> {
        self.dispatch_once().await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(state: &str, ns: &str) -> AlertEvent {
        AlertEvent {
            seq: 1,
            round: 1,
            subject: AlertSubject::Execution,
            id: "e1".into(),
            state: state.into(),
            namespace: ns.into(),
            name: "nightly".into(),
            task: None,
            run_id: None,
            attempt: 3,
            error: Some("HTTP 503".into()),
            finished_at: None,
            delivered: Vec::new(),
        }
    }

    fn rule(on: &[&str], namespaces: &[&str]) -> AlertRule {
        AlertRule {
            name: "oncall".into(),
            on: on.iter().map(|s| s.to_string()).collect(),
            namespaces: namespaces.iter().map(|s| s.to_string()).collect(),
            target: TargetSpec::Http(sundial_core::job::HttpTarget {
                method: "POST".into(),
                url: "http://127.0.0.1:9/".into(),
                headers: Default::default(),
                body: None,
                success_codes: Vec::new(),
            }),
        }
    }

    #[test]
    fn a_rule_matches_its_states_in_its_namespaces() {
        let r = rule(&["dead", "run_failed"], &["billing"]);
        assert!(r.matches(&event("dead", "billing")));
        assert!(!r.matches(&event("failed", "billing")));
        assert!(!r.matches(&event("dead", "other")));
        assert!(rule(&["dead"], &["*"]).matches(&event("dead", "other")));
    }

    #[test]
    fn backoff_doubles_up_to_five_minutes() {
        let secs: Vec<i64> = [1, 2, 3, 9, 10, 64, u32::MAX]
            .iter()
            .map(|r| backoff(*r).as_secs())
            .collect();
        assert_eq!(secs, vec![1, 2, 4, 256, 300, 300, 300]);
    }

    #[test]
    fn the_message_names_what_ended_and_links_the_ui() {
        let m = message(
            &rule(&["dead"], &["*"]),
            &event("dead", "billing"),
            "https://s.example",
        );
        assert_eq!(m["job"], "nightly");
        assert_eq!(m["execution_id"], "e1");
        assert_eq!(m["idempotency_key"], "e1:dead");
        assert_eq!(m["attempt"], 3);
        assert_eq!(m["error"], "HTTP 503");
        assert_eq!(
            m["url"],
            "https://s.example/ui/namespaces/billing/executions/e1"
        );
        let mut run = event("run_failed", "billing");
        run.subject = AlertSubject::Run;
        let m = message(&rule(&["run_failed"], &["*"]), &run, "");
        assert_eq!(
            (m["workflow"].as_str(), m["run_id"].as_str()),
            (Some("nightly"), Some("e1"))
        );
        assert!(m.get("job").is_none());
    }

    #[test]
    fn the_message_replaces_each_target_body() {
        let r = rule(&["dead"], &["*"]);
        let TargetSpec::Http(http) = with_body(&r.target, "{}".into()) else {
            panic!("http stays http");
        };
        assert_eq!(http.body.as_deref(), Some("{}"));
        assert_eq!(http.headers["Content-Type"], "application/json");
    }
}
