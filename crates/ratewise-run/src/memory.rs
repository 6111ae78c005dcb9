//! What a run's keys learned — stated limits, bucket capacities, limits
//! estimated from 429s — kept in the run's store (its `meta` row
//! `beliefs`) when the run ends, and recalled when a run on the same
//! store starts ([`Controller::recall`](ratewise_core::admit::Controller::recall): decayed by its age, configured
//! `[limits]` still overriding), so a re-run does not learn its key from
//! nothing.

use crate::store::{Store, StoreError};
use ratewise_core::admit::store_kit::{KeyRecord, Memory};
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
    let records = shared.lock().remembered(layer.now());
    if records.is_empty() {
        return Ok(());
    }
    let text = serde_json::to_string(&records)
        .map_err(|e| StoreError::with_source("the run's beliefs could not be written", e))?;
    store.set_meta(META_KEY, &text)
}
