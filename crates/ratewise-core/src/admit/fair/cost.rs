//! What a job costs its flow: the dominant share of the key's limits its
//! reservation takes (dominant resource fairness).
//!
//! Flows share a level by cost, not by request count: a flow of large
//! requests and a flow of small ones, equally weighted, get equal shares
//! of the limit that binds, not equal numbers of requests. With several
//! buckets (requests, input, output, combined tokens per minute) a job's
//! cost is its largest fraction of any one of them — the resource it
//! uses most — so a flow that saturates output tokens is charged for
//! output tokens even while it uses few requests.

use crate::admit::{Amounts, Limits};
use crate::Usage;

/// Cost in millionths of a per-minute limit (`1_000_000`: one whole
/// minute of the binding limit).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Cost(pub u64);

/// The unit of [`Cost`]: one whole per-minute limit.
pub const WHOLE_LIMIT: u64 = 1_000_000;

impl Cost {
    /// The dominant share of `limits` that `amounts` take: the largest of
    /// `amount / limit` over the buckets that have a limit, in millionths,
    /// rounded up (a job is never free: at least 1).
    ///
    /// With no limit known (cold start, a provider that states none) the
    /// cost falls back to the request's tokens (input + output) as if the
    /// limit were a million tokens per minute, and at least one: flows
    /// still share by size rather than by count, and the scale is the
    /// same order as a real token limit's, so costs charged before and
    /// after the limits are learned stay comparable.
    ///
    /// ```
    /// use ratewise_core::admit::fair::Cost;
    /// use ratewise_core::admit::{Amounts, Limits};
    ///
    /// let limits = Limits::per_minute().requests(100).output_tokens(10_000);
    /// // 1 % of the requests, 20 % of the output tokens: output dominates.
    /// let a = Amounts { requests: 1, input: 500, output: 2_000 };
    /// assert_eq!(Cost::dominant(&a, &limits), Cost(200_000));
    /// // No limits: the tokens.
    /// assert_eq!(Cost::dominant(&a, &Limits::NONE), Cost(2_500));
    /// ```
    pub fn dominant(amounts: &Amounts, limits: &Limits) -> Cost {
        let pairs = [
            (amounts.requests, limits.requests),
            (amounts.input, limits.input_tokens),
            (amounts.output, limits.output_tokens),
            (amounts.tokens(), limits.tokens),
        ];
        let mut best: Option<u64> = None;
        for (amount, limit) in pairs {
            if let Some(limit) = limit.filter(|l| *l > 0) {
                let share =
                    (u128::from(amount) * u128::from(WHOLE_LIMIT)).div_ceil(u128::from(limit));
                let share = u64::try_from(share).unwrap_or(u64::MAX);
                best = Some(best.map_or(share, |b| b.max(share)));
            }
        }
        Cost(best.unwrap_or_else(|| amounts.tokens()).max(1))
    }

    /// The cost of what a request was charged in the end (`usage`, its
    /// rate-limited input and its output, one request), as
    /// [`dominant`](Self::dominant) reads it.
    pub fn of_usage(usage: &Usage, limits: &Limits) -> Cost {
        let a = Amounts {
            requests: 1,
            input: usage.rate_limited_input(),
            output: usage.output_tokens,
        };
        Cost::dominant(&a, limits)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_dominant_bucket_sets_the_cost() {
        let l = Limits::per_minute()
            .requests(50)
            .input_tokens(30_000)
            .output_tokens(8_000);
        // 2 % of requests, 10 % of input, 12.5 % of output.
        let a = Amounts {
            requests: 1,
            input: 3_000,
            output: 1_000,
        };
        assert_eq!(Cost::dominant(&a, &l), Cost(125_000));
        // A combined bucket counts input and output together.
        let l = Limits::per_minute().tokens(10_000);
        assert_eq!(Cost::dominant(&a, &l), Cost(400_000));
    }

    #[test]
    fn a_job_is_never_free_and_never_overflows() {
        let zero = Amounts::default();
        assert_eq!(Cost::dominant(&zero, &Limits::NONE), Cost(1));
        assert_eq!(
            Cost::dominant(&zero, &Limits::per_minute().tokens(1)),
            Cost(1)
        );
        let huge = Amounts {
            requests: 1,
            input: u64::MAX,
            output: 0,
        };
        assert_eq!(
            Cost::dominant(&huge, &Limits::per_minute().input_tokens(1)),
            Cost(u64::MAX)
        );
    }

    #[test]
    fn usage_is_read_as_the_limits_count_it() {
        let l = Limits::per_minute().input_tokens(1_000);
        let u = Usage {
            input_tokens: 100,
            cache_creation_input_tokens: 100,
            cache_read_input_tokens: 500,
            ..Usage::default()
        };
        // Cache reads do not count toward the input limit.
        assert_eq!(Cost::of_usage(&u, &l), Cost(200_000));
    }
}
