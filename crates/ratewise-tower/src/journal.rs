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
}
