//! Rate-limit header families: what the server says of each bucket.
//!
//! Anthropic: `anthropic-ratelimit-{requests,tokens,input-tokens,output-tokens}-{limit,remaining,reset}`
//! and `anthropic-priority-{input,output}-tokens-{limit,remaining,reset}`;
//! `-reset` is an RFC 3339 instant. OpenAI:
//! `x-ratelimit-{limit,remaining,reset}-{requests,tokens}`; `-reset` is a
//! Go-style duration. A reset means "bucket full again", not "earliest
//! retry". Token `remaining` values may be rounded to thousands.

use super::{header_text, trim_ows, value_text, Rejected};
use crate::vocab::{Dimension, Provider};
use http::{HeaderMap, HeaderValue};
use std::time::{Duration, SystemTime};

/// When a bucket is full again, as the server said it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reset {
    /// An instant (Anthropic, RFC 3339).
    At(SystemTime),
    /// A duration from when the response was produced (OpenAI).
    After(Duration),
}

impl Reset {
    /// How long from `wall_now` until the reset; zero when already past.
    pub fn wait_from(self, wall_now: SystemTime) -> Duration {
        match self {
            Reset::At(t) => t.duration_since(wall_now).unwrap_or(Duration::ZERO),
            Reset::After(d) => d,
        }
    }
}

/// One bucket's published state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Window {
    /// The bucket's capacity per minute.
    pub limit: Option<u64>,
    /// What is left now.
    pub remaining: Option<u64>,
    /// When it is full again.
    pub reset: Option<Reset>,
}

impl Window {
    /// True when no field was published.
    pub fn is_empty(&self) -> bool {
        self.limit.is_none() && self.remaining.is_none() && self.reset.is_none()
    }
}

/// Everything the rate-limit headers of one response said.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RateLimitSnapshot {
    /// Requests per minute.
    pub requests: Window,
    /// Input tokens per minute (Anthropic).
    pub input_tokens: Window,
    /// Output tokens per minute (Anthropic).
    pub output_tokens: Window,
    /// Combined tokens per minute (OpenAI; Anthropic's most restrictive).
    pub tokens: Window,
    /// Anthropic Priority Tier input tokens.
    pub priority_input_tokens: Window,
    /// Anthropic Priority Tier output tokens.
    pub priority_output_tokens: Window,
    /// Headers present whose value was rejected, and why.
    pub rejected: Vec<(String, Rejected)>,
}

impl RateLimitSnapshot {
    /// Reads both families from `headers`. Which family applies is decided
    /// by the header names present, so `provider` only orders the look-ups.
    pub fn from_headers(headers: &HeaderMap, _provider: Provider) -> Self {
        let mut snap = RateLimitSnapshot::default();
        for (name, value) in headers {
            snap.read_header(name.as_str(), value);
        }
        snap
    }

    /// Reads one header when its name belongs to a rate-limit family (true),
    /// so one pass over a response's headers can feed several readers.
    /// Repeated headers: the last valid value wins, every bad one is noted.
    pub(crate) fn read_header(&mut self, name: &str, value: &HeaderValue) -> bool {
        let (family, rest) = if let Some(rest) = name.strip_prefix("anthropic-") {
            if let Some(rest) = rest.strip_prefix("ratelimit-") {
                (Family::Anthropic, rest)
            } else if let Some(rest) = rest.strip_prefix("priority-") {
                (Family::Priority, rest)
            } else {
                return false;
            }
        } else if let Some(rest) = name.strip_prefix("x-ratelimit-") {
            (Family::Openai, rest)
        } else {
            return false;
        };
        // Anthropic: `<dim>-<field>`; OpenAI: `<field>-<dim>`. Fields have no '-'.
        let split = match family {
            Family::Openai => rest.split_once('-').map(|(field, dim)| (dim, field)),
            Family::Anthropic | Family::Priority => rest.rsplit_once('-'),
        };
        let Some((dim, field)) = split else {
            return true;
        };
        let field = match field {
            "limit" => FieldKind::Limit,
            "remaining" => FieldKind::Remaining,
            "reset" => FieldKind::Reset,
            _ => return true,
        };
        // Unknown dimensions are ignored unread, their bad values unnoted.
        let Some(window) = self.slot(dim, family == Family::Priority) else {
            return true;
        };
        let raw = value.as_bytes();
        let stored = match field {
            FieldKind::Limit => parse_count(raw).map(|n| window.limit = Some(n)),
            FieldKind::Remaining => parse_count(raw).map(|n| window.remaining = Some(n)),
            FieldKind::Reset if family == Family::Openai => value_text(value)
                .and_then(super::duration::go_duration_of_text)
                .map(|d| window.reset = Some(Reset::After(d))),
            FieldKind::Reset => parse_instant(raw).map(|t| window.reset = Some(Reset::At(t))),
        };
        // Bounded: a response cannot grow the list past 32 entries.
        if let Err(reason) = stored {
            if self.rejected.len() < 32 {
                self.rejected.push((name.to_owned(), reason));
            }
        }
        true
    }

    /// The window of one dimension.
    pub fn window(&self, dimension: Dimension) -> &Window {
        match dimension {
            Dimension::Requests => &self.requests,
            Dimension::InputTokens => &self.input_tokens,
            Dimension::OutputTokens => &self.output_tokens,
            Dimension::Tokens => &self.tokens,
        }
    }

    /// True when no rate-limit header was read.
    pub fn is_empty(&self) -> bool {
        [
            &self.requests,
            &self.input_tokens,
            &self.output_tokens,
            &self.tokens,
            &self.priority_input_tokens,
            &self.priority_output_tokens,
        ]
        .iter()
        .all(|w| w.is_empty())
            && self.rejected.is_empty()
    }

    /// The dimensions whose published `remaining` is zero: the ones that
    /// were exhausted when the server answered.
    pub fn exhausted(&self) -> impl Iterator<Item = Dimension> + '_ {
        Dimension::ALL
            .iter()
            .copied()
            .filter(|d| self.window(*d).remaining == Some(0))
    }

    fn slot(&mut self, dim: &str, priority: bool) -> Option<&mut Window> {
        Some(match (dim, priority) {
            ("requests", false) => &mut self.requests,
            ("tokens", false) => &mut self.tokens,
            ("input-tokens", false) => &mut self.input_tokens,
            ("output-tokens", false) => &mut self.output_tokens,
            ("input-tokens", true) => &mut self.priority_input_tokens,
            ("output-tokens", true) => &mut self.priority_output_tokens,
            _ => return None,
        })
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Family {
    /// `anthropic-ratelimit-*`.
    Anthropic,
    /// `anthropic-priority-*`.
    Priority,
    /// `x-ratelimit-*`.
    Openai,
}

#[derive(Clone, Copy)]
enum FieldKind {
    Limit,
    Remaining,
    Reset,
}

/// A non-negative integer count (`50`, `30000`).
/// Counts too large for `u64` saturate (a limit nobody will reach).
pub fn parse_count(raw: &[u8]) -> Result<u64, Rejected> {
    let digits = super::trim_ows(raw)?;
    if digits.first() == Some(&b'-') {
        return Err(Rejected::Negative);
    }
    let mut n: u64 = 0;
    for &b in digits {
        if !b.is_ascii_digit() {
            return Err(if b.is_ascii() {
                Rejected::Garbage
            } else {
                Rejected::NotText
            });
        }
        n = n.saturating_mul(10).saturating_add(u64::from(b - b'0'));
    }
    Ok(n)
}

/// An RFC 3339 instant such as `2026-11-29T12:00:04Z`.
pub fn parse_instant(raw: &[u8]) -> Result<SystemTime, Rejected> {
    // The form Anthropic sends is read straight from the bytes; whatever it
    // accepts is visible ASCII, so the checks below would have passed.
    if let Some(t) = crate::time::utc_seconds_fast_path(trim_ows(raw)?) {
        return Ok(t);
    }
    let s = header_text(raw)?;
    crate::time::parse_rfc3339(s).ok_or(Rejected::Garbage)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(
                http::HeaderName::from_bytes(k.as_bytes()).unwrap(),
                v.parse().unwrap(),
            );
        }
        h
    }

    #[test]
    fn anthropic_family() {
        let h = headers(&[
            ("anthropic-ratelimit-requests-limit", "50"),
            ("anthropic-ratelimit-requests-remaining", "31"),
            ("anthropic-ratelimit-input-tokens-remaining", "0"),
            (
                "anthropic-ratelimit-input-tokens-reset",
                "2026-11-29T12:00:08Z",
            ),
            ("anthropic-priority-output-tokens-limit", "1000"),
        ]);
        let s = RateLimitSnapshot::from_headers(&h, Provider::Anthropic);
        assert_eq!(s.requests.limit, Some(50));
        assert_eq!(s.requests.remaining, Some(31));
        assert_eq!(s.input_tokens.remaining, Some(0));
        let now = crate::time::parse_rfc3339("2026-11-29T12:00:00Z").unwrap();
        assert_eq!(
            s.input_tokens.reset.unwrap().wait_from(now),
            Duration::from_secs(8)
        );
        assert_eq!(s.priority_output_tokens.limit, Some(1000));
        assert_eq!(
            s.exhausted().collect::<Vec<_>>(),
            vec![Dimension::InputTokens]
        );
    }

    #[test]
    fn openai_family() {
        let h = headers(&[
            ("x-ratelimit-limit-tokens", "200000"),
            ("x-ratelimit-remaining-tokens", "0"),
            ("x-ratelimit-reset-tokens", "1.146s"),
            ("x-ratelimit-reset-requests", "6m0s"),
        ]);
        let s = RateLimitSnapshot::from_headers(&h, Provider::Openai);
        assert_eq!(s.tokens.limit, Some(200000));
        assert_eq!(
            s.tokens.reset,
            Some(Reset::After(Duration::from_millis(1146)))
        );
        assert_eq!(
            s.requests.reset,
            Some(Reset::After(Duration::from_secs(360)))
        );
    }

    #[test]
    fn bad_values_are_recorded_not_used() {
        let h = headers(&[
            ("x-ratelimit-remaining-tokens", "-3"),
            ("anthropic-ratelimit-requests-reset", "tomorrow"),
        ]);
        let s = RateLimitSnapshot::from_headers(&h, Provider::Openai);
        assert_eq!(s.tokens.remaining, None);
        assert_eq!(s.rejected.len(), 2);
    }
}
