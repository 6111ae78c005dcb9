//! The journal hook: every attempt is written down *before* it is sent.
//!
//! After a crash, an attempt with a start and no end is `outcome_unknown`
//! — it may have been generated and billed — never "not sent". The layer
//! calls [`Journal::attempt_started`] after admission and right before the
//! send, and [`Journal::attempt_ended`] with the attempt's allow-listed
//! record once its answer is decided. Make `attempt_started` durable (a
//! database row, an fsync'd log line) when unknown outcomes must survive a
//! restart. Both are awaited on the request path, and may fail: a start
//! that could not be written stops its send (the job ends `inspect`,
//! nothing sent), so no send is ever made without its record.

use ratewise_core::record::AttemptRecord;
use std::future::Future;
use std::pin::Pin;
use std::time::SystemTime;

use crate::error::BoxError;

/// What [`Journal::attempt_started`] and [`Journal::attempt_ended`]
/// return: the write, which the layer awaits.
pub type Written<'a> = Pin<Box<dyn Future<Output = Result<(), BoxError>> + Send + 'a>>;

/// A write already done (a journal whose writes are synchronous).
///
/// ```
/// use ratewise_tower::{written, Written};
/// fn write_line() -> std::io::Result<()> { Ok(()) }
/// let w: Written<'static> = written(write_line());
/// # let _ = w;
/// ```
pub fn written<E: Into<BoxError>>(result: Result<(), E>) -> Written<'static> {
    Box::pin(std::future::ready(result.map_err(Into::into)))
}

/// Receives the start and end of every attempt.
pub trait Journal: Send + Sync + 'static {
    /// An attempt is about to be sent (admission granted). The send waits
    /// for the write, and is not made when it fails: the job ends
    /// `inspect`, nothing sent, its reservation given back, and the error
    /// carries the journal's (a full disk stops sending; it never loses a
    /// record of a send that was made).
    fn attempt_started<'a>(&'a self, job_id: &'a str, attempt: u32, at: SystemTime) -> Written<'a>;

    /// The same, for a pooled job: `member` names the pool member the
    /// attempt goes to (upstream and key fingerprint, as
    /// [`AttemptRecord::member`] does), so an attempt a crash cuts is
    /// still known by where it went. The default forgets the member and
    /// calls [`Journal::attempt_started`].
    fn attempt_started_on<'a>(
        &'a self,
        job_id: &'a str,
        attempt: u32,
        member: Option<&'a str>,
        at: SystemTime,
    ) -> Written<'a> {
        let _ = member;
        self.attempt_started(job_id, attempt, at)
    }
    /// An attempt's answer (or transport failure) was decided. A write
    /// that fails is logged; the attempt then reads as started and never
    /// ended — an unknown outcome after a restart, the safe side.
    fn attempt_ended<'a>(&'a self, record: &'a AttemptRecord) -> Written<'a>;

    /// A 2xx answer whose body is an event stream was decided and handed
    /// over; [`Journal::stream_ended`] follows when its body ends (however
    /// it ends: completed, failed in band, cut, or dropped by the caller).
    ///
    /// The attempt has ended as far as a restart is concerned — it must
    /// not be replayed — so the default writes it down as
    /// [`Journal::attempt_ended`] (its write is awaited). Override it
    /// (with `stream_ended`) to count a stream by how it really ended: a
    /// stream cut mid-way is `mid_stream`, not the `success` its headers
    /// said.
    fn stream_started<'a>(&'a self, record: &'a AttemptRecord) -> Written<'a> {
        self.attempt_ended(record)
    }

    /// A stream handed over by [`Journal::stream_started`] ended. `record`
    /// is the same attempt's record with `cause` `success` for a stream that
    /// completed and `mid_stream` for any other ending (an in-band error —
    /// its type and code in `error_type` / `error_code` — a cut, a body
    /// error, a caller that left), and `usage` what the attempt was
    /// charged. Called once per stream, from the body (a poll or a drop),
    /// where nothing can wait: keep it short. The default does nothing.
    fn stream_ended(&self, record: &AttemptRecord) {
        let _ = record;
    }
}
