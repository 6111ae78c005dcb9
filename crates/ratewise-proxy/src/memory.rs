//! What each key learned, remembered across a restart: every
//! [`REMEMBER_EVERY`] (and at shutdown) the beliefs of each key the store
//! holds — stated limits, their buckets' capacities, limits estimated
//! from 429s — are written to the journal when they changed; at start
//! they are recalled ([`Controller::recall`](ratewise_core::admit::Controller::recall)), decayed by their age, so a
//! restarted proxy does not learn each key from nothing. `/status` shows
//! a scope pacing on remembered beliefs with their age; `POST /forget`
//! drops them.
//!
//! With `--redis` the key's shared record holds them instead (a new
//! replica reads it; a record nobody wrote for a minute is recalled as
//! remembered): nothing of this is written to the journal then.
//!
//! Writing happens on its own task, never inside a request.

use crate::App;
use ratewise_core::admit::store_kit::{KeyRecord, Memory};
use std::collections::BTreeSet;
use std::sync::Weak;
use std::time::Duration;

/// How often what the keys learned is written (when it changed).
pub const REMEMBER_EVERY: Duration = Duration::from_secs(10);

/// Recalls what the journal remembered of each key into the store; how
/// many model classes were recalled.
pub fn recall(app: &App, remembered: &[KeyRecord]) -> usize {
    if app.redis.is_some() || remembered.is_empty() {
        return 0;
    }
    let now = app.layer.now();
    let mut c = app.store.lock();
    let classes: usize = remembered.iter().map(|r| c.recall(r, now)).sum();
    drop(c);
    tracing::info!(
        keys = remembered.len(),
        classes,
        "beliefs remembered from before the restart recalled"
    );
    classes
}

/// Writes until the proxy is gone (or the shutdown aborts it, before its
/// own last [`once`]). The first write comes one period after the start:
/// what a start recalled is what the journal already holds.
pub async fn remember(app: Weak<App>) {
    let mut tick =
        tokio::time::interval_at(tokio::time::Instant::now() + REMEMBER_EVERY, REMEMBER_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let Some(app) = app.upgrade() else {
            return;
        };
        // A file write: off the runtime's workers.
        let _ = tokio::task::spawn_blocking(move || once(&app)).await;
    }
}

/// Writes what each key learned, where it changed since it was last
/// written; how many keys were written.
pub fn once(app: &App) -> usize {
    let Some(journal) = app.journal.as_ref().filter(|_| app.redis.is_none()) else {
        return 0;
    };
    let now = app.layer.now();
    // The store's lock is the request path's too: held for the names, then
    // for one key at a time, and never across a write.
    let names: BTreeSet<String> = {
        let c = app.store.lock();
        c.scopes()
            .into_iter()
            .filter_map(|s| c.key_of(s).map(str::to_owned))
            .collect()
    };
    names
        .iter()
        .filter_map(|k| app.store.lock().remembered_key(k, now))
        .filter(|r| journal.remember(r))
        .count()
}

/// Forgets what `key` learned, here (or in the shared record, with
/// `--redis`) and in the journal.
pub async fn forget(app: &App, key: &str) {
    let now = app.layer.now();
    match &app.redis {
        Some(r) => r.forget(key, now).await,
        None => {
            app.store.lock().forget_beliefs(key, now);
        }
    }
    if let Some(j) = &app.journal {
        j.forget(key);
    }
}
