//! The queue: feeds the store's pending jobs to the tower layer through a
//! bounded window, and writes each one's end back.
//!
//! The layer owns every decision (pacing, retries, stops); the queue only
//! carries values. What is the queue's own:
//!
//! * **the window**: at most [`Settings::window`] jobs (and
//!   [`Settings::window_bytes`] of bodies) are in the layer at once; the
//!   rest stay in the store. The layer never sheds them: each carries its
//!   deadline, and only a job with none can be shed.
//! * **deferral**: a job the layer defers goes back to the store, due at
//!   the earliest time it was given; it does not end.
//! * **the stop**: a `stop_queue` answer (spend cap, billing, auth) or the
//!   run's token budget stops the queue: the stop is kept in the store,
//!   nothing more is sent, and every job not ended becomes `stopped`.
//! * **the budget**: spent tokens plus the worst case (input estimate +
//!   output cap) of every job in the window never pass
//!   [`Settings::budget_tokens`].
//! * **deadlines**: counted from when a job was first seen, across runs; a
//!   job past its deadline is `expired` without a send. Jobs expire in file
//!   order: once the layer finds a job cannot be sent before its deadline
//!   (the jobs before it take the time left), the later jobs of its model
//!   due no later are expired unsent rather than sent in its place.
//! * **shutdown**: on a signal nothing more is sent, at once: every job
//!   carries a [`Cancel`] child of the run's, so a job waiting in the layer
//!   (for its pace, or before a retry) ends unsent and is pending again;
//!   only sends already on the wire get [`Settings::grace`], and what the
//!   grace cuts is held as unknown.

use crate::input::Shape;
use crate::output::{self, Partial};
use crate::progress::{Event, Observer, Status};
use crate::store::{submit, Counts, End, HotWrite, Pending, State, StopRecord, Store, StoreError};
use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use ratewise_core::parse::request_id::request_id_from_headers;
use ratewise_core::ActionKind;
use ratewise_tower::{Attempts, Cancel, Deadline, JobId, Model, RetryService};
use std::collections::{HashSet, VecDeque};
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};
use tokio::sync::{mpsc, watch};
use tokio::task::JoinSet;
use tower::{Service, ServiceExt};

/// Largest answer body kept (a 2xx body is the result; 64 MiB is far above
/// any message either provider returns).
const MAX_ANSWER: usize = 64 * 1024 * 1024;

/// How the queue runs.
#[derive(Debug, Clone)]
pub struct Settings {
    /// The input's shape (headers and the output's format).
    pub shape: Shape,
    /// The provider's base URL, no trailing slash and no `/v1` (every
    /// input path begins with `/v1/`; see [`normalize_upstream`]).
    pub upstream: String,
    /// The API key: sent, never written anywhere.
    pub api_key: String,
    /// Most jobs in the layer at once.
    pub window: usize,
    /// Most body bytes in the layer at once.
    pub window_bytes: usize,
    /// Each job's deadline, from when it was first seen.
    pub deadline: Duration,
    /// Input + output tokens the whole run may spend.
    pub budget_tokens: Option<u64>,
    /// On a signal, how long sends in flight get to finish.
    pub grace: Duration,
    /// The pool the layer sends every attempt through, by name (see
    /// [`crate::pool`]): the request then carries no key of its own (each
    /// member's route sets its own, and its upstream), and a stop of one
    /// member does not stop the queue.
    pub pool: Option<String>,
}

impl Settings {
    /// Defaults for `shape`: its public upstream, a window of 64 jobs and
    /// 256 MiB, no budget, a 30 s grace, and a 24 h deadline — the
    /// providers' own batch window: OpenAI's Batch API takes
    /// `completion_window` "24h" ("Currently only `24h` is supported"),
    /// and Anthropic's Message Batches end each request not processed
    /// within 24 hours as `expired`.
    pub fn new(shape: Shape, api_key: impl Into<String>) -> Settings {
        Settings {
            shape,
            upstream: shape.default_upstream().to_owned(),
            api_key: api_key.into(),
            window: 64,
            window_bytes: 256 * 1024 * 1024,
            deadline: Duration::from_secs(24 * 3600),
            budget_tokens: None,
            grace: Duration::from_secs(30),
            pool: None,
        }
    }
}

/// `url` as [`Settings::upstream`] keeps it: `https://host`,
/// `https://host/` and `https://host/v1` are the same upstream (the
/// input's paths name `/v1/...`). Read by
/// [`ratewise_tower::UpstreamUrl`], the reader `ratewise proxy
/// --upstream` uses too: one URL means one thing to both. An error when
/// it is not an `http://` or `https://` URL with a host and no query.
pub fn normalize_upstream(url: &str) -> Result<String, ratewise_tower::UpstreamUrlError> {
    ratewise_tower::UpstreamUrl::parse(url).map(ratewise_tower::UpstreamUrl::into_string)
}

/// Checks that `key` can be sent in the header its shape uses (no newline,
/// no byte a header cannot carry). The error never shows the key.
pub fn check_api_key(shape: Shape, key: &str) -> Result<(), String> {
    let value = match shape {
        Shape::Anthropic => http::HeaderValue::from_str(key),
        Shape::OpenAi => http::HeaderValue::from_str(&format!("Bearer {key}")),
    };
    match value {
        Ok(_) if !key.trim().is_empty() => Ok(()),
        Ok(_) => Err("the API key is empty".into()),
        Err(_) => Err(format!(
            "the API key holds a byte an HTTP header cannot carry (a newline, a control character, non-ASCII); {} chars",
            key.chars().count()
        )),
    }
}

/// How the run ended.
#[derive(Debug, Clone, PartialEq)]
pub enum Ending {
    /// No job is left pending.
    Finished,
    /// The queue is stopped (now or by an earlier run) until a person
    /// resumes it.
    Stopped(StopRecord),
    /// A signal: what was on the wire finished or was held.
    Interrupted,
    /// The store could not be written: nothing more was sent.
    StoreFailed(String),
}

/// What a run did.
#[derive(Debug, Clone)]
pub struct Report {
    /// How it ended.
    pub ending: Ending,
    /// Jobs per state at the end.
    pub counts: Counts,
    /// Sends made in this run.
    pub sends: u64,
    /// Of them, answered 429.
    pub answered_429: u64,
    /// Jobs cut by the end of the grace and held as unknown.
    pub cut: u64,
}

/// What one job's call came to.
enum Outcome {
    /// It ended.
    End(End),
    /// Deferred: back to the store, due then.
    PutBack(i64, End),
    /// Its answer stops the queue; whether this job was sent (else the
    /// layer was already stopped by another job's answer).
    Stop(StopRecord, End, bool),
    /// Nothing was sent and the store could not record why (the journal's
    /// write failed): the run stops, the job stays pending.
    NotSent(String),
}

/// What the loop learns of a job once its end (or its way back) is in
/// the store.
enum Flow {
    /// It ended.
    Ended,
    /// Back in the store, due later.
    PutBack,
    /// Back in the store; its answer stops the queue (whether it was sent).
    Stop(StopRecord, bool),
    /// Not sent; the store could not record the send.
    NotSent(String),
}

/// The figures of one job's call, for the run's counters.
#[derive(Default)]
struct Tally {
    sends: u64,
    answered_429: u64,
    usage: Option<(u64, u64)>,
    charged: u64,
}

impl Tally {
    fn of(outcome: &Outcome) -> Tally {
        match outcome {
            Outcome::End(e) | Outcome::PutBack(_, e) | Outcome::Stop(_, e, _) => Tally {
                sends: e.attempts.len() as u64,
                answered_429: e.attempts.iter().filter(|a| a["status"] == 429).count() as u64,
                usage: e.usage,
                charged: e.charged,
            },
            Outcome::NotSent(_) => Tally::default(),
        }
    }
}

/// Writes `outcome` to the store, from the job's own task so that the
/// writes of many jobs share one commit; the line for the partial file of
/// a job that ended.
async fn keep(
    store: &Arc<dyn Store>,
    shape: Shape,
    job: &Pending,
    outcome: Outcome,
) -> Result<(Flow, Option<String>), StoreError> {
    let seq = job.seq;
    match outcome {
        Outcome::End(end) => {
            let state = end.state.unwrap_or(State::Failed);
            let line = output::line(
                shape,
                &crate::store::Ended {
                    seq,
                    custom_id: job.custom_id.clone(),
                    state,
                    status: end.status,
                    request_id: end.request_id.clone(),
                    response: end.response.clone(),
                    cause: end.cause.clone(),
                    message: end.message.clone(),
                    attempts: serde_json::Value::Array(end.attempts.clone()).to_string(),
                    usage: end.usage,
                    charged: end.charged,
                    sends: end.attempts.len() as u64,
                    double_spend: job.double_spend,
                    waited_ms: end.waited_ms,
                },
            );
            submit(store, HotWrite::Ended(seq, end)).await?;
            Ok((Flow::Ended, Some(line)))
        }
        Outcome::PutBack(at, so_far) => {
            submit(store, HotWrite::PutBack(seq, at, so_far)).await?;
            Ok((Flow::PutBack, None))
        }
        Outcome::Stop(stop, so_far, sent) => {
            submit(store, HotWrite::PutBack(seq, 0, so_far)).await?;
            Ok((Flow::Stop(stop, sent), None))
        }
        Outcome::NotSent(why) => Ok((Flow::NotSent(why), None)),
    }
}

/// A job back from its task.
struct Back {
    job: Pending,
    /// The layer expired it: it cannot be sent before its deadline.
    expired: bool,
    tally: Tally,
    kept: Result<(Flow, Option<String>), StoreError>,
}

/// The queue over `store`, sending through `service` (a [`RetryService`]
/// whose layer journals to the same store: [`crate::StoreJournal`]).
pub struct Queue<S> {
    store: Arc<dyn Store>,
    service: RetryService<S>,
    settings: Settings,
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

/// Resolves once `shutdown` is true (at once when it already is); never
/// when its sender is gone without saying so.
async fn shutdown_asked(shutdown: &mut watch::Receiver<bool>) {
    if shutdown.wait_for(|asked| *asked).await.is_err() {
        std::future::pending::<()>().await;
    }
}

/// A store call, off the async threads (the store's calls block).
async fn blocking<R: Send + 'static>(
    store: &Arc<dyn Store>,
    f: impl FnOnce(&dyn Store) -> Result<R, StoreError> + Send + 'static,
) -> Result<R, StoreError> {
    let store = Arc::clone(store);
    tokio::task::spawn_blocking(move || f(store.as_ref()))
        .await
        .map_err(|e| StoreError::with_source("a store call was lost", e))?
}

/// The HTTP client under the layer: one send per call (hyper-util's
/// client, [`crate::Client`]).
pub trait Upstream:
    Service<
        http::Request<Full<Bytes>>,
        Response = http::Response<hyper::body::Incoming>,
        Future: Send + 'static,
        Error: Into<ratewise_tower::BoxError>,
    > + Clone
    + Send
    + 'static
{
}

impl<S> Upstream for S where
    S: Service<
            http::Request<Full<Bytes>>,
            Response = http::Response<hyper::body::Incoming>,
            Future: Send + 'static,
            Error: Into<ratewise_tower::BoxError>,
        > + Clone
        + Send
        + 'static
{
}

impl<S: Upstream> Queue<S> {
    /// A queue over `store`.
    pub fn new(store: Arc<dyn Store>, service: RetryService<S>, settings: Settings) -> Self {
        Queue {
            store,
            service,
            settings,
        }
    }

    /// Runs until no job is pending, the queue stops, or `shutdown` is
    /// true (a sender dropped without sending `true` is not a shutdown).
    /// Each ended job's line is appended to `partial`; an
    /// [`Event::Progress`] goes to `observer` each second.
    pub async fn run(
        self,
        mut shutdown: watch::Receiver<bool>,
        partial: &mut Partial,
        observer: &dyn Observer,
    ) -> Result<Report, StoreError> {
        let store = Arc::clone(&self.store);
        let shape = self.settings.shape;
        let mut sends = 0u64;
        let mut answered_429 = 0u64;
        let mut counts = blocking(&store, move |s| s.counts()).await?;
        if let Some(stop) = blocking(&store, move |s| s.stopped()).await? {
            observer.event(Event::Stopped(stop.clone()));
            return Ok(Report {
                ending: Ending::Stopped(stop),
                counts,
                sends,
                answered_429,
                cut: 0,
            });
        }
        let mut spent = counts.spent;
        // Each task sends one `Back`, and at most a window of tasks run.
        let (tx, mut rx) = mpsc::channel::<Back>(self.settings.window.max(1));
        // The run's cancellation: a child in every request. Given on a
        // signal, a job not on the wire ends unsent.
        let cancel = Cancel::new();
        let mut ended_here = 0u64;
        let deadline_ms = i64::try_from(self.settings.deadline.as_millis()).unwrap_or(i64::MAX);
        // Per model, the latest deadline of a job the layer found it could
        // not send in time: jobs of that model due no later are expired
        // unsent.
        let mut doomed: std::collections::HashMap<Option<String>, i64> =
            std::collections::HashMap::new();
        let mut tasks = JoinSet::new();
        let mut window: HashSet<i64> = HashSet::new();
        let mut window_bytes = 0usize;
        let mut in_flight_worst = 0u64;
        let mut cursor = 0i64;
        let mut ending: Option<Ending> = None;
        // Whether the stop in `ending` came from an answer to its job.
        let mut stop_by_answer = false;
        let mut draining = false;
        let mut grace_end: Option<tokio::time::Instant> = None;
        let mut rates = Rates::default();
        // Per job, the times a pooled stop put it back for another member.
        let mut pool_rounds: std::collections::HashMap<i64, usize> =
            std::collections::HashMap::new();
        let started = Instant::now();
        let mut tick = tokio::time::interval(Duration::from_secs(1));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);

        loop {
            // Fill the window.
            // Refilled in batches, once half the window is free: one store
            // read brings many jobs, instead of one read per answer.
            let mut budget_blocked = false;
            let may_fill = window.len() <= self.settings.window / 2;
            while may_fill && !draining && ending.is_none() && window.len() < self.settings.window {
                let room = self.settings.window - window.len();
                let bytes_room = self.settings.window_bytes.saturating_sub(window_bytes);
                if bytes_room == 0 {
                    break;
                }
                let now = now_ms();
                let batch = blocking(&store, move |s| {
                    s.next_pending(cursor, now, room, bytes_room)
                })
                .await?;
                if batch.is_empty() {
                    if cursor == 0 {
                        break;
                    }
                    // Past the end: go round again for jobs put back.
                    cursor = 0;
                    continue;
                }
                let mut took = false;
                for job in batch {
                    cursor = cursor.max(job.seq);
                    if window.contains(&job.seq) {
                        continue;
                    }
                    let job_deadline_ms = job.first_seen_ms.saturating_add(deadline_ms);
                    let behind_doomed = doomed
                        .get(&job.model)
                        .is_some_and(|d| job_deadline_ms <= *d);
                    if job_deadline_ms <= now || behind_doomed {
                        let message = if job_deadline_ms <= now {
                            "its deadline passed before it could be sent"
                        } else {
                            "it cannot be sent before its deadline: an earlier job of its model could not be"
                        };
                        let end = End {
                            state: Some(State::Expired),
                            cause: Some("deadline".into()),
                            message: Some(message.into()),
                            ..End::default()
                        };
                        let (_, line) = keep(&store, shape, &job, Outcome::End(end)).await?;
                        if let Some(line) = line {
                            let _ = partial.push(&line);
                        }
                        continue;
                    }
                    if let Some(budget) = self.settings.budget_tokens {
                        if spent + in_flight_worst + job.worst_case() > budget {
                            budget_blocked = true;
                            if window.is_empty() {
                                let stop = StopRecord {
                                    cause: "budget".into(),
                                    at: httpdate::fmt_http_date(SystemTime::now()),
                                    status: None,
                                    message: format!(
                                        "--budget-tokens {budget}: {spent} spent, the next job's worst case is {}",
                                        job.worst_case()
                                    ),
                                    custom_id: Some(job.custom_id.clone()),
                                };
                                ending = Some(Ending::Stopped(stop));
                            }
                            // Round again from this job once room is back.
                            cursor = job.seq - 1;
                            break;
                        }
                    }
                    took = true;
                    window.insert(job.seq);
                    window_bytes += job.body.len();
                    in_flight_worst += job.worst_case();
                    let remaining = Duration::from_millis((job_deadline_ms - now) as u64);
                    // The call is made and first polled here, in file
                    // order: the job takes its place in the layer's queue
                    // (and is told whether it can be sent in time) before
                    // the next line's, so the window's jobs wait and
                    // expire in file order.
                    let mut svc = self.service.clone();
                    let started =
                        start(&mut svc, &self.settings, &job, remaining, cancel.child()).await;
                    let first = match started {
                        Ok(call) => {
                            let mut call = Box::pin(call);
                            match std::future::poll_fn(|cx| {
                                std::task::Poll::Ready(call.as_mut().poll(cx))
                            })
                            .await
                            {
                                std::task::Poll::Ready(result) => First::Answered(result),
                                std::task::Poll::Pending => First::Waiting(call),
                            }
                        }
                        Err(not_sent) => First::NotSent(Box::new(not_sent)),
                    };
                    if let First::Answered(Err(e)) = &first {
                        if e.give_up_reason() == Some(ratewise_core::GiveUpReason::Deadline) {
                            let d = doomed.entry(job.model.clone()).or_insert(job_deadline_ms);
                            *d = (*d).max(job_deadline_ms);
                        }
                    }
                    let settings = self.settings.clone();
                    let tx = tx.clone();
                    let store = Arc::clone(&store);
                    tasks.spawn(async move {
                        let outcome = match first {
                            First::Waiting(call) => answer::<S>(call.await, &job).await,
                            First::Answered(result) => answer::<S>(result, &job).await,
                            First::NotSent(not_sent) => *not_sent,
                        };
                        let tally = Tally::of(&outcome);
                        let expired = matches!(
                            &outcome,
                            Outcome::End(End {
                                state: Some(State::Expired),
                                ..
                            })
                        );
                        let kept = keep(&store, settings.shape, &job, outcome).await;
                        let _ = tx
                            .send(Back {
                                job,
                                expired,
                                tally,
                                kept,
                            })
                            .await;
                    });
                }
                if budget_blocked || !took {
                    break;
                }
            }
            if let Some(Ending::Stopped(stop)) = &ending {
                if window.is_empty() {
                    let kept = stop.clone();
                    blocking(&store, move |s| s.stop(&kept)).await?;
                    observer.event(Event::Stopped(stop.clone()));
                    break;
                }
            }
            if window.is_empty() {
                if draining || ending.is_some() {
                    break;
                }
                let due = blocking(&store, move |s| s.next_due()).await?;
                match due {
                    None => {
                        ending = Some(Ending::Finished);
                        break;
                    }
                    Some(at) if at <= now_ms() => {
                        cursor = 0;
                        continue;
                    }
                    Some(at) => {
                        let wait = Duration::from_millis((at - now_ms()).max(1) as u64);
                        tokio::select! {
                            _ = tokio::time::sleep(wait) => { cursor = 0; continue; }
                            _ = shutdown_asked(&mut shutdown) => {
                                cancel.cancel();
                                draining = true;
                                ending = Some(Ending::Interrupted);
                                continue;
                            }
                        }
                    }
                }
            }
            let grace_sleep = async {
                match grace_end {
                    Some(t) => tokio::time::sleep_until(t).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                Some(Back { job, expired, tally, kept }) = rx.recv() => {
                    // The layer found it cannot be sent in time (the jobs
                    // before it take the time left): no later job of its
                    // model due as soon is sent either — they expire, in
                    // file order.
                    if expired {
                        let due = job.first_seen_ms.saturating_add(deadline_ms);
                        let d = doomed.entry(job.model.clone()).or_insert(due);
                        *d = (*d).max(due);
                    }
                    // Finished tasks are reaped, or the set keeps them all.
                    while tasks.try_join_next().is_some() {}
                    window.remove(&job.seq);
                    window_bytes -= job.body.len();
                    in_flight_worst -= job.worst_case();
                    sends += tally.sends;
                    answered_429 += tally.answered_429;
                    if let Some((i, o)) = tally.usage {
                        rates.push(i, o, job.max_tokens);
                    }
                    spent += tally.charged;
                    let kept = kept.unwrap_or_else(|e| (Flow::NotSent(e.to_string()), None));
                    if matches!(kept.0, Flow::Ended) {
                        ended_here += 1;
                    }
                    match kept {
                        (Flow::Ended, line) => {
                            // The partial file is a convenience; the final
                            // file is written from the store.
                            if let Some(line) = line {
                                let _ = partial.push(&line);
                            }
                        }
                        (Flow::PutBack, _) => {}
                        // The stop names the job whose answer stopped the
                        // queue: one that was sent, not one the stopped
                        // layer turned away before a send. In a pool, one
                        // member's stop is not the queue's: the job is
                        // pending again and goes to a member still sending.
                        (Flow::Stop(stop, sent), _) => {
                            let stop = self.pool_stop(stop, job.seq, &mut pool_rounds).await;
                            if let Some(stop) = stop {
                                let replace = match &ending {
                                    Some(Ending::Stopped(_)) => sent && !stop_by_answer,
                                    _ => true,
                                };
                                if replace {
                                    stop_by_answer = sent;
                                    ending = Some(Ending::Stopped(stop));
                                }
                            }
                        }
                        // Nothing more is sent when the store cannot keep
                        // what is sent: the run stops, resumable.
                        (Flow::NotSent(why), _) => {
                            if ending.is_none() || matches!(ending, Some(Ending::Interrupted)) {
                                ending = Some(Ending::StoreFailed(why));
                            }
                            draining = true;
                        }
                    }
                }
                _ = shutdown_asked(&mut shutdown), if !draining => {
                    // Nothing more is sent: the jobs waiting in the layer
                    // end unsent; those on the wire get the grace.
                    cancel.cancel();
                    draining = true;
                    ending = Some(Ending::Interrupted);
                    grace_end = Some(tokio::time::Instant::now() + self.settings.grace);
                }
                _ = grace_sleep => {
                    // The grace is over: what is still on the wire is cut.
                    tasks.abort_all();
                    break;
                }
                _ = tick.tick() => {
                    let c = blocking(&store, move |s| s.counts())
                    .await?;
                    counts = c;
                    observer.event(Event::Progress(self.status(&counts, sends, answered_429, spent, &rates, started, ended_here)));
                }
            }
        }
        let _ = partial.flush();
        tasks.abort_all();
        while tasks.join_next().await.is_some() {}
        // Jobs whose send was journaled and whose answer was not recorded
        // (cut at the end of the grace): held, never re-sent silently.
        let cut = blocking(&store, move |s| s.hold_cut()).await?;
        let counts = blocking(&store, move |s| s.counts()).await?;
        observer.event(Event::Progress(self.status(
            &counts,
            sends,
            answered_429,
            spent,
            &rates,
            started,
            ended_here,
        )));
        Ok(Report {
            ending: ending.unwrap_or(Ending::Finished),
            counts,
            sends,
            answered_429,
            cut,
        })
    }

    /// Whether a job's stop answer stops the queue, and as what. Without
    /// a pool it does. In a pool the layer ends a job stopped when it
    /// cannot go on with another member; the queue stops only when every
    /// member is stopped, and its stop then names each member's cause.
    /// While a member still sends, the job (already pending again, due
    /// now) is taken again and goes to it: at most once per member, so a
    /// job the layer keeps turning away cannot go round for ever. (A job
    /// whose request may have run is held as unknown by the layer, never
    /// stopped: it is not sent to another member.)
    async fn pool_stop(
        &self,
        mut stop: StopRecord,
        seq: i64,
        rounds: &mut std::collections::HashMap<i64, usize>,
    ) -> Option<StopRecord> {
        let Some(name) = self.settings.pool.clone() else {
            return Some(stop);
        };
        let Some(status) = self.service.layer().pool_status().await else {
            return Some(stop);
        };
        let every = crate::pool::all_stopped(&status);
        if !every {
            let n = rounds.entry(seq).or_insert(0);
            if *n < status.members.len() {
                *n += 1;
                return None;
            }
        }
        if let Some(cause) = crate::pool::common_cause(&status) {
            stop.cause = cause.to_owned();
        }
        let members = crate::pool::members_in_words(&status);
        stop.message = if every {
            format!(
                "every member of pool {name:?} is stopped: {members}; the last answer: {}",
                stop.message
            )
        } else {
            format!(
                "pool {name:?}: the job could not go on with another member ({members}); the last answer: {}",
                stop.message
            )
        };
        Some(stop)
    }

    #[allow(clippy::too_many_arguments)]
    fn status(
        &self,
        counts: &Counts,
        sends: u64,
        answered_429: u64,
        spent: u64,
        rates: &Rates,
        started: Instant,
        ended_here: u64,
    ) -> Status {
        let snapshots = self.service.layer().snapshots().unwrap_or_default();
        Status::from_parts(
            counts,
            sends,
            answered_429,
            spent,
            rates,
            &snapshots,
            started.elapsed(),
            ended_here,
        )
    }
}

/// Tokens reported in the last minute, for the progress line.
#[derive(Debug, Default)]
pub struct Rates {
    seen: VecDeque<(Instant, u64, u64)>,
    /// Output tokens reported over output caps, over the whole run: how
    /// much of `max_tokens` jobs really use (for the ETA).
    pub output_used: u64,
    /// See [`Rates::output_used`].
    pub output_capped: u64,
}

impl Rates {
    fn push(&mut self, input: u64, output: u64, cap: u64) {
        let now = Instant::now();
        self.seen.push_back((now, input, output));
        while self
            .seen
            .front()
            .is_some_and(|(t, _, _)| now.duration_since(*t) > Duration::from_secs(60))
        {
            self.seen.pop_front();
        }
        self.output_used += output;
        self.output_capped += cap;
    }

    /// Input and output tokens reported in the last minute.
    pub fn last_minute(&self) -> (u64, u64) {
        let now = Instant::now();
        self.seen
            .iter()
            .filter(|(t, _, _)| now.duration_since(*t) <= Duration::from_secs(60))
            .fold((0, 0), |(i, o), (_, a, b)| (i + a, o + b))
    }
}

/// The request of `job`, with the headers its shape needs; an error (not
/// a request with something left out) when the key or the URL cannot be
/// put in one.
fn request(
    settings: &Settings,
    job: &Pending,
    remaining: Duration,
    cancel: Cancel,
) -> Result<http::Request<Full<Bytes>>, String> {
    let mut builder = http::Request::post(format!("{}{}", settings.upstream, job.path))
        .header(http::header::CONTENT_TYPE, "application/json");
    builder = match settings.pool {
        // Each member's route sets its own key and upstream.
        Some(_) => settings.shape.versioned(builder),
        None => settings.shape.authenticate(builder, &settings.api_key),
    };
    let mut req = builder.body(Full::new(job.body.clone())).map_err(|_| {
        format!(
            "the request of {:?} could not be made (the upstream URL or the API key cannot be sent); nothing was sent",
            job.custom_id
        )
    })?;
    req.extensions_mut().insert(JobId::new(&job.custom_id));
    req.extensions_mut().insert(Deadline(remaining));
    req.extensions_mut().insert(cancel);
    if let Some(m) = &job.model {
        req.extensions_mut().insert(Model::new(m));
    }
    Ok(req)
}

/// Each attempt as the output keeps it: when it was sent, what came back
/// (status, request id, cause, error type and code, transport failure) and
/// what was decided (action, delay) — the allow-listed record, without the
/// rate-limit windows.
fn attempts_json(records: &[ratewise_core::record::AttemptRecord]) -> Vec<serde_json::Value> {
    records
        .iter()
        .map(|r| {
            let mut v = serde_json::json!({
                "sent_at": r.time_utc,
                "attempt": r.attempt,
                "status": r.status,
                "request_id": r.request_id,
                "cause": r.cause.as_str(),
                "action": r.action.as_str(),
            });
            // A pooled attempt's member: its upstream and key fingerprint
            // (`host:port#fp-…`), never the key.
            if let Some(member) = &r.member {
                v["member"] = member.clone().into();
            }
            for (k, x) in [
                ("delay_ms", r.delay_ms.map(serde_json::Value::from)),
                ("transport", r.transport.map(serde_json::Value::from)),
                (
                    "error_type",
                    r.error_type.clone().map(serde_json::Value::from),
                ),
                (
                    "error_code",
                    r.error_code.clone().map(serde_json::Value::from),
                ),
            ] {
                if let Some(x) = x {
                    v[k] = x;
                }
            }
            v
        })
        .collect()
}

fn waited(records: &[ratewise_core::record::AttemptRecord]) -> u64 {
    records.iter().filter_map(|r| r.delay_ms).sum()
}

/// A call after its first poll in the fill loop.
enum First<F: Future> {
    /// Waiting in the layer (or on the wire).
    Waiting(std::pin::Pin<Box<F>>),
    /// Answered at once (the layer ended it before a send).
    Answered(F::Output),
    /// No call could be made.
    NotSent(Box<Outcome>),
}

/// The request of `job` handed to the layer: the call's future (the
/// job's place in the layer's queue is taken now), or what it came to when
/// none could be made.
async fn start<S: Upstream>(
    svc: &mut RetryService<S>,
    settings: &Settings,
    job: &Pending,
    remaining: Duration,
    cancel: Cancel,
) -> Result<<RetryService<S> as Service<http::Request<Full<Bytes>>>>::Future, Outcome> {
    let req = request(settings, job, remaining, cancel).map_err(Outcome::NotSent)?;
    match svc.ready().await {
        Ok(s) => Ok(s.call(req)),
        Err(e) => Err(outcome_of_error(job, &e)),
    }
}

/// What the layer's answer to `job` comes to.
async fn answer<S: Upstream>(
    result: Result<
        <RetryService<S> as Service<http::Request<Full<Bytes>>>>::Response,
        ratewise_tower::Error,
    >,
    job: &Pending,
) -> Outcome {
    match result {
        Ok(resp) => {
            let status = resp.status().as_u16();
            let rid = request_id_from_headers(resp.headers());
            let attempts = resp
                .extensions()
                .get::<Attempts>()
                .map(|a| a.0.clone())
                .unwrap_or_default();
            let body = Limited::new(resp.into_body(), MAX_ANSWER).collect().await;
            let mut end = End {
                status: Some(status),
                request_id: rid,
                attempts: attempts_json(&attempts),
                waited_ms: waited(&attempts),
                ..End::default()
            };
            match body {
                Ok(b) => {
                    let bytes = b.to_bytes();
                    end.usage = crate::output::usage_of(&bytes);
                    let ok = (200..300).contains(&status);
                    end.state = Some(if ok { State::Done } else { State::Failed });
                    end.cause = Some(if ok { "success" } else { "unclassified" }.into());
                    end.charged = match end.usage {
                        Some((i, o)) => i + o,
                        None if ok => job.worst_case(),
                        None => 0,
                    };
                    end.response = Some(bytes);
                }
                Err(e) => {
                    // Answered, but the body was cut: it may have been
                    // generated and billed.
                    end.state = Some(State::HeldUnknown);
                    end.cause = Some("outcome_unknown".into());
                    end.message = Some(format!("the answer's body was cut: {e}"));
                    end.charged = job.worst_case();
                }
            }
            Outcome::End(end)
        }
        Err(e) => outcome_of_error(job, &e),
    }
}

fn outcome_of_error(job: &Pending, e: &ratewise_tower::Error) -> Outcome {
    let attempts = e.attempts();
    let cause = e
        .classification()
        .map(|c| c.cause.as_str().to_owned())
        .or_else(|| attempts.last().map(|a| a.cause.as_str().to_owned()));
    let mut end = End {
        status: e.status().map(|s| s.as_u16()),
        request_id: e.headers().and_then(request_id_from_headers),
        response: e.body().cloned(),
        cause: cause.clone(),
        message: Some(e.to_string()),
        attempts: attempts_json(attempts),
        waited_ms: waited(attempts),
        ..End::default()
    };
    match e.action() {
        Some(ActionKind::Defer) | Some(ActionKind::Retry) => {
            let at = e
                .earliest()
                .and_then(|t| t.duration_since(SystemTime::UNIX_EPOCH).ok())
                .map_or_else(|| now_ms() + 1_000, |d| d.as_millis() as i64);
            Outcome::PutBack(at, end)
        }
        Some(ActionKind::StopQueue) => {
            let stop = StopRecord {
                cause: cause.unwrap_or_else(|| "stopped".into()),
                at: httpdate::fmt_http_date(SystemTime::now()),
                status: end.status,
                message: e.to_string(),
                custom_id: Some(job.custom_id.clone()),
            };
            Outcome::Stop(stop, end, e.was_sent())
        }
        // The run's cancellation (a signal): nothing more is sent for it;
        // it is pending again, what it has so far kept.
        Some(ActionKind::GiveUp)
            if e.give_up_reason() == Some(ratewise_core::GiveUpReason::Cancelled) =>
        {
            end.cause = None;
            end.message = None;
            Outcome::PutBack(0, end)
        }

        Some(ActionKind::HoldUnknown) => {
            end.state = Some(State::HeldUnknown);
            end.charged = job.worst_case();
            Outcome::End(end)
        }
        Some(ActionKind::GiveUp)
            if e.give_up_reason() == Some(ratewise_core::GiveUpReason::Deadline) =>
        {
            end.state = Some(State::Expired);
            Outcome::End(end)
        }
        // The layer's journal (the store) could not record the next send:
        // it was not made, and the store still has the job pending.
        Some(ActionKind::Inspect) => match std::error::Error::source(e) {
            Some(why) => {
                Outcome::NotSent(format!("{e}: the store could not record its send: {why}"))
            }
            None => {
                end.state = Some(State::Failed);
                Outcome::End(end)
            }
        },
        _ => {
            end.state = Some(State::Failed);
            Outcome::End(end)
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::output::usage_of;

    #[test]
    fn usage_after_a_long_completion_is_read() {
        // 200 KiB of text before `usage`, as a long completion has.
        let text = "word ".repeat(40_000);
        let anthropic = format!(
            r#"{{"content":[{{"type":"text","text":"{text}"}}],"usage":{{"input_tokens":10,"cache_creation_input_tokens":2,"cache_read_input_tokens":3,"output_tokens":40000}}}}"#
        );
        assert!(anthropic.len() > 64 * 1024);
        assert_eq!(usage_of(anthropic.as_bytes()), Some((15, 40_000)));
        let openai = format!(
            r#"{{"choices":[{{"message":{{"content":"{text}"}}}}],"usage":{{"prompt_tokens":19,"completion_tokens":40000,"prompt_tokens_details":{{"cached_tokens":4}}}}}}"#
        );
        assert_eq!(usage_of(openai.as_bytes()), Some((19, 40_000)));
        assert_eq!(usage_of(b"not json"), None);
        assert_eq!(usage_of(br#"{"id":"x"}"#), None);
    }
}
