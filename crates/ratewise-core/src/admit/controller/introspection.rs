//! Introspection: read-only views of the controller for status pages,
//! metrics and tests — a scope's [`ScopeSnapshot`], the ledger, the retry
//! and spend budgets' counters, the next instant state changes by itself.
//!
//! Kept apart so that nothing here changes what the controller decides
//! (the `&mut self` ones only refill buckets to `now` before reading).

use super::{
    Bucket, Controller, EstimateState, Instant, Ledger, LimitSource, Limits, Now, ScopeId,
    SpendTotals, Stop, DIMENSIONS,
};

/// What one scope looks like now (for the CLI, tests and metrics).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScopeSnapshot {
    /// The key's name.
    pub key: String,
    /// The model class.
    pub class: String,
    /// Effective limits: configured ∧ stated by headers, and where
    /// neither gives one, the estimate from 429s.
    pub limits: Limits,
    /// Where each dimension's limit comes from (requests, input, output,
    /// combined): configured, stated by the provider's headers, or
    /// estimated from 429s alone; `None` where there is no limit.
    pub sources: [Option<LimitSource>; 4],
    /// Where each estimate from 429s stands (a cold lower bound, or
    /// measured between two 429s), whether or not it is in force: a
    /// stated or configured limit wins over it.
    pub estimates: [Option<EstimateState>; 4],
    /// Whole units a take could have now in each bucket (requests, input,
    /// output, combined): the lower of the pace and the credit.
    pub levels: [Option<i64>; 4],
    /// Whole units of the provider's credit, as modelled, in each bucket:
    /// what header sync corrects.
    pub credits: [Option<i64>; 4],
    /// The learned margin of each bucket, in whole units: kept free in the
    /// credit beyond each request's amount, because 429s showed the model
    /// above the provider's level.
    pub margins: [Option<u64>; 4],
    /// 429s on a dimension the model believed had room (surprises), per
    /// bucket, since the scope was created in this process.
    pub surprises: [u64; 4],
    /// The credit capacity of each bucket: what the provider's bucket is
    /// taken to hold.
    pub capacities: [Option<u64>; 4],
    /// Output tokens the last admitted request reserved (its `max_tokens`,
    /// which the providers charge when a request starts).
    pub output_reserved: Option<u64>,
    /// Ramp factor, per-mille.
    pub ramp_permille: u32,
    /// Pause end.
    pub paused_until: Option<Instant>,
    /// The key's stop.
    pub stopped: Option<Stop>,
    /// How long ago the beliefs it paces on were learned, while they are
    /// remembered ones (read back after a
    /// restart, not yet replaced by live evidence).
    pub remembered: Option<std::time::Duration>,
}

impl ScopeSnapshot {
    /// Advice a user can act on where the provider's own rule binds rather
    /// than ratewise: a request's `max_tokens` is charged in full when it
    /// starts (Anthropic: "estimated based on `max_tokens` at the
    /// beginning", see [`Profile`](crate::admit::Profile)), so when one reservation takes half the
    /// output bucket or more, at most one or two requests fit at once and
    /// the output limit is reached in reservations, not in tokens
    /// generated. `None` when nothing binds that way.
    ///
    /// ```
    /// # use ratewise_core::admit::{ScopeSnapshot, Limits};
    /// # let mut s = ScopeSnapshot {
    /// #     key: "k".into(), class: "c".into(), limits: Limits::NONE,
    /// #     sources: [None; 4], estimates: [None; 4],
    /// #     levels: [None; 4], credits: [None; 4], margins: [None; 4],
    /// #     surprises: [0; 4], capacities: [None, None, Some(1_667), None],
    /// #     output_reserved: Some(1_024), ramp_permille: 1000,
    /// #     paused_until: None, stopped: None, remembered: None,
    /// # };
    /// let advice = s.advice().unwrap();
    /// assert!(advice.contains("max_tokens 1024"), "{advice}");
    /// s.output_reserved = Some(400);
    /// assert_eq!(s.advice(), None);
    /// ```
    pub fn advice(&self) -> Option<String> {
        let cap = self.capacities[2]?;
        let reserved = self.output_reserved?;
        if cap == 0 || reserved.saturating_mul(2) < cap {
            return None;
        }
        let fit = cap / reserved.max(1);
        Some(format!(
            "max_tokens {reserved} reserves {}% of the output bucket ({cap} tokens): the provider \
             charges max_tokens when a request starts, so {fit} request(s) fit at once and the \
             output limit binds on reservations, not on tokens generated; a max_tokens closer \
             to the outputs you expect sends more at a time",
            reserved.saturating_mul(100) / cap
        ))
    }
}

impl Controller {
    /// (first attempts, retries) in the retry budget's window.
    pub fn retry_counts(&mut self, now: Now) -> (u64, u64) {
        self.retry.counts(now.instant)
    }

    /// The spend window's totals, when a spend budget is configured.
    pub fn spend_totals(&mut self, now: Now) -> Option<SpendTotals> {
        self.spend.as_mut().map(|s| s.totals(now.instant))
    }

    /// The reservation counters ([`Ledger::is_clean`]: every reservation
    /// ended, none twice).
    pub fn ledger(&self) -> Ledger {
        self.slab.ledger()
    }

    /// The next instant at which state changes by itself: a pause ends, a
    /// stop lifts, or a lease expires. Bucket waits are returned by
    /// [`admit`](Self::admit) itself. A fake-clock driver steps to the
    /// earliest of these and of the waits it was given.
    pub fn next_wakeup(&self, now: Now) -> Option<Instant> {
        let t = now.instant;
        let pauses = self.scopes.iter().filter_map(|s| s.paused_until);
        let stops = self
            .keys
            .iter()
            .filter_map(|k| k.stop.and_then(|s| s.until_instant));
        let lease = self.slab.oldest().map(|a| a + self.cfg.lease);
        pauses.chain(stops).chain(lease).filter(|x| *x > t).min()
    }

    /// What a scope looks like now.
    pub fn snapshot(&mut self, scope: ScopeId, now: Now) -> Option<ScopeSnapshot> {
        let s = self.scopes.get_mut(scope.0 as usize)?;
        let mut levels = [None; 4];
        let mut credits = [None; 4];
        let mut margins = [None; 4];
        let mut capacities = [None; 4];
        for (i, b) in s.buckets.iter_mut().enumerate() {
            levels[i] = b.as_mut().map(|b| b.level(now.instant));
            credits[i] = b.as_mut().map(|b| b.credit_level(now.instant));
            margins[i] = b.as_ref().map(|b| s.levels[i].margin(b, now.instant));
            capacities[i] = b.as_ref().map(Bucket::credit_capacity);
        }
        let key = &self.keys[s.key as usize];
        let eff = s.limits_at(now.instant, self.share_permille);
        let mut limits = Limits::NONE;
        for (i, d) in DIMENSIONS.into_iter().enumerate() {
            limits.set(d, eff[i].map(|(l, _)| l));
        }
        Some(ScopeSnapshot {
            key: key.name.clone(),
            class: s.class.clone(),
            limits,
            sources: eff.map(|e| e.map(|(_, src)| src)),
            estimates: std::array::from_fn(|i| {
                s.beliefs.estimate(i, self.share_permille < 1000).state()
            }),
            levels,
            credits,
            margins,
            surprises: s.surprises,
            capacities,
            output_reserved: s.output_reserved,
            remembered: s
                .remembered
                .map(|at| now.wall.duration_since(at).unwrap_or_default()),
            ramp_permille: s.ramp.permille(),
            paused_until: s.paused_until.filter(|p| *p > now.instant),
            stopped: key.stop.filter(|st| !st.expired(now.instant)),
        })
    }
}
