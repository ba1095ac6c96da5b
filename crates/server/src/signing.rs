//! `[[signing_keys]]` (docs/configuration.md, "`[[signing_keys]]`"; docs/security.md, "Signed
//! deliveries"): the keys that sign a namespace's deliveries and alerts, each read from its
//! `secret_file`.
//!
//! Invariants: a server starts only with every entry whole (an id, its namespaces, a readable
//! key file holding a key of a known kind), each error naming `signing_keys[i].FIELD` and never
//! quoting a key; ids are unique; a key's secret stays in [`sundial_target::signing`].

use std::collections::BTreeSet;
use std::path::PathBuf;

use anyhow::bail;
use serde::Deserialize;
use sundial_api::signing_keys::SigningKeyInfo;
use sundial_target::signing::{NamespacedKey, Signer, SigningKey};

/// One `[[signing_keys]]` entry as written.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct SigningKeyFile {
    id: Option<String>,
    namespaces: Option<Vec<String>>,
    secret_file: Option<PathBuf>,
}

/// The most bytes a key file may hold (a key is under 100).
const KEY_FILE_MAX_BYTES: u64 = 4096;

/// Checks every entry and reads its key file.
///
/// # Errors
/// `signing_keys[i].id`: missing, empty, longer than 64 characters, not of letters, digits,
/// `.`, `_`, `-`, or the same as an earlier entry's; `signing_keys[i].namespaces`: missing,
/// empty, or naming something neither `*` nor a namespace name;
/// `signing_keys[i].secret_file`: missing, unreadable, larger than 4 KiB, or not holding a
/// key ([`SigningKey::parse`]'s reason).
pub(crate) fn resolve(entries: &[SigningKeyFile]) -> anyhow::Result<Signer> {
    let mut keys = Vec::with_capacity(entries.len());
    let mut ids = BTreeSet::new();
    for (i, entry) in entries.iter().enumerate() {
        let id = entry.id.as_deref().unwrap_or_default();
        if id.is_empty()
            || id.len() > 64
            || !id
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
        {
            bail!("signing_keys[{i}].id: '{id}' is not 1-64 letters, digits, '.', '_' or '-'");
        }
        if !ids.insert(id) {
            bail!("signing_keys[{i}].id: '{id}' is given twice; give each key its own id");
        }
        let namespaces = entry.namespaces.clone().unwrap_or_default();
        if namespaces.is_empty() {
            bail!(
                "signing_keys[{i}].namespaces: missing or empty; list the namespaces the key signs, or [\"*\"] for all"
            );
        }
        for ns in namespaces.iter().filter(|n| *n != "*") {
            sundial_core::names::check_name(ns).map_err(|m| {
                anyhow::anyhow!(
                    "signing_keys[{i}].namespaces: '{ns}' is not a namespace: the name {m}"
                )
            })?;
        }
        let Some(path) = &entry.secret_file else {
            bail!(
                "signing_keys[{i}].secret_file: missing; give the file that holds the key (whsec_... or whsk_...)"
            );
        };
        let shown = path.display();
        let size = std::fs::metadata(path)
            .map_err(|e| {
                anyhow::anyhow!("signing_keys[{i}].secret_file: cannot read {shown}: {e}")
            })?
            .len();
        if size > KEY_FILE_MAX_BYTES {
            bail!(
                "signing_keys[{i}].secret_file: {shown} holds {size} bytes; a key file holds one key"
            );
        }
        let text = std::fs::read_to_string(path).map_err(|e| {
            anyhow::anyhow!("signing_keys[{i}].secret_file: cannot read {shown}: {e}")
        })?;
        let key = SigningKey::parse(id, &text).map_err(|reason| {
            anyhow::anyhow!("signing_keys[{i}].secret_file: {shown}: {reason}")
        })?;
        keys.push(NamespacedKey { namespaces, key });
    }
    Ok(Signer::new(keys))
}

/// `sundial signing-key`: make a key file's text, or show an Ed25519 key's public half.
#[derive(Debug, clap::Args)]
pub struct SigningKeyArgs {
    #[command(subcommand)]
    command: SigningKeyCommand,
}

#[derive(Debug, clap::Subcommand)]
enum SigningKeyCommand {
    /// Print a new random key, the text of a `secret_file` (docs/security.md): `whsec_...`
    /// (HMAC-SHA256, 32 bytes) or `whsk_...` (an Ed25519 seed). Write it to a file only the
    /// server reads (mode 0600).
    New {
        /// `hmac-sha256` or `ed25519`.
        #[arg(long, default_value = "ed25519")]
        algorithm: String,
    },
    /// Print the public half (`whpk_...`) of the Ed25519 key in FILE, for receivers.
    Public {
        /// A key file holding `whsk_...`.
        file: PathBuf,
    },
}

/// Runs `sundial signing-key`.
///
/// # Errors
/// An unknown algorithm; a file that cannot be read, holds no key, or holds an HMAC key (it
/// has no public half).
pub fn signing_key(args: SigningKeyArgs) -> anyhow::Result<std::process::ExitCode> {
    match args.command {
        SigningKeyCommand::New { algorithm } => {
            let text = SigningKey::generate(&algorithm)
                .map_err(|e| anyhow::anyhow!("--algorithm: {e}"))?;
            println!("{text}");
        }
        SigningKeyCommand::Public { file } => {
            let shown = file.display();
            let text = std::fs::read_to_string(&file)
                .map_err(|e| anyhow::anyhow!("{shown}: cannot read: {e}"))?;
            let key = SigningKey::parse("key", &text)
                .map_err(|reason| anyhow::anyhow!("{shown}: {reason}"))?;
            let Some(public) = key.public_key() else {
                bail!(
                    "{shown}: an HMAC key has no public half; its receivers hold the secret itself"
                );
            };
            println!("{public}");
        }
    }
    Ok(std::process::ExitCode::SUCCESS)
}

/// What the API shows of each key: id, algorithm, public half, namespaces.
pub fn public_view(signer: &Signer) -> Vec<SigningKeyInfo> {
    signer
        .all()
        .map(|k| SigningKeyInfo {
            id: k.key.id().to_owned(),
            algorithm: k.key.algorithm().to_owned(),
            public_key: k.key.public_key(),
            namespaces: k.namespaces.clone(),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(id: &str, namespaces: &[&str], file: Option<&std::path::Path>) -> SigningKeyFile {
        SigningKeyFile {
            id: Some(id.into()),
            namespaces: Some(namespaces.iter().map(|s| s.to_string()).collect()),
            secret_file: file.map(std::path::Path::to_path_buf),
        }
    }

    #[test]
    fn bad_entries_are_named_by_field_without_the_key() {
        let dir = std::env::temp_dir().join(format!("sundial-signing-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let good = dir.join("good");
        std::fs::write(&good, SigningKey::generate("ed25519").unwrap()).unwrap();
        let bad = dir.join("bad");
        std::fs::write(&bad, "whsec_c2hvcnQ=\n").unwrap();
        let missing = dir.join("missing");
        let cases: Vec<(Vec<SigningKeyFile>, &str)> = vec![
            (vec![entry("", &["*"], Some(&good))], "signing_keys[0].id"),
            (
                vec![entry("a b", &["*"], Some(&good))],
                "signing_keys[0].id",
            ),
            (
                vec![
                    entry("k", &["*"], Some(&good)),
                    entry("k", &["*"], Some(&good)),
                ],
                "signing_keys[1].id: 'k' is given twice",
            ),
            (
                vec![entry("k", &[], Some(&good))],
                "signing_keys[0].namespaces: missing",
            ),
            (
                vec![entry("k", &["Billing"], Some(&good))],
                "signing_keys[0].namespaces: 'Billing'",
            ),
            (
                vec![entry("k", &["*"], None)],
                "signing_keys[0].secret_file: missing",
            ),
            (
                vec![entry("k", &["*"], Some(&missing))],
                "signing_keys[0].secret_file: cannot read",
            ),
            (vec![entry("k", &["*"], Some(&bad))], "24 to 64 bytes"),
        ];
        for (entries, want) in cases {
            let e = resolve(&entries).unwrap_err().to_string();
            assert!(e.contains(want), "{want}: {e}");
            assert!(!e.contains("c2hvcnQ"), "{e} quotes the key");
        }
        let signer = resolve(&[entry("k", &["billing"], Some(&good))]).unwrap();
        let view = public_view(&signer);
        assert_eq!(view.len(), 1);
        assert_eq!(view[0].algorithm, "ed25519");
        assert!(view[0].public_key.as_deref().unwrap().starts_with("whpk_"));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
