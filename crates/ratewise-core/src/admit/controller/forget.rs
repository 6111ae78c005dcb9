//! Forgetting idle keys, so that a process that meets many keys (20,000
//! random `x-api-key` values, say) keeps a bounded table.
//!
//! A key is forgotten with its scopes only when nothing would be lost but
//! what a new key starts with anyway: never one with a stop (money, an
//! operator's, a credential that once worked — an authentication stop on a
//! key never seen to succeed may go: it is what a flood of junk keys
//! leaves), a pause in force, a reservation outstanding (nor a probe, which
//! is one), or limits of its own in the configuration. A forgotten key that
//! comes back starts as a new one: cold ramp, limits learned again.
//!
//! Time is an argument, as everywhere in the core: a driver calls
//! [`Controller::forget_idle`] on a timer of its own.

use super::{Controller, Instant, Now};
use crate::vocab::Cause;
use std::time::Duration;

impl Controller {
    /// Forgets every key idle for `idle_after` or more (no admission asked
    /// and no reservation ended since), then, while more than `max_keys`
    /// remain, the least recently used of the others that may go. Keys
    /// that must be kept (a stop, a pause in force, a reservation
    /// outstanding, limits of their own) are never forgotten,
    /// so only they can hold the table above `max_keys`. A key no sweep has
    /// seen used yet (made by an import, or by a target never admitted)
    /// counts as used at its first sweep.
    ///
    /// Returns the names forgotten (a driver drops what it keeps beside
    /// them: last four characters, metric series). A [`ScopeId`](super::ScopeId)
    /// of a forgotten key finds nothing afterwards (its admission is
    /// refused): numbers are not reused.
    pub fn forget_idle(&mut self, now: Now, idle_after: Duration, max_keys: usize) -> Vec<String> {
        let t = now.instant;
        let live = self.slab.live_scopes();
        let mut candidates: Vec<(Instant, u32)> = Vec::new();
        let ids: Vec<u32> = self.keys.ids().collect();
        for k in ids {
            let ks = &self.keys[k as usize];
            let kept = self.configured_key(&ks.name)
                || ks.stop.is_some_and(|st| {
                    // An authentication stop on a key that never worked may go.
                    !st.expired(t) && (st.cause != Cause::Authentication || ks.succeeded)
                })
                || ks.scopes.iter().any(|id| {
                    live.contains(&super::ScopeId(*id))
                        || self.scopes[*id as usize]
                            .paused_until
                            .is_some_and(|p| p > t)
                });
            let ks = &mut self.keys[k as usize];
            let used = *ks.used.get_or_insert(t);
            if !kept {
                candidates.push((used, k));
            }
        }
        candidates.sort_unstable();
        let cutoff = t
            .since_origin()
            .checked_sub(idle_after)
            .map(Instant::from_origin);
        let mut forgotten = Vec::new();
        for (used, k) in candidates {
            let idle = cutoff.is_some_and(|c| used <= c);
            if !idle && self.keys.len() <= max_keys {
                // Oldest first: every later one is more recent.
                break;
            }
            forgotten.push(self.remove_key(k));
        }
        forgotten
    }

    /// Whether the configuration names `name` (a key with limits of its
    /// own, a group, a grouped key): its state is the operator's, kept.
    fn configured_key(&self, name: &str) -> bool {
        self.cfg.key_limits.iter().any(|e| e.key == name)
            || self
                .cfg
                .key_groups
                .iter()
                .any(|(k, g)| g == name || k == name)
    }

    /// Removes a key and its scopes; returns its name.
    fn remove_key(&mut self, k: u32) -> String {
        let Some(ks) = self.keys.remove(k) else {
            return String::new();
        };
        for id in &ks.scopes {
            if let Some(s) = self.scopes.remove(*id) {
                self.scope_index.remove(&(k, s.class));
            }
        }
        self.key_index.remove(&ks.name);
        ks.name
    }

    /// Notes that `scope`'s key was used at `t` (an admission asked, a
    /// reservation ended).
    pub(super) fn touch(&mut self, scope: super::ScopeId, t: Instant) {
        if let Some(s) = self.scopes.get(scope.0 as usize) {
            if let Some(k) = self.keys.get_mut(s.key as usize) {
                k.used = Some(t);
            }
        }
    }

    /// The names of every key (or group) held, oldest first.
    pub fn key_names(&self) -> Vec<String> {
        self.keys.iter().map(|k| k.name.clone()).collect()
    }

    /// The scopes of `key` (or its group), oldest first; none when it is
    /// not held.
    pub fn scopes_of(&self, key: &str) -> Vec<super::ScopeId> {
        self.key_index
            .get(self.key_name(key))
            .and_then(|k| self.keys.get(*k as usize))
            .map(|ks| ks.scopes.iter().map(|i| super::ScopeId(*i)).collect())
            .unwrap_or_default()
    }

    /// How many keys (or groups) the controller holds state for.
    pub fn key_count(&self) -> usize {
        self.keys.len()
    }

    /// Whether the controller holds state for `key` (or its group).
    pub fn knows_key(&self, key: &str) -> bool {
        self.key_index.contains_key(self.key_name(key))
    }
}

#[cfg(test)]
mod tests {
    use super::super::{AdmitRequest, Config, KeyLimits};
    use super::*;
    use crate::admit::Limits;
    use std::time::SystemTime;

    fn at(ms: u64) -> Now {
        Now::new(Instant::from_millis(ms), SystemTime::UNIX_EPOCH)
    }

    fn controller() -> Controller {
        let mut cfg = Config {
            seed: Some(7),
            limits: Limits {
                requests: Some(600),
                ..Limits::NONE
            },
            ..Config::default()
        };
        cfg.key_limits.push(KeyLimits {
            key: "configured".into(),
            class: None,
            limits: Limits {
                requests: Some(60),
                ..Limits::NONE
            },
        });
        Controller::new(cfg)
    }

    fn use_key(c: &mut Controller, key: &str, now: Now) {
        let t = c.target(key, "m");
        if let Some(r) = c.admit(&AdmitRequest::new(t), now).go() {
            c.release(r, now);
        }
    }

    #[test]
    fn idle_keys_go_and_kept_ones_stay() {
        let mut c = controller();
        let idle = Duration::from_secs(60);
        for k in [
            "plain",
            "configured",
            "stopped",
            "auth",
            "auth-worked",
            "paused",
            "busy",
        ] {
            use_key(&mut c, k, at(0));
        }
        let s = c.scope_of("stopped", "m");
        c.stop(s, Cause::SpendCap, None, at(0));
        let s = c.scope_of("auth", "m");
        c.stop(s, Cause::Authentication, None, at(0));
        let s = c.scope_of("auth-worked", "m");
        c.keys[c.scopes[s.0 as usize].key as usize].succeeded = true;
        c.stop(s, Cause::Authentication, None, at(0));
        let s = c.scope_of("paused", "m");
        c.pause(s, Instant::from_millis(3_600_000), None, at(0));
        let busy = c.target("busy", "m");
        let held = c.admit(&AdmitRequest::new(busy), at(0)).go().unwrap();

        // Not idle yet: nothing goes while under the bound.
        assert!(c.forget_idle(at(30_000), idle, 100).is_empty());
        let mut gone = c.forget_idle(at(61_000), idle, 100);
        gone.sort();
        assert_eq!(gone, vec!["auth".to_owned(), "plain".to_owned()]);
        for k in ["configured", "stopped", "auth-worked", "paused", "busy"] {
            assert!(c.knows_key(k), "{k} was forgotten");
        }
        assert!(!c.knows_key("plain"));
        // A forgotten scope's id finds nothing; its key comes back new.
        c.release(held, at(62_000));
        assert_eq!(c.forget_idle(at(62_000), idle, 100), Vec::<String>::new());
        assert_eq!(
            c.forget_idle(at(123_000), idle, 100),
            vec!["busy".to_owned()]
        );
        assert!(matches!(
            c.admit(&AdmitRequest::new(busy), at(123_000)),
            super::super::Admission::UnknownScope
        ));
        use_key(&mut c, "plain", at(123_000));
        assert!(c.knows_key("plain"));
        assert!(c.ledger().is_clean());
    }

    #[test]
    fn over_the_bound_the_least_recently_used_go_first() {
        let mut c = controller();
        for i in 0..20_000u64 {
            use_key(&mut c, &format!("k{i}"), at(i));
        }
        let s = c.scope_of("k5", "m");
        c.stop(s, Cause::UserLimit, None, at(20_000));
        let gone = c.forget_idle(at(20_001), Duration::from_secs(3600), 1_000);
        assert_eq!(c.key_count(), 1_000);
        assert_eq!(gone.len(), 19_000);
        assert!(c.knows_key("k5"), "a stopped key is kept");
        assert!(c.knows_key("k19999") && !c.knows_key("k0") && !c.knows_key("k18999"));
        assert!(c.knows_key("k19001"));
    }
}
