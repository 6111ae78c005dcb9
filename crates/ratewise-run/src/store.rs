//! The store seam: what the queue keeps durably, and nothing about how.
//!
//! [`crate::SqliteStore`] is the one the command uses; a test wraps it to
//! make a write fail (a full disk) and the queue must lose nothing.
//!
//! A job's life in the store:
//!
//! ```text
//! pending ──started──▶ sending ──ended──▶ done | failed | held_unknown | expired
//!    ▲  │                 │
//!    │  └─stop──▶ stopped  └─(process died)──▶ held_unknown on the next open
//!    └─put_back (deferred), resume_stopped, release_unknown
//! ```

use ratewise_core::Cause;
use serde::{Deserialize, Serialize};

/// Where a job is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum State {
    /// Not sent yet, or sent and deferred (it will be sent again).
    Pending,
    /// An attempt was journaled and is on the wire.
    Sending,
    /// A 2xx answer.
    Done,
    /// The provider's answer says the request must change.
    Failed,
    /// Sent, no answer known: never re-sent unless a person says so.
    HeldUnknown,
    /// The queue stopped (spend cap, billing, auth, the run's budget).
    Stopped,
    /// Its deadline passed before it could be sent.
    Expired,
    /// Inside a batch submitted to the provider's batch API (or about to
    /// be: its intent is recorded before the create call). Never sent by
    /// the direct path; it ends when the batch's results are read.
    Batched,
}

impl State {
    /// The name in the store and in the output's `ratewise.outcome`.
    pub fn as_str(self) -> &'static str {
        match self {
            State::Pending => "pending",
            State::Sending => "sending",
            State::Done => "done",
            State::Failed => "failed",
            State::HeldUnknown => "held_unknown",
            State::Stopped => "stopped",
            State::Expired => "expired",
            State::Batched => "batched",
        }
    }

    /// The state named by [`State::as_str`].
    pub fn parse(name: &str) -> Option<State> {
        [
            State::Pending,
            State::Sending,
            State::Done,
            State::Failed,
            State::HeldUnknown,
            State::Stopped,
            State::Expired,
            State::Batched,
        ]
        .into_iter()
        .find(|s| s.as_str() == name)
    }

    /// Whether the job has its line in the output.
    pub fn is_end(self) -> bool {
        !matches!(self, State::Pending | State::Sending | State::Batched)
    }
}

/// A job as imported.
#[derive(Debug, Clone)]
pub struct NewJob {
    /// 1-based input line.
    pub line: u64,
    /// The caller's id.
    pub custom_id: String,
    /// API path.
    pub path: String,
    /// The body's model.
    pub model: Option<String>,
    /// Input tokens expected.
    pub input_estimate: u64,
    /// The body's output cap (or the default reserved for none).
    pub max_tokens: u64,
    /// The body, as given.
    pub body: Vec<u8>,
    /// When the job was first seen (ms since the Unix epoch): its deadline
    /// counts from here, across re-runs.
    pub first_seen_ms: i64,
}

/// A pending job handed to the queue, body included.
#[derive(Debug, Clone)]
pub struct Pending {
    /// Input order.
    pub seq: i64,
    /// The caller's id.
    pub custom_id: String,
    /// API path.
    pub path: String,
    /// The body's model.
    pub model: Option<String>,
    /// Input tokens expected.
    pub input_estimate: u64,
    /// Output cap.
    pub max_tokens: u64,
    /// The body.
    pub body: bytes::Bytes,
    /// First seen (ms since the epoch).
    pub first_seen_ms: i64,
    /// Released from `held_unknown` by `--retry-unknown`: its estimate was
    /// charged as a possible double spend.
    pub double_spend: bool,
}

impl Pending {
    /// The worst case of what the job can cost: the tokens of the core's
    /// reservation of it (input estimate plus output cap,
    /// [`ratewise_core::admit::Amounts::tokens`]).
    pub fn worst_case(&self) -> u64 {
        ratewise_core::admit::Amounts {
            requests: 1,
            input: self.input_estimate,
            output: self.max_tokens,
        }
        .tokens()
    }
}

/// How a job ended (or, for `put_back`, what it has so far).
#[derive(Debug, Clone, Default)]
pub struct End {
    /// Its end state.
    pub state: Option<State>,
    /// The provider's last status.
    pub status: Option<u16>,
    /// The provider's request id of the last answer.
    pub request_id: Option<String>,
    /// The last answer's body (JSON for a 2xx; whatever came otherwise,
    /// bounded).
    pub response: Option<bytes::Bytes>,
    /// The cause, in ratewise's vocabulary (`rate_limited`, `spend_cap`).
    pub cause: Option<String>,
    /// A sentence for a person.
    pub message: Option<String>,
    /// The attempts of this run, as JSON objects (the allow-listed
    /// records): appended to what the store has.
    pub attempts: Vec<serde_json::Value>,
    /// Tokens the provider reported (input, output).
    pub usage: Option<(u64, u64)>,
    /// Tokens charged to the run's budget for this job.
    pub charged: u64,
    /// Milliseconds to add to the job's wait besides what
    /// [`End::since_ms`] counts (0 from the queue).
    pub waited_ms: u64,
    /// When this run could first have sent the job (the run's start, ms
    /// since the epoch): the store adds to the job's wait the time from
    /// then — or from the send its wait was last counted to, if later (a
    /// job put back and sent again in this run) — to its last send, so a
    /// job's wait in a run is its last send's time less the run's start;
    /// nothing when it was not sent in this run.
    pub since_ms: Option<i64>,
    /// Of the attempts, those whose connection failed before a byte was
    /// sent: each was counted as a send when it was journaled, and is
    /// not one.
    pub unreached: u64,
}

/// Why the queue stopped: a provider's answer, by the core's typed
/// [`Cause`] (the one the layer classified it with), or the run's own
/// token budget, which no provider said and the core has no word for.
///
/// Kept as its word (`spend_cap`, `billing`, `budget`…), so a store
/// written before the cause was typed reads back unchanged. A word this
/// version does not know (a newer version's, or the old fallback
/// `stopped`) reads as `Provider(Cause::Unknown)`: still a stop. An
/// error instead would lose the stop (the queue would send again after
/// a billing stop it can no longer name), and a panic would make a
/// store's own record stop every later run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum StopCause {
    /// The provider's answer stopped it (spend cap, billing, credentials).
    Provider(Cause),
    /// `--budget-tokens` would be passed by the next job.
    Budget,
}

impl StopCause {
    /// Its word: the core cause's ([`Cause::as_str`]), or `budget`.
    pub fn as_str(self) -> &'static str {
        match self {
            StopCause::Provider(c) => c.as_str(),
            StopCause::Budget => "budget",
        }
    }

    /// Reads a word back (see the type's docs for an unknown one).
    pub fn from_word(word: &str) -> StopCause {
        match word {
            "budget" => StopCause::Budget,
            w => StopCause::Provider(Cause::from_word(w).unwrap_or(Cause::Unknown)),
        }
    }

    /// The provider's cause, when an answer stopped the queue.
    pub fn provider(self) -> Option<Cause> {
        match self {
            StopCause::Provider(c) => Some(c),
            StopCause::Budget => None,
        }
    }
}

impl From<Cause> for StopCause {
    fn from(c: Cause) -> Self {
        StopCause::Provider(c)
    }
}

impl std::fmt::Display for StopCause {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Serialize for StopCause {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for StopCause {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let word = std::borrow::Cow::<'de, str>::deserialize(d)?;
        Ok(StopCause::from_word(&word))
    }
}

/// A stop of the whole queue, kept until a person resumes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StopRecord {
    /// Why: the provider's typed cause, or the run's budget.
    pub cause: StopCause,
    /// When (RFC 3339, UTC).
    pub at: String,
    /// The provider's status, when an answer stopped it.
    pub status: Option<u16>,
    /// A sentence for a person (the provider's message, the budget).
    pub message: String,
    /// The custom_id whose answer stopped the queue.
    pub custom_id: Option<String>,
}

/// A job with its line in the output.
#[derive(Debug, Clone)]
pub struct Ended {
    /// Input order.
    pub seq: i64,
    /// The caller's id.
    pub custom_id: String,
    /// Its end state.
    pub state: State,
    /// See [`End`].
    pub status: Option<u16>,
    /// See [`End`].
    pub request_id: Option<String>,
    /// See [`End`].
    pub response: Option<bytes::Bytes>,
    /// See [`End`].
    pub cause: Option<String>,
    /// See [`End`].
    pub message: Option<String>,
    /// Every attempt's record, across runs (a JSON array).
    pub attempts: String,
    /// See [`End`].
    pub usage: Option<(u64, u64)>,
    /// Charged to the budget.
    pub charged: u64,
    /// Sends journaled, across runs.
    pub sends: u64,
    /// Released by `--retry-unknown` at least once.
    pub double_spend: bool,
    /// Milliseconds waited, across runs.
    pub waited_ms: u64,
}

/// Jobs per state, and what the queue still has to do.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Counts {
    /// Every job imported.
    pub total: u64,
    /// Not ended.
    pub pending: u64,
    /// On the wire (or cut when the process died).
    pub sending: u64,
    /// See [`State`].
    pub done: u64,
    /// See [`State`].
    pub failed: u64,
    /// See [`State`].
    pub held: u64,
    /// See [`State`].
    pub stopped: u64,
    /// See [`State`].
    pub expired: u64,
    /// Input tokens expected of the jobs not ended.
    pub remaining_input: u64,
    /// Output caps of the jobs not ended.
    pub remaining_output: u64,
    /// Tokens charged to the budget so far.
    pub spent: u64,
}

/// Why the store could not do what was asked: a sentence, and the error
/// underneath when there is one (SQLite's, an I/O error).
#[derive(Debug)]
pub struct StoreError {
    message: String,
    source: Option<Box<dyn std::error::Error + Send + Sync + 'static>>,
}

impl StoreError {
    /// An error of a plain message.
    pub fn new(message: impl Into<String>) -> StoreError {
        StoreError {
            message: message.into(),
            source: None,
        }
    }

    /// An error with the error underneath kept as its
    /// [`source`](std::error::Error::source).
    pub fn with_source(
        message: impl Into<String>,
        source: impl std::error::Error + Send + Sync + 'static,
    ) -> StoreError {
        StoreError {
            message: message.into(),
            source: Some(Box::new(source)),
        }
    }

    /// The sentence, without the source.
    pub fn message(&self) -> &str {
        &self.message
    }
}

impl std::fmt::Display for StoreError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)?;
        if let Some(source) = &self.source {
            write!(f, ": {source}")?;
        }
        Ok(())
    }
}

impl std::error::Error for StoreError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.source
            .as_deref()
            .map(|e| e as &(dyn std::error::Error + 'static))
    }
}

impl From<String> for StoreError {
    fn from(message: String) -> Self {
        StoreError::new(message)
    }
}

impl From<&str> for StoreError {
    fn from(message: &str) -> Self {
        StoreError::new(message)
    }
}

impl From<rusqlite::Error> for StoreError {
    fn from(e: rusqlite::Error) -> Self {
        StoreError::with_source("the store", e)
    }
}

/// How a line of an input edited since the last run compares with the job
/// the store has of its `custom_id` ([`Store::compare`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Compared {
    /// No job of that `custom_id`: a new job.
    New,
    /// The same request (path and body byte for byte): kept as it is.
    Same,
    /// A different request, and the job was never sent, or the provider
    /// refused it (it ended `failed` on a 4xx answer: nothing was
    /// generated): it is replaced, and runs.
    Edited,
    /// A different request for a job that was sent or ended otherwise
    /// (done, held as unknown, on the wire, in a batch): refused (a
    /// result of the old request exists or may exist).
    Refused {
        /// The job's state.
        state: State,
        /// Its sends so far.
        sends: u64,
    },
}

/// One of the writes made for every send (the hot path), handed to
/// [`Store::submit`].
#[derive(Debug)]
pub enum HotWrite {
    /// [`Store::started_on`] (the job, the pool member it goes to).
    Started(String, Option<String>),
    /// [`Store::between_attempts`].
    BetweenAttempts(String),
    /// [`Store::ended`].
    Ended(i64, End),
    /// [`Store::put_back`] (seq, not before, so far).
    PutBack(i64, i64, End),
}

/// Told how a [`Store::submit`]ted write went, once it is durable.
pub type Done = Box<dyn FnOnce(Result<(), StoreError>) + Send>;

/// Makes `write` without holding an async thread: queued when the store
/// queues writes, else on a blocking thread; answers once it is durable.
pub async fn submit(store: &std::sync::Arc<dyn Store>, write: HotWrite) -> Result<(), StoreError> {
    let (tx, rx) = tokio::sync::oneshot::channel();
    let done: Done = Box::new(move |r| {
        let _ = tx.send(r);
    });
    if store.queues_writes() {
        store.submit(write, done);
    } else {
        let store = std::sync::Arc::clone(store);
        tokio::task::spawn_blocking(move || store.submit(write, done));
    }
    rx.await
        .map_err(|_| StoreError::new("the store dropped a write"))?
}

/// What the queue needs kept. Every write is durable when it returns
/// (to the store's `synchronous` setting); calls block, so the queue makes
/// them off its async threads.
pub trait Store: Send + Sync + 'static {
    /// A value of the store's own (the input's fingerprint, its shape).
    fn meta(&self, key: &str) -> Result<Option<String>, StoreError>;
    /// Sets [`Store::meta`].
    fn set_meta(&self, key: &str, value: &str) -> Result<(), StoreError>;
    /// Empties the store of jobs and bad lines (an import that did not
    /// finish is started over; nothing of it was sent).
    fn reset(&self) -> Result<(), StoreError>;
    /// Adds jobs (one grouped write); for each, whether it was new (a
    /// `custom_id` already there is a duplicate and is not added).
    fn import(&self, jobs: Vec<NewJob>) -> Result<Vec<bool>, StoreError>;
    /// Keeps a bad line's number and why, for every re-run to report.
    fn bad_lines(&self, lines: Vec<(u64, String)>) -> Result<(), StoreError>;
    /// The bad lines kept, in order.
    fn list_bad_lines(&self) -> Result<Vec<(u64, String)>, StoreError>;
    /// Pending jobs after `after_seq` whose time has come (`not_before` ≤
    /// `now_ms`), in input order: at most `limit` jobs, and no more body
    /// bytes than `max_bytes` (one job at least).
    fn next_pending(
        &self,
        after_seq: i64,
        now_ms: i64,
        limit: usize,
        max_bytes: usize,
    ) -> Result<Vec<Pending>, StoreError>;
    /// The earliest `not_before` among pending jobs, if any job is pending.
    fn next_due(&self) -> Result<Option<i64>, StoreError>;
    /// An attempt of `custom_id` is about to be sent: written before the
    /// send, so a crash leaves it `held_unknown`, never "not sent".
    fn started(&self, custom_id: &str) -> Result<(), StoreError>;
    /// [`Store::started`], the attempt going to pool member `member`
    /// (kept so that an attempt cut on the wire names it). The default
    /// forgets the member.
    fn started_on(&self, custom_id: &str, member: Option<&str>) -> Result<(), StoreError> {
        let _ = member;
        self.started(custom_id)
    }
    /// The last attempt of `custom_id` was answered with an error: nothing
    /// was generated, and it is `pending` again until its next attempt.
    fn between_attempts(&self, custom_id: &str) -> Result<(), StoreError>;
    /// The job ended.
    fn ended(&self, seq: i64, end: End) -> Result<(), StoreError>;
    /// The job goes back to pending, not before `not_before_ms`.
    fn put_back(&self, seq: i64, not_before_ms: i64, so_far: End) -> Result<(), StoreError>;
    /// Stops the queue: the stop is kept, every pending job becomes
    /// `stopped` with the stop's cause.
    fn stop(&self, stop: &StopRecord) -> Result<(), StoreError>;
    /// The kept stop, if any.
    fn stopped(&self) -> Result<Option<StopRecord>, StoreError>;
    /// `--resume-stopped`: the stop is cleared, stopped jobs are pending.
    fn resume_stopped(&self) -> Result<u64, StoreError>;
    /// Jobs left `sending` (the process died with them on the wire) become
    /// `held_unknown`, charged their worst case.
    fn hold_cut(&self) -> Result<u64, StoreError>;
    /// `--retry-unknown`: `held_unknown` jobs go back to pending, marked as
    /// a possible double spend (their charge stays).
    fn release_unknown(&self) -> Result<u64, StoreError>;
    /// Jobs per state and what is left.
    fn counts(&self) -> Result<Counts, StoreError>;
    /// Whether [`Store::submit`] queues its writes and returns at once (the
    /// SQLite store: its writer answers). When not (the default), the queue
    /// calls it on a blocking thread.
    fn queues_writes(&self) -> bool {
        false
    }
    /// Makes `write` and calls `done` once it is durable. The default
    /// makes the write at once, on the caller's thread.
    fn submit(&self, write: HotWrite, done: Done) {
        done(match write {
            HotWrite::Started(id, member) => self.started_on(&id, member.as_deref()),
            HotWrite::BetweenAttempts(id) => self.between_attempts(&id),
            HotWrite::Ended(seq, end) => self.ended(seq, end),
            HotWrite::PutBack(seq, at, end) => self.put_back(seq, at, end),
        })
    }
    /// Milliseconds job `seq` waited, across runs (its `waited_ms` in the
    /// results); `None` when this store does not say.
    fn waited_ms(&self, seq: i64) -> Result<Option<u64>, StoreError> {
        let _ = seq;
        Ok(None)
    }
    /// Every ended job, in input order.
    fn each_ended(&self, f: &mut dyn FnMut(Ended) -> std::io::Result<()>)
        -> Result<(), StoreError>;
    /// Every job, ended or not, in input order: a job not ended comes with
    /// its state (`pending`) and what it has so far. The default gives the
    /// ended jobs only.
    fn each_job(&self, f: &mut dyn FnMut(Ended) -> std::io::Result<()>) -> Result<(), StoreError> {
        self.each_ended(f)
    }
    /// How each of `jobs` (lines of an input edited since the store was
    /// made) compares with the job of its `custom_id`.
    fn compare(&self, jobs: &[NewJob]) -> Result<Vec<Compared>, StoreError> {
        let _ = jobs;
        Err(StoreError::new("this store cannot take an edited input"))
    }
    /// Keeps `jobs` as the input's lines of generation `generation`: a new
    /// `custom_id` is added, an edited one never sent is replaced (pending
    /// again), an unchanged one keeps its state (its line number is
    /// updated; an edited one the provider refused is pending again, its
    /// earlier attempts kept in its record). A job refused by
    /// [`Store::compare`] is left as it is.
    fn sync(&self, jobs: Vec<NewJob>, generation: i64) -> Result<(), StoreError> {
        let _ = (jobs, generation);
        Err(StoreError::new("this store cannot take an edited input"))
    }
    /// Jobs of an older generation than `generation` (their line is gone
    /// from the input) that were never sent are removed; the rest stay
    /// (their results exist or may). How many were removed.
    fn withdraw_missing(&self, generation: i64) -> Result<u64, StoreError> {
        let _ = generation;
        Err(StoreError::new("this store cannot take an edited input"))
    }
    /// Forgets the bad lines kept (an edited input reports its own).
    fn clear_bad_lines(&self) -> Result<(), StoreError> {
        Err(StoreError::new("this store cannot take an edited input"))
    }
    /// Jobs that ended `failed` because the upstream could not be reached
    /// (their last attempt's connection failed before a byte was sent:
    /// the cause `connect_failed`, no answer), as earlier versions failed
    /// them, are pending again: nothing of theirs was generated (an
    /// attempt that may have been ends a job held, never failed). How
    /// many.
    fn revive_unreached(&self) -> Result<u64, StoreError> {
        Ok(0)
    }
    /// Expired jobs that the deadline `deadline_ms` (from first seen) no
    /// longer expires at `now_ms` become pending again; with `all`, every
    /// expired job does, its deadline counted afresh from `now_ms`. How many.
    fn revive_expired(&self, deadline_ms: i64, now_ms: i64, all: bool) -> Result<u64, StoreError> {
        let _ = (deadline_ms, now_ms, all);
        Ok(0)
    }

    // The batch path (`crate::batch`). The defaults keep no batches: a
    // store without them refuses the batch path and nothing else.

    /// Records a batch's intent before its create call, in one write: the
    /// batch row (state `intent`) and its jobs, each `pending` job made
    /// [`State::Batched`]. Refused, with nothing written, when a job is
    /// not pending.
    fn batch_intent(&self, intent: &BatchIntent) -> Result<(), StoreError> {
        let _ = intent;
        Err(batch_store_error("this store keeps no batches"))
    }
    /// The create call answered (or a recovery found the batch): its id;
    /// the row is `submitted`.
    fn batch_submitted(&self, nonce: &str, batch_id: &str) -> Result<(), StoreError> {
        let _ = (nonce, batch_id);
        Err(batch_store_error("this store keeps no batches"))
    }
    /// No batch was created for the intent (the create call was answered
    /// with an error, or a recovery ruled every candidate out): its jobs
    /// still batched are pending again; the row is `not_created`. How
    /// many jobs went back.
    fn batch_not_created(&self, nonce: &str) -> Result<u64, StoreError> {
        let _ = nonce;
        Err(batch_store_error("this store keeps no batches"))
    }
    /// A cancel of the batch was asked for, at `at_ms`.
    fn batch_cancel_requested(&self, nonce: &str, at_ms: i64) -> Result<(), StoreError> {
        let _ = (nonce, at_ms);
        Err(batch_store_error("this store keeps no batches"))
    }
    /// Every batch the store knows of, oldest first.
    fn batches(&self) -> Result<Vec<BatchRow>, StoreError> {
        Ok(Vec::new())
    }
    /// The jobs of a batch, in input order.
    fn batch_jobs(&self, nonce: &str) -> Result<Vec<BatchJob>, StoreError> {
        let _ = nonce;
        Err(batch_store_error("this store keeps no batches"))
    }
    /// Writes the results of a batch's jobs in one write (each job's end
    /// and its result id); with `close`, the row takes that state
    /// (`ended`).
    fn batch_results(
        &self,
        nonce: &str,
        ends: Vec<BatchEnd>,
        close: Option<&str>,
    ) -> Result<(), StoreError> {
        let _ = (nonce, ends, close);
        Err(batch_store_error("this store keeps no batches"))
    }
    /// The batch's jobs still batched are `held_unknown` (charged their
    /// worst case) with `cause` and `message`; the row is `held`. How many.
    fn batch_hold(&self, nonce: &str, cause: &str, message: &str) -> Result<u64, StoreError> {
        let _ = (nonce, cause, message);
        Err(batch_store_error("this store keeps no batches"))
    }
    /// `retry_failed`: jobs a batch ended `failed` or `expired` are pending
    /// again (their record kept). How many.
    fn release_batch_failed(&self) -> Result<u64, StoreError> {
        Ok(0)
    }
    /// Every ended job, in input order, with the batch its result came
    /// from (`None`: the direct path). The default knows of no batch.
    fn each_job_with_batch(
        &self,
        f: &mut dyn FnMut(Ended, Option<BatchRef>) -> std::io::Result<()>,
    ) -> Result<(), StoreError> {
        self.each_job(&mut |e| f(e, None))
    }
}

/// A batch about to be created with the provider's batch API, recorded
/// before the create call ([`Store::batch_intent`]).
#[derive(Debug, Clone)]
pub struct BatchIntent {
    /// A local nonce, unique per intent (OpenAI: the batch's
    /// `metadata.ratewise_intent`).
    pub nonce: String,
    /// `openai` or `anthropic`.
    pub shape: String,
    /// The one model of an OpenAI batch (Anthropic batches may mix).
    pub model: Option<String>,
    /// The endpoint (`/v1/chat/completions`, `/v1/messages`).
    pub endpoint: String,
    /// When the intent was recorded, before the create call (ms since the
    /// epoch): a recovery looks for the batch from here on.
    pub intent_ms: i64,
    /// The jobs' seqs, in order.
    pub seqs: Vec<i64>,
    /// The request's size in bytes (the file or the JSON body).
    pub bytes: u64,
}

/// A batch the store knows of.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BatchRow {
    /// See [`BatchIntent::nonce`].
    pub nonce: String,
    /// The provider's id, once the create call answered (or a recovery
    /// found it).
    pub batch_id: Option<String>,
    /// `openai` or `anthropic`.
    pub shape: String,
    /// See [`BatchIntent::model`].
    pub model: Option<String>,
    /// See [`BatchIntent::endpoint`].
    pub endpoint: String,
    /// `intent` (create call made or about to be, no id known),
    /// `submitted`, `ended`, `not_created`, `held`.
    pub state: String,
    /// See [`BatchIntent::intent_ms`].
    pub intent_ms: i64,
    /// Jobs in it.
    pub jobs: u64,
    /// See [`BatchIntent::bytes`].
    pub bytes: u64,
    /// When a cancel was asked for (ms since the epoch).
    pub cancel_ms: Option<i64>,
}

impl BatchRow {
    /// Whether its jobs may still be waiting for it (`intent` or
    /// `submitted`).
    pub fn is_open(&self) -> bool {
        matches!(self.state.as_str(), "intent" | "submitted")
    }
}

/// One job of a batch, without its body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BatchJob {
    /// Input order.
    pub seq: i64,
    /// The caller's id.
    pub custom_id: String,
    /// Its worst case ([`Pending::worst_case`]).
    pub worst_case: u64,
    /// Its state now.
    pub state: State,
}

/// One job's result out of a batch ([`Store::batch_results`]).
#[derive(Debug, Clone)]
pub struct BatchEnd {
    /// The job.
    pub seq: i64,
    /// The provider's id of the result line (OpenAI `batch_req_…`).
    pub result_id: Option<String>,
    /// How it ended: `state` `Pending` (a canceled item) puts it back.
    pub end: End,
}

/// The batch an ended job's result came from (or that it went into), for
/// its output line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BatchRef {
    /// The provider's batch id (`None`: held from an intent whose batch
    /// could not be told apart, or refused at its create call).
    pub batch_id: Option<String>,
    /// The provider's id of the result line (OpenAI `batch_req_…`).
    pub result_id: Option<String>,
}

/// The error of a [`Store`] that keeps no batches (the defaults of the
/// batch methods). The one place the batch path builds a [`StoreError`].
pub fn batch_store_error(what: impl std::fmt::Display) -> StoreError {
    StoreError::new(format!("the store: {what}"))
}
