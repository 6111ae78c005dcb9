//! What happened during a real run, in order, and how it becomes the
//! simulation's [`Report`]: arrivals, sends (the layer's journal, written
//! before each send), money answers (the journal's end of that attempt:
//! the client has read it), and ends; joined with the mock's records of
//! what it answered each send.

use crate::clock::ScaledClock;
use crate::run::STRATEGY;
use ratewise_core::record::AttemptRecord;
use ratewise_core::{Cause, Instant};
use ratewise_mock::RequestRecord;
use ratewise_sim::engine::Terminal;
use ratewise_sim::metrics::{Recorder, Report};
use ratewise_sim::provider::{Answered, Delivery, Verdict};
use ratewise_sim::workload::Job;
use ratewise_sim::Scenario;
use ratewise_tower::Journal;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// One thing that happened.
#[derive(Debug)]
pub(crate) enum Ev {
    /// A job arrived; `level` is the mock's binding bucket level when no
    /// job was outstanding (a waiting interval starts).
    Arrive { level: Option<u64> },
    /// The layer is about to send attempt `attempt` of call `job_call`.
    Send { job_call: String, attempt: u32 },
    /// The layer decided an attempt's answer (or transport failure): the
    /// request is no longer in flight.
    Answered,
    /// The client read a money answer (spend cap, billing).
    Money,
    /// A job ended.
    End { job: u32, how: Terminal },
}

/// Events in the order they happened, each with its provider time.
#[derive(Debug, Default)]
pub(crate) struct Log {
    pub(crate) events: Vec<(Instant, Ev)>,
    pub(crate) outstanding: u64,
}

pub(crate) struct RunLog {
    pub(crate) log: Mutex<Log>,
    pub(crate) clock: ScaledClock,
    /// Calls the layer handed back (`defer`): each a job its caller had to
    /// call again.
    pub(crate) handed_back: std::sync::atomic::AtomicU64,
}

impl RunLog {
    pub(crate) fn push(&self, ev: Ev) {
        let mut log = self.log.lock().unwrap_or_else(|e| e.into_inner());
        let now = self.clock.instant();
        log.events.push((now, ev));
    }
}

/// The journal: every send before it goes out, and money answers when
/// the client has read them.
pub(crate) struct EventJournal(pub(crate) Arc<RunLog>);

impl Journal for EventJournal {
    fn attempt_started<'a>(
        &'a self,
        job_id: &'a str,
        attempt: u32,
        _at: std::time::SystemTime,
    ) -> ratewise_tower::Written<'a> {
        self.0.push(Ev::Send {
            job_call: job_id.to_owned(),
            attempt,
        });
        ratewise_tower::written(Ok::<(), std::io::Error>(()))
    }

    fn attempt_ended<'a>(&'a self, record: &'a AttemptRecord) -> ratewise_tower::Written<'a> {
        self.0.push(Ev::Answered);
        if matches!(record.cause, Cause::SpendCap | Cause::Billing) {
            self.0.push(Ev::Money);
        }
        ratewise_tower::written(Ok::<(), std::io::Error>(()))
    }
}

fn verdict_of(r: &RequestRecord) -> Verdict {
    match r.cause {
        Cause::Success => Verdict::Success,
        Cause::RateLimited => Verdict::RateLimited,
        Cause::AccelerationLimited => Verdict::SlowDown,
        Cause::SpendCap | Cause::Billing => Verdict::Money,
        Cause::Overloaded => Verdict::Overloaded,
        Cause::OutcomeUnknown => Verdict::Reset,
        _ => Verdict::Other,
    }
}

fn answered_of(r: &RequestRecord) -> Answered {
    let delivery = match r.status.and_then(|s| http::StatusCode::from_u16(s).ok()) {
        Some(status) => Delivery::Response {
            status,
            headers: http::HeaderMap::new(),
            body: Vec::new(),
        },
        None => Delivery::Reset,
    };
    Answered {
        delivery,
        verdict: verdict_of(r),
        grant: None,
        latency: Duration::ZERO,
    }
}

pub(crate) fn job_of(job_call: &str) -> Option<u32> {
    job_call
        .strip_prefix("job-")?
        .split('.')
        .next()?
        .parse()
        .ok()
}

/// Feeds the events, in the order they happened, to the simulation's
/// [`Recorder`]; returns the report and the count of unmatched sends.
pub(crate) fn replay(
    scenario: &Scenario,
    all: &[Job],
    events: Vec<(Instant, Ev)>,
    records: &[RequestRecord],
    end: Instant,
) -> (Report, u64) {
    let mut by_send: HashMap<(&str, u32), &RequestRecord> = HashMap::with_capacity(records.len());
    let mut unmatched = 0u64;
    for r in records {
        match (&r.job, r.attempt) {
            (Some(j), Some(a)) => {
                by_send.insert((j.as_str(), a), r);
            }
            _ => unmatched += 1,
        }
    }
    let mut rec = Recorder::new(scenario, all);
    let full = ratewise_sim::metrics::full_bucket(scenario, rec.binding_limit());
    let (mut arrived, mut ended, mut in_flight) = (0u64, 0u64, 0u64);
    let mut matched = 0u64;
    let mut last = Instant::ZERO;
    for (at, ev) in &events {
        let at = *at;
        last = last.max(at);
        let mut level = 0;
        match ev {
            Ev::Arrive { level: l, .. } => {
                if rec.is_idle() {
                    level = l.unwrap_or(full);
                }
                arrived += 1;
            }
            Ev::Send { job_call, attempt } => {
                in_flight += 1;
                let job = job_of(job_call).and_then(|j| all.get(j as usize));
                match (job, by_send.get(&(job_call.as_str(), *attempt))) {
                    (Some(job), Some(r)) => {
                        matched += 1;
                        rec.on_send(job, &answered_of(r), at);
                    }
                    _ => unmatched += 1,
                }
            }
            Ev::Answered => in_flight = in_flight.saturating_sub(1),
            Ev::Money => rec.on_money_answer(),
            Ev::End { job, how } => {
                if let Some(j) = all.get(*job as usize) {
                    rec.on_end(j, *how, at);
                    ended += 1;
                }
            }
        }
        // Waiting: arrived, not ended, not in flight (as the simulation
        // counts it).
        let waiting = arrived.saturating_sub(ended).saturating_sub(in_flight);
        rec.on_waiting(waiting, level, at);
    }
    unmatched += (by_send.len() as u64).saturating_sub(matched);
    (rec.finish(STRATEGY, end.max(last)), unmatched)
}
