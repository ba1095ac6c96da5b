//! Signed deliveries (docs/security.md, "Signed deliveries"), verified as a receiver would: a
//! real `sundial server` with `[[signing_keys]]` (two HMAC keys during a rotation and an
//! Ed25519 key) delivers a job's two attempts to a real receiver, and the Standard Webhooks
//! libraries from PyPI and npm (`standardwebhooks`; Ed25519 with Python's `cryptography` and
//! `node:crypto`) verify them, refuse a tampered body, an unknown key, a stale timestamp and a
//! stale attempt (crates/bin/tests/signing/verify.py and verify.mjs). A bad key file stops the
//! server naming the setting, without quoting the key.

mod common;

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use common::{Receiver, Server, ServerOpts};
use serde_json::{Value, json};

/// An HMAC key file's text for 32 bytes of `byte`.
fn hmac_key(byte: u8) -> String {
    use base64::Engine as _;
    format!(
        "whsec_{}",
        base64::engine::general_purpose::STANDARD.encode([byte; 32])
    )
}

/// Runs `program args...` in the verifiers' folder, failing the test with its output unless it
/// exits 0.
fn verifier(program: &str, args: &[&str]) {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/signing");
    let out = Command::new(program)
        .args(args)
        .current_dir(&dir)
        .output()
        .unwrap_or_else(|e| {
            panic!(
                "{program} cannot run ({e}); scripts/services.sh installs what the verifiers need"
            )
        });
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    println!("{program} {args:?}:\n{text}");
    assert!(out.status.success(), "{program} {args:?} failed:\n{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_standard_webhooks_libraries_verify_every_delivery() {
    let dir = tempfile::tempdir().unwrap();
    let (old, new, other) = (hmac_key(1), hmac_key(2), hmac_key(3));
    std::fs::write(dir.path().join("old.key"), &old).unwrap();
    std::fs::write(dir.path().join("new.key"), format!("{new}\n")).unwrap();
    // An Ed25519 key made by the binary itself.
    let made = Command::new(env!("CARGO_BIN_EXE_sundial"))
        .args(["signing-key", "new", "--algorithm", "ed25519"])
        .output()
        .unwrap();
    assert!(made.status.success(), "{made:?}");
    std::fs::write(dir.path().join("ed.key"), &made.stdout).unwrap();
    let receiver = Receiver::start().await;
    let config = format!(
        "[[alerts]]\nname = \"oncall\"\non = [\"failed\"]\nnamespaces = [\"billing\"]\n\
         target = {{type = \"http\", url = \"{1}\"}}\n\n\
         [[signing_keys]]\nid = \"2026-11\"\nnamespaces = [\"billing\"]\nsecret_file = \"{0}/old.key\"\n\n\
         [[signing_keys]]\nid = \"2026-12\"\nnamespaces = [\"billing\"]\nsecret_file = \"{0}/new.key\"\n\n\
         [[signing_keys]]\nid = \"ed\"\nnamespaces = [\"billing\"]\nsecret_file = \"{0}/ed.key\"\n",
        dir.path().display(),
        receiver.url("alert")
    );
    let config_path = dir.path().join("sundial.toml");
    std::fs::write(&config_path, config).unwrap();
    let server = Server::start_with(
        dir.path(),
        ServerOpts {
            args: vec!["--config".into(), config_path.display().to_string()],
            ..ServerOpts::default()
        },
    )
    .await;

    let keys = server.get("/v1/namespaces/billing/signing-keys").await;
    let items = keys["items"].as_array().unwrap();
    let ids: Vec<&str> = items.iter().map(|k| k["id"].as_str().unwrap()).collect();
    assert_eq!(ids, ["2026-11", "2026-12", "ed"], "{keys}");
    assert!(items[0]["public_key"].is_null(), "{keys}");
    let public_key = items[2]["public_key"].as_str().unwrap().to_owned();
    assert!(public_key.starts_with("whpk_"), "{keys}");
    let text = keys.to_string();
    for secret in [&old, &new] {
        assert!(!text.contains(&secret[6..]), "a secret in {text}");
    }
    let none = server.get("/v1/namespaces/web/signing-keys").await;
    assert_eq!(none["items"], json!([]), "{none}");

    // Attempt 1 is answered 503, attempt 2 200: two signed deliveries of one execution; a job
    // whose one attempt is answered 404 ends `failed`, and its alert is signed too.
    let at = common::whole_second_after(Duration::from_secs(1));
    let body = r#"{"invoice": 42, "note": "ünïcode"}"#;
    for (ns, name, path) in [
        ("billing", "signed", "fail-once"),
        ("billing", "doomed", "missing"),
        ("web", "signed", "plain"),
    ] {
        server
            .put_job(
                ns,
                name,
                json!({"schedule": {"at": at.to_string()},
                       "target": {"type": "http", "url": receiver.url(path), "body": body},
                       "retry": {"max_attempts": 3, "initial_interval": "1s"}}),
            )
            .await;
    }
    let deliveries = server
        .wait_for(Duration::from_secs(30), async || {
            let signed = receiver.for_path("fail-once");
            let plain = receiver.for_path("plain");
            let alert = receiver.for_path("alert");
            (signed.len() >= 2 && !plain.is_empty() && !alert.is_empty())
                .then_some((signed, plain, alert))
        })
        .await;
    let shape = |d: &common::Delivery| {
        json!({"body": d.body,
               "headers": d.headers.iter().map(|(k, v)| (k.clone(), Value::from(v.clone())))
                   .collect::<serde_json::Map<_, _>>()})
    };
    let (signed, plain, alert) = deliveries;
    let cases = json!({
        "old": old, "new": new, "other": other, "public_key": public_key,
        "signed": signed.iter().map(shape).collect::<Vec<_>>(),
        "unsigned": shape(&plain[0]),
        "alert": shape(&alert[0]),
    });
    let cases_path = dir.path().join("cases.json");
    std::fs::write(&cases_path, cases.to_string()).unwrap();
    let cases_arg = cases_path.display().to_string();
    verifier("python3", &["verify.py", &cases_arg]);
    verifier("python3", &["verify.py", &cases_arg, "stale"]);
    verifier("node", &["verify.mjs", &cases_arg]);
    verifier("node", &["verify.mjs", &cases_arg, "stale"]);

    // No secret in the server's log.
    let log = server.log();
    for secret in [&old, &new] {
        assert!(!log.contains(&secret[6..]), "the log holds a key");
    }
}

#[test]
fn a_bad_signing_key_stops_the_server_naming_the_setting() {
    let dir = tempfile::tempdir().unwrap();
    let short = dir.path().join("short.key");
    std::fs::write(&short, "whsec_c2hvcnRzZWNyZXQ=").unwrap();
    let cases = [
        (
            format!(
                "[[signing_keys]]\nid = \"k\"\nnamespaces = [\"*\"]\nsecret_file = \"{}\"\n",
                short.display()
            ),
            "signing_keys[0].secret_file",
        ),
        (
            "[[signing_keys]]\nid = \"k\"\nnamespaces = [\"*\"]\nsecret_file = \"/nonexistent/key\"\n"
                .to_owned(),
            "signing_keys[0].secret_file: cannot read /nonexistent/key",
        ),
        (
            "[[signing_keys]]\nid = \"k\"\nsecret_file = \"/nonexistent/key\"\n".to_owned(),
            "signing_keys[0].namespaces: missing",
        ),
        (
            "[[signing_keys]]\nid = \"k\"\nnamespaces = [\"*\"]\nsecret = \"whsec_x\"\n"
                .to_owned(),
            "unknown field `secret`",
        ),
    ];
    for (config, want) in cases {
        let (ok, stderr) = common::server_with(&config, "worker");
        assert!(!ok, "started with {config}");
        assert!(stderr.contains(want), "{want}: {stderr}");
        assert!(
            !stderr.contains("c2hvcnRzZWNyZXQ"),
            "{stderr} quotes the key"
        );
    }
}
