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
#[non_exhaustive]
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
    /// Requests per day: Groq's `x-ratelimit-*-requests` ("requests per
    /// day" in its headers table), moved here by [`Self::for_provider`].
    pub requests_per_day: Window,
    /// Tokens per month: Mistral's `x-ratelimit-*-tokens-month`.
    pub tokens_per_month: Window,
    /// Requests per month: Mistral's `x-ratelimit-*-req-month`.
    pub requests_per_month: Window,
    /// Headers present whose value was rejected, and why.
    pub rejected: Vec<(String, Rejected)>,
}

impl RateLimitSnapshot {
    /// Reads both families from `headers`. Which family applies is decided
    /// by the header names present; `provider` then says what window a
    /// name means where a provider gave a shared name its own meaning
    /// ([`Self::for_provider`]).
    pub fn from_headers(headers: &HeaderMap, provider: Provider) -> Self {
        let mut snap = RateLimitSnapshot::default();
        for (name, value) in headers {
            snap.read_header(name.as_str(), value);
        }
        snap.for_provider(provider);
        snap
    }

    /// Gives OpenAI's header names the meaning `provider` documents for
    /// them. Groq's headers table: `x-ratelimit-limit-requests` is
    /// "Requests Per Day (RPD)" and `x-ratelimit-limit-tokens` "Tokens Per
    /// Minute (TPM)" (console.groq.com/docs/rate-limits), so its requests
    /// window is a day's, never a minute's: read as a minute's, a key with
    /// 14,400 requests a day would be paced at 14,400 a minute.
    pub fn for_provider(&mut self, provider: Provider) {
        if provider == Provider::Groq && !self.requests.is_empty() {
            self.requests_per_day = std::mem::take(&mut self.requests);
        }
    }

    /// Reads one header when its name is a rate-limit header (true),
    /// so one pass over a response's headers can feed several readers.
    /// Repeated headers: the last valid value wins, every bad one is noted.
    pub(crate) fn read_header(&mut self, name: &str, value: &HeaderValue) -> bool {
        // The thirty names of the two families, matched whole: cheaper than
        // splitting names into prefix, dimension and field.
        let Some((family, slot, field)) = known_header(name) else {
            return false;
        };
        let window = match slot {
            Slot::Requests => &mut self.requests,
            Slot::Tokens => &mut self.tokens,
            Slot::InputTokens => &mut self.input_tokens,
            Slot::OutputTokens => &mut self.output_tokens,
            Slot::PriorityInputTokens => &mut self.priority_input_tokens,
            Slot::PriorityOutputTokens => &mut self.priority_output_tokens,
            Slot::TokensPerMonth => &mut self.tokens_per_month,
            Slot::RequestsPerMonth => &mut self.requests_per_month,
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
            &self.requests_per_day,
            &self.tokens_per_month,
            &self.requests_per_month,
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
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Family {
    /// `anthropic-ratelimit-*` and `anthropic-priority-*`: RFC 3339 resets.
    Anthropic,
    /// `x-ratelimit-*`: Go-duration resets.
    Openai,
}

#[derive(Clone, Copy)]
enum Slot {
    Requests,
    Tokens,
    InputTokens,
    OutputTokens,
    PriorityInputTokens,
    PriorityOutputTokens,
    TokensPerMonth,
    RequestsPerMonth,
}

#[derive(Clone, Copy)]
enum FieldKind {
    Limit,
    Remaining,
    Reset,
}

/// Which window and field a rate-limit header name fills, if it is one of
/// the documented names. Anthropic: `<dim>-<field>`; priority tier: input
/// and output tokens only; OpenAI: `<field>-<dim>`. Every comparison is
/// against a fixed-size byte string, which compiles to a few word loads
/// rather than `memcmp` calls.
fn known_header(name: &str) -> Option<(Family, Slot, FieldKind)> {
    let name = name.as_bytes();
    if let Some(rest) = name.strip_prefix(b"anthropic-") {
        let (priority, rest) = if let Some(rest) = rest.strip_prefix(b"ratelimit-") {
            (false, rest)
        } else {
            (true, rest.strip_prefix(b"priority-")?)
        };
        let (dim, field) = if let Some(dim) = rest.strip_suffix(b"-limit") {
            (dim, FieldKind::Limit)
        } else if let Some(dim) = rest.strip_suffix(b"-remaining") {
            (dim, FieldKind::Remaining)
        } else {
            (rest.strip_suffix(b"-reset")?, FieldKind::Reset)
        };
        let slot = slot_of(dim)?;
        let slot = match (priority, slot) {
            (false, slot) => slot,
            (true, Slot::InputTokens) => Slot::PriorityInputTokens,
            (true, Slot::OutputTokens) => Slot::PriorityOutputTokens,
            (true, _) => return None,
        };
        Some((Family::Anthropic, slot, field))
    } else {
        let rest = name.strip_prefix(b"x-ratelimit-")?;
        let (field, dim) = if let Some(dim) = rest.strip_prefix(b"limit-") {
            (FieldKind::Limit, dim)
        } else if let Some(dim) = rest.strip_prefix(b"remaining-") {
            (FieldKind::Remaining, dim)
        } else {
            (FieldKind::Reset, rest.strip_prefix(b"reset-")?)
        };
        // Mistral's names carry their window: `tokens-minute`,
        // `req-minute`, `tokens-month`, `req-month`.
        let slot = if let Some(dim) = dim.strip_suffix(b"-minute") {
            slot_of(if dim == b"req" { b"requests" } else { dim })?
        } else if let Some(dim) = dim.strip_suffix(b"-month") {
            match dim {
                b"tokens" => Slot::TokensPerMonth,
                b"req" | b"requests" => Slot::RequestsPerMonth,
                _ => return None,
            }
        } else {
            slot_of(dim)?
        };
        Some((Family::Openai, slot, field))
    }
}

fn slot_of(dim: &[u8]) -> Option<Slot> {
    if dim == b"requests" {
        Some(Slot::Requests)
    } else if dim == b"tokens" {
        Some(Slot::Tokens)
    } else if dim == b"input-tokens" {
        Some(Slot::InputTokens)
    } else if dim == b"output-tokens" {
        Some(Slot::OutputTokens)
    } else {
        None
    }
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
    use proptest::prelude::*;

    /// The reader this module had before the one-pass `read_header`,
    /// kept as the oracle the property test compares against.
    mod oracle {
        use super::super::{parse_count, RateLimitSnapshot, Rejected, Reset, Window};
        use crate::parse::duration::parse_go_duration;
        use crate::parse::header_text;
        use http::HeaderMap;
        use std::time::SystemTime;

        /// The former reader's state: the snapshot it fills.
        #[derive(Default)]
        pub(super) struct Snap(pub(super) RateLimitSnapshot);

        fn parse_instant(raw: &[u8]) -> Result<SystemTime, Rejected> {
            let s = header_text(raw)?;
            crate::time::parse_rfc3339(s).ok_or(Rejected::Garbage)
        }

        pub(super) fn from_headers(headers: &HeaderMap) -> Snap {
            let mut snap = Snap::default();
            for (name, value) in headers {
                let name = name.as_str();
                if let Some(rest) = name.strip_prefix("anthropic-ratelimit-") {
                    snap.read_anthropic(rest, name, value.as_bytes(), false);
                } else if let Some(rest) = name.strip_prefix("anthropic-priority-") {
                    snap.read_anthropic(rest, name, value.as_bytes(), true);
                } else if let Some(rest) = name.strip_prefix("x-ratelimit-") {
                    snap.read_openai(rest, name, value.as_bytes());
                }
            }
            snap
        }

        impl Snap {
            fn slot(&mut self, dim: &str, priority: bool) -> Option<&mut Window> {
                let s = &mut self.0;
                Some(match (dim, priority) {
                    ("requests", false) => &mut s.requests,
                    ("tokens", false) => &mut s.tokens,
                    ("input-tokens", false) => &mut s.input_tokens,
                    ("output-tokens", false) => &mut s.output_tokens,
                    ("input-tokens", true) => &mut s.priority_input_tokens,
                    ("output-tokens", true) => &mut s.priority_output_tokens,
                    _ => return None,
                })
            }

            fn read_anthropic(&mut self, rest: &str, name: &str, raw: &[u8], priority: bool) {
                // `<dim>-<field>`: match the three field suffixes directly.
                let Some((dim, field)) = ["limit", "remaining", "reset"].iter().find_map(|field| {
                    let dim = rest.strip_suffix(field)?.strip_suffix('-')?;
                    Some((dim, *field))
                }) else {
                    return;
                };
                let parsed = match field {
                    "limit" | "remaining" => parse_count(raw).map(Field::Count),
                    "reset" => parse_instant(raw).map(|t| Field::Reset(Reset::At(t))),
                    _ => return,
                };
                self.store(dim, field, priority, name, parsed);
            }

            fn read_openai(&mut self, rest: &str, name: &str, raw: &[u8]) {
                let Some((field, dim)) = rest.split_once('-') else {
                    return;
                };
                let parsed = match field {
                    "limit" | "remaining" => parse_count(raw).map(Field::Count),
                    "reset" => header_text(raw)
                        .and_then(parse_go_duration)
                        .map(|d| Field::Reset(Reset::After(d))),
                    _ => return,
                };
                self.store(dim, field, false, name, parsed);
            }

            fn store(
                &mut self,
                dim: &str,
                field: &str,
                priority: bool,
                name: &str,
                parsed: Result<Field, Rejected>,
            ) {
                let Some(window) = self.slot(dim, priority) else {
                    return;
                };
                match (field, parsed) {
                    ("limit", Ok(Field::Count(n))) => window.limit = Some(n),
                    ("remaining", Ok(Field::Count(n))) => window.remaining = Some(n),
                    ("reset", Ok(Field::Reset(r))) => window.reset = Some(r),
                    // Bounded: a response cannot grow the list past 32 entries.
                    (_, Err(reason)) if self.0.rejected.len() < 32 => {
                        self.0.rejected.push((name.to_owned(), reason));
                    }
                    _ => {}
                }
            }
        }

        enum Field {
            Count(u64),
            Reset(Reset),
        }
    }

    fn header_name() -> impl Strategy<Value = String> {
        let family = prop::sample::select(vec![
            "anthropic-ratelimit-",
            "anthropic-priority-",
            "x-ratelimit-",
            "anthropic-",
            "x-",
        ]);
        let part = prop::sample::select(vec![
            "requests",
            "tokens",
            "input-tokens",
            "output-tokens",
            "limit",
            "remaining",
            "reset",
            "limits",
            "foo",
            "",
            "-",
        ]);
        let composed = (
            family,
            part.clone(),
            prop::sample::select(vec!["-", "", "--"]),
            part,
        )
            .prop_map(|(f, a, dash, b)| format!("{f}{a}{dash}{b}"));
        // Every documented name, and near misses, often enough to matter.
        let mut exact = Vec::new();
        for dim in [
            "requests",
            "tokens",
            "input-tokens",
            "output-tokens",
            "priority",
        ] {
            for field in ["limit", "remaining", "reset", "resets"] {
                exact.push(format!("anthropic-ratelimit-{dim}-{field}"));
                exact.push(format!("anthropic-priority-{dim}-{field}"));
                exact.push(format!("x-ratelimit-{field}-{dim}"));
            }
        }
        prop_oneof![composed, prop::sample::select(exact)]
    }

    fn header_value() -> impl Strategy<Value = &'static str> {
        prop::sample::select(vec![
            "50",
            " 31 ",
            "0",
            "-3",
            "99999999999999999999999",
            "x",
            "",
            "\t",
            "2026-11-29T12:00:04Z",
            "2026-11-29T13:00:04.5+01:00",
            "2027-02-29T00:00:00Z",
            "1.146s",
            "6m0s",
            "NaN",
            "0",
            "ümlaut",
        ])
    }

    proptest! {
        /// The one-pass reader gives what the former reader gave.
        #[test]
        fn read_header_agrees_with_the_former_reader(
            pairs in prop::collection::vec((header_name(), header_value()), 0..40)
        ) {
            let mut h = HeaderMap::new();
            for (k, v) in &pairs {
                let Ok(name) = http::HeaderName::from_bytes(k.as_bytes()) else { continue };
                h.append(name, HeaderValue::from_bytes(v.as_bytes()).unwrap());
            }
            let new = RateLimitSnapshot::from_headers(&h, Provider::Anthropic);
            let old = oracle::from_headers(&h).0;
            prop_assert_eq!(new, old);
        }
    }

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
