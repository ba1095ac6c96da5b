//! Helpers shared by the target integration tests: deliveries and unique names.

#![allow(dead_code)]

use std::sync::atomic::{AtomicU32, Ordering};

use jiff::Timestamp;
use sundial_core::job::TargetSpec;
use sundial_target::Delivery;

/// A name unique to this test process and call: `<prefix>-<pid>-<nanos>-<n>`, usable as a
/// stream, queue, subject token or container name.
pub fn unique(prefix: &str) -> String {
    static N: AtomicU32 = AtomicU32::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    format!(
        "{prefix}-{}-{nanos}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}

/// A fresh execution id (UUID-shaped, unique per call).
pub fn execution_id() -> String {
    static N: AtomicU32 = AtomicU32::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    format!(
        "0193a5c4-{:04x}-7{:03x}-8000-{:012x}",
        std::process::id() & 0xffff,
        N.fetch_add(1, Ordering::Relaxed) & 0xfff,
        nanos & 0xffff_ffff_ffff
    )
}

/// The slot every test delivery carries.
pub const SCHEDULED_AT: &str = "2026-12-01T02:00:00Z";

/// A delivery of attempt `attempt` of `execution_id`.
pub fn delivery<'a>(execution_id: &'a str, attempt: u32, target: &'a TargetSpec) -> Delivery<'a> {
    Delivery {
        execution_id,
        namespace: "default",
        attempt,
        lease_until: None,
        signature: None,
        scheduled_at: SCHEDULED_AT.parse::<Timestamp>().unwrap(),
        now: Timestamp::UNIX_EPOCH,
        target,
        keep_output: false,
    }
}

/// `SUNDIAL_TEST_<NAME>_URL`, or the machine's default.
pub fn url(name: &str, default: &str) -> String {
    std::env::var(format!("SUNDIAL_TEST_{name}_URL")).unwrap_or_else(|_| default.to_owned())
}

/// The HMAC key the signed tests use (`whsec_` and 32 bytes of 5), and a signer giving it to
/// the namespace `billing`.
pub fn signer() -> (sundial_target::signing::Signer, String) {
    use sundial_target::signing::{NamespacedKey, Signer, SigningKey};
    let secret = "whsec_BQUFBQUFBQUFBQUFBQUFBQUFBQUFBQUFBQUFBQUFBQU=".to_owned();
    let key = SigningKey::parse("test", &secret).unwrap();
    let signer = Signer::new(vec![NamespacedKey {
        namespaces: vec!["billing".into()],
        key,
    }]);
    (signer, secret)
}

/// A delivery of `billing` started now, with a lease until a minute from now: what a signed
/// attempt carries.
pub fn signed_delivery<'a>(execution_id: &'a str, target: &'a TargetSpec) -> Delivery<'a> {
    let now = Timestamp::now();
    Delivery {
        namespace: "billing",
        now,
        lease_until: Some(now + jiff::SignedDuration::from_secs(60)),
        ..delivery(execution_id, 2, target)
    }
}

/// Verifies `body` under `headers` (`webhook-id`, `webhook-timestamp`, `webhook-signature`)
/// with `secret` by the Standard Webhooks library from PyPI, and the attempt's fence
/// (`sundial-signature` over `attempt.lease_until`) with the library's own `sign`.
///
/// # Panics
/// When either does not verify, or python3 or the library is missing (scripts/services.sh
/// installs it).
pub fn verify_with_standardwebhooks(secret: &str, body: &str, headers: &[(&str, String)]) {
    use std::io::Write as _;
    let script = r#"
import hmac, json, sys
from datetime import datetime, timezone
from standardwebhooks import Webhook
d = json.load(sys.stdin)
h = d["headers"]
wh = Webhook(d["secret"])
wh.verify(d["body"], h)
at = datetime.fromtimestamp(int(h["webhook-timestamp"]), tz=timezone.utc)
expected = wh.sign(h["webhook-id"], at, h["sundial-attempt"] + "." + h["sundial-lease-until"])
assert any(hmac.compare_digest(expected, s) for s in h["sundial-signature"].split(" ")), "fence"
print("verified")
"#;
    let headers: serde_json::Map<String, serde_json::Value> = headers
        .iter()
        .map(|(k, v)| ((*k).to_owned(), serde_json::Value::from(v.clone())))
        .collect();
    let input = serde_json::json!({"secret": secret, "body": body, "headers": headers});
    let mut child = std::process::Command::new("python3")
        .args(["-c", script])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("python3 runs");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(input.to_string().as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "standardwebhooks refused {input}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// [`sundial_target::Targets`] with one named connection `name` of `kind` at `url`, signing
/// with [`signer`].
pub async fn signed_targets(
    name: &str,
    kind: sundial_target::ConnectionKind,
    url: &str,
) -> sundial_target::Targets {
    let endpoints = std::collections::BTreeMap::from([(
        name.to_owned(),
        sundial_target::Endpoint {
            kind,
            url: url.to_owned(),
        },
    )]);
    sundial_target::Targets::connect(
        &endpoints,
        sundial_target::HttpOptions::default(),
        sundial_target::DEFAULT_CONNECT_TIMEOUT,
    )
    .await
    .expect("the broker is up")
    .with_signer(signer().0)
}
