//! [`Config`]: everything the layer is told, with defaults a user of an
//! LLM API expects.

use ratewise_core::decide::Policy;
use ratewise_core::parse::body::MAX_BODY_PREFIX;
use ratewise_core::Provider;
use ratewise_streaming::CommitPoint;

/// The layer's configuration. Build it from [`Config::default`] and
/// override fields (it is `#[non_exhaustive]`: fields may be added, so
/// it cannot be built with a struct literal outside this crate):
///
/// ```
/// use ratewise_tower::{Config, Provider};
/// use std::time::Duration;
///
/// let mut config = Config::default();
/// config.policy.max_attempts = 4;
/// config.policy.default_deadline = Some(Duration::from_secs(120));
/// config.provider = Some(Provider::Anthropic);
/// # let _ = config;
/// ```
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Config {
    /// The decision policy: attempts, backoff, jitter, inline wait,
    /// default deadline, unknown-outcome handling.
    pub policy: Policy,
    /// The provider profile used to read answers; `None` (default) takes
    /// the one the request's host names (`api.groq.com` → Groq, see
    /// [`Provider::from_host`]), else detects it from each response's
    /// headers and body (a proxy or a self-hosted server: set it).
    pub provider: Option<Provider>,
    /// The one key behind the layer: the label of every request without a
    /// [`KeyLabel`](crate::KeyLabel) extension. Default `None`: such a
    /// request is paced under its credentials' fingerprint
    /// ([`KeyLabel::from_credentials`](crate::KeyLabel::from_credentials)),
    /// or [`KeyLabel::ANONYMOUS`](crate::KeyLabel::ANONYMOUS) without any.
    /// Set it only when every request goes out on that one key: requests
    /// on two keys under one label share one set of buckets and stops.
    pub key_label: Option<String>,
    /// Largest request body buffered for replay (default 32 MiB). A larger
    /// body fails the call before anything is sent.
    pub max_request_body: usize,
    /// Most bytes of an error answer read for classification (default
    /// 64 KiB, the core's `MAX_BODY_PREFIX`).
    pub max_error_body: usize,
    /// Most bytes of a JSON success body kept to read its `usage`
    /// (default 4 MiB); past it the reservation settles at its estimate.
    pub max_metered_body: usize,
    /// Most bytes decoded from a compressed success body (`Content-Encoding:
    /// gzip`, `deflate` or `br`) to read its `usage` (default 64 MiB). The
    /// caller still gets the compressed bytes; the decoded copy is read on
    /// the side (a JSON copy is also bounded by `max_metered_body`). Past
    /// the bound — a decompression bomb — the reservation settles at its
    /// estimate. Besides the bound, a decoder holds a few fixed buffers
    /// (tens of KiB), and a `br` one its window (at most 16 MiB, as the
    /// stream declares).
    pub max_decoded_body: usize,
    /// Send `x-ratewise-job` and `x-ratewise-attempt` with every attempt
    /// (default on). They carry only the job id and the attempt number.
    pub job_headers: bool,
    /// When a streamed response commits (default: the first byte).
    /// [`CommitPoint::FirstContent`] holds frames back until the first
    /// content event, so an error before any content is retried
    /// transparently.
    pub commit_point: CommitPoint,
    /// Most bytes held back before the first content event; past it the
    /// stream commits (default 64 KiB).
    pub max_held_bytes: usize,
    /// Seed of the jitter source. `None` (the default) seeds it from the
    /// operating system's entropy, so two layers — in one process or in a
    /// fleet of replicas — draw different jitter and spread out; a fixed
    /// seed makes a run with one worker repeat exactly (tests, `--real`).
    pub seed: Option<u64>,
    /// The admission settings — limits per key, group and model class,
    /// the spend budget, the ramp — of the in-memory store a layer makes
    /// for itself ([`Builder`](crate::Builder)). A store given to the
    /// builder is configured by whoever made it: the builder refuses to
    /// build with both rather than drop these ([`BuildError`](crate::BuildError)).
    pub admission: ratewise_core::admit::Config,
    /// Load shedding for jobs with **no deadline**: most such jobs waiting
    /// for admission on one scope (default `None`: unbounded). A job that
    /// arrives with this many already queued ahead of it ends at once with
    /// `defer` — nothing sent — so its caller can route or retry it later
    /// instead of waiting behind them. A job with a deadline (its own
    /// [`Deadline`](crate::Deadline) or `policy.default_deadline`) is never
    /// shed: its caller is still waiting, so it waits its turn and ends
    /// with `give_up(deadline)` only when it cannot be sent in time.
    pub max_waiting: Option<usize>,
    /// The priority levels of the admission queue, highest first, with
    /// the minimum share each lower level keeps (default `interactive`,
    /// `default`, `bulk`; 10 %). A request names its level with the
    /// [`Workload`](crate::Workload) extension; an unknown name is the
    /// default level.
    pub levels: ratewise_core::admit::fair::Levels,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            policy: Policy::default(),
            provider: None,
            key_label: None,
            max_request_body: 32 << 20,
            max_error_body: MAX_BODY_PREFIX,
            max_metered_body: 4 << 20,
            max_decoded_body: 64 << 20,
            job_headers: true,
            commit_point: CommitPoint::FirstByte,
            max_held_bytes: 64 << 10,
            seed: None,
            admission: ratewise_core::admit::Config::default(),
            max_waiting: None,
            levels: ratewise_core::admit::fair::Levels::default(),
        }
    }
}

/// The header carrying the job id on each send (when
/// [`Config::job_headers`] is on).
pub const JOB_HEADER: http::HeaderName = http::HeaderName::from_static("x-ratewise-job");
/// The header carrying the 1-based attempt number on each send.
pub const ATTEMPT_HEADER: http::HeaderName = http::HeaderName::from_static("x-ratewise-attempt");

/// The response header naming what ratewise decided for a call (`done`,
/// `defer`, `stop_queue`, `give_up`, `fail`, ...; the core's
/// [`ActionKind`](ratewise_core::ActionKind) words), set by the front ends
/// that hand a caller an HTTP answer (`ratewise proxy`, `ratewise-reqwest`):
/// the answer itself is the provider's, or one in its shape.
pub const ACTION_HEADER: &str = "x-ratewise-action";

/// Sets an answer's `retry-after` to the whole seconds from `now` until
/// `until` (at least 1), or, with no `until` (a stop lifted only when
/// resumed), removes it; OpenAI's `retry-after-ms` goes either way. One
/// writer of the header for the front ends that answer for the provider
/// (`ratewise proxy`, `ratewise-reqwest`): when the wait ends is the
/// store's word, not a kept answer's.
///
/// ```
/// use std::time::{Duration, SystemTime};
/// let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000);
/// let mut h = http::HeaderMap::new();
/// ratewise_tower::set_retry_after(&mut h, Some(now + Duration::from_millis(1_500)), now);
/// assert_eq!(h["retry-after"], "2");
/// ratewise_tower::set_retry_after(&mut h, None, now);
/// assert!(h.get("retry-after").is_none());
/// ```
pub fn set_retry_after(
    h: &mut http::HeaderMap,
    until: Option<std::time::SystemTime>,
    now: std::time::SystemTime,
) {
    h.remove("retry-after-ms");
    match until {
        Some(u) => {
            let secs = u
                .duration_since(now)
                .unwrap_or_default()
                .as_secs_f64()
                .ceil()
                .max(1.0) as u64;
            h.insert(http::header::RETRY_AFTER, http::HeaderValue::from(secs));
        }
        None => {
            h.remove(http::header::RETRY_AFTER);
        }
    }
}
