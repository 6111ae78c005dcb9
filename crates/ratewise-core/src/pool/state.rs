//! What the pool knows beyond any one member's admission scope: which
//! upstreams are overloaded (a provider-wide signal no key's scope
//! holds), the evidence of each member's stop, and when the whole pool is
//! stopped.
//!
//! Whether a member *is* stopped is not kept here: its key's stop lives in
//! the store (one owner per fact), and the pool reads it through each
//! member's [`Outlook`]. What the pool keeps is the answer that stopped it
//! — cause, status, error type and code, request id, when — so that a
//! stopped pool can say, member by member, why.

use super::member::MemberId;
use crate::admit::{Admission, AdmitRequest, Controller, Stop};
use crate::classify::Classification;
use crate::time::{Instant, Now};
use crate::vocab::Cause;
use std::time::{Duration, SystemTime};

/// What the store says about one member for one request, now: the input
/// of the choice. [`Outlook::of`] reads it from a [`Controller`]; a
/// driver over a store that awaits asks its
/// [`predict`](crate::admit::Store::predict) and
/// [`snapshot`](crate::admit::Store::snapshot) first and hands the
/// answers in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outlook {
    /// It could admit the request at this instant (now, or a bucket's
    /// refill or a pause's end), as its admission predicts.
    At(Instant),
    /// Its key is stopped (money, credentials): nothing goes to it.
    Stopped(Stop),
    /// It would refuse the request (it could not be sent there before
    /// the job's deadline): not eligible for this job.
    Refused,
    /// Nothing to predict (limits still unknown, a probe out): its
    /// admission will say; taken as ready now.
    Unknown,
}

impl Outlook {
    /// What `c` says about `req` at `now`: its key's stop first, then its
    /// admission's prediction ([`Controller::predict`], nothing taken).
    pub fn of(c: &mut Controller, req: &AdmitRequest, now: Now) -> Outlook {
        let stop = c
            .snapshot(req.target.scope, now)
            .and_then(|snapshot| snapshot.stopped);
        let prediction = if stop.is_none() {
            c.predict(req, 0, now)
        } else {
            None
        };
        Outlook::from_answers(stop, prediction, now)
    }

    /// The same from a store's answers read by a driver that awaits: the
    /// scope's stop (its [`snapshot`](crate::admit::Store::snapshot)) and
    /// its [`predict`](crate::admit::Store::predict) for the request with
    /// nobody ahead.
    pub fn from_answers(stop: Option<Stop>, prediction: Option<Admission>, now: Now) -> Outlook {
        if let Some(stop) = stop {
            return Outlook::Stopped(stop);
        }
        match prediction {
            Some(Admission::Wait { until, .. }) => Outlook::At(until.max(now.instant)),
            Some(Admission::Refused { .. }) => Outlook::Refused,
            Some(Admission::Stopped { cause, until }) => Outlook::Stopped(Stop {
                cause,
                until,
                until_instant: until.map(|u| now.instant_at(u)),
            }),
            _ => Outlook::Unknown,
        }
    }
}

/// The evidence of one member's stop: the answer that stopped it, or the
/// store's stop when no answer of this pool's was seen.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct MemberStopped {
    /// Which member.
    pub member: MemberId,
    /// Its upstream.
    pub upstream: String,
    /// What stopped it (`spend_cap`, `billing`, `user_limit`,
    /// `authentication`, a class's `permission`).
    pub cause: Cause,
    /// The answer's status, when an answer stopped it.
    pub status: Option<u16>,
    /// The answer's error type.
    pub error_type: Option<String>,
    /// The answer's error code.
    pub error_code: Option<String>,
    /// The answer's request id.
    pub request_id: Option<String>,
    /// When it was stopped (wall clock), when known.
    pub at: Option<SystemTime>,
    /// When the stop lifts by itself, when known.
    pub until: Option<SystemTime>,
}

/// Every member of a pool is stopped: nothing is sent until one resumes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PoolStopped {
    /// Each member's evidence, in member order.
    pub members: Vec<MemberStopped>,
}

impl PoolStopped {
    /// The earliest instant one member's stop lifts by itself, if any
    /// will (`None`: every one waits for a human).
    pub fn until(&self) -> Option<SystemTime> {
        self.members.iter().filter_map(|m| m.until).min()
    }
}

/// An upstream's overload hold: after a 529 (or a 503 overloaded), a job
/// with a member of another upstream to go to does not go here before
/// `until`; each overload in a row doubles the hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Hold {
    until: Instant,
    streak: u32,
}

/// The pool's own state: overload holds per upstream, stop evidence per
/// member.
#[derive(Debug, Clone, Default)]
pub(crate) struct PoolState {
    holds: Vec<(String, Hold)>,
    evidence: Vec<Option<MemberStopped>>,
}

impl PoolState {
    pub(crate) fn new(members: usize) -> Self {
        PoolState {
            holds: Vec::new(),
            evidence: vec![None; members],
        }
    }

    pub(crate) fn grow(&mut self) {
        self.evidence.push(None);
    }

    /// `upstream` answered overloaded at `now`, the server's wait `hint`
    /// (if any): held for the longer of the hint and `base · 2^(streak-1)`
    /// (at most `cap`).
    pub(crate) fn overloaded(
        &mut self,
        upstream: &str,
        hint: Option<Duration>,
        base: Duration,
        cap: Duration,
        now: Instant,
    ) -> Instant {
        let streak = self
            .holds
            .iter()
            .find(|(u, _)| u == upstream)
            .map_or(0, |(_, h)| h.streak)
            .saturating_add(1);
        let backoff = base
            .saturating_mul(1u32 << (streak - 1).min(16))
            .min(cap.max(base));
        let until = now + backoff.max(hint.unwrap_or(Duration::ZERO));
        let hold = Hold { until, streak };
        match self.holds.iter_mut().find(|(u, _)| u == upstream) {
            Some((_, h)) => *h = hold,
            None => self.holds.push((upstream.to_owned(), hold)),
        }
        until
    }

    /// `upstream` answered (anything but an overload): its streak ends.
    pub(crate) fn answered(&mut self, upstream: &str) {
        self.holds.retain(|(u, _)| u != upstream);
    }

    /// Until when `upstream` is held, if it is at `now`.
    pub(crate) fn held(&self, upstream: &str, now: Instant) -> Option<Instant> {
        self.holds
            .iter()
            .find(|(u, _)| u == upstream)
            .map(|(_, h)| h.until)
            .filter(|t| *t > now)
    }

    /// An answer stopped member `m`.
    pub(crate) fn stopped_by(
        &mut self,
        m: MemberId,
        upstream: &str,
        c: &Classification,
        until: Option<SystemTime>,
        now: Now,
    ) {
        self.evidence[m.index()] = Some(MemberStopped {
            member: m,
            upstream: upstream.to_owned(),
            cause: c.cause,
            status: c.status,
            error_type: c.evidence.error_type.clone(),
            error_code: c.evidence.error_code.clone(),
            request_id: c.evidence.request_id.clone(),
            at: Some(now.wall),
            until,
        });
    }

    /// The answer that last stopped member `m`, as this pool saw it.
    pub(crate) fn seen(&self, m: MemberId) -> Option<&MemberStopped> {
        self.evidence.get(m.index())?.as_ref()
    }

    /// The store says member `m` is stopped: its evidence, from the
    /// answer seen when there was one, else from the store's stop.
    pub(crate) fn evidence(&self, m: MemberId, upstream: &str, stop: &Stop) -> MemberStopped {
        match &self.evidence[m.index()] {
            Some(e) if e.cause == stop.cause => MemberStopped {
                until: stop.until,
                ..e.clone()
            },
            _ => MemberStopped {
                member: m,
                upstream: upstream.to_owned(),
                cause: stop.cause,
                status: None,
                error_type: None,
                error_code: None,
                request_id: None,
                at: None,
                until: stop.until,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::classify::{classify_response, ResponseView};
    use crate::vocab::Provider;

    #[test]
    fn an_overload_hold_doubles_with_each_in_a_row_and_ends_with_an_answer() {
        let mut s = PoolState::new(1);
        let base = Duration::from_secs(1);
        let cap = Duration::from_secs(5);
        let t = Instant::ZERO;
        assert_eq!(
            s.overloaded("a", None, base, cap, t),
            Instant::from_millis(1000)
        );
        assert_eq!(
            s.overloaded("a", None, base, cap, t),
            Instant::from_millis(2000)
        );
        assert_eq!(
            s.overloaded("a", None, base, cap, t),
            Instant::from_millis(4000)
        );
        assert_eq!(
            s.overloaded("a", None, base, cap, t),
            Instant::from_millis(5000)
        );
        // The server's own wait is never shortened.
        let hint = Some(Duration::from_secs(9));
        assert_eq!(
            s.overloaded("a", hint, base, cap, t),
            Instant::from_millis(9000)
        );
        assert_eq!(s.held("a", t), Some(Instant::from_millis(9000)));
        assert_eq!(s.held("a", Instant::from_millis(9000)), None);
        assert_eq!(s.held("b", t), None);
        s.answered("a");
        assert_eq!(s.held("a", t), None);
        assert_eq!(
            s.overloaded("a", None, base, cap, t),
            Instant::from_millis(1000)
        );
    }

    #[test]
    fn a_stop_keeps_the_answer_that_caused_it() {
        let mut s = PoolState::new(2);
        let headers = http::HeaderMap::new();
        let body = br#"{"error":{"message":"quota","type":"insufficient_quota","param":null,"code":"insufficient_quota"}}"#;
        let view = ResponseView {
            status: http::StatusCode::TOO_MANY_REQUESTS,
            headers: &headers,
            body,
        };
        let now = Now::new(Instant::ZERO, SystemTime::UNIX_EPOCH);
        let c = classify_response(Provider::Openai, &view, now.wall);
        assert_eq!(c.cause, Cause::SpendCap);
        s.stopped_by(MemberId(1), "openai", &c, None, now);
        let stop = Stop {
            cause: Cause::SpendCap,
            until: None,
            until_instant: None,
        };
        let e = s.evidence(MemberId(1), "openai", &stop);
        assert_eq!(e.status, Some(429));
        assert_eq!(e.error_code.as_deref(), Some("insufficient_quota"));
        assert_eq!(e.at, Some(SystemTime::UNIX_EPOCH));
        // A member stopped before this pool saw an answer: the store's word.
        let bare = s.evidence(MemberId(0), "anthropic", &stop);
        assert_eq!((bare.cause, bare.status), (Cause::SpendCap, None));
        let pool = PoolStopped {
            members: vec![bare, e],
        };
        assert_eq!(pool.until(), None);
    }
}
