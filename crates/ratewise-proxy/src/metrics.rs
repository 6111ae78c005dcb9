//! Counters for `GET /metrics` (Prometheus text format), fed by the
//! layer's journal hook: sends, answers by status and cause, actions,
//! 429s, retries; jobs in flight and waiting are gauges the proxy keeps.
//!
//! A streamed answer is counted once, when its body ends: `200 success`
//! if it completed, `200 mid_stream` if it was cut, failed in band or was
//! dropped — its headers alone cannot tell (a counter never goes back).

use ratewise_core::record::AttemptRecord;
use ratewise_tower::{written, Written};
use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

/// The proxy's counters.
#[derive(Debug, Default)]
pub struct Metrics {
    /// Attempts handed to an upstream.
    pub sends: AtomicU64,
    /// Attempts that were retries.
    pub retries: AtomicU64,
    /// Jobs received.
    pub jobs: AtomicU64,
    /// Jobs in flight now.
    pub in_flight: AtomicI64,
    /// Jobs in flight that wait for their first send (admission).
    pub waiting: AtomicI64,
    /// Jobs whose caller went away before their answer.
    pub abandoned: AtomicU64,
    /// By (status, or the transport failure's word; cause).
    answers: Mutex<BTreeMap<(Status, &'static str), u64>>,
    actions: Mutex<BTreeMap<&'static str, u64>>,
}

impl Metrics {
    fn bump<K: Ord>(m: &Mutex<BTreeMap<K, u64>>, k: K) {
        let mut m = m.lock().unwrap_or_else(|e| e.into_inner());
        *m.entry(k).or_insert(0) += 1;
    }

    /// Prometheus text; `gauges` are added as they are.
    pub fn render(&self, gauges: &[(String, f64)]) -> String {
        let mut out = String::new();
        let c = |out: &mut String, name: &str, help: &str, v: u64| {
            let _ = writeln!(
                out,
                "# HELP {name} {help}\n# TYPE {name} counter\n{name} {v}"
            );
        };
        c(
            &mut out,
            "ratewise_sends_total",
            "Attempts handed to an upstream.",
            self.sends.load(Ordering::Relaxed),
        );
        c(
            &mut out,
            "ratewise_retries_total",
            "Attempts that were retries.",
            self.retries.load(Ordering::Relaxed),
        );
        c(
            &mut out,
            "ratewise_jobs_total",
            "Jobs received.",
            self.jobs.load(Ordering::Relaxed),
        );
        c(
            &mut out,
            "ratewise_abandoned_total",
            "Jobs whose caller went away before their answer.",
            self.abandoned.load(Ordering::Relaxed),
        );
        let _ = writeln!(
            out,
            "# HELP ratewise_jobs_in_flight Jobs being handled now.\n# TYPE ratewise_jobs_in_flight gauge\nratewise_jobs_in_flight {}",
            self.in_flight.load(Ordering::Relaxed)
        );
        let _ = writeln!(
            out,
            "# HELP ratewise_jobs_waiting Jobs waiting for their first send.\n# TYPE ratewise_jobs_waiting gauge\nratewise_jobs_waiting {}",
            self.waiting.load(Ordering::Relaxed)
        );
        let _ = writeln!(
            out,
            "# HELP ratewise_answers_total Answers by status and cause (a stream counts when it ends: mid_stream unless it completed).\n# TYPE ratewise_answers_total counter"
        );
        for ((status, cause), n) in self
            .answers
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
        {
            let _ = writeln!(
                out,
                "ratewise_answers_total{{status=\"{status}\",cause=\"{cause}\"}} {n}"
            );
        }
        let _ = writeln!(
            out,
            "# HELP ratewise_actions_total Decisions by action.\n# TYPE ratewise_actions_total counter"
        );
        for (action, n) in self
            .actions
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
        {
            let _ = writeln!(out, "ratewise_actions_total{{action=\"{action}\"}} {n}");
        }
        // One `# TYPE` per metric: the series of one name together, in the
        // order given (a stable sort by name).
        let name_of = |line: &str| line.split('{').next().unwrap_or(line).to_owned();
        let mut sorted: Vec<&(String, f64)> = gauges.iter().collect();
        sorted.sort_by_key(|(line, _)| name_of(line));
        let mut last = String::new();
        for (line, v) in sorted {
            let name = line.split('{').next().unwrap_or(line);
            if name != last {
                let _ = writeln!(out, "# TYPE {name} gauge");
                last = name.to_owned();
            }
            let _ = writeln!(out, "{line} {v}");
        }
        out
    }
}

/// An answer's status, or the transport failure's word when there was
/// none: kept without formatting on the request path.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Status {
    Http(u16),
    Transport(&'static str),
}

impl std::fmt::Display for Status {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Status::Http(s) => write!(f, "{s}"),
            Status::Transport(w) => f.write_str(w),
        }
    }
}

/// A job's place in `in_flight`: entered when it starts, left when the
/// guard drops (with the job's future, however it ends).
pub struct InFlight(Arc<Metrics>);

impl InFlight {
    /// Counts one more job in flight.
    pub fn enter(m: Arc<Metrics>) -> Self {
        m.in_flight.fetch_add(1, Ordering::Relaxed);
        InFlight(m)
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Escapes a Prometheus label value (`\`, `"`, newline).
pub fn label(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// The layer's journal hook feeding [`Metrics`], and the file journal
/// when there is one.
pub struct Hook {
    /// The counters.
    pub metrics: Arc<Metrics>,
    /// The file journal.
    pub file: Option<Arc<crate::journal::FileJournal>>,
    /// The jobs in flight: what the journal's attempt lines say of each.
    pub jobs: Arc<crate::jobs::Jobs>,
    /// The stops' evidence: a send on a key proves its stop lifted (an
    /// operator resumed it, here or on another replica), so the evidence
    /// kept here goes, and the next stop keeps its own.
    pub stops: Arc<crate::answer::StopAnswers>,
}

impl ratewise_tower::Journal for Hook {
    /// Written before the send: a line the file journal could not write
    /// stops the send, which is then neither counted nor made.
    fn attempt_started<'a>(&'a self, job_id: &'a str, attempt: u32, at: SystemTime) -> Written<'a> {
        self.attempt_started_on(job_id, attempt, None, at)
    }

    /// A pooled attempt's line names its member: a restart that finds it
    /// open says where it was sent.
    fn attempt_started_on<'a>(
        &'a self,
        job_id: &'a str,
        attempt: u32,
        member: Option<&'a str>,
        at: SystemTime,
    ) -> Written<'a> {
        let ctx = self.jobs.sending_to(job_id, member);
        let Some(f) = &self.file else {
            self.sent(attempt, ctx.as_ref());
            return written(Ok::<(), std::io::Error>(()));
        };
        // Awaited, not blocked on: the journal's writer thread writes the
        // line with the others waiting, and the send starts once it is
        // on disk.
        Box::pin(async move {
            f.attempt_started_async(job_id, attempt, at, ctx.clone())
                .await?;
            self.sent(attempt, ctx.as_ref());
            Ok(())
        })
    }

    fn attempt_ended<'a>(&'a self, record: &'a AttemptRecord) -> Written<'a> {
        if let (Some(job), Some(rid)) = (&record.job_id, &record.request_id) {
            self.jobs.saw_request_id(job, rid);
        }
        self.member_stopped(record);
        self.count_answer(record);
        Metrics::bump(&self.metrics.actions, record.action.as_str());
        self.write_end(record)
    }

    /// A stream's headers said `success`, but only its end says whether it
    /// was one: its answer is counted in `stream_ended`. The
    /// decision (`done`: handed over) and the journal line are written now,
    /// so a restart never replays a stream that reached its caller.
    fn stream_started<'a>(&'a self, record: &'a AttemptRecord) -> Written<'a> {
        Metrics::bump(&self.metrics.actions, record.action.as_str());
        self.write_end(record)
    }

    /// A stream ended: its answer counts as `success` when it completed and
    /// `mid_stream` when it did not (cut, failed in band, dropped).
    fn stream_ended(&self, record: &AttemptRecord) {
        self.count_answer(record);
    }
}

impl Hook {
    /// A send is made (its line, if journaled, is on disk): counted, and
    /// its key's stop evidence goes.
    fn sent(&self, attempt: u32, ctx: Option<&crate::jobs::JobContext>) {
        self.metrics.sends.fetch_add(1, Ordering::Relaxed);
        if attempt > 1 {
            self.metrics.retries.fetch_add(1, Ordering::Relaxed);
        }
        if let Some(key) = ctx.and_then(|c| c.key.as_deref()) {
            self.stops.forget(key);
        }
    }

    /// An attempt's end line, queued on the journal's writer and not
    /// awaited: the answer goes out at once (the writer's wake and the
    /// way back were about half of what the journal cost a busy proxy).
    /// Its start line was on disk before the send; until this one is, a
    /// crash leaves the attempt an unknown outcome, never "not sent".
    fn write_end<'a>(&'a self, record: &'a AttemptRecord) -> Written<'a> {
        match &self.file {
            Some(f) => {
                f.ended_queued(record);
                written(Ok::<(), std::io::Error>(()))
            }
            None => written(Ok::<(), std::io::Error>(())),
        }
    }

    /// A pool member's answer stopped its key (a spend cap, billing,
    /// credentials): the job goes on with another member, so no job ends
    /// on this stop for [`App::stopped`](crate::App::stopped) to keep.
    /// Its evidence — the answer's status, error type and code, request
    /// id, from the attempt's record — is kept under the member's
    /// fingerprint here and journaled, so `/status` shows it and a
    /// restart holds the stop; `/resume?key=FP` lifts it as any key's.
    fn member_stopped(&self, record: &AttemptRecord) {
        if record.action != ratewise_core::ActionKind::StopQueue {
            return;
        }
        // A member is named `upstream#fp-…` (never by its key).
        let Some(fp) = record
            .member
            .as_deref()
            .and_then(ratewise_tower::pool::key_of_label)
            .filter(|fp| crate::keys::is_fingerprint(fp))
        else {
            return;
        };
        let until = record
            .until
            .as_deref()
            .and_then(ratewise_core::time::parse_rfc3339);
        let answer = record.status.and_then(|status| {
            crate::evidence::ProviderAnswer {
                status,
                error_type: record.error_type.clone(),
                code: record.error_code.clone(),
                message: String::new(),
                request_id: record.request_id.clone(),
            }
            .bounded()
        });
        let ev = crate::evidence::Evidence {
            answer,
            ..crate::evidence::Evidence::bare(record.cause, SystemTime::now(), until)
        };
        tracing::warn!(key = fp, cause = ev.cause_word(), "pool member stopped");
        if let Some(f) = &self.file {
            f.stop_with(fp, &ev);
        }
        self.stops.keep(fp, ev);
    }

    fn count_answer(&self, record: &AttemptRecord) {
        let status = record.status.map_or_else(
            || Status::Transport(record.transport.unwrap_or("none")),
            Status::Http,
        );
        Metrics::bump(&self.metrics.answers, (status, record.cause.as_str()));
    }
}
