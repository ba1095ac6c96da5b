//! The failure suite for workflows (docs/workflows.md): real `sundial` processes on
//! one PostgreSQL (`common::cluster`, as the job scenarios of `failure.rs`), a real loopback
//! receiver recording every delivery, real SIGKILL/SIGSTOP and a real database restart. Each
//! scenario judges W1–W4 (and G2, G3, G5 for the task executions) from the records — the
//! API's runs and executions, the executions table, the receiver's log — and prints a summary.
//! (No scenario here cancels a run, so W5 has nothing to judge.)
//!
//! Scenarios run one at a time (one restarts the shared PostgreSQL); each uses its own freshly
//! created database, dropped afterwards. Tasks have a 2 s heartbeat timeout, so a lost
//! worker's attempt is retried within seconds.

mod common;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::{Duration, Instant};

use common::cluster::{
    Cluster, SERIAL, complete_as_a_late_worker, pool, restart_postgresql, stop_postgresql_for,
};
use common::{Delivery, ts, whole_second_after};
use jiff::{SignedDuration, Timestamp};
use serde_json::{Value, json};

const NS: &str = "wf";

/// Every task's retry, timeouts and lease: a lapsed lease is seen within 2 s.
fn defaults() -> Value {
    json!({
        "heartbeat_timeout": "2s",
        "timeout": "60s",
        "retry": {"max_attempts": 5, "initial_interval": "200ms", "max_interval": "1s", "jitter": false}
    })
}

fn http(url: String) -> Value {
    json!({"type": "http", "url": url})
}

fn run_is_terminal(state: &str) -> bool {
    !matches!(state, "scheduled" | "running")
}

fn task_is_terminal(state: &str) -> bool {
    !matches!(
        state,
        "pending" | "scheduled" | "queued" | "running" | "retry_wait"
    )
}

/// The task `name` of a run record.
fn task<'a>(run: &'a Value, name: &str) -> &'a Value {
    run["tasks"]
        .as_array()
        .and_then(|tasks| tasks.iter().find(|t| t["name"] == name))
        .unwrap_or_else(|| panic!("no task {name} in {run}"))
}

fn text(v: &Value) -> String {
    v.as_str().unwrap_or_default().to_owned()
}

fn instant(v: &Value) -> Option<Timestamp> {
    v.as_str().and_then(|s| s.parse().ok())
}

/// What the records say about the runs of some workflows (with, for scheduled ones, a
/// window of slots).
#[derive(Debug, Default)]
struct RunVerdict {
    runs: usize,
    tasks: usize,
    slots: usize,
    /// W1: slots of the window without a run, or with more than one: (workflow, slot).
    missing_runs: Vec<(String, Timestamp)>,
    duplicate_runs: Vec<(String, Timestamp)>,
    /// W1: (run, task) without an execution, or with more than one, in the API's run record
    /// or in the executions table.
    missing_executions: Vec<(String, String)>,
    duplicate_executions: Vec<(String, String)>,
    /// W2: runs not terminal when the wait ended, tasks not terminal, runs that ended while a
    /// task had not (terminal with an unfinished task, or finished before a task did), runs
    /// whose every task ended but that did not.
    unfinished_runs: Vec<(String, String)>,
    unfinished_tasks: Vec<(String, String, String)>,
    ended_before_a_task: Vec<String>,
    not_ended: Vec<String>,
    /// Runs that ended otherwise than `succeeded` (every task of these scenarios succeeds).
    not_succeeded: Vec<(String, String)>,
    /// W4: runs not on the version they were created with (no workflow changes here: 1).
    other_version: Vec<(String, i64)>,
    /// G2: tasks that ran (not skipped, not upstream_failed) but were never delivered.
    undelivered: Vec<(String, String)>,
    /// W3: tasks delivered before an upstream of theirs had succeeded (every task here has
    /// the default rule, `all_success`): (run, task, how early; MAX when it never succeeded).
    released_early: Vec<(String, String, SignedDuration)>,
    /// G5: first tasks delivered before their run's fire time.
    early: Vec<(String, String, SignedDuration)>,
    /// G3: executions whose records contradict their deliveries (a delivered attempt the
    /// execution does not know, more than one succeeded attempt, a succeeded attempt that is
    /// not the last).
    attempt_conflicts: Vec<(String, String)>,
    /// At least once: deliveries beyond one per execution, and how they came about.
    redeliveries: usize,
    executions_redelivered: usize,
    same_attempt_twice: usize,
    /// First task delivery − fire time, over the window's runs.
    max_lag: SignedDuration,
}

impl RunVerdict {
    /// W1, W2, W3, W4 and G2, G3, G5; at-least-once redeliveries are allowed (reported).
    fn assert_guarantees(&self) {
        let checks: [(&str, usize, String); 14] = [
            (
                "W1: slots without a run",
                self.missing_runs.len(),
                format!("{:?}", self.missing_runs),
            ),
            (
                "W1: slots with two runs",
                self.duplicate_runs.len(),
                format!("{:?}", self.duplicate_runs),
            ),
            (
                "W1: tasks without an execution",
                self.missing_executions.len(),
                format!("{:?}", self.missing_executions),
            ),
            (
                "W1: tasks with two executions",
                self.duplicate_executions.len(),
                format!("{:?}", self.duplicate_executions),
            ),
            (
                "W2: runs that did not end",
                self.unfinished_runs.len(),
                format!("{:?}", self.unfinished_runs),
            ),
            (
                "W2: tasks that did not end",
                self.unfinished_tasks.len(),
                format!("{:?}", self.unfinished_tasks),
            ),
            (
                "W2: runs that ended before a task",
                self.ended_before_a_task.len(),
                format!("{:?}", self.ended_before_a_task),
            ),
            (
                "W2: runs whose tasks all ended but that did not",
                self.not_ended.len(),
                format!("{:?}", self.not_ended),
            ),
            (
                "runs that did not succeed",
                self.not_succeeded.len(),
                format!("{:?}", self.not_succeeded),
            ),
            (
                "W4: runs on another version",
                self.other_version.len(),
                format!("{:?}", self.other_version),
            ),
            (
                "G2: tasks never delivered",
                self.undelivered.len(),
                format!("{:?}", self.undelivered),
            ),
            (
                "W3: tasks delivered before their upstream succeeded",
                self.released_early.len(),
                format!("{:?}", self.released_early),
            ),
            (
                "G5: tasks delivered before their run's fire time",
                self.early.len(),
                format!("{:?}", self.early),
            ),
            (
                "G3: attempts the records contradict",
                self.attempt_conflicts.len(),
                format!("{:?}", self.attempt_conflicts),
            ),
        ];
        let failed: Vec<String> = checks
            .iter()
            .filter(|(_, n, _)| *n > 0)
            .map(|(what, n, which)| format!("{what} ({n}): {which}"))
            .collect();
        assert!(failed.is_empty(), "{}", failed.join("\n"));
    }
}

fn summary(name: &str, v: &RunVerdict, extra: &str) {
    let slots = if v.slots > 0 {
        format!(
            "{} slots (missing {}, duplicate {}), ",
            v.slots,
            v.missing_runs.len(),
            v.duplicate_runs.len()
        )
    } else {
        String::new()
    };
    println!(
        "scenario {name}: {slots}{} runs, {} tasks; W1 executions missing {} duplicate {}; \
         W2 unfinished runs {} tasks {}, runs ended before a task {}, not ended {}; \
         not succeeded {}; W4 other version {}; G2 undelivered {}; W3 released early {}; \
         G5 early {}; G3 conflicts {}; redeliveries {} ({} executions, same attempt twice {}); \
         max lag {} ms{extra}",
        v.runs,
        v.tasks,
        v.missing_executions.len(),
        v.duplicate_executions.len(),
        v.unfinished_runs.len(),
        v.unfinished_tasks.len(),
        v.ended_before_a_task.len(),
        v.not_ended.len(),
        v.not_succeeded.len(),
        v.other_version.len(),
        v.undelivered.len(),
        v.released_early.len(),
        v.early.len(),
        v.attempt_conflicts.len(),
        v.redeliveries,
        v.executions_redelivered,
        v.same_attempt_twice,
        v.max_lag.as_millis()
    );
}

/// The slots `from`, `from` + 1 s, ... up to `to`.
fn every_second(from: Timestamp, to: Timestamp) -> Vec<Timestamp> {
    let mut slots = Vec::new();
    let mut t = from;
    while t <= to {
        slots.push(t);
        t += SignedDuration::from_secs(1);
    }
    slots
}

/// The runs of `workflows` that the judge looks at: all of them, or, with a window, those of
/// its slots. `None` while the API does not answer (a store coming back).
async fn list_runs(
    c: &Cluster,
    workflows: &[String],
    window: Option<(Timestamp, Timestamp)>,
) -> Option<Vec<(String, Value)>> {
    let mut all = Vec::new();
    for w in workflows {
        let runs = c.nodes[0]
            .try_all_pages(&format!(
                "/v1/namespaces/{NS}/workflows/{w}/runs?limit=1000"
            ))
            .await
            .ok()?;
        all.extend(
            runs.into_iter()
                .filter(|r| {
                    window.is_none_or(|(from, to)| {
                        matches!(r["trigger"].as_str(), Some("schedule" | "misfire"))
                            && (from..=to).contains(&ts(&r["scheduled_at"]))
                    })
                })
                .map(|r| (w.clone(), r)),
        );
    }
    Some(all)
}

/// Waits (at most `limit`) until every slot of the window has a run and every run is
/// terminal, then judges the runs of `workflows`, each made of the tasks `tasks`.
async fn judge_runs(
    c: &Cluster,
    workflows: &[String],
    tasks: &[String],
    window: Option<(Timestamp, Timestamp)>,
    limit: Duration,
) -> RunVerdict {
    let slots = window.map_or_else(Vec::new, |(from, to)| every_second(from, to));
    let deadline = Instant::now() + limit;
    loop {
        let settled = list_runs(c, workflows, window).await.is_some_and(|runs| {
            let covered: HashSet<(&str, Timestamp)> = runs
                .iter()
                .map(|(w, r)| (w.as_str(), ts(&r["scheduled_at"])))
                .collect();
            runs.iter()
                .all(|(_, r)| run_is_terminal(r["state"].as_str().unwrap_or("")))
                && workflows
                    .iter()
                    .all(|w| slots.iter().all(|s| covered.contains(&(w.as_str(), *s))))
        });
        if settled || Instant::now() > deadline {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let listed = list_runs(c, workflows, window)
        .await
        .expect("the API answers once the wait is over");
    let mut runs: Vec<(String, Value)> = Vec::new();
    for (w, r) in &listed {
        let id = text(&r["id"]);
        runs.push((w.clone(), c.nodes[0].run(NS, w, &id).await));
    }

    let mut v = RunVerdict {
        runs: runs.len(),
        slots: slots.len() * workflows.len(),
        ..RunVerdict::default()
    };
    // W1: one run per slot.
    let mut per_slot: HashMap<(String, Timestamp), usize> = HashMap::new();
    for (w, r) in &runs {
        *per_slot
            .entry((w.clone(), ts(&r["scheduled_at"])))
            .or_default() += 1;
    }
    for w in workflows {
        for s in &slots {
            match per_slot.get(&(w.clone(), *s)) {
                None => v.missing_runs.push((w.clone(), *s)),
                Some(n) if *n > 1 => v.duplicate_runs.push((w.clone(), *s)),
                _ => {}
            }
        }
    }
    // W1: one execution per (run, task), in the run records and in the executions table.
    let ids: Vec<String> = runs.iter().map(|(_, r)| text(&r["id"])).collect();
    let pool = pool(&c.url).await;
    let stored: Vec<(String, String, i64)> = sqlx::query_as(
        "SELECT run_id, task, count(*) FROM executions WHERE run_id = ANY($1) GROUP BY run_id, task",
    )
    .bind(&ids)
    .fetch_all(&pool)
    .await
    .expect("count the executions of each task");
    pool.close().await;
    let stored: HashMap<(String, String), i64> = stored
        .into_iter()
        .map(|(run, task, n)| ((run, task), n))
        .collect();
    // Execution id → (run, task), and what each task's record says.
    let mut owner: HashMap<String, (String, String)> = HashMap::new();
    for (_, r) in &runs {
        let id = text(&r["id"]);
        let listed = r["tasks"].as_array().cloned().unwrap_or_default();
        v.tasks += listed.len();
        for name in tasks {
            let in_record = listed.iter().filter(|t| t["name"] == name.as_str()).count();
            let in_table = stored
                .get(&(id.clone(), name.clone()))
                .copied()
                .unwrap_or(0);
            let skipped = matches!(r["state"].as_str(), Some("skipped" | "missed"));
            if (in_record == 0 || in_table == 0) && !skipped {
                v.missing_executions.push((id.clone(), name.clone()));
            }
            if in_record > 1 || in_table > 1 {
                v.duplicate_executions.push((id.clone(), name.clone()));
            }
        }
        for t in &listed {
            owner.insert(text(&t["execution_id"]), (id.clone(), text(&t["name"])));
        }
    }
    // Deliveries per execution.
    let mut delivered: HashMap<String, Vec<Delivery>> = HashMap::new();
    for d in c.receiver.deliveries() {
        if owner.contains_key(&d.execution_id) {
            delivered.entry(d.execution_id.clone()).or_default().push(d);
        }
    }
    let mut lags = Vec::new();
    for (_, r) in &runs {
        let id = text(&r["id"]);
        let state = text(&r["state"]);
        let listed = r["tasks"].as_array().cloned().unwrap_or_default();
        if r["workflow_version"] != 1 {
            v.other_version
                .push((id.clone(), r["workflow_version"].as_i64().unwrap_or(-1)));
        }
        // W2.
        let run_finished = instant(&r["finished_at"]);
        let all_ended = listed
            .iter()
            .all(|t| task_is_terminal(t["state"].as_str().unwrap_or("")));
        if !run_is_terminal(&state) {
            v.unfinished_runs.push((id.clone(), state.clone()));
            if all_ended && !listed.is_empty() {
                v.not_ended.push(id.clone());
            }
        } else if state != "succeeded" {
            v.not_succeeded.push((id.clone(), state.clone()));
        }
        for t in &listed {
            let (name, t_state) = (text(&t["name"]), text(&t["state"]));
            if !task_is_terminal(&t_state) {
                v.unfinished_tasks
                    .push((id.clone(), name.clone(), t_state.clone()));
            }
            let ended_before = match (run_finished, instant(&t["finished_at"])) {
                (Some(run_end), Some(task_end)) => run_end < task_end,
                (Some(_), None) => true,
                _ => false,
            };
            if run_is_terminal(&state) && (!task_is_terminal(&t_state) || ended_before) {
                v.ended_before_a_task.push(id.clone());
            }
        }
        // G2, W3, G5 from the deliveries.
        let ended_at: HashMap<String, (String, Option<Timestamp>)> = listed
            .iter()
            .map(|t| {
                (
                    text(&t["name"]),
                    (text(&t["state"]), instant(&t["finished_at"])),
                )
            })
            .collect();
        let fire_at = ts(&r["fire_at"]);
        for t in &listed {
            let (name, exec) = (text(&t["name"]), text(&t["execution_id"]));
            let got = delivered.get(&exec).map_or(&[][..], Vec::as_slice);
            let Some(first) = got.iter().map(|d| d.received_at).min() else {
                if !matches!(
                    t["state"].as_str(),
                    Some("skipped" | "upstream_failed" | "cancelled")
                ) {
                    v.undelivered.push((id.clone(), name));
                }
                continue;
            };
            let upstream = t["depends_on"].as_array().cloned().unwrap_or_default();
            if upstream.is_empty() {
                let lag = first.duration_since(fire_at);
                if lag < SignedDuration::from_millis(-50) {
                    v.early.push((id.clone(), name.clone(), lag));
                }
                lags.push(lag);
            }
            for u in upstream {
                let released_at = match ended_at.get(&text(&u)) {
                    Some((s, Some(at))) if s == "succeeded" => Some(*at),
                    _ => None,
                };
                match released_at {
                    Some(at) if first >= at => {}
                    Some(at) => {
                        v.released_early
                            .push((id.clone(), name.clone(), at.duration_since(first)))
                    }
                    None => v
                        .released_early
                        .push((id.clone(), name.clone(), SignedDuration::MAX)),
                }
            }
            // At least once: redeliveries, and whether the records agree with them (G3).
            v.redeliveries += got.len() - 1;
            let attempts: BTreeMap<u32, usize> = got.iter().fold(BTreeMap::new(), |mut m, d| {
                *m.entry(d.attempt).or_default() += 1;
                m
            });
            v.same_attempt_twice += attempts.values().filter(|n| **n > 1).count();
            if got.len() > 1 || t["attempt"] != 1 {
                v.executions_redelivered += usize::from(got.len() > 1);
                let e = c.nodes[0].execution(NS, &exec).await;
                let recorded = e["attempts"].as_array().cloned().unwrap_or_default();
                let succeeded: Vec<u64> = recorded
                    .iter()
                    .filter(|a| a["outcome"] == "succeeded")
                    .filter_map(|a| a["attempt"].as_u64())
                    .collect();
                let last = e["attempt"].as_u64().unwrap_or(0);
                let unknown = attempts.keys().any(|a| u64::from(*a) > last);
                if unknown || succeeded.len() > 1 || succeeded.iter().any(|a| *a != last) {
                    v.attempt_conflicts
                        .push((id.clone(), format!("{name}: {e}")));
                }
            }
        }
    }
    lags.sort();
    v.max_lag = lags.last().copied().unwrap_or_default();
    v
}

/// Creates workflow `name`, `a` (on the receiver's `/hold-a`, which the caller holds) then
/// `b` after it, and triggers a run; returns the run's id and `a`'s execution id.
async fn held_chain(c: &Cluster, name: &str) -> (String, String) {
    c.nodes[0]
        .put_workflow(
            NS,
            name,
            json!({"defaults": defaults(), "tasks": [
                {"name": "a", "target": http(c.receiver.url("hold-a"))},
                {"name": "b", "depends_on": ["a"], "target": http(c.receiver.url("b"))}
            ]}),
        )
        .await;
    let run = c.nodes[0].trigger_workflow(NS, name).await;
    (text(&run["id"]), text(&task(&run, "a")["execution_id"]))
}

/// A worker SIGKILLed while its task's target holds the request: the attempt's lease lapses,
/// attempt 2 runs (on the other worker or the restarted one), and the downstream task is
/// released by that completion and delivered exactly once.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_worker_killed_mid_task_is_replaced_and_the_downstream_runs_once() {
    let _serial = SERIAL.lock().await;
    let mut c = Cluster::start(&["api,scheduler", "worker", "worker"], None, None).await;
    c.receiver.hold("hold-a", 1);
    let (_, a_id) = held_chain(&c, "chain").await;
    c.nodes[0]
        .wait_for(Duration::from_secs(10), async || {
            (!c.receiver.for_path("hold-a").is_empty()).then_some(())
        })
        .await;
    let first_worker = text(&c.nodes[0].execution(NS, &a_id).await["worker"]);
    let victim = Cluster::node_index(&first_worker);
    c.nodes[victim].kill9();
    let killed_at = Timestamp::now();
    // The kill landed mid-attempt: the receiver saw the worker hang up on the held request.
    c.nodes[0]
        .wait_for(Duration::from_secs(5), async || {
            c.receiver
                .abandoned()
                .iter()
                .any(|(id, _)| *id == a_id)
                .then_some(())
        })
        .await;
    c.nodes[victim].restart().await;

    let v = judge_runs(
        &c,
        &["chain".into()],
        &["a".into(), "b".into()],
        None,
        Duration::from_secs(30),
    )
    .await;
    let a = c.nodes[0].execution(NS, &a_id).await;
    let attempts = a["attempts"].as_array().cloned().unwrap_or_default();
    let b_deliveries = c.receiver.for_path("b");
    let retried_after = attempts
        .get(1)
        .map(|at| ts(&at["started_at"]).duration_since(killed_at));
    summary(
        "W-a (worker SIGKILL mid-task)",
        &v,
        &format!(
            ", attempt 1 of a on {first_worker} killed at {killed_at}, attempt 2 on {} started {} ms after the kill; b delivered {} time(s)",
            attempts
                .get(1)
                .map_or(Value::Null, |at| at["worker"].clone()),
            retried_after.map_or(-1, |d| d.as_millis()),
            b_deliveries.len()
        ),
    );
    v.assert_guarantees();
    assert_eq!(attempts.len(), 2, "a ran twice: {a}");
    assert_eq!(attempts[0]["outcome"], "lease_lapsed", "{a}");
    assert_eq!(attempts[0]["worker"], first_worker.as_str(), "{a}");
    assert_eq!(attempts[1]["outcome"], "succeeded", "{a}");
    assert_eq!(b_deliveries.len(), 1, "b delivered exactly once");
    assert_eq!(b_deliveries[0].attempt, 1);
    c.finish().await;
}

/// Scheduler processes SIGKILLed (and started again) over and over while every-second
/// workflows make their runs: every slot of the window has exactly one run, every run one
/// execution per task, and every run ends.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn schedulers_killed_while_they_create_runs_leave_one_run_per_slot() {
    let _serial = SERIAL.lock().await;
    let mut c = Cluster::start(
        &[
            "api,worker",
            "scheduler,worker",
            "scheduler,worker",
            "scheduler,worker",
        ],
        None,
        None,
    )
    .await;
    let start = whole_second_after(Duration::from_secs(3));
    let workflows: Vec<String> = (0..8).map(|i| format!("every{i}")).collect();
    for w in &workflows {
        c.nodes[0]
            .put_workflow(
                NS,
                w,
                json!({
                    "schedule": {"every": "1s", "start_at": start.to_string()},
                    "concurrency_policy": "allow",
                    "defaults": defaults(),
                    "tasks": [
                        {"name": "a", "target": http(c.receiver.url(&format!("{w}-a")))},
                        {"name": "b", "depends_on": ["a"], "target": http(c.receiver.url(&format!("{w}-b")))}
                    ]
                }),
            )
            .await;
    }
    // Runs flow: the first slot's tasks are delivered.
    c.nodes[0]
        .wait_for(Duration::from_secs(15), async || {
            c.receiver
                .deliveries()
                .iter()
                .any(|d| d.scheduled_at == start)
                .then_some(())
        })
        .await;
    // The fault schedule (not a wait for a condition): six rounds, each SIGKILLing one or two
    // of the scheduler processes at a random instant and starting them again soon after.
    let mut kills = Vec::new();
    for _ in 0..6 {
        tokio::time::sleep(Duration::from_millis(rand::random_range(1_500..3_500))).await;
        let first = rand::random_range(1..4);
        let mut victims = vec![first];
        if rand::random_bool(0.3) {
            victims.push(1 + first % 3);
        }
        for k in &victims {
            c.nodes[*k].kill9();
        }
        kills.push(format!("{victims:?} at {}", Timestamp::now()));
        tokio::time::sleep(Duration::from_millis(rand::random_range(0..1_000))).await;
        for k in &victims {
            c.nodes[*k].restart().await;
        }
    }
    let end = Timestamp::from_second(Timestamp::now().as_second()).expect("a whole second")
        + SignedDuration::from_secs(2);
    let v = judge_runs(
        &c,
        &workflows,
        &["a".into(), "b".into()],
        Some((start, end)),
        Duration::from_secs(60),
    )
    .await;
    summary(
        "W-b (schedulers SIGKILLed while creating runs)",
        &v,
        &format!(
            ", {} workflows every 1 s from {start} to {end}; kills {}",
            workflows.len(),
            kills.join(", ")
        ),
    );
    v.assert_guarantees();
    c.finish().await;
}

/// A worker SIGSTOPped past its lease while its task's target holds the request: attempt 2
/// runs elsewhere; the stopped worker's attempt 1 is then answered and the worker resumed. Its
/// late completion is refused and releases nothing: the downstream task runs once, after
/// attempt 2's completion (W3).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_paused_workers_late_completion_is_refused_and_releases_nothing() {
    let _serial = SERIAL.lock().await;
    let c = Cluster::start(&["api,scheduler", "worker", "worker"], None, None).await;
    c.receiver.hold("hold-a", 1);
    c.receiver.hold("hold-a", 2);
    let (run_id, a_id) = held_chain(&c, "fenced").await;
    let delivered = |attempt: u32| {
        c.receiver
            .for_path("hold-a")
            .iter()
            .any(|d| d.attempt == attempt)
            .then_some(())
    };
    c.nodes[0]
        .wait_for(Duration::from_secs(10), async || delivered(1))
        .await;
    let paused_worker = text(&c.nodes[0].execution(NS, &a_id).await["worker"]);
    let paused = Cluster::node_index(&paused_worker);
    c.nodes[paused].signal("STOP");
    let stopped_at = Timestamp::now();
    // The lease lapses; the other worker runs attempt 2, held too.
    c.nodes[0]
        .wait_for(Duration::from_secs(20), async || delivered(2))
        .await;
    let a = c.nodes[0].execution(NS, &a_id).await;
    assert_eq!(a["attempt"], 2, "{a}");
    assert_eq!(a["attempts"][0]["outcome"], "lease_lapsed", "{a}");
    assert_ne!(a["worker"], paused_worker.as_str(), "{a}");

    // Nothing released while `a` runs its attempt 2: `b` pending, not delivered.
    let still_pending = async || {
        let r = c.nodes[0].run(NS, "fenced", &run_id).await;
        let (a, b) = (task(&r, "a"), task(&r, "b"));
        (
            text(&a["state"]),
            a["attempt"].as_u64(),
            text(&b["state"]),
            c.receiver.for_path("b").len(),
        )
    };
    // 1. Attempt 1's completion as the paused worker would write it: refused as stale.
    let refused = complete_as_a_late_worker(&c.url, &a_id, 1).await;
    assert!(
        matches!(refused, Err(sundial_store::Error::StaleFence(_))),
        "G3: {refused:?}"
    );
    assert_eq!(
        still_pending().await,
        ("running".into(), Some(2), "pending".into(), 0),
        "W3: a refused completion released nothing"
    );
    // 2. The paused worker itself: its request answered, then resumed; it writes its
    //    completion (refused) or, its heartbeat refused first, abandons the attempt.
    c.receiver.release("hold-a", 1);
    c.nodes[paused].signal("CONT");
    let resumed_at = Timestamp::now();
    let outcomes = [
        "completion refused: the attempt is no longer current",
        "attempt lease lost before its completion was written",
        "attempt lease lost; abandoning the attempt",
    ];
    let seen = c.nodes[0]
        .wait_for(Duration::from_secs(10), async || {
            let log = c.nodes[paused].log();
            outcomes.iter().find(|o| log.contains(**o)).copied()
        })
        .await;
    assert_eq!(
        still_pending().await,
        ("running".into(), Some(2), "pending".into(), 0),
        "W3: the resumed worker's late attempt released nothing"
    );
    // 3. Attempt 2 answers: its completion releases `b`.
    let answered_at = c.receiver.release("hold-a", 2);
    let v = judge_runs(
        &c,
        &["fenced".into()],
        &["a".into(), "b".into()],
        None,
        Duration::from_secs(30),
    )
    .await;
    let b = c.receiver.for_path("b");
    summary(
        "W-c (worker SIGSTOPped past its lease, late completion)",
        &v,
        &format!(
            ", n{paused} stopped at {stopped_at} for {} ms; the resumed worker: \"{seen}\"; \
             attempt 2 answered at {answered_at}, b delivered {} time(s), {} ms after that",
            resumed_at.duration_since(stopped_at).as_millis(),
            b.len(),
            b.first().map_or(-1, |d| d
                .received_at
                .duration_since(answered_at)
                .as_millis())
        ),
    );
    v.assert_guarantees();
    let a = c.nodes[0].execution(NS, &a_id).await;
    let outcomes: Vec<&Value> = a["attempts"]
        .as_array()
        .map_or(Vec::new(), |at| at.iter().map(|x| &x["outcome"]).collect());
    assert_eq!(
        outcomes,
        [&json!("lease_lapsed"), &json!("succeeded")],
        "{a}"
    );
    assert_eq!(b.len(), 1, "b delivered exactly once");
    assert!(
        b[0].received_at >= answered_at,
        "b ran after attempt 2's answer"
    );
    c.finish().await;
}

/// PostgreSQL restarted while the 200 leaves behind one root are released, then stopped for
/// 3 s (longer than the tasks' 2 s heartbeat timeout) while they run (two workers of 10 slots
/// each, every leaf answering after 1 s): every task ends, the run ends exactly when its last
/// task does, every leaf is delivered, none has two executions; redeliveries are counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_postgresql_restart_during_a_fan_out_loses_no_task_and_doubles_none() {
    let _serial = SERIAL.lock().await;
    let mut c = Cluster::start_configured(
        &["api,scheduler,worker"; 2],
        None,
        None,
        Some("max_in_flight = 10\n"),
    )
    .await;
    c.receiver.hold("root", 1);
    c.receiver.delay("leaf-", Duration::from_secs(1));
    let leaves: Vec<String> = (0..200).map(|i| format!("l{i:03}")).collect();
    let mut tasks = vec![json!({"name": "root", "target": http(c.receiver.url("root"))})];
    tasks.extend(leaves.iter().map(|l| {
        json!({"name": l, "depends_on": ["root"], "target": http(c.receiver.url(&format!("leaf-{l}")))})
    }));
    c.nodes[0]
        .put_workflow(
            NS,
            "fanout",
            json!({"defaults": defaults(), "tasks": tasks}),
        )
        .await;
    c.nodes[0].trigger_workflow(NS, "fanout").await;
    c.nodes[0]
        .wait_for(Duration::from_secs(10), async || {
            (!c.receiver.for_path("root").is_empty()).then_some(())
        })
        .await;
    let leaves_delivered = || {
        c.receiver
            .deliveries()
            .iter()
            .filter(|d| d.path.starts_with("leaf-"))
            .count()
    };
    // 1. The root answers and PostgreSQL restarts at once: the completion that releases the
    //    leaves races the shutdown.
    c.receiver.release("root", 1);
    let restart = restart_postgresql().await;
    let after_restart = leaves_delivered();
    // 2. Once leaves run, PostgreSQL goes away for longer than their leases.
    c.nodes[0]
        .wait_for(Duration::from_secs(20), async || {
            (leaves_delivered() > 0).then_some(())
        })
        .await;
    let before_stop = leaves_delivered();
    let outage = stop_postgresql_for(Duration::from_secs(3)).await;
    let after_stop = leaves_delivered();
    let mut names = vec!["root".to_owned()];
    names.extend(leaves.iter().cloned());
    let v = judge_runs(
        &c,
        &["fanout".into()],
        &names,
        None,
        Duration::from_secs(60),
    )
    .await;
    for (i, n) in c.nodes.iter_mut().enumerate() {
        assert!(
            n.is_running(),
            "node n{i} exited across the database restart:\n{}",
            n.log()
        );
    }
    // What the restart did to the processes: the warnings and errors each logged.
    let troubles: Vec<usize> = c
        .nodes
        .iter()
        .map(|n| {
            n.log()
                .lines()
                .filter(|l| l.contains("WARN") || l.contains("ERROR"))
                .count()
        })
        .collect();
    summary(
        "W-d (PostgreSQL restart during a fan-out of 200)",
        &v,
        &format!(
            ", restart at the root's answer took {restart:?} ({after_restart} leaves delivered by its end); \
             outage {outage:?} from {before_stop} leaves delivered to {after_stop}; {} leaf deliveries in all; \
             warnings and errors logged per node {troubles:?}",
            leaves_delivered()
        ),
    );
    v.assert_guarantees();
    c.finish().await;
}
