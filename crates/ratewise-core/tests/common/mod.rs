//! Helpers shared by the core's integration tests: a fixed wall clock and
//! real responses classified by the core.
#![allow(dead_code)]

use http::{HeaderMap, HeaderName, HeaderValue, StatusCode};
use ratewise_core::admit::Shared;
use ratewise_core::classify::{classify_response, Classification, ResponseView};
use ratewise_core::decide::Policy;
use ratewise_core::job::{Job, Step};
use ratewise_core::{Decision, Instant, Now, Provider, Usage};
use std::time::Duration;

/// `ms` milliseconds after 2026-11-29T12:00:00Z, on both clocks.
pub fn now_at(ms: u64) -> Now {
    let wall0 = ratewise_core::time::parse_rfc3339("2026-11-29T12:00:00Z").unwrap();
    Now::new(Instant::from_millis(ms), wall0 + Duration::from_millis(ms))
}

/// A response classified as `provider`'s at `now`, and the default
/// policy's decision for a first attempt of it.
pub fn respond(
    provider: Provider,
    status: u16,
    headers: &[(&str, &str)],
    body: &str,
    now: Now,
) -> (Classification, Decision) {
    let c = classify(provider, status, headers, body, now);
    let job = ratewise_core::decide::JobState::new(1, now.instant, None);
    let d = ratewise_core::decide::decide(
        &Policy::default(),
        &job,
        &c,
        now,
        &mut fastrand::Rng::with_seed(7),
    );
    (c, d)
}

/// A response with these status, headers and body, classified as
/// `provider`'s at `now`.
pub fn classify(
    provider: Provider,
    status: u16,
    headers: &[(&str, &str)],
    body: &str,
    now: Now,
) -> Classification {
    let mut h = HeaderMap::new();
    for (k, v) in headers {
        h.append(
            HeaderName::from_bytes(k.as_bytes()).unwrap(),
            HeaderValue::from_str(v).unwrap(),
        );
    }
    let view = ResponseView {
        status: StatusCode::from_u16(status).unwrap(),
        headers: &h,
        body: body.as_bytes(),
    };
    classify_response(provider, &view, now.wall)
}

/// The job machine driven synchronously over the in-memory store: each
/// request the machine hands out is answered by [`Shared`] at once, the
/// way an async driver awaits [`Store`](ratewise_core::admit::Store).
pub trait DriveSync {
    /// `next`, with a `Step::Admit` answered by the store.
    fn step(&mut self, s: &Shared, p: &Policy, now: Now) -> Step;
    /// `answered`, its update applied.
    fn answer(
        &mut self,
        s: &Shared,
        p: &Policy,
        c: &Classification,
        usage: Option<&Usage>,
        rng: &mut fastrand::Rng,
        now: Now,
    ) -> Decision;
    /// `failed`, its update applied.
    fn fail(
        &mut self,
        s: &Shared,
        p: &Policy,
        c: &Classification,
        maybe_sent: bool,
        rng: &mut fastrand::Rng,
        now: Now,
    ) -> Decision;
    /// `body_end`, its update applied.
    fn end_body(&mut self, s: &Shared, usage: Option<&Usage>, now: Now);
    /// `cancel`, its update applied.
    fn drop_job(&mut self, s: &Shared, now: Now);
}

impl DriveSync for Job {
    fn step(&mut self, s: &Shared, p: &Policy, now: Now) -> Step {
        match self.next(now) {
            Step::Admit(req) => self.admission(s.admit(&req, now), p, now),
            other => other,
        }
    }
    fn answer(
        &mut self,
        s: &Shared,
        p: &Policy,
        c: &Classification,
        usage: Option<&Usage>,
        rng: &mut fastrand::Rng,
        now: Now,
    ) -> Decision {
        let u = self.answered(p, c, usage, rng, now);
        self.applied(s.apply(u, now), now)
    }
    fn fail(
        &mut self,
        s: &Shared,
        p: &Policy,
        c: &Classification,
        maybe_sent: bool,
        rng: &mut fastrand::Rng,
        now: Now,
    ) -> Decision {
        let u = self.failed(p, c, maybe_sent, rng, now);
        self.applied(s.apply(u, now), now)
    }
    fn end_body(&mut self, s: &Shared, usage: Option<&Usage>, now: Now) {
        let end = ratewise_core::job::BodyEnd::Complete {
            usage: usage.copied(),
        };
        if let Some(u) = self.body_end(end) {
            s.apply(u, now);
        }
    }
    fn drop_job(&mut self, s: &Shared, now: Now) {
        if let Some(u) = self.cancel() {
            s.apply(u, now);
        }
    }
}
