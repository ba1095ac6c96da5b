//! Named connections at server start (docs/configuration.md): a bad type or URL, and a connection that
//! cannot be established by a worker, each stop `sundial server` with a message naming
//! `connections.NAME`; a bad `[http_targets] allow` pattern stops it naming its index, and a
//! `max_connections_per_host` out of range naming the setting.

mod common;

use std::process::Command;

use common::server_with;

#[test]
fn an_unknown_connection_type_is_refused_by_name() {
    let (ok, stderr) = server_with(
        "[connections.events]\ntype = \"kafka\"\nurl = \"kafka://127.0.0.1:9092\"\n",
        "worker",
    );
    assert!(!ok);
    assert!(
        stderr.contains("connections.events.type: 'kafka'"),
        "{stderr}"
    );
}

#[test]
fn a_url_of_the_wrong_scheme_is_refused_by_name() {
    let (ok, stderr) = server_with(
        "[connections.cache]\ntype = \"redis\"\nurl = \"nats://127.0.0.1:4222\"\n",
        "worker",
    );
    assert!(!ok);
    assert!(stderr.contains("connections.cache.url:"), "{stderr}");
}

#[test]
fn a_connection_a_worker_cannot_establish_stops_the_server_by_name() {
    // Port 1 on loopback: nothing listens there. The password must not be printed.
    let (ok, stderr) = server_with(
        "[connections.rabbit]\ntype = \"amqp\"\nurl = \"amqp://guest:s3cret@127.0.0.1:1/%2f\"\n",
        "worker",
    );
    assert!(!ok);
    assert!(
        stderr.contains(
            "connections.rabbit: cannot connect to amqp at amqp://guest:***@127.0.0.1:1/%2f"
        ),
        "{stderr}"
    );
    assert!(!stderr.contains("s3cret"), "{stderr}");
}

#[test]
fn a_bad_http_targets_allow_pattern_is_refused_by_index() {
    let (ok, stderr) = server_with(
        "[http_targets]\nallow = [\"*.internal\", \"10.0.0.0/33\"]\n",
        "api,worker",
    );
    assert!(!ok);
    assert!(
        stderr.contains("http_targets.allow[1]: '10.0.0.0/33' is not a network"),
        "{stderr}"
    );
    let (ok, stderr) = server_with("[http_targets]\nallow = []\n", "api");
    assert!(!ok);
    assert!(
        stderr.contains("http_targets.allow[0]: the list is empty"),
        "{stderr}"
    );
    let (ok, stderr) = server_with("[http_targets]\n", "api");
    assert!(!ok);
    assert!(stderr.contains("http_targets.allow: missing"), "{stderr}");
}

#[test]
fn a_max_connections_per_host_out_of_range_is_refused_by_name() {
    for bad in ["0", "100001"] {
        let (ok, stderr) = server_with(
            &format!("[http_targets]\nmax_connections_per_host = {bad}\n"),
            "worker",
        );
        assert!(!ok);
        assert!(
            stderr.contains(&format!(
                "http_targets.max_connections_per_host: {bad} is out of range 1-100000"
            )),
            "{stderr}"
        );
    }
}

#[test]
fn a_max_claimed_ahead_out_of_range_or_not_a_number_is_refused_by_name() {
    let (ok, stderr) = server_with("max_claimed_ahead = 1000001\n", "worker");
    assert!(!ok);
    assert!(
        stderr.contains("max_claimed_ahead in the file): 1000001 is out of range 0-1000000"),
        "{stderr}"
    );
    for (file, shown) in [
        ("-1", "-1 is out of range"),
        ("\"5\"", "\"5\" is not a whole number"),
        ("1.5", "1.5 is not a whole number"),
    ] {
        let (ok, stderr) = server_with(&format!("max_claimed_ahead = {file}\n"), "worker");
        assert!(!ok);
        assert!(
            stderr.contains(&format!(
                "max_claimed_ahead in the file): {shown} 0-1000000"
            )),
            "{stderr}"
        );
    }
    // The flag and the environment variable: one line naming all three, exit status 1.
    for (flag, env) in [
        (Some("lots"), None),
        (None, Some("+5")),
        (Some("1.5"), None),
        (None, Some("")),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let mut server = Command::new(env!("CARGO_BIN_EXE_sundial"));
        server
            .args(["server", "--roles", "worker", "--listen", "127.0.0.1:0"])
            .arg("--database-url")
            .arg(format!(
                "sqlite://{}",
                dir.path().join("db.sqlite").display()
            ))
            .env_remove("SUNDIAL_CONFIG");
        if let Some(v) = flag {
            server.arg(format!("--max-claimed-ahead={v}"));
        }
        if let Some(v) = env {
            server.env("SUNDIAL_MAX_CLAIMED_AHEAD", v);
        }
        let out = server.output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{stderr}");
        let value = flag.or(env).unwrap_or_default();
        assert!(
            stderr.contains(&format!(
                "--max-claimed-ahead (or SUNDIAL_MAX_CLAIMED_AHEAD, or max_claimed_ahead in the file): '{value}' is not a whole number 0-1000000"
            )),
            "{stderr}"
        );
    }
}

#[test]
fn a_lookahead_that_is_not_a_duration_or_out_of_range_is_refused_by_name() {
    for (value, shown) in [
        ("1s", "1s is outside 2s-60s"),
        ("61s", "1m1s is outside 2s-60s"),
        ("soon", ""),
    ] {
        let (ok, stderr) = server_with(&format!("lookahead = \"{value}\"\n"), "scheduler");
        assert!(!ok, "{value}");
        assert!(
            stderr.contains(&format!(
                "--lookahead (or SUNDIAL_LOOKAHEAD, or lookahead in the file): {shown}"
            )),
            "{stderr}"
        );
    }
    // A file value that is not a string, and a negative one through the flag: the same one
    // line, exit status 1 (not the TOML parser's or the argument parser's message).
    let (ok, stderr) = server_with("lookahead = 5\nclaim_ahead = \"1s\"\n", "scheduler");
    assert!(!ok);
    assert!(
        stderr.contains(
            "--lookahead (or SUNDIAL_LOOKAHEAD, or lookahead in the file): 5 is not a duration"
        ),
        "{stderr}"
    );
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_sundial"))
        .args(["server", "--roles", "scheduler", "--listen", "127.0.0.1:0"])
        .arg("--database-url")
        .arg(format!(
            "sqlite://{}",
            dir.path().join("db.sqlite").display()
        ))
        .args(["--lookahead", "-5s"])
        .env_remove("SUNDIAL_CONFIG")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("--lookahead (or SUNDIAL_LOOKAHEAD, or lookahead in the file): "),
        "{stderr}"
    );
}

#[test]
fn a_bad_token_entry_is_refused_by_index_and_field() {
    let sha = "2bb80d537b1da3e38bd30361aa855686bde0eacd7162fef6a25fe97bf527a25b";
    let other = "d9298a10d1b0735837dc4bd85dac641b0f3cef27a47e5d53a54f2f3f5b2fcffa";
    let (ok, stderr) = server_with(
        &format!(
            "[[tokens]]\ntoken_sha256 = \"{sha}\"\nrole = \"viewer\"\nnamespaces = [\"*\"]\n\n\
             [[tokens]]\ntoken_sha256 = \"{other}\"\nrole = \"root\"\nnamespaces = [\"*\"]\n"
        ),
        "api",
    );
    assert!(!ok);
    assert!(
        stderr.contains("tokens[1].role: 'root' is not one of admin, editor, viewer"),
        "{stderr}"
    );
    let (ok, stderr) = server_with(
        "[[tokens]]\ntoken_sha256 = \"secret\"\nrole = \"viewer\"\nnamespaces = [\"*\"]\n",
        "api",
    );
    assert!(!ok);
    assert!(stderr.contains("tokens[0].token_sha256:"), "{stderr}");
    let entry =
        format!("[[tokens]]\ntoken_sha256 = \"{sha}\"\nrole = \"viewer\"\nnamespaces = [\"a\"]\n");
    let (ok, stderr) = server_with(
        &format!("{entry}\n{}", entry.replace("viewer", "admin")),
        "api",
    );
    assert!(!ok);
    assert!(
        stderr.contains("tokens[1].token_sha256: the same token as tokens[0]"),
        "{stderr}"
    );
}

#[test]
fn a_bad_maintenance_period_is_refused_naming_its_key() {
    let (ok, stderr) = server_with("[maintenance]\nreaper_every = \"soon\"\n", "api");
    assert!(!ok);
    assert!(stderr.contains("maintenance.reaper_every:"), "{stderr}");
    let (ok, stderr) = server_with("[maintenance]\ncheckpoint_every = \"0s\"\n", "api");
    assert!(!ok);
    assert!(
        stderr.contains("maintenance.checkpoint_every: must be more than 0s"),
        "{stderr}"
    );
    let (ok, stderr) = server_with("[maintenance]\nretention_every = \"0s\"\n", "api");
    assert!(!ok);
    assert!(
        stderr.contains("maintenance.retention_every: must be more than 0s"),
        "{stderr}"
    );
    let (ok, stderr) = server_with("history_retention = \"a month\"\n", "api");
    assert!(!ok);
    assert!(stderr.contains("history_retention: "), "{stderr}");
    let (ok, stderr) = server_with("history_retention = \"30s\"\n", "api");
    assert!(!ok);
    assert!(
        stderr.contains("history_retention: 30s is under a minute"),
        "{stderr}"
    );
    let (ok, stderr) = server_with("shutdown_grace = \"1h\"\n", "api");
    assert!(!ok);
    assert!(
        stderr.contains("--shutdown-grace: 1h is longer than the maximum of 10m"),
        "{stderr}"
    );
    let (ok, stderr) = server_with("shutdown_grace = \"soon\"\n", "api");
    assert!(!ok);
    assert!(stderr.contains("--shutdown-grace: "), "{stderr}");
    let (ok, stderr) = server_with("audit_retention = \"12h\"\n", "api");
    assert!(!ok);
    assert!(
        stderr.contains("audit_retention: 12h is under a day"),
        "{stderr}"
    );
    let sha = "2bb80d537b1da3e38bd30361aa855686bde0eacd7162fef6a25fe97bf527a25b";
    let named = |name: &str| {
        format!(
            "[[tokens]]\nname = \"{name}\"\ntoken_sha256 = \"{sha}\"\nrole = \"editor\"\nnamespaces = [\"a\"]\n"
        )
    };
    for name in ["anonymous", "two words"] {
        let (ok, stderr) = server_with(&named(name), "api");
        assert!(!ok);
        assert!(stderr.contains("tokens[0].name: "), "{stderr}");
    }
    let other = named("ci").replace(sha, &"ab".repeat(32));
    let (ok, stderr) = server_with(&format!("{}{other}", named("ci")), "api");
    assert!(!ok);
    assert!(
        stderr.contains("tokens[1].name: the name of tokens[0] as well"),
        "{stderr}"
    );
    let (ok, stderr) = server_with("[maintenance]\nnode_heartbeat_every = \"30s\"\n", "api");
    assert!(!ok);
    assert!(
        stderr.contains("maintenance.node_heartbeat_every: 30s is not shorter than the lease TTL"),
        "{stderr}"
    );
    let (ok, stderr) = server_with("[maintenance]\nvacuum = \"1s\"\n", "api");
    assert!(!ok);
    assert!(
        stderr.contains("vacuum"),
        "an unknown key is named: {stderr}"
    );
}

#[test]
fn a_bad_alert_entry_stops_the_server_naming_its_index_and_field() {
    let ok_target = "target = {type = \"http\", url = \"http://127.0.0.1:9/hook\"}\n";
    let alert = |body: &str| format!("[[alerts]]\n{body}");
    for (config, expected) in [
        (
            alert(&format!(
                "on = [\"dead\"]\nnamespaces = [\"*\"]\n{ok_target}"
            )),
            "alerts[0].name: missing",
        ),
        (
            format!(
                "{}\n{}",
                alert(&format!(
                    "name = \"a\"\non = [\"dead\"]\nnamespaces = [\"*\"]\n{ok_target}"
                )),
                alert(&format!(
                    "name = \"b\"\non = [\"dead\", \"succeeded\"]\nnamespaces = [\"*\"]\n{ok_target}"
                ))
            ),
            "alerts[1].on[1]: 'succeeded' is not one of failed, dead, cancelled, run_failed, run_cancelled",
        ),
        (
            alert(&format!(
                "name = \"a\"\non = []\nnamespaces = [\"*\"]\n{ok_target}"
            )),
            "alerts[0].on: empty",
        ),
        (
            alert(&format!(
                "name = \"a\"\non = [\"dead\"]\nnamespaces = [\"bad name!\"]\n{ok_target}"
            )),
            "alerts[0].namespaces[0]: the name",
        ),
        (
            alert(
                "name = \"a\"\non = [\"dead\"]\nnamespaces = [\"*\"]\ntarget = {type = \"http\", url = \"ftp://x\"}\n",
            ),
            "alerts[0].target.url:",
        ),
        (
            alert(
                "name = \"a\"\non = [\"dead\"]\nnamespaces = [\"*\"]\ntarget = {type = \"nats\", connection = \"nope\", subject = \"s\"}\n",
            ),
            "alerts[0].target.connection:",
        ),
        (
            alert(
                "name = \"a\"\non = [\"dead\"]\nnamespaces = [\"*\"]\ntarget = {type = \"container\", connection = \"podman\", image = \"x\"}\n",
            ),
            "alerts[0].target.type: a container cannot carry an alert",
        ),
        (
            format!(
                "{}\n{}",
                alert(&format!(
                    "name = \"a\"\non = [\"dead\"]\nnamespaces = [\"*\"]\n{ok_target}"
                )),
                alert(&format!(
                    "name = \"a\"\non = [\"failed\"]\nnamespaces = [\"*\"]\n{ok_target}"
                ))
            ),
            "alerts[1].name: 'a' is also the name of alerts[0]",
        ),
        (
            format!(
                "public_url = \"sundial.example\"\n{}",
                alert(&format!(
                    "name = \"a\"\non = [\"dead\"]\nnamespaces = [\"*\"]\n{ok_target}"
                ))
            ),
            "public_url: 'sundial.example' is not an http:// or https:// URL",
        ),
    ] {
        let (ok, stderr) = server_with(&config, "api");
        assert!(!ok, "{config}");
        assert!(stderr.contains(expected), "{expected} in {stderr}");
    }
}
