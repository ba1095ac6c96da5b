//! Secrets (docs/security.md, "Secrets"): the reads are written once over this store's
//! reader (`sundial_store::steps::secrets`), the put and the delete over its transaction
//! ([`SqlTx`]), each with its audit entry. The store keeps sealed bytes only.
//! A delete checks for users and deletes in one transaction on the one writer, so no job or
//! workflow written meanwhile can be left referencing a deleted secret by this store's own
//! writes.

use super::*;

use crate::reads::SqlTx;
use sundial_store::steps::secrets as steps;

pub(crate) async fn secret_delete(store: &SqliteStore, namespace: &str, name: &str) -> Result<()> {
    let now = ms(store.clock.now());
    let mut tx = store.begin().await?;
    steps::secret_delete(&mut SqlTx(&mut tx), namespace, name, now).await?;
    commit(tx).await
}

pub(crate) async fn secret_put(
    store: &SqliteStore,
    namespace: &str,
    name: &str,
    sealed: &sundial_store::SealedSecret,
) -> Result<(sundial_store::SecretRecord, bool)> {
    let now = ms(store.clock.now());
    let mut tx = store.begin().await?;
    let put = steps::secret_put(&mut SqlTx(&mut tx), namespace, name, sealed, now).await?;
    commit(tx).await?;
    Ok(put)
}
