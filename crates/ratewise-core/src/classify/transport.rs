//! Failures without a response: did the request leave or not?

use crate::vocab::Cause;
use serde::{Deserialize, Serialize};

/// A failure with no HTTP response. The distinction that matters is whether
/// the request may have reached the provider: before it left, a retry is
/// safe; after, the work may have been generated and billed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum TransportFailure {
    /// The connection was refused: nothing was sent.
    ConnectRefused,
    /// The name did not resolve: nothing was sent.
    DnsFailed,
    /// The TLS handshake failed: nothing was sent.
    TlsFailed,
    /// The connection reset after the request was written, before a status.
    ResetAfterSend,
    /// No status arrived within the timeout after the request was written.
    TimeoutAfterSend,
}

impl TransportFailure {
    /// Every failure kind.
    pub const ALL: &'static [TransportFailure] = &[
        TransportFailure::ConnectRefused,
        TransportFailure::DnsFailed,
        TransportFailure::TlsFailed,
        TransportFailure::ResetAfterSend,
        TransportFailure::TimeoutAfterSend,
    ];

    /// True when the request may have reached the provider.
    pub const fn maybe_sent(self) -> bool {
        matches!(
            self,
            TransportFailure::ResetAfterSend | TransportFailure::TimeoutAfterSend
        )
    }

    /// `connect_failed` before sending, `outcome_unknown` after.
    pub(crate) const fn cause(self) -> Cause {
        if self.maybe_sent() {
            Cause::OutcomeUnknown
        } else {
            Cause::ConnectFailed
        }
    }

    /// The fixture word (`connect_refused`, `reset_after_send`, ...).
    pub const fn as_str(self) -> &'static str {
        match self {
            TransportFailure::ConnectRefused => "connect_refused",
            TransportFailure::DnsFailed => "dns_failed",
            TransportFailure::TlsFailed => "tls_failed",
            TransportFailure::ResetAfterSend => "reset_after_send",
            TransportFailure::TimeoutAfterSend => "timeout_after_send",
        }
    }

    /// One sentence for notes.
    pub const fn explain(self) -> &'static str {
        match self {
            TransportFailure::ConnectRefused => "connection refused: the request never left",
            TransportFailure::DnsFailed => "name did not resolve: the request never left",
            TransportFailure::TlsFailed => "TLS handshake failed: the request never left",
            TransportFailure::ResetAfterSend => {
                "connection reset after the request was sent: it may have been generated and billed"
            }
            TransportFailure::TimeoutAfterSend => {
                "no answer in time after the request was sent: it may have been generated and billed"
            }
        }
    }
}
