//! The silent provider (`MockConfig::silent`, issue #35): no rate-limit
//! header in any answer, the 429's wait in `retry-after` (`retry_after`) or
//! only in the message (`message`), and buckets that admit and refuse
//! exactly what the provider with headers does. Pure renders read back
//! through ratewise-core's classifier, then the server over loopback.

mod common;
use common::*;
use http::{HeaderMap, HeaderName, HeaderValue, StatusCode};
use ratewise_core::classify::{classify_response, ResponseView};
use ratewise_core::parse::message::try_again_in;
use ratewise_core::parse::retry_after::{parse_retry_after, HintSource};
use ratewise_core::{Cause, Dimension, Provider};
use ratewise_mock::model::{BucketKey, Grant, Outcome};
use ratewise_mock::render::{render_answer, stream_frames, stream_headers, RenderCtx, Rendered};
use ratewise_mock::{
    AccelerationConfig, Limits, MockConfig, MockServer, OutputRange, Silent, INPUT_TOKENS_HEADER,
};
use std::time::{Duration, SystemTime};

const PROVIDERS: [Provider; 2] = [Provider::Anthropic, Provider::Openai];
const SILENT: [Silent; 2] = [Silent::RetryAfter, Silent::Message];

/// A header that states a limit, a level or a reset: either provider's
/// family (`anthropic-ratelimit-*`, `x-ratelimit-*`) or any other
/// `*-limit` / `*-remaining` / `*-reset` a provider might invent.
fn is_ratelimit_header(name: &str) -> bool {
    let n = name.to_ascii_lowercase();
    ["ratelimit", "rate-limit", "limit", "remaining", "reset"]
        .iter()
        .any(|w| n.contains(w))
}

fn ratelimit_names<'a>(names: impl Iterator<Item = &'a str>) -> Vec<String> {
    names
        .filter(|n| is_ratelimit_header(n))
        .map(str::to_owned)
        .collect()
}

fn ctx(p: Provider, silent: Silent) -> RenderCtx {
    let mut c = RenderCtx::new(
        p,
        "m",
        3,
        9,
        SystemTime::UNIX_EPOCH + Duration::from_secs(1),
    );
    c.silent = silent;
    c
}

fn rate_limited() -> Outcome {
    Outcome::RateLimited {
        dimension: Dimension::InputTokens,
        retry_after: Duration::from_secs(2),
        limit: 100,
        used: 100,
        requested: 20,
    }
}

fn slow_down() -> Outcome {
    Outcome::SlowDown {
        retry_after: Duration::from_secs(3),
    }
}

fn success(p: Provider) -> Outcome {
    Outcome::Success(Grant {
        bucket: BucketKey {
            provider: p,
            key: "k".into(),
            class: "m".into(),
        },
        model: "m".into(),
        input_tokens: 7,
        reserved_output: 100,
        output_tokens: 9,
    })
}

fn header_map(headers: &[(&'static str, String)]) -> HeaderMap {
    let mut h = HeaderMap::new();
    for (n, v) in headers {
        h.append(
            HeaderName::from_static(n),
            HeaderValue::from_str(v).unwrap(),
        );
    }
    h
}

fn message(r: &Rendered) -> String {
    let v: serde_json::Value = serde_json::from_slice(&r.body).unwrap();
    v["error"]["message"].as_str().unwrap().to_owned()
}

#[test]
fn silent_renders_no_ratelimit_header_on_any_answer() {
    for p in PROVIDERS {
        // The headers the provider states when it is not silent: the
        // predicate is not vacuous.
        let loud = render_answer(&ctx(p, Silent::Off), &answer(rate_limited()));
        assert_eq!(
            ratelimit_names(loud.headers.iter().map(|(n, _)| *n)).len(),
            12,
            "{p:?}: three headers per dimension"
        );
        for silent in SILENT {
            let c = ctx(p, silent);
            for outcome in [
                success(p),
                rate_limited(),
                slow_down(),
                Outcome::SpendCap,
                Outcome::Billing,
            ] {
                let r = render_answer(&c, &answer(outcome.clone()));
                let names = ratelimit_names(r.headers.iter().map(|(n, _)| *n));
                assert!(names.is_empty(), "{p:?} {silent:?} {outcome:?}: {names:?}");
                // Still the provider's request id.
                let id = if p == Provider::Openai {
                    "x-request-id"
                } else {
                    "request-id"
                };
                assert_eq!(r.header(id), Some(c.request_id.as_str()));
            }
            let h = stream_headers(&c, &answer(success(p)).windows);
            let names = ratelimit_names(h.iter().map(|(n, _)| *n));
            assert!(names.is_empty(), "{p:?} {silent:?} stream: {names:?}");
            assert!(h
                .iter()
                .any(|(n, v)| *n == "content-type" && v.starts_with("text/event-stream")));
        }
    }
}

#[test]
fn silent_leaves_bodies_and_frames_as_they_were() {
    for p in PROVIDERS {
        let loud = ctx(p, Silent::Off);
        for silent in SILENT {
            let quiet = ctx(p, silent);
            // Successes: the same body (usage, ids, text) and the same frames.
            let a = render_answer(&loud, &answer(success(p)));
            let b = render_answer(&quiet, &answer(success(p)));
            assert_eq!((a.status, &a.body), (b.status, &b.body), "{p:?} {silent:?}");
            assert_eq!(
                stream_frames(&loud, 7, 9, 100),
                stream_frames(&quiet, 7, 9, 100)
            );
            // Money answers and the rest of the headers are untouched.
            let a = render_answer(&loud, &answer(Outcome::SpendCap));
            let b = render_answer(&quiet, &answer(Outcome::SpendCap));
            assert_eq!(a, b, "{p:?} {silent:?}: no rate-limit header to drop");
            let a = render_answer(&loud, &answer(rate_limited()));
            let b = render_answer(&quiet, &answer(rate_limited()));
            assert_eq!(a.status, b.status);
            assert_eq!(a.header("x-should-retry"), b.header("x-should-retry"));
        }
    }
}

#[test]
fn retry_after_variant_keeps_retry_after_and_the_usual_body() {
    for p in PROVIDERS {
        for outcome in [rate_limited(), slow_down()] {
            let loud = render_answer(&ctx(p, Silent::Off), &answer(outcome.clone()));
            let r = render_answer(&ctx(p, Silent::RetryAfter), &answer(outcome.clone()));
            assert_eq!(r.status, 429);
            // The same wait as with headers, whole seconds at real time.
            let want = if matches!(outcome, Outcome::SlowDown { .. }) {
                "3"
            } else {
                "2"
            };
            assert_eq!(r.header("retry-after"), Some(want), "{p:?} {outcome:?}");
            assert_eq!(r.body, loud.body, "{p:?} {outcome:?}: the normal body");
            // What a client reads: a rate limit with a retry-after wait and
            // no rate-limit window at all.
            let h = header_map(&r.headers);
            let c = classify_response(
                p,
                &ResponseView {
                    status: StatusCode::TOO_MANY_REQUESTS,
                    headers: &h,
                    body: &r.body,
                },
                SystemTime::UNIX_EPOCH,
            );
            assert!(
                matches!(c.cause, Cause::RateLimited | Cause::AccelerationLimited),
                "{p:?} {outcome:?}: {:?}",
                c.cause
            );
            let hint = c.hints.wait.expect("a wait hint");
            assert_eq!(hint.source, HintSource::RetryAfter, "{p:?} {outcome:?}");
            assert_eq!(hint.wait.as_secs().to_string(), want);
            assert!(c.hints.ratelimit.requests.is_empty());
            assert!(c.hints.ratelimit.input_tokens.is_empty());
            assert!(c.hints.ratelimit.output_tokens.is_empty());
            assert!(c.hints.ratelimit.tokens.is_empty());
        }
        // Anthropic writes no wait into its message: retry-after is all.
        if p == Provider::Anthropic {
            let r = render_answer(&ctx(p, Silent::RetryAfter), &answer(rate_limited()));
            assert_eq!(try_again_in(&message(&r)), None);
        }
    }
}

#[test]
fn message_variant_says_the_wait_only_in_the_message() {
    for p in PROVIDERS {
        for (outcome, secs) in [(rate_limited(), 2), (slow_down(), 3)] {
            let r = render_answer(&ctx(p, Silent::Message), &answer(outcome.clone()));
            assert_eq!(r.status, 429);
            assert_eq!(r.header("retry-after"), None, "{p:?} {outcome:?}");
            assert!(!r.headers.iter().any(|(n, _)| n.starts_with("retry-after")));
            let msg = message(&r);
            assert!(
                msg.contains(&format!("Please try again in {secs}s.")),
                "{p:?}: {msg}"
            );
            assert_eq!(
                try_again_in(&msg),
                Some(Ok(Duration::from_secs(secs))),
                "{msg}"
            );
            // ratewise-core reads it as the message's hint, and still
            // finds the dimension the message names.
            let h = header_map(&r.headers);
            let c = classify_response(
                p,
                &ResponseView {
                    status: StatusCode::TOO_MANY_REQUESTS,
                    headers: &h,
                    body: &r.body,
                },
                SystemTime::UNIX_EPOCH,
            );
            let hint = c.hints.wait.expect("a wait hint");
            assert_eq!(hint.source, HintSource::Message, "{p:?} {outcome:?}");
            assert_eq!(hint.wait, Duration::from_secs(secs));
            if let Outcome::RateLimited { .. } = outcome {
                assert_eq!(c.cause, Cause::RateLimited);
                let want = if p == Provider::Openai {
                    // The core's OpenAI profile reads "tokens per min" as
                    // the combined bucket.
                    Dimension::Tokens
                } else {
                    Dimension::InputTokens
                };
                assert_eq!(c.dimension, Some(want), "{p:?}: {msg}");
            } else {
                assert_eq!(c.cause, Cause::AccelerationLimited);
            }
        }
    }
    // Scaled time: the message says the real wait, to the millisecond.
    let mut c = ctx(Provider::Anthropic, Silent::Message);
    c.scale = ratewise_mock::TimeScale::new(6.0);
    let r = render_answer(&c, &answer(rate_limited()));
    assert_eq!(
        try_again_in(&message(&r)),
        Some(Ok(Duration::from_millis(200)))
    );
}

// --- over loopback ---------------------------------------------------

/// One request of the sequence: input tokens (fixed by the test header)
/// and whether it streams. Every request asks `max_tokens` 16 and gets 16
/// output tokens, so settling changes no bucket and the order in which a
/// stream settles cannot change what follows.
type Send = (u64, bool);

const MAX_TOKENS: u64 = 16;

/// Buckets holding ten minutes of refill at 60 input tokens (or combined
/// tokens) and 1 request per minute: 600 tokens and 10 requests that come
/// back at 1 token a second and a request a minute. Every refusal below
/// needs at least half a minute of refill to turn into a success, so a slow
/// machine does not change the sequence.
fn config(p: Provider, silent: Silent) -> MockConfig {
    let limits = match p {
        Provider::Openai => Limits {
            requests_per_minute: Some(1),
            tokens_per_minute: Some(60),
            ..Limits::default()
        },
        _ => Limits {
            requests_per_minute: Some(1),
            input_tokens_per_minute: Some(60),
            ..Limits::default()
        },
    };
    MockConfig {
        anthropic_limits: limits,
        openai_limits: limits,
        capacity_seconds: 600.0,
        output_tokens: OutputRange {
            min: MAX_TOKENS,
            max: MAX_TOKENS,
        },
        silent,
        ..MockConfig::default()
    }
}

/// The sequence and the statuses a provider with headers answers it with.
fn sequence(p: Provider) -> (Vec<Send>, Vec<u16>) {
    match p {
        // Charged: input tokens from 600, and a request from 10.
        Provider::Anthropic => (
            vec![
                (250, false), // 350 tokens left
                (250, true),  // 100
                (400, false), // refused: 300 short
                (50, true),   // 50
                (40, false),  // 10
                (300, true),  // refused: 290 short
                (1, false),   // requests: 5 of 10 taken
                (1, true),
                (1, false),
                (1, false),
                (1, true),
                (1, false), // 10 of 10
                (1, false), // refused: no request left (a minute short)
                (1, true),  // refused
            ],
            vec![
                200, 200, 429, 200, 200, 429, 200, 200, 200, 200, 200, 200, 429, 429,
            ],
        ),
        // Charged: input + max_tokens (16) from 600 combined tokens.
        _ => (
            vec![
                (250, false), // 334 left
                (250, true),  // 68
                (400, false), // refused: 348 short
                (20, true),   // 32
                (60, false),  // refused: 44 short
                (10, true),   // 6
                (30, false),  // refused: 40 short
            ],
            vec![200, 200, 429, 200, 429, 200, 429],
        ),
    }
}

/// What one run saw: per request, the status, the record's cause and
/// dimension; and every rate-limit header name met on the way.
#[derive(Debug, PartialEq)]
struct Run {
    seen: Vec<(u16, Cause, Option<Dimension>)>,
    ratelimit_headers: Vec<String>,
}

async fn run(p: Provider, silent: Silent) -> Run {
    let server = MockServer::start(config(p, silent)).await.unwrap();
    let (sends, _) = sequence(p);
    let mut ratelimit_headers = Vec::new();
    let mut statuses = Vec::new();
    for (input, stream) in sends {
        let (path, key, body) = match p {
            Provider::Openai => (
                "/v1/chat/completions",
                "sk-openai-test",
                openai_body("hi", MAX_TOKENS, stream),
            ),
            _ => (
                "/v1/messages",
                "sk-ant-test",
                anthropic_body("hi", MAX_TOKENS, stream),
            ),
        };
        let n = input.to_string();
        let r = post(&server, path, key, &body, &[(INPUT_TOKENS_HEADER, &n)]).await;
        ratelimit_headers.extend(ratelimit_names(r.headers.keys().map(|n| n.as_str())));
        statuses.push(r.status);
        match r.status {
            200 if stream => {
                // The stream is whole: usage at the end as always.
                let text = r.text();
                let usage = if p == Provider::Openai {
                    "\"completion_tokens\":16"
                } else {
                    "\"output_tokens\":16"
                };
                assert!(text.contains(usage), "{p:?} {silent:?}: {text}");
            }
            200 => {
                let v = r.json();
                let out = if p == Provider::Openai {
                    &v["usage"]["completion_tokens"]
                } else {
                    &v["usage"]["output_tokens"]
                };
                assert_eq!(out, MAX_TOKENS, "{p:?} {silent:?}");
            }
            429 => {
                let msg = r.json()["error"]["message"].as_str().unwrap().to_owned();
                let hinted = try_again_in(&msg);
                match silent {
                    Silent::Off | Silent::RetryAfter => {
                        let ra = r.header("retry-after").expect("retry-after on a 429");
                        let wait = parse_retry_after(ra.as_bytes(), SystemTime::now()).unwrap();
                        assert!(wait >= Duration::from_secs(1), "{ra}");
                        assert_eq!(
                            hinted.is_some(),
                            p == Provider::Openai,
                            "OpenAI says the wait in its message too: {msg}"
                        );
                    }
                    Silent::Message => {
                        assert_eq!(r.header("retry-after"), None);
                        let wait = hinted.expect("a hint").expect("parsable");
                        assert!(wait >= Duration::from_secs(1), "{msg}");
                    }
                }
            }
            s => panic!("{p:?} {silent:?}: unexpected {s}"),
        }
    }
    let seen = server
        .records()
        .iter()
        .zip(&statuses)
        .map(|(rec, status)| {
            assert_eq!(rec.status, Some(*status));
            (*status, rec.cause, rec.dimension)
        })
        .collect();
    server.shutdown().await;
    Run {
        seen,
        ratelimit_headers,
    }
}

#[tokio::test]
async fn silent_buckets_admit_and_refuse_what_the_loud_ones_do() {
    for p in PROVIDERS {
        let loud = run(p, Silent::Off).await;
        let (_, want) = sequence(p);
        let statuses: Vec<u16> = loud.seen.iter().map(|s| s.0).collect();
        assert_eq!(statuses, want, "{p:?}: the sequence as designed");
        assert!(
            !loud.ratelimit_headers.is_empty(),
            "{p:?}: with headers, they are there"
        );
        for silent in SILENT {
            let quiet = run(p, silent).await;
            assert_eq!(quiet.seen, loud.seen, "{p:?} {silent:?}: same decisions");
            assert_eq!(
                quiet.ratelimit_headers,
                Vec::<String>::new(),
                "{p:?} {silent:?}"
            );
        }
    }
}

#[tokio::test]
async fn silent_acceleration_limit_over_loopback() {
    // A ramp of one request per hour-long window: the second is refused
    // however slow the machine.
    for p in PROVIDERS {
        for silent in [Silent::Off, Silent::RetryAfter, Silent::Message] {
            let cfg = MockConfig {
                acceleration: Some(AccelerationConfig {
                    idle_secs: 3600.0,
                    window_secs: 3600.0,
                    max_requests: 1,
                }),
                silent,
                ..MockConfig::default()
            };
            let server = MockServer::start(cfg).await.unwrap();
            let (first, second) = match p {
                Provider::Openai => {
                    let b = openai_body("hi", 16, false);
                    (openai(&server, &b).await, openai(&server, &b).await)
                }
                _ => {
                    let b = anthropic_body("hi", 16, false);
                    (anthropic(&server, &b).await, anthropic(&server, &b).await)
                }
            };
            assert_eq!(
                (first.status, second.status),
                (200, 429),
                "{p:?} {silent:?}"
            );
            let names: Vec<String> = [&first, &second]
                .iter()
                .flat_map(|r| ratelimit_names(r.headers.keys().map(|n| n.as_str())))
                .collect();
            assert_eq!(names.is_empty(), silent != Silent::Off, "{p:?} {silent:?}");
            let msg = second.json()["error"]["message"]
                .as_str()
                .unwrap()
                .to_owned();
            assert_eq!(
                second.header("retry-after").is_some(),
                silent != Silent::Message
            );
            assert_eq!(
                try_again_in(&msg).is_some(),
                silent == Silent::Message,
                "{p:?} {silent:?}: {msg}"
            );
            let rec = server.records().pop().unwrap();
            assert_eq!(rec.cause, Cause::AccelerationLimited);
            server.shutdown().await;
        }
    }
}

#[test]
fn silent_is_spelled_in_json_like_the_other_fields() {
    for (text, want) in [
        ("{}", Silent::Off),
        (r#"{"silent": "off"}"#, Silent::Off),
        (r#"{"silent": "retry_after"}"#, Silent::RetryAfter),
        (r#"{"silent": "message"}"#, Silent::Message),
    ] {
        assert_eq!(MockConfig::from_json(text).unwrap().silent, want, "{text}");
    }
    for bad in [
        r#"{"silent": true}"#,
        r#"{"silent": "retry-after"}"#,
        r#"{"silent": "headers"}"#,
    ] {
        assert!(MockConfig::from_json(bad).is_err(), "{bad}");
    }
}
