//! The README's first command and the example files: `sundial demo` run as a user runs it, and
//! `examples/jobs.yaml` and `examples/workflows.yaml` applied as written to a server, their
//! deliveries going to `sundial demo --receiver-only`.

mod common;

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use common::Server;

fn repository() -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."))
}

/// Kills the process when the test ends, passed or not.
struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The demo applies the examples, prints executions as they end, an alert after the line of
/// the execution it is about and with its time, and a closing summary that accounts for the
/// receiver's count.
#[test]
fn the_demo_fires_the_examples_and_prints_alerts_after_what_they_are_about() {
    let temp = tempfile::tempdir().unwrap();
    let o = Command::new(env!("CARGO_BIN_EXE_sundial"))
        .current_dir(repository())
        .args([
            "demo",
            "--duration",
            "8s",
            // Any free port: the test must not depend on the examples' port being free.
            "--receiver",
            "127.0.0.1:0",
            "--database-url",
            &format!("sqlite://{}", temp.path().join("demo.db").display()),
        ])
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success(),
        "{out}\n{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let lines: Vec<&str> = out.lines().collect();
    let position = |what: &dyn Fn(&str) -> bool| lines.iter().position(|l| what(l));
    for job in ["heartbeat", "every-5-seconds", "flaky", "once"] {
        assert!(
            position(&|l| l.starts_with(&format!("applied job {job} "))).is_some(),
            "{out}"
        );
    }
    // export's upload is answered 400: the task fails, its run fails, and both alert.
    let upload = position(&|l| l.contains("export/upload") && l.contains(" failed "))
        .unwrap_or_else(|| panic!("the failed upload's line:\n{out}"));
    let run = position(&|l| l.contains(" of export failed")).expect("the failed run's line");
    let task_alert = position(&|l| {
        l.contains("ALERT demo-oncall failed") && l.contains("workflow export task upload")
    })
    .unwrap_or_else(|| panic!("the task's alert:\n{out}"));
    let run_alert = position(&|l| {
        l.contains("ALERT demo-oncall run_failed") && l.contains("workflow export run")
    })
    .unwrap_or_else(|| panic!("the run's alert:\n{out}"));
    assert!(task_alert > upload && run_alert > run, "{out}");
    for alert in [task_alert, run_alert] {
        let time = lines[alert].split_whitespace().next().unwrap();
        assert!(
            time.parse::<jiff::Timestamp>().is_ok(),
            "an alert's line starts with its time: {}",
            lines[alert]
        );
    }
    // flaky's first attempt gets a 503: one retry at least, which the summary names.
    assert!(
        lines
            .iter()
            .any(|l| l.contains("flaky") && l.contains("2/3")),
        "{out}"
    );
    let summary = lines.last().copied().unwrap_or_default();
    assert!(
        summary.starts_with("The receiver saw ")
            && summary.contains("one per attempt")
            && summary.contains("retries after a failed attempt"),
        "{summary}"
    );
    assert!(
        lines
            .iter()
            .any(|l| l.contains("executions finished") && l.contains("alerts sent")),
        "{out}"
    );
}

/// `sundial job apply -f examples/jobs.yaml` and `sundial workflow apply -f
/// examples/workflows.yaml` work as the files are written, and the jobs' deliveries reach the
/// receiver the examples name (`sundial demo --receiver-only` on 127.0.0.1:8181).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_examples_apply_as_written_and_reach_the_receiver_they_name() {
    let server = Server::start().await;
    let url = server.url("");
    let receiver = Command::new(env!("CARGO_BIN_EXE_sundial"))
        .args(["demo", "--receiver-only"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut receiver = Killed(receiver);
    for (noun, file) in [("job", "jobs.yaml"), ("workflow", "workflows.yaml")] {
        let path = repository().join("examples").join(file);
        let o = Command::new(env!("CARGO_BIN_EXE_sundial"))
            .args([
                noun,
                "apply",
                "-f",
                path.to_str().unwrap(),
                "--server",
                &url,
            ])
            .output()
            .unwrap();
        assert!(
            o.status.success(),
            "{file}: {}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        );
    }
    // heartbeat fires every 2 s; its executions succeed only if the receiver answered.
    server
        .wait_for(Duration::from_secs(15), async || {
            let history = server.history("demo", "heartbeat").await;
            history
                .iter()
                .any(|e| e["state"] == "succeeded")
                .then_some(())
        })
        .await;
    let once = server.get("/v1/namespaces/demo/jobs/once").await;
    assert_eq!(once["schedule"]["at"], "2030-01-01T09:00:00Z", "{once}");
    let etl = server.get("/v1/namespaces/demo/workflows/etl").await;
    assert!(etl["next_fire_at"].is_string(), "{etl}");
    let _ = receiver.0.kill();
    let _ = receiver.0.wait();
    let mut out = String::new();
    if let Some(mut stdout) = receiver.0.stdout.take() {
        std::io::Read::read_to_string(&mut stdout, &mut out).unwrap();
    }
    assert!(
        out.contains("POST /ok  execution "),
        "the receiver printed the deliveries:\n{out}"
    );
}

/// A file or address given is used or refused, never silently replaced: an unreadable `-f`
/// or `--workflows` stops the demo naming the flag, and so does a `--receiver` already taken
/// (only the default gives way to a free port).
#[test]
fn a_file_or_receiver_given_is_used_or_refused_naming_the_flag() {
    let sundial = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_sundial"))
            .current_dir(repository())
            .args(args)
            .output()
            .unwrap()
    };
    for flag in ["-f", "--workflows"] {
        let o = sundial(&["demo", "--duration", "1s", flag, "/nonexistent/jobs.yaml"]);
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(!o.status.success(), "{flag}: {err}");
        assert!(
            err.contains(&format!("{flag}: cannot read /nonexistent/jobs.yaml")),
            "{flag}: {err}"
        );
        assert!(
            o.stdout.is_empty(),
            "nothing started: {}",
            String::from_utf8_lossy(&o.stdout)
        );
    }
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let address = taken.local_addr().unwrap().to_string();
    let o = sundial(&["demo", "--duration", "1s", "--receiver", &address]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success(), "{err}");
    assert!(
        err.contains(&format!("--receiver: cannot listen on {address}")),
        "{err}"
    );
}
