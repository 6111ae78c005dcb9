//! Workspace-internal: used by ratewise's own crates; not part of the public API and not covered by semver.
//!
//! The spend budget's state machine: what the admission controller keeps
//! per queue for its [`SpendConfig`], and what `ratewise-run` keeps for a
//! run's `--budget-tokens`. Users configure a budget with [`SpendConfig`]
//! and read it with [`Controller::spend_totals`](crate::admit::Controller::spend_totals).

use crate::admit::spend::{SpendConfig, SpendTotals};
use crate::time::Instant;

/// The outcome of a spend check.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SpendCheck {
    /// It fits.
    Fits,
    /// It would fit once in-flight reservations settle: ask again later.
    InFlight,
    /// It cannot fit before the window ends.
    Spent {
        /// When the window resets (far past any reachable time without a
        /// window).
        until: Instant,
    },
}

/// The spend budget state: the one owner of what was spent and what is
/// reserved, for the admission controller and for a batch run alike.
/// Every sum saturates at `u64::MAX`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpendBudget {
    cfg: SpendConfig,
    window_index: u128,
    totals: SpendTotals,
}

impl SpendBudget {
    /// An empty budget.
    pub fn new(cfg: SpendConfig) -> Self {
        Self::starting_at(cfg, SpendTotals::default())
    }

    /// A budget that has already settled `spent` (earlier runs' usage, read
    /// back from where they kept it) in its first window. Only the settled
    /// figures are taken: nothing is outstanding in a fresh budget.
    ///
    /// ```
    /// use ratewise_core::admit::spend_budget::{SpendBudget, SpendCheck};
    /// use ratewise_core::admit::{SpendConfig, SpendTotals};
    /// use ratewise_core::Instant;
    /// let mut cfg = SpendConfig::cumulative();
    /// cfg.max_tokens = Some(1_000);
    /// // Earlier runs already spent 900 tokens.
    /// let spent = SpendTotals { settled_tokens: 900, ..SpendTotals::default() };
    /// let mut b = SpendBudget::starting_at(cfg, spent);
    /// assert_eq!(b.check(100, 0, Instant::ZERO), SpendCheck::Fits);
    /// assert!(matches!(b.check(101, 0, Instant::ZERO), SpendCheck::Spent { .. }));
    /// ```
    pub fn starting_at(cfg: SpendConfig, spent: SpendTotals) -> Self {
        SpendBudget {
            cfg,
            window_index: 0,
            totals: SpendTotals {
                settled_tokens: spent.settled_tokens,
                settled_micros: spent.settled_micros,
                ..SpendTotals::default()
            },
        }
    }

    /// The configuration.
    pub fn config(&self) -> &SpendConfig {
        &self.cfg
    }

    fn window_ns(&self) -> u128 {
        self.cfg.window.as_nanos().max(1)
    }

    fn roll(&mut self, now: Instant) {
        if !self.cfg.windowed() {
            return;
        }
        let w = now.since_origin().as_nanos() / self.window_ns();
        if w > self.window_index {
            self.window_index = w;
            self.totals.settled_tokens = 0;
            self.totals.settled_micros = 0;
        }
    }

    /// When the current window ends.
    pub(crate) fn window_end(&self, now: Instant) -> Instant {
        let w = now.since_origin().as_nanos() / self.window_ns();
        let end = (w + 1).saturating_mul(self.window_ns());
        Instant::from_origin(crate::admit::bucket::duration_from_nanos(end))
    }

    /// The totals of the window containing `now`.
    pub fn totals(&mut self, now: Instant) -> SpendTotals {
        self.roll(now);
        self.totals
    }

    /// Whether a reservation of `tokens` / `micros` worst case fits.
    pub fn check(&mut self, tokens: u64, micros: u64, now: Instant) -> SpendCheck {
        self.roll(now);
        let t = &self.totals;
        let spent = Self::over(self.cfg.max_tokens, t.settled_tokens, 0, 0)
            || Self::over(self.cfg.max_micros, t.settled_micros, 0, 0);
        let until = self.window_end(now);
        if spent {
            return SpendCheck::Spent { until };
        }
        if self.cfg.never_exceed {
            if Self::over(self.cfg.max_tokens, t.settled_tokens, 0, tokens)
                || Self::over(self.cfg.max_micros, t.settled_micros, 0, micros)
            {
                return SpendCheck::Spent { until };
            }
            if Self::over(
                self.cfg.max_tokens,
                t.settled_tokens,
                t.outstanding_tokens,
                tokens,
            ) || Self::over(
                self.cfg.max_micros,
                t.settled_micros,
                t.outstanding_micros,
                micros,
            ) {
                return SpendCheck::InFlight;
            }
        } else if Self::over(
            self.cfg.max_tokens,
            t.settled_tokens,
            t.outstanding_tokens,
            1,
        ) || Self::over(
            self.cfg.max_micros,
            t.settled_micros,
            t.outstanding_micros,
            1,
        ) {
            return SpendCheck::InFlight;
        }
        SpendCheck::Fits
    }

    /// `settled + outstanding + extra > max` (in never-exceed terms: does
    /// not fit); a spent budget is `settled >= max`, checked with extra 0 as
    /// `settled > max - 0`… so `max == settled` counts as spent.
    fn over(max: Option<u64>, settled: u64, outstanding: u64, extra: u64) -> bool {
        match max {
            None => false,
            Some(m) => {
                let used = u128::from(settled) + u128::from(outstanding);
                if extra == 0 {
                    used >= u128::from(m)
                } else {
                    used + u128::from(extra) > u128::from(m)
                }
            }
        }
    }

    /// Reserves a worst case.
    pub fn reserve(&mut self, tokens: u64, micros: u64, now: Instant) {
        self.roll(now);
        self.totals.outstanding_tokens = self.totals.outstanding_tokens.saturating_add(tokens);
        self.totals.outstanding_micros = self.totals.outstanding_micros.saturating_add(micros);
    }

    /// Drops a worst case (settled or released).
    pub fn unreserve(&mut self, tokens: u64, micros: u64, now: Instant) {
        self.roll(now);
        self.totals.outstanding_tokens = self.totals.outstanding_tokens.saturating_sub(tokens);
        self.totals.outstanding_micros = self.totals.outstanding_micros.saturating_sub(micros);
    }

    /// Adds actual usage to the window.
    pub fn settle(&mut self, tokens: u64, micros: u64, now: Instant) {
        self.roll(now);
        self.totals.settled_tokens = self.totals.settled_tokens.saturating_add(tokens);
        self.totals.settled_micros = self.totals.settled_micros.saturating_add(micros);
    }
}
