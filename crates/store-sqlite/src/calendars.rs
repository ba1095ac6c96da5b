//! Holiday calendars (docs/time.md, "Calendars"): put, get, list, who names one, delete; the
//! put and the delete are written once (`sundial_store::steps::calendars`) over this store's
//! transaction ([`SqlTx`]), the reads in `sundial_store::steps::listings`.
//! A delete checks for users and deletes in one transaction on the one writer, so no job
//! written meanwhile can be left naming a deleted calendar by this store's own writes.

use super::*;
use sundial_core::calendar::CalendarSpec;
use sundial_store::CalendarRecord;

use crate::reads::SqlTx;
use sundial_store::steps::calendars as steps;

pub(crate) async fn calendar_put(
    store: &SqliteStore,
    namespace: &str,
    name: &str,
    spec: &CalendarSpec,
) -> Result<(CalendarRecord, bool)> {
    let now = ms(store.clock.now());
    let text = steps::spec_text(spec)?;
    let mut tx = store.begin().await?;
    let put = steps::calendar_put(&mut SqlTx(&mut tx), namespace, name, (spec, &text), now).await?;
    commit(tx).await?;
    Ok(put)
}

pub(crate) async fn calendar_delete(
    store: &SqliteStore,
    namespace: &str,
    name: &str,
) -> Result<()> {
    let now = ms(store.clock.now());
    let mut tx = store.begin().await?;
    steps::calendar_delete(&mut SqlTx(&mut tx), namespace, name, now).await?;
    commit(tx).await
}
