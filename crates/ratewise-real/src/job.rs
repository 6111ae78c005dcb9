//! One job of a real run: its request (the nonce that makes the mock
//! produce the job's output length), and the calls of the layer until the
//! job ends.

use crate::clock::ScaledClock;
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use ratewise_core::{Action, Provider};
use ratewise_sim::engine::Terminal;
use ratewise_sim::strategy::ratewise::LONG_STOP;
use ratewise_sim::workload::Job;
use ratewise_sim::Scenario;
use ratewise_tower::{Clock, Deadline, JobId, TokenEstimate};
use std::sync::Arc;
use std::time::Duration;
use tower::{Service, ServiceExt};

/// The key the client sends; the mock records it under the simulation's
/// key label.
pub(crate) const API_KEY: &str = "rw-real-run-key";

/// Most nonces tried to make the mock produce a job's output length.
const MAX_NONCE_TRIES: u64 = 50_000;

/// The request a job sends: its body (with the nonce that makes the mock
/// produce the job's output length) and the path.
pub(crate) fn request_body(scenario: &Scenario, job: &Job) -> Bytes {
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

fn job_call_id(job: u32, call: u32) -> String {
    format!("job-{job}.{call}")
}

/// The queue-wide "stopped for good" signal.
pub(crate) struct Stop {
    pub(crate) tx: Arc<tokio::sync::watch::Sender<bool>>,
    pub(crate) rx: tokio::sync::watch::Receiver<bool>,
}

/// One job: calls the layer until the job ends, as the simulation's
/// client does with the decisions (a hand-back waits and calls again).
#[allow(clippy::too_many_arguments)]
pub(crate) async fn one_job<S>(
    mut svc: S,
    provider: Provider,
    url: &str,
    body: Bytes,
    job: &Job,
    deadline: Option<Duration>,
    clock: &ScaledClock,
    handed_back: &std::sync::atomic::AtomicU64,
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
                handed_back.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
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
            // An action added later: stop the job, as `Inspect` does.
            _ => return Terminal::Failed,
        }
    }
}
