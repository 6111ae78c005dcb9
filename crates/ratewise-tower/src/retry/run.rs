//! One job, start to end: admit → send → read → classify → decide →
//! retry or end. Written as one `async fn` so the order of steps reads
//! top to bottom.

use bytes::Bytes;
use http::header::CONTENT_TYPE;
use http::{HeaderValue, Request, Response};
use http_body::{Body, Frame};
use http_body_util::BodyExt;
use ratewise_core::admit::{Admission, AdmitRequest, Reservation, Sent, Target};
use ratewise_core::classify::{
    classify_response, classify_transport, detect_provider, Classification, ResponseView,
    TransportFailure,
};
use ratewise_core::decide::{decide, JobState};
use ratewise_core::record::AttemptRecord;
use ratewise_core::{Action, Cause, Decision, Instant, Now, Provider, Usage};
use ratewise_streaming::{
    is_event_stream, CommitPoint, StreamOutcome, StreamTracker, TrackerConfig,
};
use std::collections::VecDeque;
use std::sync::Arc;
use tower::ServiceExt;
use tower_service::Service;
use tracing::Instrument;

use super::layer::Inner;
use super::owned::{estimate, Owned};
use crate::body::decode::Coding;
use crate::body::metered::{in_band_classification, MeterCtx, MeterKind, Side};
use crate::body::replay::BufferError;
use crate::body::{MeteredBody, ReplayBody};
use crate::config::{ATTEMPT_HEADER, JOB_HEADER};
use crate::error::{BoxError, Error};
use crate::job::Job;
use crate::transport::transport_failure;
use crate::Attempts;

pub(crate) fn not_ready(_inner: &Arc<Inner>, e: BoxError) -> Error {
    Error::not_ready(e)
}

pub(crate) async fn run<S, B, R>(
    inner: Arc<Inner>,
    svc: S,
    req: Request<B>,
    arrived: Instant,
) -> Result<Response<MeteredBody<R>>, Error>
where
    S: Service<Request<B>, Response = Response<R>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Into<BoxError>,
    B: ReplayBody,
    R: Body<Data = Bytes> + Send + Unpin + 'static,
{
    let (parts, body) = req.into_parts();
    let bytes = match body.buffer(inner.config.max_request_body).await {
        Ok(b) => b,
        Err(e) => {
            let id = job_id_of(&inner, &parts.extensions);
            return Err(match e {
                BufferError::TooLarge => Error::body_too_large(id, inner.config.max_request_body),
                BufferError::Body(e) => Error::request_body(id, e),
            });
        }
    };
    let job = Job::new(
        &parts.extensions,
        || inner.next_job_id(),
        arrived,
        inner.config.policy.default_deadline,
        &inner.config.key_label,
        &bytes,
    );
    let span = tracing::info_span!("ratewise_job", job_id = %job.id, model = %job.model);
    attempts(inner, svc, parts, bytes, job)
        .instrument(span)
        .await
}

fn job_id_of(inner: &Inner, ext: &http::Extensions) -> String {
    ext.get::<crate::JobId>()
        .map(|j| j.as_str().to_owned())
        .unwrap_or_else(|| inner.next_job_id())
}

/// What one send produced, before the decision.
struct Answer {
    classification: Classification,
    response: Option<(http::StatusCode, http::HeaderMap, Bytes)>,
    source: Option<BoxError>,
    /// Usage reported by a replayable stream before its error.
    usage: Option<Usage>,
    /// The attempt's reservation, ended only once the answer's evidence
    /// (a pause, a stop, header sync) is in the shared state: giving it
    /// back first would wake a waiter into a 429 the answer just reported.
    /// Settled with `usage` when there is one, else released.
    reservation: Option<Reservation>,
}

async fn attempts<S, B, R>(
    inner: Arc<Inner>,
    mut svc: S,
    parts: http::request::Parts,
    bytes: Bytes,
    job: Job,
) -> Result<Response<MeteredBody<R>>, Error>
where
    S: Service<Request<B>, Response = Response<R>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Into<BoxError>,
    B: ReplayBody,
    R: Body<Data = Bytes> + Send + Unpin + 'static,
{
    let cfg = &inner.config;
    let policy = &cfg.policy;
    let state = &inner.state;
    let clock = &inner.clock;
    let target = state.target(&job.key, &job.model);
    let mut rng = fastrand::Rng::with_seed(inner.call_seed());
    let mut records: Vec<AttemptRecord> = Vec::new();
    let mut sent = 0u32;
    let mut first_send = true;
    // The last answer that was retried: the evidence of a job that then
    // ends at admission (stopped, refused, deferred).
    let mut last: Option<Answer> = None;
    // Admission must come early enough for the attempt itself to fit.
    let admit_deadline = job.deadline_at().map(|d| {
        Instant::from_origin(
            d.since_origin()
                .saturating_sub(policy.expected_attempt_time),
        )
    });

    loop {
        // Admission: first attempts and retries alike. Waiting spends
        // deadline, never an attempt.
        let reservation = loop {
            let now = clock.now();
            let req = AdmitRequest {
                target,
                input_estimate: job.input_estimate,
                body_bytes: job.body_bytes,
                max_tokens: job.max_tokens,
                is_retry: sent > 0,
                deadline: admit_deadline,
            };
            match state.admit(&req, now) {
                Admission::Go(r) => break r,
                Admission::Wait { until, reason } => {
                    let wait = until - now.instant;
                    if wait > policy.max_inline_wait {
                        let later = now.after(wait);
                        let d = Decision::new(Action::Defer {
                            until: later.wall,
                            not_before: until,
                        })
                        .with_note(format!("admission wait {wait:?} exceeds the inline limit"));
                        trace_end(&job.id, sent, &d, "admission");
                        return Err(ended_at_admission(job.id, d, records, last.take()));
                    }
                    tracing::debug!(job_id = %job.id, wait_ms = wait.as_millis() as u64,
                        reason = ?reason, "admission wait");
                    // Ask again at the computed instant, or as soon as a
                    // settle, release or resume returns capacity. Listening
                    // only here keeps the admitted path free of it; a settle
                    // landing between the answer and the listener costs at
                    // most this one wait.
                    let capacity_back = crate::wake::listen(&inner.capacity);
                    futures::future::select(clock.sleep_until(until), capacity_back).await;
                }
                Admission::Stopped { cause, until } => {
                    let d = Decision::new(Action::StopQueue { until })
                        .with_note(format!("sending is stopped ({cause}): nothing sent"));
                    trace_end(&job.id, sent, &d, cause.as_str());
                    return Err(ended_at_admission(job.id, d, records, last.take()));
                }
                Admission::Refused { reason } => {
                    let d = Decision::new(Action::GiveUp { reason })
                        .with_note("admission refused: waiting cannot help");
                    trace_end(&job.id, sent, &d, reason.as_str());
                    return Err(ended_at_admission(job.id, d, records, last.take()));
                }
            }
        };

        // From here a dropped call future ends the reservation on its way
        // out (released before the send, charged at its estimate after).
        let mut owned = Owned::new(inner.state.clone(), inner.clock.clone(), reservation);
        // What this attempt's rate-limit headers are read against.
        let admitted = owned.admitted();
        sent += 1;
        if let Some(journal) = &inner.journal {
            journal.attempt_started(&job.id, sent, clock.now().wall);
        }
        let mut request = Request::from_parts(parts.clone(), B::replay(bytes.clone()));
        if cfg.job_headers {
            let h = request.headers_mut();
            if let Ok(v) = HeaderValue::from_str(&job.id) {
                h.insert(JOB_HEADER, v);
            }
            h.insert(ATTEMPT_HEADER, HeaderValue::from(sent));
        }
        let ready: Result<(), BoxError> = if first_send {
            first_send = false;
            Ok(())
        } else {
            svc.ready().await.map(|_| ()).map_err(Into::into)
        };
        // A service that never became ready sent nothing.
        let result: Result<Response<R>, (BoxError, bool)> = match ready {
            Ok(()) => {
                owned.handing_over();
                svc.call(request).await.map_err(|e| (e.into(), true))
            }
            Err(e) => Err((e, false)),
        };
        let now = clock.now();

        // Set by a transport failure: its reservation and what happened.
        let mut transport: Option<(Reservation, TransportFailure)> = None;
        let answer = match result {
            Ok(resp) if resp.status().is_success() => {
                match success(
                    &inner,
                    &job,
                    target,
                    owned,
                    &admitted,
                    sent,
                    resp,
                    now,
                    &mut records,
                )
                .await
                {
                    Ok(resp) => return Ok(resp),
                    // An error before the stream's commit point: the caller
                    // saw nothing, so it is decided like an error answer.
                    Err(answer) => answer,
                }
            }
            Ok(resp) => {
                let (rparts, rbody) = resp.into_parts();
                let body = crate::body::replay::read_prefix(rbody, cfg.max_error_body).await;
                // A compressed error body is classified from a decoded copy;
                // the answer keeps the bytes as they were sent.
                let decoded = crate::body::decode::decoded_prefix(
                    Coding::of(&rparts.headers),
                    &body,
                    cfg.max_error_body,
                );
                let view = decoded.as_deref().unwrap_or(&body);
                let provider = provider_of(cfg.provider, &rparts.headers, view);
                let c = classify_response(
                    provider,
                    &ResponseView {
                        status: rparts.status,
                        headers: &rparts.headers,
                        body: view,
                    },
                    now.wall,
                );
                Answer {
                    classification: c,
                    response: Some((rparts.status, rparts.headers, body)),
                    source: None,
                    usage: None,
                    reservation: Some(owned.take()),
                }
            }
            Err((e, called)) => {
                let failure = if called {
                    transport_failure(&*e)
                } else {
                    TransportFailure::ConnectRefused
                };
                // Whether the reservation is held depends on the decision.
                transport = Some((owned.take(), failure));
                Answer {
                    classification: classify_transport(
                        cfg.provider.unwrap_or(Provider::Generic),
                        failure,
                    ),
                    response: None,
                    source: Some(e),
                    usage: None,
                    reservation: None,
                }
            }
        };

        let d = decide(
            policy,
            &JobState::new(sent, job.arrived, job.deadline),
            &answer.classification,
            now,
            &mut rng,
        );
        let held = transport
            .and_then(|(res, failure)| after_transport(state.as_ref(), res, failure, &d, now));
        let (delay, answer) = finish(
            &inner,
            &job,
            &admitted,
            sent,
            answer,
            d,
            now,
            &mut records,
            held,
        )?;
        last = Some(answer);
        // Never before the decided delay; admission may add its own wait.
        clock.sleep_until(now.instant + delay).await;
    }
}

/// The reservation of an attempt that failed in transport, once its
/// decision is known: held while the outcome is unknown (returned, to go
/// with the error); charged at its estimate when the policy retries a send
/// that may have run; released when the request provably never left.
fn after_transport(
    state: &dyn crate::State,
    res: Reservation,
    failure: TransportFailure,
    d: &Decision,
    now: Now,
) -> Option<Reservation> {
    if d.action == Action::HoldUnknown {
        state.hold_unknown(&res, now);
        Some(res)
    } else if failure.maybe_sent() {
        let worst = estimate(&res);
        state.settle(res, &worst, now);
        None
    } else {
        state.release(res, now);
        None
    }
}

/// A job that ends at admission, with the evidence of its last answer.
fn ended_at_admission(
    job_id: String,
    d: Decision,
    records: Vec<AttemptRecord>,
    last: Option<Answer>,
) -> Error {
    let mut err = Error::decided(job_id, d).with_attempts(records);
    if let Some(answer) = last {
        if let Some((status, headers, body)) = answer.response {
            err = err.with_response(status, headers, body);
        }
        if let Some(source) = answer.source {
            err = err.with_source(source);
        }
        err = err.with_classification(answer.classification);
    }
    err
}

fn settle_or_release(state: &dyn crate::State, res: Reservation, usage: Option<Usage>, now: Now) {
    match usage {
        Some(u) => state.settle(res, &u, now),
        None => state.release(res, now),
    }
}

fn provider_of(configured: Option<Provider>, headers: &http::HeaderMap, body: &[u8]) -> Provider {
    configured.unwrap_or_else(|| detect_provider(headers, body))
}

/// Records the attempt, applies the answer to the shared state, and
/// returns the retry delay, or the error that ends the job.
#[allow(clippy::too_many_arguments)]
fn finish(
    inner: &Inner,
    job: &Job,
    admitted: &Sent,
    attempt: u32,
    answer: Answer,
    d: Decision,
    now: Now,
    records: &mut Vec<AttemptRecord>,
    held: Option<Reservation>,
) -> Result<(std::time::Duration, Answer), Error> {
    let mut answer = answer;
    let c = &answer.classification;
    // The shared state may amend the decision (the retry budget).
    let d = inner.state.observe_sent(admitted, c, d, now);
    // In one step with the observation: no waiter woken by the give-back
    // finds the scope without the pause this answer reported.
    if let Some(res) = answer.reservation.take() {
        settle_or_release(inner.state.as_ref(), res, answer.usage, now);
    }
    let c = &answer.classification;
    let record = AttemptRecord::new(now.wall, Some(&job.id), attempt, c, &d);
    trace_attempt(&record);
    journal_end(inner, &record);
    records.push(record);
    if let Action::Retry { delay } = d.action {
        return Ok((delay, answer));
    }
    let mut err = Error::decided(job.id.clone(), d).with_attempts(std::mem::take(records));
    if let Some((status, headers, body)) = answer.response {
        err = err.with_response(status, headers, body);
    }
    if let Some(source) = answer.source {
        err = err.with_source(source);
    }
    if let Some(res) = held {
        err = err.with_reservation(res);
    }
    Err(err.with_classification(answer.classification))
}

fn journal_end(inner: &Inner, record: &AttemptRecord) {
    if let Some(journal) = &inner.journal {
        journal.attempt_ended(record);
    }
}

fn trace_attempt(r: &AttemptRecord) {
    let level_warn = !matches!(
        r.action,
        ratewise_core::ActionKind::Done | ratewise_core::ActionKind::Retry
    );
    macro_rules! ev {
        ($lvl:ident) => {
            tracing::$lvl!(
                job_id = r.job_id.as_deref().unwrap_or(""),
                attempt = r.attempt,
                status = r.status,
                transport = r.transport,
                cause = r.cause.as_str(),
                action = r.action.as_str(),
                delay_ms = r.delay_ms,
                reason = r.reason.map(|x| x.as_str()),
                error_type = r.error_type.as_deref(),
                request_id = r.request_id.as_deref(),
                hint_ms = r.hint_ms,
                "attempt"
            )
        };
    }
    if level_warn {
        ev!(warn)
    } else {
        ev!(info)
    }
}

fn trace_end(job_id: &str, sent: u32, d: &Decision, why: &str) {
    tracing::warn!(
        job_id,
        attempts = sent,
        action = d.action.kind().as_str(),
        why,
        "job ended before a send"
    );
}

/// A 2xx answer: record it, sync headers, and hand the body over metered.
/// Under the first-content commit point a stream is read up to its first
/// content event first; an error before it comes back as `Err` to be
/// decided like an error answer.
#[allow(clippy::too_many_arguments)]
async fn success<R>(
    inner: &Arc<Inner>,
    job: &Job,
    target: Target,
    owned: Owned,
    admitted: &Sent,
    attempt: u32,
    resp: Response<R>,
    now: Now,
    records: &mut Vec<AttemptRecord>,
) -> Result<Response<MeteredBody<R>>, Answer>
where
    R: Body<Data = Bytes> + Send + Unpin + 'static,
{
    let cfg = &inner.config;
    let provider = provider_of(cfg.provider, resp.headers(), b"");
    let c = classify_response(
        provider,
        &ResponseView {
            status: resp.status(),
            headers: resp.headers(),
            body: b"",
        },
        now.wall,
    );
    let stream = resp
        .headers()
        .get(CONTENT_TYPE)
        .is_some_and(|v| is_event_stream(v.as_bytes()));
    // A compressed body is metered from a decoded copy made on the side.
    let coding = Coding::of(resp.headers());
    // The metered body owns the reservation once it exists; until then
    // (while a stream is held back to its commit point) `owned` does.
    let ctx = |owned: Owned| MeterCtx {
        state: inner.state.clone(),
        clock: inner.clock.clone(),
        reservation: owned.take(),
        target,
        provider,
        job_id: job.id.clone(),
        attempt,
    };
    if !stream {
        let d = inner
            .state
            .observe_sent(admitted, &c, Decision::new(Action::Done), now);
        let record = AttemptRecord::new(now.wall, Some(&job.id), attempt, &c, &d);
        trace_attempt(&record);
        journal_end(inner, &record);
        records.push(record);
        let kind = MeterKind::Json {
            buf: bytes::BytesMut::new(),
            limit: cfg.max_metered_body,
            overflow: false,
        };
        let side = Side::new(kind, coding, cfg.max_decoded_body);
        let ctx = ctx(owned);
        let mut resp = resp.map(|b| MeteredBody::new(b, ctx, side, VecDeque::new(), None));
        resp.extensions_mut()
            .insert(Attempts(std::mem::take(records)));
        return Ok(resp);
    }

    let tracker = Box::new(StreamTracker::new(
        provider,
        TrackerConfig {
            commit_point: cfg.commit_point,
            ..TrackerConfig::default()
        },
    ));
    let side = Side::new(MeterKind::Stream(tracker), coding, cfg.max_decoded_body);
    let (rparts, body) = resp.into_parts();
    let (body, side, held, ended) = if cfg.commit_point == CommitPoint::FirstContent {
        match hold_until_commit(body, side, cfg.max_held_bytes).await {
            Held::Commit {
                body,
                side,
                held,
                ended,
            } => (body, side, held, ended),
            Held::Replay { outcome } => {
                let (cause, error_type, code) = match &outcome {
                    StreamOutcome::MidStream { cause, error, .. } => {
                        (*cause, error.error_type.clone(), error.code.clone())
                    }
                    _ => (Cause::Unknown, None, None),
                };
                let mut ic = in_band_classification(provider, cause, error_type, code);
                ic.evidence.request_id = c.evidence.request_id.clone();
                ic.evidence
                    .notes
                    .push("before the commit point: nothing reached the caller".into());
                let usage = outcome.usage();
                return Err(Answer {
                    classification: ic,
                    response: Some((rparts.status, rparts.headers, Bytes::new())),
                    source: None,
                    usage,
                    reservation: Some(owned.take()),
                });
            }
        }
    } else {
        (body, side, VecDeque::new(), None)
    };
    let d = inner
        .state
        .observe_sent(admitted, &c, Decision::new(Action::Done), now);
    let record = AttemptRecord::new(now.wall, Some(&job.id), attempt, &c, &d);
    trace_attempt(&record);
    journal_end(inner, &record);
    records.push(record);
    let ctx = ctx(owned);
    let mut resp = Response::from_parts(rparts, MeteredBody::new(body, ctx, side, held, ended));
    resp.extensions_mut()
        .insert(Attempts(std::mem::take(records)));
    Ok(resp)
}

enum Held<R> {
    Commit {
        body: R,
        side: Side,
        held: VecDeque<Frame<Bytes>>,
        /// `Some(cleanly)` when the body already ended.
        ended: Option<bool>,
    },
    Replay {
        outcome: StreamOutcome,
    },
}

/// Reads a stream until it commits (first content, or the bound on held
/// bytes), or until an error arrives before any content (replayable).
/// A stream that ends before committing is handed over as it is.
async fn hold_until_commit<R>(mut body: R, mut side: Side, max_held: usize) -> Held<R>
where
    R: Body<Data = Bytes> + Send + Unpin + 'static,
{
    let mut held = VecDeque::new();
    let mut held_bytes = 0usize;
    loop {
        match body.frame().await {
            Some(Ok(frame)) => {
                if let Some(data) = frame.data_ref() {
                    side.observe(data);
                    held_bytes += data.len();
                }
                held.push_back(frame);
                let (committed, terminal) = side
                    .tracker()
                    .map_or((true, false), |t| (t.committed(), t.is_terminal()));
                if committed || held_bytes > max_held {
                    return Held::Commit {
                        body,
                        side,
                        held,
                        ended: None,
                    };
                }
                if terminal {
                    let outcome = side.tracker().map(|t| t.outcome(true));
                    if let Some(outcome) = outcome.filter(StreamOutcome::replayable) {
                        return Held::Replay { outcome };
                    }
                    return Held::Commit {
                        body,
                        side,
                        held,
                        ended: None,
                    };
                }
            }
            end => {
                // Ended before content: give the caller what arrived; the
                // metered body reports it as interrupted.
                return Held::Commit {
                    body,
                    side,
                    held,
                    ended: Some(end.is_none()),
                };
            }
        }
    }
}
