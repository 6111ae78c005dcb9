//! [`ProviderTimeLayer`]: brings the mock's real-time hints into provider
//! time, between the retry layer and the hyper-util client.
//!
//! The mock keeps its buckets in provider time but tells clients durations
//! in **real** time (`retry-after: 0.134` when a minute lasts a second):
//! that is right for a client on a real clock. The layer under test runs
//! on a [`ScaledClock`] (provider time), so a real-time hint read as is
//! would be `speedup` times too short, and the layer would retry before
//! the provider's wait is over. This service rewrites each hint the core
//! reads into the provider frame, so the layer waits at least the
//! provider's required wait *in provider time*:
//!
//! | header | real time → provider time |
//! |---|---|
//! | `retry-after` (decimal seconds) | × speedup, rounded up to the millisecond |
//! | `retry-after` (HTTP-date) | mapped onto the provider wall clock, rounded up to the second |
//! | `retry-after-ms` | × speedup, rounded up |
//! | `anthropic-ratelimit-*-reset` (RFC 3339 instants) | mapped onto the provider wall clock, rounded up to the millisecond |
//! | `x-ratelimit-reset-*` (Go durations) | × speedup, rounded up to the millisecond |
//!
//! | "regain access on 2026-12-01 at 00:00 UTC" in an error body (the spend cap's date) | mapped onto the provider wall clock, rounded up to the minute |
//! | "Please try again in 1.146s" in an error body (a Go duration) | × speedup, rounded up to the millisecond |
//!
//! Every conversion rounds up, and relative hints are measured from when
//! the answer is read (after the mock stated them), so the converted wait
//! is never shorter than the provider's. Values that do not parse are left
//! untouched (the core rejects them as it would from a real provider).
//! The message's "try again in" is rewritten because a silent mock
//! (`MockConfig::silent` `"message"`, a scenario's `"silent": "message"`)
//! says its wait nowhere else; where `retry-after` is sent too, the core
//! trusts it first, and both now say the same provider-time wait. Only
//! error bodies (non-2xx, at most [`MAX_ERROR_BODY`] bytes) are read here;
//! successes and streams pass through untouched.

use crate::clock::ScaledClock;
use bytes::Bytes;
use http::{HeaderMap, HeaderName, HeaderValue, Request, Response};
use http_body_util::{BodyExt, Either, Full, Limited};
use hyper::body::Body;
use ratewise_core::parse::duration::{format_go_duration, parse_go_duration};
use ratewise_core::parse::retry_after::{
    parse_retry_after_ms, parse_retry_after_value, RetryAfterValue,
};
use ratewise_core::time::{format_rfc3339, parse_rfc3339};
use ratewise_mock::clock::ceil_ms;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

/// Wraps a client in [`ProviderTime`].
#[derive(Debug, Clone, Copy)]
pub struct ProviderTimeLayer {
    clock: ScaledClock,
}

impl ProviderTimeLayer {
    /// Converts into the frame of `clock`.
    pub fn new(clock: ScaledClock) -> Self {
        ProviderTimeLayer { clock }
    }
}

impl<S> tower::Layer<S> for ProviderTimeLayer {
    type Service = ProviderTime<S>;
    fn layer(&self, inner: S) -> ProviderTime<S> {
        ProviderTime {
            inner,
            clock: self.clock,
        }
    }
}

/// The service of [`ProviderTimeLayer`]: one call of the inner service,
/// its response headers rewritten by [`to_provider_time`]. Errors pass
/// through untouched (the retry layer tells transport failures apart by
/// their type).
#[derive(Debug, Clone)]
pub struct ProviderTime<S> {
    inner: S,
    clock: ScaledClock,
}

type BoxFut<T, E> = Pin<Box<dyn Future<Output = Result<T, E>> + Send>>;

/// Largest error body read to rewrite a stated date (the mock's are a few
/// hundred bytes).
pub const MAX_ERROR_BODY: usize = 64 << 10;

/// A body passed through, or an error body rewritten.
pub type HintBody<R> = Either<R, Full<Bytes>>;

impl<S, B, R> tower::Service<Request<B>> for ProviderTime<S>
where
    S: tower::Service<Request<B>, Response = Response<R>>,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
    R: Body<Data = Bytes> + Send + Unpin + 'static,
    R::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    type Response = Response<HintBody<R>>;
    type Error = S::Error;
    type Future = BoxFut<Response<HintBody<R>>, S::Error>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<B>) -> Self::Future {
        let fut = self.inner.call(req);
        let clock = self.clock;
        Box::pin(async move {
            let mut resp = fut.await?;
            to_provider_time(resp.headers_mut(), &clock);
            if resp.status().is_success() {
                return Ok(resp.map(Either::Left));
            }
            let (parts, body) = resp.into_parts();
            let bytes = Limited::new(body, MAX_ERROR_BODY)
                .collect()
                .await
                .map(|c| c.to_bytes())
                .unwrap_or_default();
            let bytes = rewrite_stated_date(&bytes, &clock).map_or(bytes, Bytes::from);
            let bytes = rewrite_try_again_in(&bytes, &clock).map_or(bytes, Bytes::from);
            Ok(Response::from_parts(parts, Either::Right(Full::new(bytes))))
        })
    }
}

const REGAIN: &str = "regain access on ";

/// "regain access on YYYY-MM-DD[ at HH:MM] UTC" in `body`, with the date
/// mapped onto `clock`'s provider wall clock (rounded up to the minute);
/// `None` when there is no such statement.
///
/// ```
/// use ratewise_real::{hints::rewrite_stated_date, ScaledClock};
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// let clock = ScaledClock::new(ratewise_mock::TimeScale::new(1.0));
/// let body = br#"{"message":"You will regain access on 2099-12-01 at 00:00 UTC."}"#;
/// let out = String::from_utf8(rewrite_stated_date(body, &clock).unwrap()).unwrap();
/// assert!(out.contains("regain access on "));
/// assert!(!out.contains("2099-12-01 at 00:00"));
/// assert_eq!(rewrite_stated_date(b"{}", &clock), None);
/// # }
/// ```
pub fn rewrite_stated_date(body: &[u8], clock: &ScaledClock) -> Option<Vec<u8>> {
    let text = std::str::from_utf8(body).ok()?;
    let start = text.find(REGAIN)? + REGAIN.len();
    let rest = text.get(start..)?;
    let date = rest.get(..10)?;
    let (time, used) = match rest.get(10..).and_then(|r| r.strip_prefix(" at ")) {
        Some(r) => (r.get(..5)?, 10 + 4 + 5),
        None => ("00:00", 10),
    };
    let real = parse_rfc3339(&format!("{date}T{time}:00Z"))?;
    let provider = clock.provider_wall(real) + Duration::from_secs(59);
    let stamp = format_rfc3339(provider);
    // "YYYY-MM-DDTHH:MM..." → "YYYY-MM-DD at HH:MM"
    let new = format!("{} at {}", stamp.get(..10)?, stamp.get(11..16)?);
    let mut out = String::with_capacity(text.len() + 8);
    out.push_str(&text[..start]);
    out.push_str(&new);
    out.push_str(&rest[used..]);
    Some(out.into_bytes())
}

const TRY_AGAIN: &str = "try again in ";

/// "try again in 84ms" in `body` (the first, as the core reads it), with
/// the Go duration brought into `clock`'s provider time (× speedup,
/// rounded up to the millisecond); `None` when there is no such phrase or
/// its value is not a Go duration (left as sent, for the core to judge).
///
/// ```
/// use ratewise_real::{hints::rewrite_try_again_in, ScaledClock};
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// let clock = ScaledClock::new(ratewise_mock::TimeScale::new(1.0)); // 60× speed
/// let body = br#"{"message":"Used 9. Please try again in 134ms. Visit"}"#;
/// let out = rewrite_try_again_in(body, &clock).unwrap();
/// assert_eq!(out, br#"{"message":"Used 9. Please try again in 8.04s. Visit"}"#);
/// assert_eq!(rewrite_try_again_in(b"{}", &clock), None);
/// assert_eq!(rewrite_try_again_in(b"try again in a moment", &clock), None);
/// # }
/// ```
pub fn rewrite_try_again_in(body: &[u8], clock: &ScaledClock) -> Option<Vec<u8>> {
    let text = std::str::from_utf8(body).ok()?;
    let start = text.find(TRY_AGAIN)? + TRY_AGAIN.len();
    let rest = text.get(start..)?;
    // The token the core reads: up to a space or punctuation, without a
    // sentence's full stop.
    let len = rest
        .find(|c: char| c.is_whitespace() || matches!(c, ',' | ';' | ')' | '"'))
        .unwrap_or(rest.len());
    let token = rest[..len].trim_end_matches('.');
    let real = parse_go_duration(token).ok()?;
    let new = format_go_duration(ceil_ms(clock.scale().to_provider(real)));
    let mut out = String::with_capacity(text.len() + 8);
    out.push_str(&text[..start]);
    out.push_str(&new);
    out.push_str(&rest[token.len()..]);
    Some(out.into_bytes())
}

/// Rewrites every real-time hint in `headers` into `clock`'s provider
/// frame (see the [module](self) docs for the table).
///
/// ```
/// use ratewise_real::{hints::to_provider_time, ScaledClock};
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// let clock = ScaledClock::new(ratewise_mock::TimeScale::new(1.0)); // 60× speed
/// let mut h = http::HeaderMap::new();
/// h.insert("retry-after", "0.134".parse().unwrap());
/// h.insert("x-ratelimit-reset-requests", "84ms".parse().unwrap());
/// to_provider_time(&mut h, &clock);
/// assert_eq!(h["retry-after"], "8.04");
/// assert_eq!(h["x-ratelimit-reset-requests"], "5.04s");
/// # }
/// ```
pub fn to_provider_time(headers: &mut HeaderMap, clock: &ScaledClock) {
    let scale = clock.scale();
    let mut changes: Vec<(HeaderName, String)> = Vec::new();
    for (name, value) in headers.iter() {
        let Ok(v) = value.to_str() else { continue };
        let v = v.trim();
        let n = name.as_str();
        let new = if n == "retry-after" {
            // The core's reader: the same values are accepted as when the
            // layer reads the hint.
            match parse_retry_after_value(value.as_bytes()) {
                Ok(RetryAfterValue::Delay(real)) => Some(ratewise_mock::clock::format_retry_after(
                    scale.to_provider(real),
                )),
                Ok(RetryAfterValue::At(t)) => Some(httpdate::fmt_http_date(
                    clock.provider_wall(t) + Duration::from_millis(999),
                )),
                // Unreadable, or a form added later: left as sent.
                _ => None,
            }
        } else if n == "retry-after-ms" {
            parse_retry_after_ms(value.as_bytes()).ok().map(|real| {
                let p = scale.to_provider(real);
                p.as_nanos().div_ceil(1_000_000).to_string()
            })
        } else if n.starts_with("anthropic-ratelimit-") && n.ends_with("-reset") {
            parse_rfc3339(v)
                .map(|t| format_rfc3339(clock.provider_wall(t) + Duration::from_nanos(999_999)))
        } else if n.starts_with("x-ratelimit-reset-") {
            parse_go_duration(v)
                .ok()
                .map(|d| format_go_duration(ceil_ms(scale.to_provider(d))))
        } else {
            None
        };
        if let Some(new) = new {
            changes.push((name.clone(), new));
        }
    }
    for (name, new) in changes {
        if let Ok(v) = HeaderValue::from_str(&new) {
            headers.insert(name, v);
        }
    }
}
