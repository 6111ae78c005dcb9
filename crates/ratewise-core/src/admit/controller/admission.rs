//! Admission order: whether one request may go now, and when a queued one
//! will.
//!
//! [`Controller::admit`] checks in a fixed order — stop, deadline, retry
//! budget, pause, probe, buckets, spend budget — and only a request that
//! passes all of them takes from the buckets; [`Controller::predict`]
//! replays the same pace without taking anything. The order lives in one
//! place so that a reader can see why a request waits.

use super::{
    climbing, follow_estimates, grow_ramp, input_from_bytes, restart_ramp, silent_took, Admission,
    AdmitRequest, Amounts, Bucket, Cause, Config, Controller, CreditMark, Duration, GiveUpReason,
    Instant, Level, LimitSource, Now, Ramp, RampConfig, Reservation, SpendCheck, WaitReason,
    DIMENSIONS, IN_FLIGHT_RECHECK, PROBE_RECHECK,
};

impl Controller {
    /// Asks to send one request now.
    ///
    /// Order: stop → retry budget → pause → buckets → spend budget. A wait
    /// that would end past the request's deadline is `Refused(deadline)`.
    pub fn admit(&mut self, req: &AdmitRequest, now: Now) -> Admission {
        let t = now.instant;
        let Some(s) = self.scopes.get_mut(req.target.scope.0 as usize) else {
            return Admission::UnknownScope;
        };
        let key = &mut self.keys[s.key as usize];
        key.used = Some(t);
        if let Some(stop) = key.stop {
            if stop.expired(t) {
                key.stop = None;
                let ids = key.scopes.clone();
                for id in ids {
                    restart_ramp(&mut self.scopes[id as usize], &self.cfg.ramp, t);
                }
            } else {
                return Admission::Stopped {
                    cause: stop.cause,
                    until: stop.until,
                };
            }
        }
        let s = &mut self.scopes[req.target.scope.0 as usize];
        if let Some(cause) = s.class_stop {
            return Admission::Stopped { cause, until: None };
        }
        let deadline = req
            .deadline
            .map(|d| s.last_send(d, req.streamed, req.attempt_time));
        if deadline.is_some_and(|d| t > d) {
            // Past the last moment to send: the answer could not come in
            // time, whatever the buckets hold.
            return Admission::Refused {
                reason: GiveUpReason::Deadline,
                earliest: None,
            };
        }
        if req.is_retry && !req.paced && !self.retry.can_retry(t) {
            return Admission::Refused {
                reason: GiveUpReason::RetryBudget,
                earliest: None,
            };
        }
        let idle = s
            .last_call
            .is_some_and(|c| t.saturating_duration_since(c) > self.cfg.ramp.idle_after);
        s.last_call = Some(t);
        if let Some(p) = s.paused_until {
            if t < p {
                let jitter = jitter(&mut self.rng, self.cfg.pause_jitter);
                return wait_or_refuse(p + jitter, WaitReason::Paused, deadline);
            }
            s.paused_until = None;
        }
        let probing = s.needs_probe();
        if probing {
            let slab = &mut self.slab;
            s.probes.retain(|p| slab.is_live(*p));
            if s.probes.len() as u32 >= s.probe_cap {
                return wait_or_refuse(t + PROBE_RECHECK, WaitReason::Probe, deadline);
            }
        }
        if let Some(cap) = self.cfg.max_in_flight {
            let slab = &mut self.slab;
            let key = &mut self.keys[s.key as usize];
            key.in_flight.retain(|r| slab.is_live(*r));
            if key.in_flight.len() >= cap as usize {
                return wait_or_refuse(t + IN_FLIGHT_RECHECK, WaitReason::InFlight, deadline);
            }
        }
        if idle {
            restart_ramp(s, &self.cfg.ramp, t);
        } else {
            grow_ramp(s, &self.cfg.ramp, t);
        }
        follow_estimates(s, self.cfg.burst, self.share_permille, t);
        let takes = Takes::of(
            s,
            self.share_permille,
            &self.cfg.ramp,
            amounts_of(&self.cfg, req),
            t,
        );
        let amounts = takes.amounts;
        for b in s.buckets.iter_mut().flatten() {
            b.refill(t);
        }
        let wait = bucket_wait(&s.buckets, &s.levels, &takes, t)
            .map(|w| ramped_wait(&s.buckets, &s.levels, s.ramp, &self.cfg.ramp, &takes, t, w));
        if let Some((until, i)) = wait {
            return wait_or_refuse(until, WaitReason::Bucket(DIMENSIONS[i]), deadline);
        }
        let cost = req
            .target
            .price
            .and_then(|p| self.prices.get(p.index()))
            .map(|p| p.worst_case(&amounts))
            .unwrap_or(0);
        if let Some(sp) = &mut self.spend {
            match sp.check(amounts.tokens(), cost, t) {
                SpendCheck::Fits => sp.reserve(amounts.tokens(), cost, t),
                SpendCheck::InFlight => {
                    let until = t + sp.config().recheck;
                    return wait_or_refuse(until, WaitReason::SpendInFlight, deadline);
                }
                SpendCheck::Spent { until } => {
                    return Admission::Stopped {
                        cause: Cause::UserLimit,
                        until: Some(now.wall_at(until)),
                    }
                }
            }
        }
        let mut marks = [CreditMark::NONE; 4];
        for (i, b) in s.buckets.iter_mut().enumerate() {
            if let Some(b) = b {
                b.take_paced(amounts.by_index(i), takes.paced(i));
                marks[i] = s.levels[i].mark(b);
            }
            s.charged[i] = s.charged[i].wrapping_add(amounts.by_index(i));
        }
        silent_took(s, &amounts, t);
        if !req.is_retry {
            self.retry.record_first(t);
        } else if !req.paced {
            self.retry.record_retry(t);
        }
        let id = self
            .slab
            .insert(req.target.scope, amounts, takes.unpaced, cost, t);
        s.output_reserved = Some(amounts.output);
        if probing {
            s.probes.push(id);
        }
        if self.cfg.max_in_flight.is_some() {
            self.keys[s.key as usize].in_flight.push(id);
        }
        Admission::Go(Reservation {
            id,
            scope: req.target.scope,
            amounts,
            cost,
            price: req.target.price,
            admitted_at: t,
            streamed: req.streamed,
            marks,
            released: s.released.map(|r| r as u32),
            charged: s.charged.map(|c| c as u32),
        })
    }

    /// When a request with `ahead` requests like it queued before it (this
    /// process's FIFO for the scope) will have its turn, at the pace the
    /// buckets and the ramp will really go: `Wait { until, reason: Queue }`,
    /// or — when that is past its last moment to send — `Refused` with
    /// `give_up(deadline)` and `earliest`, so a job that cannot be sent in
    /// time is answered at once instead of at its deadline. Each job ahead
    /// is assumed to cost what this one does. Nothing is taken and nothing
    /// changes. `None` where there is nothing to predict: an unknown scope,
    /// a stop, a probe out into unknown limits (the head learns those), a
    /// limit estimated from 429s that is still climbing from its cold
    /// lower bound.
    pub fn predict(&self, req: &AdmitRequest, ahead: u32, now: Now) -> Option<Admission> {
        let t = now.instant;
        let s = self.scopes.get(req.target.scope.0 as usize)?;
        // Nor a limit estimated from 429s that is still a cold lower bound:
        // it climbs (doubling every 10 s of use) where the prediction
        // would hold it still, and a queue refused at the lower bound (a
        // silent key's first 429, 130 jobs ahead: "in 698 s", past the
        // SDK's 10 minutes) would have been done in four.
        if self.keys[s.key as usize]
            .stop
            .is_some_and(|stop| !stop.expired(t))
            || s.needs_probe()
            || climbing(s, self.share_permille, t)
        {
            return None;
        }
        let mut s = s.clone();
        grow_ramp(&mut s, &self.cfg.ramp, t);
        follow_estimates(&mut s, self.cfg.burst, self.share_permille, t);
        for b in s.buckets.iter_mut().flatten() {
            b.refill(t);
        }
        let one = Takes::of(
            &s,
            self.share_permille,
            &self.cfg.ramp,
            amounts_of(&self.cfg, req),
            t,
        );
        // The jobs ahead go first: each takes its amounts (a debt, when
        // the bucket has less), then this one waits for its own room, as
        // the head of the queue will.
        let n = u64::from(ahead);
        for (i, b) in s.buckets.iter_mut().enumerate() {
            if let Some(b) = b {
                b.take_paced(
                    one.amounts.by_index(i).saturating_mul(n),
                    one.paced(i).saturating_mul(n),
                );
            }
        }
        let paused = s.paused_until.filter(|p| *p > t);
        let bucket = bucket_wait(&s.buckets, &s.levels, &one, t)
            .map(|w| ramped_wait(&s.buckets, &s.levels, s.ramp, &self.cfg.ramp, &one, t, w).0);
        let until = match (paused, bucket) {
            (Some(p), Some(b)) => p.max(b),
            (p, b) => p.or(b).unwrap_or(t),
        };
        let deadline = req
            .deadline
            .map(|d| s.last_send(d, req.streamed, req.attempt_time));
        Some(wait_or_refuse(until, WaitReason::Queue, deadline))
    }
}

/// What `req` reserves: one request, its input estimate (the byte
/// heuristic without one), and the configured output estimate.
fn amounts_of(cfg: &Config, req: &AdmitRequest) -> Amounts {
    let input = req
        .input_estimate
        .unwrap_or_else(|| input_from_bytes(req.body_bytes));
    Amounts {
        requests: 1,
        input,
        output: cfg.output.output_estimate(req.max_tokens, input),
    }
}

/// What one request takes from each bucket: its [`Amounts`] from the
/// provider's credit, and from the pace the same less the part of its
/// reserved output the scope's answers say goes unused (see
/// [`Bucket::take_paced`]).
#[derive(Debug, Clone, Copy)]
pub(super) struct Takes {
    pub amounts: Amounts,
    /// Reserved output the pace is not charged: the reservation's output
    /// less the mean output the scope's answers used, where they used less.
    pub unpaced: u64,
}

impl Takes {
    /// The whole reservation stays on the pace while the pace must hold
    /// what the provider holds:
    ///
    /// * while the ramp climbs or has just reached its peak
    ///   (`Ramp::settled`): an acceleration limit
    ///   watches a key's use grow as the provider counts it, reservations
    ///   included (charged less from their first answers, the shipped
    ///   `cold-start` and `cold-key-5s` met one acceleration 429 each);
    /// * while an output or combined limit is estimated from 429s alone:
    ///   its credit is a guess of ten seconds of refill, not the provider's
    ///   bucket as its headers show it, so it cannot stand in for what the
    ///   provider holds (a silent key beside another client fell from 0.49
    ///   to 0.35 of the oracle's goodput without this rule);
    /// * while this process paces a share of a key whose other processes
    ///   it cannot see: the credit it models is the whole key's, and they
    ///   reserve from it unseen (three replicas without a store on exact
    ///   headers went from 2.4 % to 4.8 % of sends answered 429).
    fn of(
        s: &super::ScopeState,
        share: u32,
        ramp: &RampConfig,
        amounts: Amounts,
        t: Instant,
    ) -> Self {
        // The cheap checks first: the limits in force are worked out only
        // where a mean output would take part of the reservation off.
        let modelled = || {
            s.limits_at(t, share)
                .iter()
                .skip(2)
                .all(|l| !matches!(l, Some((_, LimitSource::Estimated))))
        };
        let expected = s
            .output_mean
            .filter(|m| *m < amounts.output)
            .filter(|_| share >= 1000 && s.ramp.settled(ramp, t) && modelled())
            .unwrap_or(amounts.output);
        Takes {
            amounts,
            unpaced: amounts.output - expected,
        }
    }

    /// The pace's take from bucket `i` (requests, input, output, combined).
    pub(crate) fn paced(&self, i: usize) -> u64 {
        let all = self.amounts.by_index(i);
        if holds_output(i) {
            all.saturating_sub(self.unpaced)
        } else {
            all
        }
    }
}

/// Whether bucket `i` (requests, input, output, combined) holds a
/// request's reserved output: the buckets whose pace is charged only the
/// expected part of it ([`Takes::paced`]) and the rest at the end.
pub(super) fn holds_output(i: usize) -> bool {
    i >= 2
}

fn wait_or_refuse(until: Instant, reason: WaitReason, deadline: Option<Instant>) -> Admission {
    if deadline.is_some_and(|d| until > d) {
        Admission::Refused {
            reason: GiveUpReason::Deadline,
            earliest: Some(until),
        }
    } else {
        Admission::Wait { until, reason }
    }
}

fn jitter(rng: &mut fastrand::Rng, max: Duration) -> Duration {
    let max_ns = u64::try_from(max.as_nanos()).unwrap_or(u64::MAX);
    if max_ns == 0 {
        Duration::ZERO
    } else {
        Duration::from_nanos(rng.u64(0..=max_ns))
    }
}

/// The latest of the buckets' waits for `amounts` (levels refilled to
/// `t`), with the bucket it is for; `None` when every bucket has room.
fn bucket_wait(
    buckets: &[Option<Bucket>; 4],
    levels: &[Level; 4],
    takes: &Takes,
    t: Instant,
) -> Option<(Instant, usize)> {
    let mut wait: Option<(Instant, usize)> = None;
    for (i, b) in buckets.iter().enumerate() {
        let wait_i = b.as_ref().and_then(|b| {
            let amount = takes.amounts.by_index(i);
            b.wait_for_paced(amount, takes.paced(i), levels[i].keep_free(b, t), t)
        });
        if let Some(w) = wait_i {
            if wait.is_none_or(|(x, _)| w > x) {
                wait = Some((w, i));
            }
        }
    }
    wait
}

/// The wait that will happen, not the wait at this instant's pace: while
/// the ramp is below its peak it grows at every calm step, and the pace
/// (rate and capacity) with it. A cold scope's first large request at the
/// start fraction — 1,024 output tokens at 10 % of 8,000 a minute — would
/// be predicted at 76.8 s, when the ramp reaches full rate within six
/// seconds and the request goes after about ten; a prediction that long
/// turned jobs away (a defer, a refused deadline) that could have waited.
/// Replays the ramp's steps on copies of the buckets until the wait ends
/// before the next step (at most 64 steps: the ramp is at its peak long
/// before). An acceleration 429 meanwhile cuts the ramp; the waiting job
/// then asks again and gets the longer wait.
fn ramped_wait(
    buckets: &[Option<Bucket>; 4],
    levels: &[Level; 4],
    ramp: Ramp,
    cfg: &RampConfig,
    takes: &Takes,
    t: Instant,
    first: (Instant, usize),
) -> (Instant, usize) {
    let mut wait = first;
    let Some(mut next) = ramp.next_step(cfg) else {
        return wait;
    };
    if wait.0 <= next {
        return wait;
    }
    // The provider's credit is not scaled by the ramp: its wait stands.
    let credit = buckets
        .iter()
        .enumerate()
        .filter_map(|(i, b)| {
            let b = b.as_ref()?;
            b.credit_wait_for(takes.amounts.by_index(i), levels[i].keep_free(b, t), t)
                .map(|w| (w, i))
        })
        .max();
    let mut buckets = buckets.clone();
    let mut ramp = ramp;
    for _ in 0..64 {
        let at = next.max(t);
        ramp.calm(cfg, at);
        for b in buckets.iter_mut().flatten() {
            b.set_permille(ramp.permille(), at);
        }
        wait = bucket_wait(&buckets, levels, takes, at).unwrap_or((at, wait.1));
        match ramp.next_step(cfg) {
            Some(n) if wait.0 > n => next = n,
            _ => break,
        }
    }
    match credit {
        Some(c) if c.0 > wait.0 => c,
        _ => wait,
    }
}
