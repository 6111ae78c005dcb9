//! Queue-wide spend budget: tokens and, with a user-supplied price table,
//! money, over fixed windows — or, [`SpendConfig::cumulative`], over no
//! window at all (a run's `--budget-tokens`, counted across its resumes
//! from a starting total).
//!
//! Money is counted in integer *micro-units* of the user's currency
//! (1 000 000 = one dollar, say); prices are per million tokens in the same
//! micro-units, so `$3 / MTok` is `3_000_000`. Costs round up.
//!
//! Committed spend = settled usage + the worst case of every outstanding
//! reservation. In never-exceed mode a request is admitted only if its own
//! worst case still fits under the budget on top of that, so the settled
//! spend can never pass the budget as long as actual usage stays within the
//! worst case. In soft mode a request is admitted while the committed spend
//! is below the budget.

use super::reservation::Amounts;
use crate::usage::Usage;
use std::time::Duration;

/// Prices per million tokens, in micro-units of currency.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Price {
    /// Uncached input.
    pub input: u64,
    /// Output.
    pub output: u64,
    /// Cache writes (input written to the prompt cache).
    pub cache_write: u64,
    /// Cache reads.
    pub cache_read: u64,
}

impl Price {
    /// The cost of actual usage, rounded up; saturating at `u64::MAX`
    /// (each product fits a `u128`, their sum of four may not).
    pub fn cost(&self, u: &Usage) -> u64 {
        let part = |tokens: u64, price: u64| u128::from(tokens) * u128::from(price);
        let micro_mtok = part(u.input_tokens, self.input)
            .saturating_add(part(u.output_tokens, self.output))
            .saturating_add(part(u.cache_creation_input_tokens, self.cache_write))
            .saturating_add(part(u.cache_read_input_tokens, self.cache_read));
        micro_mtok.div_ceil(1_000_000).min(u128::from(u64::MAX)) as u64
    }

    /// The worst-case cost of a reservation: every input token priced at
    /// the dearest input kind, every reserved output token at the output
    /// price. Any usage with `input + cache writes + cache reads ≤ input`
    /// and `output ≤ output` costs no more.
    pub(crate) fn worst_case(&self, a: &Amounts) -> u64 {
        let dearest = self.input.max(self.cache_write).max(self.cache_read);
        let micro_mtok = (u128::from(a.input) * u128::from(dearest))
            .saturating_add(u128::from(a.output) * u128::from(self.output));
        micro_mtok.div_ceil(1_000_000).min(u128::from(u64::MAX)) as u64
    }
}

/// Model name prefix → price; the longest prefix wins, else the fallback.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct PriceTable {
    entries: Vec<(String, Price)>,
    /// Price of models no entry matches; `None` leaves them unpriced (they
    /// count in the token budget only).
    pub fallback: Option<Price>,
}

impl PriceTable {
    /// Adds or replaces the price of a model prefix.
    pub fn set(&mut self, prefix: impl Into<String>, price: Price) {
        let prefix = prefix.into();
        match self.entries.iter_mut().find(|(p, _)| *p == prefix) {
            Some(e) => e.1 = price,
            None => self.entries.push((prefix, price)),
        }
    }

    /// The price of a model.
    pub(crate) fn price_of(&self, model: &str) -> Option<Price> {
        self.entries
            .iter()
            .filter(|(p, _)| model.starts_with(p.as_str()))
            .max_by_key(|(p, _)| p.len())
            .map(|(_, pr)| *pr)
            .or(self.fallback)
    }
}

/// Spend budget parameters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct SpendConfig {
    /// Length of a budget window; windows start at the caller's origin
    /// (`Instant::ZERO`) and follow each other. [`Duration::MAX`] is no
    /// window: the totals never reset ([`SpendConfig::cumulative`]).
    pub window: Duration,
    /// Tokens per window (all input incl. cache reads, plus output).
    pub max_tokens: Option<u64>,
    /// Money per window, in micro-units.
    pub max_micros: Option<u64>,
    /// Admit only if the worst case fits (default true).
    pub never_exceed: bool,
    /// How long a request that would fit once in-flight reservations settle
    /// is told to wait before asking again (default 1 s).
    pub recheck: Duration,
}

impl Default for SpendConfig {
    fn default() -> Self {
        SpendConfig {
            window: Duration::from_secs(24 * 3600),
            max_tokens: None,
            max_micros: None,
            never_exceed: true,
            recheck: Duration::from_secs(1),
        }
    }
}

impl SpendConfig {
    /// A budget with no window: what is settled counts forever (a batch
    /// run's token budget, which holds across the run's resumes).
    /// Never-exceed, no limit set yet.
    pub fn cumulative() -> Self {
        SpendConfig {
            window: Duration::MAX,
            ..SpendConfig::default()
        }
    }

    /// Whether the totals reset at each window's end.
    pub(crate) fn windowed(&self) -> bool {
        self.window != Duration::MAX
    }
}

/// Spend totals of the current window.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SpendTotals {
    /// Settled tokens this window.
    pub settled_tokens: u64,
    /// Settled money this window.
    pub settled_micros: u64,
    /// Worst case of outstanding reservations, tokens.
    pub outstanding_tokens: u64,
    /// Worst case of outstanding reservations, money.
    pub outstanding_micros: u64,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::admit::spend_budget::{SpendBudget, SpendCheck};
    use crate::time::Instant;

    #[test]
    fn prices_round_up_and_worst_case_bounds_actual() {
        let p = Price {
            input: 3_000_000,
            output: 15_000_000,
            cache_write: 3_750_000,
            cache_read: 300_000,
        };
        let u = Usage {
            input_tokens: 100,
            output_tokens: 10,
            cache_creation_input_tokens: 50,
            cache_read_input_tokens: 50,
        };
        assert_eq!(p.cost(&u), 300 + 150 + 188 + 15);
        let worst = p.worst_case(&Amounts {
            requests: 1,
            input: 200,
            output: 10,
        });
        assert!(worst >= p.cost(&u));
    }

    #[test]
    fn never_exceed_stops_when_worst_case_does_not_fit() {
        let mut b = SpendBudget::new(SpendConfig {
            window: Duration::from_secs(60),
            max_tokens: Some(100),
            ..SpendConfig::default()
        });
        let t = Instant::ZERO;
        assert_eq!(b.check(60, 0, t), SpendCheck::Fits);
        b.reserve(60, 0, t);
        assert_eq!(b.check(60, 0, t), SpendCheck::InFlight);
        b.unreserve(60, 0, t);
        b.settle(60, 0, t);
        assert_eq!(
            b.check(60, 0, t),
            SpendCheck::Spent {
                until: Instant::from_millis(60_000)
            }
        );
        assert_eq!(b.check(40, 0, t), SpendCheck::Fits);
        assert_eq!(
            b.check(60, 0, Instant::from_millis(60_000)),
            SpendCheck::Fits
        );
    }

    #[test]
    fn a_cost_of_huge_numbers_saturates() {
        let p = Price {
            input: u64::MAX,
            output: u64::MAX,
            cache_write: u64::MAX,
            cache_read: u64::MAX,
        };
        let u = Usage {
            input_tokens: u64::MAX,
            output_tokens: u64::MAX,
            cache_creation_input_tokens: u64::MAX,
            cache_read_input_tokens: u64::MAX,
        };
        assert_eq!(p.cost(&u), u64::MAX);
        let a = Amounts {
            requests: 1,
            input: u64::MAX,
            output: u64::MAX,
        };
        assert_eq!(p.worst_case(&a), u64::MAX);
    }

    fn cumulative(max_tokens: u64) -> SpendConfig {
        let mut cfg = SpendConfig::cumulative();
        cfg.max_tokens = Some(max_tokens);
        cfg
    }

    #[test]
    fn a_starting_total_counts_against_the_budget() {
        let spent = SpendTotals {
            settled_tokens: 900,
            settled_micros: 7,
            outstanding_tokens: 50,
            outstanding_micros: 50,
        };
        let mut b = SpendBudget::starting_at(cumulative(1_000), spent);
        let t = Instant::ZERO;
        // Only what was settled is taken: nothing is in flight yet.
        assert_eq!(
            b.totals(t),
            SpendTotals {
                settled_tokens: 900,
                settled_micros: 7,
                ..SpendTotals::default()
            }
        );
        assert_eq!(b.check(100, 0, t), SpendCheck::Fits);
        assert!(matches!(b.check(101, 0, t), SpendCheck::Spent { .. }));
        b.reserve(60, 0, t);
        assert_eq!(b.check(60, 0, t), SpendCheck::InFlight);
    }

    #[test]
    fn no_window_never_resets() {
        let mut b = SpendBudget::new(cumulative(100));
        b.settle(100, 0, Instant::ZERO);
        for at in [
            Instant::from_millis(24 * 3600 * 1000),
            Instant::from_millis(u64::MAX),
            Instant::from_origin(Duration::MAX),
        ] {
            assert_eq!(b.totals(at).settled_tokens, 100);
            assert!(matches!(b.check(1, 0, at), SpendCheck::Spent { .. }));
        }
        // A windowed budget does reset: the difference is the window.
        let mut w = SpendBudget::new(SpendConfig {
            window: Duration::from_secs(60),
            max_tokens: Some(100),
            ..SpendConfig::default()
        });
        w.settle(100, 0, Instant::ZERO);
        assert_eq!(w.totals(Instant::from_millis(60_000)).settled_tokens, 0);
    }

    #[test]
    fn sums_saturate_at_u64_max() {
        let spent = SpendTotals {
            settled_tokens: u64::MAX - 1,
            ..SpendTotals::default()
        };
        let mut b = SpendBudget::starting_at(cumulative(u64::MAX), spent);
        let t = Instant::ZERO;
        b.settle(u64::MAX, u64::MAX, t);
        b.reserve(u64::MAX, u64::MAX, t);
        b.reserve(u64::MAX, 1, t);
        let totals = b.totals(t);
        assert_eq!(totals.settled_tokens, u64::MAX);
        assert_eq!(totals.outstanding_tokens, u64::MAX);
        assert_eq!(totals.outstanding_micros, u64::MAX);
        assert!(matches!(b.check(u64::MAX, 0, t), SpendCheck::Spent { .. }));
        b.unreserve(u64::MAX, u64::MAX, t);
        assert_eq!(b.totals(t).outstanding_tokens, 0);
    }
}
