//! Workspace-internal: used by ratewise's own crates; not part of the public API and not covered by semver.
//! (The fixtures' flattened explanation, behind the `fixtures` feature.)
//!
//! A classification and its decision, flattened for people and for JSON
//! (the `ratewise explain --json` object of `fixtures/README.md`).

use crate::classify::Classification;
use crate::decision::Decision;
use crate::vocab::{ActionKind, Cause, Dimension, GiveUpReason, Provider, Scope};
use serde::Serialize;
use std::fmt;

/// The flattened verdict on one response.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Explanation {
    /// What happened.
    pub cause: Cause,
    /// Who is affected.
    pub scope: Scope,
    /// What to do next.
    pub action: ActionKind,
    /// Retry delay (set for `retry`).
    pub delay_ms: Option<u64>,
    /// RFC 3339 instant (set for `defer`, and `stop_queue` with a known end).
    pub until: Option<String>,
    /// Give-up reason.
    pub reason: Option<GiveUpReason>,
    /// The limited dimension.
    pub dimension: Option<Dimension>,
    /// The provider's request id.
    pub request_id: Option<String>,
    /// The server's wait hint in milliseconds, when valid.
    pub hint_ms: Option<u64>,
    /// Where the hint came from.
    pub hint_source: Option<&'static str>,
    /// The profile applied.
    pub provider: Provider,
    /// HTTP status.
    pub status: Option<u16>,
    /// `error.type`.
    pub error_type: Option<String>,
    /// `error.code`.
    pub error_code: Option<String>,
    /// `error.message` (bounded).
    pub message: Option<String>,
    /// Why: the classifier's notes, then the decision's.
    pub notes: Vec<String>,
}

impl Explanation {
    /// Flattens a classification and its decision.
    pub fn new(c: &Classification, d: &Decision) -> Self {
        let millis = |x: std::time::Duration| u64::try_from(x.as_millis()).unwrap_or(u64::MAX);
        Explanation {
            cause: c.cause,
            scope: c.scope,
            action: d.action.kind(),
            delay_ms: d.action.delay().map(millis),
            until: d.action.until().map(crate::time::format_rfc3339),
            reason: d.action.reason(),
            dimension: c.dimension,
            request_id: c.evidence.request_id.clone(),
            hint_ms: c.hints.wait.map(|h| millis(h.wait)),
            hint_source: c.hints.wait.map(|h| h.source.as_str()),
            provider: c.provider,
            status: c.status,
            error_type: c.evidence.error_type.clone(),
            error_code: c.evidence.error_code.clone(),
            message: c.evidence.message.clone(),
            notes: c
                .evidence
                .notes
                .iter()
                .chain(d.notes.iter())
                .map(ToString::to_string)
                .collect(),
        }
    }
}

impl fmt::Display for Explanation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let opt = |o: Option<String>| o.unwrap_or_else(|| "-".to_owned());
        writeln!(f, "provider    {}", self.provider)?;
        writeln!(f, "status      {}", opt(self.status.map(|s| s.to_string())))?;
        writeln!(
            f,
            "error       {} / {}",
            opt(self.error_type.clone()),
            opt(self.error_code.clone())
        )?;
        if let Some(m) = &self.message {
            writeln!(f, "message     {m}")?;
        }
        writeln!(f, "request id  {}", opt(self.request_id.clone()))?;
        writeln!(f, "cause       {}", self.cause)?;
        writeln!(f, "scope       {}", self.scope)?;
        writeln!(
            f,
            "dimension   {}",
            opt(self.dimension.map(|d| d.to_string()))
        )?;
        let detail = match (self.delay_ms, &self.until, self.reason) {
            (Some(ms), _, _) => format!(" in {ms} ms"),
            (_, Some(u), _) => format!(" until {u}"),
            (_, _, Some(r)) => format!(" ({r})"),
            _ => String::new(),
        };
        writeln!(f, "action      {}{detail}", self.action)?;
        if !self.notes.is_empty() {
            writeln!(f, "because")?;
            for n in &self.notes {
                writeln!(f, "  - {n}")?;
            }
        }
        Ok(())
    }
}
