//! Jobs in flight by id, with what the journal says of each attempt: the
//! key's fingerprint, the model and the last upstream request id seen —
//! so an attempt whose outcome is unknown can be traced to its caller,
//! its key and the provider's logs.
//!
//! Every answer names its job in `x-ratewise-job`. A caller may name the
//! job itself (the same header on the request): a caller cut by a crash
//! then finds its request among the unknown outcomes. A caller's id is
//! used when it is a plain word ([`caller_job_id`]); junk falls back to
//! the generated id, and an id already in flight gets a `~n` suffix, so
//! two jobs never share one. The header is never forwarded upstream.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// The header naming a job, on the answer and (optionally) the request:
/// the layer's (one name for both).
pub use ratewise_tower::JOB_HEADER;

/// The longest job id a caller may give.
pub const MAX_CALLER_ID: usize = 64;

/// The longest model name kept.
const MAX_MODEL: usize = 128;

/// The caller's own job id from `x-ratewise-job`, when it is 1 to
/// [`MAX_CALLER_ID`] bytes of `A-Z a-z 0-9 . _ : -`; `None` otherwise.
pub fn caller_job_id(headers: &http::HeaderMap) -> Option<String> {
    let v = headers.get(JOB_HEADER)?.as_bytes();
    let ok = !v.is_empty()
        && v.len() <= MAX_CALLER_ID
        && v.iter()
            .all(|b| b.is_ascii_alphanumeric() || b"._:-".contains(b));
    ok.then(|| String::from_utf8_lossy(v).into_owned())
}

/// What is known of a job in flight.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct JobContext {
    /// The key's fingerprint.
    pub key: Option<String>,
    /// The request's model.
    pub model: Option<String>,
    /// The last upstream request id seen (`request-id`, `x-request-id`).
    pub request_id: Option<String>,
    /// The pool member its attempt in flight went to (upstream and key
    /// fingerprint), for a pooled job.
    pub member: Option<String>,
}

/// The jobs in flight. An entry lives as long as its [`JobEntry`].
#[derive(Debug, Default)]
pub struct Jobs(Mutex<HashMap<String, JobContext>>);

/// A job's place in [`Jobs`]; dropped, the job is forgotten.
#[derive(Debug)]
pub struct JobEntry {
    /// The job's id.
    pub id: String,
    jobs: Arc<Jobs>,
}

impl Drop for JobEntry {
    fn drop(&mut self) {
        self.jobs.lock().remove(&self.id);
    }
}

impl Jobs {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, JobContext>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Registers a job: under the caller's id when it gave one and it is
    /// free (else with a `~n` suffix), else under `generated`.
    pub fn begin(self: &Arc<Self>, wanted: Option<String>, generated: String) -> JobEntry {
        let mut map = self.lock();
        let id = match wanted {
            None => generated,
            Some(w) => {
                let mut id = w.clone();
                let mut n = 1u32;
                while map.contains_key(&id) {
                    n += 1;
                    id = format!("{w}~{n}");
                }
                id
            }
        };
        map.insert(id.clone(), JobContext::default());
        JobEntry {
            id,
            jobs: self.clone(),
        }
    }

    /// Notes the job's key and model.
    pub fn describe(&self, id: &str, key: &str, model: Option<String>) {
        if let Some(c) = self.lock().get_mut(id) {
            c.key = Some(key.to_owned());
            c.model = model;
        }
    }

    /// Notes an upstream request id seen for the job.
    pub fn saw_request_id(&self, id: &str, request_id: &str) {
        if let Some(c) = self.lock().get_mut(id) {
            c.request_id = Some(ratewise_core::parse::clip(request_id, MAX_MODEL).to_owned());
        }
    }

    /// Notes the pool member the job's attempt in flight goes to, and
    /// returns what is known of the job (one look-up for both: every send
    /// does this).
    pub fn sending_to(&self, id: &str, member: Option<&str>) -> Option<JobContext> {
        let mut jobs = self.lock();
        let c = jobs.get_mut(id)?;
        c.member = member.map(str::to_owned);
        Some(c.clone())
    }

    /// What is known of the job.
    pub fn context(&self, id: &str) -> Option<JobContext> {
        self.lock().get(id).cloned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_callers_id_is_a_bounded_plain_word() {
        let of = |v: &[u8]| {
            let mut h = http::HeaderMap::new();
            h.insert(JOB_HEADER, http::HeaderValue::from_bytes(v).unwrap());
            caller_job_id(&h)
        };
        assert_eq!(of(b"batch-7:item_3.a").as_deref(), Some("batch-7:item_3.a"));
        for junk in [&b""[..], b"a b", b"a/b", b"\xff", b"{}", &[b'a'; 65][..]] {
            assert_eq!(of(junk), None, "{junk:?}");
        }
        assert_eq!(of(&[b'a'; 64]).map(|s| s.len()), Some(64));
    }

    #[test]
    fn ids_in_flight_are_unique_and_forgotten_at_the_end() {
        let jobs = Arc::new(Jobs::default());
        let a = jobs.begin(Some("mine".into()), "g-1".into());
        let b = jobs.begin(Some("mine".into()), "g-2".into());
        let c = jobs.begin(None, "g-3".into());
        assert_eq!(
            (a.id.as_str(), b.id.as_str(), c.id.as_str()),
            ("mine", "mine~2", "g-3")
        );
        jobs.describe("mine", "fp-1", Some("m".into()));
        jobs.saw_request_id("mine", "req_1");
        let ctx = jobs.context("mine").unwrap();
        assert_eq!(
            (ctx.key.as_deref(), ctx.request_id.as_deref()),
            (Some("fp-1"), Some("req_1"))
        );
        let sending = jobs.sending_to("mine", Some("up#fp-2")).unwrap();
        assert_eq!(sending.member.as_deref(), Some("up#fp-2"));
        assert_eq!(sending, jobs.context("mine").unwrap());
        drop(a);
        assert!(jobs.context("mine").is_none());
        assert!(jobs.sending_to("mine", None).is_none());
        assert_eq!(jobs.begin(Some("mine".into()), "g-4".into()).id, "mine");
    }
}
