//! The tower layer's journal, written to the store: an attempt is
//! `sending` in the store before it is sent.

use crate::store::{HotWrite, Store};
use ratewise_core::record::AttemptRecord;
use ratewise_core::Cause;
use ratewise_tower::{Journal, Written};
use std::sync::Arc;
use std::time::SystemTime;

/// Marks a job `sending` (and counts the send) before each attempt; the
/// layer does not send when the write fails.
pub struct StoreJournal(pub Arc<dyn Store>);

impl Journal for StoreJournal {
    fn attempt_started<'a>(&'a self, job_id: &'a str, attempt: u32, at: SystemTime) -> Written<'a> {
        self.attempt_started_on(job_id, attempt, None, at)
    }

    /// A pooled attempt's member is kept with it: a run cut while it is on
    /// the wire holds it as unknown, naming where it went.
    fn attempt_started_on<'a>(
        &'a self,
        job_id: &'a str,
        _attempt: u32,
        member: Option<&'a str>,
        _at: SystemTime,
    ) -> Written<'a> {
        let store = Arc::clone(&self.0);
        let id = job_id.to_owned();
        let member = member.map(str::to_owned);
        Box::pin(async move {
            crate::store::submit(&store, HotWrite::Started(id, member))
                .await
                .map_err(Into::into)
        })
    }

    /// An error answer (any status outside 2xx), or a connection that
    /// failed before a byte was sent, means nothing was generated: the job
    /// is `pending` again in the store until its next attempt starts, so a
    /// crash in the wait before a retry does not hold it as unknown. A 2xx
    /// or a send with no answer keeps it `sending` until the queue records
    /// its end: lost then, it reads as an unknown outcome — the safe side.
    fn attempt_ended<'a>(&'a self, record: &'a AttemptRecord) -> Written<'a> {
        let answered_error = record.status.is_some_and(|s| !(200..300).contains(&s));
        let never_left = record.status.is_none() && record.cause == Cause::ConnectFailed;
        let (Some(id), true) = (record.job_id.clone(), answered_error || never_left) else {
            return ratewise_tower::written(Ok::<(), std::io::Error>(()));
        };
        let store = Arc::clone(&self.0);
        Box::pin(async move {
            crate::store::submit(&store, HotWrite::BetweenAttempts(id))
                .await
                .map_err(Into::into)
        })
    }
}
