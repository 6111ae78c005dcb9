//! One store operation as a value: what is asked, when, and where the
//! answer goes. Operations are applied by reference, so a batch whose
//! write lost the race can be applied again to the fresh record.

use ratewise_core::admit::{
    Admission, AdmitRequest, Applied, Controller, ScopeId, ScopeSnapshot, Target, Update,
};
use ratewise_core::{Cause, Now};
use std::time::SystemTime;
use tokio::sync::oneshot;

/// What is asked.
#[derive(Debug)]
pub(crate) enum Request {
    /// Resolve (key, model): local, no round trip.
    Target {
        key: String,
        model: String,
    },
    /// Release this process's reservations past their lease: local (see
    /// [`RedisStore::expire`](crate::RedisStore::expire)).
    Expire,
    /// Answered once every operation queued before it is applied.
    Flush,
    Admit(AdmitRequest),
    Update(Box<Update>),
    Resume(String),
    /// Forget what the key learned (`Controller::forget_beliefs`).
    Forget(String),
    Stop {
        key: String,
        cause: Cause,
        until: Option<SystemTime>,
    },
    Snapshot(ScopeId),
}

/// Where the answer goes.
#[derive(Debug)]
pub(crate) enum Reply {
    Target(oneshot::Sender<Target>),
    Count(oneshot::Sender<usize>),
    Admission(oneshot::Sender<Admission>),
    /// `None`: a detached update nobody waits for.
    Decision(Option<oneshot::Sender<Option<Applied>>>),
    Done(oneshot::Sender<()>),
    Snapshot(oneshot::Sender<Option<ScopeSnapshot>>),
}

/// An operation: the request, the caller's `now`, the reply.
#[derive(Debug)]
pub(crate) struct Op {
    pub req: Request,
    pub now: Now,
    pub reply: Reply,
}

/// An operation's answer, before it is delivered.
#[derive(Debug)]
pub(crate) enum Outcome {
    Target(Target),
    Count(usize),
    Admission(Admission),
    Decision(Option<Applied>),
    Done,
    Snapshot(Box<Option<ScopeSnapshot>>),
}

impl Request {
    /// The key (or group) whose record the request reads or writes; `None`
    /// for a local request, or a scope this process does not know.
    pub(crate) fn key(&self, c: &Controller) -> Option<String> {
        let scope = match self {
            Request::Target { .. } | Request::Expire | Request::Flush => return None,
            Request::Admit(r) => r.target.scope,
            Request::Update(u) => match (&u.observed, &u.end) {
                (Some(o), _) => o.scope,
                (None, Some(e)) => e.reservation().scope(),
                (None, None) => return None,
            },
            Request::Resume(k) | Request::Forget(k) | Request::Stop { key: k, .. } => {
                return Some(c.key_name(k).to_owned())
            }
            Request::Snapshot(s) => *s,
        };
        c.key_of(scope).map(str::to_owned)
    }

    /// Whether it changes the record (a snapshot only reads it).
    pub(crate) fn writes(&self) -> bool {
        !matches!(self, Request::Snapshot(_))
    }

    /// Applies it to `c` at `now`, leaving the request as it was.
    pub(crate) fn apply(&self, c: &mut Controller, now: Now) -> Outcome {
        match self {
            Request::Target { key, model } => Outcome::Target(c.target(key, model)),
            Request::Expire => Outcome::Count(c.expire(now)),
            Request::Flush => Outcome::Done,
            Request::Admit(r) => Outcome::Admission(c.admit(r, now)),
            Request::Update(u) => Outcome::Decision(c.apply(u, now)),
            Request::Resume(k) => {
                c.resume(k, now);
                Outcome::Done
            }
            Request::Forget(k) => {
                c.forget_beliefs(k, now);
                Outcome::Done
            }
            Request::Stop { key, cause, until } => {
                let scope = c.scope_of(key, "default");
                c.stop(scope, *cause, *until, now);
                Outcome::Done
            }
            Request::Snapshot(s) => Outcome::Snapshot(Box::new(c.snapshot(*s, now))),
        }
    }
}
