//! One job's route through a pool: which member each attempt went to,
//! and what the job machine's decision on an answer means for the next
//! one — the same member, another member, a wait, or a stopped member.
//!
//! The job keeps one [`Job`](crate::job::Job) across members: one
//! deadline, one count of attempts, one place in the queue-wide retry
//! budget. Moving to another member is the job's *next attempt* (it
//! counts as a retry wherever a retry counts), never a new retry loop.

use super::member::MemberId;
use crate::admit::{Stop, Target};
use crate::classify::Classification;
use crate::decision::Action;
use crate::time::Instant;
use crate::vocab::Cause;

/// What an answer's decision means for a pooled job's next attempt
/// ([`Pool::answered`](super::Pool::answered)).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Move {
    /// The decision ends the job (done, fail, inspect, give up, hold an
    /// unknown outcome) or hands it back (defer): nothing more is routed.
    End,
    /// The retry stays on this member, after its delay: the request may
    /// have run there (an unknown outcome is never re-sent elsewhere), or
    /// the pool has no other member to go to.
    Same,
    /// The retry goes to the member that can admit it soonest; this one
    /// not before the decided delay (its 429's wait, its backoff), which
    /// was this member's, not the job's.
    Soonest,
    /// This upstream is overloaded (529, 503 overloaded): the retry goes
    /// to a member of another upstream, now, and this upstream is held.
    OtherUpstream,
    /// This upstream is overloaded and no other upstream is in the pool:
    /// the job waits out its delay, as it would alone.
    Wait,
    /// Money or credentials stopped this member (its key, not the pool):
    /// the job goes on with another member, its attempts counting on.
    StopMember,
    /// This member stopped and the job cannot go on elsewhere: every
    /// member is stopped (the pool is: [`Pool::stopped`](super::Pool::stopped)
    /// has the evidence), the request may have run here, or the job's
    /// attempts are spent. The job ends stopped, kept for a resume.
    Stop,
}

/// What the mapping needs to know beyond the decision.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Facts {
    /// The job's request may have run on this member (it stays there).
    pub(crate) pinned: bool,
    /// Another member not known to be stopped.
    pub(crate) other_member: bool,
    /// A member of another upstream not known to be stopped.
    pub(crate) other_upstream: bool,
    /// The job has counted attempts left.
    pub(crate) attempts_left: bool,
}

/// The job machine's decision `action` on answer `c` → the pool's move.
pub(crate) fn move_for(action: &Action, c: &Classification, f: Facts) -> Move {
    match action {
        Action::StopQueue { .. } if !f.pinned && f.other_member && f.attempts_left => {
            Move::StopMember
        }
        Action::StopQueue { .. } => Move::Stop,
        Action::Retry { .. } if f.pinned || !f.other_member => Move::Same,
        Action::Retry { .. } if c.cause == Cause::Overloaded => {
            if f.other_upstream {
                Move::OtherUpstream
            } else {
                Move::Wait
            }
        }
        Action::Retry { .. } => Move::Soonest,
        _ => Move::End,
    }
}

/// One job's route: the member of every attempt, the member it goes to
/// next, and what it learned on the way (members it found stopped, each
/// member's own wait, whether its request may have run somewhere).
#[derive(Debug, Clone)]
pub struct Route {
    pub(crate) model: String,
    pub(crate) targets: Vec<Target>,
    pub(crate) current: MemberId,
    pub(crate) attempts: Vec<MemberId>,
    pub(crate) pinned: bool,
    /// Per member: not before this instant (its own decided delay).
    pub(crate) holds: Vec<Option<Instant>>,
    /// Per member: the stop this job found it under.
    pub(crate) stopped: Vec<Option<Stop>>,
}

impl Route {
    pub(crate) fn new(model: &str, targets: Vec<Target>) -> Self {
        let n = targets.len();
        Route {
            model: model.to_owned(),
            targets,
            current: MemberId(0),
            attempts: Vec::new(),
            pinned: false,
            holds: vec![None; n],
            stopped: vec![None; n],
        }
    }

    /// The model the job asked for (each member may send it under its
    /// own name: [`Member::model_for`](super::Member::model_for)).
    pub fn model(&self) -> &str {
        &self.model
    }

    /// The member its next (or current) attempt goes to.
    pub fn member(&self) -> MemberId {
        self.current
    }

    /// Member `m`'s target for this job's model (`None`: no such member).
    pub fn target(&self, m: MemberId) -> Option<Target> {
        self.targets.get(m.index()).copied()
    }

    /// Every member's target for this job's model, in member order.
    pub fn targets(&self) -> &[Target] {
        &self.targets
    }

    /// The member of every attempt made, in order (attempt `n` is at
    /// `n - 1`): what the job's record names.
    pub fn attempts(&self) -> &[MemberId] {
        &self.attempts
    }

    /// The member attempt `n` (1-based) went to.
    pub fn member_of(&self, attempt: u32) -> Option<MemberId> {
        let i = usize::try_from(attempt).ok()?.checked_sub(1)?;
        self.attempts.get(i).copied()
    }

    /// Whether the job is held to its member: a request of it was sent
    /// there and got no answer (it may have run), so it is never sent to
    /// another member.
    pub fn pinned(&self) -> bool {
        self.pinned
    }

    /// A member other than the current one not known to be stopped.
    pub(crate) fn other_member(&self) -> bool {
        self.stopped
            .iter()
            .enumerate()
            .any(|(i, s)| i != self.current.index() && s.is_none())
    }

    /// Whether every member was found stopped.
    pub(crate) fn all_stopped(&self) -> bool {
        self.stopped.iter().all(Option::is_some)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::classify::{classify_response, classify_transport, ResponseView, TransportFailure};
    use crate::vocab::Provider;
    use std::time::{Duration, SystemTime};

    fn answer(provider: Provider, status: u16, body: &str) -> Classification {
        let headers = http::HeaderMap::new();
        let view = ResponseView {
            status: http::StatusCode::from_u16(status).unwrap(),
            headers: &headers,
            body: body.as_bytes(),
        };
        classify_response(provider, &view, SystemTime::UNIX_EPOCH)
    }

    const FREE: Facts = Facts {
        pinned: false,
        other_member: true,
        other_upstream: true,
        attempts_left: true,
    };
    const RETRY: Action = Action::Retry {
        delay: Duration::from_secs(1),
    };
    const STOP: Action = Action::StopQueue { until: None };

    #[test]
    fn money_stops_the_member_not_the_pool() {
        let c = answer(
            Provider::Openai,
            429,
            r#"{"error":{"message":"q","type":"insufficient_quota","param":null,"code":"insufficient_quota"}}"#,
        );
        assert_eq!(c.cause, Cause::SpendCap);
        assert_eq!(move_for(&STOP, &c, FREE), Move::StopMember);
        let alone = Facts {
            other_member: false,
            ..FREE
        };
        assert_eq!(move_for(&STOP, &c, alone), Move::Stop);
        let spent = Facts {
            attempts_left: false,
            ..FREE
        };
        assert_eq!(move_for(&STOP, &c, spent), Move::Stop);
    }

    #[test]
    fn an_overload_moves_to_another_upstream_or_waits() {
        let c = answer(
            Provider::Anthropic,
            529,
            r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#,
        );
        assert_eq!(c.cause, Cause::Overloaded);
        assert_eq!(move_for(&RETRY, &c, FREE), Move::OtherUpstream);
        let one_upstream = Facts {
            other_upstream: false,
            ..FREE
        };
        assert_eq!(move_for(&RETRY, &c, one_upstream), Move::Wait);
    }

    #[test]
    fn a_rate_limit_goes_to_the_soonest_member() {
        let c = answer(
            Provider::Anthropic,
            429,
            r#"{"type":"error","error":{"type":"rate_limit_error","message":"slow"}}"#,
        );
        assert_eq!(move_for(&RETRY, &c, FREE), Move::Soonest);
        let alone = Facts {
            other_member: false,
            other_upstream: false,
            ..FREE
        };
        assert_eq!(move_for(&RETRY, &c, alone), Move::Same);
    }

    #[test]
    fn an_unknown_outcome_is_never_resent_elsewhere() {
        let c = classify_transport(Provider::Anthropic, TransportFailure::ResetAfterSend);
        let pinned = Facts {
            pinned: true,
            ..FREE
        };
        assert_eq!(move_for(&RETRY, &c, pinned), Move::Same);
        assert_eq!(move_for(&STOP, &c, pinned), Move::Stop);
        let hold = Action::HoldUnknown;
        assert_eq!(move_for(&hold, &c, pinned), Move::End);
    }

    #[test]
    fn endings_route_nothing() {
        let c = answer(Provider::Anthropic, 200, "{}");
        for a in [
            Action::Done,
            Action::Fail,
            Action::Inspect,
            Action::GiveUp {
                reason: crate::vocab::GiveUpReason::Attempts,
            },
        ] {
            assert_eq!(move_for(&a, &c, FREE), Move::End);
        }
    }

    #[test]
    fn attempts_name_their_member() {
        let mut r = Route::new("m", Vec::new());
        r.attempts = vec![MemberId(1), MemberId(0)];
        assert_eq!(r.member_of(1), Some(MemberId(1)));
        assert_eq!(r.member_of(2), Some(MemberId(0)));
        assert_eq!(r.member_of(0), None);
        assert_eq!(r.member_of(3), None);
        assert_eq!(r.model(), "m");
        assert!(r.all_stopped(), "no member: nothing to go to");
    }
}
