//! Workspace-internal: used by ratewise's own crates; not part of the public API and not covered by semver.
//! (The multi-key pool the tower layer's `pool` drives.)
//!
//! A pool: several upstreams and keys used as one logical key.
//!
//! Each [`Member`] is an upstream, its provider profile, a key (its own
//! admission scope in the store: its buckets, learned or estimated
//! limits, pauses and stops) and a weight, with an optional model-name
//! mapping. A job's attempt goes to the member that can admit it
//! **soonest** — as that member's own admission predicts, never round
//! robin — with weights breaking ties and bounding each member's share
//! ([`choose()`]).
//!
//! * **Money or credentials stop a member, not the pool.** A spend cap,
//!   billing or authentication answer stops that member's key in the
//!   store (as it would alone); the job goes on with another member. The
//!   pool is stopped when every member is, with each member's evidence
//!   ([`PoolStopped`]).
//! * **A provider-wide overload** (529, 503 overloaded) holds that
//!   upstream and moves the job to a member of another upstream, now;
//!   with none, the job waits out its delay as it would alone.
//! * **One job, one budget.** A pooled job is one [`Job`]: one deadline,
//!   one count of attempts toward `max_attempts`, one place in the
//!   queue-wide retry budget (every member's scope lives in one store). A
//!   move to another member is the next attempt, never a new retry loop,
//!   and the [`Route`] names the member of every attempt.
//! * **Unknown stays where it was sent.** A request sent with no answer
//!   (it may have run) is never re-sent to another member: the route is
//!   pinned ([`Route::pinned`]).
//!
//! Sans-IO like the job machine it drives: the pool never touches the
//! store. What it needs to know about each member — stopped, or when it
//! could admit — comes in through an [`Outlook`] the driver reads
//! ([`Outlook::of`] for a [`Controller`](crate::admit::Controller)).
//!
//! # Driving a pooled job
//!
//! As a lone [`Job`], with three calls routed through the pool:
//! [`Pool::next`] instead of [`Job::next`], [`Pool::admission`] instead
//! of [`Job::admission`], and [`Pool::answered`] after
//! [`Job::applied`].
//!
//! ```
//! use ratewise_core::admit::{Config, Controller, Shared};
//! use ratewise_core::classify::{classify_response, ResponseView};
//! use ratewise_core::decide::Policy;
//! use ratewise_core::job::{Job, JobSpec, Step};
//! use ratewise_core::pool::{Member, Move, Outlook, Pool, PoolConfig};
//! use ratewise_core::{Action, Instant, Now, Provider};
//! use std::time::SystemTime;
//!
//! let mut config = Config::default();
//! config.seed = Some(1);
//! let store = Shared::new(Controller::new(config));
//! let mut pool = Pool::new(PoolConfig::default());
//! let anthropic = pool.add(Member::new("api.anthropic.com", Provider::Anthropic, "team-a"));
//! let bedrock = pool.add(
//!     Member::new("bedrock-us-east-1", Provider::Bedrock, "aws-team-a")
//!         .model("claude-sonnet-4-5", "anthropic.claude-sonnet-4-5-v1:0"),
//! );
//!
//! // A spend cap on the first member, seen by an earlier job: the store
//! // stops its key (as it would alone), and the pool reads that.
//! let now = Now::new(Instant::ZERO, SystemTime::UNIX_EPOCH);
//! let capped = store.target("team-a", "claude-sonnet-4-5");
//! store.lock().stop(capped.scope, ratewise_core::Cause::SpendCap, None, now);
//!
//! let policy = Policy::default();
//! let mut route = pool
//!     .route("claude-sonnet-4-5", |m, model| store.target(&m.key, model))
//!     .expect("a pool with members");
//! let mut job = Job::new(JobSpec::new(route.target(anthropic).unwrap(), now.instant), &policy);
//! let decision = loop {
//!     let outlook = |_, req: &_| Outlook::of(&mut store.lock(), req, now);
//!     let step = match pool.next(&mut route, &mut job, &policy, now, outlook) {
//!         Step::Admit(req) => pool.admission(&mut route, &mut job, store.admit(&req, now), &policy, now),
//!         other => other,
//!     };
//!     match step {
//!         Step::Send { .. } => {
//!             let member = pool.member(route.member());
//!             assert_eq!(member.model_for(route.model()), "anthropic.claude-sonnet-4-5-v1:0");
//!             job.sending();
//!             // ... the request goes out to `member.upstream`; a 200 comes back ...
//!             let headers = http::HeaderMap::new();
//!             let view = ResponseView { status: http::StatusCode::OK, headers: &headers, body: b"" };
//!             let c = classify_response(member.provider, &view, now.wall);
//!             let update = job.answered(&policy, &c, Some(&Default::default()), &mut fastrand::Rng::with_seed(7), now);
//!             let d = job.applied(store.apply(update, now), now);
//!             assert_eq!(pool.answered(&mut route, &mut job, &c, &d, &policy, now), Move::End);
//!         }
//!         Step::Wait { .. } | Step::Admit(_) | Step::Pending => continue,
//!         Step::End(end) => break end.decision,
//!     }
//! };
//! assert_eq!(decision.action, Action::Done);
//! // Nothing went to the capped member; the record names the member.
//! assert_eq!(route.attempts(), &[bedrock]);
//! assert!(store.ledger().is_clean());
//! ```

mod choose;
mod member;
mod route;
mod state;
#[cfg(test)]
mod tests;

pub use choose::{choose, Candidate, Shares};
pub use member::{Member, MemberId};
pub use route::{Move, Route};
pub use state::{MemberStopped, Outlook, PoolStopped};

use crate::admit::{Admission, AdmitRequest, Stop, Target, WaitReason};
use crate::classify::Classification;
use crate::decide::Policy;
use crate::decision::{Action, Decision};
use crate::job::{Job, Step, WaitFor};
use crate::time::{Instant, Now};
use crate::vocab::Cause;
use route::{move_for, Facts};
use state::PoolState;
use std::time::Duration;

/// How a pool chooses and holds.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct PoolConfig {
    /// Members ready within this much of the soonest are tied: weights
    /// and shares decide between them (default zero: only members ready
    /// at the same instant; no job waits for a weight).
    pub tie: Duration,
    /// Sends counted for each member's recent share (default 100).
    pub share_window: usize,
    /// An overloaded upstream's first hold (default 2 s); each overload
    /// in a row doubles it, a server's longer wait is kept whole.
    pub overload_hold: Duration,
    /// The longest overload hold (default 60 s).
    pub overload_hold_cap: Duration,
}

impl Default for PoolConfig {
    fn default() -> Self {
        PoolConfig {
            tie: Duration::ZERO,
            share_window: 100,
            overload_hold: Duration::from_secs(2),
            overload_hold_cap: Duration::from_secs(60),
        }
    }
}

/// Several members used as one logical key. See the [module docs](self).
#[derive(Debug, Clone)]
pub struct Pool {
    config: PoolConfig,
    members: Vec<Member>,
    state: PoolState,
    shares: Shares,
}

impl Pool {
    /// A pool with no members yet.
    pub fn new(config: PoolConfig) -> Self {
        Pool {
            shares: Shares::new(config.share_window),
            config,
            members: Vec::new(),
            state: PoolState::new(0),
        }
    }

    /// Adds a member; returns its number. At most 65,536 members: past
    /// that, the last number is returned again and the member is not
    /// added.
    pub fn add(&mut self, member: Member) -> MemberId {
        let Ok(id) = u16::try_from(self.members.len()) else {
            return MemberId(u16::MAX);
        };
        self.members.push(member);
        self.state.grow();
        MemberId(id)
    }

    /// Its members, in the order they were added.
    pub fn members(&self) -> &[Member] {
        &self.members
    }

    /// Every member's number, in the order they were added.
    pub fn ids(&self) -> impl Iterator<Item = MemberId> + '_ {
        (0..self.members.len()).map(|i| MemberId(i as u16))
    }

    /// Member `id`.
    ///
    /// # Panics
    /// When `id` is not one of this pool's.
    pub fn member(&self, id: MemberId) -> &Member {
        &self.members[id.index()]
    }

    /// The configuration.
    pub fn config(&self) -> &PoolConfig {
        &self.config
    }

    /// The recent sends per member.
    pub fn shares(&self) -> &Shares {
        &self.shares
    }

    /// The answer that last stopped member `m` (money, credentials), as
    /// this pool saw it: what a status page shows beside the store's stop.
    /// A member the store stopped before any answer of this pool's has
    /// none ([`stopped`](Self::stopped) then gives the store's word).
    pub fn stop_evidence(&self, m: MemberId) -> Option<&MemberStopped> {
        self.state.seen(m)
    }

    /// Until when `upstream` is held for an overload, if it is at `now`.
    pub fn overload_held(&self, upstream: &str, now: Instant) -> Option<Instant> {
        self.state.held(upstream, now)
    }

    /// A route for one job asking for `model`: each member's target,
    /// resolved by `resolve(member, its name for the model)` (the store's
    /// [`target`](crate::admit::Store::target) for the member's key).
    /// Start the job at any member's target — the first
    /// [`next`](Self::next) chooses. `None` for a pool with no member.
    pub fn route(
        &self,
        model: &str,
        mut resolve: impl FnMut(&Member, &str) -> Target,
    ) -> Option<Route> {
        if self.members.is_empty() {
            return None;
        }
        let targets = self
            .members
            .iter()
            .map(|m| resolve(m, m.model_for(model)))
            .collect();
        Some(Route::new(model, targets))
    }

    /// What the job does next, as [`Job::next`], once the pool has routed
    /// it: between sends, the job goes to the member that can admit it
    /// soonest (each member's [`Outlook`], from `outlook(member, the
    /// job's request for it)`); a job its member's stop ended goes on
    /// with another member while one is not stopped. A job that stays
    /// with its member keeps its own wait.
    pub fn next(
        &mut self,
        route: &mut Route,
        job: &mut Job,
        policy: &Policy,
        now: Now,
        outlook: impl FnMut(MemberId, &AdmitRequest) -> Outlook,
    ) -> Step {
        self.sync(route, job);
        if let Some(d) = job.ended() {
            let stopped = matches!(d.action, Action::StopQueue { .. });
            if !(stopped && self.can_fall_back(route, job, policy) && job.requeue(None)) {
                return job.next(now);
            }
        }
        self.reroute(route, job, now, outlook);
        job.next(now)
    }

    /// The store's answer to the [`Step::Admit`] just asked, as
    /// [`Job::admission`]. An answer that the member is stopped (another
    /// job's answer stopped it since the choice) does not end the job
    /// while another member is not known to be stopped: `Wait` until
    /// now, and the next [`next`](Self::next) chooses again.
    pub fn admission(
        &mut self,
        route: &mut Route,
        job: &mut Job,
        answer: Admission,
        policy: &Policy,
        now: Now,
    ) -> Step {
        let stop = match &answer {
            Admission::Stopped { cause, until } => Some(Stop {
                cause: *cause,
                until: *until,
                until_instant: until.map(|u| now.instant_at(u)),
            }),
            _ => None,
        };
        let step = job.admission(answer, policy, now);
        self.sync(route, job);
        if let (Some(stop), Step::End(_)) = (stop, &step) {
            route.stopped[route.current.index()] = Some(stop);
            if self.can_fall_back(route, job, policy) && job.requeue(None) {
                return Step::Wait {
                    until: now.instant,
                    reason: WaitFor::Admission(WaitReason::Queue),
                };
            }
        }
        step
    }

    /// The answer to the current member's attempt (`c`, classified) was
    /// applied and the job machine decided `d` ([`Job::applied`]; for a
    /// transport failure, after [`Job::failed`]). Records what it says
    /// about the member and its upstream (an overload hold, a stop's
    /// evidence, a request that may have run), and returns the
    /// [`Move`]. A member's stop with another member to go to brings the
    /// job back at once ([`Move::StopMember`]): the next
    /// [`next`](Self::next) routes it.
    pub fn answered(
        &mut self,
        route: &mut Route,
        job: &mut Job,
        c: &Classification,
        d: &Decision,
        policy: &Policy,
        now: Now,
    ) -> Move {
        self.sync(route, job);
        let m = route.current;
        let upstream = self.members[m.index()].upstream.clone();
        if c.cause == Cause::Overloaded {
            let hint = c.hints.wait.map(|h| h.wait);
            let (base, cap) = (self.config.overload_hold, self.config.overload_hold_cap);
            self.state
                .overloaded(&upstream, hint, base, cap, now.instant);
        } else if c.status.is_some() {
            self.state.answered(&upstream);
        }
        if c.cause == Cause::OutcomeUnknown || c.transport.is_some_and(|t| t.maybe_sent()) {
            route.pinned = true;
        }
        match d.action {
            // A provider-wide overload's delay holds every member of the
            // upstream for this job: with no other upstream to go to, it
            // waits as it would alone rather than hop between keys.
            Action::Retry { delay } if c.cause == Cause::Overloaded => {
                let until = now.instant + delay;
                for (i, member) in self.members.iter().enumerate() {
                    if member.upstream == upstream {
                        route.holds[i] = Some(route.holds[i].map_or(until, |h| h.max(until)));
                    }
                }
            }
            Action::Retry { delay } => route.holds[m.index()] = Some(now.instant + delay),
            Action::StopQueue { until } => {
                self.state.stopped_by(m, &upstream, c, until, now);
                route.stopped[m.index()] = Some(Stop {
                    cause: c.cause,
                    until,
                    until_instant: until.map(|u| now.instant_at(u)),
                });
            }
            _ => {}
        }
        let facts = Facts {
            pinned: route.pinned,
            other_member: route.other_member(),
            other_upstream: route
                .stopped
                .iter()
                .enumerate()
                .any(|(i, s)| s.is_none() && self.members[i].upstream != upstream),
            attempts_left: job.counted_attempts() < policy.max_attempts,
        };
        let mv = move_for(&d.action, c, facts);
        if mv == Move::StopMember && !job.requeue(None) {
            return Move::Stop;
        }
        mv
    }

    /// When every member was found stopped by this job: each member's
    /// evidence (the answer that stopped it, or the store's stop).
    pub fn stopped(&self, route: &Route) -> Option<PoolStopped> {
        if !route.all_stopped() {
            return None;
        }
        let members = route
            .stopped
            .iter()
            .enumerate()
            .filter_map(|(i, s)| {
                let m = MemberId(u16::try_from(i).ok()?);
                let stop = s.as_ref()?;
                Some(self.state.evidence(m, &self.members[i].upstream, stop))
            })
            .collect();
        Some(PoolStopped { members })
    }

    /// Records the member of attempts made since the last look.
    fn sync(&mut self, route: &mut Route, job: &Job) {
        while route.attempts.len() < job.attempts() as usize {
            route.attempts.push(route.current);
            self.shares.record(route.current);
        }
    }

    /// Whether a job its member's stop ended may go on with another.
    fn can_fall_back(&self, route: &Route, job: &Job, policy: &Policy) -> bool {
        !route.pinned && route.other_member() && job.counted_attempts() < policy.max_attempts
    }

    /// Between sends: moves the job to the member that can admit it
    /// soonest, when that is not its current one.
    fn reroute(
        &mut self,
        route: &mut Route,
        job: &mut Job,
        now: Now,
        mut outlook: impl FnMut(MemberId, &AdmitRequest) -> Outlook,
    ) {
        let t = now.instant;
        let req = job.admit_request();
        // (candidate, held by its upstream's overload until)
        let mut found: Vec<(Candidate, Option<Instant>)> = Vec::new();
        for (i, member) in self.members.iter().enumerate() {
            let id = MemberId(i as u16);
            if route.pinned && id != route.current {
                continue;
            }
            let mut r = req;
            r.target = route.targets[i];
            // A stop this job met stays met (an admission may see a stop
            // a prediction does not, a model class's), until it lifts by
            // itself; a human's resume reaches the job when its caller
            // brings it back and every member was stopped.
            if let Some(stop) = route.stopped[i] {
                if stop.until_instant.is_none_or(|u| t < u) {
                    continue;
                }
                route.stopped[i] = None;
            }
            let ready = match outlook(id, &r) {
                Outlook::Stopped(stop) => {
                    route.stopped[i] = Some(stop);
                    continue;
                }
                Outlook::Refused => continue,
                Outlook::At(at) => at.max(t),
                Outlook::Unknown => t,
            };
            let ready = route.holds[i].map_or(ready, |h| ready.max(h));
            found.push((
                Candidate {
                    member: id,
                    ready_at: ready,
                    weight: member.w(),
                },
                self.state.held(&member.upstream, t),
            ));
        }
        // An overload hold counts while a member of another upstream is
        // free of one: with every upstream overloaded, jobs wait as alone.
        let some_free = found.iter().any(|(_, held)| held.is_none());
        let candidates: Vec<Candidate> = found
            .into_iter()
            .map(|(mut c, held)| {
                if some_free {
                    c.ready_at = held.map_or(c.ready_at, |h| c.ready_at.max(h));
                }
                c
            })
            .collect();
        let Some(chosen) = choose(&candidates, &self.shares, self.config.tie) else {
            // Nothing eligible: the job stays where it is, and its
            // admission says why (a stop, a deadline). With every member
            // met stopped, the store is asked again: a member it no
            // longer says is stopped (a human resumed it) is eligible at
            // the next choice.
            if route.all_stopped() {
                for (i, stopped) in route.stopped.iter_mut().enumerate() {
                    let mut r = req;
                    r.target = route.targets[i];
                    if !matches!(outlook(MemberId(i as u16), &r), Outlook::Stopped(_)) {
                        *stopped = None;
                    }
                }
            }
            return;
        };
        let target = route.targets[chosen.index()];
        if chosen == route.current && job.spec().target == target {
            // It stays: its own wait (a retry's delay) stands.
            return;
        }
        let ready = candidates
            .iter()
            .find(|c| c.member == chosen)
            .map_or(t, |c| c.ready_at);
        if job.retarget(target, (ready > t).then_some(ready)) {
            route.current = chosen;
        }
    }
}
