//! The key table kept within its bound (`[key_table]`): a sweep forgets
//! idle keys ([`Controller::forget_idle`](ratewise_core::admit::Controller::forget_idle)
//! decides which may go) and, with them, what the proxy keeps beside
//! them — the last four characters, a stop's answer. Their metric series
//! go too: `/metrics` shows the keys the store holds.
//!
//! The sweep runs every second when the table is over its bound (or the
//! fingerprints seen are), and every quarter of the idle time (at most a
//! minute) otherwise. With `--redis` it forgets from this process's view;
//! the shared record stays, and expires in Redis when nobody writes it
//! for the store's record TTL.

use crate::App;
use std::sync::Weak;
use std::time::Duration;

/// Sweeps until the proxy is gone.
pub async fn sweep(app: Weak<App>) {
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut since_full = Duration::ZERO;
    loop {
        tick.tick().await;
        let Some(app) = app.upgrade() else {
            return;
        };
        since_full += Duration::from_secs(1);
        let kt = app.config.key_table;
        let every = (kt.idle / 4).clamp(Duration::from_secs(1), Duration::from_secs(60));
        let over = app.store.lock().key_count() > kt.max_keys || app.keys.len() > kt.max_keys;
        if over || since_full >= every {
            since_full = Duration::ZERO;
            once(&app);
        }
    }
}

/// One sweep; returns how many keys were forgotten.
pub fn once(app: &App) -> usize {
    let kt = app.config.key_table;
    let now = app.layer.now();
    let forgotten = app.store.lock().forget_idle(now, kt.idle, kt.max_keys);
    for k in &forgotten {
        // Only a stop that may be forgotten (a key that never worked) is
        // held beside a forgotten key.
        app.stops.forget(k);
    }
    // Fingerprints whose keys the store no longer holds (or never did:
    // a request refused before admission).
    let seen = app.keys.fingerprints();
    let gone: Vec<String> = {
        let c = app.store.lock();
        seen.into_iter().filter(|fp| !c.knows_key(fp)).collect()
    };
    app.keys.forget(&gone);
    if !forgotten.is_empty() {
        tracing::info!(keys = forgotten.len(), "idle keys forgotten");
    }
    forgotten.len()
}
