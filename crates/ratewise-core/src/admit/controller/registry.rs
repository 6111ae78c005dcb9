//! The registry: which (key, model class) scopes exist, under which names,
//! with which configured limits and prices.
//!
//! Kept apart because every other concern takes a [`ScopeId`] or a
//! [`Target`] as given; only here are names resolved (a key to its group,
//! a model to its class and price) and scopes created. Scope numbers are
//! never reused, so a stale id finds nothing rather than another key's
//! state ([`forget`](super::forget) removes keys).

use super::{
    Beliefs, Controller, Instant, KeyState, Limits, Price, PriceId, Ramp, ScopeId, ScopeState,
    Target,
};

impl Controller {
    /// Resolves (key, model) to its scope and price, creating the scope on
    /// first use. Keys are any caller-chosen name (never the secret itself).
    pub fn target(&mut self, key: &str, model: &str) -> Target {
        let class = self.cfg.classes.class_of(model).to_owned();
        let scope = self.scope_of(key, &class);
        Target {
            scope,
            price: self
                .cfg
                .prices
                .price_of(model)
                .and_then(|p| self.intern_price(p)),
        }
    }

    fn intern_price(&mut self, p: Price) -> Option<PriceId> {
        match self.prices.iter().position(|q| *q == p) {
            Some(i) => PriceId::at(i),
            None => {
                let id = PriceId::at(self.prices.len())?;
                self.prices.push(p);
                Some(id)
            }
        }
    }

    /// The name state is kept under for `key`: its group's, when it is in
    /// one ([`Config::key_groups`](crate::admit::Config::key_groups)), else its own.
    pub fn key_name<'a>(&'a self, key: &'a str) -> &'a str {
        self.cfg
            .key_groups
            .iter()
            .find(|(k, _)| k == key)
            .map_or(key, |(_, g)| g.as_str())
    }

    /// The configured limits of (key or group, class): the most specific
    /// entry of [`Config::key_limits`], else the class's, else the
    /// default.
    fn configured_limits(&self, key: &str, class: &str) -> Limits {
        let per_key = |want: Option<&str>| {
            self.cfg
                .key_limits
                .iter()
                .find(|e| e.key == key && e.class.as_deref() == want)
                .map(|e| e.limits)
        };
        per_key(Some(class))
            .or_else(|| per_key(None))
            .or_else(|| {
                self.cfg
                    .class_limits
                    .iter()
                    .find(|(c, _)| c == class)
                    .map(|(_, l)| *l)
            })
            .unwrap_or(self.cfg.limits)
    }

    /// The scope of (key, class), created on first use. A grouped key
    /// resolves to its group's scope.
    pub fn scope_of(&mut self, key: &str, class: &str) -> ScopeId {
        let key = self.key_name(key).to_owned();
        let key = key.as_str();
        let k = match self.key_index.get(key) {
            Some(k) => *k,
            None => {
                let k = self.keys.push(KeyState {
                    name: key.to_owned(),
                    stop: None,
                    scopes: Vec::new(),
                    succeeded: false,
                    used: None,
                    in_flight: Vec::new(),
                });
                self.key_index.insert(key.to_owned(), k);
                k
            }
        };
        if let Some(s) = self.scope_index.get(&(k, class.to_owned())) {
            return ScopeId(*s);
        }
        let configured = self.configured_limits(key, class);
        let ramp = Ramp::new(&self.cfg.ramp);
        let mut st = ScopeState {
            key: k,
            class: class.to_owned(),
            beliefs: Beliefs::configured(&configured),
            buckets: [None, None, None, None],
            levels: Default::default(),
            ramp,
            paused_until: None,
            class_stop: None,
            last_call: None,
            released: [0; 4],
            charged: [0; 4],
            imported: false,
            probes: Vec::new(),
            probe_cap: 1,
            probe_base: None,
            heard: false,
            remembered: None,
            head_latency: [None; 2],
            surprises: [0; 4],
            output_reserved: None,
            output_mean: None,
            output_answers: 0,
        };
        st.believe(self.cfg.burst, self.share_permille, Instant::ZERO, |_| {
            ((), true)
        });
        let id = self.scopes.push(st);
        self.keys[k as usize].scopes.push(id);
        self.scope_index.insert((k, class.to_owned()), id);
        ScopeId(id)
    }

    /// The scope's key (stop state lives per key).
    pub fn key_of(&self, scope: ScopeId) -> Option<&str> {
        let s = self.scopes.get(scope.0 as usize)?;
        Some(self.keys[s.key as usize].name.as_str())
    }

    /// The scope's key and model class: what names it to the other
    /// processes sharing the key (a [`ScopeId`] is this process's own).
    pub fn names_of(&self, scope: ScopeId) -> Option<(&str, &str)> {
        let s = self.scopes.get(scope.0 as usize)?;
        Some((self.keys[s.key as usize].name.as_str(), s.class.as_str()))
    }

    /// Every scope, in the order they were made (for a status page).
    pub fn scopes(&self) -> Vec<ScopeId> {
        self.scopes.ids().map(ScopeId).collect()
    }

    /// Every scope on the same key as `scope` (including it).
    pub(crate) fn scopes_on_key(&self, scope: ScopeId) -> Vec<ScopeId> {
        match self.scopes.get(scope.0 as usize) {
            Some(s) => self.keys[s.key as usize]
                .scopes
                .iter()
                .map(|i| ScopeId(*i))
                .collect(),
            None => Vec::new(),
        }
    }
}
