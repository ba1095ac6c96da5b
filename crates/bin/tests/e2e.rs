//! End to end on the embedded store: the real `sundial` binary, a real loopback HTTP
//! receiver, real time.

mod common;

use std::collections::{BTreeMap, HashSet};
use std::time::Duration;

use common::{Receiver, Server, ts, whole_second_after};
use jiff::SignedDuration;
use serde_json::json;

/// The server's `/metrics` text.
async fn metrics(server: &Server) -> String {
    reqwest::get(server.url("/metrics"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_one_off_job_fires_once_never_early_and_under_a_second_late() {
    let receiver = Receiver::start().await;
    let server = Server::start().await;
    let at = whole_second_after(Duration::from_secs(2));
    server
        .put_job("e2e", "once", json!({"schedule": {"at": at.to_string()}, "target": {"type": "http", "url": receiver.url("ok")}}))
        .await;
    server
        .wait_for(Duration::from_secs(10), async || {
            (!receiver.for_path("ok").is_empty()).then_some(())
        })
        .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let got = receiver.for_path("ok");
    assert_eq!(got.len(), 1, "fired exactly once: {got:?}");
    let lag = got[0].received_at.duration_since(at);
    assert!(lag >= SignedDuration::ZERO, "fired {lag} early");
    assert!(lag < SignedDuration::from_secs(1), "fired {lag} late");
    assert_eq!(got[0].scheduled_at, at);
    let job = server.get("/v1/namespaces/e2e/jobs/once").await;
    assert_eq!(job["state"], "completed");
    assert_eq!(job["last_execution"]["state"], "succeeded");

    // The run shows in the metrics.
    let text = metrics(&server).await;
    for series in [
        "sundial_triggers_total 1",
        "sundial_attempts_total{outcome=\"succeeded\"} 1",
        "sundial_trigger_lag_seconds_count 1",
        "sundial_executions{state=\"queued\"} 0",
        "sundial_shards_held 1024",
    ] {
        assert!(
            text.contains(series),
            "{series} missing from /metrics:\n{text}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_every_second_job_fires_every_slot_with_distinct_idempotency_keys_and_traceparents() {
    let receiver = Receiver::start().await;
    let server = Server::start().await;
    let start = whole_second_after(Duration::from_secs(1));
    server
        .put_job(
            "e2e",
            "tick",
            json!({"schedule": {"every": "1s", "start_at": start.to_string()}, "target": {"type": "http", "url": receiver.url("ok")}}),
        )
        .await;
    tokio::time::sleep(Duration::from_secs(7)).await;
    server.put_job("e2e", "tick", json!({"schedule": {"every": "1s", "start_at": start.to_string()}, "target": {"type": "http", "url": receiver.url("ok")}, "paused": true})).await;
    tokio::time::sleep(Duration::from_millis(500)).await;

    let got = receiver.for_path("ok");
    let slots: Vec<_> = got.iter().map(|d| d.scheduled_at).collect();
    let keys: HashSet<_> = got.iter().map(|d| d.execution_id.clone()).collect();
    assert!(
        got.len() >= 5,
        "expected at least 5 slots in 7 s, got {}",
        got.len()
    );
    assert_eq!(keys.len(), got.len(), "one idempotency key per delivery");
    for d in &got {
        assert_eq!(
            d.traceparent,
            sundial_target::traceparent(&d.execution_id, d.attempt),
            "each delivery carries its execution's trace and its attempt's span"
        );
    }
    for (i, slot) in slots.iter().enumerate() {
        assert_eq!(
            *slot,
            start + SignedDuration::from_secs(i as i64),
            "slot {i} missing or out of order: {slots:?}"
        );
    }
    for d in &got {
        let lag = d.received_at.duration_since(d.scheduled_at);
        assert!(
            lag >= SignedDuration::ZERO && lag < SignedDuration::from_secs(1),
            "lag {lag} for {d:?}"
        );
    }
    let history = server.history("e2e", "tick").await;
    let succeeded = history.iter().filter(|e| e["state"] == "succeeded").count();
    assert_eq!(
        succeeded,
        got.len(),
        "every delivery is one succeeded execution"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_answered_503_then_200_succeeds_on_attempt_two_with_both_attempts_recorded() {
    let receiver = Receiver::start().await;
    let server = Server::start().await;
    server
        .put_job(
            "e2e",
            "flaky",
            json!({
                "schedule": {"at": whole_second_after(Duration::from_secs(1)).to_string()},
                "target": {"type": "http", "url": receiver.url("fail-once")},
                "retry": {"max_attempts": 3, "initial_interval": "500ms", "jitter": false}
            }),
        )
        .await;
    let execution = server
        .wait_for(Duration::from_secs(15), async || {
            let h = server.history("e2e", "flaky").await;
            h.into_iter().find(|e| e["state"] == "succeeded")
        })
        .await;
    let id = execution["id"].as_str().unwrap();
    let e = server
        .get(&format!("/v1/namespaces/e2e/executions/{id}"))
        .await;
    assert_eq!(e["attempt"], 2);
    let attempts = e["attempts"].as_array().unwrap();
    assert_eq!(attempts.len(), 2);
    assert_eq!(
        (
            attempts[0]["status_code"].clone(),
            attempts[0]["outcome"].clone()
        ),
        (json!(503), json!("transient_failure"))
    );
    assert_eq!(
        (
            attempts[1]["status_code"].clone(),
            attempts[1]["outcome"].clone()
        ),
        (json!(200), json!("succeeded"))
    );
    // The retry waited the backoff: attempt 2 started at least 500 ms after attempt 1 ended.
    let gap = ts(&attempts[1]["started_at"]).duration_since(ts(&attempts[0]["finished_at"]));
    assert!(
        gap >= SignedDuration::from_millis(500),
        "retried after {gap}"
    );
    let got = receiver.for_path("fail-once");
    assert_eq!(
        got.iter()
            .map(|d| (d.execution_id.as_str(), d.attempt))
            .collect::<Vec<_>>(),
        [(id, 1), (id, 2)]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kill_9_and_restart_loses_no_job_and_no_history() {
    let receiver = Receiver::start().await;
    let mut server = Server::start().await;
    let dir = server.dir.clone();
    let start = whole_second_after(Duration::from_secs(1));
    for name in ["a", "b", "c"] {
        server
            .put_job("e2e", name, json!({"schedule": {"every": "1s", "start_at": start.to_string()}, "target": {"type": "http", "url": receiver.url("ok")}}))
            .await;
    }
    server.put_job("e2e", "nightly", json!({"schedule": {"cron": "0 2 * * *", "timezone": "Europe/Berlin"}, "target": {"type": "http", "url": receiver.url("ok")}})).await;
    tokio::time::sleep(Duration::from_secs(4)).await;
    let mut before = BTreeMap::new();
    for name in ["a", "b", "c"] {
        before.insert(name, server.history("e2e", name).await);
    }
    let jobs_before = server.get("/v1/namespaces/e2e/jobs").await["items"]
        .as_array()
        .unwrap()
        .len();
    server.kill9();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let server = Server::start_in(&dir).await;
    tokio::time::sleep(Duration::from_secs(4)).await;

    let jobs_after = server.get("/v1/namespaces/e2e/jobs").await["items"]
        .as_array()
        .unwrap()
        .len();
    assert_eq!((jobs_before, jobs_after), (4, 4));
    for name in ["a", "b", "c"] {
        let after = server.history("e2e", name).await;
        // Everything recorded before the kill is still there; finished ones unchanged.
        for e in &before[name] {
            let same = after
                .iter()
                .find(|x| x["id"] == e["id"])
                .unwrap_or_else(|| panic!("execution {} lost", e["id"]));
            if e["state"] == "succeeded" {
                assert_eq!(same["state"], "succeeded");
            }
        }
        // One execution per slot, and no slot skipped: the slots passed while the process was
        // down fire late, not never (they are younger than the misfire threshold).
        let mut slots: Vec<_> = after.iter().map(|e| ts(&e["scheduled_at"])).collect();
        slots.sort();
        let unique: HashSet<_> = slots.iter().collect();
        assert_eq!(unique.len(), slots.len(), "a slot got two executions");
        for (i, s) in slots.iter().enumerate() {
            assert_eq!(
                *s,
                start + SignedDuration::from_secs(i as i64),
                "job {name}: slot {i} missing"
            );
        }
        assert!(
            slots.len() >= 8,
            "job {name}: only {} slots in ~10 s",
            slots.len()
        );
        let delivered: HashSet<_> = receiver
            .deliveries()
            .into_iter()
            .map(|d| d.execution_id)
            .collect();
        for e in after.iter().filter(|e| e["state"] == "succeeded") {
            assert!(delivered.contains(e["id"].as_str().unwrap()));
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn attempts_time_out_exhaust_into_the_dead_letter_and_a_redrive_runs_on() {
    let receiver = Receiver::start().await;
    let server = Server::start().await;
    let at = whole_second_after(Duration::from_secs(1));
    // A 5 s call with a 1 s per-attempt timeout: every attempt times out (transient).
    server
        .put_job(
            "e2e",
            "hangs",
            json!({
                "schedule": {"at": at.to_string()},
                "target": {"type": "http", "url": receiver.url("slow")},
                "timeout": "1s",
                "retry": {"max_attempts": 2, "initial_interval": "200ms", "jitter": false}
            }),
        )
        .await;
    let dead = server
        .wait_for(Duration::from_secs(20), async || {
            server
                .history("e2e", "hangs")
                .await
                .into_iter()
                .find(|e| e["state"] == "dead")
        })
        .await;
    let id = dead["id"].as_str().unwrap().to_owned();
    let e = server
        .get(&format!("/v1/namespaces/e2e/executions/{id}"))
        .await;
    let attempts = e["attempts"].as_array().unwrap();
    assert_eq!(attempts.len(), 2);
    for a in attempts {
        assert_eq!(a["outcome"], "timed_out", "{a}");
        let ms = a["duration_ms"].as_i64().unwrap();
        assert!(
            (1000..2500).contains(&ms),
            "an attempt ran {ms} ms against a 1 s timeout"
        );
    }
    let letters = server.get("/v1/namespaces/e2e/executions?state=dead").await;
    assert!(
        letters["items"]
            .as_array()
            .unwrap()
            .iter()
            .any(|x| x["id"] == id.as_str()),
        "listed as a dead letter"
    );

    // Re-drive: the same execution (same idempotency key) runs again, attempts numbered on.
    let (status, redriven) = server
        .request(
            reqwest::Method::POST,
            &format!("/v1/namespaces/e2e/executions/{id}/retry"),
            None,
        )
        .await;
    assert_eq!(status, 200, "{redriven}");
    assert_eq!(redriven["state"], "queued");
    let again = server
        .wait_for(Duration::from_secs(20), async || {
            let e = server
                .get(&format!("/v1/namespaces/e2e/executions/{id}"))
                .await;
            (e["state"] == "dead" && e["attempt"] == 4).then_some(e)
        })
        .await;
    assert_eq!(again["attempts"].as_array().unwrap().len(), 4);
    let keys: std::collections::HashSet<_> = receiver
        .for_path("slow")
        .into_iter()
        .map(|d| d.execution_id)
        .collect();
    assert_eq!(
        keys.len(),
        1,
        "every attempt carried the one idempotency key"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_permanent_4xx_fails_at_once_and_503s_exhaust_the_attempts() {
    let receiver = Receiver::start().await;
    let server = Server::start().await;
    let at = whole_second_after(Duration::from_secs(1));
    for (name, path) in [("gone", "missing"), ("down", "unavailable")] {
        server
            .put_job(
                "e2e",
                name,
                json!({
                    "schedule": {"at": at.to_string()},
                    "target": {"type": "http", "url": receiver.url(path)},
                    "retry": {"max_attempts": 3, "initial_interval": "100ms", "jitter": false}
                }),
            )
            .await;
    }
    let failed = server
        .wait_for(Duration::from_secs(15), async || {
            server
                .history("e2e", "gone")
                .await
                .into_iter()
                .find(|e| e["state"] == "failed")
        })
        .await;
    assert_eq!(failed["attempt"], 1, "a 404 is not retried");
    let dead = server
        .wait_for(Duration::from_secs(15), async || {
            server
                .history("e2e", "down")
                .await
                .into_iter()
                .find(|e| e["state"] == "dead")
        })
        .await;
    assert_eq!(dead["attempt"], 3, "503 is retried until max_attempts");
    assert_eq!(receiver.for_path("missing").len(), 1);
    assert_eq!(receiver.for_path("unavailable").len(), 3);
    // The dead letter is counted once, by namespace; the failure is not a dead letter.
    let text = metrics(&server).await;
    assert!(
        text.contains("sundial_dead_letters_total{namespace=\"e2e\"} 1"),
        "{text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_letter_reaches_the_alert_webhook_exactly_once() {
    let receiver = Receiver::start().await;
    let config = format!(
        "public_url = \"https://sundial.example/\"\n\
         [maintenance]\nalerts_every = \"200ms\"\n\
         [[alerts]]\nname = \"oncall\"\non = [\"dead\", \"failed\"]\nnamespaces = [\"e2e\"]\n\
         target = {{type = \"http\", method = \"POST\", url = \"{}\"}}\n\
         [[alerts]]\nname = \"elsewhere\"\non = [\"dead\"]\nnamespaces = [\"other\"]\n\
         target = {{type = \"http\", url = \"{}\"}}\n",
        receiver.url("alerts"),
        receiver.url("elsewhere"),
    );
    let (server, _dir) = server_configured(&config, Vec::new()).await;
    let at = whole_second_after(Duration::from_secs(1));
    server
        .put_job(
            "e2e",
            "down",
            json!({
                "schedule": {"at": at.to_string()},
                "target": {"type": "http", "url": receiver.url("unavailable")},
                "retry": {"max_attempts": 2, "initial_interval": "100ms", "jitter": false}
            }),
        )
        .await;
    let alert = server
        .wait_for(Duration::from_secs(15), async || {
            receiver.for_path("alerts").into_iter().next()
        })
        .await;
    let dead = server.history("e2e", "down").await.remove(0);
    let id = dead["id"].as_str().unwrap();
    assert_eq!(dead["state"], "dead");
    assert_eq!(
        alert.execution_id,
        format!("{id}:dead"),
        "the idempotency key"
    );
    let body: serde_json::Value = serde_json::from_str(&alert.body).unwrap();
    assert_eq!(body["alert"], "oncall");
    assert_eq!(body["job"], "down");
    assert_eq!(body["namespace"], "e2e");
    assert_eq!(body["state"], "dead");
    assert_eq!(body["attempt"], 2);
    let full = server.execution("e2e", id).await;
    assert_eq!(body["error"], full["attempts"][1]["error"]);
    assert!(body["error"].as_str().unwrap().contains("503"), "{body}");
    assert_eq!(
        body["url"],
        format!("https://sundial.example/ui/namespaces/e2e/executions/{id}").as_str()
    );
    // Several more passes of the dispatcher: nothing is sent again, nor to the other alert.
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(receiver.for_path("alerts").len(), 1);
    assert!(receiver.for_path("elsewhere").is_empty());
    let text = metrics(&server).await;
    for line in [
        "sundial_alerts_total{alert=\"oncall\",outcome=\"delivered\"} 1",
        "sundial_dead_letters_total{namespace=\"e2e\"} 1",
        "sundial_dead_letters{namespace=\"e2e\"} 1",
        "sundial_executions{state=\"dead\"} 1",
    ] {
        assert!(text.contains(line), "{line} in {text}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelling_a_running_execution_stops_its_attempt_within_a_second() {
    let receiver = Receiver::start().await;
    let server = Server::start().await;
    server
        .put_job(
            "e2e",
            "long",
            json!({
                "schedule": {"at": whole_second_after(Duration::from_secs(1)).to_string()},
                "target": {"type": "http", "url": receiver.url("slow")},
                "heartbeat_timeout": "30s"
            }),
        )
        .await;
    let running = server
        .wait_for(Duration::from_secs(10), async || {
            server
                .history("e2e", "long")
                .await
                .into_iter()
                .find(|e| e["state"] == "running")
        })
        .await;
    let id = running["id"].as_str().unwrap().to_owned();
    server
        .wait_for(Duration::from_secs(5), async || {
            (!receiver.for_path("slow").is_empty()).then_some(())
        })
        .await;
    let cancelled_at = jiff::Timestamp::now();
    let (status, e) = server
        .request(
            reqwest::Method::POST,
            &format!("/v1/namespaces/e2e/executions/{id}/cancel"),
            None,
        )
        .await;
    assert_eq!(status, 200, "{e}");
    assert_eq!(e["state"], "cancelled");
    assert_eq!(e["attempts"][0]["outcome"], "cancelled");
    let (_, hung_up_at) = server
        .wait_for(Duration::from_secs(3), async || {
            receiver.abandoned().into_iter().find(|(x, _)| *x == id)
        })
        .await;
    let took = hung_up_at.duration_since(cancelled_at);
    assert!(
        took < SignedDuration::from_secs(1),
        "the request was dropped {took} after the cancel"
    );
    tokio::time::sleep(Duration::from_secs(1)).await;
    let after = server
        .get(&format!("/v1/namespaces/e2e/executions/{id}"))
        .await;
    assert_eq!(
        (after["state"].clone(), after["attempt"].clone()),
        (json!("cancelled"), json!(1)),
        "nothing overwrote the cancel"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrency_policies_govern_runs_longer_than_the_interval() {
    let receiver = Receiver::start().await;
    let server = Server::start().await;
    let start = whole_second_after(Duration::from_secs(1));
    for policy in ["allow", "skip", "replace"] {
        server
            .put_job(
                "e2e",
                policy,
                json!({
                    "schedule": {"every": "1s", "start_at": start.to_string()},
                    "target": {"type": "http", "url": receiver.url(&format!("slow-{policy}"))},
                    "concurrency_policy": policy,
                    "timeout": "30s"
                }),
            )
            .await;
    }
    // Until 8.5 s past the first slot: skip fits the calls at 0 s and 6 s (5 s each).
    let until = start + SignedDuration::from_millis(8500);
    tokio::time::sleep(until.duration_since(jiff::Timestamp::now()).unsigned_abs()).await;
    for policy in ["allow", "skip", "replace"] {
        server
            .request(
                reqwest::Method::POST,
                &format!("/v1/namespaces/e2e/jobs/{policy}/pause"),
                None,
            )
            .await;
    }
    let states = |h: &[serde_json::Value], s: &str| h.iter().filter(|e| e["state"] == s).count();

    // allow: every slot runs, overlapping (5 s calls, one a second).
    let allow = receiver.for_path("slow-allow");
    assert!(
        allow.len() >= 5,
        "allow ran {} overlapping calls",
        allow.len()
    );

    // skip: one call at a time; the slots that came due meanwhile are recorded skipped.
    let skip = receiver.for_path("slow-skip");
    assert_eq!(
        skip.len(),
        2,
        "two 5 s calls fit one after another: {skip:?}"
    );
    let gap = skip[1].received_at.duration_since(skip[0].received_at);
    assert!(
        gap >= SignedDuration::from_secs(5),
        "skip let two runs overlap ({gap} apart)"
    );
    let h = server.history("e2e", "skip").await;
    assert!(
        states(&h, "skipped") >= 3,
        "slots due while running are skipped: {h:?}"
    );

    // replace: each slot cancels the running call (the request is really dropped).
    let replaced = server.history("e2e", "replace").await;
    assert!(states(&replaced, "cancelled") >= 4, "{replaced:?}");
    let dropped = receiver
        .abandoned()
        .into_iter()
        .filter(|(id, _)| replaced.iter().any(|e| e["id"] == id.as_str()))
        .count();
    assert!(dropped >= 4, "replace dropped {dropped} requests");
}

/// A server reading `config` (TOML) with `--config`, with `env` added; and its directory,
/// removed when dropped.
async fn server_configured(
    config: &str,
    env: Vec<(String, String)>,
) -> (Server, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("sundial.toml");
    std::fs::write(&path, config).unwrap();
    let opts = common::ServerOpts {
        args: vec!["--config".into(), path.display().to_string()],
        env,
        ..Default::default()
    };
    (Server::start_with(dir.path(), opts).await, dir)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_http_targets_allow_list_refuses_other_hosts_when_the_job_is_written() {
    let receiver = Receiver::start().await;
    // A proxy in the environment would reach hosts itself, past the list: it goes unused.
    let proxy = Receiver::start().await;
    let (server, _) = server_configured(
        "[http_targets]\nallow = [\"*.internal\", \"127.0.0.1\"]\n",
        vec![("HTTP_PROXY".into(), proxy.url(""))],
    )
    .await;
    // 127.0.0.2 is loopback too, but not in the list: refused, and nothing is written.
    let outside = receiver.url("outside").replace("127.0.0.1", "127.0.0.2");
    let (status, problem) = server
        .request(
            reqwest::Method::PUT,
            "/v1/namespaces/e2e/jobs/outside",
            Some(json!({"schedule": {"every": "1s"}, "target": {"type": "http", "url": outside}})),
        )
        .await;
    assert_eq!(status, 422, "{problem}");
    let field = &problem["errors"][0];
    assert_eq!(field["field"], "target.url", "{problem}");
    assert!(
        field["message"]
            .as_str()
            .unwrap()
            .contains("host '127.0.0.2' is not in the server's [http_targets] allow list (*.internal, 127.0.0.1)"),
        "{problem}"
    );
    let (status, _) = server
        .request(
            reqwest::Method::GET,
            "/v1/namespaces/e2e/jobs/outside",
            None,
        )
        .await;
    assert_eq!(status, 404);

    let at = whole_second_after(Duration::from_secs(1));
    server
        .put_job("e2e", "inside", json!({"schedule": {"at": at.to_string()}, "target": {"type": "http", "url": receiver.url("inside")}}))
        .await;
    server
        .wait_for(Duration::from_secs(10), async || {
            (!receiver.for_path("inside").is_empty()).then_some(())
        })
        .await;
    assert!(proxy.deliveries().is_empty(), "{:?}", proxy.deliveries());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_tokens_configured_the_api_needs_one_and_the_cli_sends_it() {
    // printf %s secret | sha256sum
    let (server, dir) = server_configured(
        "[[tokens]]\ntoken_sha256 = \"2bb80d537b1da3e38bd30361aa855686bde0eacd7162fef6a25fe97bf527a25b\"\nrole = \"editor\"\nnamespaces = [\"e2e\"]\n",
        Vec::new(),
    )
    .await;
    let (status, _) = server
        .request(reqwest::Method::GET, "/v1/namespaces/e2e/jobs", None)
        .await;
    assert_eq!(status, 401);
    let job = dir.path().join("job.json");
    std::fs::write(
        &job,
        json!({"name": "tokened", "schedule": {"every": "1h"}, "target": {"type": "http", "url": "http://127.0.0.1:9/"}}).to_string(),
    )
    .unwrap();
    let cli = |token: &str| {
        std::process::Command::new(env!("CARGO_BIN_EXE_sundial"))
            .args(["job", "apply", "-n", "e2e", "-f"])
            .arg(&job)
            .args(["--server", &server.url(""), "--token", token])
            .output()
            .unwrap()
    };
    assert!(!cli("wrong").status.success());
    let out = cli("secret");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let listed = reqwest::Client::new()
        .get(server.url("/v1/namespaces/e2e/jobs/tokened"))
        .bearer_auth("secret")
        .send()
        .await
        .unwrap();
    assert_eq!(listed.status(), 200);
}

/// A loopback OTLP/HTTP receiver (`POST /v1/traces`, protobuf): every span it was sent.
#[derive(Clone, Default)]
struct OtlpReceiver {
    spans: std::sync::Arc<std::sync::Mutex<Vec<opentelemetry_proto::tonic::trace::v1::Span>>>,
}

impl OtlpReceiver {
    async fn start() -> (OtlpReceiver, std::net::SocketAddr) {
        use opentelemetry_proto::tonic::collector::trace::v1::{
            ExportTraceServiceRequest, ExportTraceServiceResponse,
        };
        use prost::Message as _;
        let receiver = OtlpReceiver::default();
        let spans = receiver.spans.clone();
        let app = axum::Router::new().route(
            "/v1/traces",
            axum::routing::post(move |body: axum::body::Bytes| {
                let spans = spans.clone();
                async move {
                    let Ok(request) = ExportTraceServiceRequest::decode(body) else {
                        return (axum::http::StatusCode::BAD_REQUEST, Vec::new());
                    };
                    let mut got = spans.lock().unwrap();
                    for resource in request.resource_spans {
                        for scope in resource.scope_spans {
                            got.extend(scope.spans);
                        }
                    }
                    (
                        axum::http::StatusCode::OK,
                        ExportTraceServiceResponse::default().encode_to_vec(),
                    )
                }
            }),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await });
        (receiver, addr)
    }

    /// The spans of the trace whose id is the execution `id`'s UUID.
    fn trace(&self, id: &str) -> Vec<opentelemetry_proto::tonic::trace::v1::Span> {
        let trace_id = uuid::Uuid::parse_str(id).unwrap().as_bytes().to_vec();
        self.spans
            .lock()
            .unwrap()
            .iter()
            .filter(|s| s.trace_id == trace_id)
            .cloned()
            .collect()
    }
}

/// A span attribute's value as text (strings, and integers printed).
fn attribute(span: &opentelemetry_proto::tonic::trace::v1::Span, key: &str) -> Option<String> {
    use opentelemetry_proto::tonic::common::v1::any_value::Value;
    let value = span
        .attributes
        .iter()
        .find(|a| a.key == key)?
        .value
        .as_ref()?;
    match value.value.as_ref()? {
        Value::StringValue(s) => Some(s.clone()),
        Value::IntValue(i) => Some(i.to_string()),
        other => Some(format!("{other:?}")),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_otlp_trace_links_an_execution_s_trigger_to_each_of_its_attempts() {
    let (otlp, otlp_addr) = OtlpReceiver::start().await;
    let receiver = Receiver::start().await;
    let (server, _dir) = server_configured(
        "",
        vec![
            (
                "OTEL_EXPORTER_OTLP_ENDPOINT".into(),
                format!("http://{otlp_addr}"),
            ),
            ("OTEL_BSP_SCHEDULE_DELAY".into(), "100".into()),
        ],
    )
    .await;
    let at = whole_second_after(Duration::from_secs(1));
    server
        .put_job(
            "e2e",
            "traced",
            json!({
                "schedule": {"at": at.to_string()},
                "target": {"type": "http", "url": receiver.url("fail-once")},
                "retry": {"max_attempts": 3, "initial_interval": "100ms", "jitter": false}
            }),
        )
        .await;
    let deliveries = server
        .wait_for(Duration::from_secs(15), async || {
            let got = receiver.for_path("fail-once");
            (got.len() == 2).then_some(got)
        })
        .await;
    let id = deliveries[0].execution_id.clone();
    let spans = server
        .wait_for(Duration::from_secs(15), async || {
            let spans = otlp.trace(&id);
            (spans.len() >= 3).then_some(spans)
        })
        .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let spans = {
        let later = otlp.trace(&id);
        assert_eq!(later.len(), spans.len(), "no span arrives late: {later:?}");
        later
    };
    let trigger: Vec<_> = spans.iter().filter(|s| s.name == "trigger").collect();
    assert_eq!(trigger.len(), 1, "one trigger span: {spans:?}");
    let trigger = trigger[0];
    assert!(
        trigger.parent_span_id.is_empty(),
        "the trigger is the trace's root"
    );
    assert_eq!(
        attribute(trigger, "sundial.trigger").as_deref(),
        Some("schedule")
    );
    assert_eq!(attribute(trigger, "sundial.job").as_deref(), Some("traced"));
    assert_eq!(attribute(trigger, "sundial.slot"), Some(at.to_string()));
    let mut attempts: Vec<_> = spans.iter().filter(|s| s.name == "attempt").collect();
    attempts.sort_by_key(|s| attribute(s, "sundial.attempt"));
    assert_eq!(attempts.len(), 2, "a span per attempt: {spans:?}");
    for (n, (span, delivery)) in attempts.iter().zip(&deliveries).enumerate() {
        assert_eq!(
            span.parent_span_id,
            trigger.span_id,
            "attempt {} is the trigger's child",
            n + 1
        );
        assert_eq!(
            attribute(span, "sundial.attempt"),
            Some((n + 1).to_string())
        );
        // The delivery's traceparent names the exported attempt span, so the receiver's own
        // spans join this trace under it.
        let parent_id = delivery.traceparent.split('-').nth(2).unwrap();
        let span_hex: String = span.span_id.iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(parent_id, span_hex, "attempt {}", delivery.attempt);
    }
    assert_eq!(
        attribute(attempts[0], "sundial.outcome").as_deref(),
        Some("retrying")
    );
    assert_eq!(
        attempts[0].status.as_ref().map(|s| s.code),
        Some(2),
        "ERROR"
    );
    assert!(
        attempts[0]
            .status
            .as_ref()
            .is_some_and(|s| s.message.contains("503")),
        "{:?}",
        attempts[0].status
    );
    assert_eq!(
        attribute(attempts[1], "sundial.outcome").as_deref(),
        Some("succeeded")
    );
    assert!(attempts[1].start_time_unix_nano >= attempts[0].end_time_unix_nano);

    // A manual trigger is a trace of its own, rooted in a `manual` trigger span.
    let (status, manual) = server
        .request(
            reqwest::Method::POST,
            "/v1/namespaces/e2e/jobs/traced/trigger",
            None,
        )
        .await;
    assert_eq!(status, 201, "{manual}");
    let manual_id = manual["id"].as_str().unwrap().to_owned();
    let spans = server
        .wait_for(Duration::from_secs(15), async || {
            let spans = otlp.trace(&manual_id);
            (spans.len() >= 2).then_some(spans)
        })
        .await;
    let trigger = spans.iter().find(|s| s.name == "trigger").unwrap();
    assert_eq!(
        attribute(trigger, "sundial.trigger").as_deref(),
        Some("manual")
    );
    // Only Sundial's spans are exported, never its logs' spans or other libraries'.
    let names: HashSet<String> = otlp
        .spans
        .lock()
        .unwrap()
        .iter()
        .map(|s| s.name.clone())
        .collect();
    assert_eq!(
        names,
        HashSet::from(["trigger".to_owned(), "attempt".to_owned()])
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_longer_lookahead_writes_a_slot_s_execution_earlier() {
    // docs/configuration.md, "lookahead": with 30 s, a slot 20 s away is written within the
    // scheduler's next passes; with the default 5 s it would wait 15 s more.
    let temp = tempfile::tempdir().unwrap();
    let server = Server::start_with(
        temp.path(),
        common::ServerOpts {
            args: vec!["--lookahead".into(), "30s".into()],
            ..common::ServerOpts::default()
        },
    )
    .await;
    let at = whole_second_after(Duration::from_secs(20));
    server
        .put_job("e2e", "early", json!({"schedule": {"at": at.to_string()}, "target": {"type": "http", "url": "http://127.0.0.1:9/never"}}))
        .await;
    let written = server
        .wait_for(Duration::from_secs(5), async || {
            server.history("e2e", "early").await.into_iter().next()
        })
        .await;
    assert!(
        jiff::Timestamp::now() < at - SignedDuration::from_secs(10),
        "the check ran too late to tell the lookahead from the default"
    );
    assert_eq!(written["state"], "scheduled", "{written}");
    assert_eq!(ts(&written["scheduled_at"]), at);
}
