//! Request extensions a caller sets to describe its job. Each overrides a
//! default; none is required.
//!
//! ```
//! use ratewise_tower::{Deadline, JobId, KeyLabel, TokenEstimate};
//! use std::time::Duration;
//!
//! let mut req = http::Request::new(String::new());
//! req.extensions_mut().insert(JobId::new("invoice-42"));
//! req.extensions_mut().insert(Deadline(Duration::from_secs(30)));
//! req.extensions_mut().insert(TokenEstimate { input_tokens: 1200 });
//! req.extensions_mut().insert(KeyLabel::new("team-a"));
//! ```

use std::sync::Arc;
use std::time::Duration;

/// The application's id for the job (one call of the service). Without it
/// the layer numbers jobs itself (`job-1`, `job-2`, ...). Logged and sent as
/// `x-ratewise-job` when job headers are on: never put a secret in it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct JobId(pub Arc<str>);

impl JobId {
    /// A job id.
    pub fn new(id: impl AsRef<str>) -> Self {
        JobId(Arc::from(id.as_ref()))
    }

    /// The id.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// The job's total time budget, counted from when the call arrived (queue
/// wait, backoff and every send come out of it). Overrides the policy's
/// `default_deadline`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Deadline(pub Duration);

/// An explicit input-token estimate (e.g. from `count_tokens`); without it
/// the controller estimates from the body size.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TokenEstimate {
    /// Input tokens the request will be charged.
    pub input_tokens: u64,
}

/// Which key (organisation, project) the request is billed to, as a label
/// for the shared controller: stops and buckets are per key. Never the key
/// itself. Defaults to the layer's configured label.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct KeyLabel(pub Arc<str>);

impl KeyLabel {
    /// A key label.
    pub fn new(label: impl AsRef<str>) -> Self {
        KeyLabel(Arc::from(label.as_ref()))
    }
}

/// The model, when the body does not say (or to override it).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Model(pub Arc<str>);

impl Model {
    /// A model name.
    pub fn new(model: impl AsRef<str>) -> Self {
        Model(Arc::from(model.as_ref()))
    }
}
