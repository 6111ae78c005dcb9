//! Beliefs remembered across a restart: what a key's scopes learned —
//! stated limits, their buckets' capacities, limits estimated from 429s —
//! read back from a [`KeyRecord`] by a process that did not learn them (a
//! restarted proxy from its journal, a new replica or a re-run of
//! `ratewise run`), so it does not learn each key from nothing.
//!
//! Only beliefs are recalled: no bucket level, pause, ramp or stop (those
//! are the moment's, and have their own owners: a stop is journaled and
//! read back on its own). A remembered belief has an age, from the
//! record's `written_at`:
//!
//! * within [`REMEMBER_TRUSTED`](crate::admit::store_kit::REMEMBER_TRUSTED) it is taken as it was written;
//! * past it, it decays toward caution: every remembered limit, capacity
//!   and estimate is scaled by `2^-(age − trusted) / trusted` (half an
//!   hour past the bound, 0.71 of it; an hour past, half), so a process
//!   that was down for long starts lower and learns upward;
//! * past [`REMEMBER_FORGOTTEN`](crate::admit::store_kit::REMEMBER_FORGOTTEN) nothing is recalled.
//!
//! A configured limit still overrides: a remembered stated limit of a
//! dimension this process configures is not recalled. An estimate is
//! recalled as a measurement taken now (no window open across the
//! downtime: a 429 after the restart measures from the restart). The scope
//! shows the age of what it remembers until live evidence replaces it
//! ([`ScopeSnapshot::remembered`](super::ScopeSnapshot::remembered)).

use super::{Controller, Now, DIMENSIONS};
use crate::admit::belief::stated::Capacity;
use crate::admit::belief::{Beliefs, Level, SilentEstimate};
use crate::admit::record::limits_of;
use crate::admit::store_kit::{remembered_share, KeyRecord, Memory, StoreHooks};
use crate::time::TimeBase;
use std::time::Duration;

/// `v` scaled by `share`, at least 1.
fn scaled(v: u64, share: f64) -> u64 {
    if share >= 1.0 {
        v
    } else {
        ((v as f64 * share) as u64).max(1)
    }
}

impl Controller {
    /// Forgets what `key` has learned and remembers — stated limits,
    /// capacities, estimates, margins, the slow start's progress — so that
    /// it is learned again from its next answers, as on a cold key.
    /// Configured limits stay. `false` when the key is not known here.
    pub fn forget_beliefs(&mut self, key: &str, now: Now) -> bool {
        let name = self.key_name(key);
        let Some(k) = self.key_index.get(name).copied() else {
            return false;
        };
        let (burst, permille) = (self.cfg.burst, self.share_permille);
        let ids = self.keys[k as usize].scopes.clone();
        for id in ids {
            let s = &mut self.scopes[id as usize];
            let configured = s.beliefs.configured_limits();
            s.heard = false;
            s.probe_cap = 1;
            s.probe_base = None;
            s.surprises = [0; 4];
            s.remembered = None;
            s.believe(burst, permille, now.instant, |beliefs| {
                *beliefs = Beliefs::configured(&configured);
                ((), true)
            });
            // Buckets kept (no burst is made by forgetting) lose what was
            // believed of their level.
            s.levels = [Level::default(); 4];
        }
        true
    }
}

impl Memory for Controller {
    fn recall(&mut self, rec: &KeyRecord, now: Now) -> usize {
        let Some(written) = rec.written_at() else {
            return 0;
        };
        let age = now.wall.duration_since(written).unwrap_or(Duration::ZERO);
        let Some(share) = remembered_share(age) else {
            return 0;
        };
        let base = TimeBase::at(now);
        let at_written = base.back(rec.written_at.unwrap_or(0));
        let (burst, permille) = (self.cfg.burst, self.share_permille);
        let cut_off = permille < 1000;
        let t = now.instant;
        let mut recalled = 0;
        for sr in &rec.scopes {
            let learned = limits_of(sr.learned);
            let estimates: [Option<SilentEstimate>; 4] = std::array::from_fn(|i| {
                let r = sr.silent[i].as_ref()?;
                let e = SilentEstimate::from_record(r, base);
                // Its rate when written (the probe does not grow while
                // nobody sends), as a measurement taken now.
                let rate = e.rate(at_written)?;
                Some(SilentEstimate::recalled(scaled(rate, share), &e, t))
            });
            let nothing = learned == crate::admit::Limits::NONE
                && sr.seen.iter().all(|s| *s == 0)
                && estimates.iter().all(Option::is_none);
            if nothing {
                continue;
            }
            let id = self.scope_of(&rec.key, &sr.class);
            let s = &mut self.scopes[id.0 as usize];
            let configured = s.beliefs.configured_limits();
            s.believe(burst, permille, t, |beliefs| {
                for (i, d) in DIMENSIONS.into_iter().enumerate() {
                    // A configured limit overrides what was stated.
                    let stated = learned.get(d).filter(|_| configured.get(d).is_none());
                    beliefs.stated[i].limit = stated.map(|l| scaled(l, share));
                    let cap = |v: u64| if v == 0 { 0 } else { scaled(v, share) };
                    beliefs.stated[i].capacity = Capacity {
                        seen: cap(sr.seen[i]),
                        upper: sr.upper[i].filter(|_| share >= 1.0),
                        guess: sr.guess[i].map(cap),
                        ceiling: sr.ceiling[i].map(cap),
                    };
                    if let Some(e) = &estimates[i] {
                        *beliefs.estimate_mut(i, cut_off) = e.clone();
                    }
                }
                ((), true)
            });
            s.heard |= sr.heard;
            s.remembered = Some(written);
            recalled += 1;
        }
        recalled
    }

    fn remembered(&self, now: Now) -> Vec<KeyRecord> {
        let mut keys: Vec<&str> = self.keys.iter().map(|k| k.name.as_str()).collect();
        keys.sort_unstable();
        keys.dedup();
        keys.into_iter()
            .filter_map(|k| self.remembered_key(k, now))
            .collect()
    }

    fn remembered_key(&self, key: &str, now: Now) -> Option<KeyRecord> {
        self.export_key(key, now)
            .filter(KeyRecord::learned_anything)
            .map(|r| r.beliefs_only().stamped(now.wall))
    }
}
