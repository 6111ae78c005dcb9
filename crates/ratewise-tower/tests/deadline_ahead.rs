//! A job behind others in its scope's queue is answered at once when its
//! turn — at the pace the jobs ahead of it will go — comes after the last
//! moment its deadline allows; one whose turn comes in time is sent in it.

mod common;

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::{BodyExt, Full};
use ratewise_core::admit::Limits;
use ratewise_core::{ActionKind, GiveUpReason, Provider};
use ratewise_tower::RetryLayer;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tower::{service_fn, Layer, ServiceExt};

const OK: &str = r#"{"type":"message","content":[],"usage":{"input_tokens":10,"output_tokens":5}}"#;

#[tokio::test(start_paused = true)]
async fn a_job_whose_turn_comes_after_its_deadline_is_answered_at_once_and_never_sent() {
    let calls = Arc::new(AtomicU32::new(0));
    let c = calls.clone();
    let provider = service_fn(move |_req: Request<Full<Bytes>>| {
        c.fetch_add(1, Ordering::SeqCst);
        async move {
            tokio::time::sleep(Duration::from_millis(50)).await;
            Ok::<_, std::io::Error>(
                Response::builder()
                    .status(200)
                    .header("content-type", "application/json")
                    .body(Full::new(Bytes::from_static(OK.as_bytes())))
                    .unwrap(),
            )
        }
    });
    // 6 RPM at full rate: one send every 10 s. Every caller waits 25 s.
    let mut policy = common::fast_policy();
    policy.default_deadline = Some(Duration::from_secs(25));
    let mut admission = ratewise_core::admit::Config::default();
    admission.limits = Limits {
        requests: Some(6),
        ..Limits::NONE
    };
    admission.ramp.start = 1000;
    let svc = RetryLayer::builder()
        .provider(Provider::Anthropic)
        .policy(policy)
        .seed(4)
        .admission(admission)
        .build()
        .unwrap()
        .layer(provider);
    let start = tokio::time::Instant::now();
    let mut tasks = Vec::new();
    for i in 0..5u64 {
        let svc = svc.clone();
        tasks.push(tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(10 * i)).await;
            let req = common::request_to("http://provider.invalid", &format!("j{i}"), false);
            let out = match svc.oneshot(req).await {
                Ok(resp) => {
                    resp.into_body().collect().await.unwrap();
                    Ok(())
                }
                Err(e) => Err(e),
            };
            (out, start.elapsed())
        }));
    }
    let mut ends = Vec::new();
    for t in tasks {
        ends.push(t.await.unwrap());
    }
    // The first three go at about 0, 10 and 20 s: each in its turn.
    for (i, (out, at)) in ends.iter().take(3).enumerate() {
        assert!(out.is_ok(), "job {i}: {out:?}");
        assert!(
            *at < Duration::from_secs(10 * i as u64 + 2),
            "job {i} done at {at:?}"
        );
    }
    // The fourth's turn is at 30 s, the fifth's at 40 s: past 25 s less the
    // margin. Both are answered as they arrive, saying when they could go.
    for (i, (out, at)) in ends.iter().enumerate().skip(3) {
        let e = out.as_ref().expect_err("cannot be sent in time");
        assert_eq!(e.action(), Some(ActionKind::GiveUp), "job {i}: {e:?}");
        assert_eq!(e.give_up_reason(), Some(GiveUpReason::Deadline));
        let earliest = e.earliest().expect("when it could have gone");
        // Its text says when too, for a caller who only logs the error.
        let said = e.to_string();
        assert!(
            said.contains(&ratewise_core::time::format_rfc3339(earliest)),
            "{said}"
        );
        assert!(e.attempts().is_empty(), "nothing sent");
        assert!(
            *at < Duration::from_secs(1),
            "job {i} answered at {at:?}, not at once"
        );
    }
    assert_eq!(calls.load(Ordering::SeqCst), 3, "never sent");
}
