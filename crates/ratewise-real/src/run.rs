//! The end-to-end run: the scenario's jobs through `RetryLayer` →
//! [`ProviderTime`](crate::hints::ProviderTime) → hyper-util client →
//! the mock on 127.0.0.1, everything on one [`ScaledClock`].
//!
//! Same configuration as the simulation's `ratewise` strategy:
//! [`controller_config`] (the scenario's limits, `Config::default()` for
//! the rest) behind the layer's shared state, [`policy`] as the layer's
//! policy; the same jobs ([`jobs`]: arrivals, input tokens, `max_tokens`,
//! and each job's exact output length, which the mock derives from a hash
//! of the body: a nonce in the body is chosen so that the mock produces
//! the job's output); the same provider (the scenario's [`mock_config`],
//! warmed up and capped like the simulated one); the same worker count
//! (jobs wait, first come first served, for one of `workers` slots and
//! hold it until they end).
//!
//! The figures come from the same [`Recorder`] as the simulation, fed with
//! events in the order they happened: arrivals, sends (the layer's
//! journal, *before* each send, joined with the mock's record of what it
//! answered via the `x-ratewise-job` / `x-ratewise-attempt` headers),
//! money answers as the client read them (the journal's end of that
//! attempt), and each job's end (the layer's `Result`).
//!
//! Where the real run must differ:
//! * the mock's latency is in real milliseconds and applies the first-byte
//!   delay to error answers too: a scaled `base_ms` is used for both (the
//!   simulation answers errors after `error_ms`);
//! * a job the layer hands back (`defer`, or `stop_queue` that lifts within
//!   an hour of provider time) waits and is called again: the new call
//!   starts its attempts from 1 (the simulation keeps counting);
//! * timer granularity (about a millisecond of real time) and scheduling
//!   add noise in provider time, so figures are close, not equal.
//! * the simulated client re-checks admission after every answer, so
//!   capacity a settle returns early (a generous `max_tokens` reserved,
//!   a short answer produced) is used at once; the layer's admission
//!   waits sleep until the time the controller computed and are not woken
//!   by a settle. Where the output reservation binds this makes the real
//!   run slower (see the `generous_max_tokens_agrees` test, ignored): the
//!   simulation is not trusted there until the layer wakes its waiters.
//!
//! [`controller_config`]: ratewise_sim::strategy::ratewise::controller_config
//! [`policy`]: ratewise_sim::strategy::ratewise::policy
//! [`jobs`]: ratewise_sim::workload::jobs
//! [`mock_config`]: ratewise_sim::Scenario::mock_config
//! [`Recorder`]: ratewise_sim::metrics::Recorder

use crate::clock::ScaledClock;
use crate::events::{replay, Ev, EventJournal, Log, RunLog};
use crate::hints::ProviderTimeLayer;
use crate::job::{one_job, request_body, Stop, API_KEY};
use bytes::Bytes;
use http_body_util::Full;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use ratewise_core::admit::{Controller, Shared};
use ratewise_core::{Instant, Provider};
use ratewise_mock::model::{BucketKey, Outcome, RequestMeta};
use ratewise_mock::{MockServer, TimeScale};
use ratewise_sim::metrics::Report;
use ratewise_sim::provider::{KEY, WARM_OFFSET};
use ratewise_sim::strategy::ratewise::{controller_config, policy};
use ratewise_sim::workload::{jobs, Job};
use ratewise_sim::Scenario;
use ratewise_tower::{Config, RetryLayer};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{mpsc, Semaphore};
use tower::ServiceBuilder;

/// The strategy name real runs report.
pub const STRATEGY: &str = "ratewise-real";

/// How a real run is paced and bounded.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RealOptions {
    /// Real seconds one provider minute lasts (the mock's
    /// `seconds_per_minute`). Smaller is faster and noisier.
    pub seconds_per_minute: f64,
    /// Longest real time the run may take; jobs still open then are lost.
    pub max_real: Duration,
}

impl Default for RealOptions {
    fn default() -> Self {
        RealOptions {
            seconds_per_minute: 0.5,
            max_real: Duration::from_secs(600),
        }
    }
}

impl RealOptions {
    /// The default scale for a scenario: half a second per provider minute,
    /// slower where the provider's bucket would then span less than
    /// [`MIN_BUCKET_REAL`] of real time (a 2 s bucket at 0.5 s per minute
    /// is 17 ms: timer and scheduling noise would be the bucket).
    pub fn scale_for(scenario: &ratewise_sim::Scenario) -> f64 {
        let default = RealOptions::default().seconds_per_minute;
        let capacity = scenario.limits.capacity_seconds.max(1e-3);
        default.max(MIN_BUCKET_REAL.as_secs_f64() * 60.0 / capacity)
    }
}

/// The least real time a provider bucket spans under the default scale.
pub const MIN_BUCKET_REAL: Duration = Duration::from_millis(100);

/// Why a real run could not run.
#[derive(Debug)]
pub enum RealError {
    /// The runtime or the mock could not start.
    Io(std::io::Error),
    /// A value out of range.
    Invalid(String),
}

impl std::fmt::Display for RealError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RealError::Io(e) => write!(f, "real run: {e}"),
            RealError::Invalid(m) => write!(f, "real run: {m}"),
        }
    }
}

impl std::error::Error for RealError {}

/// A real run's figures and what it cost.
#[derive(Debug, Clone)]
pub struct RealRun {
    /// The figures, defined exactly as the simulation's (strategy
    /// [`STRATEGY`]).
    pub report: Report,
    /// Real time the run took.
    pub real_elapsed: Duration,
    /// Sends the layer started that the mock has no record of, plus mock
    /// records no send of the layer explains (0 on loopback).
    pub unmatched_sends: u64,
    /// Calls the layer handed back (`defer`), which the run called again.
    pub handed_back: u64,
}

/// Runs `scenario` end to end on a new two-thread tokio runtime;
/// `progress(ended, total)` is called on this thread as jobs end.
pub fn run_real(
    scenario: &Scenario,
    options: &RealOptions,
    progress: &mut dyn FnMut(u64, u64),
) -> Result<RealRun, RealError> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(RealError::Io)?;
    rt.block_on(run(scenario, options, progress))
}

/// The async run (see [`run_real`]); must run on a multi-thread tokio
/// runtime with time and IO enabled.
pub async fn run(
    scenario: &Scenario,
    options: &RealOptions,
    progress: &mut dyn FnMut(u64, u64),
) -> Result<RealRun, RealError> {
    let spm = options.seconds_per_minute;
    if !(spm.is_finite() && (0.05..=60.0).contains(&spm)) {
        return Err(RealError::Invalid(
            "seconds per provider minute must be in [0.05, 60]".to_owned(),
        ));
    }
    let scale = TimeScale::new(spm);
    let started = std::time::Instant::now();

    // The provider: the scenario's mock configuration on the same scale,
    // latency in real milliseconds, output lengths in the scenario's range.
    let mut cfg = scenario.mock_config_real(spm);
    let rules = std::mem::take(&mut cfg.faults);
    cfg.key_labels.insert(API_KEY.to_owned(), KEY.to_owned());
    // Every send is matched with its record: room for the retries too.
    cfg.max_records = (4 * scenario.jobs.count as usize + 1000).clamp(cfg.max_records, 1_000_000);
    let server = Arc::new(MockServer::start(cfg).await.map_err(RealError::Io)?);
    // Taken after the mock started: provider times computed from it are
    // never ahead of the mock's own clock.
    let mock_origin = std::time::Instant::now();
    let model_name = scenario.model_name().to_owned();
    let bucket = server.with_model(|m| {
        if scenario.warm {
            // As the simulation: the key was busy just before the run (a
            // request on another model class), and the run starts once the
            // acceleration window is over.
            let meta = RequestMeta::new(scenario.provider, KEY, "ratewise-sim-warmup", 1, 1, 1);
            if let Outcome::Success(g) = m.handle(&meta, Instant::ZERO).outcome {
                m.settle(&g, 0, Instant::ZERO);
            }
        }
        if let Some(cap) = scenario.faults.spend_cap_after_tokens {
            m.set_spend_cap(Some(m.spend_usd() + cap as f64 / 1e6));
        }
        m.set_faults(rules);
        BucketKey {
            provider: scenario.provider,
            key: KEY.to_owned(),
            class: m.model_class(&model_name),
        }
    });
    if scenario.warm {
        tokio::time::sleep(scale.to_real(WARM_OFFSET)).await;
    }

    // The client: RetryLayer (the simulation's configuration) on the
    // scaled clock, hints brought into provider time, hyper-util below.
    let clock = ScaledClock::new(scale);
    let shared = Arc::new(RunLog {
        log: Mutex::new(Log::default()),
        clock,
        handed_back: Default::default(),
    });
    let state = Arc::new(Shared::new(Controller::new(controller_config(scenario))));
    let mut config = Config::default();
    config.policy = policy(scenario);
    config.provider = Some(scenario.provider);
    config.key_label = Some(KEY.to_owned());
    config.seed = Some(scenario.seed);
    let layer = RetryLayer::builder()
        .config(config)
        .store(state)
        .clock(Arc::new(clock))
        .journal(Arc::new(EventJournal(shared.clone())))
        .build()
        .expect("a store with no admission settings beside it builds");
    let client = Client::builder(TokioExecutor::new())
        .retry_canceled_requests(false)
        .build_http::<Full<Bytes>>();
    let service = ServiceBuilder::new()
        .layer(layer)
        .layer(ProviderTimeLayer::new(clock))
        .service(client);

    let all = jobs(scenario);
    let total = all.len() as u64;
    let url = match scenario.provider {
        Provider::Openai => format!("{}/v1/chat/completions", server.base_url()),
        _ => format!("{}/v1/messages", server.base_url()),
    };
    let deadline = scenario.deadline_ms.map(Duration::from_millis);
    let (binding, binding_limit) = ratewise_sim::metrics::binding_dimension(scenario, &all);
    // What the provider's bucket holds when full: `capacity_seconds` of
    // the limit, not a minute.
    let full_bucket = ratewise_sim::metrics::full_bucket(scenario, binding_limit);

    // Arrivals: each job enters the queue at its arrival time.
    let (queue_tx, mut queue_rx) = mpsc::unbounded_channel::<Job>();
    let arrivals = {
        let shared = shared.clone();
        let server = server.clone();
        let all = all.clone();
        // The mock's bucket level when waiting starts: the credit of the
        // goodput allowance, read as the simulation reads it.
        let level_of = move || {
            let at = Instant::from_origin(scale.to_provider(mock_origin.elapsed()));
            let windows = server.with_model(|m| m.windows(&bucket, at));
            windows
                .iter()
                .find(|w| w.dimension == binding)
                .map_or(full_bucket, |w| w.remaining)
        };
        tokio::spawn(async move {
            for job in all {
                tokio::time::sleep_until(clock.real_at(job.arrival)).await;
                {
                    let mut log = shared.log.lock().unwrap_or_else(|e| e.into_inner());
                    let level = (log.outstanding == 0).then(&level_of);
                    log.outstanding += 1;
                    let now = shared.clock.instant();
                    log.events.push((now, Ev::Arrive { level }));
                }
                if queue_tx.send(job).is_err() {
                    break;
                }
            }
        })
    };

    // Workers: first come first served, one slot per job until it ends.
    let (end_tx, mut end_rx) = mpsc::unbounded_channel::<()>();
    let slots = Arc::new(Semaphore::new(scenario.workers as usize));
    // Set once a job is stopped for good: jobs handed back (deferred) and
    // waiting in the application's queue are woken to learn it, as the
    // simulation's queue stops every waiting job at once.
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let stop_tx = Arc::new(stop_tx);
    let dispatcher = {
        let scenario = scenario.clone();
        let shared = shared.clone();
        tokio::spawn(async move {
            let mut tasks = tokio::task::JoinSet::new();
            while let Some(job) = queue_rx.recv().await {
                let Ok(permit) = slots.clone().acquire_owned().await else {
                    break;
                };
                let svc = service.clone();
                let body = request_body(&scenario, &job);
                let url = url.clone();
                let shared = shared.clone();
                let end_tx = end_tx.clone();
                let provider = scenario.provider;
                let stop = Stop {
                    tx: stop_tx.clone(),
                    rx: stop_rx.clone(),
                };
                tasks.spawn(async move {
                    let how = one_job(
                        svc,
                        provider,
                        &url,
                        body,
                        &job,
                        deadline,
                        &shared.clock,
                        &shared.handed_back,
                        stop,
                    )
                    .await;
                    {
                        let mut log = shared.log.lock().unwrap_or_else(|e| e.into_inner());
                        log.outstanding = log.outstanding.saturating_sub(1);
                        let now = shared.clock.instant();
                        log.events.push((now, Ev::End { job: job.id, how }));
                    }
                    drop(permit);
                    let _ = end_tx.send(());
                });
                while tasks.try_join_next().is_some() {}
            }
            while tasks.join_next().await.is_some() {}
        })
    };

    let mut ended = 0u64;
    let limit = tokio::time::sleep(options.max_real);
    tokio::pin!(limit);
    while ended < total {
        tokio::select! {
            e = end_rx.recv() => match e {
                Some(()) => { ended += 1; progress(ended, total); }
                None => break,
            },
            _ = &mut limit => break,
        }
    }
    arrivals.abort();
    dispatcher.abort();
    let _ = arrivals.await;
    let _ = dispatcher.await;
    let end_now = shared.clock.instant();
    let records = server.records();
    let unrecorded = server.unrecorded();
    if let Ok(server) = Arc::try_unwrap(server) {
        server.shutdown().await;
    }

    let events = std::mem::take(&mut shared.log.lock().unwrap_or_else(|e| e.into_inner()).events);
    let (report, unmatched) = replay(scenario, &all, events, &records, end_now);
    Ok(RealRun {
        report,
        real_elapsed: started.elapsed(),
        unmatched_sends: unmatched + unrecorded,
        handed_back: shared
            .handed_back
            .load(std::sync::atomic::Ordering::Relaxed),
    })
}
