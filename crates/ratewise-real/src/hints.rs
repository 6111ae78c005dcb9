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
//! Every conversion rounds up, and relative hints are measured from when
//! the answer is read (after the mock stated them), so the converted wait
//! is never shorter than the provider's. Values that do not parse are left
//! untouched (the core rejects them as it would from a real provider).
//! OpenAI's "Please try again in 1.146s" in an error *body* is not
//! rewritten: the mock always sends `retry-after` with it, and the core
//! trusts `retry-after` first.

use crate::clock::ScaledClock;
use http::{HeaderMap, HeaderName, HeaderValue, Request, Response};
use ratewise_core::parse::duration::{format_go_duration, parse_go_duration};
use ratewise_core::time::{format_rfc3339, parse_rfc3339};
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

impl<S, B, R> tower::Service<Request<B>> for ProviderTime<S>
where
    S: tower::Service<Request<B>, Response = Response<R>>,
    S::Future: Send + 'static,
    R: 'static,
{
    type Response = Response<R>;
    type Error = S::Error;
    type Future = BoxFut<Response<R>, S::Error>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<B>) -> Self::Future {
        let fut = self.inner.call(req);
        let clock = self.clock;
        Box::pin(async move {
            let mut resp = fut.await?;
            to_provider_time(resp.headers_mut(), &clock);
            Ok(resp)
        })
    }
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
            match v.parse::<f64>() {
                Ok(secs) if secs.is_finite() && secs >= 0.0 => {
                    let real = Duration::from_secs_f64(secs.min(1e12));
                    Some(ratewise_mock::clock::format_retry_after(
                        scale.to_provider(real),
                    ))
                }
                Ok(_) => None,
                Err(_) => httpdate::parse_http_date(v).ok().map(|t| {
                    let p = clock.provider_wall(t) + Duration::from_millis(999);
                    httpdate::fmt_http_date(p)
                }),
            }
        } else if n == "retry-after-ms" {
            v.parse::<f64>()
                .ok()
                .filter(|ms| ms.is_finite() && *ms >= 0.0)
                .map(|ms| {
                    let p = scale.to_provider(Duration::from_secs_f64(ms.min(1e15) / 1e3));
                    p.as_nanos().div_ceil(1_000_000).to_string()
                })
        } else if n.starts_with("anthropic-ratelimit-") && n.ends_with("-reset") {
            parse_rfc3339(v).map(|t| {
                format_rfc3339(clock.provider_wall(t) + Duration::from_nanos(999_999))
            })
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

fn ceil_ms(d: Duration) -> Duration {
    Duration::from_millis(u64::try_from(d.as_nanos().div_ceil(1_000_000)).unwrap_or(u64::MAX))
}
