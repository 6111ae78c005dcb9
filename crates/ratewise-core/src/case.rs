//! Workspace-internal: used by ratewise's own crates; not part of the public API and not covered by semver.
//! (The decision-case fixtures' evaluator, behind the `fixtures` feature.)
//!
//! Decision cases: one response (or transport failure), the job's state,
//! and the decision the default policy must reach (`fixtures/README.md`).
//!
//! Used by the fixture tests, `ratewise explain --case`, and the fuzz seed
//! corpora.

use crate::classify::{
    classify_response, classify_transport, detect_provider, ResponseView, TransportFailure,
};
use crate::decide::{decide, JobState, Policy, RandomSource};
use crate::explain::Explanation;
use crate::time::{Instant, Now};
use crate::vocab::{ActionKind, Cause, Dimension, GiveUpReason, Provider, Scope};
use http::{HeaderMap, HeaderName, HeaderValue, StatusCode};
use serde::Deserialize;
use std::fmt;
use std::time::Duration;

/// One case file.
#[derive(Debug, Clone, Deserialize)]
pub struct Case {
    /// The case's name.
    pub name: String,
    /// `anthropic`, `openai`, `generic`, or `auto`.
    pub provider: String,
    /// Wall clock when the response arrived (RFC 3339).
    pub now: String,
    /// The job's state.
    #[serde(default)]
    pub job: CaseJob,
    /// Policy overrides.
    #[serde(default)]
    pub policy: CasePolicy,
    /// The response ...
    #[serde(default)]
    pub response: Option<CaseResponse>,
    /// ... or the transport failure.
    #[serde(default)]
    pub transport: Option<TransportFailure>,
    /// What must hold.
    #[serde(default)]
    pub expect: Expect,
}

/// The job's state in a case.
#[derive(Debug, Clone, Deserialize)]
#[serde(default)]
pub struct CaseJob {
    /// Sends so far, including the one answered here.
    pub attempts: u32,
    /// Time since the job arrived.
    pub elapsed_ms: u64,
    /// Budget from arrival.
    pub deadline_ms: Option<u64>,
}

impl Default for CaseJob {
    fn default() -> Self {
        CaseJob {
            attempts: 1,
            elapsed_ms: 0,
            deadline_ms: None,
        }
    }
}

/// Policy overrides in a case.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct CasePolicy {
    /// Sends per job.
    pub max_attempts: Option<u32>,
    /// Longest inline wait.
    pub max_inline_wait_ms: Option<u64>,
}

/// A recorded response.
#[derive(Debug, Clone, Deserialize)]
pub struct CaseResponse {
    /// Status code.
    pub status: u16,
    /// Header name/value pairs, any case.
    #[serde(default)]
    pub headers: Vec<(String, String)>,
    /// Raw body text.
    #[serde(default)]
    pub body: String,
}

/// What must hold; absent keys are not checked.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct Expect {
    /// The cause, exactly.
    pub cause: Option<Cause>,
    /// The cause is one of these.
    pub cause_in: Option<Vec<Cause>>,
    /// The scope, exactly.
    pub scope: Option<Scope>,
    /// The action, exactly.
    pub action: Option<ActionKind>,
    /// The action is one of these.
    pub action_in: Option<Vec<ActionKind>>,
    /// The give-up reason.
    pub reason: Option<GiveUpReason>,
    /// The limited dimension.
    pub dimension: Option<Dimension>,
    /// The request id.
    pub request_id: Option<String>,
    /// RFC 3339 `until`.
    pub until: Option<String>,
    /// Lower bound on the retry delay (inclusive).
    pub delay_ms_min: Option<u64>,
    /// Upper bound on the retry delay (inclusive).
    pub delay_ms_max: Option<u64>,
}

/// Why a case could not be evaluated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CaseError {
    /// Not valid JSON in the case format.
    Format(String),
    /// `provider` is not a known profile.
    Provider(String),
    /// `now` is not RFC 3339.
    Now(String),
    /// Neither or both of `response` and `transport`.
    Shape,
    /// A status, header name or header value HTTP does not allow.
    Http(String),
}

impl fmt::Display for CaseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CaseError::Format(e) => write!(f, "not a case file: {e}"),
            CaseError::Provider(p) => write!(
                f,
                "unknown provider {p:?} (anthropic, openai, gemini, bedrock, generic, auto)"
            ),
            CaseError::Now(n) => write!(f, "`now` is not an RFC 3339 instant: {n:?}"),
            CaseError::Shape => {
                f.write_str("a case needs exactly one of `response` and `transport`")
            }
            CaseError::Http(e) => write!(f, "invalid HTTP in the case: {e}"),
        }
    }
}

impl std::error::Error for CaseError {}

/// A response with owned parts, ready to classify.
#[derive(Debug, Clone)]
pub struct OwnedResponse {
    /// Status.
    pub status: StatusCode,
    /// Headers.
    pub headers: HeaderMap,
    /// Body bytes.
    pub body: Vec<u8>,
}

impl OwnedResponse {
    /// Borrowed view for the classifier.
    pub fn view(&self) -> ResponseView<'_> {
        ResponseView {
            status: self.status,
            headers: &self.headers,
            body: &self.body,
        }
    }
}

impl Case {
    /// Parses a case file.
    pub fn from_json(text: &str) -> Result<Case, CaseError> {
        serde_json::from_str(text).map_err(|e| CaseError::Format(e.to_string()))
    }

    /// The response as HTTP types.
    pub(crate) fn http_response(&self) -> Result<Option<OwnedResponse>, CaseError> {
        let Some(r) = &self.response else {
            return Ok(None);
        };
        let status = StatusCode::from_u16(r.status).map_err(|e| CaseError::Http(e.to_string()))?;
        let mut headers = HeaderMap::new();
        for (name, value) in &r.headers {
            let name = HeaderName::from_bytes(name.as_bytes())
                .map_err(|e| CaseError::Http(e.to_string()))?;
            let value = HeaderValue::from_bytes(value.as_bytes())
                .map_err(|e| CaseError::Http(e.to_string()))?;
            headers.append(name, value);
        }
        Ok(Some(OwnedResponse {
            status,
            headers,
            body: r.body.as_bytes().to_vec(),
        }))
    }

    /// Evaluates the case under the default policy with the given overrides.
    pub fn evaluate(&self, rng: &mut impl RandomSource) -> Result<Explanation, CaseError> {
        let wall = crate::time::parse_rfc3339(&self.now)
            .ok_or_else(|| CaseError::Now(self.now.clone()))?;
        // The job arrived `elapsed_ms` ago; put the monotonic origin there.
        let now = Now::new(Instant::from_millis(self.job.elapsed_ms), wall);
        let job = JobState::new(
            self.job.attempts,
            Instant::ZERO,
            self.job.deadline_ms.map(Duration::from_millis),
        );
        let mut policy = Policy::default();
        if let Some(n) = self.policy.max_attempts {
            policy.max_attempts = n;
        }
        if let Some(ms) = self.policy.max_inline_wait_ms {
            policy.max_inline_wait = Duration::from_millis(ms);
        }
        let response = self.http_response()?;
        let classification = match (&response, self.transport) {
            (Some(r), None) => {
                let provider = self.profile(Some(r))?;
                classify_response(provider, &r.view(), wall)
            }
            (None, Some(t)) => classify_transport(self.profile(None)?, t),
            _ => return Err(CaseError::Shape),
        };
        let decision = decide(&policy, &job, &classification, now, rng);
        Ok(Explanation::new(&classification, &decision))
    }

    fn profile(&self, response: Option<&OwnedResponse>) -> Result<Provider, CaseError> {
        if self.provider == "auto" {
            return Ok(response.map_or(Provider::Generic, |r| detect_provider(&r.headers, &r.body)));
        }
        Provider::from_word(&self.provider)
            .ok_or_else(|| CaseError::Provider(self.provider.clone()))
    }
}

impl Expect {
    /// Every key present must hold; returns what did not.
    pub fn check(&self, got: &Explanation) -> Result<(), Vec<String>> {
        let mut bad = Vec::new();
        let mut want = |ok: bool, what: String| {
            if !ok {
                bad.push(what);
            }
        };
        if let Some(c) = self.cause {
            want(
                got.cause == c,
                format!("cause {} != expected {c}", got.cause),
            );
        }
        if let Some(cs) = &self.cause_in {
            want(
                cs.contains(&got.cause),
                format!("cause {} not in {cs:?}", got.cause),
            );
        }
        if let Some(s) = self.scope {
            want(
                got.scope == s,
                format!("scope {} != expected {s}", got.scope),
            );
        }
        if let Some(a) = self.action {
            want(
                got.action == a,
                format!("action {} != expected {a}", got.action),
            );
        }
        if let Some(a_in) = &self.action_in {
            want(
                a_in.contains(&got.action),
                format!("action {} not in {a_in:?}", got.action),
            );
        }
        if let Some(r) = self.reason {
            want(
                got.reason == Some(r),
                format!("reason {:?} != expected {r}", got.reason),
            );
        }
        if let Some(d) = self.dimension {
            want(
                got.dimension == Some(d),
                format!("dimension {:?} != expected {d}", got.dimension),
            );
        }
        if let Some(id) = &self.request_id {
            want(
                got.request_id.as_ref() == Some(id),
                format!("request_id {:?} != expected {id}", got.request_id),
            );
        }
        if let Some(u) = &self.until {
            want(
                got.until.as_ref() == Some(u),
                format!("until {:?} != expected {u}", got.until),
            );
        }
        if self.delay_ms_min.is_some() || self.delay_ms_max.is_some() {
            match got.delay_ms {
                None => want(
                    got.action != ActionKind::Retry,
                    "retry without a delay".to_owned(),
                ),
                Some(ms) => {
                    if let Some(min) = self.delay_ms_min {
                        want(ms >= min, format!("delay {ms} ms < min {min}"));
                    }
                    if let Some(max) = self.delay_ms_max {
                        want(ms <= max, format!("delay {ms} ms > max {max}"));
                    }
                }
            }
        }
        if bad.is_empty() {
            Ok(())
        } else {
            Err(bad)
        }
    }
}
