//! [`run_batches`]: recover, create, poll, collect.

use super::api::{Api, ApiError, Phase, Remote};
use super::plan::{Planned, Planner};
use super::recover::{self, Found};
use super::results::{self, Item};
use super::{BatchEnding, BatchError, BatchReport, BatchSettings, BatchStatus};
use crate::input::Shape;
use crate::queue::{run_budget, ANY_TIME};
use crate::store::{
    batch_store_error, BatchEnd, BatchIntent, BatchRow, End, Pending, State, StopCause, StopRecord,
    Store, StoreError,
};
use crate::Client;
use ratewise_core::admit::spend_budget::{SpendBudget, SpendCheck};
use ratewise_core::classify::{classify_response, ResponseView};
use ratewise_core::decide::{decide, JobState, Policy};
use ratewise_core::{ActionKind, Instant, Now, Provider};
use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, SystemTime};
use tokio::sync::watch;

/// Pending jobs read from the store at a time while planning.
const PAGE: usize = 1000;
/// Most body bytes read from the store at a time while planning.
const PAGE_BYTES: usize = 64 * 1024 * 1024;
/// Result ends written per store write.
const RESULTS_GROUP: usize = 512;
/// The longest wait between two create attempts.
const MAX_CREATE_WAIT: Duration = Duration::from_secs(120);

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

/// A nonce no other intent has: random (std's per-process random hasher
/// keys) and the time.
fn new_nonce() -> String {
    use std::hash::{BuildHasher, Hasher};
    let a = std::collections::hash_map::RandomState::new();
    let mut h = a.build_hasher();
    h.write_i64(now_ms());
    h.write_u32(std::process::id());
    let x = h.finish();
    let y = std::collections::hash_map::RandomState::new().hash_one(x);
    format!("rw_{x:016x}{y:016x}")
}

fn provider(shape: Shape) -> Provider {
    match shape {
        Shape::OpenAi => Provider::Openai,
        Shape::Anthropic => Provider::Anthropic,
    }
}

/// Runs a store call on a blocking thread.
async fn on_store<R: Send + 'static>(
    store: &Arc<dyn Store>,
    f: impl FnOnce(&dyn Store) -> Result<R, StoreError> + Send + 'static,
) -> Result<R, BatchError> {
    let s = Arc::clone(store);
    tokio::task::spawn_blocking(move || f(s.as_ref()))
        .await
        .map_err(|e| BatchError::Store(batch_store_error(e)))?
        .map_err(BatchError::Store)
}

/// Sleeps `d`, or less when `shutdown` turns true; whether it did.
async fn sleep_or_shutdown(d: Duration, shutdown: &mut watch::Receiver<bool>) -> bool {
    if *shutdown.borrow() {
        return true;
    }
    tokio::select! {
        _ = tokio::time::sleep(d) => {}
        r = shutdown.changed() => {
            if r.is_err() {
                tokio::time::sleep(d).await;
            }
        }
    }
    *shutdown.borrow()
}

fn status_of(row_nonce: &str, remote: &Remote) -> BatchStatus {
    let c = remote.counts;
    let done = c.total.saturating_sub(c.processing);
    let eta = if remote.phase == Phase::Ended || (c.processing == 0 && c.total > 0) {
        Some(Duration::ZERO)
    } else {
        match remote.created_ms {
            Some(created) if done > 0 => {
                let elapsed = now_ms().saturating_sub(created).max(0) as u128;
                let left = elapsed * u128::from(c.processing) / u128::from(done);
                Some(Duration::from_millis(left.min(u128::from(u64::MAX)) as u64))
            }
            _ => None,
        }
    };
    BatchStatus {
        nonce: row_nonce.to_owned(),
        batch_id: remote.id.clone(),
        status: remote.status.clone(),
        phase: remote.phase,
        counts: c,
        eta,
    }
}

struct Runner<'a> {
    store: Arc<dyn Store>,
    api: Api,
    settings: BatchSettings,
    report: BatchReport,
    /// Worst case of the jobs inside open batches.
    reserved: u64,
    shutdown: watch::Receiver<bool>,
    /// In a mutex so that the runner is `Sync` (its future `Send`).
    on_status: std::sync::Mutex<&'a mut (dyn FnMut(BatchStatus) + Send)>,
    interrupted: bool,
}

/// Runs the batch path over `store`: jobs `select` picks among the pending
/// ones go through the provider's batch API; `on_status` hears each
/// batch's status at every poll; `shutdown` turning true stops creating
/// and polling (submitted batches go on at the provider, and a re-run
/// resumes them).
///
/// In order: with [`BatchSettings::retry_failed`], jobs a batch ended
/// failed or expired are pending again; intents whose create call went
/// unanswered are looked for ([`recover`]); unless the queue is stopped,
/// the selected pending jobs are planned and created (intent first, id
/// after); on a stop, submitted batches are cancelled; then every open
/// batch is polled to its end and its results written to the store.
pub async fn run_batches(
    store: Arc<dyn Store>,
    client: Client,
    settings: BatchSettings,
    select: impl Fn(&Pending) -> bool + Send + Sync,
    shutdown: watch::Receiver<bool>,
    mut on_status: impl FnMut(BatchStatus) + Send,
) -> Result<BatchReport, BatchError> {
    let api = Api::new(
        client,
        settings.shape,
        settings.upstream.clone(),
        settings.api_key.clone(),
        settings.request_timeout,
    );
    let mut r = Runner {
        store,
        api,
        settings,
        report: BatchReport {
            ending: BatchEnding::Finished,
            created: Vec::new(),
            recovered: Vec::new(),
            not_created: 0,
            held: 0,
            ended: 0,
            released: 0,
            possibly_billed: 0,
            create_failures: 0,
            counts: Default::default(),
        },
        reserved: 0,
        shutdown,
        on_status: std::sync::Mutex::new(&mut on_status),
        interrupted: false,
    };
    if r.settings.retry_failed {
        r.report.released = on_store(&r.store, |s| s.release_batch_failed()).await?;
    }
    r.recover_intents().await?;
    r.reserved = r.open_worst_case().await?;
    let mut stop = on_store(&r.store, |s| s.stopped()).await?;
    if stop.is_none() && !*r.shutdown.borrow() {
        stop = r.create_all(&select).await?;
    }
    // A stop from the provider (spend cap, billing, authentication)
    // cancels what was submitted; the run's own budget does not: the
    // batches created fit in it.
    if stop.as_ref().is_some_and(|s| s.cause != StopCause::Budget) {
        r.cancel_open().await?;
    }
    if !r.interrupted && r.settings.poll_to_end {
        r.poll_all().await?;
    }
    r.report.counts = on_store(&r.store, |s| s.counts()).await?;
    r.report.ending = match (stop, r.interrupted) {
        (Some(stop), _) => BatchEnding::Stopped(stop),
        (None, true) => BatchEnding::Interrupted,
        (None, false) if !r.settings.poll_to_end => BatchEnding::Submitted,
        (None, false) => BatchEnding::Finished,
    };
    Ok(r.report)
}

impl Runner<'_> {
    fn status(&self, status: BatchStatus) {
        if let Ok(mut f) = self.on_status.lock() {
            (*f)(status);
        }
    }

    async fn rows(&self) -> Result<Vec<BatchRow>, BatchError> {
        on_store(&self.store, |s| s.batches()).await
    }

    async fn open_worst_case(&self) -> Result<u64, BatchError> {
        let mut sum = 0u64;
        for row in self.rows().await?.into_iter().filter(BatchRow::is_open) {
            let nonce = row.nonce.clone();
            let jobs = on_store(&self.store, move |s| s.batch_jobs(&nonce)).await?;
            sum = jobs
                .iter()
                .filter(|j| j.state == State::Batched)
                .fold(sum, |a, j| a.saturating_add(j.worst_case));
        }
        Ok(sum)
    }

    /// Every intent with no batch id: found, ruled out, or held.
    async fn recover_intents(&mut self) -> Result<(), BatchError> {
        for row in self.rows().await? {
            if row.state == "intent" {
                self.recover(&row).await?;
            }
        }
        Ok(())
    }

    /// Looks for the batch of intent `row` (not before [`BatchSettings::settle`]
    /// after its intent); whether it was found.
    async fn recover(&mut self, row: &BatchRow) -> Result<bool, BatchError> {
        let settled_at = row
            .intent_ms
            .saturating_add(self.settings.settle.as_millis() as i64);
        let wait = settled_at.saturating_sub(now_ms());
        if wait > 0 {
            // Not interrupted by a signal: the intent must be resolved
            // before anything else is created.
            tokio::time::sleep(Duration::from_millis(wait as u64)).await;
        }
        let known: HashSet<String> = self
            .rows()
            .await?
            .into_iter()
            .filter_map(|r| r.batch_id)
            .collect();
        let found = recover::find(&self.api, row, &known, self.settings.window())
            .await
            .map_err(|source| BatchError::Api {
                context: format!("looking for the batch of intent {}", row.nonce),
                source,
            })?;
        let nonce = row.nonce.clone();
        match found {
            Found::One(remote) => {
                let id = remote.id.clone();
                on_store(&self.store, move |s| s.batch_submitted(&nonce, &id)).await?;
                tracing::info!(batch = %remote.id, "found the batch of an unanswered create call");
                self.report.recovered.push(remote.id);
                Ok(true)
            }
            Found::None => {
                on_store(&self.store, move |s| s.batch_not_created(&nonce)).await?;
                self.report.not_created += 1;
                Ok(false)
            }
            Found::Ambiguous(ids) => {
                let message = format!(
                    "the batch create call went unanswered and {} batches could be its own ({}): held, never sent again unless a person says so",
                    ids.len(),
                    ids.join(", ")
                );
                self.report.held += on_store(&self.store, move |s| {
                    s.batch_hold(&nonce, "outcome_unknown", &message)
                })
                .await?;
                Ok(false)
            }
            Found::Unsure(why) => {
                let message = format!("the batch create call went unanswered and {why}: held");
                self.report.held += on_store(&self.store, move |s| {
                    s.batch_hold(&nonce, "outcome_unknown", &message)
                })
                .await?;
                Ok(false)
            }
        }
    }

    /// Plans the selected pending jobs and creates their batches; a stop
    /// if one came.
    async fn create_all(
        &mut self,
        select: &(dyn Fn(&Pending) -> bool + Send + Sync),
    ) -> Result<Option<StopRecord>, BatchError> {
        let mut planner = Planner::new(self.settings.shape, self.settings.limits);
        let mut after = i64::MIN;
        loop {
            let now = now_ms();
            let page = on_store(&self.store, move |s| {
                s.next_pending(after, now, PAGE, PAGE_BYTES)
            })
            .await?;
            let Some(last) = page.last() else { break };
            after = last.seq;
            for job in page {
                if !select(&job) {
                    continue;
                }
                if let Some(full) = planner.push(job) {
                    if let Some(stop) = self.create_one(full).await? {
                        return Ok(Some(stop));
                    }
                    if self.interrupted {
                        return Ok(None);
                    }
                }
            }
        }
        for planned in planner.finish() {
            if let Some(stop) = self.create_one(planned).await? {
                return Ok(Some(stop));
            }
            if self.interrupted {
                return Ok(None);
            }
        }
        Ok(None)
    }

    async fn stop_with(&mut self, stop: StopRecord) -> Result<Option<StopRecord>, BatchError> {
        let kept = stop.clone();
        on_store(&self.store, move |s| s.stop(&kept)).await?;
        tracing::warn!(cause = %stop.cause, "the batch path stopped the queue");
        Ok(Some(stop))
    }

    /// Creates one planned batch (the budget may trim it); a stop if one
    /// came.
    ///
    /// In steps: fit the batch to the budget → then, per create attempt,
    /// write its intent (before the call: an unanswered call can be looked
    /// for) → call the batch API → act on the answer: [`Self::created`],
    /// [`Self::refused`], [`Self::not_sent`] or [`Self::unanswered`], each
    /// either done or asking to try again after a wait.
    async fn create_one(&mut self, mut planned: Planned) -> Result<Option<StopRecord>, BatchError> {
        let trimmed = match self.fit_budget(&mut planned).await? {
            Fit::Stop(stop) => return self.stop_with(stop).await,
            Fit::Whole => false,
            Fit::Trimmed => true,
        };
        let worst = planned.worst_case();
        for attempt in 0..self.settings.create_attempts.max(1) {
            if *self.shutdown.borrow() {
                self.interrupted = true;
                return Ok(None);
            }
            let (nonce, row) = self.write_intent(&planned).await?;
            let next = match self.api.create(&planned, &nonce).await {
                Ok(remote) => {
                    return self
                        .created(&planned, &nonce, &remote, worst, trimmed)
                        .await
                }
                Err(ApiError::Status {
                    status,
                    headers,
                    body,
                }) => {
                    let answer = (status, &*headers, body);
                    self.refused(&planned, &nonce, attempt, answer).await?
                }
                Err(ApiError::NotSent(why)) => self.not_sent(&nonce, attempt, &why).await?,
                Err(e @ (ApiError::NoAnswer(_) | ApiError::Unreadable(_))) => {
                    self.unanswered(&row, worst, attempt, &e).await?
                }
            };
            let wait = match next {
                Create::Done(stop) => return Ok(stop),
                Create::Again(wait) => wait,
            };
            if sleep_or_shutdown(wait.min(MAX_CREATE_WAIT), &mut self.shutdown).await {
                self.interrupted = true;
                return Ok(None);
            }
        }
        self.report.create_failures += 1;
        Ok(None)
    }

    /// Fits `planned` to the budget's room (the budget less what is spent
    /// and what open batches reserve, counted by the core's
    /// [`SpendBudget`]): whole, trimmed to the jobs that fit, or — not one
    /// fits — a budget stop.
    async fn fit_budget(&mut self, planned: &mut Planned) -> Result<Fit, BatchError> {
        let Some(budget) = self.settings.budget_tokens else {
            return Ok(Fit::Whole);
        };
        let spent = on_store(&self.store, |s| s.counts()).await?.spent;
        let mut spend = run_budget(Some(budget), spent);
        spend.reserve(self.reserved, 0, ANY_TIME);
        let fit = fitting(&planned.jobs, &mut spend);
        if fit == 0 {
            let next = planned.jobs.first().map_or(0, Pending::worst_case);
            return Ok(Fit::Stop(StopRecord {
                cause: StopCause::Budget,
                at: httpdate::fmt_http_date(SystemTime::now()),
                status: None,
                message: format!(
                    "budget_tokens {budget}: {spent} spent and {} reserved by batches; the next job's worst case is {next}",
                    self.reserved
                ),
                custom_id: planned.jobs.first().map(|j| j.custom_id.clone()),
            }));
        }
        if fit < planned.jobs.len() {
            planned.truncate(self.settings.shape, fit);
            return Ok(Fit::Trimmed);
        }
        Ok(Fit::Whole)
    }

    /// Writes the intent of one create attempt, under a fresh nonce,
    /// before the call: a call that goes unanswered can then be looked for
    /// by its nonce. Returns the nonce and the intent's row.
    async fn write_intent(&self, planned: &Planned) -> Result<(String, BatchRow), BatchError> {
        let nonce = new_nonce();
        let (intent, row) = intent_of(planned, self.settings.shape, &nonce, now_ms());
        on_store(&self.store, move |s| s.batch_intent(&intent)).await?;
        Ok((nonce, row))
    }

    /// The batch exists: its id is kept with its intent, its worst case is
    /// reserved, and its status told. A batch the budget trimmed then
    /// stops the queue: the batches created reserve all of the budget.
    async fn created(
        &mut self,
        planned: &Planned,
        nonce: &str,
        remote: &Remote,
        worst: u64,
        trimmed: bool,
    ) -> Result<Option<StopRecord>, BatchError> {
        let (n, id) = (nonce.to_owned(), remote.id.clone());
        on_store(&self.store, move |s| s.batch_submitted(&n, &id)).await?;
        self.reserved = self.reserved.saturating_add(worst);
        tracing::info!(batch = %remote.id, jobs = planned.jobs.len(), "batch created");
        self.report.created.push(remote.id.clone());
        self.status(status_of(nonce, remote));
        if trimmed {
            let budget = self.settings.budget_tokens.unwrap_or(0);
            return self
                .stop_with(StopRecord {
                    cause: StopCause::Budget,
                    at: httpdate::fmt_http_date(SystemTime::now()),
                    status: None,
                    message: format!(
                        "budget_tokens {budget}: the batches created reserve all of it"
                    ),
                    custom_id: None,
                })
                .await;
        }
        Ok(None)
    }

    /// The batch API answered an error: classified and decided as the
    /// layer would a job's answer (this is attempt `attempt + 1`). A stop
    /// stops the queue; a retry or a deferral tries again after the
    /// answer's hint, the decision's delay or a backoff; any other ending
    /// means the batch must change, so its jobs end failed with the
    /// provider's answer (no batch exists).
    async fn refused(
        &mut self,
        planned: &Planned,
        nonce: &str,
        attempt: u32,
        (status, headers, body): (http::StatusCode, &http::HeaderMap, bytes::Bytes),
    ) -> Result<Create, BatchError> {
        let view = ResponseView {
            status,
            headers,
            body: &body,
        };
        let c = classify_response(provider(self.settings.shape), &view, SystemTime::now());
        let d = decide(
            &Policy::default(),
            &JobState::new(attempt + 1, Instant::ZERO, None),
            &c,
            Now::new(Instant::ZERO, SystemTime::now()),
            &mut new_nonce_rng(),
        );
        let n = nonce.to_owned();
        match d.action.kind() {
            ActionKind::StopQueue => {
                on_store(&self.store, move |s| s.batch_not_created(&n)).await?;
                let message = c.evidence.message.clone().unwrap_or_else(|| {
                    String::from_utf8_lossy(&body[..body.len().min(512)]).into_owned()
                });
                let stop = self
                    .stop_with(StopRecord {
                        cause: c.cause.into(),
                        at: httpdate::fmt_http_date(SystemTime::now()),
                        status: Some(status.as_u16()),
                        message: format!("the batch API refused to create a batch: {message}"),
                        custom_id: None,
                    })
                    .await?;
                Ok(Create::Done(stop))
            }
            ActionKind::Retry | ActionKind::Defer => {
                on_store(&self.store, move |s| s.batch_not_created(&n)).await?;
                let wait = c.hints.wait.map(|h| h.wait).or(d.action.delay());
                Ok(Create::Again(wait.unwrap_or(backoff(attempt))))
            }
            _ => {
                let message = format!(
                    "the batch API refused the batch ({status}): {}",
                    c.evidence.message.clone().unwrap_or_default()
                );
                let ends = failed_ends(&planned.jobs, status, &body, c.cause.as_str(), &message);
                on_store(&self.store, move |s| {
                    s.batch_results(&n, ends, Some("not_created"))
                })
                .await?;
                Ok(Create::Done(None))
            }
        }
    }

    /// The create call was not sent (no connection): no batch can exist,
    /// so the intent is dropped and the call tried again after a backoff.
    async fn not_sent(
        &mut self,
        nonce: &str,
        attempt: u32,
        why: &str,
    ) -> Result<Create, BatchError> {
        tracing::warn!(%why, "a batch create call was not sent");
        let n = nonce.to_owned();
        on_store(&self.store, move |s| s.batch_not_created(&n)).await?;
        Ok(Create::Again(backoff(attempt)))
    }

    /// The create call went unanswered: the batch may exist. After the
    /// settle time it is looked for by its intent's nonce; found, it is
    /// reserved like a created one; held (it cannot be known), nothing more
    /// is tried; else the call is tried again after a backoff.
    async fn unanswered(
        &mut self,
        row: &BatchRow,
        worst: u64,
        attempt: u32,
        e: &ApiError,
    ) -> Result<Create, BatchError> {
        tracing::warn!(error = %e, "a batch create call went unanswered: looking for its batch");
        tokio::time::sleep(self.settings.settle).await;
        if self.recover(row).await? {
            self.reserved = self.reserved.saturating_add(worst);
            return Ok(Create::Done(None));
        }
        let n = row.nonce.clone();
        let state = on_store(&self.store, move |s| {
            Ok(s.batches()?
                .into_iter()
                .find(|r| r.nonce == n)
                .map(|r| r.state))
        })
        .await?;
        if state.as_deref() == Some("held") {
            return Ok(Create::Done(None));
        }
        Ok(Create::Again(backoff(attempt)))
    }

    /// Cancels every submitted batch not cancelled yet; their jobs still
    /// inside are accounted as possibly billed.
    async fn cancel_open(&mut self) -> Result<(), BatchError> {
        for row in self.rows().await? {
            let (true, Some(id), None) = (row.is_open(), row.batch_id.clone(), row.cancel_ms)
            else {
                continue;
            };
            match self.api.cancel(&id).await {
                Ok(remote) => self.status(status_of(&row.nonce, &remote)),
                // Already ended, or no answer: the poll tells.
                Err(e) => tracing::warn!(batch = %id, error = %e, "cancelling a batch"),
            }
            let nonce = row.nonce.clone();
            let at = now_ms();
            on_store(&self.store, move |s| s.batch_cancel_requested(&nonce, at)).await?;
            let nonce = row.nonce.clone();
            let jobs = on_store(&self.store, move |s| s.batch_jobs(&nonce)).await?;
            self.report.possibly_billed = jobs
                .iter()
                .filter(|j| j.state == State::Batched)
                .fold(self.report.possibly_billed, |a, j| {
                    a.saturating_add(j.worst_case)
                });
        }
        Ok(())
    }

    /// Polls every open batch to its end, reading the results of each that
    /// ends.
    async fn poll_all(&mut self) -> Result<(), BatchError> {
        let mut errors = 0u32;
        loop {
            let open: Vec<BatchRow> = self
                .rows()
                .await?
                .into_iter()
                .filter(|r| r.is_open() && r.batch_id.is_some())
                .collect();
            if open.is_empty() {
                return Ok(());
            }
            let mut left = 0usize;
            for row in &open {
                let id = row.batch_id.clone().unwrap_or_default();
                let got = match self.api.get(&id).await {
                    Ok(remote) => {
                        self.status(status_of(&row.nonce, &remote));
                        if remote.phase == Phase::Ended {
                            self.collect(row, &remote).await?
                        } else {
                            left += 1;
                            Ok(())
                        }
                    }
                    Err(e) => Err(e),
                };
                match got {
                    Ok(()) => errors = 0,
                    Err(source) => {
                        left += 1;
                        errors += 1;
                        tracing::warn!(batch = %id, error = %source, "polling a batch");
                        if errors >= self.settings.max_poll_errors.max(1) {
                            return Err(BatchError::Api {
                                context: format!("polling batch {id} ({errors} failures in a row; it goes on at the provider, a re-run resumes it)"),
                                source,
                            });
                        }
                    }
                }
            }
            if left > 0 && sleep_or_shutdown(self.settings.poll_interval, &mut self.shutdown).await
            {
                self.interrupted = true;
                return Ok(());
            }
        }
    }

    /// Reads an ended batch's results into the store and closes it. The
    /// outer error is the store's (the run stops); the inner the API's
    /// (the batch stays open, its results are read again at the next
    /// poll: the jobs already written are skipped).
    async fn collect(
        &mut self,
        row: &BatchRow,
        remote: &Remote,
    ) -> Result<Result<(), ApiError>, BatchError> {
        let nonce = row.nonce.clone();
        let jobs = on_store(&self.store, move |s| s.batch_jobs(&nonce)).await?;
        let stop = on_store(&self.store, |s| s.stopped()).await?;
        let by_id: HashMap<&str, (i64, u64)> = jobs
            .iter()
            .filter(|j| j.state == State::Batched)
            .map(|j| (j.custom_id.as_str(), (j.seq, j.worst_case)))
            .collect();
        let shape = self.settings.shape;
        let canceled_end = |end: &mut End| {
            if let Some(stop) = &stop {
                end.state = Some(State::Stopped);
                end.cause = Some(stop.cause.as_str().to_owned());
                end.message = Some(stop.message.clone());
            } else {
                end.state = Some(State::Pending);
            }
        };
        let mut seen: HashSet<i64> = HashSet::new();
        let mut group: Vec<BatchEnd> = Vec::new();
        let files: Vec<Option<String>> = match shape {
            Shape::OpenAi => vec![remote.output_file_id.clone(), remote.error_file_id.clone()],
            Shape::Anthropic => vec![None],
        };
        for file in files {
            if shape == Shape::OpenAi && file.is_none() {
                continue;
            }
            let store = Arc::clone(&self.store);
            let nonce = row.nonce.clone();
            let mut on_line = |line: &[u8]| -> Result<(), StoreError> {
                let Some(mut item) = results::parse(shape, &remote.id, line) else {
                    return Ok(());
                };
                let Some(&(seq, worst)) = by_id.get(item.custom_id.as_str()) else {
                    return Ok(());
                };
                if !seen.insert(seq) {
                    return Ok(());
                }
                item.charge(worst);
                if item.item == Item::Canceled {
                    canceled_end(&mut item.end);
                }
                group.push(BatchEnd {
                    seq,
                    result_id: item.result_id,
                    end: item.end,
                });
                if group.len() >= RESULTS_GROUP {
                    store.batch_results(&nonce, std::mem::take(&mut group), None)?;
                }
                Ok(())
            };
            match self
                .api
                .each_result_line(&remote.id, file.as_deref(), &mut on_line)
                .await
            {
                Err(e) => return Ok(Err(e)),
                Ok(Err(e)) => return Err(BatchError::Store(e)),
                Ok(Ok(())) => {}
            }
        }
        // Jobs of the batch with no result line.
        for j in jobs.iter().filter(|j| j.state == State::Batched) {
            if seen.contains(&j.seq) {
                continue;
            }
            let mut end = End::default();
            match (shape, remote.status.as_str()) {
                (Shape::OpenAi, "expired") => {
                    end.state = Some(State::Expired);
                    end.cause = Some("batch_expired".into());
                    end.message = Some("not run within the batch window".into());
                }
                (Shape::OpenAi, "cancelled") => canceled_end(&mut end),
                (Shape::OpenAi, "failed") => {
                    end.state = Some(State::Failed);
                    end.cause = Some("batch_failed".into());
                    end.message = Some(format!(
                        "the batch failed: {}",
                        remote.errors.clone().unwrap_or_default()
                    ));
                }
                _ => {
                    end.state = Some(State::HeldUnknown);
                    end.cause = Some("outcome_unknown".into());
                    end.message = Some(format!(
                        "batch {} ended with no result for this request: it may have been run and billed",
                        remote.id
                    ));
                    end.charged = j.worst_case;
                }
            }
            group.push(BatchEnd {
                seq: j.seq,
                result_id: None,
                end,
            });
        }
        let nonce = row.nonce.clone();
        on_store(&self.store, move |s| {
            s.batch_results(&nonce, group, Some("ended"))
        })
        .await?;
        let released: u64 = jobs
            .iter()
            .filter(|j| j.state == State::Batched)
            .map(|j| j.worst_case)
            .sum();
        self.reserved = self.reserved.saturating_sub(released);
        self.report.ended += 1;
        Ok(Ok(()))
    }
}

/// The random source `decide` jitters with.
/// A planned batch against the budget.
enum Fit {
    /// Every job fits.
    Whole,
    /// Trimmed to the jobs that fit.
    Trimmed,
    /// Not one fits: the queue stops.
    Stop(StopRecord),
}

/// What one create attempt came to.
enum Create {
    /// Nothing more to try (a stop if one came).
    Done(Option<StopRecord>),
    /// Try again after this wait.
    Again(Duration),
}

/// How many of `jobs`, from the first, fit in `budget` together: each
/// one's worst case is reserved in turn while the budget says it fits.
fn fitting(jobs: &[Pending], budget: &mut SpendBudget) -> usize {
    jobs.iter()
        .take_while(|j| {
            let fits = budget.check(j.worst_case(), 0, ANY_TIME) == SpendCheck::Fits;
            if fits {
                budget.reserve(j.worst_case(), 0, ANY_TIME);
            }
            fits
        })
        .count()
}

/// The wait before create attempt `attempt + 1` with no hint: doubling
/// from a second, at most 64 s.
fn backoff(attempt: u32) -> Duration {
    Duration::from_secs(1 << attempt.min(6))
}

/// The intent of a create call for `planned`, under `nonce`, and the row
/// the store then holds for it.
fn intent_of(
    planned: &Planned,
    shape: Shape,
    nonce: &str,
    intent_ms: i64,
) -> (BatchIntent, BatchRow) {
    let intent = BatchIntent {
        nonce: nonce.to_owned(),
        shape: shape.as_str().to_owned(),
        model: planned.model.clone(),
        endpoint: planned.endpoint.clone(),
        intent_ms,
        seqs: planned.jobs.iter().map(|j| j.seq).collect(),
        bytes: planned.bytes,
    };
    let row = BatchRow {
        nonce: nonce.to_owned(),
        batch_id: None,
        shape: intent.shape.clone(),
        model: intent.model.clone(),
        endpoint: intent.endpoint.clone(),
        state: "intent".into(),
        intent_ms: intent.intent_ms,
        jobs: intent.seqs.len() as u64,
        bytes: intent.bytes,
        cancel_ms: None,
    };
    (intent, row)
}

/// The ends of the jobs of a batch the API refused for good: failed, with
/// the provider's answer.
fn failed_ends(
    jobs: &[Pending],
    status: http::StatusCode,
    body: &bytes::Bytes,
    cause: &str,
    message: &str,
) -> Vec<BatchEnd> {
    jobs.iter()
        .map(|j| BatchEnd {
            seq: j.seq,
            result_id: None,
            end: End {
                state: Some(State::Failed),
                status: Some(status.as_u16()),
                response: Some(body.clone()),
                cause: Some(cause.to_owned()),
                message: Some(message.to_owned()),
                ..End::default()
            },
        })
        .collect()
}

fn new_nonce_rng() -> impl FnMut() -> u64 {
    use std::hash::BuildHasher;
    let state = std::collections::hash_map::RandomState::new();
    let mut n = 0u64;
    move || {
        n += 1;
        state.hash_one(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::batch::api::RemoteCounts;

    fn remote(created_ms: Option<i64>, total: u64, processing: u64, phase: Phase) -> Remote {
        Remote {
            id: "batch_1".into(),
            status: "in_progress".into(),
            phase,
            counts: RemoteCounts {
                total,
                succeeded: total - processing,
                processing,
                ..RemoteCounts::default()
            },
            created_ms,
            intent: None,
            output_file_id: None,
            error_file_id: None,
            errors: None,
        }
    }

    #[test]
    fn the_eta_follows_the_pace_so_far() {
        let ten_s_ago = Some(now_ms() - 10_000);
        let eta = status_of("n", &remote(ten_s_ago, 10, 5, Phase::Running))
            .eta
            .unwrap();
        assert!((9_900..=10_500).contains(&eta.as_millis()), "{eta:?}");
        let eta = status_of("n", &remote(ten_s_ago, 10, 8, Phase::Running))
            .eta
            .unwrap();
        assert!((39_000..=41_000).contains(&eta.as_millis()), "{eta:?}");
        assert_eq!(
            status_of("n", &remote(ten_s_ago, 10, 10, Phase::Running)).eta,
            None,
            "nothing ended yet"
        );
        assert_eq!(
            status_of("n", &remote(None, 10, 5, Phase::Running)).eta,
            None
        );
        let done = status_of("n", &remote(ten_s_ago, 10, 0, Phase::Ended));
        assert_eq!(
            (done.eta, done.batch_id.as_str()),
            (Some(Duration::ZERO), "batch_1")
        );
    }

    fn job(seq: i64, input: u64, output: u64) -> Pending {
        Pending {
            seq,
            custom_id: format!("job-{seq}"),
            path: "/v1/chat/completions".into(),
            model: Some("m".into()),
            input_estimate: input,
            max_tokens: output,
            body: bytes::Bytes::from_static(b"{}"),
            first_seen_ms: 0,
            double_spend: false,
        }
    }

    #[test]
    fn the_budget_takes_the_first_jobs_that_fit_together() {
        let jobs = [job(1, 10, 10), job(2, 10, 10), job(3, 10, 10)];
        let each = jobs[0].worst_case();
        let room = |r: u64| run_budget(Some(r), 0);
        assert_eq!(fitting(&jobs, &mut room(0)), 0);
        assert_eq!(fitting(&jobs, &mut room(each - 1)), 0);
        assert_eq!(fitting(&jobs, &mut room(each)), 1);
        assert_eq!(fitting(&jobs, &mut room(2 * each + 1)), 2);
        assert_eq!(fitting(&jobs, &mut room(u64::MAX)), 3);
        assert_eq!(fitting(&[], &mut room(100)), 0);
        // What earlier runs spent and open batches reserve leave the room.
        let mut b = run_budget(Some(3 * each), each);
        b.reserve(each, 0, ANY_TIME);
        assert_eq!(fitting(&jobs, &mut b), 1);
    }

    #[test]
    fn create_attempts_back_off_to_a_minute() {
        let waits: Vec<u64> = (0..9).map(|a| backoff(a).as_secs()).collect();
        assert_eq!(waits, [1, 2, 4, 8, 16, 32, 64, 64, 64]);
    }

    #[test]
    fn an_intent_and_its_row_name_the_same_batch() {
        let planned = Planned {
            model: Some("gpt".into()),
            endpoint: "/v1/chat/completions".into(),
            jobs: vec![job(4, 1, 1), job(9, 1, 1)],
            bytes: 123,
        };
        let (intent, row) = intent_of(&planned, Shape::OpenAi, "rw_1", 77);
        assert_eq!(intent.seqs, [4, 9]);
        assert_eq!((intent.nonce.as_str(), intent.intent_ms), ("rw_1", 77));
        assert_eq!((row.nonce.as_str(), row.state.as_str()), ("rw_1", "intent"));
        assert_eq!((row.jobs, row.bytes, row.intent_ms), (2, 123, 77));
        assert_eq!(
            (row.shape, row.model, row.endpoint),
            (intent.shape, intent.model, intent.endpoint)
        );
        assert_eq!((row.batch_id, row.cancel_ms), (None, None));
    }

    #[test]
    fn a_refused_batch_fails_each_of_its_jobs_with_the_answer() {
        let body = bytes::Bytes::from_static(b"{\"error\":{}}");
        let ends = failed_ends(
            &[job(1, 1, 1), job(2, 1, 1)],
            http::StatusCode::BAD_REQUEST,
            &body,
            "invalid_request",
            "refused",
        );
        assert_eq!(ends.iter().map(|e| e.seq).collect::<Vec<_>>(), [1, 2]);
        for e in &ends {
            assert_eq!(e.end.state, Some(State::Failed));
            assert_eq!(e.end.status, Some(400));
            assert_eq!(e.end.response.as_ref(), Some(&body));
            assert_eq!(e.end.cause.as_deref(), Some("invalid_request"));
            assert_eq!(e.end.message.as_deref(), Some("refused"));
            assert!(e.result_id.is_none());
        }
    }

    #[test]
    fn nonces_differ() {
        let a: std::collections::HashSet<String> = (0..1000).map(|_| new_nonce()).collect();
        assert_eq!(a.len(), 1000);
        assert!(a.iter().all(|n| n.len() == 35 && n.starts_with("rw_")));
    }
}
