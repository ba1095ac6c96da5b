//! Holiday calendars (docs/time.md, "Calendars"): put, get, list, who names one, delete; the
//! put and the delete are written once (`sundial_store::steps::calendars`) over this store's
//! transaction ([`SqlTx`]), the reads in `sundial_store::steps::listings`.
//! A delete checks for users and deletes in one transaction. A job write that names the
//! calendar and commits between the API's existence check and that transaction can still
//! leave a job naming a deleted calendar; the scheduler then excludes nothing for it and says
//! so in its log (docs/time.md).

use super::*;
use sundial_core::calendar::CalendarSpec;
use sundial_store::CalendarRecord;

use crate::reads::SqlTx;
use sundial_store::steps::calendars as steps;

pub(crate) async fn calendar_put(
    store: &PgStore,
    namespace: &str,
    name: &str,
    spec: &CalendarSpec,
) -> Result<(CalendarRecord, bool)> {
    let text = steps::spec_text(spec)?;
    let mut tx = store.begin().await?;
    let now = store.now_ms(&mut *tx).await?;
    let put = steps::calendar_put(&mut SqlTx(&mut tx), namespace, name, (spec, &text), now).await?;
    commit(tx).await?;
    Ok(put)
}

pub(crate) async fn calendar_delete(store: &PgStore, namespace: &str, name: &str) -> Result<()> {
    let mut tx = store.begin().await?;
    let now = store.now_ms(&mut *tx).await?;
    steps::calendar_delete(&mut SqlTx(&mut tx), namespace, name, now).await?;
    commit(tx).await
}
