//! What each provider documents about its rate-limit signals: one
//! [`Profile`] per [`Provider`], every rule quoting where it comes from.
//!
//! The controller reads every header through its provider's profile, and
//! the mock provider (`ratewise-mock`) implements the same rules from the
//! same sources, so a rule that is wrong here is wrong in one place, and a
//! test against the mock can see it. Where a rule is inferred from an
//! example rather than stated in a sentence, its doc says so.
//!
//! A profile is the model; the model can still be wrong (a provider that
//! rounds differently, a bucket smaller than its headers imply, another
//! client on the key). That is what the learned margin is for: a 429 on a
//! dimension the controller believed had room is evidence, and the
//! controller keeps a margin from it (see the admission docs of
//! [`Controller`](super::Controller)).
//!
//! ```
//! use ratewise_core::admit::{Profile, Rounding};
//! use ratewise_core::Provider;
//! // Anthropic rounds token counts to the nearest thousand: 12,000 says
//! // the truth is somewhere in [11,500, 12,500).
//! let p = Profile::of(Provider::Anthropic);
//! assert_eq!(p.token_remaining, Rounding::Nearest(1000));
//! assert_eq!(p.token_remaining.range(12_000), (11_500, 12_500));
//! // Not a multiple of the step: exact.
//! assert_eq!(p.token_remaining.range(12_345), (12_345, 12_346));
//! // OpenAI documents no rounding.
//! assert_eq!(Profile::of(Provider::Openai).token_remaining.range(12_000), (12_000, 12_001));
//! ```

use crate::vocab::Provider;
use std::time::{Duration, SystemTime};

/// How a provider rounds a `*-remaining` value it reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rounding {
    /// The exact whole number of units left (rounded down to whole units).
    Exact,
    /// A multiple of the step may have been rounded down by up to one step:
    /// the truth is in `[r, r + step)`. Any other value is exact. What we
    /// assume of an API nobody documented ([`Provider::Generic`]): reading a
    /// value as rounded down is never too low.
    Down(u64),
    /// A multiple of the step is rounded to the nearest step: the truth is
    /// in `[r − step/2, r + step/2)`. Any other value is exact.
    Nearest(u64),
}

impl Rounding {
    /// The half-open range `[lo, hi)` of whole units a reported `r` allows.
    /// Never below zero; `hi > lo` always.
    pub fn range(self, r: u64) -> (u64, u64) {
        // A header may say anything up to `u64::MAX`: the range stays
        // non-empty there too (a reader clamps into it).
        let r = r.min(u64::MAX - 1);
        let exact = (r, r + 1);
        match self {
            Rounding::Exact => exact,
            Rounding::Down(step) if step > 1 && r.is_multiple_of(step) => {
                (r, r.saturating_add(step))
            }
            Rounding::Nearest(step) if step > 1 && r.is_multiple_of(step) => {
                let half = step / 2;
                (r.saturating_sub(half), r.saturating_add(step - half))
            }
            Rounding::Down(_) | Rounding::Nearest(_) => exact,
        }
    }
}

/// One provider's documented rules about its rate-limit signals.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Profile {
    /// Whose rules.
    pub provider: Provider,
    /// How token `*-remaining` values are rounded (request counts are
    /// exact for every provider).
    pub token_remaining: Rounding,
    /// How far a whole-second `*-reset` may be from the truth: a reset
    /// with no sub-second digits is read as up to this much early or late.
    /// A reset with sub-second digits is taken as given.
    pub reset_precision: Duration,
    /// A request answered 429 still counts against the per-minute request
    /// limit (its tokens do not).
    pub rejected_requests_count: bool,
    /// Output tokens are charged at `max_tokens` when a request starts and
    /// corrected to the actual output when it ends: a reservation must
    /// hold `max_tokens`, not a guess of the output.
    pub output_charged_from_max_tokens: bool,
    /// A per-minute limit may be enforced over a shorter interval: the
    /// bucket holds less than a minute of refill, and its capacity must be
    /// learned (see [`Burst`](super::Burst)).
    pub shorter_intervals: bool,
}

impl Profile {
    /// Anthropic Messages API, from <https://docs.anthropic.com/en/api/rate-limits>
    /// (now <https://platform.claude.com/docs/en/api/rate-limits>):
    ///
    /// * token `*-remaining`: "rounded to the nearest thousand" (the
    ///   response headers table) — [`Rounding::Nearest`]`(1000)`;
    /// * "OTPM rate limits are estimated based on `max_tokens` at the
    ///   beginning of each request, and the estimate is adjusted at the end
    ///   of the request to reflect the actual number of output tokens used"
    ///   — [`output_charged_from_max_tokens`](Self::output_charged_from_max_tokens).
    ///   The page has since changed: it now says OTPM limits "are evaluated
    ///   in real time as output tokens are produced" and that "the
    ///   `max_tokens` parameter does not factor into OTPM rate limit
    ///   calculations". Reserving `max_tokens` never sends into a 429 under
    ///   either reading and costs throughput under the new one; it is kept
    ///   until the change can be checked against the live API;
    /// * "your capacity is continuously replenished up to your maximum
    ///   limit, rather than being reset at fixed intervals" (the token
    ///   bucket algorithm) — every bucket refills continuously;
    /// * limits "may be enforced over shorter time intervals" ("60 RPM may
    ///   be enforced as 1 request per second") —
    ///   [`shorter_intervals`](Self::shorter_intervals);
    /// * `*-reset` is "in RFC 3339 format". Its precision is not stated;
    ///   the documentation's example is a whole-second instant, so a
    ///   whole-second reset is read as up to one second off (inferred from
    ///   that example, not from a sentence).
    ///
    /// A 429 is not said to count against the limit: rejected requests are
    /// taken as free.
    pub(crate) const ANTHROPIC: Profile = Profile {
        provider: Provider::Anthropic,
        token_remaining: Rounding::Nearest(1000),
        reset_precision: Duration::from_secs(1),
        rejected_requests_count: false,
        output_charged_from_max_tokens: true,
        shorter_intervals: true,
    };

    /// OpenAI, from <https://platform.openai.com/docs/guides/rate-limits>:
    ///
    /// * "unsuccessful requests contribute to your per-minute limit" (the
    ///   error mitigation section) — a 429 keeps its request unit
    ///   ([`rejected_requests_count`](Self::rejected_requests_count));
    /// * the `x-ratelimit-remaining-*` headers are documented without
    ///   rounding — [`Rounding::Exact`];
    /// * `x-ratelimit-reset-*` are durations ("the time until the rate
    ///   limit ... resets to its initial state", the example values `1s`
    ///   and `6m0s`); whole-second values are read as up to a second off
    ///   (inferred from those examples);
    /// * the token limit is charged from "the max of `max_tokens` and the
    ///   estimated number of tokens" of the request, so `max_tokens` is
    ///   reserved.
    pub(crate) const OPENAI: Profile = Profile {
        provider: Provider::Openai,
        token_remaining: Rounding::Exact,
        reset_precision: Duration::from_secs(1),
        rejected_requests_count: true,
        output_charged_from_max_tokens: true,
        shorter_intervals: true,
    };

    /// Any API that speaks RFC 9110 alone: nothing documented, so the
    /// careful reading — a round token count may have been rounded down by
    /// a thousand, a rejected request is free, resets are as precise as
    /// written.
    pub(crate) const GENERIC: Profile = Profile {
        provider: Provider::Generic,
        token_remaining: Rounding::Down(1000),
        reset_precision: Duration::from_secs(1),
        rejected_requests_count: false,
        output_charged_from_max_tokens: true,
        shorter_intervals: true,
    };

    /// The Gemini API: no rate-limit headers at all (its limits are
    /// learned from its 429s); a rejected request is not documented to
    /// count; nothing is charged from `max_tokens` (its TPM counts input).
    pub(crate) const GEMINI: Profile = Profile {
        provider: Provider::Gemini,
        token_remaining: Rounding::Down(1000),
        reset_precision: Duration::from_secs(1),
        rejected_requests_count: false,
        output_charged_from_max_tokens: false,
        shorter_intervals: true,
    };

    /// Amazon Bedrock: no rate-limit headers (its requests and tokens per
    /// minute are learned from its throttling answers); a throttled
    /// request is not documented to count.
    pub(crate) const BEDROCK: Profile = Profile {
        provider: Provider::Bedrock,
        token_remaining: Rounding::Down(1000),
        reset_precision: Duration::from_secs(1),
        rejected_requests_count: false,
        output_charged_from_max_tokens: true,
        shorter_intervals: true,
    };

    /// An OpenAI-compatible API that documents its headers' values but
    /// not their rounding, nor that a rejected request counts: exact
    /// `remaining`, rejected requests free, `max_tokens` reserved (Groq:
    /// "`max_tokens` ... counts towards your rate limit" at admission;
    /// the others charge like OpenAI).
    const fn openai_compatible(provider: Provider) -> Profile {
        Profile {
            provider,
            token_remaining: Rounding::Exact,
            reset_precision: Duration::from_secs(1),
            rejected_requests_count: false,
            output_charged_from_max_tokens: true,
            shorter_intervals: true,
        }
    }

    const AZURE: Profile = Profile::openai_compatible(Provider::Azure);
    const GROQ: Profile = Profile::openai_compatible(Provider::Groq);
    const MISTRAL: Profile = Profile::openai_compatible(Provider::Mistral);
    const DEEPSEEK: Profile = Profile::openai_compatible(Provider::Deepseek);
    const OPENROUTER: Profile = Profile::openai_compatible(Provider::Openrouter);
    const XAI: Profile = Profile::openai_compatible(Provider::Xai);

    /// The profile of `provider`.
    pub const fn of(provider: Provider) -> &'static Profile {
        match provider {
            Provider::Anthropic => &Profile::ANTHROPIC,
            Provider::Openai => &Profile::OPENAI,
            Provider::Generic => &Profile::GENERIC,
            Provider::Gemini => &Profile::GEMINI,
            Provider::Bedrock => &Profile::BEDROCK,
            Provider::Azure => &Profile::AZURE,
            Provider::Groq => &Profile::GROQ,
            Provider::Mistral => &Profile::MISTRAL,
            Provider::Deepseek => &Profile::DEEPSEEK,
            Provider::Openrouter => &Profile::OPENROUTER,
            Provider::Xai => &Profile::XAI,
        }
    }

    /// How far a reset value may be from the truth: a value with
    /// sub-second digits is as precise as written (a millisecond, the
    /// finest any provider prints); a whole-second one is up to
    /// [`reset_precision`](Self::reset_precision) off.
    pub fn reset_uncertainty(&self, reset: crate::parse::ratelimit::Reset) -> Duration {
        use crate::parse::ratelimit::Reset;
        let whole = match reset {
            Reset::At(t) => t
                .duration_since(SystemTime::UNIX_EPOCH)
                .is_ok_and(|d| d.subsec_nanos() == 0),
            Reset::After(d) => d.subsec_nanos() == 0,
        };
        if whole {
            self.reset_precision
        } else {
            Duration::from_millis(1)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::parse::ratelimit::Reset;

    #[test]
    fn nearest_rounding_bounds_the_truth_on_both_sides() {
        let n = Rounding::Nearest(1000);
        assert_eq!(n.range(0), (0, 500));
        assert_eq!(n.range(1000), (500, 1500));
        assert_eq!(n.range(999), (999, 1000));
        assert_eq!(Rounding::Down(1000).range(2000), (2000, 3000));
        assert_eq!(Rounding::Exact.range(2000), (2000, 2001));
        assert_eq!(
            n.range(u64::MAX - (u64::MAX % 1000)).0,
            u64::MAX - (u64::MAX % 1000) - 500
        );
        // Whatever a header says, the range is never empty.
        for r in [0, 1, 999, 1000, u64::MAX - 1, u64::MAX] {
            for rounding in [
                Rounding::Exact,
                Rounding::Down(1000),
                Rounding::Nearest(1000),
                Rounding::Down(5),
            ] {
                let (lo, hi) = rounding.range(r);
                assert!(hi > lo, "{rounding:?} {r}");
            }
        }
    }

    #[test]
    fn a_reset_is_as_precise_as_it_is_written() {
        let p = Profile::of(Provider::Anthropic);
        let whole = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        assert_eq!(
            p.reset_uncertainty(Reset::At(whole)),
            Duration::from_secs(1)
        );
        let ms = whole + Duration::from_millis(250);
        assert_eq!(p.reset_uncertainty(Reset::At(ms)), Duration::from_millis(1));
        let p = Profile::of(Provider::Openai);
        assert_eq!(
            p.reset_uncertainty(Reset::After(Duration::from_secs(6))),
            Duration::from_secs(1)
        );
        assert_eq!(
            p.reset_uncertainty(Reset::After(Duration::from_millis(20))),
            Duration::from_millis(1)
        );
    }
}
