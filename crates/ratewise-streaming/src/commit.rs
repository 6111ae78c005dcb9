//! The commit point: from when on a stream may no longer be replayed.
//!
//! Before the commit point nothing reached the caller, so a failure is an
//! ordinary error that the layer may retry transparently. After it, the
//! caller has seen output; replaying would duplicate output and cost, so a
//! failure is reported (`mid_stream`, `committed = true`) and never retried
//! automatically.
//!
//! With [`CommitPoint::FirstByte`] (the default) the stream commits as soon
//! as any byte is handed on. With [`CommitPoint::FirstContent`] it commits
//! at the first content event (text or other content delta) or at the end
//! of a successful stream; the body that drives the tracker must then hold
//! frames back until [`CommitState::committed`] turns true, so that an
//! error arriving before any content (e.g. an `overloaded_error` as the
//! first frame) can be retried without the caller noticing.

use crate::interpret::StreamEvent;

/// When a stream commits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum CommitPoint {
    /// At the first byte handed to the caller.
    #[default]
    FirstByte,
    /// At the first content event (or a successful end); earlier frames are
    /// held back by the body.
    FirstContent,
}

/// Tracks whether a stream committed and whether content was delivered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CommitState {
    point: CommitPoint,
    committed: bool,
    content_delivered: bool,
}

impl CommitState {
    /// A fresh state under `point`.
    pub fn new(point: CommitPoint) -> Self {
        CommitState {
            point,
            committed: false,
            content_delivered: false,
        }
    }

    /// The policy in force.
    pub fn point(&self) -> CommitPoint {
        self.point
    }

    /// Whether bytes reached (or may now be released to) the caller.
    pub fn committed(&self) -> bool {
        self.committed
    }

    /// Whether any content event was seen.
    pub fn content_delivered(&self) -> bool {
        self.content_delivered
    }

    /// Records that `len` bytes were received (and, under `FirstByte`,
    /// handed on).
    pub fn on_bytes(&mut self, len: usize) {
        if len > 0 && self.point == CommitPoint::FirstByte {
            self.committed = true;
        }
    }

    /// Records one interpreted event.
    pub fn on_event(&mut self, event: &StreamEvent) {
        if event.is_content() {
            self.content_delivered = true;
            self.committed = true;
        } else if matches!(event, StreamEvent::Done { .. }) {
            self.committed = true;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::interpret::InBandError;
    use ratewise_core::Cause;

    #[test]
    fn first_byte_commits_on_any_byte_first_content_waits() {
        let mut fb = CommitState::new(CommitPoint::FirstByte);
        fb.on_bytes(0);
        assert!(!fb.committed());
        fb.on_bytes(1);
        assert!(fb.committed() && !fb.content_delivered());

        let mut fc = CommitState::new(CommitPoint::FirstContent);
        fc.on_bytes(100);
        fc.on_event(&StreamEvent::Ping);
        fc.on_event(&StreamEvent::Error(InBandError {
            cause: Cause::Overloaded,
            error_type: None,
            code: None,
            message: None,
        }));
        assert!(!fc.committed());
        fc.on_event(&StreamEvent::TextDelta {
            index: 0,
            text: "a".into(),
        });
        assert!(fc.committed() && fc.content_delivered());
    }
}
