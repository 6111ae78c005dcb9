//! What we believe about a provider's limits, and where each belief comes
//! from: the one seam between the bucket arithmetic (`bucket`, which only
//! refills, takes and waits at the numbers it is given) and the evidence.
//!
//! Every belief about one (key, class, dimension) is a [`Belief`]: fed one
//! [`Sample`] at a time — an admitted charge, a settled usage, an answer
//! with or without rate-limit headers, a 429 with its hint, a surprise —
//! and answering what it believes ([`Believed`]: a limit, a capacity) and
//! how sure it is ([`Sureness`]), as Netflix's concurrency-limits keeps
//! AIMD, Vegas and Gradient2 behind one `Limit`. The implementations, in
//! order of trust:
//!
//! 1. [`Configured`] — the user said so ([`Config::limits`](super::Config)
//!    and friends);
//! 2. [`Stated`] — the provider's own `*-limit` headers and the capacity
//!    their views bracket, read through its [`Profile`](super::Profile)
//!    (rounding, which dimensions its headers describe), cut by surprises;
//!    where a configured limit exists too the lower wins;
//! 3. [`SilentEstimate`] — learned from 429s alone (`estimated`) for a
//!    dimension neither of the above states. An estimate never overrides a
//!    stated or configured limit: it only fills what they leave out (a
//!    provider that states requests but not tokens);
//! 4. [`Share`] — the share of a stated limit this process may spend while
//!    others spend it too and it cannot see them (cut off from its peers);
//! 5. [`Others`] — what clients outside this process's view take of a
//!    stated limit (another service on the key), read from the drain of
//!    the provider's bucket against this process's credit.
//!
//! [`Beliefs`] holds one scope's, and [`Beliefs::effective`] is the one
//! place they are combined; the controller rebuilds a scope's buckets from
//! it, once per change, in one place (`ScopeState::believe`).
//!
//! Beside the rate, what is believed of each bucket's level: `level` (the
//! server's view read against the credit at the send, the corrections it
//! makes, the evidence of a 429 the model did not expect) and `margin`
//! (the room those 429s teach to keep free). They act on a bucket's
//! credit through its arithmetic; the bucket itself knows none of them.

mod configured;
pub(crate) mod estimated;
pub(crate) mod level;
pub(crate) mod margin;
mod others;
mod share;
pub(crate) mod stated;
#[cfg(test)]
pub(crate) mod test_streams;

pub(crate) use configured::Configured;
pub use estimated::EstimateState;
pub(crate) use estimated::{SilentEstimate, Taught};
pub(crate) use level::{CreditMark, Level, LevelRecord, ServerView};
pub(crate) use others::Others;
pub(crate) use share::{BucketView, Share};
pub(crate) use stated::Stated;

use super::limits::{Limits, DIMENSIONS};
use crate::time::Instant;
use crate::vocab::{Dimension, Provider};
use serde::Serialize;
use std::time::Duration;

/// One piece of evidence about a (key, class, dimension), as it arrives.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Sample {
    /// An admission charged `units` at `at`: the provider is taken to let
    /// them through until an end says otherwise.
    Admitted {
        /// What it charged on this dimension.
        units: u64,
        /// When.
        at: Instant,
    },
    /// A reservation admitted at `admitted_at` ended `delta` units off its
    /// charge (actual less reserved; a release: all of it back).
    Settled {
        /// Actual less reserved.
        delta: i128,
        /// When it was admitted.
        admitted_at: Instant,
    },
    /// An answer's rate-limit headers for this dimension, read through the
    /// provider's rounding: its stated limit, and what its view proves of
    /// the bucket's capacity (at least) and allows (at most). An answer
    /// without headers says nothing and is not fed.
    Answer {
        /// `*-limit`, when stated.
        limit: Option<u64>,
        /// The least capacity the view proves.
        proven: Option<u64>,
        /// The most capacity the view allows.
        allowed: Option<u64>,
        /// The learned margin on this bucket is gone: a ceiling a surprise
        /// set no longer holds header evidence down.
        margin_gone: bool,
    },
    /// A 429 about this dimension (named, or taken to be) for a send that
    /// charged `units`, with its wait hint, answered at `at`.
    Throttled {
        /// What the send charged on this dimension.
        units: u64,
        /// The 429's hint, if any.
        hint: Option<Duration>,
        /// When it was answered.
        at: Instant,
    },
    /// A 429 the model did not expect: its credit was `over` units above
    /// the provider's level on a send of `units`; `again`: a margin in
    /// force did not prevent it.
    Surprised {
        /// What the model was over by.
        over: u64,
        /// What the send charged on this dimension.
        units: u64,
        /// A margin in force did not prevent it.
        again: bool,
    },
    /// The provider's bucket showed itself at least half full.
    Headroom {
        /// When.
        at: Instant,
    },
    /// A success's view of the provider's bucket, for a process cut off
    /// from the others on its key: what it shows left beside what this
    /// process had charged by then. Two views apart tell what the bucket
    /// lost in between, and so what the others spent (`Share`).
    View(BucketView),
    /// The same view, for a process that takes itself to see all its
    /// peers: what the bucket lost beyond this process's charges is what
    /// others it cannot see took (`Others`).
    Seen(BucketView),
}

/// What a sample changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct Change {
    /// What the belief answers may have changed: rebuild the buckets.
    pub(crate) moved: bool,
    /// By how much a proven capacity grew.
    pub(crate) grew: u64,
    /// What a 429 taught an estimate, for the decision's note.
    pub(crate) taught: Option<Taught>,
}

impl Change {
    /// Nothing changed.
    pub(crate) const NOTHING: Change = Change {
        moved: false,
        grew: 0,
        taught: None,
    };
    /// What it believes changed.
    pub(crate) const MOVED: Change = Change {
        moved: true,
        grew: 0,
        taught: None,
    };
}

/// How sure a belief is of what it answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Sureness {
    /// The user said so.
    Configured,
    /// The provider said so.
    Stated,
    /// Learned from 429s: a cold lower bound or a measurement.
    Estimated(EstimateState),
    /// This process's share, learned from its own 429s.
    Share,
}

/// What a belief holds at an instant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Believed {
    /// Units per minute.
    pub(crate) limit: u64,
    /// The provider's bucket capacity, where the belief knows one.
    pub(crate) capacity: Option<u64>,
    /// How sure.
    pub(crate) sure: Sureness,
}

/// A belief about one (key, class, dimension): fed one sample at a time,
/// answering what it believes and how sure it is. Sans-IO: time comes in
/// with the samples and the question.
pub(crate) trait Belief {
    /// Takes one sample; says what changed.
    fn observe(&mut self, sample: &Sample) -> Change;
    /// What it believes at `t`, if anything.
    fn believed(&self, t: Instant) -> Option<Believed>;
}

/// Every belief of one (key, class) scope, per dimension.
#[derive(Debug, Clone, Default)]
pub(crate) struct Beliefs {
    /// The configured limits.
    pub(crate) configured: [Configured; 4],
    /// The stated limits and their capacities.
    pub(crate) stated: [Stated; 4],
    /// The limits estimated from 429s where nothing is stated.
    pub(crate) estimated: [SilentEstimate; 4],
    /// This process's share of the stated limits while cut off.
    pub(crate) share: [Share; 4],
    /// What others this process cannot see take of the stated limits.
    pub(crate) others: [Others; 4],
}

impl Beliefs {
    /// A scope's beliefs with these configured limits and nothing learned.
    pub(crate) fn configured(limits: &Limits) -> Self {
        Beliefs {
            configured: std::array::from_fn(|i| Configured(limits.get(DIMENSIONS[i]))),
            ..Beliefs::default()
        }
    }

    /// The configured limits.
    pub(crate) fn configured_limits(&self) -> Limits {
        limits_of(|i| self.configured[i].0)
    }

    /// The limits the provider's headers stated.
    pub(crate) fn stated_limits(&self) -> Limits {
        limits_of(|i| self.stated[i].limit)
    }

    /// The limits known without an estimate: the lower of configured and
    /// stated.
    pub(crate) fn known(&self) -> Limits {
        Limits::combine(&self.configured_limits(), &self.stated_limits())
    }

    /// Whether a limit estimated from 429s is held for any dimension.
    pub(crate) fn any_estimate(&self) -> bool {
        (0..4).any(|i| self.estimated[i].is_set() || self.share[i].estimate.is_set())
    }

    /// The estimate that paces dimension `i` and that its 429s teach: the
    /// share of a known (configured or stated) limit while cut off from
    /// the peers (`cut_off`), else the estimate from 429s alone.
    pub(crate) fn estimate(&self, i: usize, cut_off: bool) -> &SilentEstimate {
        if cut_off && self.known().get(DIMENSIONS[i]).is_some() {
            &self.share[i].estimate
        } else {
            &self.estimated[i]
        }
    }

    /// [`estimate`](Self::estimate), to feed.
    pub(crate) fn estimate_mut(&mut self, i: usize, cut_off: bool) -> &mut SilentEstimate {
        if cut_off && self.known().get(DIMENSIONS[i]).is_some() {
            &mut self.share[i].estimate
        } else {
            &mut self.estimated[i]
        }
    }

    /// The limit of every dimension with its source, at `t` (an estimate
    /// probes upward over time, so it depends on the instant), for a
    /// process pacing at `share_permille` of the key's limits: the one
    /// place the beliefs are combined.
    ///
    /// The lower of configured and stated; an estimate fills only what
    /// neither states. A process cut off from its peers (a shared store
    /// unreachable: a share below 1,000) cannot know what the others send,
    /// so a stated limit is only a ceiling for it: until its own 429s have
    /// taught its [`Share`] it paces at its share of the stated limit, and
    /// then at what they taught (never above the stated limit). An
    /// estimate for a dimension nothing states is this process's own
    /// evidence and is never cut by the share.
    pub(crate) fn effective(
        &self,
        share_permille: u32,
        t: Instant,
    ) -> [Option<(u64, LimitSource)>; 4] {
        let cut_off = share_permille < 1000;
        std::array::from_fn(|i| {
            let configured = self.configured[i].believed(t).map(|b| b.limit);
            let stated = match (configured, self.stated[i].believed(t).map(|b| b.limit)) {
                (Some(c), Some(l)) if l < c => Some((l, LimitSource::Stated)),
                (Some(c), _) => Some((c, LimitSource::Configured)),
                (None, Some(l)) => Some((l, LimitSource::Stated)),
                (None, None) => None,
            };
            match stated {
                Some((l, src)) if cut_off => match self.share[i].believed(t) {
                    Some(_) => Some((
                        self.share[i].of(l, share_permille, t),
                        LimitSource::Estimated,
                    )),
                    None => Some((share_of(l, share_permille), src)),
                },
                Some((l, src)) => Some((self.others[i].of(l), src)),
                None => self.estimated[i]
                    .believed(t)
                    .map(|b| (b.limit, LimitSource::Estimated)),
            }
        })
    }
}

/// Limits from one value per dimension.
fn limits_of(f: impl Fn(usize) -> Option<u64>) -> Limits {
    let mut l = Limits::NONE;
    for (i, d) in DIMENSIONS.into_iter().enumerate() {
        l.set(d, f(i));
    }
    l
}

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
