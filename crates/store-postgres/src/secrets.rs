//! Secrets (docs/security.md, "Secrets"): the put and the reads are written once over this
//! store's reader and writer (`sundial_store::steps::secrets`), the delete over its
//! transaction ([`SqlTx`]). The store keeps sealed bytes only.
//! A delete checks for users and deletes in one transaction. A job or workflow write that
//! references the secret and commits between that check and the delete's commit can still
//! leave a target referencing a deleted secret; its attempts then fail naming the missing
//! secret (`sundial_core::secrets::RenderError::Missing`).

use super::*;

use crate::reads::SqlTx;
use sundial_store::steps::secrets as steps;

pub(crate) async fn secret_delete(store: &PgStore, namespace: &str, name: &str) -> Result<()> {
    let mut tx = store.begin().await?;
    steps::secret_delete(&mut SqlTx(&mut tx), namespace, name).await?;
    commit(tx).await
}
