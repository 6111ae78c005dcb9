//! The layer, reading hints the mock rendered in real time, waits at least
//! the provider's required wait in provider time.

use ratewise_core::parse::retry_after::RetryHeaders;
use ratewise_core::time::parse_rfc3339;
use ratewise_mock::clock::format_retry_after;
use ratewise_mock::TimeScale;
use ratewise_real::hints::{rewrite_try_again_in, to_provider_time};
use ratewise_real::ScaledClock;
use std::time::{Duration, SystemTime};

#[tokio::test]
async fn converted_retry_after_is_never_shorter_than_the_provider_wait() {
    for spm in [0.5, 1.0, 1.5, 60.0] {
        let scale = TimeScale::new(spm);
        let clock = ScaledClock::new(scale);
        for ms in [1u64, 7, 133, 999, 1_000, 8_000, 59_999, 3_600_000] {
            let provider_wait = Duration::from_millis(ms) + Duration::from_micros(321);
            // What the mock renders: real seconds, rounded up.
            let mut h = http::HeaderMap::new();
            let rendered = format_retry_after(scale.to_real(provider_wait));
            h.insert("retry-after", rendered.parse().unwrap());
            to_provider_time(&mut h, &clock);
            let read = RetryHeaders::from_headers(&h, clock_wall(&clock))
                .best()
                .map(|(_, d)| d)
                .unwrap();
            assert!(
                read >= provider_wait,
                "spm {spm}: rendered {rendered}, read {read:?} < {provider_wait:?}"
            );
            // And not absurdly longer: rounding adds at most a real millisecond.
            assert!(read <= provider_wait + scale.to_provider(Duration::from_millis(2)));
        }
    }
}

fn clock_wall(clock: &ScaledClock) -> SystemTime {
    use ratewise_tower::Clock;
    clock.now().wall
}

#[tokio::test]
async fn reset_instants_and_durations_move_into_the_provider_frame() {
    let scale = TimeScale::new(1.0); // 60× speed
    let clock = ScaledClock::new(scale);
    let real_now = SystemTime::now();
    let mut h = http::HeaderMap::new();
    let in_real = real_now + Duration::from_millis(500);
    h.insert(
        "anthropic-ratelimit-requests-reset",
        ratewise_core::time::format_rfc3339(in_real)
            .parse()
            .unwrap(),
    );
    h.insert("x-ratelimit-reset-tokens", "250ms".parse().unwrap());
    h.insert("retry-after", "soon".parse().unwrap());
    to_provider_time(&mut h, &clock);
    // 0.5 real s = 30 provider s ahead of the provider wall clock now.
    let at = parse_rfc3339(h["anthropic-ratelimit-requests-reset"].to_str().unwrap()).unwrap();
    let ahead = at.duration_since(clock_wall(&clock)).unwrap();
    assert!(
        ahead >= Duration::from_secs(29) && ahead <= Duration::from_secs(31),
        "{ahead:?}"
    );
    assert_eq!(h["x-ratelimit-reset-tokens"], "15s");
    // Garbage stays garbage: the core rejects it as from a real provider.
    assert_eq!(h["retry-after"], "soon");
}

/// A silent mock (`"silent": "message"`) says its wait only in the 429's
/// message; brought into provider time, the core reads a wait never
/// shorter than the provider's, as with `retry-after`.
#[tokio::test]
async fn converted_message_hint_is_never_shorter_than_the_provider_wait() {
    use ratewise_core::parse::message::try_again_in;
    use ratewise_core::Provider;
    use ratewise_mock::model::{Answer, Outcome};
    use ratewise_mock::render::{render_answer, RenderCtx};
    for spm in [0.5, 1.0, 1.5, 60.0] {
        let scale = TimeScale::new(spm);
        let clock = ScaledClock::new(scale);
        for provider in [Provider::Anthropic, Provider::Openai] {
            for secs in [1u64, 7, 59, 3_600] {
                let provider_wait = Duration::from_secs(secs);
                // What the mock renders: the message, in real time.
                let mut ctx = RenderCtx::new(provider, "m", 1, 1, SystemTime::now());
                ctx.scale = scale;
                ctx.silent = ratewise_mock::Silent::Message;
                let answer = Answer {
                    nth: 1,
                    outcome: Outcome::RateLimited {
                        dimension: ratewise_core::Dimension::Requests,
                        retry_after: provider_wait,
                        limit: 10,
                        used: 10,
                        requested: 1,
                    },
                    windows: Vec::new(),
                    stall: None,
                    stream_fault: None,
                };
                let r = render_answer(&ctx, &answer);
                assert_eq!(r.header("retry-after"), None);
                let body = rewrite_try_again_in(&r.body, &clock).expect("a hint to rewrite");
                let v: serde_json::Value = serde_json::from_slice(&body).expect("still JSON");
                let msg = v["error"]["message"].as_str().unwrap();
                let read = try_again_in(msg).unwrap().unwrap();
                assert!(
                    read >= provider_wait,
                    "spm {spm} {provider:?}: {msg}: {read:?} < {provider_wait:?}"
                );
                assert!(read <= provider_wait + scale.to_provider(Duration::from_millis(2)));
            }
        }
    }
}
