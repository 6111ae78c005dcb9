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
//!   [`Settings::budget_tokens`]. What was spent and what the window
//!   holds are counted by the core's [`SpendBudget`], without a window and
//!   starting from what earlier runs of the store spent.
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
use crate::store::{
    submit, Counts, End, HotWrite, Pending, State, StopCause, StopRecord, Store, StoreError,
};
use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use ratewise_core::admit::spend_budget::{SpendBudget, SpendCheck};
use ratewise_core::admit::{SpendConfig, SpendTotals};
use ratewise_core::parse::request_id::request_id_from_headers;
use ratewise_core::{ActionKind, Cause};
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
pub(crate) const MAX_ANSWER: usize = 64 * 1024 * 1024;

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
    /// The level of every job in its key's queue (default
    /// `bulk`).
    pub priority: String,
}

/// The level a run's jobs wait at unless told otherwise: below a
/// proxy's interactive and default calls on the same key.
pub const DEFAULT_PRIORITY: &str = "bulk";

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
            priority: DEFAULT_PRIORITY.to_owned(),
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
    /// The upstream could not be reached: a job's every attempt failed
    /// before a byte was sent (connection refused, a name that did not
    /// resolve, a TLS handshake that failed). No job failed for it:
    /// nothing more was sent, and the jobs are pending for a re-run (with
    /// the right `--upstream`).
    Unreachable {
        /// The upstream tried (a pool member as `host:port#fp-…`).
        upstream: String,
        /// Why, in words (`connection refused`).
        cause: String,
    },
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
    /// Every attempt failed before a byte was sent: the upstream (named)
    /// could not be reached, for the cause (in words). The job is pending
    /// again, what it has so far kept; the run stops.
    Unreached(End, String, String),
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
    /// Back in the store, unsent: the upstream (named) could not be
    /// reached, for the cause (in words).
    Unreached(String, String),
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
            Outcome::End(e)
            | Outcome::PutBack(_, e)
            | Outcome::Stop(_, e, _)
            | Outcome::Unreached(e, _, _) => Tally {
                // An attempt that reached no server is no send.
                sends: e.attempts.iter().filter(|a| reached(a)).count() as u64,
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
/// a job that ended. `since_ms`: when the run could first have sent the
/// job (its start): the store counts the job's wait from then (or from
/// when it was due, if later) to its last send.
async fn keep(
    store: &Arc<dyn Store>,
    shape: Shape,
    job: &Pending,
    outcome: Outcome,
    since_ms: i64,
) -> Result<(Flow, Option<String>), StoreError> {
    let seq = job.seq;
    match outcome {
        Outcome::End(mut end) => {
            end.since_ms = Some(since_ms);
            let mut ended = ended_of(job, &end);
            submit(store, HotWrite::Ended(seq, end)).await?;
            // The wait as the store counted it (across runs), as the
            // final file will say it.
            if let Some(waited) = blocking(store, move |s| s.waited_ms(seq)).await? {
                ended.waited_ms = waited;
            }
            Ok((Flow::Ended, Some(output::line(shape, &ended))))
        }
        Outcome::PutBack(at, mut so_far) => {
            so_far.since_ms = Some(since_ms);
            submit(store, HotWrite::PutBack(seq, at, so_far)).await?;
            Ok((Flow::PutBack, None))
        }
        Outcome::Stop(stop, mut so_far, sent) => {
            so_far.since_ms = Some(since_ms);
            submit(store, HotWrite::PutBack(seq, 0, so_far)).await?;
            Ok((Flow::Stop(stop, sent), None))
        }
        Outcome::NotSent(why) => Ok((Flow::NotSent(why), None)),
        Outcome::Unreached(mut so_far, upstream, cause) => {
            so_far.since_ms = Some(since_ms);
            submit(store, HotWrite::PutBack(seq, 0, so_far)).await?;
            Ok((Flow::Unreached(upstream, cause), None))
        }
    }
}

/// The output's view of `job` ended as `end` (this run's part of it).
fn ended_of(job: &Pending, end: &End) -> crate::store::Ended {
    crate::store::Ended {
        seq: job.seq,
        custom_id: job.custom_id.clone(),
        state: end.state.unwrap_or(State::Failed),
        status: end.status,
        request_id: end.request_id.clone(),
        response: end.response.clone(),
        cause: end.cause.clone(),
        message: end.message.clone(),
        attempts: serde_json::Value::Array(end.attempts.clone()).to_string(),
        usage: end.usage,
        charged: end.charged,
        sends: end.attempts.iter().filter(|a| reached(a)).count() as u64,
        double_spend: job.double_spend,
        waited_ms: end.waited_ms,
    }
}

/// Whether an attempt (as the output keeps it) reached a server: it is
/// not a connection that failed before a byte was sent.
fn reached(attempt: &serde_json::Value) -> bool {
    attempt["cause"] != Cause::ConnectFailed.as_str()
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
    ///
    /// The steps of each turn, in `Drive`: fill the window → settle a
    /// stop once the window is empty → with nothing in the window, wait
    /// for the next job due → otherwise wait for a job back, a shutdown,
    /// the end of the grace or the progress tick. Then the ending.
    pub async fn run(
        self,
        mut shutdown: watch::Receiver<bool>,
        partial: &mut Partial,
        observer: &dyn Observer,
    ) -> Result<Report, StoreError> {
        let counts = blocking(&self.store, move |s| s.counts()).await?;
        if let Some(stop) = blocking(&self.store, move |s| s.stopped()).await? {
            observer.event(Event::Stopped(stop.clone()));
            return Ok(Report {
                ending: Ending::Stopped(stop),
                counts,
                sends: 0,
                answered_429: 0,
                cut: 0,
            });
        }
        // Each task sends one `Back`, and at most a window of tasks run.
        let (tx, mut rx) = mpsc::channel::<Back>(self.settings.window.max(1));
        let mut drive = Drive::new(self, tx, counts.spent);
        let mut tick = tokio::time::interval(Duration::from_secs(1));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
        loop {
            drive.fill(partial).await?;
            if drive.settle_stop(observer).await? {
                break;
            }
            let next = if drive.window.is_empty() {
                drive.idle(&mut shutdown).await?
            } else {
                let events = (&mut rx, &mut shutdown, &mut tick);
                drive.next_event(events, partial, observer).await?
            };
            if let Next::Done = next {
                break;
            }
        }
        drive.finish(partial, observer).await
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
            stop.cause = cause.into();
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
}

/// The call future of one job in the layer.
type Call<S> = <RetryService<S> as Service<http::Request<Full<Bytes>>>>::Future;

/// What the run does after a step: go round again, or end.
enum Next {
    Again,
    Done,
}

/// What became of one pending job the fill looked at.
enum Took {
    /// Expired unsent (its deadline passed, or it is behind a doomed job).
    Expired,
    /// Not taken: the budget has no room for its worst case.
    OverBudget,
    /// In the window and handed to the layer.
    Sent,
}

/// The jobs in the layer at once, and their body bytes (bounded by
/// [`Settings::window_bytes`]). Their worst case is reserved in the
/// run's [`SpendBudget`] until they are back.
#[derive(Default)]
struct Window {
    seqs: HashSet<i64>,
    bytes: usize,
}

impl Window {
    fn len(&self) -> usize {
        self.seqs.len()
    }

    fn is_empty(&self) -> bool {
        self.seqs.is_empty()
    }

    fn holds(&self, seq: i64) -> bool {
        self.seqs.contains(&seq)
    }

    /// `job` goes into the layer.
    fn take(&mut self, job: &Pending) {
        self.seqs.insert(job.seq);
        self.bytes += job.body.len();
    }

    /// `job` is back from the layer: what it held is free again.
    fn release(&mut self, job: &Pending) {
        self.seqs.remove(&job.seq);
        self.bytes -= job.body.len();
    }
}

/// Per model, the latest deadline of a job the layer found it could not
/// send in time: jobs of that model due no later are expired unsent, so
/// jobs expire in file order.
#[derive(Default)]
struct Doomed(std::collections::HashMap<Option<String>, i64>);

impl Doomed {
    /// A job of `model` due at `due` cannot be sent in time.
    fn mark(&mut self, model: &Option<String>, due: i64) {
        let d = self.0.entry(model.clone()).or_insert(due);
        *d = (*d).max(due);
    }

    /// Whether a job of `model` due at `due` is behind a doomed one.
    fn dooms(&self, model: &Option<String>, due: i64) -> bool {
        self.0.get(model).is_some_and(|d| due <= *d)
    }
}

/// Why a job due at `due` is expired without a send at `now`, if it is:
/// its deadline passed, or (`behind_doomed`) an earlier job of its model
/// could not be sent before a deadline no earlier than its own.
fn expiry(due: i64, now: i64, behind_doomed: bool) -> Option<&'static str> {
    if due <= now {
        Some("its deadline passed before it could be sent")
    } else if behind_doomed {
        Some("it cannot be sent before its deadline: an earlier job of its model could not be")
    } else {
        None
    }
}

/// How the run is ending, as far as it knows yet.
#[derive(Default)]
struct Close {
    ending: Option<Ending>,
    /// Whether the stop in `ending` came from an answer to its job.
    stop_by_answer: bool,
    /// Nothing more is sent: the window only empties.
    draining: bool,
}

impl Close {
    /// Whether jobs may still be taken into the window.
    fn open(&self) -> bool {
        !self.draining && self.ending.is_none()
    }

    /// A stop answer, from a job that was `sent` or not. The stop names
    /// the job whose answer stopped the queue: one that was sent, not one
    /// the stopped layer turned away before a send. A later stop replaces
    /// an earlier one only for that reason; any other ending gives way.
    fn stop(&mut self, stop: StopRecord, sent: bool) {
        let replace = match &self.ending {
            Some(Ending::Stopped(_)) => sent && !self.stop_by_answer,
            _ => true,
        };
        if replace {
            self.stop_by_answer = sent;
            self.ending = Some(Ending::Stopped(stop));
        }
    }

    /// The store cannot keep what is sent: nothing more is sent, and the
    /// run stops, resumable (unless it already stopped or finished for
    /// another reason than a signal).
    fn store_failed(&mut self, why: String) {
        if self.ending.is_none() || matches!(self.ending, Some(Ending::Interrupted)) {
            self.ending = Some(Ending::StoreFailed(why));
        }
        self.draining = true;
    }

    /// The upstream could not be reached: nothing more is sent, and the
    /// run ends saying so (unless it already ends for another reason).
    fn unreachable(&mut self, upstream: String, cause: String) {
        if self.ending.is_none() {
            self.ending = Some(Ending::Unreachable { upstream, cause });
        }
        self.draining = true;
    }

    /// A signal: nothing more is sent.
    fn interrupt(&mut self) {
        self.draining = true;
        self.ending = Some(Ending::Interrupted);
    }
}

/// The run's counters, for its progress and its report.
struct Totals {
    sends: u64,
    answered_429: u64,
    /// Jobs that ended in this run.
    ended_here: u64,
    rates: Rates,
    started: Instant,
}

impl Totals {
    /// Adds one job's call (`max_tokens` is its output cap).
    fn add(&mut self, tally: &Tally, max_tokens: u64) {
        self.sends += tally.sends;
        self.answered_429 += tally.answered_429;
        if let Some((i, o)) = tally.usage {
            self.rates.push(i, o, max_tokens);
        }
    }
}

/// The run's token budget: the core's [`SpendBudget`] without a window
/// (what is settled counts for the whole run, across its resumes), from
/// `spent`, what earlier runs of the store charged; `max_tokens` none
/// counts without a limit (for the progress line).
pub(crate) fn run_budget(max_tokens: Option<u64>, spent: u64) -> SpendBudget {
    let mut cfg = SpendConfig::cumulative();
    cfg.max_tokens = max_tokens;
    let spent = SpendTotals {
        settled_tokens: spent,
        ..SpendTotals::default()
    };
    SpendBudget::starting_at(cfg, spent)
}

/// The run's budget has no window: any time reads the same totals.
pub(crate) const ANY_TIME: ratewise_core::Instant = ratewise_core::Instant::ZERO;

/// One run of the queue: the state [`Queue::run`]'s steps share.
struct Drive<S> {
    queue: Queue<S>,
    /// Where each job's task sends it `Back`.
    tx: mpsc::Sender<Back>,
    /// The run's cancellation: a child in every request. Given on a
    /// signal, a job not on the wire ends unsent.
    cancel: Cancel,
    tasks: JoinSet<()>,
    window: Window,
    doomed: Doomed,
    /// The store's read position: the last job read; 0 goes round again
    /// for jobs put back.
    cursor: i64,
    close: Close,
    totals: Totals,
    /// Tokens charged, this run and before, and the worst case of the jobs
    /// in the window: the [`Settings::budget_tokens`] check.
    spend: SpendBudget,
    /// Per job, the times a pooled stop put it back for another member.
    pool_rounds: std::collections::HashMap<i64, usize>,
    /// When the grace given on a signal ends.
    grace_end: Option<tokio::time::Instant>,
    /// [`Settings::deadline`] in milliseconds.
    deadline_ms: i64,
    /// When the run began (ms since the epoch): a job's wait counts from
    /// then, or from when it was due if later.
    run_start_ms: i64,
}

impl<S: Upstream> Drive<S> {
    fn new(queue: Queue<S>, tx: mpsc::Sender<Back>, spent: u64) -> Self {
        let queue_budget = queue.settings.budget_tokens;
        let deadline_ms = i64::try_from(queue.settings.deadline.as_millis()).unwrap_or(i64::MAX);
        Drive {
            queue,
            tx,
            cancel: Cancel::new(),
            tasks: JoinSet::new(),
            window: Window::default(),
            doomed: Doomed::default(),
            cursor: 0,
            close: Close::default(),
            totals: Totals {
                sends: 0,
                answered_429: 0,
                ended_here: 0,
                rates: Rates::default(),
                started: Instant::now(),
            },
            spend: run_budget(queue_budget, spent),
            pool_rounds: std::collections::HashMap::new(),
            grace_end: None,
            deadline_ms,
            run_start_ms: now_ms(),
        }
    }

    /// Fills the window with the store's pending jobs, in file order, up
    /// to its bounds (jobs and bytes) and the budget. Refilled in batches,
    /// once half the window is free: one store read brings many jobs,
    /// instead of one read per answer.
    async fn fill(&mut self, partial: &mut Partial) -> Result<(), StoreError> {
        let (window, window_bytes) = (self.queue.settings.window, self.queue.settings.window_bytes);
        let may_fill = self.window.len() <= window / 2;
        while may_fill && self.close.open() && self.window.len() < window {
            let room = window - self.window.len();
            let bytes_room = window_bytes.saturating_sub(self.window.bytes);
            if bytes_room == 0 {
                break;
            }
            let now = now_ms();
            let cursor = self.cursor;
            let batch = blocking(&self.queue.store, move |s| {
                s.next_pending(cursor, now, room, bytes_room)
            })
            .await?;
            if batch.is_empty() {
                if self.cursor == 0 {
                    break;
                }
                // Past the end: go round again for jobs put back.
                self.cursor = 0;
                continue;
            }
            let mut took = false;
            let mut budget_blocked = false;
            for job in batch {
                self.cursor = self.cursor.max(job.seq);
                if self.window.holds(job.seq) {
                    continue;
                }
                match self.take(job, now, partial).await? {
                    Took::Expired => {}
                    Took::OverBudget => {
                        budget_blocked = true;
                        break;
                    }
                    Took::Sent => took = true,
                }
            }
            if budget_blocked || !took {
                break;
            }
        }
        Ok(())
    }

    /// One pending job read at `now`: expired unsent when it cannot be
    /// sent in time, left in the store when the budget has no room for its
    /// worst case (and, with nothing in the window to free any, the queue
    /// stops on the budget), else launched.
    async fn take(
        &mut self,
        job: Pending,
        now: i64,
        partial: &mut Partial,
    ) -> Result<Took, StoreError> {
        let due = job.first_seen_ms.saturating_add(self.deadline_ms);
        if let Some(message) = expiry(due, now, self.doomed.dooms(&job.model, due)) {
            let end = End {
                state: Some(State::Expired),
                cause: Some("deadline".into()),
                message: Some(message.into()),
                ..End::default()
            };
            let shape = self.queue.settings.shape;
            let since = self.run_start_ms;
            let (_, line) = keep(&self.queue.store, shape, &job, Outcome::End(end), since).await?;
            if let Some(line) = line {
                let _ = partial.push(&line);
            }
            return Ok(Took::Expired);
        }
        if let Some(budget) = self.spend.config().max_tokens {
            if self.spend.check(job.worst_case(), 0, ANY_TIME) != SpendCheck::Fits {
                if self.window.is_empty() {
                    let spent = self.spend.totals(ANY_TIME).settled_tokens;
                    let stop = StopRecord {
                        cause: StopCause::Budget,
                        at: httpdate::fmt_http_date(SystemTime::now()),
                        status: None,
                        message: format!(
                            "--budget-tokens {budget}: {spent} spent, the next job's worst case is {}",
                            job.worst_case()
                        ),
                        custom_id: Some(job.custom_id.clone()),
                    };
                    self.close.ending = Some(Ending::Stopped(stop));
                }
                // Round again from this job once room is back.
                self.cursor = job.seq - 1;
                return Ok(Took::OverBudget);
            }
        }
        self.launch(job, due, now).await;
        Ok(Took::Sent)
    }

    /// Takes `job` (due at `due`) into the window and hands it to the
    /// layer. The call is made and first polled here, in file order: the
    /// job takes its place in the layer's queue (and is told whether it
    /// can be sent in time) before the next line's, so the window's jobs
    /// wait and expire in file order. A job the layer ends at once for its
    /// deadline dooms the later jobs of its model due no later.
    async fn launch(&mut self, job: Pending, due: i64, now: i64) {
        self.window.take(&job);
        self.spend.reserve(job.worst_case(), 0, ANY_TIME);
        let remaining = Duration::from_millis((due - now) as u64);
        let mut svc = self.queue.service.clone();
        let settings = &self.queue.settings;
        let first = first_poll(&mut svc, settings, &job, remaining, self.cancel.child()).await;
        if let First::Answered(Err(e)) = &first {
            if e.give_up_reason() == Some(ratewise_core::GiveUpReason::Deadline) {
                self.doomed.mark(&job.model, due);
            }
        }
        self.spawn(job, first);
    }

    /// The job's own task: awaits its answer, writes what it came to to
    /// the store (the writes of many jobs share one commit), and sends it
    /// `Back` to the loop.
    fn spawn(&mut self, job: Pending, first: First<Call<S>>) {
        let shape = self.queue.settings.shape;
        let tx = self.tx.clone();
        let store = Arc::clone(&self.queue.store);
        let since = self.run_start_ms;
        self.tasks.spawn(async move {
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
            let kept = keep(&store, shape, &job, outcome, since).await;
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

    /// A stop waits for the window to empty (the answers still on the wire
    /// are kept); then it is written to the store and told, and the run
    /// ends (`true`).
    async fn settle_stop(&mut self, observer: &dyn Observer) -> Result<bool, StoreError> {
        if let Some(Ending::Stopped(stop)) = &self.close.ending {
            if self.window.is_empty() {
                let kept = stop.clone();
                blocking(&self.queue.store, move |s| s.stop(&kept)).await?;
                observer.event(Event::Stopped(stop.clone()));
                return Ok(true);
            }
        }
        Ok(false)
    }

    /// Nothing in the window: the run is over when it is draining or
    /// ending, or when no job is pending; else it waits for the next job
    /// due (one put back for later), or for a signal.
    async fn idle(&mut self, shutdown: &mut watch::Receiver<bool>) -> Result<Next, StoreError> {
        if self.close.draining || self.close.ending.is_some() {
            return Ok(Next::Done);
        }
        let due = blocking(&self.queue.store, move |s| s.next_due()).await?;
        match due {
            None => {
                self.close.ending = Some(Ending::Finished);
                return Ok(Next::Done);
            }
            Some(at) if at <= now_ms() => self.cursor = 0,
            Some(at) => {
                let wait = Duration::from_millis((at - now_ms()).max(1) as u64);
                tokio::select! {
                    _ = tokio::time::sleep(wait) => self.cursor = 0,
                    _ = shutdown_asked(shutdown) => {
                        self.cancel.cancel();
                        self.close.interrupt();
                    }
                }
            }
        }
        Ok(Next::Again)
    }

    /// Waits for what comes first: a job back from its task, a signal (not
    /// twice), the end of the grace, or the progress tick.
    async fn next_event(
        &mut self,
        (rx, shutdown, tick): (
            &mut mpsc::Receiver<Back>,
            &mut watch::Receiver<bool>,
            &mut tokio::time::Interval,
        ),
        partial: &mut Partial,
        observer: &dyn Observer,
    ) -> Result<Next, StoreError> {
        let grace_end = self.grace_end;
        let grace_sleep = async move {
            match grace_end {
                Some(t) => tokio::time::sleep_until(t).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            Some(back) = rx.recv() => self.back(back, partial).await,
            _ = shutdown_asked(shutdown), if !self.close.draining => {
                // Nothing more is sent: the jobs waiting in the layer
                // end unsent; those on the wire get the grace.
                self.cancel.cancel();
                self.close.interrupt();
                self.grace_end = Some(tokio::time::Instant::now() + self.queue.settings.grace);
            }
            _ = grace_sleep => {
                // The grace is over: what is still on the wire is cut.
                self.tasks.abort_all();
                return Ok(Next::Done);
            }
            _ = tick.tick() => {
                let counts = blocking(&self.queue.store, move |s| s.counts()).await?;
                observer.event(Event::Progress(self.status(&counts)));
            }
        }
        Ok(Next::Again)
    }

    /// A job back from its task: its room in the window is free again,
    /// its figures go to the totals, and what the store kept of it says
    /// what follows.
    async fn back(&mut self, back: Back, partial: &mut Partial) {
        let Back {
            job,
            expired,
            tally,
            kept,
        } = back;
        // The layer found it cannot be sent in time (the jobs before it
        // take the time left): no later job of its model due as soon is
        // sent either — they expire, in file order.
        if expired {
            let due = job.first_seen_ms.saturating_add(self.deadline_ms);
            self.doomed.mark(&job.model, due);
        }
        // Finished tasks are reaped, or the set keeps them all.
        while self.tasks.try_join_next().is_some() {}
        self.window.release(&job);
        self.spend.unreserve(job.worst_case(), 0, ANY_TIME);
        self.spend.settle(tally.charged, 0, ANY_TIME);
        self.totals.add(&tally, job.max_tokens);
        let kept = kept.unwrap_or_else(|e| (Flow::NotSent(e.to_string()), None));
        if matches!(kept.0, Flow::Ended) {
            self.totals.ended_here += 1;
        }
        match kept {
            (Flow::Ended, line) => {
                // The partial file is a convenience; the final file is
                // written from the store.
                if let Some(line) = line {
                    let _ = partial.push(&line);
                }
            }
            (Flow::PutBack, _) => {}
            // In a pool, one member's stop is not the queue's: the job is
            // pending again and goes to a member still sending.
            (Flow::Stop(stop, sent), _) => {
                let stop = self
                    .queue
                    .pool_stop(stop, job.seq, &mut self.pool_rounds)
                    .await;
                if let Some(stop) = stop {
                    self.close.stop(stop, sent);
                }
            }
            // Nothing more is sent when the store cannot keep what is
            // sent: the run stops, resumable.
            (Flow::NotSent(why), _) => self.close.store_failed(why),
            // No byte reached the upstream: the jobs waiting in the layer
            // end unsent (retrying an address nothing listens on only
            // burns their attempts), and the run ends naming it.
            (Flow::Unreached(mut upstream, cause), _) => {
                if upstream.is_empty() {
                    upstream.clone_from(&self.queue.settings.upstream);
                }
                self.cancel.cancel();
                self.close.unreachable(upstream, cause);
            }
        }
    }

    /// The run's end: the partial file flushed, every task ended, the jobs
    /// the grace cut held, the last progress told, and the report.
    async fn finish(
        mut self,
        partial: &mut Partial,
        observer: &dyn Observer,
    ) -> Result<Report, StoreError> {
        let _ = partial.flush();
        self.tasks.abort_all();
        while self.tasks.join_next().await.is_some() {}
        // Jobs whose send was journaled and whose answer was not recorded
        // (cut at the end of the grace): held, never re-sent silently.
        let cut = blocking(&self.queue.store, move |s| s.hold_cut()).await?;
        let counts = blocking(&self.queue.store, move |s| s.counts()).await?;
        observer.event(Event::Progress(self.status(&counts)));
        Ok(Report {
            ending: self.close.ending.take().unwrap_or(Ending::Finished),
            counts,
            sends: self.totals.sends,
            answered_429: self.totals.answered_429,
            cut,
        })
    }

    /// The progress line's figures.
    fn status(&mut self, counts: &Counts) -> Status {
        let spent = self.spend.totals(ANY_TIME).settled_tokens;
        let t = &self.totals;
        let snapshots = self.queue.service.layer().snapshots().unwrap_or_default();
        Status::from_parts(
            counts,
            t.sends,
            t.answered_429,
            spent,
            &t.rates,
            &snapshots,
            t.started.elapsed(),
            t.ended_here,
        )
    }
}

/// Makes `job`'s call and polls it once (see [`Drive::launch`]): waiting
/// in the layer, answered at once, or not made.
async fn first_poll<S: Upstream>(
    svc: &mut RetryService<S>,
    settings: &Settings,
    job: &Pending,
    remaining: Duration,
    cancel: Cancel,
) -> First<Call<S>> {
    match start(svc, settings, job, remaining, cancel).await {
        Ok(call) => {
            let mut call = Box::pin(call);
            match std::future::poll_fn(|cx| std::task::Poll::Ready(call.as_mut().poll(cx))).await {
                std::task::Poll::Ready(result) => First::Answered(result),
                std::task::Poll::Pending => First::Waiting(call),
            }
        }
        Err(not_sent) => First::NotSent(Box::new(not_sent)),
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
        self.output_used = self.output_used.saturating_add(output);
        self.output_capped = self.output_capped.saturating_add(cap);
    }

    /// Input and output tokens reported in the last minute.
    pub fn last_minute(&self) -> (u64, u64) {
        let now = Instant::now();
        self.seen
            .iter()
            .filter(|(t, _, _)| now.duration_since(*t) <= Duration::from_secs(60))
            .fold((0u64, 0u64), |(i, o), (_, a, b)| {
                (i.saturating_add(*a), o.saturating_add(*b))
            })
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
    req.extensions_mut()
        .insert(ratewise_tower::Workload::level(&settings.priority));
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

/// Attempts whose connection failed before a byte was sent: journaled
/// (and counted) as sends before they were tried, they are no sends.
fn unreached(records: &[ratewise_core::record::AttemptRecord]) -> u64 {
    records
        .iter()
        .filter(|r| r.cause == Cause::ConnectFailed)
        .count() as u64
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
            let mut body = resp.into_body();
            let read = Limited::new(&mut body, MAX_ANSWER).collect().await;
            let mut end = End {
                status: Some(status),
                request_id: rid,
                attempts: attempts_json(&attempts),
                unreached: unreached(&attempts),
                ..End::default()
            };
            match read {
                Ok(b) => {
                    let ok = (200..300).contains(&status);
                    end.state = Some(if ok { State::Done } else { State::Failed });
                    end.cause = Some(if ok { "success" } else { "unclassified" }.into());
                    // The layer parsed the usage where the body ended (and
                    // settled its reservation from it): taken from there,
                    // never parsed again here.
                    charge(&mut end, body.usage(), ok, job.worst_case());
                    end.response = Some(b.to_bytes());
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

/// Sets `end`'s usage (billed input — cache writes and reads included —
/// and output) and its charge from the `usage` the layer read: the usage
/// reported, else the job's `worst_case` for a success (it may have been
/// generated and billed), else nothing. Provider numbers saturate.
fn charge(end: &mut End, usage: Option<ratewise_core::Usage>, ok: bool, worst_case: u64) {
    end.usage = usage.map(|u| (u.billed_input(), u.output_tokens));
    end.charged = match usage {
        Some(u) => u.total_tokens(),
        None if ok => worst_case,
        None => 0,
    };
}

fn outcome_of_error(job: &Pending, e: &ratewise_tower::Error) -> Outcome {
    let attempts = e.attempts();
    let typed = e
        .classification()
        .map(|c| c.cause)
        .or_else(|| attempts.last().map(|a| a.cause));
    let cause = typed.map(|c| c.as_str().to_owned());
    // A stop met at admission carries no answer of its own: the stop is
    // still one, of a cause this job cannot name.
    let stop_cause = StopCause::Provider(typed.unwrap_or(Cause::Unknown));
    let mut end = End {
        status: e.status().map(|s| s.as_u16()),
        request_id: e.headers().and_then(request_id_from_headers),
        response: e.body().cloned(),
        cause: cause.clone(),
        message: Some(e.to_string()),
        attempts: attempts_json(attempts),
        unreached: unreached(attempts),
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
                cause: stop_cause,
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
        _ => match unreached_cause(attempts) {
            // Not the job's failure: the upstream's.
            Some(cause) => Outcome::Unreached(end, job_upstream(attempts), cause.to_owned()),
            None => {
                end.state = Some(State::Failed);
                Outcome::End(end)
            }
        },
    }
}

/// Why the upstream could not be reached, in words, when that ended the
/// job: its last attempt's connection failed before a byte was sent (the
/// attempts before it, if any, were answered with errors, or the job
/// would have ended then: nothing of it was generated).
fn unreached_cause(attempts: &[ratewise_core::record::AttemptRecord]) -> Option<&'static str> {
    let last = attempts
        .last()
        .filter(|a| a.cause == Cause::ConnectFailed)?;
    Some(match last.transport {
        Some("dns_failed") => "the name did not resolve",
        Some("tls_failed") => "the TLS handshake failed",
        _ => "connection refused",
    })
}

/// The upstream the last attempt went to, when it names one (a pool's
/// member); else the run's, filled in by the queue.
fn job_upstream(attempts: &[ratewise_core::record::AttemptRecord]) -> String {
    attempts
        .last()
        .and_then(|a| a.member.clone())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::{expiry, Close, Doomed, Ending, Pending, StopCause, StopRecord, Window};

    fn job(seq: i64, body: usize, input: u64, output: u64) -> Pending {
        Pending {
            seq,
            custom_id: format!("job-{seq}"),
            path: "/v1/chat/completions".into(),
            model: Some("m".into()),
            input_estimate: input,
            max_tokens: output,
            body: bytes::Bytes::from(vec![b'x'; body]),
            first_seen_ms: 0,
            double_spend: false,
        }
    }

    fn stop(cause: &str) -> StopRecord {
        StopRecord {
            cause: StopCause::from_word(cause),
            at: String::new(),
            status: None,
            message: String::new(),
            custom_id: None,
        }
    }

    #[test]
    fn each_request_carries_the_runs_priority_level() {
        use super::{request, Settings, Shape};
        let mut settings = Settings::new(Shape::OpenAi, "sk-test");
        let cancel = ratewise_tower::Cancel::new();
        let req = request(
            &settings,
            &job(1, 4, 1, 1),
            std::time::Duration::from_secs(9),
            cancel,
        )
        .unwrap();
        let w = req.extensions().get::<ratewise_tower::Workload>().unwrap();
        assert_eq!(
            w.level.as_deref(),
            Some("bulk"),
            "bulk unless told otherwise"
        );
        settings.priority = "interactive".into();
        let req = request(
            &settings,
            &job(1, 4, 1, 1),
            std::time::Duration::from_secs(9),
            ratewise_tower::Cancel::new(),
        )
        .unwrap();
        let w = req.extensions().get::<ratewise_tower::Workload>().unwrap();
        assert_eq!(w.level.as_deref(), Some("interactive"));
    }

    #[test]
    fn the_window_gives_back_what_a_job_held() {
        let mut w = Window::default();
        let (a, b) = (job(1, 10, 100, 50), job(2, 5, 20, 30));
        w.take(&a);
        w.take(&b);
        assert!(w.holds(1) && w.holds(2));
        assert_eq!((w.len(), w.bytes), (2, 15));
        w.release(&a);
        assert!(!w.holds(1));
        assert_eq!((w.len(), w.bytes), (1, 5));
        w.release(&b);
        assert!(w.is_empty());
        assert_eq!(w.bytes, 0);
    }

    #[test]
    fn a_doomed_job_dooms_the_later_ones_of_its_model_due_no_later() {
        let mut d = Doomed::default();
        let m = Some("m".to_owned());
        assert!(!d.dooms(&m, 100));
        d.mark(&m, 100);
        d.mark(&m, 50); // an earlier deadline does not lower the mark
        assert!(d.dooms(&m, 100) && d.dooms(&m, 60));
        assert!(!d.dooms(&m, 101));
        assert!(!d.dooms(&None, 10), "another model is not doomed");
        assert_eq!(
            expiry(100, 100, false),
            Some("its deadline passed before it could be sent")
        );
        assert!(expiry(200, 100, true).unwrap().contains("earlier job"));
        assert_eq!(expiry(200, 100, false), None);
    }

    #[test]
    fn a_stop_from_a_sent_job_replaces_one_from_a_job_never_sent() {
        let mut c = Close::default();
        assert!(c.open());
        c.stop(stop("unsent"), false);
        assert!(!c.open());
        c.stop(stop("sent"), true);
        c.stop(stop("sent later"), true);
        c.stop(stop("unsent later"), false);
        assert_eq!(c.ending, Some(Ending::Stopped(stop("sent"))));
    }

    #[test]
    fn a_store_failure_ends_sending_and_names_the_run_unless_it_stopped() {
        let mut c = Close::default();
        c.interrupt();
        c.store_failed("disk full".into());
        assert!(c.draining);
        assert_eq!(c.ending, Some(Ending::StoreFailed("disk full".into())));
        let mut c = Close::default();
        c.stop(stop("billing"), true);
        c.store_failed("disk full".into());
        assert!(c.draining);
        assert_eq!(c.ending, Some(Ending::Stopped(stop("billing"))));
    }

    #[test]
    fn the_run_budget_is_the_core_s_from_what_earlier_runs_spent() {
        use super::{run_budget, ANY_TIME};
        use ratewise_core::admit::spend_budget::SpendCheck;
        // 60 of 100 spent before: 40 left, whatever the time.
        let mut b = run_budget(Some(100), 60);
        assert_eq!(b.check(40, 0, ANY_TIME), SpendCheck::Fits);
        assert!(matches!(b.check(41, 0, ANY_TIME), SpendCheck::Spent { .. }));
        // A job in the window holds its worst case until it is back.
        b.reserve(30, 0, ANY_TIME);
        assert_eq!(b.check(10, 0, ANY_TIME), SpendCheck::Fits);
        assert_eq!(b.check(11, 0, ANY_TIME), SpendCheck::InFlight);
        b.unreserve(30, 0, ANY_TIME);
        b.settle(u64::MAX, 0, ANY_TIME);
        assert_eq!(b.totals(ANY_TIME).settled_tokens, u64::MAX);
        assert!(matches!(b.check(1, 0, ANY_TIME), SpendCheck::Spent { .. }));
        // No budget: it only counts.
        let mut none = run_budget(None, u64::MAX);
        assert_eq!(none.check(u64::MAX, 0, ANY_TIME), SpendCheck::Fits);
    }

    #[test]
    fn the_layer_s_usage_is_charged_and_huge_numbers_saturate() {
        use super::charge;
        use crate::store::End;
        use ratewise_core::Usage;
        let mut end = End::default();
        let u = Usage {
            input_tokens: 10,
            output_tokens: 40_000,
            cache_creation_input_tokens: 2,
            cache_read_input_tokens: 3,
        };
        charge(&mut end, Some(u), true, 7);
        assert_eq!((end.usage, end.charged), (Some((15, 40_000)), 40_015));
        // Untrusted provider numbers: no wrap, no panic.
        let huge = Usage {
            cache_creation_input_tokens: u64::MAX,
            cache_read_input_tokens: u64::MAX,
            ..u
        };
        charge(&mut end, Some(huge), true, 7);
        assert_eq!(
            (end.usage, end.charged),
            (Some((u64::MAX, 40_000)), u64::MAX)
        );
        charge(&mut end, None, true, 7);
        assert_eq!((end.usage, end.charged), (None, 7));
        charge(&mut end, None, false, 7);
        assert_eq!((end.usage, end.charged), (None, 0));
        let mut r = super::Rates::default();
        r.push(u64::MAX, u64::MAX, u64::MAX);
        r.push(u64::MAX, u64::MAX, u64::MAX);
        assert_eq!(r.last_minute(), (u64::MAX, u64::MAX));
        assert_eq!((r.output_used, r.output_capped), (u64::MAX, u64::MAX));
    }
}
