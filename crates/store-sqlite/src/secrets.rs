//! Secrets (docs/security.md, "Secrets"): the put and the reads are written once over this
//! store's reader and writer (`sundial_store::steps::secrets`), the delete over its
//! transaction ([`SqlTx`]). The store keeps sealed bytes only.
//! A delete checks for users and deletes in one transaction on the one writer, so no job or
//! workflow written meanwhile can be left referencing a deleted secret by this store's own
//! writes.

use super::*;

use crate::reads::SqlTx;
use sundial_store::steps::secrets as steps;

pub(crate) async fn secret_delete(store: &SqliteStore, namespace: &str, name: &str) -> Result<()> {
    let mut tx = store.begin().await?;
    steps::secret_delete(&mut SqlTx(&mut tx), namespace, name).await?;
    commit(tx).await
}
