//! The command line against a real server: `job`, `exec`, `workflow`, `cron`, and the refusal
//! of a second scheduler on one SQLite file.

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

/// `sundial --version` names the version and the commit the binary was built from: in a Git
/// checkout, its `HEAD` (crates/bin/build.rs).
#[test]
fn the_version_names_the_commit_it_was_built_from() {
    let o = sundial(&["--version"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    assert!(
        out.starts_with(&format!("sundial {} (commit ", env!("CARGO_PKG_VERSION"))),
        "{out}"
    );
    let head = Command::new("git")
        .args(["rev-parse", "--short=12", "HEAD"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .ok()
        .filter(|h| h.status.success())
        .map(|h| String::from_utf8_lossy(&h.stdout).trim().to_owned());
    match (head, std::env::var("SUNDIAL_COMMIT").ok()) {
        (_, Some(given)) if !given.trim().is_empty() => {
            assert!(out.contains(&format!("(commit {given})")), "{out}")
        }
        (Some(head), _) => assert!(out.contains(&format!("(commit {head})")), "{out}"),
        (None, _) => assert!(out.contains("(commit unknown)"), "{out}"),
    }
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
fn cron_next_and_explain_take_a_dst_policy() {
    let o = sundial(&[
        "cron",
        "next",
        "--tz",
        "America/New_York",
        "--dst-fold",
        "both",
        "--from",
        "2026-11-01T00:00:00Z",
        "--count",
        "3",
        "--",
        "30 1 * * *",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    // 01:30 occurs twice on 2026-11-01: both instants fire.
    assert_eq!(
        stdout(&o),
        "2026-11-01T01:30:00-04:00\n2026-11-01T01:30:00-05:00\n2026-11-02T01:30:00-05:00\n"
    );
    let o = sundial(&["cron", "next", "--dst-gap", "jump", "--", "30 1 * * *"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("--dst-gap"), "{}", stderr(&o));
    // `explain` lists the clock changes that touch the expression, with the slots around them.
    let o = sundial(&[
        "cron",
        "explain",
        "--tz",
        "Europe/Berlin",
        "--dst-gap",
        "skip",
        "--",
        "30 2 * * *",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    assert!(
        out.lines()
            .any(|l| l.starts_with("dst gap at ") && l.contains("are skipped")),
        "{out}"
    );
    assert!(out.lines().any(|l| l.starts_with("dst fold at ")), "{out}");
}

/// Every job in `examples/time.yaml` passes the API's validation as written, and every
/// calendar in `examples/calendars.yaml` the calendar's.
#[test]
fn the_time_examples_are_valid_jobs() {
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../examples/time.yaml"
    ))
    .expect("examples/time.yaml");
    let mut count = 0;
    for doc in serde_yaml_ng::Deserializer::from_str(&text) {
        let value: serde_json::Value =
            serde::Deserialize::deserialize(doc).expect("a YAML document");
        let ctx = sundial_core::validate::Context {
            namespace: value["namespace"].as_str().unwrap_or_default().to_owned(),
            name: value["name"].as_str().map(str::to_owned),
            ..Default::default()
        };
        let spec = sundial_core::validate::job_from_json(&value, &ctx)
            .unwrap_or_else(|e| panic!("{}: {e:?}", value["name"]));
        assert!(
            matches!(
                spec.schedule.kind,
                sundial_core::job::ScheduleKind::Cron { dst: Some(_), .. }
            ) || !spec.schedule.exclude_calendars.is_empty(),
            "{}",
            value["name"]
        );
        count += 1;
    }
    assert_eq!(count, 4);
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../examples/calendars.yaml"
    ))
    .expect("examples/calendars.yaml");
    let mut calendars = 0;
    for doc in serde_yaml_ng::Deserializer::from_str(&text) {
        let value: serde_json::Value =
            serde::Deserialize::deserialize(doc).expect("a YAML document");
        sundial_core::calendar::calendar_from_json(&value)
            .unwrap_or_else(|e| panic!("{}: {e:?}", value["name"]));
        calendars += 1;
    }
    assert_eq!(calendars, 2);
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

/// `sundial cron next 0 2 * * *` unquoted: the shell turns each `*` into the folder's
/// entries, and the refusal says to quote the expression.
#[test]
fn an_expression_the_shell_expanded_into_file_names_is_refused_with_a_hint_to_quote_it() {
    let dir = tempfile::tempdir().unwrap();
    for f in ["Cargo.toml", "README.md"] {
        std::fs::write(dir.path().join(f), "").unwrap();
    }
    let o = Command::new(env!("CARGO_BIN_EXE_sundial"))
        .current_dir(dir.path())
        .args([
            "cron",
            "next",
            "0",
            "2",
            "Cargo.toml",
            "README.md",
            "Cargo.toml",
        ])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    let err = stderr(&o);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("quote the expression"), "{err}");
    // A bad expression whose words name no file gets no such hint.
    let o = sundial(&["cron", "next", "--", "61 * * * *"]);
    assert!(!stderr(&o).contains("quote the expression"));
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
        &["workflow", "get", "../jobs/x", "-n", "a"][..],
        &["workflow", "run", "get", "../../x", "-w", "wf", "-n", "a"][..],
        &["workflow", "run", "cancel", "r1", "-w", "a/b", "-n", "a"][..],
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
fn cron_explain_describes_in_words_in_a_zone_and_says_when_it_never_fires() {
    let o = sundial(&["cron", "explain", "--tz", "Europe/Paris", "--", "0 2 * * *"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    assert!(
        out.lines()
            .next()
            .unwrap_or_default()
            .ends_with("(Europe/Paris)"),
        "{out}"
    );
    assert!(out.contains("next fire: "), "{out}");
    let o = sundial(&["cron", "explain", "--", "0 0 31 2 *"]);
    assert!(o.status.success());
    assert!(stdout(&o).contains("it never fires"), "{}", stdout(&o));
    let o = sundial(&["cron", "explain", "--tz", "Mars/Olympus", "--", "0 2 * * *"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).starts_with("sundial: error: --tz"),
        "{}",
        stderr(&o)
    );
}

/// `job plan -f` prints what applying would do and writes nothing; `job apply --plan` asks
/// and applies only on "yes".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn job_plan_shows_the_diff_and_apply_plan_asks_first() {
    let receiver = Receiver::start().await;
    let server = Server::start().await;
    let url = format!("http://{}", server.addr);
    let write = |name: &str, cron: &str, dst: &str| {
        let file = server.dir.join(name);
        std::fs::write(
            &file,
            format!(
                "namespace: plan\nname: nightly\nschedule: {{cron: '{cron}', timezone: Europe/Berlin{dst}}}\ntarget: {{type: http, url: '{}'}}\n",
                receiver.url("ok")
            ),
        )
        .unwrap();
        file
    };
    let first = write("first.yaml", "30 2 * * *", "");
    let o = sundial(&[
        "job",
        "plan",
        "-f",
        first.to_str().unwrap(),
        "--server",
        &url,
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    assert!(out.contains("+ job plan/nightly will be created"), "{out}");
    assert!(
        out.contains("Plan: 1 to create, 0 to change, 0 unchanged."),
        "{out}"
    );
    // Nothing was written.
    let o = sundial(&["job", "get", "nightly", "-n", "plan", "--server", &url]);
    assert!(!o.status.success());

    let apply = |file: &std::path::Path, answer: &str| {
        let mut child = Command::new(env!("CARGO_BIN_EXE_sundial"))
            .args([
                "job",
                "apply",
                "--plan",
                "-f",
                file.to_str().unwrap(),
                "--server",
                &url,
            ])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        child
            .stdin
            .take()
            .unwrap()
            .write_all(answer.as_bytes())
            .unwrap();
        child.wait_with_output().unwrap()
    };
    let o = apply(&first, "no\n");
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(stderr(&o).contains("Nothing applied."), "{}", stderr(&o));
    assert!(
        !sundial(&["job", "get", "nightly", "-n", "plan", "--server", &url])
            .status
            .success()
    );
    let o = apply(&first, "yes\n");
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stdout(&o).contains("job plan/nightly applied (version 1"),
        "{}",
        stdout(&o)
    );

    // A change: each field before and after, and the fire times.
    let second = write("second.yaml", "45 2 * * *", ", dst: {gap: skip}");
    let o = sundial(&[
        "job",
        "plan",
        "-f",
        second.to_str().unwrap(),
        "--server",
        &url,
    ]);
    let out = stdout(&o);
    assert!(out.contains("~ job plan/nightly will be changed"), "{out}");
    assert!(
        out.contains(r#"schedule.cron: "30 2 * * *" → "45 2 * * *""#),
        "{out}"
    );
    assert!(
        out.contains(r#"schedule.dst: null → {"fold":"first","gap":"skip"}"#),
        "{out}"
    );
    assert!(out.contains("next fire times after:  "), "{out}");
    let o = sundial(&[
        "job",
        "plan",
        "-f",
        first.to_str().unwrap(),
        "--server",
        &url,
    ]);
    assert!(
        stdout(&o).contains("= job plan/nightly unchanged"),
        "{}",
        stdout(&o)
    );
    // An invalid file is refused as the apply refuses it: exit 2, the field named.
    let bad = write("bad.yaml", "61 2 * * *", "");
    let o = sundial(&["job", "plan", "-f", bad.to_str().unwrap(), "--server", &url]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("jobs.0.schedule.cron"),
        "{}",
        stderr(&o)
    );
}

/// `calendar apply|list|get|delete`: a calendar a job names shows who names it and cannot be
/// deleted; a bad file is refused naming the field.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calendar_commands_drive_the_api() {
    let receiver = Receiver::start().await;
    let server = Server::start().await;
    let url = format!("http://{}", server.addr);
    let run = |args: &[&str]| {
        let mut cmd = args.to_vec();
        cmd.extend_from_slice(&["--server", &url, "-n", "cal"]);
        sundial(&cmd)
    };
    let file = server.dir.join("calendars.yaml");
    std::fs::write(
        &file,
        "name: weekends\ntimezone: Europe/Berlin\nexclude:\n  - cron: '* * * * SAT,SUN'\n\
         ---\nname: holidays\ntimezone: Europe/Berlin\nexclude:\n  - date: 2027-12-25\n  - {from: 2027-12-31, to: 2028-01-01}\n",
    )
    .unwrap();
    let o = run(&["calendar", "apply", "-f", file.to_str().unwrap()]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stdout(&o).contains("calendar cal/weekends created (version 1)"),
        "{}",
        stdout(&o)
    );
    let o = run(&["calendar", "list"]);
    let out = stdout(&o);
    assert!(out.starts_with("NAME"), "{out}");
    assert!(
        out.contains("holidays") && out.contains("weekends"),
        "{out}"
    );

    let job = server.dir.join("job.yaml");
    std::fs::write(
        &job,
        format!(
            "name: daily\nschedule: {{cron: '0 9 * * *', timezone: Europe/Berlin, exclude_calendars: [weekends, holidays]}}\ntarget: {{type: http, url: '{}'}}\n",
            receiver.url("ok")
        ),
    )
    .unwrap();
    let o = run(&["job", "apply", "-f", job.to_str().unwrap()]);
    assert!(o.status.success(), "{}", stderr(&o));
    let o = run(&["calendar", "get", "weekends"]);
    let out = stdout(&o);
    assert!(out.contains("used_by:\n- job daily"), "{out}");
    assert!(out.contains("next_excluded_dates:"), "{out}");
    let o = run(&["calendar", "delete", "weekends"]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(stderr(&o).contains("job daily"), "{}", stderr(&o));

    let bad = server.dir.join("bad.yaml");
    std::fs::write(
        &bad,
        "name: bad\ntimezone: Mars/Olympus\nexclude: [{date: 2027-02-30}]\n",
    )
    .unwrap();
    let o = run(&["calendar", "apply", "-f", bad.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    let err = stderr(&o);
    assert!(
        err.contains("timezone:") && err.contains("exclude.0.date:"),
        "{err}"
    );
    assert!(!run(&["calendar", "get", "bad"]).status.success());
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
        "---\nnamespace: cli\nname: hourly\nschedule: {{cron: '0 * * * *', timezone: Europe/Berlin}}\ntarget: {{type: http, url: '{ok}'}}\n\
         ---\nnamespace: cli\nname: later\nschedule: {{at: '2099-01-01T00:00:00Z'}}\ntarget: {{type: http, url: '{ok}'}}\n\
         ---\nnamespace: other\nname: elsewhere\nschedule: {{every: 1h}}\ntarget: {{type: http, url: '{ok}'}}\n",
        ok = receiver.url("ok")
    )
    .unwrap();
    // -n names one namespace and the file another: refused, nothing written.
    let o = run(&["job", "apply", "-f", file.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("the file names namespace 'other' but -n/--namespace"),
        "{}",
        stderr(&o)
    );
    assert!(!run(&["job", "get", "hourly"]).status.success());
    // Without -n each job goes to the namespace it names.
    let o = sundial(&[
        "job",
        "apply",
        "-f",
        file.to_str().unwrap(),
        "--server",
        &url,
    ]);
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
    // -A lists every namespace's jobs with a NAMESPACE column; an empty namespace's listing
    // names the namespaces that hold something.
    let o = sundial(&["job", "list", "-A", "--server", &url]);
    let table = stdout(&o);
    assert!(table.starts_with("NAMESPACE"), "{table}");
    for (ns, name) in [("cli", "hourly"), ("cli", "later"), ("other", "elsewhere")] {
        assert!(
            table.lines().any(|l| l.starts_with(ns) && l.contains(name)),
            "{ns}/{name} in {table}"
        );
    }
    let o = sundial(&[
        "job",
        "list",
        "--all-namespaces",
        "-o",
        "json",
        "--server",
        &url,
    ]);
    let all: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(all["items"].as_array().unwrap().len(), 3);
    let o = sundial(&["job", "list", "-n", "empty", "--server", &url]);
    assert!(o.status.success());
    assert!(
        stderr(&o).contains(
            "no jobs in namespace 'empty'; namespaces with jobs or workflows: cli, other"
        ),
        "{}",
        stderr(&o)
    );

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
    assert_eq!(o.status.code(), Some(2), "a file refused as invalid");
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
    // An item that is not a mapping is named by its place, with no empty field name.
    let odd = server.dir.join("odd.json");
    std::fs::write(&odd, "[42]").unwrap();
    let o = run(&["job", "apply", "-f", odd.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("job #1: "), "{}", stderr(&o));
    assert!(!stderr(&o).contains("job #1: :"), "{}", stderr(&o));
    // The namespace's executions filtered by job: an unknown one has none; a bad name is
    // refused before anything is sent.
    let o = run(&["exec", "list", "--job", "nosuchjob"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let o = run(&["exec", "list", "--job", "Bad Name"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("--job"), "{}", stderr(&o));

    let o = run(&["job", "delete", "later"]);
    assert!(o.status.success());
    let o = run(&["job", "get", "later"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).starts_with("sundial: error: ") && stderr(&o).contains("namespace"),
        "a not-found says where it looked: {}",
        stderr(&o)
    );

    // A schedule that can never fire is refused naming the field, as bad input (exit 2).
    let never = server.dir.join("never.yaml");
    std::fs::write(
        &never,
        format!(
            "name: feb31\nschedule: {{cron: '0 0 31 2 *'}}\ntarget: {{type: http, url: '{ok}'}}\n\
             ---\nname: over\nschedule: {{every: 1h, end_at: '2020-01-01T00:00:00Z'}}\ntarget: {{type: http, url: '{ok}'}}\n",
            ok = receiver.url("ok")
        ),
    )
    .unwrap();
    let o = run(&["job", "apply", "-f", never.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    let err = stderr(&o);
    assert!(
        err.contains("job feb31: schedule.cron: no date matches it"),
        "{err}"
    );
    assert!(
        err.contains("job over: schedule.end_at: 2020-01-01T00:00:00Z is already past"),
        "{err}"
    );
    assert!(err.contains("2 of 2 jobs not applied"), "{err}");
    assert!(!run(&["job", "get", "over"]).status.success());
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

/// Two workflows in one YAML stream: `etl` (the shape of docs/workflows.md's example: extract, load after it, alert
/// after both on one_failed; a yearly schedule that does not fire during the test) and
/// `slow`, one task on the receiver's 5 s path, triggered only by hand.
fn workflows_yaml(receiver: &Receiver) -> String {
    format!(
        "---\nname: etl\nschedule: {{cron: '0 0 1 1 *'}}\nparams: {{region: eu}}\ntasks:\n\
         - {{name: extract, target: {{type: http, url: '{ok}'}}}}\n\
         - {{name: load, depends_on: [extract], target: {{type: http, url: '{ok}'}}}}\n\
         - {{name: alert, depends_on: [extract, load], trigger_rule: one_failed, target: {{type: http, url: '{ok}'}}}}\n\
         ---\nname: slow\ntasks:\n- {{name: wait, target: {{type: http, url: '{slow}'}}}}\n",
        ok = receiver.url("ok"),
        slow = receiver.url("slow-wf"),
    )
}

fn json_of(o: &Output) -> serde_json::Value {
    serde_json::from_slice(&o.stdout)
        .unwrap_or_else(|e| panic!("{e}: stdout {} stderr {}", stdout(o), stderr(o)))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workflow_commands_drive_the_api() {
    let receiver = Receiver::start().await;
    let server = Server::start().await;
    let url = format!("http://{}", server.addr);
    let run = |args: &[&str]| {
        let mut cmd = args.to_vec();
        cmd.extend_from_slice(&["--server", &url, "-n", "wf"]);
        sundial(&cmd)
    };
    let file = server.dir.join("workflows.yaml");
    std::fs::write(&file, workflows_yaml(&receiver)).unwrap();
    let o = run(&["workflow", "apply", "-f", file.to_str().unwrap()]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    assert!(out.contains("workflow wf/etl applied (version 1"), "{out}");
    assert!(out.contains("workflow wf/slow applied (version 1"), "{out}");
    assert!(
        out.contains("wf: 2 created, 0 updated, 0 unchanged"),
        "{out}"
    );
    let o = run(&["workflow", "apply", "-f", file.to_str().unwrap()]);
    assert!(
        stdout(&o).contains("0 created, 0 updated, 2 unchanged"),
        "{}",
        stdout(&o)
    );

    // list: a table, and the API's JSON.
    let o = run(&["workflow", "list"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let table = stdout(&o);
    let lines: Vec<&str> = table.lines().collect();
    assert_eq!(lines.len(), 3, "{table}");
    let header: Vec<&str> = lines[0]
        .split("  ")
        .filter(|c| !c.is_empty())
        .map(str::trim)
        .collect();
    assert_eq!(
        header,
        [
            "NAME",
            "STATE",
            "TASKS",
            "SCHEDULE",
            "NEXT FIRE",
            "LAST RUN"
        ]
    );
    assert!(
        lines[1].starts_with("etl ") && lines[1].contains(" active "),
        "{table}"
    );
    assert!(
        lines[1].contains(" 3 ") && lines[1].contains("cron 0 0 1 1 * (UTC)"),
        "{table}"
    );
    assert!(
        lines[2].starts_with("slow ") && lines[2].contains(" 1 "),
        "{table}"
    );
    let list = json_of(&run(&["workflow", "list", "-o", "json"]));
    assert_eq!(list["items"].as_array().unwrap().len(), 2);

    // get: YAML for people, the resource as JSON.
    let o = run(&["workflow", "get", "etl"]);
    assert!(stdout(&o).contains("name: etl"), "{}", stdout(&o));
    let etl = json_of(&run(&["workflow", "get", "etl", "-o", "json"]));
    assert_eq!(etl["version"], 1);
    assert_eq!(etl["tasks"].as_array().unwrap().len(), 3);

    // graph: text in topological order, and Graphviz dot.
    let o = run(&["workflow", "graph", "etl"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(
        stdout(&o),
        "extract\nload     ← extract\nalert    ← extract, load  (one_failed)\n"
    );
    let o = run(&["workflow", "graph", "etl", "-o", "dot"]);
    assert_eq!(
        stdout(&o),
        "digraph \"etl\" {\n  rankdir=LR;\n  \"extract\";\n  \"load\";\n  \"alert\";\n  \
         \"extract\" -> \"load\";\n  \"extract\" -> \"alert\" [label=\"one_failed\"];\n  \
         \"load\" -> \"alert\" [label=\"one_failed\"];\n}\n"
    );
    // -o text and dot are graph's alone, and graph prints nothing else: bad usage.
    assert_eq!(
        run(&["workflow", "graph", "etl", "-o", "json"])
            .status
            .code(),
        Some(2)
    );
    let o = run(&["workflow", "list", "-o", "dot"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("only `workflow graph`"),
        "{}",
        stderr(&o)
    );

    // trigger with params (JSON where it parses), then watch the run end.
    let o = run(&[
        "workflow",
        "trigger",
        "etl",
        "--param",
        "region=us",
        "--param",
        "batch=3",
        "-o",
        "json",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let triggered = json_of(&o);
    assert_eq!(triggered["trigger"], "manual");
    assert_eq!(
        triggered["params"],
        serde_json::json!({"region": "us", "batch": 3})
    );
    let run_id = triggered["id"].as_str().unwrap().to_owned();
    server
        .wait_for(Duration::from_secs(10), async || {
            let r = json_of(&run(&[
                "workflow", "run", "get", &run_id, "-w", "etl", "-o", "json",
            ]));
            (r["state"] == "succeeded").then_some(())
        })
        .await;
    assert_eq!(
        receiver.for_path("ok").len(),
        2,
        "extract and load ran; alert did not"
    );

    // run get: the run's row, then one line per task.
    let o = run(&["workflow", "run", "get", &run_id, "--workflow", "etl"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let table = stdout(&o);
    let lines: Vec<&str> = table.lines().collect();
    assert!(
        lines[0].starts_with("ID ") && lines[0].contains("SCHEDULED AT"),
        "{table}"
    );
    assert!(
        lines[1].starts_with(&run_id) && lines[1].contains(" succeeded  manual "),
        "{table}"
    );
    assert_eq!(lines[2], "", "{table}");
    let header: Vec<&str> = lines[3]
        .split("  ")
        .filter(|c| !c.is_empty())
        .map(str::trim)
        .collect();
    assert_eq!(
        header,
        [
            "TASK",
            "STATE",
            "ATTEMPT",
            "STARTED",
            "FINISHED",
            "EXECUTION"
        ]
    );
    let task_line = |name: &str| {
        lines[4..]
            .iter()
            .find(|l| l.split_whitespace().next() == Some(name))
            .unwrap_or_else(|| panic!("no line for {name}: {table}"))
            .to_string()
    };
    assert!(task_line("extract").contains(" succeeded "), "{table}");
    assert!(task_line("load").contains(" succeeded "), "{table}");
    assert!(task_line("alert").contains(" skipped "), "{table}");

    // runs: the run, newest first.
    let o = run(&["workflow", "runs", "etl"]);
    let table = stdout(&o);
    assert!(table.starts_with("ID "), "{table}");
    assert!(
        table
            .lines()
            .nth(1)
            .is_some_and(|l| l.starts_with(&run_id) && l.contains("manual")),
        "{table}"
    );
    let runs = json_of(&run(&[
        "workflow",
        "runs",
        "etl",
        "--state",
        "succeeded",
        "-o",
        "json",
    ]));
    assert_eq!(runs["items"].as_array().unwrap().len(), 1);

    // run retry of one task: it and its downstream run again.
    let o = run(&[
        "workflow", "run", "retry", &run_id, "-w", "etl", "--task", "load", "-o", "json",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(json_of(&o)["id"], run_id.as_str());
    server
        .wait_for(Duration::from_secs(10), async || {
            let r = json_of(&run(&[
                "workflow", "run", "get", &run_id, "-w", "etl", "-o", "json",
            ]));
            (r["state"] == "succeeded").then_some(())
        })
        .await;
    assert_eq!(
        receiver.for_path("ok").len(),
        3,
        "load ran again, extract did not"
    );

    // run cancel: a run whose task is on the 5 s path.
    let slow = json_of(&run(&["workflow", "trigger", "slow", "-o", "json"]));
    let slow_id = slow["id"].as_str().unwrap().to_owned();
    server
        .wait_for(Duration::from_secs(10), async || {
            (!receiver.for_path("slow-wf").is_empty()).then_some(())
        })
        .await;
    let o = run(&["workflow", "run", "cancel", &slow_id, "-w", "slow"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stdout(&o)
            .lines()
            .nth(1)
            .is_some_and(|l| l.contains(" cancelled ")),
        "{}",
        stdout(&o)
    );
    let o = run(&["workflow", "run", "cancel", &slow_id, "-w", "slow"]);
    assert_eq!(o.status.code(), Some(1), "a terminal run: {}", stderr(&o));
    // -w is required: bad usage.
    let o = run(&["workflow", "run", "get", &slow_id]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("--workflow"), "{}", stderr(&o));

    // pause and resume.
    assert!(stdout(&run(&["workflow", "pause", "etl"])).contains("workflow etl paused"));
    let o = run(&["workflow", "resume", "etl"]);
    assert!(
        stdout(&o).contains("workflow etl active; next fire at "),
        "{}",
        stdout(&o)
    );

    // A cycle: the field is named, exit 2, and nothing of the file is written.
    let bad = server.dir.join("cycle.json");
    std::fs::write(
        &bad,
        serde_json::json!({"workflows": [{"name": "cyclic", "tasks": [
            {"name": "extract", "depends_on": ["load"], "target": {"type": "http", "url": receiver.url("ok")}},
            {"name": "load", "depends_on": ["extract"], "target": {"type": "http", "url": receiver.url("ok")}},
        ]}]})
        .to_string(),
    )
    .unwrap();
    let o = run(&["workflow", "apply", "-f", bad.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    let err = stderr(&o);
    assert!(
        err.contains("workflow cyclic: tasks[1].depends_on[0]: cycle load → extract → load"),
        "{err}"
    );
    assert!(err.contains("1 of 1 workflow not applied"), "{err}");

    // An unknown workflow: the problem's text and exit 1, as for jobs.
    for args in [
        &["workflow", "get", "cyclic"][..],
        &["workflow", "graph", "nope"][..],
        &["workflow", "trigger", "nope"][..],
        &["workflow", "runs", "nope"][..],
        &["workflow", "run", "get", &run_id, "-w", "nope"][..],
    ] {
        let o = run(args);
        assert_eq!(o.status.code(), Some(1), "{args:?}");
        assert!(stderr(&o).contains("not found"), "{args:?}: {}", stderr(&o));
    }
    assert_eq!(run(&["job", "get", "nope"]).status.code(), Some(1));

    let o = run(&["workflow", "delete", "slow"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(stdout(&o), "workflow slow deleted\n");
    assert_eq!(run(&["workflow", "get", "slow"]).status.code(), Some(1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn history_prune_counts_with_dry_run_and_refuses_a_bad_retention() {
    let receiver = Receiver::start().await;
    let server = Server::start().await;
    let at = common::whole_second_after(Duration::from_secs(1));
    server
        .put_job(
            "cli",
            "once",
            serde_json::json!({"schedule": {"at": at.to_string()}, "target": {"type": "http", "url": receiver.url("ok")}}),
        )
        .await;
    server
        .wait_for(Duration::from_secs(10), async || {
            let h = server.history("cli", "once").await;
            (h.first().is_some_and(|e| e["state"] == "succeeded")).then_some(())
        })
        .await;
    let url = format!("sqlite://{}", server.dir.join("sundial.db").display());
    let o = sundial(&[
        "history",
        "prune",
        "--dry-run",
        "--retention",
        "1m",
        "--database-url",
        &url,
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let out = stdout(&o);
    assert!(
        out.starts_with("would delete 0 executions and 0 workflow runs (0 task executions) that finished before "),
        "{out}"
    );
    assert!(out.contains("nothing was deleted (--dry-run)"), "{out}");
    assert_eq!(server.history("cli", "once").await.len(), 1);

    let o = sundial(&[
        "history",
        "prune",
        "--retention",
        "5s",
        "--database-url",
        &url,
    ]);
    assert_eq!(o.status.code(), Some(2), "{}", stdout(&o));
    let err = stderr(&o);
    assert!(
        err.starts_with("sundial: error: --retention: history_retention: 5s is under a minute"),
        "{err}"
    );
}

#[test]
fn history_prune_refuses_a_bad_store_url_and_a_dry_run_creates_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("missing.db");
    let url = format!("sqlite://{}", missing.display());
    let o = sundial(&["history", "prune", "--dry-run", "--database-url", &url]);
    assert_eq!(o.status.code(), Some(2), "{}", stdout(&o));
    assert!(
        stderr(&o).contains("--database-url: no SQLite store at"),
        "{}",
        stderr(&o)
    );
    assert!(!missing.exists(), "a dry run created the store");
    for bad in ["not a url", "mysql://x/y", "sqlite://"] {
        let o = sundial(&["history", "prune", "--dry-run", "--database-url", bad]);
        assert_eq!(o.status.code(), Some(2), "{bad}: {}", stderr(&o));
        assert!(
            stderr(&o).contains("--database-url:"),
            "{bad}: {}",
            stderr(&o)
        );
    }
}

/// A SQLite URL that names no file would give each of the store's connections an in-memory
/// database of its own: the server refuses it at start, naming the flag.
#[test]
fn a_sqlite_url_without_a_file_stops_the_server_naming_the_flag() {
    for bad in ["sqlite://", "sqlite::memory:", "sqlite://?mode=rwc"] {
        let o = sundial(&["server", "--database-url", bad, "--listen", "127.0.0.1:0"]);
        assert!(!o.status.success(), "{bad}");
        let err = stderr(&o);
        assert!(
            err.contains("--database-url:") && err.contains("names no file"),
            "{bad}: {err}"
        );
    }
}

#[test]
fn a_bad_otlp_endpoint_or_protocol_stops_the_server_naming_the_variable() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("s.db").display());
    for (var, value, endpoint) in [
        ("OTEL_EXPORTER_OTLP_ENDPOINT", "not a url", "not a url"),
        (
            "OTEL_EXPORTER_OTLP_PROTOCOL",
            "grpc",
            "http://127.0.0.1:4318",
        ),
    ] {
        let mut child = Command::new(env!("CARGO_BIN_EXE_sundial"))
            .args(["server", "--listen", "127.0.0.1:0", "--database-url", &url])
            .env("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint)
            .env(var, value)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        let status = loop {
            if let Some(status) = child.try_wait().unwrap() {
                break status;
            }
            if std::time::Instant::now() > deadline {
                child.kill().unwrap();
                panic!("{var}={value}: the server started");
            }
            std::thread::sleep(Duration::from_millis(100));
        };
        let mut err = String::new();
        std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut err).unwrap();
        assert_eq!(status.code(), Some(1), "{err}");
        assert!(
            err.contains(&format!("{var}=")) || err.contains(&format!("{var}='")),
            "{err}"
        );
    }
}
