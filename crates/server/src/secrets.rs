//! `secrets_key_file` (docs/configuration.md, "secrets_key_file"; docs/security.md,
//! "Secrets"): the AES-256 key that seals secret values in the API and opens them in a worker.
//!
//! Invariants: the key is read from a file only, never from the command line or the
//! environment; errors name the setting and the file, never the key; on the embedded store
//! without the setting, a key is made once beside the database file (`<file>.secrets-key`,
//! mode 0600, logged), and the same file is read at every later start.

use std::io::Write as _;
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::bail;
use sundial_core::secrets::SecretsKey;

/// The most bytes a key file may hold (a key is 45).
const KEY_FILE_MAX_BYTES: u64 = 4096;

/// The key of `secrets_key_file`, read before the store is opened so that a bad file stops
/// the server before it touches the database; `None` when the setting is not given.
///
/// # Errors
/// `secrets_key_file: PATH: ...` for a file that cannot be read, is larger than 4 KiB, or does
/// not hold the base64 of 32 bytes.
pub fn configured(file: Option<&Path>) -> anyhow::Result<Option<Arc<SecretsKey>>> {
    file.map(|path| read(path, "secrets_key_file").map(Arc::new))
        .transpose()
}

/// Where the embedded store's default key lives: `PATH.secrets-key` for `sqlite://PATH`;
/// `None` for any other store.
pub fn default_path(database_url: &str) -> Option<PathBuf> {
    database_url
        .strip_prefix("sqlite://")
        .or_else(|| database_url.strip_prefix("sqlite:"))
        .map(|rest| rest.split('?').next().unwrap_or(rest))
        .filter(|p| !p.is_empty() && *p != ":memory:")
        .map(|db| PathBuf::from(format!("{db}.secrets-key")))
}

/// The embedded store's default key at `path` ([`default_path`]): read when it exists; made
/// (mode 0600, logged) when it does not and the store, opened, holds no secret
/// (`holds_secrets`).
///
/// # Errors
/// A key file that cannot be read or made; a missing one while the store holds secrets (they
/// were sealed under it, and a new key could not open them: restore it or name it).
pub fn beside_database(path: &Path, holds_secrets: bool) -> anyhow::Result<Arc<SecretsKey>> {
    let setting = "secrets_key_file (its default beside the database)";
    if !path.exists() && holds_secrets {
        bail!(
            "{setting}: {} is missing, and the database holds secrets sealed under it; restore the key file beside the database (a new key could not open them), or give secrets_key_file",
            path.display()
        );
    }
    match std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
    {
        Ok(mut f) => {
            f.write_all(SecretsKey::generate().as_bytes())
                .and_then(|()| f.sync_all())
                .map_err(|e| anyhow::anyhow!("{setting}: cannot write {}: {e}", path.display()))?;
            tracing::info!(path = %path.display(),
                "made a secrets key beside the database (mode 0600); keep it with the database: the secrets stored under it cannot be read without it");
        }
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => bail!("{setting}: cannot make {}: {e}", path.display()),
    }
    read(path, setting).map(Arc::new)
}

fn read(path: &Path, setting: &str) -> anyhow::Result<SecretsKey> {
    let shown = path.display();
    let size = std::fs::metadata(path)
        .map_err(|e| anyhow::anyhow!("{setting}: cannot read {shown}: {e}"))?
        .len();
    if size > KEY_FILE_MAX_BYTES {
        bail!("{setting}: {shown} holds {size} bytes; a key file holds one key");
    }
    let text = std::fs::read_to_string(path)
        .map_err(|e| anyhow::anyhow!("{setting}: cannot read {shown}: {e}"))?;
    if let Ok(meta) = std::fs::metadata(path)
        && std::os::unix::fs::PermissionsExt::mode(&meta.permissions()) & 0o077 != 0
    {
        tracing::warn!(path = %shown, "{setting}: the key file may be read by other users than its owner; chmod 600 it");
    }
    SecretsKey::parse(&text).map_err(|reason| anyhow::anyhow!("{setting}: {shown}: {reason}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_embedded_default_is_made_once_and_bad_files_are_named() {
        let dir = std::env::temp_dir().join(format!("sundial-secrets-key-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let url = format!("sqlite://{}/db.sqlite", dir.display());
        let made = default_path(&url).unwrap();
        assert_eq!(made, dir.join("db.sqlite.secrets-key"));
        // Missing while the store holds secrets: refused, nothing made.
        let e = beside_database(&made, true).unwrap_err().to_string();
        assert!(e.contains("is missing"), "{e}");
        assert!(!made.exists());
        let first = beside_database(&made, false).unwrap();
        let mode = std::os::unix::fs::PermissionsExt::mode(
            &std::fs::metadata(&made).unwrap().permissions(),
        );
        assert_eq!(mode & 0o777, 0o600);
        let (nonce, sealed) = first.seal("ns", "a", "v");
        let again = beside_database(&made, true).unwrap();
        assert_eq!(again.open("ns", "a", &nonce, &sealed).unwrap(), "v");
        assert!(default_path("postgres://x/y").is_none());
        assert!(configured(None).unwrap().is_none());
        let bad = dir.join("bad");
        std::fs::write(&bad, "c2hvcnQ=").unwrap();
        let e = configured(Some(&bad)).unwrap_err().to_string();
        assert!(
            e.starts_with("secrets_key_file: ") && e.contains("32 bytes"),
            "{e}"
        );
        assert!(!e.contains("c2hvcnQ"), "{e}");
        let e = configured(Some(&dir.join("none"))).unwrap_err().to_string();
        assert!(e.contains("cannot read"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
