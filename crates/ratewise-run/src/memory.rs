//! What a run's keys learned — stated limits, bucket capacities, limits
//! estimated from 429s — kept in the run's store (its `meta` row
//! `beliefs`) when the run ends, and recalled when a run on the same
//! store starts ([`Controller::recall`]: decayed by its age, configured
//! `[limits]` still overriding), so a re-run does not learn its key from
//! nothing.

use crate::store::{Store, StoreError};
use ratewise_core::admit::store_kit::{KeyRecord, StoreHooks};
use ratewise_core::admit::Controller;
use ratewise_tower::RetryLayer;

/// The `meta` row the beliefs are kept in.
const META_KEY: &str = "beliefs";

/// Recalls what the last run on `store` learned into `layer`'s admission
/// state; how many model classes were recalled. A row that cannot be read
/// (written by a newer version in a form this one does not know) is
/// ignored: the run learns as a cold one would.
pub(crate) fn recall(store: &dyn Store, layer: &RetryLayer) -> Result<usize, StoreError> {
    let Some(shared) = layer.in_memory_store() else {
        return Ok(0);
    };
    let Some(text) = store.meta(META_KEY)? else {
        return Ok(0);
    };
    let Ok(records) = serde_json::from_str::<Vec<KeyRecord>>(&text) else {
        return Ok(0);
    };
    let now = layer.now();
    let mut c = shared.lock();
    Ok(records.iter().map(|r| c.recall(r, now)).sum())
}

/// Keeps what `layer`'s keys learned in `store`, for the next run.
pub(crate) fn remember(store: &dyn Store, layer: &RetryLayer) -> Result<(), StoreError> {
    let Some(shared) = layer.in_memory_store() else {
        return Ok(());
    };
    let now = layer.now();
    let records: Vec<KeyRecord> = {
        let c = shared.lock();
        keys(&c)
            .iter()
            .filter_map(|k| c.export_key(k, now))
            .map(|r| {
                let at = r.written_at();
                let beliefs = r.beliefs_only();
                match at {
                    Some(at) => beliefs.stamped(at),
                    None => beliefs,
                }
            })
            .collect()
    };
    if records.is_empty() {
        return Ok(());
    }
    let text = serde_json::to_string(&records)
        .map_err(|e| StoreError::with_source("the run's beliefs could not be written", e))?;
    store.set_meta(META_KEY, &text)
}

/// The keys a controller holds.
fn keys(c: &Controller) -> std::collections::BTreeSet<String> {
    c.scopes()
        .into_iter()
        .filter_map(|s| c.key_of(s).map(str::to_owned))
        .collect()
}
