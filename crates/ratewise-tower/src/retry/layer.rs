//! [`RetryLayer`]: wraps any HTTP client service in a [`RetryService`].

use ratewise_core::Now;
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use tower_layer::Layer;

use super::RetryService;
use crate::clock::Clock;
use crate::config::Config;
use crate::journal::Journal;
use crate::state::State;

/// What every clone of the layer and its services shares.
pub(crate) struct Inner {
    pub config: Config,
    /// `raw_state` behind the waking wrapper: what every send goes through.
    pub state: Arc<dyn State>,
    /// The state as given, kept so that `with_clock` / `with_journal` wrap
    /// it once again rather than wrapping the wrapper.
    raw_state: Arc<dyn State>,
    pub clock: Arc<dyn Clock>,
    pub journal: Option<Arc<dyn Journal>>,
    /// The jobs waiting for admission, per scope, in arrival order (see
    /// `crate::queue`); their heads are woken when capacity comes back
    /// (see `crate::wake`).
    pub queues: Arc<crate::queue::Queues>,
    /// Which key a request without a `KeyLabel` is paced under.
    pub keys: crate::job::Keys,
    /// The pool every call goes through, when the layer has one.
    pub pool: Option<Arc<crate::pool::PoolShared>>,
    rng: Mutex<fastrand::Rng>,
    jobs: AtomicU64,
}

impl Inner {
    /// A seed for one call's jitter: calls draw in turn from the layer's
    /// seeded source, so a run with one worker repeats exactly.
    pub fn call_seed(&self) -> u64 {
        self.rng.lock().unwrap_or_else(|e| e.into_inner()).u64(..)
    }

    /// `job-1`, `job-2`, ... for calls without a `JobId`.
    pub fn next_job_id(&self) -> String {
        format!("job-{}", self.jobs.fetch_add(1, Ordering::Relaxed) + 1)
    }
}

/// The one retry owner for an HTTP client service: admission before every
/// send, every answer read whole and decided, retries after the decided
/// wait, everything else a typed [`Error`](crate::Error).
///
/// Clones share one admission state (pauses, stops, buckets, budgets).
///
/// Two ways to make one: [`RetryLayer::new`] (a policy, everything else
/// at its default) and [`RetryLayer::builder`] (limits, keys, a store, a
/// clock, a journal).
///
/// ```
/// use ratewise_tower::{Policy, RetryLayer};
///
/// let client = tower::service_fn(|_: http::Request<String>| async {
///     Ok::<_, std::convert::Infallible>(http::Response::new(String::new()))
/// });
/// let service = tower::ServiceBuilder::new()
///     .layer(RetryLayer::new(Policy::default()))
///     .service(client);
/// # let _ = service;
/// ```
#[derive(Clone)]
pub struct RetryLayer {
    inner: Arc<Inner>,
}

impl RetryLayer {
    /// A layer with `policy` and every other setting at its default: an
    /// in-memory controller without configured limits (it learns them
    /// from rate-limit headers) and the tokio clock.
    ///
    /// With [`Policy::default()`](ratewise_core::decide::Policy::default) a
    /// call has no deadline and is held in line at most 60 s in total —
    /// admission waits, its turn behind other calls and retry delays
    /// together ([`max_inline_wait`](ratewise_core::decide::Policy::max_inline_wait)).
    /// A wait that would pass that ends the call at once,
    /// [`Error::is_defer`](crate::Error::is_defer), with the earliest time
    /// to send it again in [`Error::until`](crate::Error::until). A
    /// [`Deadline`](crate::Deadline) replaces the limit: the call then
    /// waits as long as its deadline allows. See the
    /// [crate docs](crate#the-default-policy-as-a-caller-sees-it).
    ///
    /// ```
    /// use bytes::Bytes;
    /// use http_body_util::Full;
    /// use ratewise_tower::{Policy, RetryLayer};
    /// use std::time::{Duration, SystemTime};
    /// use tower::{Layer, ServiceExt};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() {
    /// // A provider that asks for a two-minute pause.
    /// let provider = tower::service_fn(|_: http::Request<Full<Bytes>>| async {
    ///     let answer = http::Response::builder()
    ///         .status(429)
    ///         .header("retry-after", "120")
    ///         .body(Full::new(Bytes::from_static(b"{}")))
    ///         .unwrap();
    ///     Ok::<_, std::convert::Infallible>(answer)
    /// });
    /// let service = RetryLayer::new(Policy::default()).layer(provider);
    /// let request = http::Request::post("http://127.0.0.1:8080/v1/messages")
    ///     .body(Full::new(Bytes::from_static(
    ///         br#"{"model":"claude-sonnet-4-5","max_tokens":64,"messages":[]}"#,
    ///     )))
    ///     .unwrap();
    /// let e = service.oneshot(request).await.unwrap_err();
    /// // 120 s is past the 60 s in-line limit: handed back at once.
    /// assert!(e.is_defer());
    /// assert_eq!(e.attempts().len(), 1);
    /// let earliest = e.until().unwrap();
    /// assert!(earliest >= SystemTime::now() + Duration::from_secs(119));
    /// # }
    /// ```
    #[cfg(feature = "tokio")]
    pub fn new(policy: ratewise_core::decide::Policy) -> Self {
        use ratewise_core::admit::{Controller, Shared};
        let config = Config {
            policy,
            ..Config::default()
        };
        let state = Arc::new(Shared::new(Controller::new(config.admission.clone())));
        Self::from_parts(config, state, Arc::new(crate::clock::TokioClock::new()))
    }

    /// A layer from all its parts: the configuration, the shared admission
    /// state (in memory: `ratewise_core::admit::Shared`; across processes:
    /// a Redis store) and the clock. [`Builder::build`](crate::Builder::build)
    /// makes every layer through it.
    pub(crate) fn from_parts(config: Config, state: Arc<dyn State>, clock: Arc<dyn Clock>) -> Self {
        Self::build(config, state, clock, None, None, None)
    }

    /// The same, its jobs waiting in `queues` (another layer's, see
    /// [`Builder::waiting_with`](crate::Builder::waiting_with)).
    pub(crate) fn from_parts_waiting_in(
        config: Config,
        state: Arc<dyn State>,
        clock: Arc<dyn Clock>,
        queues: Arc<crate::queue::Queues>,
    ) -> Self {
        Self::build(config, state, clock, None, Some(queues), None)
    }

    /// Its waiting queues (for a layer that waits in them too).
    pub(crate) fn waiting_queues(&self) -> Arc<crate::queue::Queues> {
        self.inner.queues.clone()
    }

    /// `queues`: the waiting queues of the layer this one derives from, so
    /// that both share one arrival order and wake each other's waiters;
    /// `None` for a new one.
    fn build(
        config: Config,
        raw_state: Arc<dyn State>,
        clock: Arc<dyn Clock>,
        journal: Option<Arc<dyn Journal>>,
        queues: Option<Arc<crate::queue::Queues>>,
        pool: Option<Arc<crate::pool::PoolShared>>,
    ) -> Self {
        let rng = Mutex::new(fastrand::Rng::with_seed(
            config
                .seed
                .unwrap_or_else(ratewise_core::decide::entropy_seed),
        ));
        let queues =
            queues.unwrap_or_else(|| Arc::new(crate::queue::Queues::new(config.levels.clone())));
        let state: Arc<dyn State> =
            Arc::new(crate::wake::Waking::new(raw_state.clone(), queues.clone()));
        RetryLayer {
            inner: Arc::new(Inner {
                keys: crate::job::Keys::new(config.key_label.clone()),
                config,
                state,
                raw_state,
                queues,
                clock,
                journal,
                pool,
                rng,
                jobs: AtomicU64::new(0),
            }),
        }
    }

    /// The same layer writing every attempt to `journal` (see
    /// [`Journal`]); same state, same waiters.
    pub(crate) fn with_journal(self, journal: Arc<dyn Journal>) -> Self {
        Self::build(
            self.inner.config.clone(),
            self.inner.raw_state.clone(),
            self.inner.clock.clone(),
            Some(journal),
            Some(self.inner.queues.clone()),
            self.inner.pool.clone(),
        )
    }

    /// The same layer sending every call through `pool`; same state,
    /// same waiters, same journal.
    pub(crate) fn with_pool(self, pool: crate::pool::Pool) -> Self {
        Self::build(
            self.inner.config.clone(),
            self.inner.raw_state.clone(),
            self.inner.clock.clone(),
            self.inner.journal.clone(),
            Some(self.inner.queues.clone()),
            Some(Arc::new(crate::pool::PoolShared::new(pool))),
        )
    }

    /// What waits in the layer's queues (and those of the layers that wait
    /// in them, [`Builder::waiting_with`](crate::Builder::waiting_with)),
    /// per scope, priority level and flow, and why: for a status page.
    ///
    /// ```
    /// let layer = ratewise_tower::RetryLayer::builder().build().unwrap();
    /// assert!(layer.queues().is_empty(), "nothing has waited yet");
    /// ```
    pub fn queues(&self) -> Vec<crate::QueueStatus> {
        self.inner.queues.status(self.inner.clock.now().instant)
    }

    /// Each member of the layer's pool as it is now (share, sends, stop
    /// and its evidence, overload hold); `None` for a layer without a
    /// pool ([`Builder::pool`](crate::Builder::pool)).
    pub async fn pool_status(&self) -> Option<crate::pool::PoolStatus> {
        let pool = self.inner.pool.as_ref()?;
        Some(crate::pool::PoolStatus::of(pool, self.inner.state.as_ref(), self.now()).await)
    }

    /// The key a request is paced under, as the layer names it: its
    /// [`KeyLabel`](crate::KeyLabel), else the layer's one key
    /// ([`Config::key_label`]), else the fingerprint of the key it
    /// carries where its provider reads it
    /// ([`KeyLabel::of_request`](crate::KeyLabel::of_request); the
    /// provider is the configured one, else the one its host names), else
    /// [`KeyLabel::ANONYMOUS`](crate::KeyLabel::ANONYMOUS). A wrapper that
    /// files a call's evidence by key (`ratewise-reqwest`'s stops) asks
    /// this rather than reading the credentials again.
    ///
    /// ```
    /// use ratewise_tower::{KeyLabel, Policy, RetryLayer};
    /// let layer = RetryLayer::new(Policy::default());
    /// let call = http::Request::post(
    ///     "https://generativelanguage.googleapis.com/v1beta/models/gemini-2.5-flash:generateContent?key=AIza-1",
    /// )
    /// .body(())
    /// .unwrap();
    /// assert_eq!(layer.key_of(&call), KeyLabel::fingerprint("AIza-1").as_str());
    /// ```
    pub fn key_of<B>(&self, request: &http::Request<B>) -> String {
        let provider = self.inner.config.provider.or_else(|| {
            request
                .uri()
                .host()
                .and_then(ratewise_core::Provider::from_host)
        });
        self.inner.keys.of(
            request.extensions(),
            request.headers(),
            request.uri(),
            provider,
        )
    }

    /// The configuration.
    pub fn config(&self) -> &Config {
        &self.inner.config
    }

    /// The shared admission state.
    pub fn state(&self) -> &Arc<dyn State> {
        &self.inner.state
    }

    /// The present on the layer's clock.
    pub fn now(&self) -> Now {
        self.inner.clock.now()
    }

    /// Lifts the stop of a key (a human resumed after a spend cap); the
    /// jobs waiting on it ask again at once.
    pub async fn resume(&self, key: &str) {
        self.inner.state.resume(key, self.inner.clock.now()).await;
    }

    /// The state as given to the layer (not the waking wrapper).
    pub(crate) fn raw_state(&self) -> &Arc<dyn State> {
        &self.inner.raw_state
    }

    pub(crate) fn shared(&self) -> Arc<Inner> {
        self.inner.clone()
    }
}

impl fmt::Debug for RetryLayer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RetryLayer")
            .field("config", &self.inner.config)
            .finish_non_exhaustive()
    }
}

impl<S> Layer<S> for RetryLayer {
    type Service = RetryService<S>;

    fn layer(&self, inner: S) -> RetryService<S> {
        RetryService::new(inner, self.clone())
    }
}

#[cfg(all(test, feature = "tokio"))]
mod tests {
    use super::*;
    use ratewise_core::record::AttemptRecord;
    use std::time::SystemTime;

    struct NoJournal;
    impl Journal for NoJournal {
        fn attempt_started<'a>(
            &'a self,
            _: &'a str,
            _: u32,
            _: SystemTime,
        ) -> crate::journal::Written<'a> {
            crate::journal::written(Ok::<(), std::io::Error>(()))
        }
        fn attempt_ended<'a>(&'a self, _: &'a AttemptRecord) -> crate::journal::Written<'a> {
            crate::journal::written(Ok::<(), std::io::Error>(()))
        }
    }

    #[test]
    fn derived_layers_share_the_state_and_the_wake_signal() {
        let base = RetryLayer::new(ratewise_core::decide::Policy::default());
        let derived = base.clone().with_journal(Arc::new(NoJournal));
        // The same state underneath, wrapped once (not a wrapper of a
        // wrapper), and one signal: a settle through either wakes both.
        assert!(Arc::ptr_eq(&base.inner.raw_state, &derived.inner.raw_state));
        assert!(Arc::ptr_eq(&base.inner.queues, &derived.inner.queues));
    }
}
