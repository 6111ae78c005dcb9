//! Load shedding counts the jobs ahead: with `max_waiting` jobs already
//! queued for a scope, a new arrival ends at once with `defer` and nothing
//! sent; the queued jobs are all served; without the bound nobody is shed.

mod common;

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::{BodyExt, Full};
use ratewise_core::admit::Limits;
use ratewise_core::{ActionKind, Provider};
use ratewise_tower::RetryLayer;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tower::{service_fn, Layer, ServiceExt};

const OK: &str = r#"{"type":"message","content":[],"usage":{"input_tokens":3,"output_tokens":4}}"#;

async fn run(max_waiting: Option<usize>) -> (u32, Vec<Option<ActionKind>>) {
    run_jobs(max_waiting, None).await
}

async fn run_with_deadline(max_waiting: Option<usize>) -> (u32, Vec<Option<ActionKind>>) {
    run_jobs(max_waiting, Some(Duration::from_secs(30))).await
}

async fn run_jobs(
    max_waiting: Option<usize>,
    deadline: Option<Duration>,
) -> (u32, Vec<Option<ActionKind>>) {
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
    // 60 RPM at full rate from the start: one send a second after the
    // first, so arrivals queue.
    // Load shedding bounds only jobs with no deadline (a job whose caller
    // waits is bounded by its deadline instead).
    let mut policy = common::fast_policy();
    policy.default_deadline = deadline;
    let mut b = RetryLayer::builder()
        .provider(Provider::Anthropic)
        .policy(policy)
        .seed(4);
    let mut admission = ratewise_core::admit::Config::default();
    admission.limits = Limits {
        requests: Some(60),
        ..Limits::NONE
    };
    admission.ramp = {
        let mut ramp = ratewise_core::admit::RampConfig::default();
        ramp.start = 1000;
        ramp
    };
    b = b.admission(admission);
    if let Some(n) = max_waiting {
        b = b.max_waiting(n);
    }
    let svc = b.build().unwrap().layer(provider);
    let mut tasks = Vec::new();
    for i in 0..8u64 {
        let svc = svc.clone();
        tasks.push(tokio::spawn(async move {
            // Arrivals 10 ms apart, in order.
            tokio::time::sleep(Duration::from_millis(10 * i)).await;
            let req = common::request_to("http://provider.invalid", &format!("j{i}"), false);
            match svc.oneshot(req).await {
                Ok(resp) => {
                    resp.into_body().collect().await.unwrap();
                    None
                }
                Err(e) => Some(e.decision().unwrap().action.kind()),
            }
        }));
    }
    let mut ends = Vec::new();
    for t in tasks {
        ends.push(t.await.unwrap());
    }
    (calls.load(Ordering::SeqCst), ends)
}

#[tokio::test(start_paused = true)]
async fn arrivals_behind_max_waiting_jobs_are_deferred_at_once() {
    let (sent, ends) = run(Some(3)).await;
    // The first is sent at once; three queue; the other four are shed.
    let shed: Vec<usize> = ends
        .iter()
        .enumerate()
        .filter(|(_, e)| **e == Some(ActionKind::Defer))
        .map(|(i, _)| i)
        .collect();
    assert_eq!(shed, vec![4, 5, 6, 7], "{ends:?}");
    assert_eq!(sent, 4, "shed jobs send nothing");
    assert!(ends[..4].iter().all(Option::is_none), "{ends:?}");
}

#[tokio::test(start_paused = true)]
async fn without_a_bound_every_job_waits_its_turn() {
    let (sent, ends) = run(None).await;
    assert_eq!(sent, 8);
    assert!(ends.iter().all(Option::is_none), "{ends:?}");
}

#[tokio::test(start_paused = true)]
async fn jobs_whose_callers_wait_are_not_shed_but_wait_their_turn() {
    // Same arrivals with a 30 s deadline each and max_waiting 3: nobody is
    // turned away, every job is sent in its turn (one a second at 60 RPM).
    let (sent, ends) = run_with_deadline(Some(3)).await;
    assert_eq!(sent, 8);
    assert!(ends.iter().all(Option::is_none), "{ends:?}");
}
