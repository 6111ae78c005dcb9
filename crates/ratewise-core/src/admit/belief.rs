//! What we believe about a provider's limits, and where each belief comes
//! from: the one seam between the bucket arithmetic (`bucket`, which only
//! refills, takes and waits at the rate it is given) and the evidence.
//!
//! Per dimension, in order of trust:
//!
//! 1. **configured** — the user said so ([`Config::limits`](super::Config)
//!    and friends);
//! 2. **stated** — the provider's own `*-limit` headers (`controller/headers`),
//!    read through its [`Profile`](super::Profile) (rounding, which
//!    dimensions its headers describe); where both exist the lower wins;
//! 3. **estimated** — learned from 429s alone ([`silent`](super::silent))
//!    for a dimension neither of the above states. An estimate never
//!    overrides a stated or configured limit: it only fills what they
//!    leave out (a provider that states requests but not tokens).
//!
//! The capacity and level beliefs (rounded `remaining` read as ranges,
//! margins learned from surprises) act on a bucket's credit and live with
//! header sync; this module decides only the rate each bucket refills at.

use super::limits::{Limits, DIMENSIONS};
use super::silent::SilentEstimate;
use crate::time::Instant;
use crate::vocab::{Dimension, Provider};
use serde::Serialize;

/// Where a dimension's limit comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum LimitSource {
    /// Configured by the user (and not above a stated one).
    Configured,
    /// Stated by the provider's rate-limit headers.
    Stated,
    /// Estimated from 429s alone: the provider states nothing for it.
    Estimated,
}

impl LimitSource {
    /// The name used in metrics and status pages.
    pub const fn as_str(self) -> &'static str {
        match self {
            LimitSource::Configured => "configured",
            LimitSource::Stated => "stated",
            LimitSource::Estimated => "estimated",
        }
    }
}

/// The limit of every dimension with its source, at `t` (an estimate
/// probes upward over time, so it depends on the instant).
pub(crate) fn effective(
    configured: &Limits,
    learned: &Limits,
    silent: &[SilentEstimate; 4],
    t: Instant,
) -> [Option<(u64, LimitSource)>; 4] {
    std::array::from_fn(|i| {
        let d = DIMENSIONS[i];
        match (configured.get(d), learned.get(d)) {
            (Some(c), Some(l)) if l < c => Some((l, LimitSource::Stated)),
            (Some(c), _) => Some((c, LimitSource::Configured)),
            (None, Some(l)) => Some((l, LimitSource::Stated)),
            (None, None) => silent[i].rate(t).map(|r| (r, LimitSource::Estimated)),
        }
    })
}

/// The dimensions a 429 that names none is taken to be about, for a
/// provider that states nothing: every bucket its documentation describes
/// and the request charged. Anthropic meters input and output apart (its
/// `tokens` family is "the most restrictive" of the two, not a bucket);
/// OpenAI and everyone else meter combined tokens.
pub(crate) fn silent_dimensions(provider: Provider) -> [bool; 4] {
    let d = |x: Dimension| super::limits::headers_describe(x, provider);
    match provider {
        Provider::Anthropic => [true, true, true, false],
        _ => [d(Dimension::Requests), false, false, d(Dimension::Tokens)],
    }
}
