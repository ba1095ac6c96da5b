//! The command line against a real server: `job`, `exec`, `cron`, and the refusal of a second
//! scheduler on one SQLite file.

mod common;

use std::io::Write;
use std::process::{Command, Output};
use std::time::Duration;

use common::{Receiver, Server};

fn sundial(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_sundial"))
        .args(args)
        .output()
        .unwrap()
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[test]
fn cron_next_prints_instants_with_the_zone_offset() {
    let o = sundial(&[
        "cron",
        "next",
        "--tz",
        "America/New_York",
        "--from",
        "2026-03-07T00:00:00Z",
        "--count",
        "3",
        "--",
        "30 2 * * *",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(
        stdout(&o),
        "2026-03-07T02:30:00-05:00\n2026-03-08T03:00:00-04:00\n2026-03-09T02:30:00-04:00\n"
    );
}

#[test]
fn cron_next_rejects_an_invalid_expression_with_exit_2_and_one_line() {
    let o = sundial(&["cron", "next", "--", "61 * * * *"]);
    assert_eq!(o.status.code(), Some(2));
    let err = stderr(&o);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("minute"), "{err}");
    let o = sundial(&["cron", "next", "--tz", "Mars/Olympus", "--", "* * * * *"]);
    assert_eq!(o.status.code(), Some(2));
}

#[test]
fn names_and_ids_that_would_leave_the_namespace_are_refused_before_any_request() {
    // Nothing listens on port 9: a request sent would fail with "cannot reach".
    let server = ["--server", "http://127.0.0.1:9"];
    for args in [
        &["job", "pause", "../../b/jobs/tmp", "-n", "a"][..],
        &["job", "get", "a/b", "-n", "a"][..],
        &["job", "list", "-n", "a/../b"][..],
        &["exec", "cancel", "../../b/executions/x", "-n", "a"][..],
        &["exec", "get", "%2e%2e", "-n", "a"][..],
    ] {
        let o = sundial(&[args, &server[..]].concat());
        assert!(!o.status.success(), "{args:?}");
        let err = stderr(&o);
        assert!(!err.contains("cannot reach"), "{args:?} was sent: {err}");
        assert!(
            err.contains("name") || err.contains("id"),
            "{args:?}: {err}"
        );
    }
}

#[test]
fn cron_explain_describes_in_words() {
    let o = sundial(&["cron", "explain", "0 2 * * *"]);
    assert!(o.status.success());
    assert!(!stdout(&o).trim().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn job_and_exec_commands_drive_the_api() {
    let receiver = Receiver::start().await;
    let server = Server::start().await;
    let url = format!("http://{}", server.addr);
    let run = |args: &[&str]| {
        let mut cmd = args.to_vec();
        cmd.extend_from_slice(&["--server", &url, "-n", "cli"]);
        sundial(&cmd)
    };
    let file = server.dir.join("jobs.yaml");
    let mut f = std::fs::File::create(&file).unwrap();
    write!(
        f,
        "---\nname: hourly\nschedule: {{cron: '0 * * * *', timezone: Europe/Berlin}}\ntarget: {{type: http, url: '{ok}'}}\n\
         ---\nname: later\nschedule: {{at: '2099-01-01T00:00:00Z'}}\ntarget: {{type: http, url: '{ok}'}}\n\
         ---\nnamespace: other\nname: elsewhere\nschedule: {{every: 1h}}\ntarget: {{type: http, url: '{ok}'}}\n",
        ok = receiver.url("ok")
    )
    .unwrap();
    let o = run(&["job", "apply", "-f", file.to_str().unwrap()]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(
        stdout(&o)
            .lines()
            .filter(|l| l.contains(" applied "))
            .count(),
        3,
        "{}",
        stdout(&o)
    );

    let o = run(&["job", "list", "-o", "json"]);
    let list: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(list["items"].as_array().unwrap().len(), 2);
    let o = run(&["job", "list"]);
    assert!(stdout(&o).starts_with("NAME"), "{}", stdout(&o));

    let o = run(&["job", "pause", "hourly"]);
    assert!(stdout(&o).contains("paused"), "{}", stdout(&o));
    let o = run(&["job", "resume", "hourly"]);
    assert!(stdout(&o).contains("active"), "{}", stdout(&o));

    let o = run(&["job", "trigger", "later", "-o", "json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let exec: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let id = exec["id"].as_str().unwrap().to_owned();
    assert_eq!(exec["trigger"], "manual");
    server
        .wait_for(Duration::from_secs(10), async || {
            let o = run(&["exec", "get", &id, "-o", "json"]);
            let e: serde_json::Value = serde_json::from_slice(&o.stdout).ok()?;
            (e["state"] == "succeeded").then_some(())
        })
        .await;
    let o = run(&["job", "history", "later"]);
    assert!(stdout(&o).contains(&id), "{}", stdout(&o));
    let o = run(&["exec", "retry", &id]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("only dead or failed"), "{}", stderr(&o));
    let o = run(&["exec", "cancel", &id]);
    assert_eq!(o.status.code(), Some(1));

    // A file with one bad job: the batch is rejected with the bad job's fields named, and
    // nothing of it is written — not even the good job.
    let bad = server.dir.join("bad.json");
    std::fs::write(
        &bad,
        format!(r#"[{{"name":"good","schedule":{{"every":"1h"}},"target":{{"type":"http","url":"{}"}}}},
                   {{"name":"bad","schedule":{{"every":"0s","cron":"* * * * *"}},"target":{{"type":"ftp"}},"timeout":"soon"}}]"#,
            receiver.url("ok")),
    )
    .unwrap();
    let o = run(&["job", "apply", "-f", bad.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1));
    let err = stderr(&o);
    for field in [
        "job bad: schedule",
        "job bad: target.type",
        "job bad: timeout",
    ] {
        assert!(err.contains(field), "{field} not named in: {err}");
    }
    assert_eq!(
        run(&["job", "get", "bad"]).status.code(),
        Some(1),
        "nothing was written"
    );
    assert_eq!(
        run(&["job", "get", "good"]).status.code(),
        Some(1),
        "nothing was written"
    );

    let o = run(&["job", "delete", "later"]);
    assert!(o.status.success());
    assert_eq!(run(&["job", "get", "later"]).status.code(), Some(1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_server_on_the_same_sqlite_file_is_refused_with_a_clear_message() {
    let server = Server::start().await;
    let o = Command::new(env!("CARGO_BIN_EXE_sundial"))
        .args(["server", "--listen", "127.0.0.1:0", "--database-url"])
        .arg(format!(
            "sqlite://{}",
            server.dir.join("sundial.db").display()
        ))
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1));
    let err = stderr(&o);
    assert!(err.contains("another process runs the scheduler"), "{err}");
}
