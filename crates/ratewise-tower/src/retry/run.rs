//! One job, start to end: admit → send → read → classify → decide →
//! retry or end. `attempts` reads in that order, top to bottom; each step
//! is a method of `Flight`, the job's state while it is in flight.

use bytes::Bytes;
use event_listener::EventListener;
use http::header::CONTENT_TYPE;
use http::{HeaderValue, Request, Response};
use http_body::{Body, Frame};
use http_body_util::BodyExt;
use ratewise_core::admit::{Admission, Target, WaitReason};
use ratewise_core::classify::{
    classify_in_band, classify_response, classify_transport, detect_provider, Classification,
    ResponseView, TransportFailure,
};
use ratewise_core::job::{Ended, Job as JobMachine, JobSpec, Sending, Step, WaitFor};
use ratewise_core::record::AttemptRecord;
use ratewise_core::{Action, Cause, Decision, Instant, Now, Provider};
use ratewise_streaming::{
    is_event_stream, CommitPoint, StreamOutcome, StreamTracker, TrackerConfig,
};
use std::collections::VecDeque;
use std::sync::Arc;
use tower::ServiceExt;
use tower_service::Service;
use tracing::Instrument;

use super::layer::Inner;
use crate::body::decode::Coding;
use crate::body::metered::{MeterCtx, MeterKind, Side};
use crate::body::replay::BufferError;
use crate::body::{MeteredBody, ReplayBody};
use crate::cancel::{Cancel, Cancelled, WireMark};
use crate::config::{ATTEMPT_HEADER, JOB_HEADER};
use crate::error::{BoxError, Error};
use crate::job::Job;
use crate::pool::Pooled;
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
    let (mut parts, body) = req.into_parts();
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
        &mut parts,
        || inner.next_job_id(),
        arrived,
        inner.config.policy.default_deadline,
        &inner.keys,
        &bytes,
        inner.config.provider,
    );
    // Debug formatting: a model name is the caller's text, escaped.
    let span = tracing::info_span!("ratewise_job", job_id = %job.id, model = ?job.model);
    attempts(inner, svc, parts, bytes, job)
        .instrument(span)
        .await
}

fn job_id_of(inner: &Inner, ext: &http::Extensions) -> String {
    ext.get::<crate::JobId>()
        .map(|j| j.as_str().to_owned())
        .unwrap_or_else(|| inner.next_job_id())
}

/// A send cut at the policy's `send_timeout`.
#[derive(Debug)]
struct SendTimedOut(std::time::Duration);

impl std::fmt::Display for SendTimedOut {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "no answer within the send timeout of {:?}", self.0)
    }
}

impl std::error::Error for SendTimedOut {}

/// What one send produced: the evidence an error carries if the job ends.
struct Answer {
    classification: Classification,
    response: Option<(http::StatusCode, http::HeaderMap, Bytes)>,
    source: Option<BoxError>,
}

/// Drives one job's [machine](ratewise_core::job) over the inner service:
/// it asks the machine what to do, does it (waits, sends, reads), and
/// tells the machine what happened. The sequence itself — admission,
/// decisions, accounting — is the machine's.
///
/// Each turn of the loop is one attempt, in the steps of [`Flight`]: wait
/// for the job's turn → admission → the last checks before the send →
/// send → read the answer → record it. A step that ends the job returns
/// its error; a 2xx answer returns the response.
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
    let mut flight = Flight::start(inner, parts, bytes, job).await;
    loop {
        let signal = flight.wait_turn().await?;
        let now = flight.inner.clock.now();
        let step = flight.next_step(now).await;
        let Some(attempt) = flight.act(step, signal, now).await? else {
            // A wait: the machine is asked again.
            continue;
        };
        let member = flight.before_send(attempt).await?;
        let result = match flight.send(&mut svc, attempt).await {
            Sent::Done(result) => result,
            Sent::Withheld => return Err(flight.withheld(attempt, member).await),
        };
        let now = flight.inner.clock.now();
        // Where the request got to, told to the machine before what came
        // back (a request its transport still held waiting for a
        // connection never goes on the wire after).
        let wire = flight.m.tell_wire(attempt);
        if wire == Sending::Connecting && result.is_err() && flight.cancel.is_cancelled() {
            // The cancellation withdrew it as its connection came, and
            // the transport's failure got here first: never sent, as if
            // the cancellation had.
            return Err(flight.withheld(attempt, member).await);
        }
        flight
            .left_while_out(!matches!(result, Err((_, false))))
            .await;
        let (answer, d) = match result {
            Ok(resp) if resp.status().is_success() => {
                match flight.succeeded(attempt, member.clone(), resp, now).await {
                    Ok(resp) => return Ok(resp),
                    // An error before the stream's commit point: the caller
                    // saw nothing, so it was decided like an error answer.
                    Err(answered) => answered,
                }
            }
            Ok(resp) => flight.error_answer(resp, now).await,
            Err((e, called)) => flight.transport_failed(e, called, wire, now).await,
        };
        flight.answered(attempt, member, answer, d, now).await;
    }
}

/// One job in flight: the state the steps of [`attempts`] share across its
/// attempts.
///
/// Fields drop in the order written, which is the order the locals of the
/// single function these steps were cut from dropped in: the queue ticket
/// (handing the turn on) before the machine (giving back what it holds).
struct Flight {
    /// The caller's cancellation (see `crate::cancel`): given to the
    /// machine, which ends the job between sends and makes no retry after
    /// a send in flight. Also the published view of the job's send, which
    /// the layer writes in step with the machine (a job with no
    /// cancellation of its caller's publishes on one of its own).
    cancel: Cancel,
    /// While it waits for admission: its ticket (dropped when it is
    /// admitted or ends, or with the call future, which hands the turn on).
    queued: Option<crate::queue::Ticket>,
    /// The job's place in its scope's admission queue (`crate::queue`):
    /// one place for the whole job, so a retry keeps its arrival order.
    place: ratewise_core::admit::fair::Place,
    /// Its level and flow in that queue (the request's
    /// [`Workload`](crate::Workload), or the defaults).
    workload: ratewise_core::admit::fair::Workload,
    /// The last answer: the evidence of a job that then ends.
    last: Option<Answer>,
    /// The attempts made so far, for the job's error or its response.
    records: Vec<AttemptRecord>,
    /// The job's jitter, seeded per call.
    rng: fastrand::Rng,
    /// The job's machine. A dropped call future cancels it: nothing stays
    /// reserved.
    m: Driven,
    /// A pooled job: every member's target, and the pool's choice before
    /// each admission (see `crate::pool`).
    pooled: Option<Pooled>,
    /// The scope the job queues in (a pooled job's first member's).
    target: Target,
    job: Job,
    /// The request as the caller made it; each attempt sends a copy.
    parts: http::request::Parts,
    bytes: Bytes,
    inner: Arc<Inner>,
    /// A waiter that is not the head asks out of turn at its admission
    /// deadline: the queue never holds a job past it.
    admit_by: Option<Instant>,
    /// A decided retry delay is still running: the machine answers `Wait`
    /// without asking for admission, so the job does not queue for it.
    retry_delay: bool,
    /// No send made yet: the first uses the service the caller's
    /// `poll_ready` made ready; a later one waits for its clone to be.
    first_send: bool,
}

impl Flight {
    /// Sets the job up: its pool (if any), its first target, its machine
    /// and its place in the queue.
    async fn start(
        inner: Arc<Inner>,
        parts: http::request::Parts,
        bytes: Bytes,
        job: Job,
    ) -> Flight {
        let pooled = match &inner.pool {
            Some(pool) => Pooled::start(pool.clone(), inner.state.as_ref(), &job.model).await,
            None => None,
        };
        let target = match &pooled {
            Some(p) => p.first_target(),
            None => inner.state.target(&job.key, &job.model).await,
        };
        let spec = JobSpec {
            target,
            arrived: job.arrived,
            deadline: job.deadline,
            input_estimate: job.input_estimate,
            body_bytes: job.body_bytes,
            max_tokens: job.max_tokens,
            streamed: job.streamed,
        };
        let cancel = match parts.extensions.get::<Cancel>() {
            Some(c) if c.claim() => c.clone(),
            // One signal for several jobs: this job publishes its sends
            // on a view of its own, cancelled with it.
            Some(c) => c.child(),
            None => Cancel::new(),
        };
        let m = Driven::new(
            JobMachine::new(spec, &inner.config.policy),
            inner.state.clone(),
            inner.clock.clone(),
            cancel.clone(),
        );
        let rng = fastrand::Rng::with_seed(inner.call_seed());
        let place = inner.queues.place(job.arrived);
        let workload = crate::Workload::resolve(&parts.extensions, &job.key, inner.queues.levels());
        let admit_by = m.job.admit_deadline();
        Flight {
            cancel,
            queued: None,
            place,
            workload,
            last: None,
            records: Vec::new(),
            rng,
            m,
            pooled,
            target,
            job,
            parts,
            bytes,
            inner,
            admit_by,
            retry_delay: false,
            first_send: true,
        }
    }

    /// The job's error for an end the machine decided: its attempts and
    /// the evidence of its last answer go with it.
    fn end(&mut self, end: Ended) -> Error {
        ended(
            &self.job,
            end,
            std::mem::take(&mut self.records),
            self.last.take(),
        )
    }

    /// Waits for the job's turn: only the head of the scope's queue asks
    /// for admission. Returns the signal an admission wait listens to (none
    /// during a retry's delay, or once the caller left); a job turned away
    /// as it joins the queue ends here.
    async fn wait_turn(&mut self) -> Result<Option<EventListener>, Error> {
        // A caller gone between sends: the machine ends the job, and the
        // next step says so — never a wait for a turn it will not take (a
        // cancelled wait resolves at once: waiting again would spin
        // without yielding).
        let left = self.cancel.is_cancelled();
        if left {
            caller_left(&self.inner, &mut self.m).await;
        }
        if std::mem::take(&mut self.retry_delay) || left {
            return Ok(None);
        }
        if self.queued.is_none() {
            self.join_queue().await?;
        }
        Ok(self.wait_in_queue().await)
    }

    /// Joins the scope's queue, unless the job is turned away first: shed
    /// (load shedding is the machine's to decide; only a job with no
    /// deadline is turned away), or, behind others with a deadline,
    /// predicted to miss it at the pace the jobs ahead will go. A job that
    /// cannot be sent in time is answered now, not at its deadline.
    async fn join_queue(&mut self) -> Result<(), Error> {
        let inner = self.inner.clone();
        let t = inner
            .queues
            .join(self.target.scope, self.place, &self.workload);
        let ahead = t.ahead();
        if self.m.job.sheds(ahead, inner.config.max_waiting) {
            drop(t);
            let now = inner.clock.now();
            let rpm = inner
                .state
                .snapshot(self.target.scope, now)
                .await
                .and_then(|s| s.limits.requests);
            if let Step::End(end) = self.m.job.shed(ahead, rpm, &inner.config.policy, now) {
                return Err(self.end(end));
            }
            return Ok(());
        }
        // A job with no deadline is not deferred on this prediction, which
        // assumes every job ahead costs what this one does: it waits for
        // its turn and asks out of turn at the end of its in-line limit.
        if ahead > 0 && self.admit_by.is_some() {
            let now = inner.clock.now();
            let req = self.m.job.admit_request();
            let ahead = u32::try_from(ahead).unwrap_or(u32::MAX);
            if let Some(answer) = inner.state.predict(req, ahead, now).await {
                if let Some(Step::End(end)) = self.m.job.predicted(answer, now) {
                    drop(t);
                    return Err(self.end(end));
                }
            }
        }
        self.queued = Some(t);
        Ok(())
    }

    /// Waits in the queue until the job's turn (see [`turn`]). Asked out of
    /// turn by its deadline, or with none by the end of its in-line limit:
    /// the machine then sends it (there is room) or ends it (deferred). A
    /// caller gone while it waited is told to the machine now, so the next
    /// step ends the job.
    async fn wait_in_queue(&mut self) -> Option<EventListener> {
        let ticket = self.queued.as_ref()?;
        let by = self.admit_by.or_else(|| self.m.job.inline_by());
        let clock = self.inner.clock.as_ref();
        match or_cancelled(&self.cancel, turn(ticket, clock, by)).await {
            Some(signal) => Some(signal),
            None => {
                caller_left(&self.inner, &mut self.m).await;
                None
            }
        }
    }

    /// The machine's next step (a pooled job's, through the pool, which
    /// chooses the member first), with the store's answer given to it when
    /// the step is to ask for admission.
    async fn next_step(&mut self, now: Now) -> Step {
        let inner = self.inner.clone();
        let policy = &inner.config.policy;
        match self.pooled.as_mut() {
            None => match self.m.job.next(now) {
                Step::Admit(req) => {
                    let answer = match self.yield_to_others(now).await {
                        // A wait the machine reads as any admission wait:
                        // its deadline still rules.
                        Some(until) => Admission::Wait {
                            until,
                            reason: WaitReason::Queue,
                        },
                        None => inner.state.admit(req, now).await,
                    };
                    self.m.job.admission(answer, policy, now)
                }
                other => other,
            },
            // Boxed: the pool's step is a large future, and a job
            // without a pool should not carry its size.
            Some(p) => {
                match Box::pin(p.next(&mut self.m.job, policy, inner.state.as_ref(), now)).await {
                    Step::Admit(req) => {
                        let answer = inner.state.admit(req, now).await;
                        p.admission(&mut self.m.job, answer, policy, now)
                    }
                    other => other,
                }
            }
        }
    }

    /// Priorities across processes: publishes this process's demand on
    /// the scope when due (its highest waiting level; see
    /// [`Store::demand`](ratewise_core::admit::Store::demand)), and
    /// answers when to look again if this job, at the head, leaves the
    /// tokens to a higher level waiting in another process (`None`: ask
    /// for admission now). A store no other process shares answers at
    /// once that nothing is foreign.
    async fn yield_to_others(&self, now: Now) -> Option<Instant> {
        let ticket = self.queued.as_ref()?;
        self.publish_demand(now).await;
        ticket
            .yields(now.instant)
            .then(|| now.instant + crate::queue::YIELD_RECHECK)
    }

    /// Publishes this process's demand on the job's scope if it is due
    /// (changed, or not said for a while).
    async fn publish_demand(&self, now: Now) {
        let inner = &self.inner;
        let scope = self.target.scope;
        if let Some(top) = inner.queues.demand_due(scope, now.instant) {
            let foreign = inner.state.demand(scope, top, now).await;
            inner
                .queues
                .demand_published(scope, top, foreign, now.instant);
        }
    }

    /// Acts on the machine's step: the attempt to send (the job leaves the
    /// queue; the next head asks in turn), `None` after a wait, or the
    /// job's end.
    async fn act(
        &mut self,
        step: Step,
        signal: Option<EventListener>,
        now: Now,
    ) -> Result<Option<u32>, Error> {
        let inner = self.inner.clone();
        let clock = &inner.clock;
        match step {
            Step::Send { attempt } => {
                if let Some(ticket) = self.queued.take() {
                    self.charge(ticket, now).await;
                }
                Ok(Some(attempt))
            }
            Step::Wait { until, reason } => {
                match reason {
                    // A retry's delay: out of the queue until it passes.
                    WaitFor::Retry => {
                        self.queued = None;
                        or_cancelled(&self.cancel, clock.sleep_until(until)).await;
                    }
                    WaitFor::Admission(why) => {
                        if self.queued.is_some() {
                            inner.queues.head_waits(self.target.scope, why, until);
                        }
                        tracing::debug!(job_id = %self.job.id,
                            wait_ms = (until - now.instant).as_millis() as u64,
                            reason = ?why, "admission wait");
                        // Ask again at the computed instant, or as soon as
                        // a settle, release or resume returns capacity (the
                        // signal was listened to before asking: none lost).
                        if let Some(signal) = signal {
                            let woken = futures::future::select(clock.sleep_until(until), signal);
                            or_cancelled(&self.cancel, woken).await;
                        }
                    }
                }
                Ok(None)
            }
            Step::End(end) => {
                // Leaves the queue and hands the turn on.
                drop(self.queued.take());
                Err(self.end(end))
            }
            // Only while a send, a body or an update is in progress, which
            // this driver always finishes before asking again; `admission`
            // answered the only `Admit`.
            Step::Pending | Step::Admit(_) => {
                if let Some(told) = to_store(
                    &inner,
                    self.m.job.withdraw("job machine pending with no send"),
                ) {
                    told.await;
                }
                drop(self.queued.take());
                match self.m.job.next(clock.now()) {
                    Step::End(end) => Err(self.end(end)),
                    _ => unreachable!("a withdrawn job has ended"),
                }
            }
        }
    }

    /// Leaves the queue admitted: the discipline charges the job's flow
    /// its reservation's cost (its dominant share of the scope's limits,
    /// read again from the store every few admissions), follows the
    /// reservation to its settlement, and hands the turn on.
    async fn charge(&self, ticket: crate::queue::Ticket, now: Now) {
        let inner = &self.inner;
        let scope = self.target.scope;
        if inner.queues.limits_due(scope) {
            if let Some(s) = inner.state.snapshot(scope, now).await {
                inner.queues.set_limits(scope, s.limits);
            }
        }
        let (id, amounts) = match self.m.job.reservation() {
            Some((id, amounts)) => (Some(id), amounts),
            None => (
                None,
                ratewise_core::admit::Amounts {
                    requests: 1,
                    input: 0,
                    output: 0,
                },
            ),
        };
        ticket.admitted(amounts, id, now.instant);
        // The job left the queue: what waits here may have changed (the
        // last interactive job admitted), and the others are told now
        // rather than when its demand lapses.
        self.publish_demand(now).await;
    }

    /// The last checks before a send, in order. The caller's cancellation:
    /// a job whose caller left sends nothing more, and journals no attempt
    /// it will not make (the cancellation is decided against the send
    /// itself at its hand-over: see [`send`](Self::send)). Then the
    /// journal's record of the attempt, written before it is sent: a send
    /// the journal could not record is not made. Returns the pool member
    /// the attempt goes to (chosen by now).
    async fn before_send(&mut self, attempt: u32) -> Result<Option<String>, Error> {
        let inner = self.inner.clone();
        let clock = &inner.clock;
        if self.cancel.is_cancelled() {
            caller_left(&inner, &mut self.m).await;
            if let Step::End(end) = self.m.job.next(clock.now()) {
                drop(self.queued.take());
                return Err(self.end(end));
            }
        }
        let member = self.pooled.as_ref().map(|p| p.label_of(attempt));
        if let Some(journal) = &inner.journal {
            if let Err(e) = journal
                .attempt_started_on(&self.job.id, attempt, member.as_deref(), clock.now().wall)
                .await
            {
                tracing::error!(job_id = %self.job.id, attempt, error = %e,
                    "the journal could not record the attempt: not sent");
                if let Some(told) = to_store(
                    &inner,
                    self.m
                        .job
                        .withdraw("the journal could not record the attempt: nothing sent"),
                ) {
                    told.await;
                }
                drop(self.queued.take());
                if let Step::End(end) = self.m.job.next(clock.now()) {
                    return Err(self.end(end).with_source(e));
                }
            }
        }
        Ok(member)
    }

    /// Sends the attempt: its request made (with its [`WireMark`]), the
    /// inner service made ready, the request handed over — decided against
    /// the caller's cancellation in one step — and the call cut at the
    /// policy's send timeout. An error says whether the service was
    /// called: one that never became ready (or a request the route could
    /// not make) sent nothing. A cancellation that finds nothing on the
    /// wire (before the hand-over, or while the transport waits for a
    /// connection) withholds the send at once ([`Sent::Withheld`]); one
    /// that finds it may have reached the provider lets it finish.
    async fn send<S, B, R>(&mut self, svc: &mut S, attempt: u32) -> Sent<R>
    where
        S: Service<Request<B>, Response = Response<R>>,
        S::Error: Into<BoxError>,
        B: ReplayBody,
    {
        let mut request = match self.request::<B>(attempt) {
            Ok(r) => r,
            Err(e) => return Sent::Done(Err((e, false))),
        };
        if !std::mem::take(&mut self.first_send) {
            if let Err(e) = svc.ready().await {
                return Sent::Done(Err((e.into(), false)));
            }
        }
        request
            .extensions_mut()
            .insert(WireMark::new(self.cancel.clone(), attempt));
        if !self.cancel.hand_over(attempt) {
            return Sent::Withheld;
        }
        self.m.job.sending();
        let call = svc.call(request);
        let clock = self.inner.clock.clone();
        let answer = within(call, self.inner.config.policy.send_timeout, clock.as_ref());
        let mut answer = std::pin::pin!(answer);
        let cancelled = std::pin::pin!(self.cancel.cancelled());
        match futures::future::select(answer.as_mut(), cancelled).await {
            futures::future::Either::Left((r, _)) => Sent::Done(r),
            // Given now (a parent's is this job's too): decided against
            // the transport's report of the wire.
            futures::future::Either::Right(_) => match self.cancel.cancel() {
                Cancelled::NothingSent => Sent::Withheld,
                Cancelled::AfterSend => Sent::Done(answer.await),
            },
        }
    }

    /// The caller's cancellation came before the attempt's request reached
    /// the wire — before its hand-over, or while the transport waited for
    /// a connection: nothing of it was sent, and nothing will be (the
    /// transport's [`WireMark::reached`] answers `false`). The machine
    /// gives its reservation back and ends the job `give_up` `cancelled`;
    /// the attempt, journaled as started, is journaled as ended, never
    /// sent — a restart does not read it as an unknown outcome.
    async fn withheld(&mut self, attempt: u32, member: Option<String>) -> Error {
        let inner = self.inner.clone();
        let clock = &inner.clock;
        self.m.tell_wire(attempt);
        caller_left(&inner, &mut self.m).await;
        drop(self.queued.take());
        let now = clock.now();
        let end = match self.m.job.next(now) {
            Step::End(end) => end,
            _ => {
                // Not ended by the cancellation: a send the machine
                // counts as out, which the view says never left.
                if let Some(told) = to_store(
                    &inner,
                    self.m
                        .job
                        .withdraw("withheld before the wire: nothing sent"),
                ) {
                    told.await;
                }
                match self.m.job.next(clock.now()) {
                    Step::End(end) => end,
                    _ => unreachable!("a withdrawn job has ended"),
                }
            }
        };
        let provider = self.job.provider.unwrap_or(Provider::Generic);
        let mut c = classify_transport(provider, TransportFailure::ConnectRefused);
        c.transport = None;
        c.evidence.notes = vec!["cancelled before it reached the wire: never sent".into()];
        record(
            &inner,
            &self.job,
            (attempt, member),
            &c,
            &end.decision,
            now,
            &mut self.records,
        )
        .await;
        self.end(end)
    }

    /// The request of one attempt: a copy of the caller's, rewritten for a
    /// pooled attempt's member (URL, credentials, model; the answer is then
    /// read by its member's rules) and stamped with the job's headers when
    /// the layer adds them. An error: the route could not make the request.
    fn request<B: ReplayBody>(&mut self, attempt: u32) -> Result<Request<B>, BoxError> {
        let (mut parts, mut bytes) = (self.parts.clone(), self.bytes.clone());
        if let Some(p) = &self.pooled {
            self.job.provider = Some(p.provider());
            p.prepare(&mut parts, &mut bytes)?;
        }
        let mut request = Request::from_parts(parts, B::replay(bytes));
        if self.inner.config.job_headers {
            stamp(request.headers_mut(), &self.job.id, attempt);
        }
        Ok(request)
    }

    /// A caller gone while its send was out (`called`): the answer is still
    /// read and applied; the machine makes no retry after it.
    async fn left_while_out(&mut self, called: bool) {
        if called && self.cancel.is_cancelled() {
            caller_left(&self.inner, &mut self.m).await;
        }
    }

    /// A 2xx answer, handed over metered (see [`success`]).
    async fn succeeded<R>(
        &mut self,
        attempt: u32,
        member: Option<String>,
        resp: Response<R>,
        now: Now,
    ) -> Result<Response<MeteredBody<R>>, (Answer, Decision)>
    where
        R: Body<Data = Bytes> + Send + Unpin + 'static,
    {
        success(
            &self.inner,
            &self.job,
            &mut self.m,
            &mut self.rng,
            (attempt, member, self.pooled.as_mut()),
            resp,
            now,
            &mut self.records,
        )
        .await
    }

    /// An error answer: its body read up to the bound, classified (see
    /// [`classify_error_answer`]), and told to the machine and the store.
    async fn error_answer<R>(&mut self, resp: Response<R>, now: Now) -> (Answer, Decision)
    where
        R: Body<Data = Bytes> + Send + Unpin + 'static,
    {
        let max = self.inner.config.max_error_body;
        let (rparts, rbody) = resp.into_parts();
        let body = crate::body::replay::read_prefix(rbody, max).await;
        let c = classify_error_answer(self.job.provider, &rparts, &body, max, now);
        let policy = &self.inner.config.policy;
        let update = self.m.job.answered(policy, &c, None, &mut self.rng, now);
        let d = apply(&self.inner, &mut self.m, update, now).await;
        let answer = Answer {
            classification: c,
            response: Some((rparts.status, rparts.headers, body)),
            source: None,
        };
        (answer, d)
    }

    /// A send that brought no answer: classified by how it failed and
    /// where its request got to (see [`failure_of`]), and told to the
    /// machine and the store, with whether the request may have reached
    /// the provider.
    async fn transport_failed(
        &mut self,
        e: BoxError,
        called: bool,
        wire: Sending,
        now: Now,
    ) -> (Answer, Decision) {
        let failure = failure_of(&*e, called, wire);
        let mut c = classify_transport(self.job.provider.unwrap_or(Provider::Generic), failure);
        if wire == Sending::Connecting {
            c.evidence
                .notes
                .push("it was still waiting for a connection: never sent".into());
        }
        let policy = &self.inner.config.policy;
        let maybe_sent = called && failure.maybe_sent();
        let update = self
            .m
            .job
            .failed(policy, &c, maybe_sent, &mut self.rng, now);
        let d = apply(&self.inner, &mut self.m, update, now).await;
        let answer = Answer {
            classification: c,
            response: None,
            source: Some(e),
        };
        (answer, d)
    }

    /// After an answer that did not end the call: the pool says where the
    /// next attempt goes (this member after its delay, another now, or —
    /// a stopped member — the pool's next choice); a retry's delay is
    /// noted, so the job does not queue through it; the attempt is
    /// recorded; the answer is kept as the evidence of a job that then
    /// ends.
    async fn answered(
        &mut self,
        attempt: u32,
        member: Option<String>,
        answer: Answer,
        d: Decision,
        now: Now,
    ) {
        if let Some(p) = self.pooled.as_mut() {
            let policy = &self.inner.config.policy;
            let moved = p.answered(&mut self.m.job, &answer.classification, &d, policy, now);
            tracing::debug!(job_id = %self.job.id, attempt, ?moved, "pool");
        }
        // The machine applied the answer: the send is over (a success's
        // stream that failed before its commit point comes back here too).
        self.cancel.end_send(attempt);
        self.retry_delay = delays_retry(&d);
        record(
            &self.inner,
            &self.job,
            (attempt, member),
            &answer.classification,
            &d,
            now,
            &mut self.records,
        )
        .await;
        self.last = Some(answer);
    }
}

/// Awaits `call`, cut at `limit` when there is one: the request may then
/// have reached the provider, so its outcome is unknown ([`SendTimedOut`],
/// as called). Any error here is one of a called service.
async fn within<F, T, E>(
    call: F,
    limit: Option<std::time::Duration>,
    clock: &dyn crate::clock::Clock,
) -> Result<T, (BoxError, bool)>
where
    F: std::future::Future<Output = Result<T, E>>,
    E: Into<BoxError>,
{
    match limit {
        None => call.await.map_err(|e| (e.into(), true)),
        Some(limit) => {
            let late = clock.sleep_until(clock.now().instant + limit);
            match futures::future::select(std::pin::pin!(call), late).await {
                futures::future::Either::Left((r, _)) => r.map_err(|e| (e.into(), true)),
                futures::future::Either::Right(_) => {
                    Err((Box::new(SendTimedOut(limit)) as BoxError, true))
                }
            }
        }
    }
}

/// Stamps an attempt's request with the job's id (when it is a valid
/// header value) and the attempt's number.
fn stamp(h: &mut http::HeaderMap, job_id: &str, attempt: u32) {
    if let Ok(v) = HeaderValue::from_str(job_id) {
        h.insert(JOB_HEADER, v);
    }
    h.insert(ATTEMPT_HEADER, HeaderValue::from(attempt));
}

/// Classifies an error answer from the first `max` bytes of its body. A
/// compressed body is classified from a decoded copy (the answer keeps the
/// bytes as they were sent); the provider is the configured one or, with
/// none, the one the answer shows.
fn classify_error_answer(
    configured: Option<Provider>,
    parts: &http::response::Parts,
    body: &Bytes,
    max: usize,
    now: Now,
) -> Classification {
    let decoded = crate::body::decode::decoded_prefix(Coding::of(&parts.headers), body, max);
    let view = decoded.as_deref().unwrap_or(body);
    let provider = provider_of(configured, &parts.headers, view);
    classify_response(
        provider,
        &ResponseView {
            status: parts.status,
            headers: &parts.headers,
            body: view,
        },
        now.wall,
    )
}

/// How a send that brought no answer failed: cut at the send timeout, a
/// transport error of a called service, or — never called — refused
/// before anything was sent. A request its transport still held waiting
/// for a connection (`wire`: [`Sending::Connecting`]) never left, however
/// the failure reads.
fn failure_of(
    e: &(dyn std::error::Error + Send + Sync + 'static),
    called: bool,
    wire: Sending,
) -> TransportFailure {
    let failure = if e.is::<SendTimedOut>() {
        TransportFailure::TimeoutAfterSend
    } else if called {
        transport_failure(e)
    } else {
        TransportFailure::ConnectRefused
    };
    if wire == Sending::Connecting && failure.maybe_sent() {
        TransportFailure::ConnectRefused
    } else {
        failure
    }
}

/// What one send came to.
enum Sent<R> {
    /// The service's answer, or its failure with whether it was called.
    Done(Result<Response<R>, (BoxError, bool)>),
    /// The caller's cancellation came before the request reached the wire:
    /// nothing of it was sent.
    Withheld,
}

/// A decision to retry after a delay: the job waits it out of the queue.
fn delays_retry(d: &Decision) -> bool {
    matches!(d.action, Action::Retry { delay } if !delay.is_zero())
}

/// Waits for `ticket`'s turn: until it is the head of its queue, or, at
/// the latest, until `ask_by` (its admission deadline, or for a job with
/// no deadline the end of its in-line limit). Returns the listener for the job's next
/// signal, taken before its turn was checked so that a signal raised while
/// it asks is not lost.
async fn turn(
    ticket: &crate::queue::Ticket,
    clock: &dyn crate::clock::Clock,
    ask_by: Option<Instant>,
) -> event_listener::EventListener {
    loop {
        let signal = ticket.listen();
        if ticket.is_head() {
            return signal;
        }
        match ask_by {
            Some(at) if clock.now().instant >= at => return signal,
            Some(at) => {
                futures::future::select(clock.sleep_until(at), signal).await;
            }
            None => signal.await,
        }
    }
}

/// The job's machine while the call future drives it: a future dropped
/// at any await (a caller's timeout, a disconnect) cancels it, which
/// releases a reservation whose request reached nothing (not handed to
/// the transport, or waiting for a connection — never sent after) and
/// charges one that may have reached the provider at its estimate.
/// Nothing stays outstanding.
struct Driven {
    job: JobMachine,
    state: Arc<dyn crate::State>,
    clock: Arc<dyn crate::clock::Clock>,
    /// The published view of the job's send (see [`Cancel`]).
    view: Cancel,
}

impl Driven {
    fn new(
        job: JobMachine,
        state: Arc<dyn crate::State>,
        clock: Arc<dyn crate::clock::Clock>,
        view: Cancel,
    ) -> Self {
        Driven {
            job,
            state,
            clock,
            view,
        }
    }

    /// Tells the machine where `attempt`'s request got to, as its
    /// transport reported it through the attempt's [`WireMark`]: waiting
    /// for a connection (closed now: it never goes on the wire after,
    /// decided against the transport's report in one step), or on the
    /// wire. Returns what was found.
    fn tell_wire(&mut self, attempt: u32) -> Sending {
        let seen = self.view.stop_waiting(attempt);
        self.tell(seen);
        seen
    }

    fn tell(&mut self, seen: Sending) {
        match (self.job.send_state(), seen) {
            (Sending::HandedOver, Sending::Connecting) => self.job.connecting(),
            (Sending::HandedOver | Sending::Connecting, Sending::OnWire) => self.job.on_wire(),
            _ => {}
        }
    }
}

impl Driven {
    /// Hands the machine, delivering a success, to the body that meters
    /// it: the body tells it how it ended. What is left here is a fresh
    /// machine that holds nothing, so this driver's drop gives nothing
    /// back twice.
    fn hand_over(&mut self, policy: &ratewise_core::decide::Policy) -> JobMachine {
        let fresh = JobMachine::new(*self.job.spec(), policy);
        std::mem::replace(&mut self.job, fresh)
    }
}

impl Drop for Driven {
    fn drop(&mut self) {
        if self.job.send_state() == Sending::HandedOver {
            // A send out: it stops where it stands (one still waiting for
            // a connection never goes on the wire).
            let seen = self.view.end_send(self.job.attempts());
            self.tell(seen);
        }
        if let Some(update) = self.job.cancel() {
            tracing::debug!("call dropped with a reservation: the job is cancelled");
            self.state.update_detached(update, self.clock.now());
        }
    }
}

/// Tells the machine its caller left, and the store what it gives back.
async fn caller_left(inner: &Inner, m: &mut Driven) {
    if let Some(told) = to_store(inner, m.job.caller_left()) {
        told.await;
    }
}

/// The store's answer to an update of the machine's, if it made one. Not
/// an `async fn`: the update (about a kilobyte) moves into the store's
/// call here, so no future awaiting the answer carries it — each of a
/// job's steps is a future moved into the job's own at every step.
fn to_store(
    inner: &Inner,
    update: Option<ratewise_core::admit::Update>,
) -> Option<ratewise_core::admit::StoreFuture<'_, Option<ratewise_core::admit::Applied>>> {
    update.map(|u| inner.state.update(u, inner.clock.now()))
}

/// Runs `f` to its end, unless the caller's cancellation comes first
/// (`None`).
async fn or_cancelled<F: std::future::Future>(cancel: &Cancel, f: F) -> Option<F::Output> {
    match futures::future::select(std::pin::pin!(f), std::pin::pin!(cancel.cancelled())).await {
        futures::future::Either::Left((out, _)) => Some(out),
        futures::future::Either::Right(_) => None,
    }
}

/// Hands an answer's update to the store (evidence and the reservation's
/// end in one step) and the store's amended decision back to the machine.
// Not an `async fn`, for the reason `to_store` gives: the update moves
// into the store's call before the future is made.
fn apply<'a>(
    inner: &'a Inner,
    m: &'a mut Driven,
    update: ratewise_core::admit::Update,
    now: Now,
) -> impl std::future::Future<Output = Decision> + Send + 'a {
    let told = inner.state.update(update, now);
    async move {
        let amended = told.await;
        m.job.applied(amended, now)
    }
}

/// The error a job that ended carries: its decision, its attempts and the
/// evidence of its last answer.
fn ended(job: &Job, end: Ended, records: Vec<AttemptRecord>, last: Option<Answer>) -> Error {
    if end.at_admission {
        trace_end(
            &job.id,
            end.attempts,
            &end.decision,
            end.decision.action.kind().as_str(),
        );
    }
    let mut err = Error::decided(job.id.clone(), end.decision).with_attempts(records);
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

fn provider_of(configured: Option<Provider>, headers: &http::HeaderMap, body: &[u8]) -> Provider {
    configured.unwrap_or_else(|| detect_provider(headers, body))
}

/// Records one attempt: the allow-listed record, its trace, its journal
/// end.
async fn record(
    inner: &Inner,
    job: &Job,
    (attempt, member): (u32, Option<String>),
    c: &Classification,
    d: &Decision,
    now: Now,
    records: &mut Vec<AttemptRecord>,
) {
    let record = AttemptRecord::new(now.wall, Some(&job.id), attempt, c, d).with_member(member);
    trace_attempt(&record);
    journal_end(inner, &record).await;
    records.push(record);
}

async fn journal_end(inner: &Inner, record: &AttemptRecord) {
    if let Some(journal) = &inner.journal {
        if let Err(e) = journal.attempt_ended(record).await {
            // The attempt reads as started and never ended: an unknown
            // outcome after a restart, the safe side.
            tracing::warn!(job_id = record.job_id.as_deref().unwrap_or(""),
                attempt = record.attempt, error = %e, "the journal could not record an attempt's end");
        }
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
                member = r.member.as_deref(),
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

/// A 2xx answer: the machine is told, the attempt recorded, and the body
/// handed over metered (the metered body settles the reservation when it
/// ends). Under the first-content commit point a stream is read up to its
/// first content event first; an error before it is decided like an error
/// answer and comes back as `Err` with its decision.
#[allow(clippy::too_many_arguments)]
async fn success<R>(
    inner: &Arc<Inner>,
    job: &Job,
    m: &mut Driven,
    rng: &mut fastrand::Rng,
    (attempt, member, pooled): (u32, Option<String>, Option<&mut Pooled>),
    resp: Response<R>,
    now: Now,
    records: &mut Vec<AttemptRecord>,
) -> Result<Response<MeteredBody<R>>, (Answer, Decision)>
where
    R: Body<Data = Bytes> + Send + Unpin + 'static,
{
    let cfg = &inner.config;
    let policy = &cfg.policy;
    let provider = provider_of(job.provider, resp.headers(), b"");
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
    let side;
    let (rparts, body, held, ended) = if !stream {
        let kind = MeterKind::Json {
            buf: bytes::BytesMut::new(),
            limit: cfg.max_metered_body,
            overflow: false,
        };
        side = Side::new(kind, coding, cfg.max_decoded_body);
        let (rparts, body) = resp.into_parts();
        (rparts, body, VecDeque::new(), None)
    } else {
        let mut tracker_config = TrackerConfig::default();
        tracker_config.commit_point = cfg.commit_point;
        let tracker = Box::new(StreamTracker::new(provider, tracker_config));
        let stream_side = Side::new(MeterKind::Stream(tracker), coding, cfg.max_decoded_body);
        let (rparts, body) = resp.into_parts();
        if cfg.commit_point != CommitPoint::FirstContent {
            side = stream_side;
            (rparts, body, VecDeque::new(), None)
        } else {
            match hold_until_commit(body, stream_side, cfg.max_held_bytes).await {
                Held::Commit {
                    body,
                    side: s,
                    held,
                    ended,
                } => {
                    side = s;
                    (rparts, body, held, ended)
                }
                Held::Replay { outcome } => {
                    let (cause, error_type, code) = match &outcome {
                        StreamOutcome::MidStream { cause, error, .. } => {
                            (*cause, error.error_type.clone(), error.code.clone())
                        }
                        _ => (Cause::Unknown, None, None),
                    };
                    let mut ic = classify_in_band(provider, cause, error_type, code);
                    ic.evidence.request_id = c.evidence.request_id.clone();
                    ic.evidence
                        .notes
                        .push("before the commit point: nothing reached the caller".into());
                    let usage = outcome.usage();
                    let update = m.job.answered(policy, &ic, usage.as_ref(), rng, now);
                    let d = apply(inner, m, update, now).await;
                    let answer = Answer {
                        classification: ic,
                        response: Some((rparts.status, rparts.headers, Bytes::new())),
                        source: None,
                    };
                    return Err((answer, d));
                }
            }
        }
    };
    let update = m.job.answered(policy, &c, None, rng, now);
    let d = apply(inner, m, update, now).await;
    if let Some(p) = pooled {
        p.answered(&mut m.job, &c, &d, policy, now);
    }
    // The metered body owns the job's machine from here; until then
    // (while a stream is held back to its commit point) this driver does.
    // A stream's record is journaled as started here and again when its
    // body ends: only then is it known whether it completed.
    let rec = AttemptRecord::new(now.wall, Some(&job.id), attempt, &c, &d).with_member(member);
    trace_attempt(&rec);
    let stream_journal = match &inner.journal {
        Some(journal) => {
            let write = if stream {
                journal.stream_started(&rec).await
            } else {
                journal.attempt_ended(&rec).await
            };
            if let Err(e) = write {
                tracing::warn!(job_id = %job.id, attempt, error = %e,
                    "the journal could not record an attempt's end");
            }
            stream.then(|| (journal.clone(), rec.clone()))
        }
        None => None,
    };
    records.push(rec);
    let ctx = MeterCtx {
        state: inner.state.clone(),
        clock: inner.clock.clone(),
        job: m.hand_over(policy),
        job_id: job.id.clone(),
        attempt,
        max_tokens: job.max_tokens,
        stream_journal,
    };
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

#[cfg(test)]
mod tests {
    use super::*;
    use ratewise_core::Cause;
    use std::io::Write;

    fn now() -> Now {
        Now {
            instant: Instant::ZERO,
            wall: std::time::SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(1_700_000_000),
        }
    }

    fn parts(status: u16, headers: &[(&str, &str)]) -> http::response::Parts {
        let mut b = Response::builder().status(status);
        for (k, v) in headers {
            b = b.header(*k, *v);
        }
        b.body(()).unwrap().into_parts().0
    }

    #[test]
    fn an_attempt_is_stamped_with_its_job_and_number() {
        let mut h = http::HeaderMap::new();
        stamp(&mut h, "job-7", 3);
        assert_eq!(h[JOB_HEADER], "job-7");
        assert_eq!(h[ATTEMPT_HEADER], "3");
        // A job id no header can carry is left out; the number still goes.
        let mut h = http::HeaderMap::new();
        stamp(&mut h, "bad\nid", 1);
        assert!(h.get(JOB_HEADER).is_none());
        assert_eq!(h[ATTEMPT_HEADER], "1");
    }

    #[test]
    fn a_send_without_an_answer_is_told_by_how_it_failed() {
        let timed_out: BoxError = Box::new(SendTimedOut(std::time::Duration::from_secs(5)));
        assert_eq!(
            failure_of(&*timed_out, true, Sending::HandedOver),
            TransportFailure::TimeoutAfterSend
        );
        assert_eq!(
            failure_of(&*timed_out, true, Sending::OnWire),
            TransportFailure::TimeoutAfterSend
        );
        // A service never called sent nothing, whatever its error says.
        let other: BoxError = "not ready".into();
        assert_eq!(
            failure_of(&*other, false, Sending::NotSent),
            TransportFailure::ConnectRefused
        );
        // Nor did a request its transport held waiting for a connection.
        assert_eq!(
            failure_of(&*timed_out, true, Sending::Connecting),
            TransportFailure::ConnectRefused
        );
    }

    #[test]
    fn a_compressed_error_answer_is_classified_from_its_decoded_body() {
        let json = br#"{"error":{"type":"insufficient_quota","code":"insufficient_quota","message":"You exceeded your current quota"}}"#;
        let plain = classify_error_answer(
            Some(Provider::Openai),
            &parts(429, &[("content-type", "application/json")]),
            &Bytes::from_static(json),
            64 * 1024,
            now(),
        );
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        gz.write_all(json).unwrap();
        let zipped = Bytes::from(gz.finish().unwrap());
        let decoded = classify_error_answer(
            Some(Provider::Openai),
            &parts(
                429,
                &[
                    ("content-type", "application/json"),
                    ("content-encoding", "gzip"),
                ],
            ),
            &zipped,
            64 * 1024,
            now(),
        );
        assert_eq!(
            decoded.evidence.error_type.as_deref(),
            Some("insufficient_quota")
        );
        assert_eq!(decoded.cause, plain.cause);
        assert_ne!(decoded.cause, Cause::Unknown);
    }
}
