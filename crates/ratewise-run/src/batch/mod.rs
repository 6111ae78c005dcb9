//! The batch path: the file's jobs through the providers' own batch APIs
//! (half the price of one request each), crash-safe.
//!
//! * [`via`]: [`Via`] (`direct|batch|auto`) and [`route`], the pure choice
//!   of [`Via::Auto`] by a job's deadline.
//! * [`plan`]: pending jobs into batches, by model and the providers'
//!   documented size limits.
//! * [`api`]: the OpenAI Batch API and Anthropic Message Batches API.
//! * [`recover`]: finding a batch again whose create call went
//!   unanswered.
//! * [`results`]: result lines into job ends.
//! * [`run_batches`]: the whole path.
//!
//! Creating a batch is a POST that is not idempotent. The store records
//! the intent (a row with the planned jobs, a local nonce, the time) and
//! marks the jobs [`State::Batched`](crate::State::Batched) *before* the
//! call, and the batch id after it. A run that died in between finds its
//! batch again ([`recover`]): it never creates a second batch for the same
//! jobs; when it cannot tell (two candidates, a listing it cannot read back
//! far enough), the jobs are held as unknown. A re-run (or the same run
//! after a signal) resumes polling the batches already submitted; a signal
//! leaves them running at the provider.
//!
//! A create call answered `stop_queue` by ratewise's classifier (spend
//! cap, billing, authentication) stops the queue with a stop record naming
//! the cause, and every submitted batch is cancelled (the run's own
//! budget only stops creating: what was created fits in it); what the provider
//! may still finish after a cancel ("the system may complete any
//! in-progress, non-interruptible requests before finalizing
//! cancellation", <https://docs.anthropic.com/en/api/canceling-message-batches>;
//! OpenAI: "The batch will be in status `cancelling` for up to 10 minutes,
//! before changing to `cancelled`, where it will have partial results (if
//! any) available in the output file",
//! <https://platform.openai.com/docs/api-reference/batch/cancel>)
//! is accounted as possibly billed: its worst case stays reserved, and a
//! job whose result never comes is held as unknown, charged its worst
//! case.

pub mod api;
pub mod plan;
pub mod recover;
pub mod results;
mod run;
pub mod via;

pub use api::{ApiError, Phase, RemoteCounts};
pub use plan::Limits;
pub use recover::Window;
pub use run::run_batches;
pub use via::{route, Route, Via};

use crate::input::Shape;
use crate::store::{Counts, StopRecord, StoreError};
use std::time::Duration;

/// How the batch path runs.
#[derive(Clone)]
pub struct BatchSettings {
    /// The input's shape: which provider's batch API.
    pub shape: Shape,
    /// The provider's base URL, no trailing slash.
    pub upstream: String,
    /// The API key: sent in a header, never written anywhere.
    pub api_key: String,
    /// How often a submitted batch is polled.
    pub poll_interval: Duration,
    /// Items a batch ended `errored` or `expired` are sent again in a new
    /// batch (never without it).
    pub retry_failed: bool,
    /// Input + output tokens the whole run may spend: a batch is not
    /// created when spent + reserved + its jobs' worst case would pass it.
    pub budget_tokens: Option<u64>,
    /// Most requests and bytes per batch.
    pub limits: Limits,
    /// Each call to the batch API is given this long.
    pub request_timeout: Duration,
    /// Clock skew allowed when a batch is looked for by its creation time.
    pub clock_skew: Duration,
    /// How long after an unanswered create call (or, for an intent found
    /// on start, after its intent) the batch listing is read to look for
    /// its batch: a create the provider was still handling when the answer
    /// was lost must have had time to show. Only then is "not in the
    /// listing" taken as "not created".
    pub settle: Duration,
    /// Poll the open batches to their end (the default). Off, the run
    /// returns once its batches are created: a caller running the direct
    /// queue beside the batch path creates first (so that no job meant for
    /// a batch is left pending for the direct queue), then polls with
    /// another call (selecting nothing) while the direct queue runs.
    pub poll_to_end: bool,
    /// Create calls per planned batch before its jobs are left pending.
    pub create_attempts: u32,
    /// Polls failing in a row before the run gives up (the batches go on).
    pub max_poll_errors: u32,
}

impl std::fmt::Debug for BatchSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BatchSettings")
            .field("shape", &self.shape)
            .field("upstream", &self.upstream)
            .field("api_key", &"<redacted>")
            .field("poll_interval", &self.poll_interval)
            .field("retry_failed", &self.retry_failed)
            .field("budget_tokens", &self.budget_tokens)
            .field("limits", &self.limits)
            .field("request_timeout", &self.request_timeout)
            .finish_non_exhaustive()
    }
}

impl BatchSettings {
    /// Defaults for `shape`: its public upstream, a poll every 30 s, the
    /// documented limits, 10 minutes per call (a 200 MB upload), 5
    /// minutes of clock skew, a minute to settle, 3 create attempts, 20
    /// failed polls.
    pub fn new(shape: Shape, api_key: impl Into<String>) -> BatchSettings {
        BatchSettings {
            shape,
            upstream: shape.default_upstream().to_owned(),
            api_key: api_key.into(),
            poll_interval: Duration::from_secs(30),
            retry_failed: false,
            budget_tokens: None,
            limits: Limits::for_shape(shape),
            request_timeout: Duration::from_secs(600),
            clock_skew: Duration::from_secs(300),
            settle: Duration::from_secs(60),
            poll_to_end: true,
            create_attempts: 3,
            max_poll_errors: 20,
        }
    }

    /// The window a lost create call's batch is looked for in.
    pub fn window(&self) -> Window {
        Window {
            skew: self.clock_skew,
            call: self.request_timeout,
        }
    }
}

/// One batch's progress, as polled.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BatchStatus {
    /// The store's nonce of it.
    pub nonce: String,
    /// The provider's id.
    pub batch_id: String,
    /// The provider's status word.
    pub status: String,
    /// The status in one vocabulary.
    pub phase: Phase,
    /// Its counts.
    pub counts: RemoteCounts,
    /// Time left at the pace so far (`None` before the first item ends).
    pub eta: Option<Duration>,
}

/// How the batch path ended.
#[derive(Debug, Clone, PartialEq)]
pub enum BatchEnding {
    /// Every batch ended and no selected job is left pending.
    Finished,
    /// The queue is stopped (now or earlier) until a person resumes it.
    Stopped(StopRecord),
    /// A signal: submitted batches go on at the provider; a re-run
    /// resumes polling them.
    Interrupted,
    /// [`BatchSettings::poll_to_end`] off: the batches are created and go
    /// on at the provider.
    Submitted,
}

/// What the batch path did.
#[derive(Debug, Clone)]
pub struct BatchReport {
    /// How it ended.
    pub ending: BatchEnding,
    /// Batches created in this run (provider ids).
    pub created: Vec<String>,
    /// Batches found again whose create call had gone unanswered.
    pub recovered: Vec<String>,
    /// Intents found to have created no batch (their jobs pending again).
    pub not_created: u64,
    /// Jobs held as unknown by a recovery that could not tell.
    pub held: u64,
    /// Batches whose results were read in this run.
    pub ended: u64,
    /// Jobs released by `retry_failed`.
    pub released: u64,
    /// Worst case of the jobs inside batches cancelled in this run: the
    /// provider may still complete (and bill) them.
    pub possibly_billed: u64,
    /// Create calls that failed every attempt (their jobs stay pending).
    pub create_failures: u64,
    /// Jobs per state at the end.
    pub counts: Counts,
}

/// Why the batch path stopped short.
#[derive(Debug)]
pub enum BatchError {
    /// The store could not be read or written: nothing more is created.
    Store(StoreError),
    /// The batch API failed where going on was not possible.
    Api {
        /// What was being done.
        context: String,
        /// The failure.
        source: ApiError,
    },
}

impl std::fmt::Display for BatchError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            BatchError::Store(e) => write!(f, "the batch path's store: {e}"),
            BatchError::Api { context, source } => write!(f, "{context}: {source}"),
        }
    }
}

impl std::error::Error for BatchError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            BatchError::Store(e) => Some(e),
            BatchError::Api { source, .. } => Some(source),
        }
    }
}

impl From<StoreError> for BatchError {
    fn from(e: StoreError) -> Self {
        BatchError::Store(e)
    }
}
