//! [`Builder`]: one place to configure a [`RetryLayer`].

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

/// Configures a [`RetryLayer`] — the policy, the limits per key (or per
/// group of keys sharing an organisation's limits) and per model class,
/// the default deadline, the spend budget, the store, the clock and the
/// journal — into the one [`Config`] of the layer (its admission settings
/// are [`Config::admission`]).
///
/// ```
/// use ratewise_tower::{Limits, RetryLayer};
/// use std::time::Duration;
///
/// let layer = RetryLayer::builder()
///     .deadline(Duration::from_secs(120))
///     // tier-1 key: 50 RPM, 30k ITPM, 8k OTPM for every class
///     .key_limits("team-a", Limits::per_minute().requests(50).input_tokens(30_000).output_tokens(8_000))
///     // two keys of one organisation share its limits and its stops
///     .key_group("acme", ["acme-batch", "acme-web"])
///     .build()?;
/// // What the layer paces with, without building its store by hand:
/// assert!(layer.ledger().unwrap().is_clean());
/// # Ok::<(), ratewise_tower::BuildError>(())
/// ```
///
/// Limits not given are learned from the provider's rate-limit headers
/// (a scope with none known sends one request first and paces from its
/// answer). A given limit is capped by what the server says: the lower of
/// the two is used.
///
/// No setting is dropped. [`config`](Self::config) and
/// [`admission`](Self::admission) set a whole configuration as the base,
/// whenever they are called; every other setting is applied on top of it
/// in the order given, so `.key_limits(..).admission(cfg)` keeps both. The
/// admission settings configure the in-memory store the builder makes: a
/// store given with [`store`](Self::store) is configured by whoever made
/// it, and [`build`](Self::build) refuses every admission setting given
/// with one ([`BuildError`], naming each) instead of leaving it unused:
/// the named ones (`.limits`, `.seed`, ...) and any field of a whole
/// configuration that differs from the default (its ramp, burst, retry
/// budget, prices, lease, `max_in_flight`, ...).
#[derive(Default)]
#[must_use = "a builder does nothing until `build`"]
pub struct Builder {
    /// `.config(..)`, or the default.
    base: Config,
    /// `.admission(..)`: replaces the base's admission settings.
    admission: Option<admit::Config>,
    /// Every other setting, in the order given.
    edits: Vec<Edit>,
    /// The admission settings given one by one, by name (for the error
    /// when a store is given too).
    admission_named: Vec<&'static str>,
    store: Option<Arc<dyn State>>,
    clock: Option<Arc<dyn Clock>>,
    journal: Option<Arc<dyn Journal>>,
    pool: Option<crate::pool::Pool>,
    /// `.waiting_with(..)`: another layer's waiting queues.
    queues: Option<Arc<crate::queue::Queues>>,
}

/// One setting, applied to the configuration at `build`.
type Edit = Box<dyn FnOnce(&mut Config) + Send + Sync>;

impl std::fmt::Debug for Builder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Builder")
            .field("config", &self.base)
            .field("admission", &self.admission)
            .field("settings", &self.edits.len())
            .field("store", &self.store.is_some())
            .field("clock", &self.clock.is_some())
            .field("journal", &self.journal.is_some())
            .field("pool", &self.pool.as_ref().map(|p| p.members().len()))
            .field("waiting_with", &self.queues.is_some())
            .finish()
    }
}

impl Builder {
    /// Every setting at its default.
    pub fn new() -> Self {
        Self::default()
    }

    fn edit(mut self, edit: impl FnOnce(&mut Config) + Send + Sync + 'static) -> Self {
        self.edits.push(Box::new(edit));
        self
    }

    fn admission_edit(
        mut self,
        name: &'static str,
        edit: impl FnOnce(&mut admit::Config) + Send + Sync + 'static,
    ) -> Self {
        if !self.admission_named.contains(&name) {
            self.admission_named.push(name);
        }
        self.edit(move |c| edit(&mut c.admission))
    }

    /// The layer's configuration as a whole: the base every other setting
    /// of this builder is applied on, whether given before or after.
    pub fn config(mut self, config: Config) -> Self {
        self.base = config;
        self
    }

    /// The decision policy.
    pub fn policy(self, policy: Policy) -> Self {
        self.edit(move |c| c.policy = policy)
    }

    /// The provider profile (default: named by the request's host, else
    /// detected from each answer).
    pub fn provider(self, provider: Provider) -> Self {
        self.edit(move |c| c.provider = Some(provider))
    }

    /// The deadline of a job without its own [`Deadline`](crate::Deadline).
    pub fn deadline(self, deadline: Duration) -> Self {
        self.edit(move |c| c.policy.default_deadline = Some(deadline))
    }

    /// The one key behind the layer: the label of every request without a
    /// [`KeyLabel`](crate::KeyLabel) ([`Config::key_label`]). Without it
    /// such a request is paced under its credentials' fingerprint.
    pub fn key_label(self, key: impl Into<String>) -> Self {
        let key = key.into();
        self.edit(move |c| c.key_label = Some(key))
    }

    /// Limits of every key and class without its own.
    pub fn limits(self, limits: Limits) -> Self {
        self.admission_edit("limits", move |a| a.limits = limits)
    }

    /// Limits of one model class, for every key without its own.
    pub fn class_limits(self, class: impl Into<String>, limits: Limits) -> Self {
        let class = class.into();
        self.admission_edit("class_limits", move |a| {
            a.class_limits.push((class, limits))
        })
    }

    /// Limits of one key (its [`KeyLabel`](crate::KeyLabel), its
    /// [fingerprint](crate::KeyLabel::fingerprint) for a request paced
    /// under its credentials, or a group's name), for every class.
    pub fn key_limits(self, key: impl Into<String>, limits: Limits) -> Self {
        let key = key.into();
        self.admission_edit("key_limits", move |a| {
            a.key_limits.push(KeyLimits {
                key,
                class: None,
                limits,
            })
        })
    }

    /// Limits of one key (or group) for one model class.
    pub fn key_class_limits(
        self,
        key: impl Into<String>,
        class: impl Into<String>,
        limits: Limits,
    ) -> Self {
        let (key, class) = (key.into(), class.into());
        self.admission_edit("key_class_limits", move |a| {
            a.key_limits.push(KeyLimits {
                key,
                class: Some(class),
                limits,
            })
        })
    }

    /// Keys that share one organisation's limits: one set of buckets per
    /// class, one stop. Limits for them are given under `group`.
    pub fn key_group<I, K>(self, group: impl Into<String>, keys: I) -> Self
    where
        I: IntoIterator<Item = K>,
        K: Into<String>,
    {
        let group = group.into();
        let pairs: Vec<(String, String)> = keys
            .into_iter()
            .map(|k| (k.into(), group.clone()))
            .collect();
        self.admission_edit("key_group", move |a| a.key_groups.extend(pairs))
    }

    /// Models whose names start with `prefix` share the buckets of `class`.
    pub fn model_class(self, prefix: impl Into<String>, class: impl Into<String>) -> Self {
        let (prefix, class) = (prefix.into(), class.into());
        self.admission_edit("model_class", move |a| a.classes.set(prefix, class))
    }

    /// A queue-wide spend budget.
    pub fn spend(self, spend: SpendConfig) -> Self {
        self.admission_edit("spend", move |a| a.spend = Some(spend))
    }

    /// The admission configuration as a whole (burst, ramp, retry budget,
    /// prices, ...): the base the limits, groups, classes and budget set
    /// on this builder are applied on, whether given before or after.
    pub fn admission(mut self, admission: admit::Config) -> Self {
        self.admission = Some(admission);
        if !self.admission_named.contains(&"admission") {
            self.admission_named.push("admission");
        }
        self
    }

    /// Load shedding: most jobs waiting for admission on one scope; a job
    /// arriving behind that many ends at once with `defer`
    /// ([`Config::max_waiting`]).
    pub fn max_waiting(self, jobs: usize) -> Self {
        self.edit(move |c| c.max_waiting = Some(jobs))
    }

    /// The priority levels of the admission queue, highest first, with the
    /// minimum share each lower level keeps ([`Config::levels`]; default
    /// `interactive`, `default`, `bulk`, 10 %). A request names its level
    /// with the [`Workload`](crate::Workload) extension.
    ///
    /// ```
    /// use ratewise_tower::{Levels, RetryLayer};
    ///
    /// let layer = RetryLayer::builder()
    ///     .levels(Levels::new(["realtime", "batch"]).with_min_share("batch", 0.2))
    ///     .build()
    ///     .unwrap();
    /// # let _ = layer;
    /// ```
    pub fn levels(self, levels: crate::Levels) -> Self {
        self.edit(move |c| c.levels = levels)
    }

    /// This layer's jobs wait in `other`'s queues: on one scope (key ×
    /// model class) the jobs of both are ordered by one discipline — the
    /// levels are `other`'s, whatever [`levels`](Self::levels) says here —
    /// and capacity given back through either wakes the waiters of both.
    /// For layers that read answers or send differently but share keys
    /// (a proxy's layer per provider, its pools): without it, each has a
    /// queue of its own, and a key's interactive calls through one wait
    /// behind nothing of the other's bulk work, and pass none of it.
    ///
    /// ```
    /// use ratewise_tower::RetryLayer;
    ///
    /// let direct = RetryLayer::builder().build().unwrap();
    /// let pooled = RetryLayer::builder().waiting_with(&direct).build().unwrap();
    /// # let _ = pooled;
    /// ```
    pub fn waiting_with(mut self, other: &RetryLayer) -> Self {
        self.queues = Some(other.waiting_queues());
        self
    }

    /// Cut a send with no answer after `timeout`: its outcome is unknown
    /// ([`Policy::send_timeout`]). Without it a send in flight is never
    /// cut.
    pub fn send_timeout(self, timeout: Duration) -> Self {
        self.edit(move |c| c.policy.send_timeout = Some(timeout))
    }

    /// A fixed jitter seed for the layer and its in-memory store (default:
    /// the operating system's entropy). Beside a store of your own it is an
    /// error: seed that store's controller instead (`Config::seed`), and
    /// the layer's own jitter with [`Config::seed`](crate::Config::seed).
    pub fn seed(self, seed: u64) -> Self {
        self.admission_edit("seed", move |a| a.seed = Some(seed))
            .edit(move |c| c.seed = Some(seed))
    }

    /// The shared admission store (another process's limits shared through
    /// it, a test double), configured by whoever made it: admission
    /// settings given to this builder as well make [`build`](Self::build)
    /// fail, since they could not reach it.
    pub fn store(mut self, store: Arc<dyn State>) -> Self {
        self.store = Some(store);
        self
    }

    /// The clock (default: tokio's; required without the `tokio`
    /// feature).
    pub fn clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = Some(clock);
        self
    }

    /// The journal attempts are recorded in before they are sent.
    pub fn journal(mut self, journal: Arc<dyn Journal>) -> Self {
        self.journal = Some(journal);
        self
    }

    /// Every call through a pool of upstreams and keys, paced and retried
    /// as one logical key (see [`pool`](crate::pool)). A pool with no
    /// member is an error at [`build`](Self::build).
    pub fn pool(mut self, pool: crate::pool::Pool) -> Self {
        self.pool = Some(pool);
        self
    }

    /// The layer; an error when a setting could not take effect.
    pub fn build(self) -> Result<RetryLayer, BuildError> {
        let mut config = self.base;
        if let Some(a) = self.admission {
            config.admission = a;
        }
        // What the whole configuration given says of admission, before the
        // named settings (each of which is listed by its own name).
        let given = changed_admission(&config.admission);
        for edit in self.edits {
            edit(&mut config);
        }
        let clock = match self.clock {
            Some(c) => c,
            None => default_clock()?,
        };
        let store = match self.store {
            Some(store) => {
                let mut named = self.admission_named;
                for field in given {
                    if !named.contains(&field) {
                        named.push(field);
                    }
                }
                if !named.is_empty() {
                    return Err(BuildError(Kind::SettingsWithStore(named)));
                }
                store
            }
            None => Arc::new(admit::Shared::new(admit::Controller::new(
                config.admission.clone(),
            ))),
        };
        let layer = match self.queues {
            Some(q) => RetryLayer::from_parts_waiting_in(config, store, clock, q),
            None => RetryLayer::from_parts(config, store, clock),
        };
        let layer = match self.journal {
            Some(j) => layer.with_journal(j),
            None => layer,
        };
        Ok(match self.pool {
            Some(pool) if pool.members().is_empty() => return Err(BuildError(Kind::EmptyPool)),
            Some(pool) => layer.with_pool(pool),
            None => layer,
        })
    }
}

/// The admission settings that differ from the defaults, by name: every
/// one of them configures the in-memory store only, so none may be given
/// beside a store of the caller's (ramp, burst, retry budget and prices
/// too, not only the limits). Compared through their `Debug` text, which
/// every setting has (the output estimator is a trait object).
fn changed_admission(a: &admit::Config) -> Vec<&'static str> {
    let d = admit::Config::default();
    let differs =
        |x: &dyn std::fmt::Debug, y: &dyn std::fmt::Debug| format!("{x:?}") != format!("{y:?}");
    let fields: [(&'static str, bool); 15] = [
        ("config.admission.limits", a.limits != d.limits),
        ("config.admission.class_limits", !a.class_limits.is_empty()),
        ("config.admission.key_limits", !a.key_limits.is_empty()),
        ("config.admission.key_groups", !a.key_groups.is_empty()),
        ("config.admission.burst", differs(&a.burst, &d.burst)),
        ("config.admission.classes", differs(&a.classes, &d.classes)),
        ("config.admission.ramp", differs(&a.ramp, &d.ramp)),
        (
            "config.admission.retry_budget",
            differs(&a.retry_budget, &d.retry_budget),
        ),
        ("config.admission.spend", a.spend.is_some()),
        ("config.admission.prices", differs(&a.prices, &d.prices)),
        ("config.admission.output", differs(&a.output, &d.output)),
        ("config.admission.lease", a.lease != d.lease),
        (
            "config.admission.pause_jitter",
            a.pause_jitter != d.pause_jitter,
        ),
        (
            "config.admission.learn_margins",
            a.learn_margins != d.learn_margins,
        ),
        (
            "config.admission.seed / max_in_flight",
            a.seed != d.seed || a.max_in_flight != d.max_in_flight,
        ),
    ];
    fields
        .into_iter()
        .filter_map(|(name, changed)| changed.then_some(name))
        .collect()
}

#[cfg(feature = "tokio")]
fn default_clock() -> Result<Arc<dyn Clock>, BuildError> {
    Ok(Arc::new(crate::clock::TokioClock::new()))
}

#[cfg(not(feature = "tokio"))]
fn default_clock() -> Result<Arc<dyn Clock>, BuildError> {
    Err(BuildError(Kind::NoClock))
}

/// Why [`Builder::build`] made no layer: a setting would not have taken
/// effect.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BuildError(Kind);

#[derive(Debug, Clone, PartialEq, Eq)]
enum Kind {
    SettingsWithStore(Vec<&'static str>),
    #[cfg_attr(feature = "tokio", allow(dead_code))]
    NoClock,
    EmptyPool,
}

impl std::fmt::Display for BuildError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.0 {
            Kind::SettingsWithStore(named) => write!(
                f,
                "admission settings ({}) were given with `.store(..)`: they configure only the \
                 in-memory store the builder makes, so they would not reach the store given; \
                 configure that store with them (e.g. `Controller::new(admission)`, \
                 `ratewise_redis::Config::admission`), or leave out `.store(..)`",
                named.join(", ")
            ),
            Kind::NoClock => {
                f.write_str("no clock: without the `tokio` feature the layer needs `.clock(..)`")
            }
            Kind::EmptyPool => f.write_str("`.pool(..)` was given a pool with no member"),
        }
    }
}

impl std::error::Error for BuildError {}

impl RetryLayer {
    /// A [`Builder`] with every setting at its default.
    pub fn builder() -> Builder {
        Builder::new()
    }
}
