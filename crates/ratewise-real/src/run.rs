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
use crate::hints::ProviderTimeLayer;
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use ratewise_core::admit::{Controller, Shared};
use ratewise_core::record::AttemptRecord;
use ratewise_core::{Action, Cause, Instant, Provider};
use ratewise_mock::model::{BucketKey, Outcome, RequestMeta};
use ratewise_mock::{MockServer, OutputRange, RequestRecord, TimeScale};
use ratewise_sim::engine::Terminal;
use ratewise_sim::metrics::{Recorder, Report};
use ratewise_sim::provider::{Answered, Delivery, Verdict, KEY, WARM_OFFSET};
use ratewise_sim::strategy::ratewise::{controller_config, policy, LONG_STOP};
use ratewise_sim::workload::{jobs, Job};
use ratewise_sim::Scenario;
use ratewise_tower::{Clock, Config, Deadline, JobId, Journal, RetryLayer, TokenEstimate};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{mpsc, Semaphore};
use tower::{Service, ServiceBuilder, ServiceExt};

/// The strategy name real runs report.
pub const STRATEGY: &str = "ratewise-real";

/// The key the client sends; the mock records it under the simulation's
/// key label.
const API_KEY: &str = "rw-real-run-key";

/// Most nonces tried to make the mock produce a job's output length.
const MAX_NONCE_TRIES: u64 = 50_000;

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
}

#[derive(Debug)]
enum Ev {
    Arrive { level: Option<u64> },
    Send { job_call: String, attempt: u32 },
    Money,
    End { job: u32, how: Terminal },
}

/// Events in the order they happened, each with its provider time.
#[derive(Debug, Default)]
struct Log {
    events: Vec<(Instant, Ev)>,
    outstanding: u64,
}

struct RunLog {
    log: Mutex<Log>,
    clock: ScaledClock,
}

impl RunLog {
    fn push(&self, ev: Ev) {
        let mut log = self.log.lock().unwrap_or_else(|e| e.into_inner());
        let now = self.clock.instant();
        log.events.push((now, ev));
    }
}

/// The journal: every send before it goes out, and money answers when
/// the client has read them.
struct EventJournal(Arc<RunLog>);

impl Journal for EventJournal {
    fn attempt_started(&self, job_id: &str, attempt: u32, _at: std::time::SystemTime) {
        self.0.push(Ev::Send {
            job_call: job_id.to_owned(),
            attempt,
        });
    }

    fn attempt_ended(&self, record: &AttemptRecord) {
        if matches!(record.cause, Cause::SpendCap | Cause::Billing) {
            self.0.push(Ev::Money);
        }
    }
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

/// The request a job sends: its body (with the nonce that makes the mock
/// produce the job's output length) and the path.
fn request_body(scenario: &Scenario, job: &Job) -> Bytes {
    let [lo, hi] = scenario.jobs.output_tokens;
    let seed = scenario.seed;
    let make = |nonce: u64| -> Vec<u8> {
        let v = serde_json::json!({
            "model": scenario.model_name(),
            "max_tokens": job.max_tokens,
            "messages": [{"role": "user", "content": format!("job {}", job.id)}],
            "metadata": {"user_id": format!("rw-{}-{nonce}", job.id)},
        });
        serde_json::to_vec(&v).unwrap_or_default()
    };
    let mut best = (u64::MAX, make(0));
    for nonce in 0..MAX_NONCE_TRIES {
        let body = make(nonce);
        let out = ratewise_mock::tokens::output_tokens_for(seed, &body, lo, hi, job.max_tokens);
        let miss = out.abs_diff(job.output_tokens);
        if miss < best.0 {
            best = (miss, body);
            if miss == 0 {
                break;
            }
        }
    }
    Bytes::from(best.1)
}

fn verdict_of(r: &RequestRecord) -> Verdict {
    match r.cause {
        Cause::Success => Verdict::Success,
        Cause::RateLimited => Verdict::RateLimited,
        Cause::AccelerationLimited => Verdict::SlowDown,
        Cause::SpendCap | Cause::Billing => Verdict::Money,
        Cause::Overloaded => Verdict::Overloaded,
        Cause::OutcomeUnknown => Verdict::Reset,
        _ => Verdict::Other,
    }
}

fn answered_of(r: &RequestRecord) -> Answered {
    let delivery = match r.status.and_then(|s| http::StatusCode::from_u16(s).ok()) {
        Some(status) => Delivery::Response {
            status,
            headers: http::HeaderMap::new(),
            body: Vec::new(),
        },
        None => Delivery::Reset,
    };
    Answered {
        delivery,
        verdict: verdict_of(r),
        grant: None,
        latency: Duration::ZERO,
    }
}

fn job_call_id(job: u32, call: u32) -> String {
    format!("job-{job}.{call}")
}

fn job_of(job_call: &str) -> Option<u32> {
    job_call
        .strip_prefix("job-")?
        .split('.')
        .next()?
        .parse()
        .ok()
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
    let mut cfg = scenario.mock_config();
    let rules = std::mem::take(&mut cfg.faults);
    cfg.seconds_per_minute = spm;
    let [lo, hi] = scenario.jobs.output_tokens;
    cfg.output_tokens = OutputRange { min: lo, max: hi };
    let real_ms = |provider_ms: f64| provider_ms * spm / 60.0;
    cfg.latency = ratewise_mock::LatencyConfig {
        first_byte_ms: real_ms(scenario.latency.base_ms as f64).round() as u64,
        per_output_token_ms: real_ms(scenario.latency.per_output_token_ms),
    };
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
    });
    let state = Arc::new(Shared::new(Controller::new(controller_config(scenario))));
    let layer = RetryLayer::from_parts(
        Config {
            policy: policy(scenario),
            provider: Some(scenario.provider),
            key_label: KEY.to_owned(),
            seed: scenario.seed,
            ..Config::default()
        },
        state,
        Arc::new(clock),
    )
    .with_journal(Arc::new(EventJournal(shared.clone())));
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
                .map_or(binding_limit, |w| w.remaining)
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
    })
}

/// The queue-wide "stopped for good" signal.
struct Stop {
    tx: Arc<tokio::sync::watch::Sender<bool>>,
    rx: tokio::sync::watch::Receiver<bool>,
}

/// One job: calls the layer until the job ends, as the simulation's
/// client does with the decisions (a hand-back waits and calls again).
#[allow(clippy::too_many_arguments)]
async fn one_job<S>(
    mut svc: S,
    provider: Provider,
    url: &str,
    body: Bytes,
    job: &Job,
    deadline: Option<Duration>,
    clock: &ScaledClock,
    mut stop: Stop,
) -> Terminal
where
    S: Service<
            http::Request<Full<Bytes>>,
            Response = http::Response<
                ratewise_tower::MeteredBody<crate::hints::HintBody<hyper::body::Incoming>>,
            >,
            Error = ratewise_tower::Error,
        > + Send,
    S::Future: Send,
{
    let mut call = 0u32;
    loop {
        call += 1;
        let mut req = http::Request::post(url).header("content-type", "application/json");
        req = match provider {
            Provider::Openai => req.header("authorization", format!("Bearer {API_KEY}")),
            _ => req
                .header("x-api-key", API_KEY)
                .header("anthropic-version", "2023-06-01"),
        };
        let Ok(mut req) = req
            .header(ratewise_mock::INPUT_TOKENS_HEADER, job.input_tokens)
            .body(Full::new(body.clone()))
        else {
            return Terminal::Failed;
        };
        let ext = req.extensions_mut();
        ext.insert(JobId::new(job_call_id(job.id, call)));
        ext.insert(TokenEstimate {
            input_tokens: job.input_tokens,
        });
        if let Some(d) = deadline {
            // The budget counts from the job's arrival, not from this call.
            let spent = clock.instant().saturating_duration_since(job.arrival);
            ext.insert(Deadline(d.saturating_sub(spent)));
        }
        let result = match svc.ready().await {
            Ok(s) => s.call(req).await,
            Err(e) => Err(e),
        };
        let e = match result {
            Ok(resp) => {
                // Reading the body to its end settles the reservation.
                let _ = resp.into_body().collect().await;
                return Terminal::Done;
            }
            Err(e) => e,
        };
        let Some(decision) = e.decision() else {
            return Terminal::Failed;
        };
        let now = clock.now();
        match decision.action {
            Action::Defer { not_before, .. } => {
                // Called again at `not_before`, or at once when the queue
                // stops (the layer then answers stop_queue, sending nothing).
                tokio::select! {
                    _ = clock.sleep_until(not_before) => {}
                    _ = stop.rx.wait_for(|s| *s) => {}
                }
            }
            Action::StopQueue { until } => match until.map(|u| now.instant_at(u)) {
                Some(at) if at <= now.instant + LONG_STOP => clock.sleep_until(at).await,
                _ => {
                    stop.tx.send_replace(true);
                    return Terminal::Stopped;
                }
            },
            Action::Done => return Terminal::Done,
            Action::Fail | Action::Inspect => return Terminal::Failed,
            Action::GiveUp { .. } | Action::Retry { .. } => return Terminal::GivenUp,
            Action::HoldUnknown => return Terminal::HeldUnknown,
        }
    }
}

/// Feeds the events, in the order they happened, to the simulation's
/// [`Recorder`]; returns the report and the count of unmatched sends.
fn replay(
    scenario: &Scenario,
    all: &[Job],
    events: Vec<(Instant, Ev)>,
    records: &[RequestRecord],
    end: Instant,
) -> (Report, u64) {
    let mut by_send: HashMap<(&str, u32), &RequestRecord> = HashMap::with_capacity(records.len());
    let mut unmatched = 0u64;
    for r in records {
        match (&r.job, r.attempt) {
            (Some(j), Some(a)) => {
                by_send.insert((j.as_str(), a), r);
            }
            _ => unmatched += 1,
        }
    }
    let mut rec = Recorder::new(scenario, all);
    let limit = rec.binding_limit();
    let (mut arrived, mut ended) = (0u64, 0u64);
    let mut matched = 0u64;
    let mut last = Instant::ZERO;
    for (at, ev) in &events {
        let at = *at;
        last = last.max(at);
        let mut level = 0;
        match ev {
            Ev::Arrive { level: l, .. } => {
                if rec.is_idle() {
                    level = l.unwrap_or(limit);
                }
                arrived += 1;
            }
            Ev::Send { job_call, attempt } => {
                let job = job_of(job_call).and_then(|j| all.get(j as usize));
                match (job, by_send.get(&(job_call.as_str(), *attempt))) {
                    (Some(job), Some(r)) => {
                        matched += 1;
                        rec.on_send(job, &answered_of(r), at);
                    }
                    _ => unmatched += 1,
                }
            }
            Ev::Money => rec.on_money_answer(),
            Ev::End { job, how } => {
                if let Some(j) = all.get(*job as usize) {
                    rec.on_end(j, *how, at);
                    ended += 1;
                }
            }
        }
        rec.on_outstanding(arrived - ended.min(arrived), level, at);
    }
    unmatched += (by_send.len() as u64).saturating_sub(matched);
    (rec.finish(STRATEGY, end.max(last)), unmatched)
}
