//! Signed deliveries (docs/security.md, "Signed deliveries"): the Standard Webhooks scheme
//! (standardwebhooks.com), so that a receiver verifies a delivery with that project's libraries.
//!
//! A namespace with signing keys adds to each delivery:
//! - `webhook-id`: the execution id (the same on every attempt);
//! - `webhook-timestamp`: the attempt's start, Unix seconds (UTC);
//! - `webhook-signature`: one `v1,<base64>` (HMAC-SHA256) or `v1a,<base64>` (Ed25519) per key
//!   of the namespace, space-separated, each over `"{id}.{timestamp}.{body}"`;
//! - `sundial-lease-until`: the attempt's lease end, RFC 3339 with milliseconds (UTC), and
//!   `sundial-signature`, the same scheme over `"{id}.{timestamp}.{attempt}.{lease_until}"`,
//!   so that a receiver can refuse an attempt that is no longer current (`sundial-attempt`
//!   lower than one it saw, or its lease past).
//!
//! Invariants:
//! - Keys come from files only (`secret_file`); their secret halves never leave this module:
//!   [`SigningKey`]'s `Debug` shows the id and the algorithm, [`SigningKey::public_key`] only
//!   an Ed25519 key's public half.
//! - Every signature is made by a vetted crate (`hmac` with `sha2`, `ed25519-dalek`); nothing
//!   here is hand-rolled cryptography.
//! - A delivery of a namespace without keys carries none of these headers; with keys, every
//!   key of the namespace signs it, in the order of the configuration (a rotation is two keys
//!   at once, and a receiver holding either verifies).

use std::fmt;
use std::sync::Arc;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use ed25519_dalek::Signer as _;
use hmac::{Hmac, Mac};
use jiff::Timestamp;
use sha2::Sha256;
use sundial_core::job::TargetSpec;

/// The prefix of an HMAC-SHA256 secret (Standard Webhooks' symmetric scheme).
pub const HMAC_PREFIX: &str = "whsec_";
/// The prefix of an Ed25519 secret key (Standard Webhooks' asymmetric scheme).
pub const ED25519_SECRET_PREFIX: &str = "whsk_";
/// The prefix of an Ed25519 public key.
pub const ED25519_PUBLIC_PREFIX: &str = "whpk_";

/// The shortest HMAC secret the Standard Webhooks specification allows, in bytes.
pub const HMAC_MIN_BYTES: usize = 24;
/// The longest HMAC secret the Standard Webhooks specification allows, in bytes.
pub const HMAC_MAX_BYTES: usize = 64;

/// One signing key: its id (`[[signing_keys]] id`) and its secret.
#[derive(Clone)]
pub struct SigningKey {
    id: String,
    secret: Secret,
}

#[derive(Clone)]
enum Secret {
    Hmac(Vec<u8>),
    Ed25519(Box<ed25519_dalek::SigningKey>),
}

impl fmt::Debug for SigningKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SigningKey")
            .field("id", &self.id)
            .field("algorithm", &self.algorithm())
            .finish_non_exhaustive()
    }
}

impl SigningKey {
    /// Reads a key file's text (surrounding whitespace ignored): `whsec_<base64>`, an HMAC
    /// secret of [`HMAC_MIN_BYTES`] to [`HMAC_MAX_BYTES`] bytes, or `whsk_<base64>`, an
    /// Ed25519 secret key of 32 bytes (the seed) or 64 (the seed, then its public half).
    ///
    /// # Errors
    /// A message saying what is wrong with the text, never quoting it: an unknown prefix,
    /// base64 that does not decode, a wrong length, a 64-byte key whose second half is not the
    /// first's public key.
    pub fn parse(id: &str, text: &str) -> Result<Self, String> {
        let text = text.trim();
        // The decoder's error names a character of the key and its place: not shown.
        let decode = |b64: &str| {
            BASE64
                .decode(b64)
                .map_err(|_| "the key is not standard base64 after its prefix".to_owned())
        };
        let secret = if let Some(b64) = text.strip_prefix(HMAC_PREFIX) {
            let bytes = decode(b64)?;
            if !(HMAC_MIN_BYTES..=HMAC_MAX_BYTES).contains(&bytes.len()) {
                return Err(format!(
                    "an HMAC secret ({HMAC_PREFIX}) must be {HMAC_MIN_BYTES} to {HMAC_MAX_BYTES} bytes, this one is {}",
                    bytes.len()
                ));
            }
            Secret::Hmac(bytes)
        } else if let Some(b64) = text.strip_prefix(ED25519_SECRET_PREFIX) {
            let bytes = decode(b64)?;
            let seed: [u8; 32] = bytes
                .get(..32)
                .and_then(|s| s.try_into().ok())
                .filter(|_| bytes.len() == 32 || bytes.len() == 64)
                .ok_or_else(|| {
                    format!(
                        "an Ed25519 secret key ({ED25519_SECRET_PREFIX}) must be 32 or 64 bytes, this one is {}",
                        bytes.len()
                    )
                })?;
            let key = ed25519_dalek::SigningKey::from_bytes(&seed);
            if bytes.len() == 64 && bytes[32..] != key.verifying_key().to_bytes() {
                return Err(
                    "the 64-byte Ed25519 key's second half is not the public key of its first"
                        .into(),
                );
            }
            Secret::Ed25519(Box::new(key))
        } else {
            return Err(format!(
                "a key file holds {HMAC_PREFIX}<base64> (HMAC-SHA256) or {ED25519_SECRET_PREFIX}<base64> (Ed25519)"
            ));
        };
        Ok(SigningKey {
            id: id.to_owned(),
            secret,
        })
    }

    /// A new random key of `algorithm` (`hmac-sha256`: 32 bytes; `ed25519`), as the text of
    /// its key file: `whsec_...` or `whsk_...` (the 32-byte seed).
    ///
    /// # Errors
    /// An algorithm other than the two.
    pub fn generate(algorithm: &str) -> Result<String, String> {
        use rand::RngCore as _;
        let mut bytes = [0u8; 32];
        rand::rng().fill_bytes(&mut bytes);
        match algorithm {
            "hmac-sha256" => Ok(format!("{HMAC_PREFIX}{}", BASE64.encode(bytes))),
            "ed25519" => Ok(format!("{ED25519_SECRET_PREFIX}{}", BASE64.encode(bytes))),
            other => Err(format!("'{other}' is not one of hmac-sha256, ed25519")),
        }
    }

    /// The key's id.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// `hmac-sha256` or `ed25519`.
    pub fn algorithm(&self) -> &'static str {
        match self.secret {
            Secret::Hmac(_) => "hmac-sha256",
            Secret::Ed25519(_) => "ed25519",
        }
    }

    /// An Ed25519 key's public half, `whpk_<base64 of 32 bytes>`; `None` for an HMAC key,
    /// whose only half is secret.
    pub fn public_key(&self) -> Option<String> {
        match &self.secret {
            Secret::Hmac(_) => None,
            Secret::Ed25519(key) => Some(format!(
                "{ED25519_PUBLIC_PREFIX}{}",
                BASE64.encode(key.verifying_key().to_bytes())
            )),
        }
    }

    /// `v1,<base64 HMAC-SHA256 of message>` or `v1a,<base64 Ed25519 signature of message>`.
    pub fn sign(&self, message: &[u8]) -> String {
        match &self.secret {
            Secret::Hmac(secret) => {
                // HMAC takes a key of any length: new_from_slice cannot fail for it.
                let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(secret)
                    .unwrap_or_else(|_| unreachable!("HMAC accepts keys of every length"));
                mac.update(message);
                format!("v1,{}", BASE64.encode(mac.finalize().into_bytes()))
            }
            Secret::Ed25519(key) => {
                format!("v1a,{}", BASE64.encode(key.sign(message).to_bytes()))
            }
        }
    }
}

/// A key and the namespaces it signs (`["*"]`: every namespace).
#[derive(Debug, Clone)]
pub struct NamespacedKey {
    /// Namespace names, or `*` for all.
    pub namespaces: Vec<String>,
    /// The key.
    pub key: SigningKey,
}

impl NamespacedKey {
    fn covers(&self, namespace: &str) -> bool {
        self.namespaces.iter().any(|n| n == "*" || n == namespace)
    }
}

/// Every configured signing key (`[[signing_keys]]`, docs/configuration.md), shared by a
/// process's targets, alerts and API. Empty: nothing is signed.
#[derive(Debug, Clone, Default)]
pub struct Signer {
    keys: Arc<Vec<NamespacedKey>>,
}

/// The signature headers of one delivery, as [`Signer::sign`] makes them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Signature {
    /// `webhook-id`: the execution id.
    pub id: String,
    /// `webhook-timestamp`: the attempt's start, Unix seconds.
    pub timestamp: i64,
    /// `webhook-signature`: one signature per key, space-separated.
    pub signature: String,
    /// `sundial-lease-until` and `sundial-signature`, when the delivery has a lease.
    pub attempt: Option<AttemptSignature>,
}

/// The signed fence of an attempt: `sundial-lease-until` and `sundial-signature`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AttemptSignature {
    /// RFC 3339 with milliseconds, UTC.
    pub lease_until: String,
    /// One signature per key over `"{id}.{timestamp}.{attempt}.{lease_until}"`.
    pub signature: String,
}

impl Signature {
    /// The headers, lower-case names first: `webhook-id`, `webhook-timestamp`,
    /// `webhook-signature`, then `sundial-lease-until` and `sundial-signature` when signed.
    pub fn headers(&self) -> Vec<(&'static str, String)> {
        let mut headers = vec![
            ("webhook-id", self.id.clone()),
            ("webhook-timestamp", self.timestamp.to_string()),
            ("webhook-signature", self.signature.clone()),
        ];
        if let Some(a) = &self.attempt {
            headers.push(("sundial-lease-until", a.lease_until.clone()));
            headers.push(("sundial-signature", a.signature.clone()));
        }
        headers
    }
}

impl Signer {
    /// A signer over `keys`, in their order.
    pub fn new(keys: Vec<NamespacedKey>) -> Self {
        Signer {
            keys: Arc::new(keys),
        }
    }

    /// True when no key is configured.
    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    /// The keys that sign `namespace`'s deliveries, in the configuration's order.
    pub fn keys_for<'a>(&'a self, namespace: &'a str) -> impl Iterator<Item = &'a SigningKey> {
        self.keys
            .iter()
            .filter(move |k| k.covers(namespace))
            .map(|k| &k.key)
    }

    /// Every key's id, algorithm and namespaces, in the configuration's order.
    pub fn all(&self) -> impl Iterator<Item = &NamespacedKey> {
        self.keys.iter()
    }

    /// Signs one delivery of `namespace`: execution `id`, the attempt's start `started` (its
    /// whole seconds are the timestamp), the exact `body` sent, and, when the attempt has a
    /// lease, its number and lease end. `None` when no key covers the namespace.
    pub fn sign(
        &self,
        namespace: &str,
        id: &str,
        started: Timestamp,
        body: &[u8],
        attempt: Option<(u32, Timestamp)>,
    ) -> Option<Signature> {
        let keys: Vec<&SigningKey> = self.keys_for(namespace).collect();
        if keys.is_empty() {
            return None;
        }
        let timestamp = started.as_second();
        let mut message = Vec::with_capacity(id.len() + body.len() + 24);
        message.extend_from_slice(id.as_bytes());
        message.push(b'.');
        message.extend_from_slice(timestamp.to_string().as_bytes());
        message.push(b'.');
        message.extend_from_slice(body);
        let signature = sign_all(&keys, &message);
        let attempt = attempt.map(|(number, lease_until)| {
            let lease_until = format!("{lease_until:.3}");
            let fence = format!("{id}.{timestamp}.{number}.{lease_until}");
            AttemptSignature {
                signature: sign_all(&keys, fence.as_bytes()),
                lease_until,
            }
        });
        Some(Signature {
            id: id.to_owned(),
            timestamp,
            signature,
            attempt,
        })
    }
}

fn sign_all(keys: &[&SigningKey], message: &[u8]) -> String {
    keys.iter()
        .map(|k| k.sign(message))
        .collect::<Vec<_>>()
        .join(" ")
}

/// The bytes a delivery's `webhook-signature` covers, per target type: an HTTP request's body
/// (empty without one), a NATS or AMQP message's payload, a Redis entry's fields as one JSON
/// object (names sorted, no spaces: `{"a":"1","b":"2"}`), without the fields Sundial adds
/// (`execution_id`, `traceparent`, `sundial-attempt` and the signature's). `None` for a container, which is not signed.
pub fn signed_body(target: &TargetSpec) -> Option<Vec<u8>> {
    match target {
        TargetSpec::Http(t) => Some(t.body.clone().unwrap_or_default().into_bytes()),
        TargetSpec::Nats(t) => Some(t.payload.clone().into_bytes()),
        TargetSpec::Amqp(t) => Some(t.payload.clone().into_bytes()),
        TargetSpec::Redis(t) => {
            let sent: std::collections::BTreeMap<_, _> =
                crate::redis::sent_fields(&t.fields).collect();
            serde_json::to_vec(&sent).ok()
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hmac_key(id: &str) -> SigningKey {
        // The Standard Webhooks specification's own test vector secret.
        SigningKey::parse(id, "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw").unwrap()
    }

    #[test]
    fn the_hmac_signature_matches_the_standard_webhooks_test_vector() {
        // The vector of the Standard Webhooks libraries' own tests.
        let signer = Signer::new(vec![NamespacedKey {
            namespaces: vec!["*".into()],
            key: hmac_key("k"),
        }]);
        let at = Timestamp::from_second(1_614_265_330).unwrap();
        let s = signer
            .sign(
                "ns",
                "msg_p5jXN8AQM9LWM0D4loKWxJek",
                at,
                br#"{"test": 2432232314}"#,
                None,
            )
            .unwrap();
        assert_eq!(
            s.signature,
            "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
        );
        assert_eq!(s.timestamp, 1_614_265_330);
    }

    #[test]
    fn a_signature_per_key_space_separated() {
        let secret = format!("{HMAC_PREFIX}{}", BASE64.encode([7u8; 32]));
        let ed = SigningKey::parse(
            "b",
            &format!("{ED25519_SECRET_PREFIX}{}", BASE64.encode([9u8; 32])),
        )
        .unwrap();
        let signer = Signer::new(vec![
            NamespacedKey {
                namespaces: vec!["billing".into()],
                key: SigningKey::parse("a", &secret).unwrap(),
            },
            NamespacedKey {
                namespaces: vec!["*".into()],
                key: ed.clone(),
            },
        ]);
        let started = Timestamp::from_second(1_700_000_000).unwrap();
        let s = signer
            .sign("billing", "exec-1", started, b"{}", Some((2, started)))
            .unwrap();
        let parts: Vec<&str> = s.signature.split(' ').collect();
        assert_eq!(parts.len(), 2);
        assert!(
            parts[0].starts_with("v1,") && parts[1].starts_with("v1a,"),
            "{parts:?}"
        );
        let a = s.attempt.unwrap();
        assert_eq!(a.lease_until, "2023-11-14T22:13:20.000Z");
        assert_eq!(a.signature.split(' ').count(), 2);
        // Another namespace: the wildcard key alone.
        let other = signer.sign("web", "exec-1", started, b"{}", None).unwrap();
        assert!(other.signature.starts_with("v1a,") && !other.signature.contains(' '));
        assert!(other.attempt.is_none());
        assert!(ed.public_key().unwrap().starts_with(ED25519_PUBLIC_PREFIX));
        // No key for a namespace when none covers it.
        let only = Signer::new(vec![NamespacedKey {
            namespaces: vec!["billing".into()],
            key: hmac_key_ok(),
        }]);
        assert!(only.sign("web", "x", started, b"", None).is_none());
    }

    fn hmac_key_ok() -> SigningKey {
        SigningKey::parse("ok", &format!("{HMAC_PREFIX}{}", BASE64.encode([1u8; 24]))).unwrap()
    }

    #[test]
    fn bad_key_files_are_named_without_their_text() {
        for (text, want) in [
            ("secret", "holds whsec_"),
            ("whsec_!!!", "not standard base64"),
            ("whsec_AAAA", "24 to 64 bytes"),
            ("whsk_AAAA", "32 or 64 bytes"),
        ] {
            let e = SigningKey::parse("k", text).unwrap_err();
            assert!(e.contains(want), "{text}: {e}");
            assert!(!e.contains(text), "{e} quotes the key");
        }
        let mut pair = vec![3u8; 32];
        pair.extend([0u8; 32]);
        let e = SigningKey::parse("k", &format!("whsk_{}", BASE64.encode(&pair))).unwrap_err();
        assert!(e.contains("second half"), "{e}");
    }

    #[test]
    fn generated_keys_parse_and_debug_hides_the_secret() {
        for algorithm in ["hmac-sha256", "ed25519"] {
            let text = SigningKey::generate(algorithm).unwrap();
            let key = SigningKey::parse("g", &text).unwrap();
            assert_eq!(key.algorithm(), algorithm);
            let shown = format!("{key:?}");
            assert!(!shown.contains(&text[6..]), "{shown}");
        }
        assert!(SigningKey::generate("rsa").is_err());
    }
}
