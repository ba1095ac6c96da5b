//! Secrets (docs/security.md, "Secrets"): the reads are written once over this store's
//! reader (`sundial_store::steps::secrets`), the put and the delete over its transaction
//! ([`SqlTx`]), each with its audit entry. The store keeps sealed bytes only.
//! A delete checks for users and deletes in one transaction. A job or workflow write that
//! references the secret and commits between that check and the delete's commit can still
//! leave a target referencing a deleted secret; its attempts then fail naming the missing
//! secret (`sundial_core::secrets::RenderError::Missing`).

use super::*;

use crate::reads::SqlTx;
use sundial_store::steps::secrets as steps;

pub(crate) async fn secret_delete(store: &PgStore, namespace: &str, name: &str) -> Result<()> {
    let mut tx = store.begin().await?;
    let now = store.now_ms(&mut *tx).await?;
    steps::secret_delete(&mut SqlTx(&mut tx), namespace, name, now).await?;
    commit(tx).await
}

pub(crate) async fn secret_put(
    store: &PgStore,
    namespace: &str,
    name: &str,
    sealed: &sundial_store::SealedSecret,
) -> Result<(sundial_store::SecretRecord, bool)> {
    let mut tx = store.begin().await?;
    let now = store.now_ms(&mut *tx).await?;
    let put = steps::secret_put(&mut SqlTx(&mut tx), namespace, name, sealed, now).await?;
    commit(tx).await?;
    Ok(put)
}
