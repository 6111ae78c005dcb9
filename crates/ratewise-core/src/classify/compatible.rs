//! What each provider's documentation adds to the dialect it speaks
//! (the OpenAI-compatible APIs read OpenAI's envelope first; Bedrock reads
//! its own). Each rule names its source; the pages were not re-read
//! against their live versions when this was written, so a rule quoted
//! from a report rather than the page says so.
//!
//! * Groq, console.groq.com/docs/rate-limits: `x-ratelimit-*-requests`
//!   are requests per day (moved to their own window by
//!   [`RateLimitSnapshot::for_provider`]); a 413 `rate_limit_exceeded`
//!   "Request too large … Limit 6000, Requested 12328" can never fit.
//! * Mistral, docs.mistral.ai (the header names as the API sends them:
//!   `x-ratelimit-*-tokens-minute`, `-req-minute`, `-tokens-month`): a
//!   month's tokens spent wait for the next month.
//! * DeepSeek, api-docs.deepseek.com/quick_start/error_codes: "503 -
//!   Server Overloaded: The server is overloaded due to high traffic."
//! * OpenRouter, openrouter.ai/docs/api-reference/errors: an error from
//!   the model's provider carries `error.metadata.provider_name` and `raw`;
//!   "If the model has started processing, the status is 200 and the
//!   error arrives in the body" — [`in_band_error`].
//! * Bedrock, docs.aws.amazon.com (`ThrottlingException`): "Too many
//!   tokens per day" is a daily quota (its reset is not documented: the
//!   next 00:00 UTC is assumed).
//!
//! [`RateLimitSnapshot::for_provider`]: crate::parse::ratelimit::RateLimitSnapshot::for_provider

use super::quota::{defer_to_reset, Period};
use super::Hints;
use crate::note::Note;
use crate::vocab::{Cause, Provider, Scope};
use serde::Deserialize;
use std::time::SystemTime;

/// What one answer's provider rules changed.
pub(super) struct ProviderRules<'a> {
    pub(super) provider: Provider,
    pub(super) status: u16,
    pub(super) body: &'a [u8],
    pub(super) message: Option<&'a str>,
    pub(super) wall_now: SystemTime,
}

impl ProviderRules<'_> {
    /// Applies the provider's rules to the cause the dialect decided;
    /// returns the scope when a rule names one other than the cause's.
    pub(super) fn apply(
        &self,
        cause: &mut Cause,
        hints: &mut Hints,
        notes: &mut Vec<Note>,
    ) -> Option<Scope> {
        let p = self.provider;
        if p.dialect() == Provider::Openai && self.status == 413 && *cause == Cause::RateLimited {
            *cause = Cause::RequestTooLarge;
            notes.push(
                format!("{p}: a 413 is a request larger than the limit itself: no wait fits it")
                    .into(),
            );
            return None;
        }
        if p == Provider::Deepseek && self.status == 503 && *cause == Cause::ServerError {
            *cause = Cause::Overloaded;
            notes.push("deepseek: 503 is \"Server Overloaded\" (its error codes page)".into());
            return None;
        }
        if *cause != Cause::RateLimited {
            return None;
        }
        if p == Provider::Openrouter {
            if let Some(upstream) = upstream_provider(self.body) {
                notes.push(
                    format!(
                        "openrouter: the model's provider ({upstream}) limited the request, not this key: it teaches nothing of the key's limits"
                    )
                    .into(),
                );
                return Some(Scope::Provider);
            }
        }
        let r = &hints.ratelimit;
        let spent = [
            (Period::Day, r.requests_per_day),
            (Period::Month, r.tokens_per_month),
            (Period::Month, r.requests_per_month),
        ]
        .into_iter()
        .find(|(_, w)| w.remaining == Some(0));
        if let Some((period, window)) = spent {
            defer_to_reset(
                p.as_str(),
                period,
                Some(&window),
                hints,
                self.wall_now,
                notes,
            );
            return None;
        }
        let per_day = self
            .message
            .is_some_and(|m| crate::parse::contains_ignore_ascii_case(m, "per day"));
        if p == Provider::Bedrock && per_day {
            defer_to_reset("bedrock", Period::Day, None, hints, self.wall_now, notes);
        }
        None
    }
}

#[derive(Deserialize)]
struct Envelope<'a> {
    #[serde(borrow)]
    error: Option<ErrorWithMetadata<'a>>,
}

#[derive(Deserialize)]
struct ErrorWithMetadata<'a> {
    #[serde(borrow)]
    metadata: Option<Metadata<'a>>,
}

#[derive(Deserialize)]
struct Metadata<'a> {
    #[serde(borrow)]
    provider_name: Option<std::borrow::Cow<'a, str>>,
}

/// OpenRouter's `error.metadata.provider_name`, bounded to 64 bytes.
fn upstream_provider(body: &[u8]) -> Option<String> {
    let e: Envelope<'_> = serde_json::from_slice(body).ok()?;
    let name = e.error?.metadata?.provider_name?;
    Some(crate::parse::clip(name.trim(), 64).to_owned())
}

/// An error inside a 2xx answer (OpenRouter: "the status is 200 and the
/// error arrives in the body" once a model started): the HTTP status its
/// numeric `error.code` names, when the body is an error envelope and not
/// a completion.
pub(super) fn in_band_error(provider: Provider, body: &[u8]) -> Option<u16> {
    if provider != Provider::Openrouter {
        return None;
    }
    let start = body.iter().position(|b| !b.is_ascii_whitespace())?;
    if body[start] != b'{' {
        return None;
    }
    #[derive(Deserialize)]
    struct Coded {
        error: Option<Code>,
        choices: Option<serde::de::IgnoredAny>,
    }
    #[derive(Deserialize)]
    struct Code {
        code: Option<serde_json::Value>,
    }
    let c: Coded = serde_json::from_slice(body).ok()?;
    if c.choices.is_some() {
        return None;
    }
    let code = c.error?.code?.as_u64()?;
    u16::try_from(code).ok().filter(|c| (400..600).contains(c))
}
