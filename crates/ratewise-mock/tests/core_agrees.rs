//! The mock's answers read back through ratewise-core's own parsers: every
//! error body classifies to the cause the mock meant, every header parses.

mod common;

use common::answer;
use http::{HeaderMap, HeaderName, HeaderValue};
use ratewise_core::classify::codes::cause_of_error;
use ratewise_core::parse::body::parse_error_body;
use ratewise_core::parse::ratelimit::RateLimitSnapshot;
use ratewise_core::parse::request_id::request_id_from_headers;
use ratewise_core::parse::retry_after::parse_retry_after;
use ratewise_core::{Cause, Dimension, Provider};
use ratewise_mock::model::Outcome;
use ratewise_mock::render::{render_answer, stream_error_frame, RenderCtx, Rendered};
use ratewise_mock::{Fault, TimeScale};
use std::time::{Duration, SystemTime};

fn ctx(p: Provider) -> RenderCtx {
    let mut c = RenderCtx::new(p, "m", 3, 9, SystemTime::now());
    c.scale = TimeScale::new(6.0);
    c
}

fn headers(r: &Rendered) -> HeaderMap {
    let mut h = HeaderMap::new();
    for (n, v) in &r.headers {
        h.append(
            HeaderName::from_static(n),
            HeaderValue::from_str(v).unwrap(),
        );
    }
    h
}

#[test]
fn error_bodies_classify_as_intended() {
    let rl = Outcome::RateLimited {
        dimension: Dimension::Tokens,
        retry_after: Duration::from_secs(3),
        limit: 100,
        used: 90,
        requested: 20,
    };
    let cases: Vec<(Provider, Outcome, Cause)> = vec![
        (Provider::Anthropic, rl.clone(), Cause::RateLimited),
        (Provider::Openai, rl, Cause::RateLimited),
        (
            Provider::Openai,
            Outcome::SlowDown {
                retry_after: Duration::from_secs(2),
            },
            Cause::AccelerationLimited,
        ),
        (Provider::Anthropic, Outcome::SpendCap, Cause::SpendCap),
        (Provider::Openai, Outcome::SpendCap, Cause::SpendCap),
        (Provider::Anthropic, Outcome::Billing, Cause::Billing),
        (
            Provider::Anthropic,
            Outcome::Fault(Fault::Overloaded),
            Cause::Overloaded,
        ),
        (
            Provider::Openai,
            Outcome::Fault(Fault::Overloaded),
            Cause::Overloaded,
        ),
        (
            Provider::Anthropic,
            Outcome::Fault(Fault::Status {
                status: 500,
                html: false,
            }),
            Cause::ServerError,
        ),
        (
            Provider::Openai,
            Outcome::Fault(Fault::Status {
                status: 500,
                html: false,
            }),
            Cause::ServerError,
        ),
        (
            Provider::Anthropic,
            Outcome::Fault(Fault::Status {
                status: 408,
                html: false,
            }),
            Cause::Timeout,
        ),
        (
            Provider::Openai,
            Outcome::Fault(Fault::Status {
                status: 408,
                html: false,
            }),
            Cause::Timeout,
        ),
        (
            Provider::Anthropic,
            Outcome::TooManyKeys,
            Cause::Authentication,
        ),
    ];
    for (p, outcome, cause) in cases {
        let c = ctx(p);
        let r = render_answer(&c, &answer(outcome.clone()));
        let err = parse_error_body(&r.body).unwrap_or_else(|e| panic!("{outcome:?}: {e:?}"));
        assert_eq!(
            cause_of_error(p, err.fields()),
            Some(cause),
            "{p:?} {outcome:?}"
        );
        let h = headers(&r);
        assert_eq!(
            request_id_from_headers(&h).as_deref(),
            Some(c.request_id.as_str())
        );
        if p == Provider::Anthropic {
            assert_eq!(err.request_id.as_deref(), Some(c.request_id.as_str()));
        }
        if let Some(ra) = h.get("retry-after") {
            let d = parse_retry_after(ra.as_bytes(), SystemTime::now()).expect("valid retry-after");
            assert!(
                d > Duration::ZERO && d <= Duration::from_secs(1),
                "scaled to real time: {d:?}"
            );
        }
        let snap = RateLimitSnapshot::from_headers(&h, p);
        assert!(snap.rejected.is_empty(), "{:?}", snap.rejected);
    }
}

#[test]
fn rate_limit_headers_parse_in_both_families() {
    for p in [Provider::Anthropic, Provider::Openai] {
        let r = render_answer(&ctx(p), &answer(Outcome::SpendCap));
        assert!(RateLimitSnapshot::from_headers(&headers(&r), p)
            .rejected
            .is_empty());
        let ok = Outcome::RateLimited {
            dimension: Dimension::Requests,
            retry_after: Duration::from_secs(1),
            limit: 100,
            used: 100,
            requested: 1,
        };
        let r = render_answer(&ctx(p), &answer(ok));
        let snap = RateLimitSnapshot::from_headers(&headers(&r), p);
        assert!(snap.rejected.is_empty(), "{:?}", snap.rejected);
        assert_eq!(snap.requests.limit, Some(100));
        assert_eq!(snap.requests.remaining, Some(0));
        assert!(snap.requests.reset.is_some());
        assert_eq!(snap.exhausted().next(), Some(Dimension::Requests));
    }
}

#[test]
fn stream_error_frames_classify() {
    for (p, cause) in [
        (Provider::Anthropic, Cause::Overloaded),
        (Provider::Openai, Cause::ServerError),
    ] {
        let frame = stream_error_frame(&ctx(p));
        let data = frame
            .lines()
            .find_map(|l| l.strip_prefix("data: "))
            .unwrap();
        let err = parse_error_body(data.as_bytes()).unwrap();
        assert_eq!(cause_of_error(p, err.fields()), Some(cause));
    }
}
