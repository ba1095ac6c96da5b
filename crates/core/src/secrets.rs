//! Secrets (docs/security.md, "Secrets"): values a namespace keeps encrypted at rest and that
//! targets reference as `{{ secret.NAME }}`, rendered only by the worker when an attempt is
//! sent.
//!
//! Invariants:
//! - A value is sealed with AES-256-GCM ([`SecretsKey`], the `aes-gcm` crate; nothing here is
//!   hand-rolled cryptography) under a fresh random 96-bit nonce, its namespace and name bound
//!   as associated data, so a sealed value moved to another secret does not open.
//! - [`render_target`] inserts only the secrets the authored target names (`allowed`): a
//!   `{{ secret.NAME }}` that reached a target's text any other way (an upstream's output
//!   inserted by a workflow template) stays as it is, so no value can be pulled into a
//!   delivery by data.
//! - Errors name the field and the secret, never a value; [`SecretsKey`]'s `Debug` shows
//!   nothing of the key.

use std::collections::{BTreeMap, BTreeSet};

use aes_gcm::aead::{Aead, KeyInit, OsRng, Payload, rand_core::RngCore};
use aes_gcm::{Aes256Gcm, Nonce};
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, utf8_percent_encode};

use crate::job::TargetSpec;
use crate::workflow::template::{Place, map_target_strings, target_strings};

/// The largest secret value, in bytes (64 KiB).
pub const MAX_VALUE_BYTES: usize = 64 * 1024;

/// The length of a [`SecretsKey`], in bytes (AES-256).
pub const KEY_BYTES: usize = 32;

/// The length of a sealed value's nonce, in bytes.
pub const NONCE_BYTES: usize = 12;

/// What a URL keeps unescaped when a secret is inserted into it (RFC 3986 unreserved).
const URL_ESCAPED: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

/// The key that seals and opens secret values.
#[derive(Clone)]
pub struct SecretsKey(Aes256Gcm);

impl std::fmt::Debug for SecretsKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SecretsKey(..)")
    }
}

/// A value that would not open: the key is not the one it was sealed with, or the stored
/// bytes were changed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "the stored value of secret '{name}' does not open with this secrets key (another key, or changed bytes)"
)]
pub struct OpenError {
    /// The secret's name.
    pub name: String,
}

impl SecretsKey {
    /// Reads a key file's text: the standard base64 (RFC 4648) of 32 bytes, surrounding
    /// whitespace ignored.
    ///
    /// # Errors
    /// A message that never quotes the text: not base64, or not 32 bytes.
    pub fn parse(text: &str) -> Result<Self, String> {
        // The decoder's error names a character of the key and its place: not shown.
        let bytes = BASE64
            .decode(text.trim())
            .map_err(|_| "the key is not standard base64".to_owned())?;
        if bytes.len() != KEY_BYTES {
            return Err(format!(
                "the key must be {KEY_BYTES} bytes, this one is {}",
                bytes.len()
            ));
        }
        Aes256Gcm::new_from_slice(&bytes)
            .map(SecretsKey)
            .map_err(|_| format!("the key must be {KEY_BYTES} bytes"))
    }

    /// A new random key as a key file's text (base64 and a new line).
    pub fn generate() -> String {
        let mut bytes = [0u8; KEY_BYTES];
        OsRng.fill_bytes(&mut bytes);
        format!("{}\n", BASE64.encode(bytes))
    }

    /// Seals `value` of secret `namespace`/`name`: (nonce, ciphertext with its tag).
    pub fn seal(&self, namespace: &str, name: &str, value: &str) -> (Vec<u8>, Vec<u8>) {
        let mut nonce = [0u8; NONCE_BYTES];
        OsRng.fill_bytes(&mut nonce);
        let aad = associated_data(namespace, name);
        let sealed = self
            .0
            .encrypt(
                Nonce::from_slice(&nonce),
                Payload {
                    msg: value.as_bytes(),
                    aad: &aad,
                },
            )
            // Encryption fails only for a message over about 64 GiB.
            .unwrap_or_default();
        (nonce.to_vec(), sealed)
    }

    /// Opens a value sealed by [`SecretsKey::seal`] for `namespace`/`name`.
    ///
    /// # Errors
    /// [`OpenError`] when the key, the nonce, the bytes or the secret's name differ from
    /// the seal's, or the value is not UTF-8.
    pub fn open(
        &self,
        namespace: &str,
        name: &str,
        nonce: &[u8],
        ciphertext: &[u8],
    ) -> Result<String, OpenError> {
        let err = || OpenError {
            name: name.to_owned(),
        };
        if nonce.len() != NONCE_BYTES {
            return Err(err());
        }
        let aad = associated_data(namespace, name);
        let plain = self
            .0
            .decrypt(
                Nonce::from_slice(nonce),
                Payload {
                    msg: ciphertext,
                    aad: &aad,
                },
            )
            .map_err(|_| err())?;
        String::from_utf8(plain).map_err(|_| err())
    }
}

fn associated_data(namespace: &str, name: &str) -> Vec<u8> {
    format!("sundial-secret:{namespace}/{name}").into_bytes()
}

/// One `{{ secret.NAME }}` in a text: its byte range and the name.
fn references(text: &str) -> Vec<(std::ops::Range<usize>, &str)> {
    let mut out = Vec::new();
    let mut from = 0;
    while let Some(open) = text[from..].find("{{").map(|i| i + from) {
        let Some(close) = text[open + 2..].find("}}").map(|i| i + open + 2) else {
            break;
        };
        let inner = text[open + 2..close].trim();
        if let Some(name) = inner.strip_prefix("secret.")
            && !name.is_empty()
            && name
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"._-".contains(&b))
        {
            out.push((open..close + 2, name));
        }
        from = close + 2;
    }
    out
}

/// The names of the secrets `text` references as `{{ secret.NAME }}` (any text: a target's
/// string, or a stored spec's JSON).
pub fn names_in(text: &str) -> BTreeSet<String> {
    references(text)
        .into_iter()
        .map(|(_, n)| n.to_owned())
        .collect()
}

/// The secrets a target references, each with the first field (as
/// [`crate::validate`] names target fields) that does, by name.
pub fn target_references(target: &TargetSpec) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for (field, text, _) in target_strings(target) {
        for name in names_in(text) {
            out.entry(name).or_insert_with(|| field.clone());
        }
    }
    out
}

/// Why a target could not be rendered at send time; never holds a value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RenderError {
    /// The secret does not exist (deleted since the job was written).
    #[error("{field}: secret '{name}' does not exist in this namespace")]
    Missing {
        /// Where it is referenced.
        field: String,
        /// The secret.
        name: String,
    },
    /// A header or other one-line field would hold a line break or NUL.
    #[error("{field}: secret '{name}' holds a line break or NUL, which this field cannot carry")]
    NotALine {
        /// Where it is referenced.
        field: String,
        /// The secret.
        name: String,
    },
}

/// The target with each `{{ secret.NAME }}` of the names in `allowed` replaced by its value
/// in `values` (percent-encoded in a URL, as it is elsewhere); references to other names
/// are left as they are.
///
/// # Errors
/// [`RenderError::Missing`] for an allowed name without a value; [`RenderError::NotALine`]
/// for a value with CR, LF or NUL in a header, subject, routing key or other one-line field.
pub fn render_target(
    target: &TargetSpec,
    allowed: &[String],
    values: &BTreeMap<String, String>,
) -> Result<TargetSpec, RenderError> {
    let mut rendered: BTreeMap<String, String> = BTreeMap::new();
    for (field, text, place) in target_strings(target) {
        let refs: Vec<_> = references(text)
            .into_iter()
            .filter(|(_, n)| allowed.iter().any(|a| a == n))
            .collect();
        if refs.is_empty() {
            continue;
        }
        let mut out = String::with_capacity(text.len());
        let mut at = 0;
        for (range, name) in refs {
            out.push_str(&text[at..range.start]);
            let value = values.get(name).ok_or_else(|| RenderError::Missing {
                field: field.clone(),
                name: name.to_owned(),
            })?;
            match place {
                Place::Url => out.extend(utf8_percent_encode(value, URL_ESCAPED)),
                Place::Line if value.contains(['\r', '\n', '\0']) => {
                    return Err(RenderError::NotALine {
                        field: field.clone(),
                        name: name.to_owned(),
                    });
                }
                Place::Line | Place::Text => out.push_str(value),
            }
            at = range.end;
        }
        out.push_str(&text[at..]);
        rendered.insert(field, out);
    }
    if rendered.is_empty() {
        return Ok(target.clone());
    }
    Ok(map_target_strings(target, |field, text| {
        rendered.remove(field).unwrap_or_else(|| text.to_owned())
    }))
}

/// The shortest value [`scrub`] hides, in bytes (4): a shorter one would garble the text it
/// appears in by chance more than it hides.
pub const SCRUB_MIN_BYTES: usize = 4;

/// Every occurrence of each value of `values` (of at least [`SCRUB_MIN_BYTES`]) in `text`
/// replaced by `***`, as written and percent-encoded: for messages that may quote what was
/// sent (an error naming the URL it could not reach).
pub fn scrub(text: &str, values: &BTreeMap<String, String>) -> String {
    let mut out = text.to_owned();
    for value in values.values().filter(|v| v.len() >= SCRUB_MIN_BYTES) {
        if out.contains(value.as_str()) {
            out = out.replace(value.as_str(), "***");
        }
        let encoded: String = utf8_percent_encode(value, URL_ESCAPED).collect();
        if encoded != *value && out.contains(encoded.as_str()) {
            out = out.replace(encoded.as_str(), "***");
        }
    }
    out
}

/// Header names whose values are credentials: `authorization`, `proxy-authorization`
/// (RFC 9110 §11.6.2, §11.7.2), `cookie` (RFC 6265) and `x-api-key`; compared without case.
pub const CREDENTIAL_HEADERS: [&str; 4] = [
    "authorization",
    "proxy-authorization",
    "cookie",
    "x-api-key",
];

/// What a plain-text credential shows as.
pub const MASK: &str = "***";

/// Whether `text` is a credential written in plain text: not empty, not the mask, and holding
/// no secret reference.
fn plain(text: &str) -> bool {
    !text.is_empty() && text != MASK && references(text).is_empty()
}

/// The byte range of a URL's password (`scheme://user:PASSWORD@host...`), if it has one.
fn url_password(url: &str) -> Option<std::ops::Range<usize>> {
    let start = url.find("://")? + 3;
    let authority_end = url[start..]
        .find(['/', '?', '#'])
        .map_or(url.len(), |i| start + i);
    let at = url[start..authority_end].rfind('@')? + start;
    let colon = url[start..at].find(':')? + start;
    Some(colon + 1..at)
}

/// The fields of `target` that hold a credential in plain text (docs/security.md, "Plain-text
/// credentials"): a header (HTTP, NATS) or AMQP property of [`CREDENTIAL_HEADERS`], or the
/// URL's password, whose value holds no `{{ secret.NAME }}`; fields named as
/// [`crate::validate`] names them (`target.headers.authorization`, `target.url`).
pub fn plain_credentials(target: &TargetSpec) -> Vec<String> {
    let mut out = Vec::new();
    let headers = |prefix: &str, m: &BTreeMap<String, String>, out: &mut Vec<String>| {
        for (k, v) in m {
            if CREDENTIAL_HEADERS.contains(&k.to_ascii_lowercase().as_str()) && plain(v) {
                out.push(format!("{prefix}.{k}"));
            }
        }
    };
    match target {
        TargetSpec::Http(t) => {
            if url_password(&t.url).is_some_and(|r| plain(&t.url[r])) {
                out.push("target.url".into());
            }
            headers("target.headers", &t.headers, &mut out);
        }
        TargetSpec::Nats(t) => headers("target.headers", &t.headers, &mut out),
        TargetSpec::Amqp(t) => headers("target.properties", &t.properties, &mut out),
        _ => {}
    }
    out
}

/// The values of `target`'s plain-text credentials ([`plain_credentials`]) by field: a
/// header's whole value, a URL's password (as written, percent-encoded or not). For
/// [`scrub`], so that an error quoting what was sent shows none of them.
pub fn credential_values(target: &TargetSpec) -> BTreeMap<String, String> {
    let fields = plain_credentials(target);
    if fields.is_empty() {
        return BTreeMap::new();
    }
    target_strings(target)
        .into_iter()
        .filter(|(field, _, _)| fields.contains(field))
        .map(|(field, text, _)| {
            let value = match url_password(text) {
                Some(r) if field == "target.url" => text[r].to_owned(),
                _ => text.to_owned(),
            };
            (field, value)
        })
        .collect()
}

/// `target` as answers and pages show it: each plain-text credential
/// ([`plain_credentials`]) replaced by [`MASK`] (a URL's password alone).
pub fn mask_target(target: &TargetSpec) -> TargetSpec {
    let fields = plain_credentials(target);
    if fields.is_empty() {
        return target.clone();
    }
    map_target_strings(target, |field, text| {
        if !fields.iter().any(|f| f == field) {
            return text.to_owned();
        }
        match (field, url_password(text)) {
            ("target.url", Some(r)) => format!("{}{MASK}{}", &text[..r.start], &text[r.end..]),
            _ => MASK.to_owned(),
        }
    })
}

/// The credential fields of `target` that read [`MASK`] (a header's whole value, a URL's
/// password): after [`unmask_target`] over the stored target, what a write asks to keep but
/// has nothing to keep (a new job written from a masked answer).
pub fn masked_fields(target: &TargetSpec) -> Vec<String> {
    target_strings(target)
        .into_iter()
        .filter(|(field, text, _)| {
            if field == "target.url" {
                return url_password(text).is_some_and(|r| &text[r] == MASK);
            }
            let name = field.rsplit('.').next().unwrap_or_default();
            *text == MASK
                && (field.starts_with("target.headers.") || field.starts_with("target.properties."))
                && CREDENTIAL_HEADERS.contains(&name.to_ascii_lowercase().as_str())
        })
        .map(|(field, _, _)| field)
        .collect()
}

/// The errors of [`masked_fields`], each field after `prefix`.
pub fn masked_errors(target: &TargetSpec, prefix: &str) -> Vec<crate::validate::FieldError> {
    masked_fields(target)
        .into_iter()
        .map(|field| {
            crate::validate::FieldError::new(
                format!("{prefix}{field}"),
                "is ***, the mask of a stored credential, and there is none here to keep; give the credential, or better a secret: {{ secret.NAME }}",
            )
        })
        .collect()
}

/// `new` with each credential field that reads [`MASK`] (a header's whole value, a URL's
/// password) given back the value `old` holds at that field: what a client that read a
/// masked answer and wrote it back meant to keep.
pub fn unmask_target(new: &TargetSpec, old: &TargetSpec) -> TargetSpec {
    let old_strings: BTreeMap<String, String> = target_strings(old)
        .into_iter()
        .map(|(f, t, _)| (f, t.to_owned()))
        .collect();
    map_target_strings(new, |field, text| {
        // A header's name is compared without case (`Authorization` is `authorization`).
        let Some(previous) = old_strings.get(field).or_else(|| {
            old_strings
                .iter()
                .find(|(f, _)| f.eq_ignore_ascii_case(field))
                .map(|(_, t)| t)
        }) else {
            return text.to_owned();
        };
        if field == "target.url" {
            return match (url_password(text), url_password(previous)) {
                (Some(r), Some(p)) if &text[r.clone()] == MASK => {
                    format!("{}{}{}", &text[..r.start], &previous[p], &text[r.end..])
                }
                _ => text.to_owned(),
            };
        }
        let name = field.rsplit('.').next().unwrap_or_default();
        if text == MASK && CREDENTIAL_HEADERS.contains(&name.to_ascii_lowercase().as_str()) {
            previous.clone()
        } else {
            text.to_owned()
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::job::HttpTarget;

    fn http(url: &str, header: &str, body: &str) -> TargetSpec {
        TargetSpec::Http(HttpTarget {
            method: "POST".into(),
            url: url.into(),
            headers: BTreeMap::from([("authorization".to_owned(), header.to_owned())]),
            body: Some(body.into()),
            success_codes: Vec::new(),
        })
    }

    #[test]
    fn a_sealed_value_opens_only_with_its_key_and_name() {
        let key = SecretsKey::parse(&SecretsKey::generate()).unwrap();
        let (nonce, sealed) = key.seal("billing", "token", "s3cr3t");
        assert!(!sealed.windows(6).any(|w| w == b"s3cr3t"));
        assert_eq!(
            key.open("billing", "token", &nonce, &sealed).unwrap(),
            "s3cr3t"
        );
        assert!(key.open("billing", "other", &nonce, &sealed).is_err());
        assert!(key.open("web", "token", &nonce, &sealed).is_err());
        let other = SecretsKey::parse(&SecretsKey::generate()).unwrap();
        assert!(other.open("billing", "token", &nonce, &sealed).is_err());
        let mut changed = sealed.clone();
        changed[0] ^= 1;
        assert!(key.open("billing", "token", &nonce, &changed).is_err());
        // Two seals of one value differ (fresh nonces).
        assert_ne!(key.seal("billing", "token", "s3cr3t").1, sealed);
        assert_eq!(format!("{key:?}"), "SecretsKey(..)");
    }

    #[test]
    fn bad_key_texts_are_refused_without_quoting_them() {
        for text in ["not base64!", "c2hvcnQ="] {
            let e = SecretsKey::parse(text).unwrap_err();
            assert!(!e.contains(text), "{e}");
        }
    }

    #[test]
    fn references_are_found_with_or_without_spaces() {
        let names = names_in(
            r#"{"u":"{{secret.a}}","h":"Bearer {{ secret.b-2 }}","x":"{{ run.id }}","y":"{{ secret.Bad }}"}"#,
        );
        assert_eq!(names, BTreeSet::from(["a".to_owned(), "b-2".to_owned()]));
        let refs = target_references(&http(
            "https://h/{{ secret.a }}",
            "Bearer {{ secret.b }}",
            "{{ secret.a }}",
        ));
        assert_eq!(refs["a"], "target.url");
        assert_eq!(refs["b"], "target.headers.authorization");
    }

    #[test]
    fn rendering_inserts_only_the_allowed_names() {
        let values = BTreeMap::from([
            ("a".to_owned(), "p@ss word".to_owned()),
            ("b".to_owned(), "tok".to_owned()),
        ]);
        let target = http(
            "https://h/x?k={{ secret.a }}",
            "Bearer {{ secret.b }}",
            "{{ secret.a }} {{ secret.c }}",
        );
        let allowed = ["a".to_owned(), "b".to_owned()];
        let TargetSpec::Http(out) = render_target(&target, &allowed, &values).unwrap() else {
            unreachable!()
        };
        assert_eq!(out.url, "https://h/x?k=p%40ss%20word");
        assert_eq!(out.headers["authorization"], "Bearer tok");
        // `c` was not authored: left as it is.
        assert_eq!(out.body.as_deref(), Some("p@ss word {{ secret.c }}"));
        let e = render_target(&target, &["a".into(), "b".into(), "c".into()], &values).unwrap_err();
        assert_eq!(
            e.to_string(),
            "target.body: secret 'c' does not exist in this namespace"
        );
        let lines = BTreeMap::from([("b".to_owned(), "x\r\nInjected: 1".to_owned())]);
        let e = render_target(&target, &["b".into()], &lines).unwrap_err();
        assert!(matches!(e, RenderError::NotALine { .. }), "{e}");
        assert!(!e.to_string().contains("Injected"));
    }

    #[test]
    fn plain_credentials_are_masked_and_kept_when_written_back_masked() {
        let target = http("https://bob:hunter2@h.example/x", "Bearer abc", "{}");
        assert_eq!(
            plain_credentials(&target),
            ["target.url", "target.headers.authorization"]
        );
        let TargetSpec::Http(masked) = mask_target(&target) else {
            unreachable!()
        };
        assert_eq!(masked.url, "https://bob:***@h.example/x");
        assert_eq!(masked.headers["authorization"], "***");
        // Written back as shown: the stored values are kept.
        let kept = unmask_target(&TargetSpec::Http(masked.clone()), &target);
        assert_eq!(kept, target);
        // A new value replaces the old; a secret reference is no plain credential.
        let referenced = http("https://h.example/x", "Bearer {{ secret.tok }}", "{}");
        assert!(plain_credentials(&referenced).is_empty());
        assert_eq!(mask_target(&referenced), referenced);
        assert_eq!(unmask_target(&referenced, &target), referenced);
        // A header written back in another case keeps its value too.
        let mut shouting = masked.clone();
        let mask = shouting.headers.remove("authorization").unwrap();
        shouting.headers.insert("AUTHORIZATION".into(), mask);
        let TargetSpec::Http(kept_upper) = unmask_target(&TargetSpec::Http(shouting), &target)
        else {
            unreachable!()
        };
        assert_eq!(kept_upper.headers["AUTHORIZATION"], "Bearer abc");
        // A mask with nothing stored to keep is named.
        assert_eq!(
            masked_fields(&TargetSpec::Http(masked.clone())),
            ["target.url", "target.headers.authorization"]
        );
        assert!(masked_fields(&kept).is_empty());
        // A URL without a password, or a `user@` alone, holds none.
        assert!(url_password("https://user@h/x").is_none());
        assert!(url_password("https://h/x?a=b:c@d").is_none());
    }

    #[test]
    fn scrub_hides_values_as_sent() {
        let values = BTreeMap::from([("a".to_owned(), "p@ss word".to_owned())]);
        assert_eq!(
            scrub(
                "GET https://h/?k=p%40ss%20word failed; body p@ss word",
                &values
            ),
            "GET https://h/?k=*** failed; body ***"
        );
    }
}
