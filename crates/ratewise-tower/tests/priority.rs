//! Priority levels and flows through the layer (issue #49): a request's
//! [`Workload`] names its level and flow; the queue's discipline (the
//! core's `admit::fair`) decides whose turn it is. Paused tokio time: the
//! provider sees the order the discipline chose, never a wall clock's.

mod common;

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::Full;
use ratewise_tower::{JobId, RetryLayer, TokioClock, Workload, JOB_HEADER};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tower::{service_fn, Layer, ServiceExt};

const OK: &str = r#"{"type":"message","content":[],"usage":{"input_tokens":3,"output_tokens":4}}"#;

/// The job ids the provider saw, in order.
type Seen = Arc<Mutex<Vec<String>>>;

fn layer() -> RetryLayer {
    RetryLayer::builder()
        .config(common::anthropic_config())
        // One send per 100 ms.
        .store(common::paced_state(600))
        .clock(Arc::new(TokioClock::new()))
        .build()
        .unwrap()
}

fn request(job: &str, workload: Workload) -> Request<Full<Bytes>> {
    let mut req = Request::post("http://provider.invalid/v1/messages")
        .body(Full::new(Bytes::from_static(
            br#"{"model":"claude-sonnet-4-5","max_tokens":100}"#,
        )))
        .unwrap();
    req.extensions_mut().insert(JobId::new(job));
    req.extensions_mut().insert(workload);
    req
}

/// Runs `calls` (job id, workload), one arriving each millisecond, and
/// returns the order the provider saw them in.
async fn run(calls: Vec<(String, Workload)>) -> Vec<String> {
    let seen: Seen = Arc::default();
    let provider = {
        let seen = seen.clone();
        service_fn(move |req: Request<Full<Bytes>>| {
            let seen = seen.clone();
            async move {
                let job = req.headers()[JOB_HEADER].to_str().unwrap().to_owned();
                seen.lock().unwrap().push(job);
                tokio::time::sleep(Duration::from_millis(10)).await;
                Ok::<_, std::io::Error>(
                    Response::builder()
                        .status(200)
                        .header("content-type", "application/json")
                        .body(Full::new(Bytes::from_static(OK.as_bytes())))
                        .unwrap(),
                )
            }
        })
    };
    let svc = layer().layer(provider);
    let mut handles = Vec::new();
    for (job, workload) in calls {
        let call = svc.clone().oneshot(request(&job, workload));
        handles.push(tokio::spawn(async move {
            call.await.expect("the call succeeds");
        }));
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    for h in handles {
        h.await.unwrap();
    }
    let order = seen.lock().unwrap().clone();
    order
}

#[tokio::test(start_paused = true)]
async fn an_interactive_call_behind_twenty_bulk_calls_is_sent_next() {
    let mut calls: Vec<(String, Workload)> = (0..20)
        .map(|i| {
            (
                format!("bulk-{i:02}"),
                Workload::level("bulk").flow("batch"),
            )
        })
        .collect();
    calls.push(("chat".into(), Workload::level("interactive").flow("chat")));
    let order = run(calls).await;
    // bulk-00 went at once; the chat call, arriving behind 19 waiting bulk
    // calls, is the next send.
    let chat = order.iter().position(|j| j == "chat").unwrap();
    assert_eq!(chat, 1, "{order:?}");
    // The bulk calls keep their arrival order around it.
    let bulk: Vec<&String> = order.iter().filter(|j| *j != "chat").collect();
    let mut sorted = bulk.clone();
    sorted.sort();
    assert_eq!(bulk, sorted);
}

#[tokio::test(start_paused = true)]
async fn two_flows_weighted_two_to_one_are_sent_two_to_one_while_both_wait() {
    // 30 calls of each flow, interleaved as they arrive; the same size,
    // so cost and count agree: `a` (weight 2) gets two sends to `b`'s one
    // while both have calls waiting.
    let mut calls = Vec::new();
    for i in 0..30 {
        calls.push((
            format!("a-{i:02}"),
            Workload::level("bulk").flow("a").weight(2),
        ));
        calls.push((
            format!("b-{i:02}"),
            Workload::level("bulk").flow("b").weight(1),
        ));
    }
    let order = run(calls).await;
    let first: Vec<&String> = order.iter().take(30).collect();
    let a = first.iter().filter(|j| j.starts_with("a-")).count();
    println!("first 30 sends: a {a}, b {}", 30 - a);
    assert!(
        (18..=22).contains(&a),
        "a got {a} of the first 30: {order:?}"
    );
    // Within each flow, arrival order.
    for f in ["a-", "b-"] {
        let mine: Vec<&String> = order.iter().filter(|j| j.starts_with(f)).collect();
        let mut sorted = mine.clone();
        sorted.sort();
        assert_eq!(mine, sorted);
    }
}

#[tokio::test(start_paused = true)]
async fn without_a_workload_the_queue_is_first_come_first_served() {
    // Requests that name no workload share the key's flow at the default
    // level; one naming an unknown level is at the default level too.
    let mut calls: Vec<(String, Workload)> = (0..10)
        .map(|i| (format!("j-{i:02}"), Workload::default()))
        .collect();
    calls[5].1 = Workload::level("no-such-level");
    let order = run(calls).await;
    let expected: Vec<String> = (0..10).map(|i| format!("j-{i:02}")).collect();
    assert_eq!(order, expected);
}

/// Starts `calls` (job id, workload, deadline) 1 ms apart on a key paced
/// to one send every 10 s; returns each call's end (ok or its error) and
/// when it came, in the order given, and the order the provider saw.
async fn run_with_deadlines(
    calls: Vec<(String, Workload, Duration)>,
) -> (
    Vec<(Result<(), ratewise_tower::Error>, Duration)>,
    Vec<String>,
) {
    let seen: Seen = Arc::default();
    let provider = {
        let seen = seen.clone();
        service_fn(move |req: Request<Full<Bytes>>| {
            let seen = seen.clone();
            async move {
                let job = req.headers()[JOB_HEADER].to_str().unwrap().to_owned();
                seen.lock().unwrap().push(job);
                Ok::<_, std::io::Error>(
                    Response::builder()
                        .status(200)
                        .header("content-type", "application/json")
                        .body(Full::new(Bytes::from_static(OK.as_bytes())))
                        .unwrap(),
                )
            }
        })
    };
    let svc = RetryLayer::builder()
        .config(common::anthropic_config())
        .store(common::paced_state(6))
        .clock(Arc::new(TokioClock::new()))
        .build()
        .unwrap()
        .layer(provider);
    let start = tokio::time::Instant::now();
    let mut handles = Vec::new();
    for (job, workload, deadline) in calls {
        let mut req = request(&job, workload);
        req.extensions_mut()
            .insert(ratewise_tower::Deadline(deadline));
        let call = svc.clone().oneshot(req);
        handles.push(tokio::spawn(async move {
            let out = call.await.map(|_| ());
            (out, start.elapsed())
        }));
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let mut ends = Vec::new();
    for h in handles {
        ends.push(h.await.unwrap());
    }
    let order = seen.lock().unwrap().clone();
    (ends, order)
}

#[tokio::test(start_paused = true)]
async fn a_bulk_call_that_cannot_be_sent_in_time_is_answered_at_once() {
    // Six interactive calls (one sent at once, five waiting: 50 s of
    // turns) and a bulk call that must be answered within 25 s. Its
    // level's share would let it go after nine of theirs: the five all
    // go first — past its deadline, so it is answered as it arrives,
    // never sent.
    let mut calls: Vec<(String, Workload, Duration)> = (0..6)
        .map(|i| {
            (
                format!("chat-{i}"),
                Workload::level("interactive").flow("chat"),
                Duration::from_secs(600),
            )
        })
        .collect();
    calls.push((
        "bulk".into(),
        Workload::level("bulk").flow("batch"),
        Duration::from_secs(25),
    ));
    let (ends, order) = run_with_deadlines(calls).await;
    let (out, at) = &ends[6];
    let e = out.as_ref().expect_err("cannot be sent in time");
    assert_eq!(e.action(), Some(ratewise_core::ActionKind::GiveUp), "{e:?}");
    assert!(
        *at < Duration::from_secs(1),
        "answered at {at:?}, not at once"
    );
    assert!(
        !order.contains(&"bulk".to_string()),
        "never sent: {order:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_bulk_call_its_share_gets_in_time_is_not_ended_for_the_queue_ahead() {
    // Thirty interactive calls waiting (300 s of turns) and a bulk call
    // with 200 s: its minimum share sends it after at most nine of theirs,
    // so it is kept, and sent well before them all.
    let mut calls: Vec<(String, Workload, Duration)> = (0..30)
        .map(|i| {
            (
                format!("chat-{i:02}"),
                Workload::level("interactive").flow("chat"),
                Duration::from_secs(900),
            )
        })
        .collect();
    calls.push((
        "bulk".into(),
        Workload::level("bulk").flow("batch"),
        Duration::from_secs(200),
    ));
    let (ends, order) = run_with_deadlines(calls).await;
    let (out, at) = &ends[30];
    assert!(out.is_ok(), "{out:?}");
    let sent = order.iter().position(|j| j == "bulk").unwrap();
    println!("bulk sent as send {sent} of {}, at {at:?}", order.len());
    assert!(sent <= 11, "bulk sent {sent}th, at {at:?}: {order:?}");
}
