//! Pools: one logical key made of several upstreams and keys, paced and
//! retried as one.
//!
//! A [`Pool`] is members ([`PoolMember`]), each a [`MemberRoute`] — where
//! its requests go and how they are authenticated ([`HttpRoute`] for the
//! APIs that need only a base URL and a key, a route of your own for
//! those that sign or translate) — with a weight and an optional model
//! mapping. Given to the layer ([`Builder::pool`](crate::Builder::pool)),
//! every call becomes one pooled job: each attempt goes to the member
//! whose own admission (its buckets, learned limits, pauses, stops) can
//! take it soonest, weights breaking ties; the route rewrites the request
//! for that member just before it is sent. The rules are the core's
//! ([`ratewise_core::pool`]):
//!
//! * a spend cap, billing or credentials answer stops that member's key,
//!   not the pool; the job goes on with another member;
//! * a provider-wide overload (529, 503 overloaded) moves the job to a
//!   member of another upstream;
//! * one deadline and one retry budget per job across members — a
//!   fallback is the next attempt, never a new retry loop — and each
//!   attempt's record names its member ([`AttemptRecord::member`](ratewise_core::record::AttemptRecord::member));
//! * a request that may have run is never sent to another member.
//!
//! ```
//! use ratewise_tower::pool::{HttpRoute, Pool, PoolMember};
//! use ratewise_tower::RetryLayer;
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let pool = Pool::new()
//!     .member(PoolMember::new(HttpRoute::anthropic("https://api.anthropic.com", "sk-ant-main")?).weight(70))
//!     .member(PoolMember::new(HttpRoute::anthropic("https://api.anthropic.com", "sk-ant-backup")?).weight(30));
//! let layer = RetryLayer::builder().pool(pool).build()?;
//! // Requests sent through `layer` name no upstream and carry no key of
//! // their own that matters: each attempt is rewritten for its member.
//! # let _ = layer;
//! # Ok(())
//! # }
//! ```

mod driven;
mod route;
mod spec;
mod status;

pub(crate) use driven::{PoolShared, Pooled};
pub use ratewise_core::pool::{MemberStopped, PoolConfig};
pub use route::{HttpRoute, MemberRoute, RouteError};
pub use spec::{MemberSpec, PoolSpec, SpecError};
pub use status::{MemberStatus, PoolStatus, StopStatus};

use ratewise_core::pool::Member;
use std::sync::Arc;

/// One member of a [`Pool`]: its route, weight and model names.
#[derive(Clone)]
pub struct PoolMember {
    pub(crate) member: Member,
    pub(crate) route: Arc<dyn MemberRoute>,
}

impl std::fmt::Debug for PoolMember {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The member's key label is a fingerprint; the route's key is not
        // shown.
        f.debug_struct("PoolMember")
            .field("upstream", &self.member.upstream)
            .field("provider", &self.member.provider)
            .field("key", &self.member.key)
            .field("weight", &self.member.weight)
            .field("models", &self.member.models)
            .finish()
    }
}

impl PoolMember {
    /// A member of weight 1 sending through `route`: its upstream,
    /// provider and key label are the route's.
    pub fn new(route: impl MemberRoute) -> Self {
        Self::from_arc(Arc::new(route))
    }

    /// The same from a shared route.
    pub fn from_arc(route: Arc<dyn MemberRoute>) -> Self {
        PoolMember {
            member: Member::new(route.upstream(), route.provider(), route.key_label()),
            route,
        }
    }

    /// The same with weight `weight` (0 is taken as 1): between members
    /// that can take a job at once, shares follow the weights (70/30).
    pub fn weight(mut self, weight: u32) -> Self {
        self.member = self.member.weight(weight);
        self
    }

    /// The same, sending the model callers name `from` as `to` on this
    /// member (an Azure deployment, a Bedrock model id, a host's alias).
    pub fn model(mut self, from: impl Into<String>, to: impl Into<String>) -> Self {
        self.member = self.member.model(from, to);
        self
    }

    /// The member as the core sees it.
    pub fn core(&self) -> &Member {
        &self.member
    }

    /// How the member is named in records, logs and status: its upstream
    /// and key label (a fingerprint), never the key — `upstream#fp-…`
    /// ([`key_of_label`] reads the key label back).
    pub fn label(&self) -> String {
        format!("{}#{}", self.member.upstream, self.member.key)
    }
}

/// The key label in a member's [`label`](PoolMember::label) (what
/// [`AttemptRecord::member`](ratewise_core::record::AttemptRecord::member)
/// says): the part after its last `#`.
///
/// ```
/// use ratewise_tower::pool::key_of_label;
/// assert_eq!(key_of_label("api.anthropic.com#fp-0123456789abcdef"), Some("fp-0123456789abcdef"));
/// assert_eq!(key_of_label("no-label"), None);
/// ```
pub fn key_of_label(label: &str) -> Option<&str> {
    label
        .rsplit_once('#')
        .map(|(_, key)| key)
        .filter(|k| !k.is_empty())
}

/// Several members used as one logical key. See the [module docs](self).
#[derive(Debug, Clone, Default)]
pub struct Pool {
    pub(crate) config: PoolConfig,
    pub(crate) members: Vec<PoolMember>,
}

impl Pool {
    /// A pool with no member yet, the default [`PoolConfig`].
    pub fn new() -> Self {
        Self::default()
    }

    /// A pool with no member yet and `config`.
    pub fn with_config(config: PoolConfig) -> Self {
        Pool {
            config,
            members: Vec::new(),
        }
    }

    /// The same with `member` added.
    pub fn member(mut self, member: PoolMember) -> Self {
        self.members.push(member);
        self
    }

    /// Its members, in the order they were added.
    pub fn members(&self) -> &[PoolMember] {
        &self.members
    }
}
