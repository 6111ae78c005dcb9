//! [`Error`]: how a call ended when it did not end in a success.
//!
//! Small on purpose: one boxed struct, with predicates in the style of
//! `hyper::Error` (`is_defer()`, `is_stop_queue()`, ...) and accessors for
//! the evidence (the decision, the classification, every attempt's
//! record, and the final response's status, headers and buffered body).

use bytes::Bytes;
use http::{HeaderMap, StatusCode};
use ratewise_core::classify::Classification;
use ratewise_core::record::AttemptRecord;
use ratewise_core::{Action, ActionKind, Decision, GiveUpReason};
use std::fmt;
use std::time::SystemTime;

/// A boxed error from the inner service or a body.
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// Why a call ended without a success.
pub struct Error {
    inner: Box<Inner>,
}

struct Inner {
    kind: Kind,
    job_id: String,
    decision: Option<Decision>,
    classification: Option<Classification>,
    attempts: Vec<AttemptRecord>,
    response: Option<FinalResponse>,
    source: Option<BoxError>,
}

/// The last response's status, headers and (bounded) body.
#[derive(Debug, Clone)]
struct FinalResponse {
    status: StatusCode,
    headers: HeaderMap,
    body: Bytes,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// A decision ended the call (after a response, a transport failure,
    /// or a refused/stopped admission).
    Decided,
    /// The request body is larger than the layer buffers; nothing was sent.
    BodyTooLarge { limit: usize },
    /// Reading the request body failed; nothing was sent.
    RequestBody,
    /// The inner service failed in `poll_ready`; nothing was sent.
    NotReady,
}

impl Error {
    pub(crate) fn decided(job_id: String, decision: Decision) -> Self {
        Error {
            inner: Box::new(Inner {
                kind: Kind::Decided,
                job_id,
                decision: Some(decision),
                classification: None,
                attempts: Vec::new(),
                response: None,
                source: None,
            }),
        }
    }

    pub(crate) fn body_too_large(job_id: String, limit: usize) -> Self {
        let mut e = Error::decided(job_id, Decision::new(Action::Fail));
        e.inner.kind = Kind::BodyTooLarge { limit };
        e.inner.decision = None;
        e
    }

    pub(crate) fn request_body(job_id: String, source: BoxError) -> Self {
        let mut e = Error::decided(job_id, Decision::new(Action::Fail));
        e.inner.kind = Kind::RequestBody;
        e.inner.decision = None;
        e.inner.source = Some(source);
        e
    }

    pub(crate) fn not_ready(source: BoxError) -> Self {
        let mut e = Error::decided(String::new(), Decision::new(Action::Fail));
        e.inner.kind = Kind::NotReady;
        e.inner.decision = None;
        e.inner.source = Some(source);
        e
    }

    pub(crate) fn with_classification(mut self, c: Classification) -> Self {
        self.inner.classification = Some(c);
        self
    }

    pub(crate) fn with_attempts(mut self, attempts: Vec<AttemptRecord>) -> Self {
        self.inner.attempts = attempts;
        self
    }

    pub(crate) fn with_response(
        mut self,
        status: StatusCode,
        headers: HeaderMap,
        body: Bytes,
    ) -> Self {
        self.inner.response = Some(FinalResponse {
            status,
            headers,
            body,
        });
        self
    }

    pub(crate) fn with_source(mut self, source: BoxError) -> Self {
        self.inner.source = Some(source);
        self
    }

    /// The action that ended the call; `None` when the request body could
    /// not be buffered (nothing was sent).
    pub fn action(&self) -> Option<ActionKind> {
        self.inner.decision.as_ref().map(|d| d.action.kind())
    }

    /// The decision that ended the call, with its notes.
    pub fn decision(&self) -> Option<&Decision> {
        self.inner.decision.as_ref()
    }

    /// The classification of the last response or transport failure
    /// (also when a retried job then ended at admission); `None` when the
    /// call ended before any send (stopped, refused, deferred).
    pub fn classification(&self) -> Option<&Classification> {
        self.inner.classification.as_ref()
    }

    /// The evidence record of every attempt, in order. Its length is the
    /// number of sends this call made.
    pub fn attempts(&self) -> &[AttemptRecord] {
        &self.inner.attempts
    }

    /// The job id the call ran under.
    pub fn job_id(&self) -> &str {
        &self.inner.job_id
    }

    /// The final response's status, when there was one.
    pub fn status(&self) -> Option<StatusCode> {
        self.inner.response.as_ref().map(|r| r.status)
    }

    /// The final response's headers, when there was one.
    pub fn headers(&self) -> Option<&HeaderMap> {
        self.inner.response.as_ref().map(|r| &r.headers)
    }

    /// The final response's body, read up to the layer's bound.
    pub fn body(&self) -> Option<&Bytes> {
        self.inner.response.as_ref().map(|r| &r.body)
    }

    /// `until` of a `defer` or of a `stop_queue` that lifts by itself.
    pub fn until(&self) -> Option<SystemTime> {
        self.inner.decision.as_ref().and_then(|d| d.action.until())
    }

    /// For a job ended at admission because it could not be sent before
    /// its deadline: when it could have gone (the predicted admission).
    pub fn earliest(&self) -> Option<SystemTime> {
        self.inner
            .decision
            .as_ref()?
            .notes
            .iter()
            .find_map(|n| match n {
                ratewise_core::Note::TooLate { earliest, .. } => Some(*earliest),
                _ => None,
            })
    }

    /// The reason of a `give_up`.
    pub fn give_up_reason(&self) -> Option<GiveUpReason> {
        self.inner.decision.as_ref().and_then(|d| d.action.reason())
    }

    fn is(&self, kind: ActionKind) -> bool {
        self.action() == Some(kind)
    }

    /// The wait is longer than the layer holds a job inline (a job with
    /// no deadline: `Policy::max_inline_wait`, 60 s by default, for all
    /// its waits together): take the job back and send it again after
    /// [`until`](Error::until), the earliest time it could go. No attempt
    /// was burned by the wait.
    pub fn is_defer(&self) -> bool {
        self.is(ActionKind::Defer)
    }

    /// Sending is stopped for the whole key (spend cap, billing,
    /// credentials): keep the job and every other one, resume later.
    pub fn is_stop_queue(&self) -> bool {
        self.is(ActionKind::StopQueue)
    }

    /// Not retryable: the request or configuration must change.
    pub fn is_fail(&self) -> bool {
        self.is(ActionKind::Fail)
    }

    /// An unknown or malformed answer: look at it, do not retry blindly.
    pub fn is_inspect(&self) -> bool {
        self.is(ActionKind::Inspect)
    }

    /// Retryable, but attempts, deadline, the retry budget or the server
    /// said no more: see [`give_up_reason`](Error::give_up_reason).
    pub fn is_give_up(&self) -> bool {
        self.is(ActionKind::GiveUp)
    }

    /// Sent, no answer: the request may have been generated and billed.
    pub fn is_hold_unknown(&self) -> bool {
        self.is(ActionKind::HoldUnknown)
    }

    /// The request body is larger than the layer buffers for replay.
    pub fn is_body_too_large(&self) -> bool {
        matches!(self.inner.kind, Kind::BodyTooLarge { .. })
    }

    /// Reading the request body failed.
    pub fn is_request_body(&self) -> bool {
        self.inner.kind == Kind::RequestBody
    }

    /// The inner service failed in `poll_ready` (nothing was sent).
    pub fn is_not_ready(&self) -> bool {
        self.inner.kind == Kind::NotReady
    }

    /// Whether any attempt was sent.
    pub fn was_sent(&self) -> bool {
        !self.inner.attempts.is_empty()
    }
}

impl fmt::Debug for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Nothing secret here: records are allow-listed, headers are the
        // provider's response headers, the body is the provider's answer.
        let mut d = f.debug_struct("ratewise_tower::Error");
        d.field("job_id", &self.inner.job_id);
        d.field("kind", &self.inner.kind);
        if let Some(dec) = &self.inner.decision {
            d.field("decision", dec);
        }
        if let Some(c) = &self.inner.classification {
            d.field("cause", &c.cause);
        }
        d.field("attempts", &self.inner.attempts.len());
        if let Some(r) = &self.inner.response {
            d.field("status", &r.status);
        }
        if let Some(s) = &self.inner.source {
            d.field("source", s);
        }
        d.finish()
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let job = &self.inner.job_id;
        match self.inner.kind {
            Kind::BodyTooLarge { limit } => {
                return write!(
                    f,
                    "job {job}: request body larger than {limit} bytes: not sent"
                )
            }
            Kind::RequestBody => {
                return write!(f, "job {job}: reading the request body failed: not sent")
            }
            Kind::NotReady => return f.write_str("the inner service failed to become ready"),
            Kind::Decided => {}
        }
        let action = self.action().map_or("unknown", |a| a.as_str());
        write!(f, "job {job}: {action}")?;
        if let Some(reason) = self.give_up_reason() {
            write!(f, " ({})", reason.as_str())?;
        }
        if let Some(c) = &self.inner.classification {
            write!(f, " after {}", c.cause.as_str())?;
        }
        if let Some(s) = self.status() {
            write!(f, ", status {}", s.as_u16())?;
        }
        write!(f, ", {} attempt(s)", self.inner.attempts.len())?;
        if let Some(t) = self.earliest() {
            write!(
                f,
                "; it could have been sent at {} (after its deadline)",
                ratewise_core::time::format_rfc3339(t)
            )?;
        }
        Ok(())
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.inner
            .source
            .as_ref()
            .map(|s| &**s as &(dyn std::error::Error + 'static))
    }
}
