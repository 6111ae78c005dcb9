//! Per-minute limits of one (key, model class) bucket group, configured or
//! learned from `*-limit` headers.

use crate::parse::ratelimit::RateLimitSnapshot;
use crate::vocab::{Dimension, Provider};
use std::time::Duration;

/// The dimensions in bucket order: requests, input, output, combined.
pub(crate) const DIMENSIONS: [Dimension; 4] = [
    Dimension::Requests,
    Dimension::InputTokens,
    Dimension::OutputTokens,
    Dimension::Tokens,
];

/// Index of a dimension in [`DIMENSIONS`].
pub(crate) const fn index(d: Dimension) -> usize {
    match d {
        Dimension::Requests => 0,
        Dimension::InputTokens => 1,
        Dimension::OutputTokens => 2,
        Dimension::Tokens => 3,
    }
}

/// Limits per minute; `None` means "no local bucket for this dimension".
///
/// Written the way a provider's page states them:
///
/// ```
/// use ratewise_core::admit::Limits;
///
/// // Anthropic tier 1: 50 RPM, 30,000 ITPM, 8,000 OTPM.
/// let tier1 = Limits::per_minute().requests(50).input_tokens(30_000).output_tokens(8_000);
/// assert_eq!(tier1.requests, Some(50));
/// assert_eq!(tier1.tokens, None); // no combined bucket: none was named
///
/// // OpenAI: requests and combined tokens per minute.
/// let openai = Limits::per_minute().requests(500).tokens(200_000);
/// assert_eq!(openai.tokens, Some(200_000));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Limits {
    /// Requests per minute.
    pub requests: Option<u64>,
    /// Input tokens per minute (Anthropic ITPM).
    pub input_tokens: Option<u64>,
    /// Output tokens per minute (Anthropic OTPM).
    pub output_tokens: Option<u64>,
    /// Combined tokens per minute (OpenAI TPM).
    pub tokens: Option<u64>,
}

impl Limits {
    /// No limits at all: admission is only gated by stops, pauses and budgets.
    pub const NONE: Limits = Limits {
        requests: None,
        input_tokens: None,
        output_tokens: None,
        tokens: None,
    };

    /// No limit yet, each to be named per minute:
    /// `Limits::per_minute().requests(50).input_tokens(30_000)`. A
    /// dimension not named has no local bucket (its limit may still be
    /// learned from the provider's headers). The same as [`Limits::NONE`];
    /// the name says the unit, which the numbers that follow are in.
    pub const fn per_minute() -> Limits {
        Limits::NONE
    }

    /// These limits with `n` requests per minute (`0`: none).
    #[must_use]
    pub const fn requests(mut self, n: u64) -> Limits {
        self.requests = positive(n);
        self
    }

    /// These limits with `n` input tokens per minute (Anthropic ITPM;
    /// `0`: none).
    #[must_use]
    pub const fn input_tokens(mut self, n: u64) -> Limits {
        self.input_tokens = positive(n);
        self
    }

    /// These limits with `n` output tokens per minute (Anthropic OTPM;
    /// `0`: none).
    #[must_use]
    pub const fn output_tokens(mut self, n: u64) -> Limits {
        self.output_tokens = positive(n);
        self
    }

    /// These limits with `n` combined tokens per minute (OpenAI TPM;
    /// `0`: none).
    #[must_use]
    pub const fn tokens(mut self, n: u64) -> Limits {
        self.tokens = positive(n);
        self
    }

    /// The limit of one dimension.
    pub const fn get(&self, d: Dimension) -> Option<u64> {
        match d {
            Dimension::Requests => self.requests,
            Dimension::InputTokens => self.input_tokens,
            Dimension::OutputTokens => self.output_tokens,
            Dimension::Tokens => self.tokens,
        }
    }

    /// Sets the limit of one dimension (`0` is read as "none").
    pub fn set(&mut self, d: Dimension, v: Option<u64>) {
        let v = v.filter(|n| *n > 0);
        match d {
            Dimension::Requests => self.requests = v,
            Dimension::InputTokens => self.input_tokens = v,
            Dimension::OutputTokens => self.output_tokens = v,
            Dimension::Tokens => self.tokens = v,
        }
    }

    /// The limits published in a response's headers. Anthropic's
    /// `anthropic-ratelimit-tokens-*` is "the most restrictive" of input and
    /// output, not a combined bucket, so it is learned only from OpenAI-style
    /// (`x-ratelimit-*-tokens`) and generic responses.
    pub(crate) fn from_snapshot(snap: &RateLimitSnapshot, provider: Provider) -> Limits {
        let mut l = Limits::NONE;
        for d in DIMENSIONS
            .into_iter()
            .filter(|d| headers_describe(*d, provider))
        {
            l.set(d, snap.window(d).limit);
        }
        l
    }

    /// The effective limit: the lower of configured and learned, where both
    /// exist (a user may deliberately leave room for other tenants of the
    /// key; the server's word caps an optimistic configuration).
    pub(crate) fn combine(configured: &Limits, learned: &Limits) -> Limits {
        let mut out = Limits::NONE;
        for d in DIMENSIONS {
            let v = match (configured.get(d), learned.get(d)) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
            out.set(d, v);
        }
        out
    }
}

/// `n`, or none for `0`: as [`Limits::set`] reads a zero.
const fn positive(n: u64) -> Option<u64> {
    if n == 0 {
        None
    } else {
        Some(n)
    }
}

/// Whether `provider`'s rate-limit headers for `d` describe our bucket of
/// that dimension. Anthropic's `anthropic-ratelimit-tokens-*` is "the most
/// restrictive" of input and output, not a combined bucket: neither its
/// limit nor its remaining is read into the combined-tokens bucket.
pub(crate) fn headers_describe(d: Dimension, provider: Provider) -> bool {
    !(d == Dimension::Tokens && provider == Provider::Anthropic)
}

/// How much of a minute's refill each level of a bucket may hold: the
/// pace bursts (one for the requests bucket, one for the token buckets) and
/// the provider's credit.
///
/// The pace capacity of a dimension with limit `L`/min is `ceil(L · burst /
/// 60 s)`, at least 1. Requests default to five seconds: 60 RPM holds five
/// requests and then admits about one per second, never 60 at the top of
/// the minute. Tokens default to 20 seconds: one request carries thousands
/// of tokens, and a pace smaller than a typical request serialises every
/// large job behind a full refill (the simulation measured 0.69–0.88 of the
/// limit with a 1 s token burst, ≥ 0.95 with 20 s).
///
/// The credit is the provider's own bucket as modelled: what header sync
/// corrects. How much it holds is not documented: Anthropic says a
/// per-minute limit may be enforced over shorter intervals (60 RPM as one
/// request per second), and providers we did not write hold anything from
/// a second to a minute of refill. So the credit starts at
/// [`credit_start`](Burst::credit_start) (default 1 s of refill: the
/// shortest interval documented) and grows to what the server's
/// `*-remaining` shows it holds, never past [`credit`](Burst::credit)
/// (default 60 s: the minute Anthropic and OpenAI document as their
/// longest). A `*-remaining` is a lower bound on the capacity, so the
/// learned capacity is never more than the server's; guessing low only
/// costs a smaller burst, since the rate is the limit either way (a take
/// larger than the credit goes when it is full and leaves a debt). A full
/// learned credit — an idle key's, which the provider also holds — is
/// spent at the ramp's [peak](super::RampConfig::peak) rather than at once.
///
/// A single take larger than a capacity goes when that level is full and
/// leaves a debt, so over any window `w` a bucket admits, net of what is
/// given back, at most `min(credit + L·w/60 s, pace + P·L·w/60 s) +
/// max(0, largest take − c)`, where `P` is the peak factor and `c` the
/// effective pace capacity at the time (≥ 1; the capacity scaled by a ramp
/// below full rate). Requests always take 1, so for them the bound is
/// `min(credit + L·w/60 s, pace + P·L·w/60 s)`. The property tests check
/// exactly these bounds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Burst {
    /// Pace burst of the requests bucket.
    pub requests: Duration,
    /// Pace burst of the input, output and combined token buckets.
    pub tokens: Duration,
    /// The most the provider's bucket is taken to hold, however much its
    /// `*-remaining` shows (default 60 s of refill).
    pub credit: Duration,
    /// What the provider's bucket is taken to hold before a `*-remaining`
    /// shows more (default 1 s of refill). Set it to `credit` when the
    /// capacity is known to be a full `credit` (the old behaviour).
    pub credit_start: Duration,
}

impl Burst {
    /// The same pace burst for every bucket, with the default credit.
    pub const fn uniform(burst: Duration) -> Self {
        Burst {
            requests: burst,
            tokens: burst,
            credit: Duration::from_secs(60),
            credit_start: Duration::from_secs(1),
        }
    }

    /// This burst with a credit known to hold `credit` of refill from the
    /// start (a provider whose bucket capacity is documented or measured).
    pub const fn with_known_credit(mut self, credit: Duration) -> Self {
        self.credit = credit;
        self.credit_start = credit;
        self
    }

    /// The credit capacity, in units, of a bucket of `limit` per minute
    /// once the server has shown it holds at least `seen` units: at least
    /// [`credit_start`](Self::credit_start)'s worth, at most
    /// [`credit`](Self::credit)'s.
    pub(crate) fn credit_units(&self, limit: u64, seen: u64) -> u64 {
        let start = super::bucket::capacity_for(limit, self.credit_start);
        let most = super::bucket::capacity_for(limit, self.credit).max(start);
        seen.clamp(start, most)
    }

    /// The pace burst of one dimension.
    pub const fn of(&self, d: Dimension) -> Duration {
        match d {
            Dimension::Requests => self.requests,
            _ => self.tokens,
        }
    }
}

impl Default for Burst {
    fn default() -> Self {
        Burst {
            requests: Duration::from_secs(5),
            tokens: Duration::from_secs(20),
            credit: Duration::from_secs(60),
            credit_start: Duration::from_secs(1),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::parse::ratelimit::Window;

    #[test]
    fn per_minute_names_each_dimension() {
        let l = Limits::per_minute()
            .requests(50)
            .input_tokens(30_000)
            .output_tokens(8_000);
        assert_eq!(
            l,
            Limits {
                requests: Some(50),
                input_tokens: Some(30_000),
                output_tokens: Some(8_000),
                tokens: None,
            }
        );
        // A zero is no bucket, as `set` reads it.
        assert_eq!(Limits::per_minute().requests(0).tokens(0), Limits::NONE);
    }

    #[test]
    fn combine_takes_the_lower() {
        let c = Limits {
            requests: Some(100),
            tokens: Some(10),
            ..Limits::NONE
        };
        let l = Limits {
            requests: Some(50),
            input_tokens: Some(7),
            ..Limits::NONE
        };
        let e = Limits::combine(&c, &l);
        assert_eq!(e.requests, Some(50));
        assert_eq!(e.input_tokens, Some(7));
        assert_eq!(e.tokens, Some(10));
        assert_eq!(e.output_tokens, None);
    }

    #[test]
    fn anthropic_tokens_window_is_not_a_combined_bucket() {
        let snap = RateLimitSnapshot {
            tokens: Window {
                limit: Some(90_000),
                ..Window::default()
            },
            requests: Window {
                limit: Some(50),
                ..Window::default()
            },
            ..RateLimitSnapshot::default()
        };
        let a = Limits::from_snapshot(&snap, Provider::Anthropic);
        assert_eq!((a.requests, a.tokens), (Some(50), None));
        let o = Limits::from_snapshot(&snap, Provider::Openai);
        assert_eq!(o.tokens, Some(90_000));
    }
}
