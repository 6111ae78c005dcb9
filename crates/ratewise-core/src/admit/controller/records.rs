//! Records and the store hooks: a key's shared state exported as a
//! [`KeyRecord`] and imported back, with times made absolute, and the rest
//! of what a store shared between processes needs (disowning reservations
//! a lost record never held, pacing at a share) — the implementation of
//! [`StoreHooks`], the one seam for store implementors
//! ([`store_kit`](crate::admit::store_kit)).
//!
//! Kept apart because it is the one boundary of the controller that other
//! processes read: what goes into a record is state every replica must
//! agree on, and what stays out (configured limits, reservations, a probe
//! in flight) is this process's own.

use super::{
    share_changed, Bucket, Controller, Exit, Level, Now, Ramp, ReservationId, ScopeId,
    SilentEstimate, DIMENSIONS,
};
use crate::admit::belief::stated::Capacity;
use crate::admit::store_kit::{KeyRecord, Memory, StoreHooks, RECORD_FORMAT};

/// A shared record last written longer ago than this is read back as
/// remembered beliefs ([`Memory::recall`](crate::admit::store_kit::Memory::recall)), not as live state.
const RECALL_AFTER: std::time::Duration = std::time::Duration::from_secs(60);

impl StoreHooks for Controller {
    fn export_key(&self, key: &str, now: Now) -> Option<KeyRecord> {
        use crate::admit::record::{
            limits_array, ramp_record, DimensionRecord, ScopeRecord, StopRecord,
        };
        use crate::time::TimeBase;
        let name = self.key_name(key);
        let k = *self.key_index.get(name)?;
        let ks = &self.keys[k as usize];
        let base = TimeBase::at(now);
        let cut_off = self.share_permille < 1000;
        let scopes = ks
            .scopes
            .iter()
            .map(|id| {
                let s = &self.scopes[*id as usize];
                let (ramp_permille, ramp_last_step) = ramp_record(&s.ramp, base);
                let caps = s.beliefs.stated.map(|x| x.capacity);
                ScopeRecord {
                    class: s.class.clone(),
                    learned: limits_array(&s.beliefs.stated_limits()),
                    buckets: std::array::from_fn(|i| {
                        s.buckets[i].as_ref().map(|b| DimensionRecord {
                            bucket: b.to_record(base.shift()),
                            level: s.levels[i].to_record(base.shift()),
                        })
                    }),
                    ramp_permille,
                    ramp_last_step,
                    paused_until: s.paused_until.map(|t| base.out(t)),
                    last_call: s.last_call.map(|t| base.out(t)),
                    released: s.released,
                    seen: caps.map(|c| c.seen),
                    ceiling: caps.map(|c| c.ceiling),
                    upper: caps.map(|c| c.upper),
                    guess: caps.map(|c| c.guess),
                    silent: std::array::from_fn(|i| s.beliefs.estimate(i, cut_off).to_record(base)),
                    heard: s.heard,
                    output_mean: s.output_mean,
                    output_answers: s.output_answers,
                }
            })
            .collect();
        Some(
            KeyRecord {
                format: RECORD_FORMAT,
                key: ks.name.clone(),
                stop: ks.stop.as_ref().map(StopRecord::of),
                scopes,
                written_at: None,
            }
            .stamped(now.wall),
        )
    }

    fn import_key(&mut self, rec: &KeyRecord, now: Now) {
        use crate::admit::record::limits_of;
        use crate::time::TimeBase;
        let base = TimeBase::at(now);
        let burst = self.cfg.burst;
        let share = self.share_permille;
        for sr in &rec.scopes {
            let id = self.scope_of(&rec.key, &sr.class);
            let s = &mut self.scopes[id.0 as usize];
            s.imported = true;
            let learned = limits_of(sr.learned);
            for (i, d) in DIMENSIONS.into_iter().enumerate() {
                s.beliefs.stated[i].limit = learned.get(d);
            }
            for (i, b) in sr.buckets.iter().enumerate() {
                match b {
                    Some(r) => {
                        let shift = base.shift();
                        let read = Bucket::from_record(&r.bucket, shift).and_then(|b| {
                            Level::from_record(&r.level, &b, shift).map(|level| (b, level))
                        });
                        if let Some((b, level)) = read {
                            s.buckets[i] = Some(b);
                            s.levels[i] = level;
                        }
                    }
                    None => {
                        s.buckets[i] = None;
                        s.levels[i] = Level::default();
                    }
                }
            }
            s.ramp = Ramp::restored(sr.ramp_permille, sr.ramp_last_step.map(|t| base.back(t)));
            s.paused_until = sr.paused_until.map(|t| base.back(t));
            s.last_call = sr.last_call.map(|t| base.back(t));
            s.released = sr.released;
            for i in 0..4 {
                s.beliefs.stated[i].capacity = Capacity {
                    seen: sr.seen[i],
                    ceiling: sr.ceiling[i],
                    upper: sr.upper[i],
                    guess: sr.guess[i],
                };
                *s.beliefs.estimate_mut(i, share < 1000) = sr.silent[i]
                    .as_ref()
                    .map(|r| SilentEstimate::from_record(r, base))
                    .unwrap_or_default();
            }
            s.heard = sr.heard;
            s.output_mean = sr.output_mean;
            s.output_answers = sr.output_answers;
            // This process's configured limits decide which buckets exist.
            s.believe(burst, share, now.instant, |_| ((), true));
        }
        if let Some(k) = self.key_index.get(rec.key.as_str()).copied() {
            self.keys[k as usize].stop = rec.stop.as_ref().map(|st| st.to_stop(now));
        }
        // A record nobody has written for a while (every process of the
        // key gone, the store kept it) holds remembered beliefs: decayed
        // by their age, with no measuring window across the time nobody
        // sent, and shown as remembered.
        let stale = rec
            .written_at()
            .and_then(|w| now.wall.duration_since(w).ok())
            .is_some_and(|age| age > RECALL_AFTER);
        if stale {
            self.recall(rec, now);
        }
    }

    fn disown(&mut self, id: ReservationId, now: Now) -> bool {
        let Some(e) = self.slab.remove(id, Exit::Orphaned(now.instant)) else {
            return false;
        };
        // The spend budget is this process's own: its hold goes, and the
        // end settles the actual cost.
        if let Some(sp) = &mut self.spend {
            sp.unreserve(e.amounts.tokens(), e.cost, now.instant);
        }
        true
    }

    fn outstanding_on(&self, key: &str) -> Vec<ReservationId> {
        let Some(k) = self.key_index.get(self.key_name(key)) else {
            return Vec::new();
        };
        let scopes: Vec<ScopeId> = self.keys[*k as usize]
            .scopes
            .iter()
            .map(|i| ScopeId(*i))
            .collect();
        self.slab.live_on(&scopes)
    }

    fn set_share(&mut self, permille: u32, now: Now) {
        let permille = permille.clamp(1, 1000);
        if permille == self.share_permille {
            return;
        }
        let rejoined_or_cut = (permille < 1000) != (self.share_permille < 1000);
        self.share_permille = permille;
        for s in self.scopes.iter_mut() {
            if rejoined_or_cut {
                share_changed(s, permille, now.instant);
            }
            s.believe(self.cfg.burst, permille, now.instant, |_| ((), true));
        }
    }

    fn share_permille(&self) -> u32 {
        self.share_permille
    }
}
