//! The journal hook: every attempt is written down *before* it is sent.
//!
//! After a crash, an attempt with a start and no end is `outcome_unknown`
//! — it may have been generated and billed — never "not sent". The layer
//! calls [`Journal::attempt_started`] after admission and right before the
//! send, and [`Journal::attempt_ended`] with the attempt's allow-listed
//! record once its answer is decided. Make `attempt_started` durable (a
//! database row, an fsync'd log line) when unknown outcomes must survive a
//! restart. Both are called on the request path: keep them short.

use ratewise_core::record::AttemptRecord;
use std::time::SystemTime;

/// Receives the start and end of every attempt.
pub trait Journal: Send + Sync + 'static {
    /// An attempt is about to be sent (admission granted).
    fn attempt_started(&self, job_id: &str, attempt: u32, at: SystemTime);
    /// An attempt's answer (or transport failure) was decided.
    fn attempt_ended(&self, record: &AttemptRecord);

    /// A 2xx answer whose body is an event stream was decided and handed
    /// over; [`Journal::stream_ended`] follows when its body ends (however
    /// it ends: completed, failed in band, cut, or dropped by the caller).
    ///
    /// The attempt has ended as far as a restart is concerned — it must
    /// not be replayed — so the default writes it down as
    /// [`Journal::attempt_ended`]. Override it (with `stream_ended`) to
    /// count a stream by how it really ended: a stream cut mid-way is
    /// `mid_stream`, not the `success` its headers said.
    fn stream_started(&self, record: &AttemptRecord) {
        self.attempt_ended(record);
    }

    /// A stream handed over by [`Journal::stream_started`] ended. `record`
    /// is the same attempt's record with `cause` `success` for a stream that
    /// completed and `mid_stream` for any other ending (an in-band error —
    /// its type and code in `error_type` / `error_code` — a cut, a body
    /// error, a caller that left), and `usage` what the attempt was
    /// charged. Called once per stream, from the body (a poll or a drop):
    /// keep it short. The default does nothing.
    fn stream_ended(&self, record: &AttemptRecord) {
        let _ = record;
    }
}
