//! [`Builder`]: one place to configure a [`RetryLayer`] — the policy, the
//! limits per key (or per group of keys sharing an organisation's limits)
//! and per model class, the default deadline, the spend budget, the store,
//! the clock and the journal — into the one [`Config`] of the layer (its
//! admission settings are [`Config::admission`]).
//!
//! ```
//! use ratewise_core::admit::Limits;
//! use ratewise_tower::RetryLayer;
//! use std::time::Duration;
//!
//! let layer = RetryLayer::builder()
//!     .deadline(Duration::from_secs(120))
//!     // tier-1 key: 50 RPM, 30k ITPM, 8k OTPM for every class
//!     .key_limits("team-a", Limits {
//!         requests: Some(50),
//!         input_tokens: Some(30_000),
//!         output_tokens: Some(8_000),
//!         tokens: None,
//!     })
//!     // two keys of one organisation share its limits and its stops
//!     .key_group("acme", ["acme-batch", "acme-web"])
//!     .build();
//! # let _ = layer;
//! ```
//!
//! Limits not given are learned from the provider's rate-limit headers
//! (a scope with none known sends one request first and paces from its
//! answer). A given limit is capped by what the server says: the lower of
//! the two is used.

use ratewise_core::admit::{self, KeyLimits, Limits, SpendConfig};
use ratewise_core::decide::Policy;
use ratewise_core::Provider;
use std::sync::Arc;
use std::time::Duration;

use crate::clock::Clock;
use crate::config::Config;
use crate::journal::Journal;
use crate::retry::RetryLayer;
use crate::state::State;

/// Configures a [`RetryLayer`]; see the [module docs](self).
#[derive(Default)]
#[must_use = "a builder does nothing until `build`"]
pub struct Builder {
    config: Config,
    store: Option<Arc<dyn State>>,
    clock: Option<Arc<dyn Clock>>,
    journal: Option<Arc<dyn Journal>>,
}

impl std::fmt::Debug for Builder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Builder")
            .field("config", &self.config)
            .field("store", &self.store.is_some())
            .field("journal", &self.journal.is_some())
            .finish()
    }
}

impl Builder {
    /// Every setting at its default.
    pub fn new() -> Self {
        Self::default()
    }

    /// The layer's configuration as a whole (replaces what was set on it).
    pub fn config(mut self, config: Config) -> Self {
        self.config = config;
        self
    }

    /// The decision policy.
    pub fn policy(mut self, policy: Policy) -> Self {
        self.config.policy = policy;
        self
    }

    /// The provider profile (default: detected from each answer).
    pub fn provider(mut self, provider: Provider) -> Self {
        self.config.provider = Some(provider);
        self
    }

    /// The deadline of a job without its own [`Deadline`](crate::Deadline).
    pub fn deadline(mut self, deadline: Duration) -> Self {
        self.config.policy.default_deadline = Some(deadline);
        self
    }

    /// Limits of every key and class without its own.
    pub fn limits(mut self, limits: Limits) -> Self {
        self.config.admission.limits = limits;
        self
    }

    /// Limits of one model class, for every key without its own.
    pub fn class_limits(mut self, class: impl Into<String>, limits: Limits) -> Self {
        self.config
            .admission
            .class_limits
            .push((class.into(), limits));
        self
    }

    /// Limits of one key (its [`KeyLabel`](crate::KeyLabel), or a group's
    /// name), for every class.
    pub fn key_limits(mut self, key: impl Into<String>, limits: Limits) -> Self {
        self.config.admission.key_limits.push(KeyLimits {
            key: key.into(),
            class: None,
            limits,
        });
        self
    }

    /// Limits of one key (or group) for one model class.
    pub fn key_class_limits(
        mut self,
        key: impl Into<String>,
        class: impl Into<String>,
        limits: Limits,
    ) -> Self {
        self.config.admission.key_limits.push(KeyLimits {
            key: key.into(),
            class: Some(class.into()),
            limits,
        });
        self
    }

    /// Keys that share one organisation's limits: one set of buckets per
    /// class, one stop. Limits for them are given under `group`.
    pub fn key_group<I, K>(mut self, group: impl Into<String>, keys: I) -> Self
    where
        I: IntoIterator<Item = K>,
        K: Into<String>,
    {
        let group = group.into();
        for k in keys {
            self.config
                .admission
                .key_groups
                .push((k.into(), group.clone()));
        }
        self
    }

    /// Models whose names start with `prefix` share the buckets of `class`.
    pub fn model_class(mut self, prefix: impl Into<String>, class: impl Into<String>) -> Self {
        self.config.admission.classes.set(prefix, class);
        self
    }

    /// A queue-wide spend budget.
    pub fn spend(mut self, spend: SpendConfig) -> Self {
        self.config.admission.spend = Some(spend);
        self
    }

    /// The admission configuration as a whole (replaces the limits, groups,
    /// classes and budget set on this builder).
    pub fn admission(mut self, admission: admit::Config) -> Self {
        self.config.admission = admission;
        self
    }

    /// Load shedding: most jobs waiting for admission on one scope; a job
    /// arriving behind that many ends at once with `defer`
    /// ([`Config::max_waiting`]).
    pub fn max_waiting(mut self, jobs: usize) -> Self {
        self.config.max_waiting = Some(jobs);
        self
    }

    /// Cut a send with no answer after `timeout`: its outcome is unknown
    /// ([`Policy::send_timeout`]). Without it a send in flight is never
    /// cut.
    pub fn send_timeout(mut self, timeout: Duration) -> Self {
        self.config.policy.send_timeout = Some(timeout);
        self
    }

    /// A fixed jitter seed for the layer and its in-memory store (default:
    /// the operating system's entropy).
    pub fn seed(mut self, seed: u64) -> Self {
        self.config.seed = Some(seed);
        self.config.admission.seed = Some(seed);
        self
    }

    /// The shared admission store (another process's limits shared through
    /// it, a test double). The admission settings of this builder
    /// configure only the in-memory store made when none is given.
    pub fn store(mut self, store: Arc<dyn State>) -> Self {
        self.store = Some(store);
        self
    }

    /// The clock (default: tokio's).
    pub fn clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = Some(clock);
        self
    }

    /// The journal attempts are recorded in before they are sent.
    pub fn journal(mut self, journal: Arc<dyn Journal>) -> Self {
        self.journal = Some(journal);
        self
    }

    /// The layer.
    #[cfg(feature = "tokio")]
    pub fn build(self) -> RetryLayer {
        let clock = self
            .clock
            .clone()
            .unwrap_or_else(|| Arc::new(crate::clock::TokioClock::new()));
        self.build_with_clock(clock)
    }

    /// The layer, on `clock` (for a runtime other than tokio).
    pub fn build_with_clock(self, clock: Arc<dyn Clock>) -> RetryLayer {
        let store = self.store.unwrap_or_else(|| {
            Arc::new(admit::Shared::new(admit::Controller::new(
                self.config.admission.clone(),
            )))
        });
        let layer = RetryLayer::from_parts(self.config, store, clock);
        match self.journal {
            Some(j) => layer.with_journal(j),
            None => layer,
        }
    }
}

impl RetryLayer {
    /// A [`Builder`] with every setting at its default.
    pub fn builder() -> Builder {
        Builder::new()
    }
}
