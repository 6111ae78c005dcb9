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
//! Beside the rate, what is believed of each bucket's level: `level` (the
//! server's view read against the credit at the send, the corrections it
//! makes, the evidence of a 429 the model did not expect) and `margin`
//! (the room those 429s teach to keep free). They act on a bucket's
//! credit through its arithmetic; the bucket itself knows none of them.

pub(crate) mod level;
pub(crate) mod margin;

pub(crate) use level::{CreditMark, Level, LevelRecord, ServerView};

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
/// probes upward over time, so it depends on the instant), for a process
/// pacing at `share_permille` of the key's limits.
///
/// A process cut off from its peers (a shared store unreachable: a share
/// below 1,000) cannot know what the others send, so a stated limit is
/// only a ceiling for it: until its own 429s have taught an estimate it
/// paces at its share of the stated limit, and then at the estimate
/// (never above the stated limit) — the share it really gets, learned
/// from 429s as on a silent provider. An estimate for a dimension nothing
/// states is this process's own evidence and is never cut by the share.
pub(crate) fn effective(
    configured: &Limits,
    learned: &Limits,
    silent: &[SilentEstimate; 4],
    share_permille: u32,
    t: Instant,
) -> [Option<(u64, LimitSource)>; 4] {
    let cut_off = share_permille < 1000;
    std::array::from_fn(|i| {
        let d = DIMENSIONS[i];
        let stated = match (configured.get(d), learned.get(d)) {
            (Some(c), Some(l)) if l < c => Some((l, LimitSource::Stated)),
            (Some(c), _) => Some((c, LimitSource::Configured)),
            (None, Some(l)) => Some((l, LimitSource::Stated)),
            (None, None) => None,
        };
        match stated {
            Some((l, src)) if cut_off => match silent[i].rate(t) {
                Some(r) => Some((r.min(l), LimitSource::Estimated)),
                None => Some((share_of(l, share_permille), src)),
            },
            Some(stated) => Some(stated),
            None => silent[i].rate(t).map(|r| (r, LimitSource::Estimated)),
        }
    })
}

/// `permille` of `limit`, at least 1.
pub(crate) fn share_of(limit: u64, permille: u32) -> u64 {
    if permille >= 1000 {
        return limit;
    }
    let part = u128::from(limit) * u128::from(permille) / 1000;
    u64::try_from(part).unwrap_or(u64::MAX).max(1)
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
        // Requests and input tokens per minute (ai.google.dev/gemini-api/
        // docs/rate-limits: RPM, TPM of input, RPD).
        Provider::Gemini => [true, true, false, false],
        _ => [d(Dimension::Requests), false, false, d(Dimension::Tokens)],
    }
}
