//! Answers: what one classified answer does to the shared state — a 429's
//! surprise and the margin it teaches, pauses, ramp cuts, stops and
//! resumes — and [`Controller::apply`], which applies a whole job event
//! (evidence, then the reservation's end) in one step.
//!
//! Kept apart from header sync, which it calls: this file decides which
//! scopes an answer affects and for how long; header sync only reads
//! levels.

use super::{
    apply_ramp, estimated, headers_describe, index, restart_ramp, Action, Belief, CScope, Cause,
    Classification, Controller, Decision, Dimension, Instant, Now, Sample, ScopeId, Sent, Stop,
    SystemTime, DIMENSIONS,
};
use crate::admit::Applied;
use crate::RetryBudgetState;

/// A 429 the model did not expect, between its lowering and the margin's
/// learning.
#[derive(Debug, Clone, Copy)]
struct Surprise {
    /// Which bucket.
    bucket: usize,
    /// Its corrections total before the lowering.
    corrected: i128,
}

impl Controller {
    /// A 429 on the request admitted as `sent` is evidence: the provider's
    /// level on the dimension it names (with none named, or one this scope
    /// has no bucket for, the bucket that was most loaded at the send) was
    /// below this request's charge there. When the model believed it had
    /// room, the credit is lowered at once ([`Level::surprise`](crate::admit::belief::Level::surprise)); the
    /// margin learns after the 429's headers have had their say
    /// ([`learn_from_surprise`](Self::learn_from_surprise)).
    fn surprise(&mut self, sent: &Sent, named: Option<Dimension>, now: Now) -> Option<Surprise> {
        let share = self.share_permille;
        let s = self.scopes.get_mut(sent.scope.0 as usize)?;
        // A bucket paced at an estimate learns from its 429s through the
        // estimate (`silent`), not through a margin on top of it.
        let own: [bool; 4] = std::array::from_fn(|i| !estimated(s, i, share, now.instant));
        let has = |i: usize| own[i] && s.buckets[i].is_some() && sent.marks[i].get().is_some();
        let i = match named.map(index) {
            Some(i) if has(i) => i,
            _ => (0..4).filter(|i| has(*i)).min_by_key(|i| {
                s.buckets[*i]
                    .as_ref()
                    .map_or(i128::MAX, |b| s.levels[*i].room_permille(b, sent.marks[*i]))
            })?,
        };
        let b = s.buckets[i].as_mut()?;
        let level = &mut s.levels[i];
        let corrected = level.corrected_total();
        level.surprise(b, sent.amounts.by_index(i), sent.marks[i], now.instant)?;
        Some(Surprise {
            bucket: i,
            corrected,
        })
    }

    /// After a surprise and the 429's headers: the margin grows (by a step,
    /// [`Level::learn_margin`](crate::admit::belief::Level::learn_margin)); the surprise is counted; and a capacity
    /// hypothesis in use is taken back to what the headers proved. The
    /// proof itself is cut by all the model turned out to be over (never
    /// below the request) only on a surprise the margin in force did not
    /// prevent — one 429 may be a one-off — and it is held there while the
    /// margin lasts: headers that imply more than the provider holds would
    /// teach it again. A cut that was not needed (the level, not the
    /// capacity, was wrong) costs a smaller burst until the margin decays,
    /// never a 429.
    fn learn_from_surprise(&mut self, sent: &Sent, x: Surprise, now: Now) -> (Dimension, u64) {
        let t = now.instant;
        let burst = self.cfg.burst;
        let share = self.share_permille;
        let i = x.bucket;
        let Some(s) = self.scopes.get_mut(sent.scope.0 as usize) else {
            return (DIMENSIONS[i], 0);
        };
        let Some(b) = s.buckets[i].as_mut() else {
            return (DIMENSIONS[i], 0);
        };
        let level = &mut s.levels[i];
        let over = level.lowered_since(x.corrected);
        // A margin in force that did not prevent this surprise: the model
        // is wrong again, not once.
        let again = level.margin(b, t) > 0;
        level.learn_margin(b, t);
        s.surprises[i] = s.surprises[i].saturating_add(1);
        let surprised = Sample::Surprised {
            over,
            units: sent.amounts.by_index(i),
            again,
        };
        s.believe(burst, share, t, |b| {
            ((), b.stated[i].observe(&surprised).moved)
        });
        (DIMENSIONS[i], over)
    }

    /// Pauses a scope for every job until `until` (a 429's hint), and
    /// empties the limited dimension's bucket (all buckets when unknown) so
    /// that the backlog is released at the refill rate, not in a burst.
    pub fn pause(
        &mut self,
        scope: ScopeId,
        until: Instant,
        dimension: Option<Dimension>,
        now: Now,
    ) {
        self.pause_synced(scope, until, dimension, [false; 4], now);
    }

    /// [`pause`](Self::pause), leaving the credit of each bucket whose view
    /// the 429 itself reported (`synced`) to that view: only its pace is
    /// held ([`Bucket::hold_pace_until`]).
    fn pause_synced(
        &mut self,
        scope: ScopeId,
        until: Instant,
        dimension: Option<Dimension>,
        synced: [bool; 4],
        now: Now,
    ) {
        let t = now.instant;
        let Some(s) = self.scopes.get_mut(scope.0 as usize) else {
            return;
        };
        s.paused_until = Some(s.paused_until.map_or(until, |p| p.max(until)));
        for (i, b) in s.buckets.iter_mut().enumerate() {
            if let Some(b) = b {
                if synced[i] {
                    b.hold_pace_until(until, t);
                } else if dimension.is_none_or(|d| index(d) == i) {
                    b.drain_until(until, t);
                }
            }
        }
    }

    /// An acceleration 429: cuts the scope's ramp factor.
    pub(crate) fn slow_down(&mut self, scope: ScopeId, now: Now) {
        if let Some(s) = self.scopes.get_mut(scope.0 as usize) {
            s.ramp.slow_down(&self.cfg.ramp, now.instant);
            apply_ramp(s, now.instant);
        }
    }

    /// Stops the scope's key (every class on it).
    pub fn stop(&mut self, scope: ScopeId, cause: Cause, until: Option<SystemTime>, now: Now) {
        let Some(s) = self.scopes.get(scope.0 as usize) else {
            return;
        };
        let stop = Stop {
            cause,
            until,
            until_instant: until.map(|u| now.instant_at(u)),
        };
        let key = &mut self.keys[s.key as usize];
        match &mut key.stop {
            Some(existing) => existing.merge(stop),
            None => key.stop = Some(stop),
        }
    }

    /// Applies what one response said to the shared state, and returns the
    /// decision with notes on what it did:
    ///
    /// * rate-limit headers sync the buckets ([`sync_headers`](Self::sync_headers));
    /// * a `rate_limited` response with a wait hint pauses the bucket (the
    ///   key's buckets when the scope is `key`) for every job until the hint
    ///   passes ([`pause`](Self::pause));
    /// * an `acceleration_limited` response cuts the ramp of the key's
    ///   scopes (its ramp is slowed down), and pauses them on a hint;
    /// * a `stop_queue` decision stops the key with its `until`
    ///   ([`stop`](Self::stop)).
    ///
    /// The decision's action is never changed: what the queue-wide retry
    /// budget means for a job is [`decide`](crate::decide::decide)'s to
    /// say, and [`apply`](Self::apply) hands it the budget's state.
    ///
    /// An answer to an admitted request ([`Observed::of_sent`](crate::admit::Observed::of_sent))
    /// has its header view read against the credit at that admission;
    /// prefer it whenever the answer belongs to one.
    ///
    /// Reconciling the reservation stays with the caller, who holds it:
    /// `settle` on `done` (and on any response with usage), `release` when
    /// nothing was sent, `hold_unknown` on `hold_unknown`. [`apply`](Self::apply)
    /// does both in one step.
    pub fn observe(&mut self, o: &crate::admit::Observed, now: Now) -> Decision {
        self.observe_view(
            o.scope,
            o.sent.as_ref(),
            &o.classification,
            o.decision.clone(),
            now,
        )
    }

    fn observe_view(
        &mut self,
        scope: ScopeId,
        sent: Option<&Sent>,
        c: &Classification,
        mut d: Decision,
        now: Now,
    ) -> Decision {
        if let (Some(sent), Some(_)) = (sent, c.status) {
            // An answer's head came: how long that took, per kind of answer.
            let took = now.instant.saturating_duration_since(sent.admitted_at);
            if let Some(s) = self.scopes.get_mut(scope.0 as usize) {
                s.learn_head_latency(took, sent.streamed);
            }
        }
        // The 429 itself first: what it proves, then what its headers say;
        // the margin learns from both.
        let mut surprised = None;
        if let (Cause::RateLimited, Some(sent), true) = (c.cause, sent, self.cfg.learn_margins) {
            surprised = self.surprise(sent, c.dimension, now);
        }
        if !c.hints.ratelimit.is_empty() {
            // Only a success was charged; an error answer's view is of the
            // bucket without it.
            let charged = c.cause == Cause::Success;
            self.sync_view(scope, sent, charged, &c.hints.ratelimit, c.provider, now);
        }
        if let (Some(sent), Some(x)) = (sent, surprised) {
            let (dim, over) = self.learn_from_surprise(sent, x, now);
            d.notes.push(
                format!(
                    "admission: {} 429 where the model was {over} over the provider's level; margin learned",
                    dim.as_str()
                )
                .into(),
            );
        }
        // A dimension no header states learns from the 429 itself; a limit
        // of someone else's (an aggregator's upstream) teaches nothing.
        let ours = c.scope != crate::vocab::Scope::Provider;
        if let (Cause::RateLimited, Some(sent), true) = (c.cause, sent, ours) {
            if let Some(note) = self.learn_from_silence(scope, sent, c, now) {
                d.notes.push(note.into());
            }
        }
        // The probe's question is answered by any success, and by any
        // answer that carried rate-limit headers; an error without them
        // (a gateway's 502) says nothing about the limits.
        if c.cause == Cause::Success || !c.hints.ratelimit.is_empty() {
            if let Some(s) = self.scopes.get_mut(scope.0 as usize) {
                s.heard = true;
                if c.cause == Cause::Success {
                    self.keys[s.key as usize].succeeded = true;
                    // Slow start: one more request out per success
                    // while no limit is known, at most `e`-fold per
                    // `SLOW_START_EFOLD` (at the provider's first 429
                    // every request out is answered 429 too); a stated
                    // limit ends it at once.
                    s.slow_start_success(now.instant);
                }
            }
        }
        if c.cause == Cause::RateLimited {
            if let Some(s) = self.scopes.get_mut(scope.0 as usize) {
                if s.needs_probe() {
                    // A 429 that taught no estimate yet: fewer out at once.
                    s.slow_start_halve(now.instant);
                }
            }
        }
        let affected = match c.scope {
            CScope::Key | CScope::Provider => self.scopes_on_key(scope),
            CScope::Bucket | CScope::Request => vec![scope],
        };
        let hint_end = c.hints.wait.map(|h| now.instant + h.wait);
        match c.cause {
            Cause::RateLimited => {
                if let Some(until) = hint_end {
                    // The answer's own view corrected those credits, and
                    // a surprise corrected its bucket to what the 429
                    // proves: their pace alone is held to the hint, so the
                    // wait is the longer of the hint and the evidence.
                    let mut synced = [false; 4];
                    for d in DIMENSIONS {
                        let w = c.hints.ratelimit.window(d);
                        synced[index(d)] = headers_describe(d, c.provider)
                            && (w.remaining.is_some() || w.reset.is_some());
                    }
                    if let Some(x) = surprised {
                        synced[x.bucket] = true;
                    }
                    for s in &affected {
                        let own = if *s == scope { synced } else { [false; 4] };
                        self.pause_synced(*s, until, c.dimension, own, now);
                    }
                    d.notes.push(
                        format!(
                            "admission: bucket paused for every job for {} ms",
                            (until - now.instant).as_millis()
                        )
                        .into(),
                    );
                }
            }
            Cause::AccelerationLimited => {
                for s in self.scopes_on_key(scope) {
                    self.slow_down(s, now);
                    if let Some(until) = hint_end {
                        self.pause(s, until, None, now);
                    }
                }
                if let Some(s) = self.scopes.get(scope.0 as usize) {
                    d.notes
                        .push(format!("admission: rate cut to {}%", s.ramp.permille() / 10).into());
                }
            }
            _ => {}
        }
        if let Action::StopQueue { until } = d.action {
            if c.scope == crate::vocab::Scope::Bucket {
                if let Some(s) = self.scopes.get_mut(scope.0 as usize) {
                    s.class_stop = Some(c.cause);
                }
                d.notes
                    .push("admission: this model class stopped (the key's others go on)".into());
            } else {
                self.stop(scope, c.cause, until, now);
                d.notes.push("admission: key stopped".into());
            }
        }
        d
    }

    /// Applies one job event ([`Update`](crate::admit::Update)) in one step: the
    /// answer's evidence first ([`observe`](Self::observe)), then the
    /// reservation's end ([`settle`](Self::settle) or
    /// [`release`](Self::release)). Behind one lock this leaves no window
    /// in which capacity is back but the pause the same answer reported is
    /// not yet in force. Returns the amended decision when the update
    /// carried an answer.
    ///
    /// The event is taken by reference: a store that runs an operation on
    /// a copy of the controller may have to run the same event again on a
    /// fresher record when its compare-and-set loses (`ratewise-redis`).
    /// On one controller, apply an event once: the reservation it ends is
    /// gone after the first, and a second end is refused and counted in
    /// [`Ledger::refused_ends`](crate::admit::Ledger::refused_ends).
    pub fn apply(&mut self, update: &crate::admit::Update, now: Now) -> Option<Applied> {
        let applied = update.observed.as_ref().map(|o| {
            let mut d = self.observe(o, now);
            let budget = self.retry_budget_state(&mut d, now);
            Applied::new(d, budget)
        });
        if let Some(end) = &update.end {
            self.end(end, now);
        }
        applied
    }

    /// The retry budget's state for an answer decided `d`, the input
    /// [`decide`](crate::decide::decide) reads; when `d` is a retry (or a
    /// deferral, a retry later) and the budget is spent, a note says by
    /// how much.
    fn retry_budget_state(&mut self, d: &mut Decision, now: Now) -> RetryBudgetState {
        if self.retry.can_retry(now.instant) {
            return RetryBudgetState::Available;
        }
        if matches!(d.action, Action::Retry { .. } | Action::Defer { .. }) {
            let (firsts, retries) = self.retry.counts(now.instant);
            d.notes.push(
                format!(
                    "retry budget: {retries} retries for {firsts} first attempts in the window"
                )
                .into(),
            );
        }
        RetryBudgetState::Spent
    }

    /// Lifts a key's stop (a human resumed): its scopes restart the ramp.
    pub fn resume(&mut self, key: &str, now: Now) {
        let key = self.key_name(key).to_owned();
        let Some(k) = self.key_index.get(key.as_str()).copied() else {
            return;
        };
        let ks = &mut self.keys[k as usize];
        ks.stop = None;
        for id in ks.scopes.clone() {
            let s = &mut self.scopes[id as usize];
            s.class_stop = None;
            restart_ramp(s, &self.cfg.ramp, now.instant);
        }
    }
}
