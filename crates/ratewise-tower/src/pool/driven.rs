//! A pooled job as the layer drives it: the core's [`Pool`](CorePool)
//! shared by every call, one [`Route`] per job, and the store's answers
//! read for each member before the pool chooses.

use super::{Pool, PoolMember};
use crate::error::BoxError;
use crate::State;
use bytes::Bytes;
use http::request::Parts;
use ratewise_core::admit::{Admission, Target};
use ratewise_core::classify::Classification;
use ratewise_core::decide::Policy;
use ratewise_core::job::{Job, Step};
use ratewise_core::pool::{MemberId, Move, Outlook, Pool as CorePool, Route};
use ratewise_core::{Decision, Now, Provider};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};

/// What every call of a pooled layer shares.
pub(crate) struct PoolShared {
    core: Mutex<CorePool>,
    pub(crate) members: Vec<PoolMember>,
    /// Sends made to each member since the layer was made.
    pub(crate) sends: Vec<AtomicU64>,
    /// The model of the last job routed: which scope a status page reads
    /// each member's stop from.
    pub(crate) last_model: Mutex<String>,
}

impl PoolShared {
    pub(crate) fn new(pool: Pool) -> Self {
        let mut core = CorePool::new(pool.config);
        for m in &pool.members {
            core.add(m.member.clone());
        }
        PoolShared {
            sends: pool.members.iter().map(|_| AtomicU64::new(0)).collect(),
            members: pool.members,
            core: Mutex::new(core),
            last_model: Mutex::new(String::new()),
        }
    }

    pub(crate) fn core(&self) -> MutexGuard<'_, CorePool> {
        self.core.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// One pooled job's route, and the pool it goes through.
pub(crate) struct Pooled {
    shared: std::sync::Arc<PoolShared>,
    route: Route,
}

impl Pooled {
    /// The route of a job asking for `model`: every member's target in
    /// the store. `None` for a pool with no member.
    pub(crate) async fn start(
        shared: std::sync::Arc<PoolShared>,
        state: &dyn State,
        model: &str,
    ) -> Option<Pooled> {
        let mut targets = Vec::with_capacity(shared.members.len());
        for m in &shared.members {
            let core = &m.member;
            targets.push(state.target(&core.key, core.model_for(model)).await);
        }
        *shared.last_model.lock().unwrap_or_else(|e| e.into_inner()) = model.to_owned();
        let mut targets = targets.into_iter();
        let route = shared
            .core()
            .route(model, |_, _| targets.next().expect("one target per member"))?;
        Some(Pooled { shared, route })
    }

    /// The target the job starts at (the first member's: the first
    /// [`next`](Self::next) chooses).
    pub(crate) fn first_target(&self) -> Target {
        self.route.targets()[0]
    }

    /// What the job does next, once the pool has routed it (see
    /// [`CorePool::next`]): each member's outlook read from the store
    /// first.
    pub(crate) async fn next(
        &mut self,
        job: &mut Job,
        policy: &Policy,
        state: &dyn State,
        now: Now,
    ) -> Step {
        let req = job.admit_request();
        let mut outlooks = Vec::with_capacity(self.route.targets().len());
        for target in self.route.targets() {
            let mut r = req;
            r.target = *target;
            let stop = state
                .snapshot(target.scope, now)
                .await
                .and_then(|s| s.stopped);
            let prediction = match stop {
                Some(_) => None,
                None => state.predict(r, 0, now).await,
            };
            outlooks.push(Outlook::from_answers(stop, prediction, now));
        }
        self.shared
            .core()
            .next(&mut self.route, job, policy, now, |m, _| {
                outlooks[m.index()]
            })
    }

    /// The store's answer to the admission just asked ([`CorePool::admission`]).
    pub(crate) fn admission(
        &mut self,
        job: &mut Job,
        answer: Admission,
        policy: &Policy,
        now: Now,
    ) -> Step {
        self.shared
            .core()
            .admission(&mut self.route, job, answer, policy, now)
    }

    /// The answer to the current member's attempt, applied and decided
    /// ([`CorePool::answered`]).
    pub(crate) fn answered(
        &mut self,
        job: &mut Job,
        c: &Classification,
        d: &Decision,
        policy: &Policy,
        now: Now,
    ) -> Move {
        self.shared
            .core()
            .answered(&mut self.route, job, c, d, policy, now)
    }

    fn current(&self) -> &PoolMember {
        &self.shared.members[self.route.member().index()]
    }

    /// Rewrites the attempt's request for the member it goes to, and
    /// counts the send.
    pub(crate) fn prepare(&self, parts: &mut Parts, body: &mut Bytes) -> Result<(), BoxError> {
        let member = self.current();
        let model = member.member.model_for(self.route.model());
        member.route.prepare(parts, body, model)?;
        self.shared.sends[self.route.member().index()].fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    /// How the current member's answers are read.
    pub(crate) fn provider(&self) -> Provider {
        self.current().member.provider
    }

    /// The label of the member attempt `attempt` went to (the current one
    /// when it is the attempt being made).
    pub(crate) fn label_of(&self, attempt: u32) -> String {
        let m = self
            .route
            .member_of(attempt)
            .unwrap_or_else(|| self.route.member());
        self.label(m)
    }

    fn label(&self, m: MemberId) -> String {
        self.shared.members[m.index()].label()
    }
}
